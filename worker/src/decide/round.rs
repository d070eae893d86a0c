//! What the supervisor decides with and what one of its rounds decides: its [`Settings`], the
//! [`Round`] it returns (acquire these, release those, bid on that, gauges), the kind of round
//! the scan timer asks for, and what a fleet signal read means. Plain data, no behaviour beyond
//! a few derived durations: [`super::owners::Supervision`] produces them.

use std::time::Duration;

use lease_table::ops::Seen;

/// The settings the supervisor decides with (from the worker's configuration).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Lease length.
    pub lease: Duration,
    /// Renew interval.
    pub renew: Duration,
    /// Discovery scan interval.
    pub scan: Duration,
    /// Clock-skew margin: a lease is expired only once `expires_at < now - skew`.
    pub skew: Duration,
    /// Never own more than this.
    pub max_streams: usize,
    /// Try a held lease right when it expires (`ACQUIRE_MODE=expiry-aware`), not only on scans.
    pub expiry_aware: bool,
    /// Fleet signal read interval; zero = never read.
    pub fleet_poll: Duration,
}

impl Settings {
    /// How long an item must be seen unchanged before a lease the table calls expired is
    /// taken: the lease less 1.25 scan intervals (so that, when clocks agree, it has always
    /// elapsed by the expiry: the last renewal is seen within a scan interval ± 10 %), but at
    /// least 1.5 renew intervals (longer than any healthy owner leaves its item unchanged).
    pub fn quiet(&self) -> Duration {
        self.lease
            .saturating_sub(self.scan.mul_f64(1.25))
            .max(self.renew.mul_f64(1.5))
    }

    /// Whether the fleet signal is read: when it is on, and only when scans are rarer than the
    /// reads (otherwise the scan finds released streams as soon). In either acquisition mode:
    /// `ACQUIRE_MODE` is when a held lease is tried, the signal is when a released one is seen,
    /// so the two modes compare acquisition timing alone (issue #15); `FLEET_POLL_MS=0` with
    /// `poll` is the source design's plain polling.
    pub fn fleet_polling(&self) -> bool {
        !self.fleet_poll.is_zero() && self.scan > self.fleet_poll
    }
}

/// Why the supervisor releases a stream it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    /// Above the fair share + 1.
    Shed,
    /// A bidder holding at least two fewer asked for it.
    Bid,
}

impl ReleaseReason {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseReason::Shed => "shed",
            ReleaseReason::Bid => "bid",
        }
    }
}

/// Gauges describing the fleet as the last round saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    pub table_streams: usize,
    pub live_owners: usize,
    pub fair_share: usize,
    pub unowned: usize,
    /// Other live processes holding leases under this worker's own `OWNER_ID` (a
    /// misconfiguration: ids must be unique per process).
    pub duplicate_owners: usize,
}

/// One acquire to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub stream_id: String,
    /// The held lease as last seen, when someone else held it: the acquire may then also
    /// succeed on an unchanged item (see [`lease_table::ops::acquire_observed`]).
    pub seen: Option<Seen>,
}

/// What one round decided; the loop performs it in this order, then calls
/// [`Supervision::finish_round`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    /// Drained owners that hold and bid nothing any more: remove them from the fleet signal.
    pub forget_draining: Vec<String>,
    /// Segmented discovery: members gone for long, to delete (owner, the expiry seen).
    pub forget_members: Vec<(String, i64)>,
    /// Streams to try to acquire now.
    pub acquire: Vec<Attempt>,
    /// A held stream to bid on.
    pub bid: Option<String>,
    /// Streams this worker runs to release, and why.
    pub release: Vec<(String, ReleaseReason)>,
    /// Segmented discovery: to whom the shed streams go, (stream, member); written to this
    /// worker's membership item before the releases are sent.
    pub handoffs: Vec<(String, String)>,
    /// Segmented discovery: free streams this worker has no room for, each pointed out to a
    /// member with room, (stream, member); carried by the next heartbeat.
    pub pointers: Vec<(String, String)>,
    /// Gauges to publish.
    pub gauges: Gauges,
    pub(super) target: usize,
    pub(super) deferred: usize,
    /// How many streams this worker ran when the plan was drawn.
    pub(super) lined_up_with: usize,
}

/// Which kind of round the scan timer asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduled {
    /// Plan again on the last scan's view (hurrying with a usable view).
    View,
    /// Scan the table first; `consistent` after a lost race (the view is stale where it matters).
    Scan { consistent: bool },
}

/// What a fleet signal read means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FleetRead {
    /// Streams were (or are about to be) released: scan now, consistently.
    pub changed: bool,
    /// The signal names this worker as draining on its first read: a previous process with the
    /// same `OWNER_ID` was killed mid-drain. Clear the mark.
    pub clear_own_mark: bool,
}
