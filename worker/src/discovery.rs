//! Discovery and acquisition: the supervisor loop. It performs what the pure core
//! ([`decide::Supervision`]) decides: scans the table, acquires, spawns stream runners, sheds,
//! bids, reads the fleet signal, and (in expiry-aware mode) wakes up right when a watched lease
//! expires instead of at the next scan. Every decision (which owners are live, cooldowns, the
//! ramp, when to rescan) is a call into the core; this module only does the I/O and reports the
//! answers back.
//!
//! Between scans it polls the fleet signal ([`lease_table::FLEET_ITEM`], one `GetItem` every
//! `FLEET_POLL_MS`): a draining worker marks itself there and bumps its generation after its
//! releases, so the others scan at once and take the freed streams within milliseconds, instead
//! of at their next scan.
//!
//! The scan only hints at candidates; every ownership change is a conditional write. This module
//! never publishes, and never touches a stream it does not own except through `acquire`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use lease_table::ops::Outcome;
use lease_table::LeaseItem;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::config::{AcquireMode, Config, Discovery};
use crate::decide::{self, Attempt, ReleaseReason, Round, Scheduled, Supervision};
use crate::http::Readiness;
use crate::lease::CallError;
use crate::membership::Membership;
use crate::stream::{self, Acquired, Control, Exit, Shared, AWS_CALL_TIMEOUT};

pub use crate::decide::{FAST_RESCAN, MAX_PER_ROUND, MIN_RESCAN, PER_ROUND, VIEW_ROUNDS};

/// An acquire may take this long. A timed-out acquire may still have been written; its outcome
/// is unknown, so it counts as a lost race: a consistent rescan follows almost at once and, if the
/// item shows the acquire landed (this worker, a higher fence), takes the lease back; if not, the
/// stream is held back for a lease (the acquire may still be in flight, see
/// [`Supervision::on_unconfirmed`]).
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// Each scan page may take this long.
pub const SCAN_PAGE_TIMEOUT: Duration = Duration::from_secs(5);
// How often the fleet signal is read is `FLEET_POLL_MS` (±10 %; default 50 ms: 72,000
// eventually consistent `GetItem`s per worker-hour, 0.5 read request unit each, whatever the
// table size). Not polled when `SCAN_SECONDS` is that short anyway, nor in `ACQUIRE_MODE=poll`.
/// A fleet read or bump may take this long.
pub const FLEET_TIMEOUT: Duration = Duration::from_secs(1);

/// What woke the supervisor loop.
enum Wake {
    /// The scan timer: a scan, or a round on the last view.
    Scheduled,
    /// The fleet signal poll.
    Fleet,
    /// A watched lease's expiry.
    Watch,
}

/// When the next wake-ups come, as decided after one.
#[derive(Default)]
struct Step {
    /// The next scheduled round, this long from now.
    next_scan: Option<Duration>,
    /// The next scheduled round at most this long from now.
    sooner: Option<Duration>,
    /// The next fleet signal read, this long from now.
    next_fleet: Option<Duration>,
}

struct Owned {
    control: watch::Sender<Control>,
    releasing: bool,
}

/// Owns the set of running streams of this process.
pub struct Supervisor {
    shared: Arc<Shared>,
    config: Arc<Config>,
    readiness: Arc<Readiness>,
    owned: HashMap<String, Owned>,
    tasks: JoinSet<(String, Exit)>,
    core: Supervision,
    /// Acquires sent and not yet answered. A round abandoned for shutdown leaves them here:
    /// the table may name this worker for them, so the drain releases those it finds.
    acquiring: HashSet<String>,
    /// Segmented discovery's membership (`None` in full discovery).
    membership: Option<Membership>,
}

fn jittered(base: Duration) -> Duration {
    decide::jittered(base, rand::random::<f64>())
}

