//! The upstream side of a stream runner: connecting to the sequenced WebSocket (design §3) from
//! the core's resume point, reading frames, and handing each event to the core, which says
//! whether to take it, skip a replay, or reconnect after a jump.
//!
//! It never decides ownership and never publishes; it fills the runner's pending batch.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::{FutureExt, SinkExt, StreamExt};
use lease_protocol::{event_id, upstream_path, SinkEvent, UpstreamFrame};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::{unit, BoxFut, Runner};
use crate::decide::{Backoff, EventVerdict, JUMP_PATIENCE};

/// Longest an upstream connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The upstream socket's read buffer. tungstenite's default is 128 KiB, and it zero-fills the
/// free part before every read: with hundreds of sockets of small frames that cost about 115 KiB
/// of resident memory per stream (measured: 444 KiB per stream fell to 329 KiB) and a memset per
/// read. A larger frame still arrives whole: the buffer grows to fit it, up to tungstenite's
/// frame size limit (16 MiB).
pub const UPSTREAM_READ_BUFFER: usize = 8 * 1024;
const CONNECT_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(50),
    cap: Duration::from_secs(2),
};

pub(super) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub(super) enum Upstream {
    Waiting(Instant),
    Connecting(BoxFut<Result<Box<Ws>, String>>),
    Open(Box<Ws>),
    Closed,
}

/// What the upstream side produced.
pub(super) enum UpstreamEvent {
    Connected(Result<Box<Ws>, String>),
    Frame(Option<Result<Message, String>>),
}

/// Waits on the upstream: the pending connect, or the next frame when `reading`.
pub(super) async fn upstream_event(upstream: &mut Upstream, reading: bool) -> UpstreamEvent {
    match upstream {
        Upstream::Connecting(f) => UpstreamEvent::Connected(f.await),
        Upstream::Open(ws) if reading => {
            UpstreamEvent::Frame(ws.next().await.map(|r| r.map_err(|e| e.to_string())))
        }
        _ => std::future::pending().await,
    }
}

