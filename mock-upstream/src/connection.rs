//! One subscriber connection: reads its stream's ring buffer by its own cursor and writes the
//! frames to the socket, in order, without skipping.
//!
//! A connection that cannot keep up is closed, never thinned out: when the next sequence it owes
//! the client has left retention, it is closed with [`CLOSE_SLOW_CONSUMER`] (the client reconnects
//! with `from`). Waiting on a slow socket never blocks the producer or other connections, because
//! the producer only appends to the ring. Admin drops, drop faults and shutdown close it too.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::{SinkExt, StreamExt};
use lease_protocol::{GapNotice, UpstreamFrame};
use tokio::time::{Duration, Instant};

use crate::feed::{Entry, Read, Stream};
use crate::state::Shared;

/// Close code when an admin drop or a drop fault closed the connection.
pub const CLOSE_DROPPED: u16 = 4000;
/// Close code when the client fell behind retention (its next sequence was evicted).
pub const CLOSE_SLOW_CONSUMER: u16 = 4001;
/// Close code when the server shuts down (RFC 6455 "going away").
pub const CLOSE_GOING_AWAY: u16 = 1001;

/// Most frames copied out of the ring and written per socket flush.
const BATCH: usize = 256;
/// How long a close frame may take to leave before the socket is just dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Where a new connection starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// Only events produced after the connection opened.
    Live,
    /// Replay from this sequence (1-based), then live.
    From(u64),
}

/// Why a connection ended.
enum End {
    /// The client closed or the socket failed: nothing more to send.
    ClientGone,
    /// The server closes with this code and reason.
    Close(u16, String),
}

/// Counts the connection in its stream while it lives.
struct Registered<'a> {
    stream: &'a Stream,
    shared: &'a Shared,
}

impl<'a> Registered<'a> {
    fn new(stream: &'a Stream, shared: &'a Shared) -> Self {
        stream.connections.fetch_add(1, Ordering::Relaxed);
        shared.open.send_modify(|n| *n += 1);
        Registered { stream, shared }
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.stream.connections.fetch_sub(1, Ordering::Relaxed);
        self.shared.open.send_modify(|n| *n -= 1);
    }
}

/// Serves one upgraded WebSocket until the client leaves or the server closes it.
pub(crate) async fn serve(
    socket: WebSocket,
    stream: Arc<Stream>,
    shared: Arc<Shared>,
    start: Start,
) {
    let _registered = Registered::new(&stream, &shared);
    let (mut sink, mut source) = socket.split();
    let mut head = stream.subscribe_head();
    let mut drops = stream.subscribe_drops();
    drops.borrow_and_update();
    let mut shutdown = shared.shutdown.subscribe();
    if *shutdown.borrow_and_update() {
        return;
    }

    let mut cursor = match start {
        Start::Live => *head.borrow_and_update() + 1,
        Start::From(seq) => seq,
    };
    let mut may_gap = matches!(start, Start::From(_));
    let mut batch: Vec<Entry> = Vec::with_capacity(BATCH);
    let mut next_ping = Instant::now() + shared.ping_interval;

    // Sends `frames` while watching for a drop, shutdown, the client leaving, or the ring
    // evicting `next_cursor` (the first sequence not in this send) — a slow consumer.
    macro_rules! send_watched {
        ($frames:expr, $next_cursor:expr) => {{
            let send = async {
                for frame in $frames {
                    sink.feed(frame).await?;
                }
                sink.flush().await
            };
            tokio::pin!(send);
            loop {
                tokio::select! {
                    biased;
                    res = &mut send => break match res {
                        Ok(()) => Ok(()),
                        Err(_) => Err(End::ClientGone),
                    },
                    _ = drops.changed() => break Err(dropped()),
                    _ = shutdown.changed() => break Err(going_away()),
                    msg = source.next() => if client_left(msg) { break Err(End::ClientGone) },
                    _ = head.changed() => {
                        let oldest = stream.oldest();
                        if oldest > $next_cursor {
                            break Err(slow_consumer($next_cursor, oldest));
                        }
                    }
                }
            }
        }};
    }

    let end = loop {
        head.borrow_and_update();
        batch.clear();
        match stream.read(cursor, BATCH, &mut batch) {
            Read::Behind { oldest } if may_gap => {
                may_gap = false;
                let gap = UpstreamFrame::Gap(GapNotice {
                    stream_id: stream.id.to_string(),
                    requested: cursor,
                    oldest_available: oldest,
                })
                .to_text();
                tracing::debug!(stream = %stream.id, requested = cursor, oldest, "replay gap");
                if let Err(end) = send_watched!([Message::Text(gap.into())], oldest) {
                    break end;
                }
                cursor = oldest;
            }
            Read::Behind { oldest } => break slow_consumer(cursor, oldest),
            Read::Entries(0) => {
                // Still waiting for the first event: a burst past retention before it arrives
                // is a gap for this client, not a slow consumer, so `may_gap` stays as it is.
                tokio::select! {
                    changed = head.changed() => if changed.is_err() { break going_away() },
                    _ = drops.changed() => break dropped(),
                    _ = shutdown.changed() => break going_away(),
                    msg = source.next() => if client_left(msg) { break End::ClientGone },
                    _ = tokio::time::sleep_until(next_ping) => {
                        next_ping = Instant::now() + shared.ping_interval;
                        if let Err(end) = send_watched!([Message::Ping(Default::default())], cursor) {
                            break end;
                        }
                    }
                }
            }
            Read::Entries(_) => {
                may_gap = false;
                if let Some(delay) = shared.faults.delay() {
                    // Hold each frame until `delay` after its production.
                    let now = Instant::now();
                    let ready = batch
                        .iter()
                        .take_while(|e| e.produced + delay <= now)
                        .count();
                    if ready == 0 {
                        tokio::select! {
                            _ = tokio::time::sleep_until(batch[0].produced + delay) => continue,
                            _ = drops.changed() => break dropped(),
                            _ = shutdown.changed() => break going_away(),
                        }
                    }
                    batch.truncate(ready);
                }
                let next = cursor + batch.len() as u64;
                let sent = batch.iter().filter(|e| !e.skipped).count() as u64;
                let frames = batch
                    .drain(..)
                    .filter(|e| !e.skipped)
                    .map(|e| Message::Text(e.text));
                if let Err(end) = send_watched!(frames, next) {
                    break end;
                }
                cursor = next;
                shared.feed.sent.fetch_add(sent, Ordering::Relaxed);
                next_ping = Instant::now() + shared.ping_interval;
            }
        }
    };

    if let End::Close(code, reason) = end {
        tracing::debug!(stream = %stream.id, code, %reason, "closing connection");
        let frame = CloseFrame {
            code,
            reason: Utf8Bytes::from(reason),
        };
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, sink.send(Message::Close(Some(frame)))).await;
    }
}

fn client_left(msg: Option<Result<Message, axum::Error>>) -> bool {
    matches!(msg, None | Some(Err(_)) | Some(Ok(Message::Close(_))))
}

fn dropped() -> End {
    End::Close(CLOSE_DROPPED, "dropped by the upstream".into())
}

fn going_away() -> End {
    End::Close(CLOSE_GOING_AWAY, "upstream shutting down".into())
}

fn slow_consumer(next: u64, oldest: u64) -> End {
    End::Close(
        CLOSE_SLOW_CONSUMER,
        format!("slow consumer: seq {next} left retention (oldest {oldest}); reconnect with from"),
    )
}
