//! One owned stream, from acquisition to release or loss: the upstream WebSocket, batching, the
//! fenced sink posts, and the coalesced renew + checkpoint writes.
//!
//! A single task per stream owns its [`StreamCore`] without locks. The sink post, the renewal
//! and the upstream connect run as futures polled by one `select!`, and all decisions go through
//! the core. One timer per stream, re-armed only when its next wake-up changes. This module must
//! never publish once the core says the stream is lost or past its local deadline, never send an
//! event twice within one connection's replay, and never release a lease it has lost.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use lease_protocol::{event_id, upstream_path, SinkBatch, SinkEvent, UpstreamFrame};
use lease_table::ops::Outcome;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::decide::{Backoff, EventVerdict, LostReason, StreamCore, Timing};
use crate::lease::LeaseTable;
use crate::metrics::{Metrics, StreamStats};
use crate::sink::{Sink, SinkAnswer};

/// Longest any single DynamoDB call may take (less when the lease has less time left), except
/// renewals, which may wait up to [`renew_timeout`].
pub const AWS_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// A renewal's timeout: half the renew interval, between [`AWS_CALL_TIMEOUT`] and 10 s (and
/// never past the local deadline). A timed-out write still executes at the server, so under a
/// burst a short timeout turns a slow table into a stuck one (every renewal times out and is
/// sent again); a long lease can afford to wait instead.
pub fn renew_timeout(renew_every: Duration) -> Duration {
    (renew_every / 2).clamp(AWS_CALL_TIMEOUT, Duration::from_secs(10))
}
/// Longest a sink post may take (less when the lease has less time left).
pub const SINK_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest an upstream connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The upstream socket's read buffer. tungstenite's default is 128 KiB, and it zero-fills the
/// free part before every read: with hundreds of sockets of small frames that cost about 115 KiB
/// of resident memory per stream (measured: 444 KiB per stream fell to 329 KiB) and a memset per
/// read. A larger frame still arrives whole: the buffer grows to fit it, up to tungstenite's
/// frame size limit (16 MiB).
pub const UPSTREAM_READ_BUFFER: usize = 8 * 1024;
const SINK_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(50),
    cap: Duration::from_secs(2),
};
const AWS_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(100),
    cap: Duration::from_secs(2),
};
const CONNECT_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(50),
    cap: Duration::from_secs(2),
};

/// What every stream task of a process shares.
pub struct Shared {
    pub table: LeaseTable,
    pub sink: Sink,
    pub metrics: Arc<Metrics>,
    pub owner_id: Arc<str>,
    pub upstream_url: String,
    pub timing: Timing,
    pub renew_every: Duration,
    pub batch_max_events: usize,
    pub batch_max_delay: Duration,
    pub enforce_deadline: bool,
}

/// A freshly acquired lease.
#[derive(Debug, Clone)]
pub struct Acquired {
    pub stream_id: String,
    pub fence: u64,
    /// The checkpoint the table held (0 = none).
    pub checkpoint: u64,
    /// When the acquiring request started (the local deadline counts from here).
    pub started: Instant,
    /// The same instant on the wall clock (Unix ms), for the phase log line.
    pub started_unix_ms: i64,
    /// When the acquiring request was answered.
    pub answered: Instant,
}

/// Where a fresh acquisition's time goes until its first batch is accepted, logged once per
/// acquisition as "first batch accepted" (`harness bench takeover` reads it for the phase split).
#[derive(Debug, Clone, Copy)]
struct Phases {
    started_unix_ms: i64,
    started: Instant,
    answered: Instant,
    connected: Option<Instant>,
    first_event: Option<Instant>,
}

impl Phases {
    fn ms(from: Instant, to: Option<Instant>) -> Option<u64> {
        to.map(|t| t.saturating_duration_since(from).as_millis() as u64)
    }
}

/// Instructions from the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Keep consuming.
    Run,
    /// Flush, checkpoint and release by `by`; `reason` is the metric label (`drain` | `shed` | `bid`).
    Release { by: Instant, reason: &'static str },
}

