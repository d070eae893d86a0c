//! The per-stream core: whether a stream may publish, what to checkpoint, how long to back off,
//! what an upstream sequence number means, and which fence tokens may be used.
//!
//! Plain data in, decision out: the clock is passed in, randomness is passed in as numbers.

use std::collections::HashMap;
use std::time::Duration;

use lease_table::LeaseItem;
use tokio::time::Instant;

/// Lease timing shared by every stream of a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Length of a lease as written to the table.
    pub lease: Duration,
    /// Subtracted from the lease for the local deadline (covers in-flight requests and drift).
    pub safety_margin: Duration,
}

impl Timing {
    /// Local deadline of a lease whose acquire/renew request started at `request_start`.
    pub fn deadline_after(&self, request_start: Instant) -> Instant {
        request_start + self.lease.saturating_sub(self.safety_margin)
    }
}

/// The timeline a stream's lease is written on: the last expiry the table accepted from this
/// worker (Unix ms), carried forward on the monotonic clock from when its request was sent.
///
/// A renewal asks for the later of "wall clock + lease" and that carried expiry, and judges "not
/// expired yet" by the earlier of the wall clock and the carried time. So a wall clock stepped
/// back still renews (its own "now + lease" would lie below the stored expiry, which the
/// monotone condition refuses: the worker then gave its streams up at its deadline, and the
/// fleet took them a lease later — campaign seed 1 run 1, `clock_step -6000`), and a wall clock
/// stepped forward still passes the condition's "not yet expired" check. Safety is unchanged:
/// the written expiry never ends in real time before the local deadline, which is counted on the
/// monotonic clock from the request's start, and ownership still rests on owner and fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimeline {
    expires_ms: i64,
    sent: Instant,
    lease_ms: i64,
}

impl LeaseTimeline {
    /// A lease the table accepted with `expires_ms`, by a request started at `started`, when
    /// the wall clock read `started_wall_ms`. The expiry was computed from the wall clock when the
    /// request left (after any wait for the write window), so the anchor is moved to that
    /// moment: carried from `sent` itself, every later renewal would ask for the wait's worth
    /// more than wall clock + lease (seen as takeovers a few ms "before the table's expiry"
    /// in `bench takeover`, 2026-12-05: the stale-item rule, counted from when the item was
    /// seen, is right; the inflated expiry was not).
    pub fn new(expires_ms: i64, started: Instant, started_wall_ms: i64, lease: Duration) -> Self {
        let lease_ms = lease.as_millis() as i64;
        let waited = (expires_ms - lease_ms - started_wall_ms).max(0);
        LeaseTimeline {
            expires_ms,
            sent: started + Duration::from_millis(waited as u64),
            lease_ms,
        }
    }

    /// `(now, expires)` for a renewal sent at `now` (the monotonic clock) when the wall clock
    /// reads `wall_ms` (both read together: a gap between them would be carried into every
    /// later expiry): the condition's "now" and the expiry to write.
    pub fn renewal(&self, wall_ms: i64, now: Instant) -> (i64, i64) {
        let carried = self.expires_ms + now.saturating_duration_since(self.sent).as_millis() as i64;
        let expires = carried.max(wall_ms + self.lease_ms);
        (wall_ms.min(carried - self.lease_ms), expires)
    }

    /// A renewal sent at `sent` asking for `expires_ms` was applied.
    pub fn on_applied(&mut self, expires_ms: i64, sent: Instant) {
        if expires_ms >= self.expires_ms {
            self.expires_ms = expires_ms;
            self.sent = sent;
        }
    }
}

/// How long a sequence jump without a gap notice is retried before the missing events are
/// recorded as lost and consumption continues after them.
pub const JUMP_PATIENCE: Duration = Duration::from_secs(5);

/// What the core says about one upstream event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventVerdict {
    /// The next event: buffer it for the sink.
    Take,
    /// Already taken (a replay after a reconnect): do not send it again.
    Replayed,
    /// A sequence jump without a gap notice: reconnect and ask again from `expected`.
    Jump { expected: u64 },
    /// The same jump persisted for [`JUMP_PATIENCE`]: accept it; `missing` events are gone.
    TakeAfterGap { missing: u64 },
}

