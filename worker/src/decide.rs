//! The pure decision core: whether a stream may publish, what to checkpoint, how long to back
//! off, which streams to try to acquire and how many to shed.
//!
//! Everything here is plain data in, decision out, with the clock passed in (`Instant`s and Unix
//! milliseconds) and randomness passed in as numbers. It never performs I/O, never sleeps and never
//! reads a clock, so the safety properties (no publishing past the local deadline, fences never
//! decrease, checkpoints never pass what the sink accepted) are tested exhaustively below.

use std::collections::{HashMap, HashSet};
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

/// What the core says about one upstream event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventVerdict {
    /// The next event: buffer it for the sink.
    Take,
    /// Already taken (a replay after a reconnect): do not send it again.
    Replayed,
    /// A sequence jump without a gap notice: reconnect and ask again from `expected`.
    Jump { expected: u64 },
    /// The same jump happened again after a reconnect: accept it; `missing` events are gone.
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
    pending_jump: Option<u64>,
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

    /// Classifies an upstream event by its sequence number.
    pub fn on_event(&mut self, seq: u64) -> EventVerdict {
        let expected = self.taken + 1;
        if seq < expected {
            return EventVerdict::Replayed;
        }
        if seq == expected {
            self.taken = seq;
            self.pending_jump = None;
            return EventVerdict::Take;
        }
        if self.pending_jump == Some(expected) {
            self.pending_jump = None;
            self.taken = seq;
            return EventVerdict::TakeAfterGap {
                missing: seq - expected,
            };
        }
        self.pending_jump = Some(expected);
        EventVerdict::Jump { expected }
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

/// A starved worker's bid on a held stream, as read from the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bid {
    pub stream_id: String,
    pub bidder: String,
    /// Unix ms of the bid.
    pub at: i64,
}

/// Inputs of one acquisition round.
#[derive(Debug, Clone, Copy)]
pub struct PlanLimits {
    /// Never own more than this.
    pub max_streams: usize,
    /// At most this many acquisitions (and releases) per round.
    pub per_round: usize,
    /// Clock-skew margin: a lease is expired only once `expires_at < now - skew`.
    pub skew_ms: i64,
}

/// The result of one acquisition round.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Fair share for this worker: ⌈streams / live owners⌉ capped by `max_streams`.
    pub target: usize,
    /// Distinct live owners, this worker included.
    pub live_owners: usize,
    /// Streams to try now, best first.
    pub acquire: Vec<String>,
    /// Owned streams to release gracefully (excess above the fair share).
    pub shed: Vec<String>,
    /// Streams held by others: `(stream_id, unix ms at which to try)` = expiry + skew + 1.
    pub watch: Vec<(String, i64)>,
    /// Candidates that were acquirable but left for a later round.
    pub deferred: usize,
    /// A held stream on which to record a bid (this worker is below the fair share while an
    /// owner holds at least two more than it; the bid makes this worker count as a live owner
    /// for everyone, and asks that owner to hand the stream over).
    pub bid: Option<String>,
    /// Owned streams in `shed` because a bidder holding at least two fewer asked for them.
    pub honoured: Vec<String>,
    /// Owners seen with a lapsed lease in this view (a healthy owner never lets one lapse).
    /// The caller remembers them and passes them back as `leaving` while their other leases
    /// run out: otherwise, once the lapsed streams are taken, the dead owner's remaining
    /// (unexpired) streams make it look live again, the share shrinks, and the streams just
    /// taken over are shed and taken over again.
    pub lapsed: Vec<String>,
}