/// How a stream task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Released gracefully (final checkpoint written).
    Released,
    /// A release was asked for but could not be confirmed (lease left to expire).
    ReleaseUnconfirmed,
    /// Lost: stopped without releasing.
    Lost(LostReason),
    /// The task panicked (a bug): it stopped publishing; the lease expires.
    Panicked,
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;
type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type RenewResult = Result<Outcome<()>, crate::lease::CallError>;

enum Upstream {
    Waiting(Instant),
    Connecting(BoxFut<Result<Box<Ws>, String>>),
    Open(Box<Ws>),
    Closed,
}

struct Post {
    body: Bytes,
    through: u64,
    count: usize,
    attempt: u32,
}

struct Renewal {
    started: Instant,
    checkpoint: Option<u64>,
}

/// What the upstream side produced.
enum UpstreamEvent {
    Connected(Result<Box<Ws>, String>),
    Frame(Option<Result<Message, String>>),
}

/// Waits on the upstream: the pending connect, or the next frame when `reading`.
async fn upstream_event(upstream: &mut Upstream, reading: bool) -> UpstreamEvent {
    match upstream {
        Upstream::Connecting(f) => UpstreamEvent::Connected(f.await),
        Upstream::Open(ws) if reading => {
            UpstreamEvent::Frame(ws.next().await.map(|r| r.map_err(|e| e.to_string())))
        }
        _ => std::future::pending().await,
    }
}

fn unit() -> f64 {
    rand::random::<f64>()
}

/// Runs one stream until it is released or lost. Never panics on bad input from the network.
pub async fn run_stream(
    shared: Arc<Shared>,
    acquired: Acquired,
    control: watch::Receiver<Control>,
) -> Exit {
    let mut runner = Runner::new(shared, acquired, control);
    let exit = runner.run().await;
    runner.shared.metrics.untrack_stream(&runner.id);
    exit
}

struct Runner {
    shared: Arc<Shared>,
    id: String,
    url: Arc<str>,
    core: StreamCore,
    stats: Arc<StreamStats>,
    control: watch::Receiver<Control>,
    release: Option<(Instant, &'static str)>,
    upstream: Upstream,
    connect_attempt: u32,
    pending: Vec<SinkEvent>,
    pending_since: Option<Instant>,
    spare: Vec<SinkEvent>,
    posting: Option<(Post, BoxFut<SinkAnswer>)>,
    retry: Option<(Post, Instant)>,
    renewing: Option<(Renewal, BoxFut<RenewResult>)>,
    renew_at: Option<Instant>,
    renew_attempt: u32,
    /// Until the first accepted batch.
    phases: Option<Phases>,
}

impl Runner {
    fn new(shared: Arc<Shared>, acquired: Acquired, control: watch::Receiver<Control>) -> Self {
        let core = StreamCore::new(
            acquired.fence,
            acquired.checkpoint,
            acquired.started,
            shared.timing,
            shared.enforce_deadline,
        );
        let stats = shared.metrics.track_stream(&acquired.stream_id);
        stats.fence.store(acquired.fence, Ordering::Relaxed);
        stats.taken.store(acquired.checkpoint, Ordering::Relaxed);
        stats
            .persisted
            .store(acquired.checkpoint, Ordering::Relaxed);
        let url = shared.sink.url_for(&acquired.stream_id).into();
        let cap = shared.batch_max_events;
        // The first renewal comes at a random point of the second half of the interval, so
        // that streams acquired in one round do not renew in one burst for ever after.
        let first_renew = shared.renew_every.mul_f64(0.5 + 0.5 * unit());
        Runner {
            renew_at: Some(acquired.started + first_renew),
            shared,
            id: acquired.stream_id,
            url,
            core,
            stats,
            control,
            release: None,
            upstream: Upstream::Waiting(Instant::now()),
            connect_attempt: 0,
            pending: Vec::with_capacity(cap),
            pending_since: None,
            spare: Vec::with_capacity(cap),
            posting: None,
            retry: None,
            renewing: None,
            renew_attempt: 0,
            phases: Some(Phases {
                started_unix_ms: acquired.started_unix_ms,
                started: acquired.started,
                answered: acquired.answered,
                connected: None,
                first_event: None,
            }),
        }
    }