impl Runner {
    pub(super) fn start_connect(&mut self) {
        let url = format!(
            "{}{}",
            self.shared.upstream_url,
            upstream_path(&self.id, Some(self.core.resume_from()))
        );
        tracing::debug!(stream_id = %self.id, %url, "connecting upstream");
        self.upstream = Upstream::Connecting(Box::pin(async move {
            let tls = crate::config::tls::upstream_connector(&url)?;
            let config = WebSocketConfig::default().read_buffer_size(UPSTREAM_READ_BUFFER);
            let connect = tokio_tungstenite::connect_async_tls_with_config(
                url,
                Some(config),
                false,
                Some(tls),
            );
            match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
                Ok(Ok((ws, _))) => Ok(Box::new(ws)),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no handshake within {CONNECT_TIMEOUT:?}")),
            }
        }));
    }

    /// When the liveness check next has something to do on an open socket: the next ping, or
    /// the deadline. `None` when there is no deadline or no open socket.
    pub(super) fn liveness_wake(&self) -> Option<Instant> {
        let idle = self.shared.upstream_idle;
        if idle.is_zero() || !matches!(self.upstream, Upstream::Open(_)) {
            return None;
        }
        let ping = self.last_heard.max(self.last_ping) + idle / 3;
        Some(ping.min(self.last_heard + idle))
    }

    /// The liveness deadline (issue #17: a half-open socket, dropped by a NAT or a vanished host
    /// without FIN or RST, otherwise stalls its stream for ever under a healthy lease): after a
    /// third of `UPSTREAM_IDLE_MS` in silence, ping; after all of it, drop the socket and
    /// reconnect from the last sequence taken + 1. A socket not read because the batch buffer
    /// is full (a slow sink) is not silent, only unread.
    pub(super) fn check_liveness(&mut self, now: Instant) {
        let idle = self.shared.upstream_idle;
        if idle.is_zero() {
            return;
        }
        if self.pending.len() >= self.buffer_cap() {
            self.last_heard = now;
            return;
        }
        let Upstream::Open(ws) = &mut self.upstream else {
            return;
        };
        if now >= self.last_heard + idle {
            let silent_ms = now.duration_since(self.last_heard).as_millis() as u64;
            self.shared.metrics.upstream_idle_timeouts.inc();
            tracing::warn!(stream_id = %self.id, silent_ms, resume_from = self.core.resume_from(), "upstream silent past its liveness deadline (UPSTREAM_IDLE_MS: no event, ping or pong); reconnecting");
            self.reconnect_later();
            return;
        }
        if now >= self.last_heard.max(self.last_ping) + idle / 3 {
            self.last_ping = now;
            // Queued without waiting: a socket whose send buffer is full is not answering
            // anyway, and tungstenite flushes the queue on the next read.
            let _ = ws.send(Message::Ping(Default::default())).now_or_never();
        }
    }

    pub(super) fn on_connected(&mut self, conn: Result<Box<Ws>, String>) {
        match conn {
            Ok(ws) => {
                if let Some(p) = self.phases.as_mut() {
                    p.connected.get_or_insert_with(Instant::now);
                }
                let now = Instant::now();
                self.last_heard = now;
                self.last_ping = now;
                self.upstream = Upstream::Open(ws);
            }
            Err(e) => {
                tracing::warn!(stream_id = %self.id, error = %e, "upstream connect failed");
                self.reconnect_later();
            }
        }
    }

    fn reconnect_later(&mut self) {
        let delay = CONNECT_BACKOFF.delay(self.connect_attempt, unit());
        self.connect_attempt = self.connect_attempt.saturating_add(1);
        self.shared.metrics.upstream_reconnects.inc();
        self.upstream = Upstream::Waiting(Instant::now() + delay);
    }

    /// Handles one frame, then every frame already buffered on the socket (up to the cap).
    pub(super) fn on_frames(&mut self, first: Option<Result<Message, String>>) {
        let cap = self.buffer_cap();
        let mut next = Some(first);
        let mut took_any = false;
        self.last_heard = Instant::now();
        while let Some(frame) = next.take() {
            match frame {
                Some(Ok(msg)) => took_any |= self.on_message(msg),
                Some(Err(e)) => {
                    tracing::warn!(stream_id = %self.id, error = %e, resume_from = self.core.resume_from(), "upstream socket failed; reconnecting");
                    self.reconnect_later();
                }
                None => {
                    tracing::info!(stream_id = %self.id, resume_from = self.core.resume_from(), "upstream closed the socket; reconnecting");
                    self.reconnect_later();
                }
            }
            if self.pending.len() >= cap {
                break;
            }
            if let Upstream::Open(ws) = &mut self.upstream {
                next = ws
                    .next()
                    .now_or_never()
                    .map(|f| f.map(|r| r.map_err(|e| e.to_string())));
            }
        }
        if took_any {
            if let Some(p) = self.phases.as_mut() {
                p.first_event.get_or_insert_with(Instant::now);
            }
            self.connect_attempt = 0;
            self.stats.taken.store(self.core.taken(), Ordering::Relaxed);
            self.stats
                .last_event_ms
                .store(lease_table::now_ms(), Ordering::Relaxed);
        }
    }

    /// Returns true when the message carried an event.
    fn on_message(&mut self, msg: Message) -> bool {
        let text = match msg {
            Message::Text(text) => text,
            Message::Binary(bytes) => {
                self.malformed(&String::from_utf8_lossy(&bytes), "binary frame");
                return false;
            }
            Message::Close(_) => {
                tracing::info!(stream_id = %self.id, "upstream sent close; reconnecting");
                self.reconnect_later();
                return false;
            }
            _ => return false,
        };
        match UpstreamFrame::parse(&text) {
            Ok(UpstreamFrame::Event(event)) => {
                if event.stream_id != self.id {
                    self.malformed(&text, "event for another stream");
                    return false;
                }
                match self.core.on_event(event.seq, Instant::now()) {
                    EventVerdict::Take => {}
                    EventVerdict::Replayed => {
                        self.shared.metrics.events_replayed_skipped.inc();
                        return false;
                    }
                    EventVerdict::Jump { expected } => {
                        self.shared.metrics.gap("sequence_jump", 0);
                        tracing::warn!(stream_id = %self.id, expected, got = event.seq, "sequence jump without a gap notice; reconnecting with backoff to ask again (accepted as loss after JUMP_PATIENCE)");
                        self.reconnect_later();
                        return false;
                    }
                    EventVerdict::TakeAfterGap { missing } => {
                        self.shared.metrics.gap_events_missing.inc_by(missing);
                        tracing::error!(stream_id = %self.id, missing, resumed_at = event.seq, patience_ms = JUMP_PATIENCE.as_millis() as u64, "the upstream kept skipping these events; recorded as lost, continuing after them");
                    }
                }
                if self.pending_since.is_none() {
                    self.pending_since = Some(Instant::now());
                }
                self.pending.push(SinkEvent {
                    seq: event.seq,
                    event_id: event_id(&self.id, event.seq),
                    payload: event.payload,
                });
                true
            }
            Ok(UpstreamFrame::Gap(gap)) if gap.stream_id != self.id => {
                // It says nothing about this stream: acting on it would skip our own events.
                self.malformed(&text, "gap frame for another stream ignored");
                false
            }
            Ok(UpstreamFrame::Gap(gap)) => {
                let missing = self.core.on_gap(gap.oldest_available);
                self.shared.metrics.gap("notice", missing);
                tracing::warn!(stream_id = %self.id, requested = gap.requested, oldest_available = gap.oldest_available, missing, "upstream gap: events older than retention are gone");
                false
            }
            Err(e) => {
                self.malformed(&text, &e.to_string());
                false
            }
        }
    }

    fn malformed(&self, text: &str, why: &str) {
        self.shared.metrics.malformed_frames.inc();
        let head: String = text.chars().take(64).collect();
        tracing::warn!(stream_id = %self.id, first_bytes = %head, error = why, "malformed upstream frame skipped");
    }
}