impl Supervisor {
    /// A supervisor with nothing owned yet.
    pub fn new(shared: Arc<Shared>, config: Arc<Config>, readiness: Arc<Readiness>) -> Self {
        let settings = decide::Settings {
            lease: config.lease,
            renew: config.renew,
            scan: config.scan,
            skew: config.skew_margin,
            max_streams: config.max_streams,
            expiry_aware: config.acquire_mode == AcquireMode::ExpiryAware,
            fleet_poll: config.fleet_poll,
        };
        let core =
            Supervision::new(settings, &shared.owner_id).with_instance(shared.table.instance());
        let membership = match config.discovery {
            Discovery::Full => None,
            Discovery::Segmented { .. } => Some(Membership::default()),
        };
        Supervisor {
            shared,
            config,
            readiness,
            owned: HashMap::new(),
            tasks: JoinSet::new(),
            core,
            acquiring: HashSet::new(),
            membership,
        }
    }

    /// Scans and acquires until `shutdown` resolves, then drains every stream within the drain
    /// budget. Returns the number of streams whose release could not be confirmed.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) -> usize {
        tokio::pin!(shutdown);
        let mut next_scan = Instant::now();
        let fleet_polling = self.core.settings().fleet_polling();
        let mut next_fleet = Instant::now();
        loop {
            let watch_at = self.core.watch_at_ms().map(|ms| {
                let wait = (ms - lease_table::now_ms()).max(0) as u64;
                Instant::now() + Duration::from_millis(wait)
            });
            let far = Instant::now() + Duration::from_secs(3600);
            let wake = tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep_until(next_scan) => Wake::Scheduled,
                _ = tokio::time::sleep_until(next_fleet), if fleet_polling => Wake::Fleet,
                _ = tokio::time::sleep_until(watch_at.unwrap_or(far)), if watch_at.is_some() => Wake::Watch,
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    self.on_exit(joined);
                    continue;
                }
            };
            // The work of a wake-up (a scan, acquires) can take seconds on a busy table: the
            // signal is watched throughout, and ends it at once (issue #17: SIGTERM noticed
            // within a second, nothing acquired after it).
            let step = tokio::select! {
                biased;
                _ = &mut shutdown => None,
                step = self.on_wake(wake) => Some(step),
            };
            let Some(step) = step else {
                tracing::info!("shutdown signalled during a discovery round; round abandoned");
                break;
            };
            let now = Instant::now();
            if let Some(next) = step.next_scan {
                next_scan = now + jittered(next);
            }
            if let Some(soon) = step.sooner {
                next_scan = next_scan.min(now + jittered(soon));
            }
            if let Some(every) = step.next_fleet {
                next_fleet = now + jittered(every);
            }
        }
        self.drain().await
    }

    /// Does the work of one wake-up; says when the next ones come.
    async fn on_wake(&mut self, wake: Wake) -> Step {
        let mut step = Step::default();
        match wake {
            Wake::Scheduled => {
                let next = match self.core.scheduled() {
                    Scheduled::View => {
                        let hurry = self.acquire_round().await;
                        self.core.after_view_round(hurry)
                    }
                    Scheduled::Scan { consistent } => {
                        let hurry = self.scan_round(consistent).await;
                        self.core.after_scan(hurry)
                    }
                };
                step.next_scan = Some(next);
            }
            Wake::Fleet => {
                if self.fleet_changed().await {
                    // Streams were (or are about to be) released: look now, consistently,
                    // so the scan cannot miss a release that the signal already announced.
                    let hurry = self.scan_round(true).await;
                    step.next_scan = Some(self.core.after_scan(hurry));
                }
                step.next_fleet = Some(self.core.fleet_every());
            }
            Wake::Watch => {
                let hurry = self.acquire_round().await;
                step.sooner = self.core.after_watch_round(hurry);
            }
        }
        step
    }

    /// Reads the fleet signal; true when its generation or draining set changed since the last
    /// read (the first read only records it).
    async fn fleet_changed(&mut self) -> bool {
        let signal = match self.shared.table.fleet_read(FLEET_TIMEOUT).await {
            Ok(signal) => signal,
            Err(e) => {
                tracing::debug!(error = %e, "fleet signal read failed");
                return false;
            }
        };
        let generation = signal.generation;
        let read = self.core.on_fleet_signal(generation, signal.draining);
        if read.clear_own_mark {
            let table = self.shared.table.clone();
            tokio::spawn(async move { table.fleet_bump(Some(false), FLEET_TIMEOUT).await });
        }
        if read.changed {
            tracing::debug!(
                generation,
                draining = self.core.draining_owners().len(),
                "fleet signal changed"
            );
        }
        read.changed
    }

    /// Bumps the fleet generation in the background (after a shed released streams).
    fn announce_release(&self) {
        let table = self.shared.table.clone();
        tokio::spawn(async move {
            if let Err(e) = table.fleet_bump(None, FLEET_TIMEOUT).await {
                tracing::debug!(error = %e, "fleet signal bump failed");
            }
        });
    }

    /// One discovery scan and acquisition round. Returns true when another round should follow soon.
    async fn scan_round(&mut self, consistent: bool) -> bool {
        let began = Instant::now();
        let table = &self.shared.table;
        let scanned = match &mut self.membership {
            Some(membership) => {
                let held: HashSet<String> = self.owned.keys().cloned().collect();
                membership
                    .scan(table, &mut self.core, &held, SCAN_PAGE_TIMEOUT, consistent)
                    .await
            }
            None => table
                .scan(SCAN_PAGE_TIMEOUT, consistent, None)
                .await
                .map(|view| {
                    let items = view.items.len();
                    self.core
                        .on_scan(view.items, view.bids, began.elapsed(), Instant::now());
                    items
                }),
        };
        match scanned {
            Ok(items) => {
                tracing::debug!(items, consistent, took = ?began.elapsed(), "discovery scan");
                self.shared.metrics.scans.inc();
                if !self.readiness.scanned.swap(true, Ordering::Relaxed) {
                    tracing::info!(streams = items, "first discovery scan done; ready");
                }
                self.acquire_round().await
            }
            Err(e) => {
                self.core.on_scan_failed(began.elapsed());
                tracing::warn!(error = %e, "discovery scan failed");
                false
            }
        }
    }

    /// Asks the core for a round on the current view and performs it: forget drained owners,
    /// acquire, bid, release. Returns true when candidates remained that this worker wanted.
    async fn acquire_round(&mut self) -> bool {
        let owned: HashMap<String, bool> = self
            .owned
            .iter()
            .map(|(id, o)| (id.clone(), o.releasing))
            .collect();
        self.core.on_write_window(self.shared.table.write_window());
        let round = self
            .core
            .round(&owned, lease_table::now_ms(), Instant::now());
        self.publish_gauges(&round);
        if !round.forget_draining.is_empty() {
            tracing::debug!(gone = ?round.forget_draining, "forgetting drained owners in the fleet signal");
            let table = self.shared.table.clone();
            let gone = round.forget_draining.clone();
            tokio::spawn(async move { table.fleet_forget(&gone, FLEET_TIMEOUT).await });
        }
        if !round.forget_members.is_empty() {
            tracing::debug!(gone = ?round.forget_members, "deleting members gone for long");
            let table = self.shared.table.clone();
            let gone = round.forget_members.clone();
            tokio::spawn(async move {
                for (owner, expires_at) in gone {
                    let _ = table.forget_member(&owner, expires_at, FLEET_TIMEOUT).await;
                }
            });
        }
        let held_before = self.owned.len();
        let raced = self.acquire_all(&round.acquire).await;
        tracing::debug!(
            held_before,
            held = self.owned.len(),
            share = round.gauges.fair_share,
            live_owners = round.gauges.live_owners,
            unowned = round.gauges.unowned,
            tried = round.acquire.len(),
            raced,
            write_window = self.shared.table.write_window(),
            "acquire round"
        );
        if let Some(stream_id) = &round.bid {
            tracing::debug!(%stream_id, target = round.gauges.fair_share, owned = self.owned.len(), "starved below the fair share; bidding");
            match self.shared.table.bid(stream_id, AWS_CALL_TIMEOUT).await {
                Ok(Outcome::Done(())) => {
                    if let Some(membership) = &mut self.membership {
                        let held = self.owned.len();
                        membership
                            .on_bid(
                                &self.shared.table,
                                &self.core,
                                held,
                                stream_id,
                                FLEET_TIMEOUT,
                            )
                            .await;
                    }
                }
                Ok(Outcome::Refused { .. }) => {}
                Err(e) => tracing::warn!(%stream_id, error = %e, "bid failed"),
            }
        }
        if let Some(membership) = &mut self.membership {
            // Segmented: free streams pointed out ride with the next heartbeat; who takes
            // each shed stream is written now, before the releases (the named members read it
            // after the signal announces them).
            membership.point(round.pointers.clone());
            if !round.handoffs.is_empty() {
                let held = self.owned.len();
                membership
                    .on_handoff(
                        &self.shared.table,
                        &self.core,
                        held,
                        round.handoffs.clone(),
                        FLEET_TIMEOUT,
                    )
                    .await;
            }
        }
        for (stream_id, reason) in &round.release {
            self.release_one(stream_id, *reason);
        }
        let owned: HashSet<String> = self.owned.keys().cloned().collect();
        self.core
            .finish_round(&round, raced, &owned, lease_table::now_ms(), Instant::now())
    }

    fn publish_gauges(&self, round: &Round) {
        let metrics = &self.shared.metrics;
        let g = round.gauges;
        metrics.table_streams.set(g.table_streams as i64);
        metrics.live_owners.set(g.live_owners as i64);
        metrics
            .fair_share
            .set(g.fair_share.min(i64::MAX as usize) as i64);
        metrics.unowned_streams.set(g.unowned as i64);
        metrics
            .write_window
            .set(self.shared.table.write_window() as i64);
        let before = metrics.duplicate_owners.set(g.duplicate_owners as i64);
        if g.duplicate_owners > 0 && before == 0 {
            tracing::error!(owner_id = %self.shared.owner_id, instance = %self.shared.table.instance(), other_processes = g.duplicate_owners, "another live process holds leases under this worker's OWNER_ID: ids must be unique per process (see the worker README, Policies: Owner id); its leases are left alone, not taken back and forth");
        } else if g.duplicate_owners == 0 && before > 0 {
            tracing::info!(owner_id = %self.shared.owner_id, "no other live process holds leases under this OWNER_ID any more");
        }
    }

    /// Tries every stream in `streams` at once; returns true when any race was lost or any
    /// acquire's outcome is unknown.
    async fn acquire_all(&mut self, streams: &[Attempt]) -> bool {
        if streams.is_empty() {
            return false;
        }
        let lease = self.config.lease;
        // Each stream starts as soon as its own acquire is answered, not when the slowest of
        // the round is.
        let mut pending: FuturesUnordered<_> = streams
            .iter()
            .map(|attempt| {
                let table = self.shared.table.clone();
                let Attempt { stream_id, seen } = attempt.clone();
                async move {
                    let started = (Instant::now(), lease_table::now_ms());
                    let result = table
                        .acquire(&stream_id, lease, seen.as_ref(), ACQUIRE_TIMEOUT)
                        .await;
                    (stream_id, started, result)
                }
            })
            .collect();
        let mut raced = false;
        self.acquiring
            .extend(streams.iter().map(|a| a.stream_id.clone()));
        while let Some((stream_id, started, result)) = pending.next().await {
            self.acquiring.remove(&stream_id);
            match result {
                Ok(Outcome::Done(item)) => self.start(item, started),
                Ok(Outcome::Refused { current }) => {
                    raced = true;
                    tracing::debug!(%stream_id, holder = ?current.as_ref().and_then(|c| c.owner_id.clone()), "acquire refused");
                    self.core.on_refused(current, Instant::now());
                }
                // A timed-out or dropped acquire may still have been written: the table may now
                // name this worker with a lease nobody serves. Like a lost race, it makes the view
                // stale, so the next round comes soon with a consistent scan, which offers a
                // stream naming this worker again (the acquire's condition admits its owner).
                // Never sent (the congestion window had no room): nothing was written. The
                // view is as stale as after a lost race, nothing more.
                Err(e @ CallError::Queued { .. }) => {
                    raced = true;
                    tracing::debug!(%stream_id, error = %e, "acquire not sent");
                }
                Err(e) => {
                    raced = true;
                    self.core.on_unconfirmed(&stream_id, Instant::now());
                    tracing::warn!(%stream_id, error = %e, "acquire failed; its outcome is unknown, rescanning soon");
                }
            }
        }
        raced
    }

    fn start(&mut self, item: LeaseItem, (started, started_unix_ms): (Instant, i64)) {
        let fence = item.fence_token.unwrap_or(0);
        let stream_id = item.stream_id.clone();
        if !self.core.on_acquired(item.clone(), Instant::now()) {
            tracing::error!(%stream_id, fence_token = fence, "acquired with a fence token not above one seen before (was the table restored?); not publishing with it");
            return;
        }
        let acquired = Acquired {
            stream_id: stream_id.clone(),
            fence,
            checkpoint: item.checkpoint.unwrap_or(0),
            started,
            started_unix_ms,
            expires: item
                .lease_expires_at
                .unwrap_or(started_unix_ms + self.config.lease.as_millis() as i64),
            answered: Instant::now(),
        };
        self.shared.metrics.acquisitions.inc();
        let (control, rx) = watch::channel(Control::Run);
        let shared = self.shared.clone();
        self.tasks.spawn(async move {
            let run = std::panic::AssertUnwindSafe(stream::run_stream(shared.clone(), acquired, rx));
            match run.catch_unwind().await {
                Ok(exit) => (stream_id, exit),
                Err(_) => {
                    tracing::error!(%stream_id, "stream task panicked; it stopped publishing and its lease will expire");
                    shared.metrics.untrack_stream(&stream_id);
                    (stream_id, Exit::Panicked)
                }
            }
        });
        self.owned.insert(
            item.stream_id,
            Owned {
                control,
                releasing: false,
            },
        );
        self.shared
            .metrics
            .owned_streams
            .set(self.owned.len() as i64);
    }

    fn release_one(&mut self, stream_id: &str, reason: ReleaseReason) {
        let Some(owned) = self.owned.get_mut(stream_id) else {
            return;
        };
        owned.releasing = true;
        let by = Instant::now() + self.config.drain.min(self.config.lease / 2);
        let _ = owned.control.send(Control::Release {
            by,
            reason: reason.as_str(),
        });
        match reason {
            ReleaseReason::Shed => {
                tracing::info!(%stream_id, "shedding a stream above the fair share")
            }
            ReleaseReason::Bid => {
                tracing::info!(%stream_id, "handing a stream over to a bidder holding two fewer")
            }
        }
    }

    fn on_exit(&mut self, joined: Result<(String, Exit), tokio::task::JoinError>) {
        match joined {
            Ok((stream_id, exit)) => {
                self.owned.remove(&stream_id);
                tracing::debug!(%stream_id, ?exit, "stream task ended");
                if exit == Exit::Released {
                    // A shed or a hand-over: tell the others (a starved bidder is waiting for exactly this).
                    self.announce_release();
                } else {
                    self.core.on_unconfirmed(&stream_id, Instant::now());
                }
            }
            Err(e) => tracing::error!(error = %e, "a stream task was cancelled"),
        }
        self.shared
            .metrics
            .owned_streams
            .set(self.owned.len() as i64);
    }
}

mod drain;