    /// Logs the phase split of this acquisition once its first batch is accepted.
    fn log_phases(&mut self, now: Instant, events: usize) {
        let Some(p) = self.phases.take() else {
            return;
        };
        tracing::info!(
            stream_id = %self.id,
            fence_token = self.core.fence(),
            acquire_started_unix_ms = p.started_unix_ms,
            acquire_ms = Phases::ms(p.started, Some(p.answered)),
            connect_ms = Phases::ms(p.answered, p.connected),
            first_event_ms = p.connected.and_then(|c| Phases::ms(c, p.first_event)),
            first_accept_ms = p.first_event.and_then(|f| Phases::ms(f, Some(now))),
            total_ms = Phases::ms(p.started, Some(now)),
            first_batch_events = events,
            "first batch accepted"
        );
    }

    fn buffer_cap(&self) -> usize {
        (self.shared.batch_max_events * 4).max(256)
    }

    /// The earliest instant at which [`Runner::pump`] has something to do.
    fn next_wake(&self) -> Instant {
        let mut wake = Instant::now() + Duration::from_secs(3600);
        let mut at = |t: Instant| wake = wake.min(t);
        if self.core.enforces_deadline() {
            at(self.core.deadline());
        }
        if self.renewing.is_none() {
            if let Some(t) = self.renew_at {
                at(t);
            }
        }
        if self.posting.is_none() {
            if let Some((_, t)) = &self.retry {
                at(*t);
            } else if let Some(since) = self.pending_since {
                at(since + self.shared.batch_max_delay);
            }
        }
        if let Upstream::Waiting(t) = self.upstream {
            at(t);
        }
        if let Some((by, _)) = self.release {
            at(by);
        }
        wake
    }

    async fn run(&mut self) -> Exit {
        tracing::info!(stream_id = %self.id, fence_token = self.core.fence(), from = self.core.resume_from(), "stream acquired; consuming");
        let timer = tokio::time::sleep_until(self.next_wake());
        tokio::pin!(timer);
        let mut armed = timer.deadline();
        loop {
            if let Some(exit) = self.pump(Instant::now()).await {
                return exit;
            }
            let wake = self.next_wake();
            if wake != armed {
                timer.as_mut().reset(wake);
                armed = wake;
            }
            let reading = matches!(self.upstream, Upstream::Open(_))
                && self.pending.len() < self.buffer_cap();
            tokio::select! {
                _ = &mut timer => {}
                changed = self.control.changed(), if self.release.is_none() => {
                    match changed.map(|_| *self.control.borrow()) {
                        Ok(Control::Release { by, reason }) => self.begin_release(by, reason),
                        Ok(Control::Run) => {}
                        // The supervisor is gone: behave as a drain with the lease's own time.
                        Err(_) => self.begin_release(self.core.deadline(), "drain"),
                    }
                }
                answer = maybe_post(&mut self.posting) => {
                    if let Some(exit) = self.on_sink_answer(answer) {
                        return exit;
                    }
                }
                result = maybe_renew(&mut self.renewing) => {
                    if let Some(exit) = self.on_renew_result(result) {
                        return exit;
                    }
                }
                event = upstream_event(&mut self.upstream, reading) => match event {
                    UpstreamEvent::Connected(conn) => self.on_connected(conn),
                    UpstreamEvent::Frame(frame) => self.on_frames(frame),
                },
            }
        }
    }