/// Why a stream stopped without releasing its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LostReason {
    /// A conditional renew was refused: someone else holds the lease.
    RenewRefused,
    /// The local deadline passed before a renew succeeded.
    Deadline,
    /// The sink answered 409: a higher fence token exists.
    SinkFenced,
}

impl LostReason {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            LostReason::RenewRefused => "renew_refused",
            LostReason::Deadline => "deadline",
            LostReason::SinkFenced => "sink_fenced",
        }
    }
}

/// The state of one owned stream: its fence, local deadline, and three sequence marks
/// (`taken` from upstream ≥ `accepted` by the sink ≥ `persisted` in the table).
#[derive(Debug, Clone)]
pub struct StreamCore {
    fence: u64,
    timing: Timing,
    deadline: Instant,
    enforce_deadline: bool,
    taken: u64,
    accepted: u64,
    persisted: u64,
    /// A sequence jump without a gap notice being retried: the sequence expected, and when the
    /// jump was first seen.
    pending_jump: Option<(u64, Instant)>,
    lost: Option<LostReason>,
}

impl StreamCore {
    /// A stream just acquired with `fence` by a request that started at `acquired_at`; the table
    /// held `checkpoint` (0 = nothing delivered yet). `enforce_deadline = false` is the chaos mode.
    pub fn new(
        fence: u64,
        checkpoint: u64,
        acquired_at: Instant,
        timing: Timing,
        enforce_deadline: bool,
    ) -> Self {
        StreamCore {
            fence,
            timing,
            deadline: timing.deadline_after(acquired_at),
            enforce_deadline,
            taken: checkpoint,
            accepted: checkpoint,
            persisted: checkpoint,
            pending_jump: None,
            lost: None,
        }
    }

    /// The fencing token every batch carries. Fixed for the life of the core.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The local monotonic deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the local deadline is enforced (false only in chaos mode).
    pub fn enforces_deadline(&self) -> bool {
        self.enforce_deadline
    }

    /// First sequence to ask the upstream for on (re)connect.
    pub fn resume_from(&self) -> u64 {
        self.taken + 1
    }

    /// Highest sequence the sink accepted.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// Highest sequence persisted as the checkpoint.
    pub fn persisted(&self) -> u64 {
        self.persisted
    }

    /// Highest sequence taken from the upstream (buffered or delivered).
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// Why the stream was lost, if it was.
    pub fn lost(&self) -> Option<LostReason> {
        self.lost
    }

    /// Whether a batch may be sent at `now`: not lost, and before the local deadline.
    pub fn may_publish(&self, now: Instant) -> bool {
        self.lost.is_none() && (!self.enforce_deadline || now < self.deadline)
    }

    /// Whether the stream must stop at `now` because its local deadline passed.
    pub fn past_deadline(&self, now: Instant) -> bool {
        self.enforce_deadline && now >= self.deadline
    }

    /// Timeout for a call made at `now`: at most `max`, and never beyond the local deadline.
    /// `None` when no time is left.
    pub fn call_timeout(&self, now: Instant, max: Duration) -> Option<Duration> {
        if !self.enforce_deadline {
            return Some(max);
        }
        let left = self.deadline.checked_duration_since(now)?;
        (!left.is_zero()).then(|| left.min(max))
    }

    /// Classifies an upstream event by its sequence number, at `now`. A jump without a gap
    /// notice is retried (the runner reconnects with backoff and asks again) for
    /// [`JUMP_PATIENCE`] before it is accepted as loss: an upstream replica behind, or a
    /// reconnect racing a failover, heals within that.
    pub fn on_event(&mut self, seq: u64, now: Instant) -> EventVerdict {
        let expected = self.taken + 1;
        if seq < expected {
            return EventVerdict::Replayed;
        }
        if seq == expected {
            self.taken = seq;
            self.pending_jump = None;
            return EventVerdict::Take;
        }
        match self.pending_jump {
            Some((at, since)) if at == expected && now >= since + JUMP_PATIENCE => {
                self.pending_jump = None;
                self.taken = seq;
                EventVerdict::TakeAfterGap {
                    missing: seq - expected,
                }
            }
            Some((at, _)) if at == expected => EventVerdict::Jump { expected },
            _ => {
                self.pending_jump = Some((expected, now));
                EventVerdict::Jump { expected }
            }
        }
    }