/// Decides what to acquire, shed and watch from a view of the table at `now_ms`.
///
/// Live owners are the distinct holders of unexpired leases, excluding any owner with an
/// expired lease (a healthy owner never lets one lapse) and any owner in `leaving`: announced
/// as draining by the fleet signal (it is about to release everything, so its streams belong to
/// the remaining share), or remembered from an earlier view's `lapsed`; plus
/// workers with a fresh bid (`bids`: the caller passes only fresh bids of other workers), plus
/// `me`. Candidates are free items,
/// expired ones, and items naming `me` that this process does not run. They are ordered by a
/// hash of `(me, stream)` so that workers prefer different streams and contend less.
///
/// Balance: a worker above `target + 1` sheds its excess. A worker below the target with nothing
/// to take bids on a stream of an owner holding at least two more than it; that owner hands the
/// stream over (sheds it) when it still holds at least two more than the bidder. Both sides
/// apply the same "two more" rule, so a bid is answered rather than repeated forever, and each
/// hand-over narrows the spread (the sum of squares of the counts falls), so bidding stops.
pub fn plan(
    items: &[LeaseItem],
    bids: &[Bid],
    leaving: &HashSet<String>,
    me: &str,
    owned: &HashSet<String>,
    now_ms: i64,
    limits: PlanLimits,
) -> Plan {
    let cutoff = now_ms - limits.skew_ms;
    let mut live: HashSet<&str> = HashSet::new();
    let mut dead: HashSet<&str> = HashSet::new();
    let mut candidates: Vec<&str> = Vec::new();
    let mut watch = Vec::new();
    let mut held_by: HashMap<&str, Vec<&str>> = HashMap::new();
    for item in items {
        let id = item.stream_id.as_str();
        if owned.contains(id) {
            continue;
        }
        match (&item.owner_id, item.lease_expires_at) {
            (None, _) => candidates.push(id),
            (Some(owner), _) if owner == me => candidates.push(id),
            // Held with no expiry: the acquire condition can never hold; nothing to do.
            (Some(_), None) => {}
            (Some(owner), Some(expires)) if expires < cutoff => {
                dead.insert(owner.as_str());
                candidates.push(id);
            }
            (Some(owner), Some(expires)) => {
                live.insert(owner.as_str());
                held_by.entry(owner.as_str()).or_default().push(id);
                watch.push((id.to_string(), expires + limits.skew_ms + 1));
            }
        }
    }
    live.retain(|owner| !dead.contains(owner) && !leaving.contains(*owner));
    live.extend(
        bids.iter()
            .map(|b| b.bidder.as_str())
            // A bid is no sign of life from an owner whose lease lapsed (it may have bid just
            // before it died): counting it would shrink everyone's share mid-takeover.
            .filter(|b| *b != me && !leaving.contains(*b) && !dead.contains(*b)),
    );
    live.remove(me);
    let live_owners = live.len() + 1;
    let target = items.len().div_ceil(live_owners).min(limits.max_streams);

    candidates.sort_by_key(|id| (rank(me, id), *id));
    let room = target.saturating_sub(owned.len()).min(limits.per_round);
    let acquire: Vec<String> = candidates
        .iter()
        .take(room)
        .map(|s| s.to_string())
        .collect();
    let deferred = candidates.len() - acquire.len();

    let mut shed = Vec::new();
    if owned.len() > target + 1 {
        let mut mine: Vec<&String> = owned.iter().collect();
        // Shed the streams this worker ranks worst, so the choice is stable across rounds.
        mine.sort_by_key(|id| std::cmp::Reverse((rank(me, id), id.as_str())));
        let excess = (owned.len() - target).min(limits.per_round);
        shed = mine.into_iter().take(excess).cloned().collect();
    }
    // Answer bids on owned streams from workers holding at least two fewer (one stream per
    // bidder per round: its count changes as soon as it takes one).
    let mut honoured = Vec::new();
    let mut answered: HashSet<&str> = HashSet::new();
    let mut mine_after = owned.len() - shed.len();
    let mut on_mine: Vec<&Bid> = bids
        .iter()
        .filter(|b| b.bidder != me && owned.contains(&b.stream_id))
        .filter(|b| !leaving.contains(&b.bidder) && !dead.contains(b.bidder.as_str()))
        .collect();
    on_mine.sort_by(|x, y| (x.at, &x.stream_id).cmp(&(y.at, &y.stream_id)));
    for bid in on_mine {
        let theirs = held_by.get(bid.bidder.as_str()).map_or(0, Vec::len);
        if shed.len() >= limits.per_round
            || answered.contains(bid.bidder.as_str())
            || shed.contains(&bid.stream_id)
            || mine_after < theirs + 2
        {
            continue;
        }
        answered.insert(bid.bidder.as_str());
        shed.push(bid.stream_id.clone());
        honoured.push(bid.stream_id.clone());
        mine_after -= 1;
    }
    // Below the fair share while someone holds at least two more: bid on their best-ranked
    // stream, which makes this worker count as a live owner everywhere.
    // Not while a leaving or dead owner still holds streams: they are about to be free, and
    // taking them evens the counts without anyone handing a stream over.
    let mut bid = None;
    let freeing = held_by
        .keys()
        .any(|owner| leaving.contains(*owner) || dead.contains(*owner));
    if owned.len() < target && acquire.is_empty() && deferred == 0 && !freeing {
        let busiest = held_by
            .iter()
            .filter(|(owner, streams)| {
                **owner != me
                    && !dead.contains(*owner)
                    && !leaving.contains(**owner)
                    // More than one above us: taking one from them narrows the spread. A
                    // bar at `target` alone would leave a late worker starved whenever the
                    // early ones hold exactly their (too small a fleet's) share.
                    && streams.len() > owned.len() + 1
            })
            .max_by_key(|(owner, streams)| (streams.len(), std::cmp::Reverse(**owner)));
        if let Some((_, streams)) = busiest {
            bid = streams
                .iter()
                .min_by_key(|id| (rank(me, id), **id))
                .map(|id| id.to_string());
        }
    }
    let mut lapsed: Vec<String> = dead.iter().map(|o| o.to_string()).collect();
    lapsed.sort();
    Plan {
        target,
        live_owners,
        acquire,
        shed,
        watch,
        deferred,
        bid,
        honoured,
        lapsed,
    }
}

/// When to try next for a stream someone else holds: the earliest `expires + skew + 1` still in
/// the future, over `items` not in `owned`. Computed again after an acquire round, whose refusals
/// reveal leases renewed (or taken) since the scan.
pub fn next_watch(
    items: &[LeaseItem],
    me: &str,
    owned: &HashSet<String>,
    now_ms: i64,
    skew_ms: i64,
) -> Option<i64> {
    items
        .iter()
        .filter(|i| !owned.contains(&i.stream_id))
        .filter(|i| i.owner_id.as_deref().is_some_and(|o| o != me))
        .filter_map(|i| i.lease_expires_at)
        .map(|expires| expires + skew_ms + 1)
        .filter(|at| *at > now_ms)
        .min()
}

/// A stable per-(worker, stream) preference: FNV-1a of both names, then the splitmix64
/// finaliser (FNV alone leaves names that differ in their last characters, `s-1960`…`s-1979`,
/// next to each other in every worker's order, so workers contended for the same runs).
fn rank(me: &str, stream: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in me.bytes().chain([0u8]).chain(stream.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

#[cfg(test)]
mod tests;