    fn begin_release(&mut self, by: Instant, reason: &'static str) {
        tracing::info!(stream_id = %self.id, fence_token = self.core.fence(), reason, "releasing: flushing, then final checkpoint and release");
        self.release = Some((by, reason));
        // Close the upstream: nothing new is taken while draining.
        self.upstream = Upstream::Closed;
    }

    /// Starts whatever is due at `now`; returns an exit when the stream must end.
    async fn pump(&mut self, now: Instant) -> Option<Exit> {
        if self.core.past_deadline(now) {
            return Some(self.lose(LostReason::Deadline));
        }
        if self.renewing.is_none() && self.renew_at.is_some_and(|t| t <= now) {
            if let Some(exit) = self.start_renew(now) {
                return Some(exit);
            }
        }
        if self.posting.is_none() {
            if self.retry.as_ref().is_some_and(|(_, t)| *t <= now) {
                let (post, _) = self.retry.take().expect("checked");
                if let Some(exit) = self.start_post(post, now) {
                    return Some(exit);
                }
            } else if self.retry.is_none() && !self.pending.is_empty() {
                let full = self.pending.len() >= self.shared.batch_max_events;
                // The first batch after an acquisition goes at once: it is the backlog since
                // the checkpoint, already late, and it ends the takeover.
                let due = self.phases.is_some()
                    || self
                        .pending_since
                        .is_some_and(|t| t + self.shared.batch_max_delay <= now);
                if full || due || self.release.is_some() {
                    let post = self.take_batch();
                    if let Some(exit) = self.start_post(post, now) {
                        return Some(exit);
                    }
                }
            }
        }
        if let Upstream::Waiting(t) = self.upstream {
            if t <= now && self.release.is_none() {
                self.start_connect();
            }
        }
        if let Some((by, reason)) = self.release {
            let flushed = self.pending.is_empty() && self.posting.is_none() && self.retry.is_none();
            if flushed || now >= by {
                if !flushed {
                    tracing::warn!(stream_id = %self.id, fence_token = self.core.fence(), unsent = self.pending.len(), "release deadline reached before the sink took every batch; releasing at the accepted checkpoint");
                }
                return Some(self.finish_release(by, reason).await);
            }
        }
        None
    }

    fn lose(&mut self, reason: LostReason) -> Exit {
        self.core.on_lost(reason);
        self.shared.metrics.lost(reason.as_str());
        tracing::warn!(stream_id = %self.id, fence_token = self.core.fence(), reason = reason.as_str(), accepted = self.core.accepted(), "lease lost: stopped publishing, socket closed, nothing released");
        Exit::Lost(reason)
    }

    fn start_renew(&mut self, now: Instant) -> Option<Exit> {
        let max = renew_timeout(self.shared.renew_every);
        let Some(timeout) = self.core.call_timeout(now, max) else {
            return Some(self.lose(LostReason::Deadline));
        };
        let checkpoint = self.core.checkpoint_due();
        let table = self.shared.table.clone();
        let id = self.id.clone();
        let fence = self.core.fence();
        let lease = self.shared.timing.lease;
        let fut =
            Box::pin(async move { table.renew(&id, fence, lease, checkpoint, timeout).await });
        self.renewing = Some((
            Renewal {
                started: now,
                checkpoint,
            },
            fut,
        ));
        None
    }

