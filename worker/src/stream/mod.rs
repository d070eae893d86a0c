//! One owned stream, from acquisition to release or loss: the runner that ties the upstream
//! WebSocket ([`upstream`]), batching and the fenced sink posts ([`batch`]) and the coalesced
//! renew + checkpoint writes together, waking at the instant [`wake::next_wake`] computes.
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

use lease_protocol::SinkEvent;
use lease_table::ops::Outcome;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::decide::{renewal_superseded, Backoff, LeaseTimeline, LostReason, StreamCore, Timing};
use crate::lease::LeaseTable;
use crate::metrics::{Metrics, StreamStats};
use crate::sink::{Sink, SinkAnswer};

mod batch;
mod upstream;
pub mod wake;

pub use batch::SINK_TIMEOUT;
pub use upstream::{CONNECT_TIMEOUT, UPSTREAM_READ_BUFFER};

use batch::{maybe_post, Post};
use upstream::{upstream_event, Upstream, UpstreamEvent};

pub use crate::lease::AWS_CALL_TIMEOUT;

/// A renewal's timeout: half the renew interval, between [`AWS_CALL_TIMEOUT`] and 10 s (and
/// never past the local deadline). A timed-out write still executes at the server, so under a
/// burst a short timeout turns a slow table into a stuck one (every renewal times out and is
/// sent again); a long lease can afford to wait instead.
pub fn renew_timeout(renew_every: Duration) -> Duration {
    (renew_every / 2).clamp(AWS_CALL_TIMEOUT, Duration::from_secs(10))
}
const AWS_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(100),
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
    /// The upstream liveness deadline (`UPSTREAM_IDLE_MS`); zero = none.
    pub upstream_idle: Duration,
    /// What a sink's permanent rejection does (`SINK_REJECT_POLICY`).
    pub sink_reject: crate::config::RejectPolicy,
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
    /// The `lease_expires_at` the table accepted (Unix ms).
    pub expires: i64,
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

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type RenewResult = Result<Outcome<()>, crate::lease::CallError>;

struct Renewal {
    started: Instant,
    checkpoint: Option<u64>,
    /// The `lease_expires_at` it asks for (Unix ms).
    expires: i64,
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
    if runner.halted.is_some() {
        runner.shared.metrics.halted_streams.dec();
    }
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
    /// When the open upstream socket last gave any sign of life (a frame of any kind), or was
    /// opened; and when this worker last pinged it.
    last_heard: Instant,
    last_ping: Instant,
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
    /// The HTTP status of the sink's permanent rejection this stream is halted on, if it is.
    halted: Option<u16>,
    /// The timeline renewals write the lease on.
    timeline: LeaseTimeline,
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
        let timeline = LeaseTimeline::new(
            acquired.expires,
            acquired.started,
            acquired.started_unix_ms,
            shared.timing.lease,
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
            last_heard: Instant::now(),
            last_ping: Instant::now(),
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
            halted: None,
            timeline,
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
        let idle = self.posting.is_none();
        let timers = wake::Timers {
            deadline: self.core.enforces_deadline().then(|| self.core.deadline()),
            renew_at: self.renew_at.filter(|_| self.renewing.is_none()),
            retry_at: self.retry.as_ref().map(|(_, t)| *t).filter(|_| idle),
            batch_due: self
                .pending_since
                .map(|since| since + self.shared.batch_max_delay)
                .filter(|_| idle && self.retry.is_none()),
            connect_at: match self.upstream {
                Upstream::Waiting(t) => Some(t),
                _ => None,
            },
            release_by: self.release.map(|(by, _)| by),
            upstream_idle: self.liveness_wake(),
        };
        wake::next_wake(&timers, Instant::now())
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
        self.check_liveness(now);
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
        // The monotonic and wall clocks read together (`now` is when this wake-up began).
        let sent = Instant::now();
        let (now_ms, expires) = self.timeline.renewal(lease_table::now_ms(), sent);
        let fut = Box::pin(async move {
            table
                .renew(&id, fence, now_ms, expires, checkpoint, timeout)
                .await
        });
        self.renewing = Some((
            Renewal {
                started: sent,
                checkpoint,
                expires,
            },
            fut,
        ));
        None
    }

    /// A renewal took effect (its lease is in the table); `checkpoint` is what it persisted.
    fn renewed(&mut self, renewal: Renewal, checkpoint: Option<u64>, now: Instant) -> Option<Exit> {
        self.core.on_renewed(renewal.started);
        self.timeline.on_applied(renewal.expires, renewal.started);
        if let Some(cp) = checkpoint {
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

    fn on_renew_result(
        &mut self,
        result: Result<Outcome<()>, crate::lease::CallError>,
    ) -> Option<Exit> {
        let (renewal, _) = self.renewing.take().expect("a renewal was in flight");
        let now = Instant::now();
        let superseded = match &result {
            Ok(Outcome::Refused { current: Some(cur) }) => renewal_superseded(
                cur,
                &self.shared.owner_id,
                self.core.fence(),
                renewal.expires,
            )
            .then_some(cur.checkpoint),
            _ => None,
        };
        if let Some(stored) = superseded {
            // Only the monotone condition refused it: the lease is still ours, but how long it
            // lasts in real time is what an earlier renewal wrote, not "now + lease" on this
            // clock (which may have stepped back): the deadline stays where it is.
            tracing::warn!(stream_id = %self.id, fence_token = self.core.fence(), asked_expires = renewal.expires, "renewal refused: the table holds a later expiry of ours than this clock asks for (did the wall clock step back?); not counted as renewed, the stream keeps its current deadline");
            self.shared.metrics.renew_failed("superseded");
            if let Some(cp) = renewal
                .checkpoint
                .filter(|cp| stored.is_some_and(|s| s >= *cp))
            {
                self.core.on_checkpoint_written(cp);
                self.stats
                    .persisted
                    .store(self.core.persisted(), Ordering::Relaxed);
            }
            self.renew_attempt = 0;
            self.renew_at = Some(now + self.shared.renew_every);
            return None;
        }
        match result {
            Ok(Outcome::Done(())) => {
                let checkpoint = renewal.checkpoint;
                self.renewed(renewal, checkpoint, now)
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

async fn maybe_renew(renewing: &mut Option<(Renewal, BoxFut<RenewResult>)>) -> RenewResult {
    match renewing {
        Some((_, fut)) => fut.await,
        None => std::future::pending().await,
    }
}