    /// A gap notice: events before `oldest_available` are gone. Returns how many were skipped.
    pub fn on_gap(&mut self, oldest_available: u64) -> u64 {
        let expected = self.taken + 1;
        if oldest_available <= expected {
            return 0;
        }
        self.taken = oldest_available - 1;
        oldest_available - expected
    }

    /// The sink stored a batch whose last sequence is `through` (only sequences already taken).
    pub fn on_sink_accepted(&mut self, through: u64) {
        debug_assert!(
            through <= self.taken,
            "accepted {through} > taken {}",
            self.taken
        );
        self.accepted = self.accepted.max(through.min(self.taken));
    }

    /// A checkpoint worth writing now: what the sink accepted, if newer than the table's.
    pub fn checkpoint_due(&self) -> Option<u64> {
        (self.accepted > self.persisted).then_some(self.accepted)
    }

    /// A checkpoint write (alone, with a renew, or with the release) succeeded.
    pub fn on_checkpoint_written(&mut self, checkpoint: u64) {
        self.persisted = self.persisted.max(checkpoint.min(self.accepted));
    }

    /// A renew whose request started at `started` succeeded: the local deadline moves forward.
    pub fn on_renewed(&mut self, started: Instant) {
        self.deadline = self.deadline.max(self.timing.deadline_after(started));
    }

    /// The stream is lost: nothing more may be published.
    pub fn on_lost(&mut self, reason: LostReason) {
        self.lost.get_or_insert(reason);
    }

    /// Checkpoint lag in events: taken from upstream but not yet persisted.
    pub fn checkpoint_lag(&self) -> u64 {
        self.taken - self.persisted
    }

    /// Full-jitter exponential backoff for retry `attempt` (0-based) at `now`, or `None` when the
    /// retry would land past the local deadline. `unit` is a random number in `[0, 1)`.
    pub fn retry_after(
        &self,
        backoff: Backoff,
        attempt: u32,
        unit: f64,
        now: Instant,
    ) -> Option<Duration> {
        let delay = backoff.delay(attempt, unit);
        if self.enforce_deadline && now + delay >= self.deadline {
            return None;
        }
        Some(delay)
    }
}

/// Exponential backoff bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// Full jitter: uniform in `[0, min(cap, base · 2^attempt))`, `unit` in `[0, 1)`.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.cap);
        ceiling.mul_f64(unit.clamp(0.0, 1.0))
    }
}

/// Remembers the highest fence token seen per stream, refusing any that would go backwards
/// (a table restored from an old backup, for one).
#[derive(Debug, Default)]
pub struct FenceBook {
    highest: HashMap<String, u64>,
}

impl FenceBook {
    /// Records `fence` for `stream_id`; false (and nothing recorded) when it is not higher than
    /// one seen before.
    pub fn admit(&mut self, stream_id: &str, fence: u64) -> bool {
        match self.highest.get_mut(stream_id) {
            Some(seen) if fence <= *seen => false,
            Some(seen) => {
                *seen = fence;
                true
            }
            None => {
                self.highest.insert(stream_id.to_string(), fence);
                true
            }
        }
    }
}

/// Whether a refused renewal was refused only by its monotone condition: the refusal shows the
/// lease still held by `me` under `fence`, expiring no earlier than the `asked_expires` this
/// renewal would have written (another renewal of ours was applied after it, or this host's
/// wall clock stepped back). It does **not** count as renewed: the stored expiry was written on
/// this clock as it was before, and after a backward step it ends earlier in real time than
/// "now + lease" — a worker that extended its local deadline here kept publishing after others
/// had (rightly) taken the lease (campaign seed 1 run 28: `clock_step -6000`, a late write).
/// The stream keeps the deadline of its last applied renewal; the refused write's checkpoint
/// is persisted only if the stored one is not below it.
pub fn renewal_superseded(current: &LeaseItem, me: &str, fence: u64, asked_expires: i64) -> bool {
    current.owner_id.as_deref() == Some(me)
        && current.fence_token == Some(fence)
        && current.lease_expires_at.is_some_and(|t| t >= asked_expires)
}