    fn on_renew_result(
        &mut self,
        result: Result<Outcome<()>, crate::lease::CallError>,
    ) -> Option<Exit> {
        let (renewal, _) = self.renewing.take().expect("a renewal was in flight");
        let now = Instant::now();
        match result {
            Ok(Outcome::Done(())) => {
                self.core.on_renewed(renewal.started);
                if let Some(cp) = renewal.checkpoint {
                    self.core.on_checkpoint_written(cp);
                    self.stats
                        .persisted
                        .store(self.core.persisted(), Ordering::Relaxed);
                }
                self.shared
                    .metrics
                    .renew_latency
                    .observe(now.duration_since(renewal.started).as_secs_f64());
                self.renew_attempt = 0;
                self.renew_at = Some(renewal.started + self.shared.renew_every);
                None
            }
            Ok(Outcome::Refused { current }) => {
                self.shared.metrics.renew_failed("refused");
                let holder = current.as_ref().and_then(|c| c.owner_id.clone());
                let token = current.as_ref().and_then(|c| c.fence_token);
                if self.core.enforces_deadline() {
                    tracing::warn!(stream_id = %self.id, fence_token = self.core.fence(), now_owner = ?holder, now_fence = ?token, "renew refused");
                    Some(self.lose(LostReason::RenewRefused))
                } else {
                    tracing::error!(stream_id = %self.id, fence_token = self.core.fence(), now_owner = ?holder, "CHAOS: renew refused but CHAOS_SKIP_DEADLINE_CHECK keeps publishing until the sink fences us");
                    self.renew_at = None;
                    None
                }
            }
            Err(e) => {
                self.shared.metrics.renew_failed(e.outcome());
                let delay = self
                    .core
                    .retry_after(AWS_BACKOFF, self.renew_attempt, unit(), now);
                self.renew_attempt += 1;
                tracing::warn!(stream_id = %self.id, fence_token = self.core.fence(), error = %e, retry_in_ms = ?delay.map(|d| d.as_millis()), "renew failed");
                // No retry fits before the deadline: the deadline check ends the stream.
                self.renew_at = delay.map(|d| now + d);
                None
            }
        }
    }

    fn take_batch(&mut self) -> Post {
        let mut events = std::mem::take(&mut self.spare);
        std::mem::swap(&mut events, &mut self.pending);
        self.pending_since = None;
        let through = events.last().map(|e| e.seq).unwrap_or(0);
        let count = events.len();
        let batch = SinkBatch {
            owner_id: self.shared.owner_id.to_string(),
            fence_token: self.core.fence(),
            events,
        };
        let body = Sink::encode(&batch);
        let mut events = batch.events;
        events.clear();
        self.spare = events;
        Post {
            body,
            through,
            count,
            attempt: 0,
        }
    }

    fn start_post(&mut self, post: Post, now: Instant) -> Option<Exit> {
        if !self.core.may_publish(now) {
            return Some(self.lose(LostReason::Deadline));
        }
        let mut limit = SINK_TIMEOUT;
        if let Some((by, _)) = self.release {
            limit = limit.min(
                by.saturating_duration_since(now)
                    .max(Duration::from_millis(1)),
            );
        }
        let Some(timeout) = self.core.call_timeout(now, limit) else {
            return Some(self.lose(LostReason::Deadline));
        };
        let sink = self.shared.sink.clone();
        let url = self.url.clone();
        let body = post.body.clone();
        let not_after = self.core.enforces_deadline().then(|| self.core.deadline());
        let fut = Box::pin(async move { sink.post(&url, body, timeout, not_after).await });
        self.posting = Some((post, fut));
        None
    }

    fn on_sink_answer(&mut self, answer: SinkAnswer) -> Option<Exit> {
        let (post, _) = self.posting.take().expect("a post was in flight");
        let now = Instant::now();
        match answer {
            SinkAnswer::Accepted(_) => {
                self.core.on_sink_accepted(post.through);
                self.log_phases(now, post.count);
                self.shared
                    .metrics
                    .events_published
                    .inc_by(post.count as u64);
                self.shared.metrics.batches_published.inc();
                None
            }
            SinkAnswer::NotSent => Some(self.lose(LostReason::Deadline)),
            SinkAnswer::Fenced(detail) => {
                self.shared.metrics.sink_rejected("409");
                tracing::warn!(stream_id = %self.id, fence_token = self.core.fence(), %detail, "sink refused our fence token (409)");
                Some(self.lose(LostReason::SinkFenced))
            }
            SinkAnswer::Transient { status, detail } => {
                self.shared.metrics.sink_rejected(status);
                let delay = self
                    .core
                    .retry_after(SINK_BACKOFF, post.attempt, unit(), now);
                tracing::warn!(stream_id = %self.id, fence_token = self.core.fence(), status, %detail, attempt = post.attempt, "sink post failed; will retry");
                match delay {
                    Some(d) => {
                        let post = Post {
                            attempt: post.attempt + 1,
                            ..post
                        };
                        self.retry = Some((post, now + d));
                        None
                    }
                    None => Some(self.lose(LostReason::Deadline)),
                }
            }
        }
    }

    fn start_connect(&mut self) {
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

    fn on_connected(&mut self, conn: Result<Box<Ws>, String>) {
        match conn {
            Ok(ws) => {
                if let Some(p) = self.phases.as_mut() {
                    p.connected.get_or_insert_with(Instant::now);
                }
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
    fn on_frames(&mut self, first: Option<Result<Message, String>>) {
        let cap = self.buffer_cap();
        let mut next = Some(first);
        let mut took_any = false;
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
                match self.core.on_event(event.seq) {
                    EventVerdict::Take => {}
                    EventVerdict::Replayed => {
                        self.shared.metrics.events_replayed_skipped.inc();
                        return false;
                    }
                    EventVerdict::Jump { expected } => {
                        self.shared.metrics.gap("sequence_jump", 0);
                        tracing::warn!(stream_id = %self.id, expected, got = event.seq, "sequence jump without a gap notice; reconnecting to ask again");
                        self.reconnect_later();
                        return false;
                    }
                    EventVerdict::TakeAfterGap { missing } => {
                        self.shared.metrics.gap_events_missing.inc_by(missing);
                        tracing::error!(stream_id = %self.id, missing, resumed_at = event.seq, "the upstream skipped events twice in a row; continuing after them");
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

    async fn finish_release(&mut self, by: Instant, reason: &'static str) -> Exit {
        self.posting = None;
        self.retry = None;
        let checkpoint = self.core.checkpoint_due();
        let mut attempt = 0;
        loop {
            let now = Instant::now();
            if self.core.past_deadline(now) {
                return self.lose(LostReason::Deadline);
            }
            let left = by
                .saturating_duration_since(now)
                .max(Duration::from_millis(200));
            let timeout = self
                .core
                .call_timeout(now, AWS_CALL_TIMEOUT.min(left))
                .unwrap_or(Duration::from_millis(1));
            match self
                .shared
                .table
                .release(&self.id, self.core.fence(), checkpoint, timeout)
                .await
            {
                Ok(Outcome::Done(())) => {
                    if let Some(cp) = checkpoint {
                        self.core.on_checkpoint_written(cp);
                    }
                    self.shared.metrics.released(reason);
                    tracing::info!(stream_id = %self.id, fence_token = self.core.fence(), checkpoint = self.core.persisted(), reason, "lease released");
                    return Exit::Released;
                }
                Ok(Outcome::Refused { current }) => {
                    tracing::warn!(stream_id = %self.id, fence_token = self.core.fence(), now_owner = ?current.and_then(|c| c.owner_id), "release refused: the lease was no longer ours");
                    return Exit::ReleaseUnconfirmed;
                }
                Err(e) => {
                    let delay = AWS_BACKOFF.delay(attempt, unit());
                    attempt += 1;
                    if Instant::now() + delay >= by || attempt > 5 {
                        tracing::warn!(stream_id = %self.id, fence_token = self.core.fence(), error = %e, "release failed; the lease will expire instead");
                        return Exit::ReleaseUnconfirmed;
                    }
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

async fn maybe_post(posting: &mut Option<(Post, BoxFut<SinkAnswer>)>) -> SinkAnswer {
    match posting {
        Some((_, fut)) => fut.await,
        None => std::future::pending().await,
    }
}

async fn maybe_renew(renewing: &mut Option<(Renewal, BoxFut<RenewResult>)>) -> RenewResult {
    match renewing {
        Some((_, fut)) => fut.await,
        None => std::future::pending().await,
    }
}
