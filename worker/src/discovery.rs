//! Discovery and acquisition: the supervisor loop that scans the table, asks [`decide::plan`]
//! what to do, acquires streams, spawns their runners, sheds excess, and (in expiry-aware mode)
//! wakes up right when a watched lease expires instead of at the next scan.
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

use crate::config::{AcquireMode, Config};
use crate::decide::{self, Bid, FenceBook, PlanLimits};
use crate::http::Readiness;
use crate::stream::{self, Acquired, Control, Exit, Shared, AWS_CALL_TIMEOUT};

/// At most this many acquisitions (and sheds) in a first round, so a cold start spreads.
pub const PER_ROUND: usize = 8;
/// The ceiling of the per-round ramp (see `Supervisor::per_round`).
pub const MAX_PER_ROUND: usize = 64;
/// While below the fair share with candidates left, the next round comes this soon.
pub const FAST_RESCAN: Duration = Duration::from_millis(250);
/// The shortest wait before a hurried rescan (see `Supervisor::rescan_delay`).
pub const MIN_RESCAN: Duration = Duration::from_millis(20);
/// Rounds planned on the last scan's view (its candidates, corrected by refused acquires) before
/// a hurried worker scans again. A scan costs the table a read of every item, and a cold start of
/// W workers rescanning every 250 ms costs W × 4 full reads a second: 20 workers on 2,000 streams
/// is more than one DynamoDB Local answers, so hurried rounds reuse the view instead.
pub const VIEW_ROUNDS: u32 = 4;
/// An acquire may take this long. A timed-out acquire may still have been written; its outcome
/// is unknown, so it counts as a lost race: a consistent rescan follows almost at once and, if the
/// item names this worker, takes the lease back.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// Each scan page may take this long.
pub const SCAN_PAGE_TIMEOUT: Duration = Duration::from_secs(5);
// How often the fleet signal is read is `FLEET_POLL_MS` (±10 %; default 50 ms: 72,000
// eventually consistent `GetItem`s per worker-hour, 0.5 read request unit each, whatever the
// table size). Not polled when `SCAN_SECONDS` is that short anyway, nor in `ACQUIRE_MODE=poll`.
/// How often the fleet signal is read while some owner is marked draining (a rolling deploy):
/// its releases are announced within the drain, and seeing them sooner is the handoff time.
/// 33 reads/s per worker, for the few seconds a deploy lasts.
pub const FLEET_POLL_DRAINING: Duration = Duration::from_millis(30);
/// A fleet read or bump may take this long.
pub const FLEET_TIMEOUT: Duration = Duration::from_secs(1);

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
    known: Vec<LeaseItem>,
    bids: Vec<Bid>,
    fences: FenceBook,
    /// Streams this worker shed or handed over, with when and under which fence: not taken
    /// back for two scan intervals, unless someone else has held them since (a higher fence).
    recently_shed: HashMap<String, (Instant, u64)>,
    next_watch_ms: Option<i64>,
    /// Acquisitions allowed in the next round: [`PER_ROUND`], doubled after each round that
    /// took its fill and left candidates behind (a cold start fills a large share in a few
    /// rounds instead of share / 8), back to [`PER_ROUND`] once a round wants nothing more.
    per_round: usize,
    /// Hurried rounds planned on the current view since the last scan.
    view_rounds: u32,
    /// Whether the last round lost an acquire race (its view is stale).
    raced: bool,
    /// How long the last scan took: a hurried rescan waits at least it × live owners × 2, so
    /// that the fleet's scans together keep the table at most half busy however large it is.
    last_scan_took: Duration,
    /// Live owners in the last plan (this worker included).
    live_owners: usize,
    /// Last fleet generation read (`None` before the first read).
    fleet_generation: Option<u64>,
    /// Owners the fleet signal names as draining (never this worker while it runs).
    draining_owners: HashSet<String>,
    /// Owners seen with a lapsed lease (dead, or paused past their lease), with the Unix ms at
    /// which they were first seen so: not live owners until they hold nothing any more, or
    /// renew a lease past that moment (a resumed owner).
    lapsed_owners: HashMap<String, i64>,
}

impl Supervisor {
    /// A supervisor with nothing owned yet.
    pub fn new(shared: Arc<Shared>, config: Arc<Config>, readiness: Arc<Readiness>) -> Self {
        Supervisor {
            shared,
            config,
            readiness,
            owned: HashMap::new(),
            tasks: JoinSet::new(),
            known: Vec::new(),
            bids: Vec::new(),
            fences: FenceBook::default(),
            recently_shed: HashMap::new(),
            next_watch_ms: None,
            per_round: PER_ROUND,
            view_rounds: 0,
            raced: false,
            last_scan_took: Duration::ZERO,
            live_owners: 1,
            fleet_generation: None,
            draining_owners: HashSet::new(),
            lapsed_owners: HashMap::new(),
        }
    }

    fn limits(&self) -> PlanLimits {
        // Once a scan has shown other owners, the share is the fleet's and the ramp (which is
        // there to spread a cold start) only slows a takeover down.
        let per_round = if self.live_owners > 1 {
            MAX_PER_ROUND
        } else {
            self.per_round
        };
        PlanLimits {
            max_streams: self.config.max_streams,
            per_round,
            skew_ms: self.config.skew_margin.as_millis() as i64,
        }
    }

    fn jittered(&self, base: Duration) -> Duration {
        // ±10 % so that workers started together do not scan in lockstep.
        base.mul_f64(0.9 + 0.2 * rand::random::<f64>())
    }

    /// Scans and acquires until `shutdown` resolves, then drains every stream within the drain
    /// budget. Returns the number of streams whose release could not be confirmed.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) -> usize {
        tokio::pin!(shutdown);
        let mut next_scan = Instant::now();
        let fleet_poll = self.config.fleet_poll;
        let fleet_polling = self.config.acquire_mode == AcquireMode::ExpiryAware
            && !fleet_poll.is_zero()
            && self.config.scan > fleet_poll;
        let mut next_fleet = Instant::now();
        loop {
            let watch_at = match (self.config.acquire_mode, self.next_watch_ms) {
                (AcquireMode::ExpiryAware, Some(ms)) => {
                    let wait = (ms - lease_table::now_ms()).max(0) as u64;
                    Some(Instant::now() + Duration::from_millis(wait))
                }
                _ => None,
            };
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep_until(next_scan) => {
                    let next = self.hurried_round().await;
                    next_scan = Instant::now() + self.jittered(next);
                }
                _ = tokio::time::sleep_until(next_fleet), if fleet_polling => {
                    if self.fleet_changed().await {
                        // Streams were (or are about to be) released: look now, consistently,
                        // so the scan cannot miss a release that the signal already announced.
                        let hurry = self.scan_round(true).await;
                        let next = self.after_scan(hurry);
                        next_scan = Instant::now() + self.jittered(next);
                    }
                    let every = if self.draining_owners.is_empty() { fleet_poll } else { fleet_poll.min(FLEET_POLL_DRAINING) };
                    next_fleet = Instant::now() + self.jittered(every);
                }
                _ = tokio::time::sleep_until(watch_at.unwrap_or(far)), if watch_at.is_some() => {
                    if self.acquire_round().await {
                        let soon = if self.raced {
                            self.view_rounds = 0;
                            self.rescan_delay(true)
                        } else {
                            FAST_RESCAN.min(self.config.scan)
                        };
                        next_scan = next_scan.min(Instant::now() + self.jittered(soon));
                    }
                }
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => self.on_exit(joined),
            }
        }
        self.drain().await
    }

    /// Reads the fleet signal; true when its generation or draining set changed since the last
    /// read (the first read only records it). Clears a stale draining mark of this worker (a
    /// previous process with the same `OWNER_ID` killed mid-drain).
    async fn fleet_changed(&mut self) -> bool {
        let signal = match self.shared.table.fleet_read(FLEET_TIMEOUT).await {
            Ok(signal) => signal,
            Err(e) => {
                tracing::debug!(error = %e, "fleet signal read failed");
                return false;
            }
        };
        let me = &*self.shared.owner_id;
        let first = self.fleet_generation.is_none();
        let draining: HashSet<String> = signal
            .draining
            .into_iter()
            .filter(|owner| {
                if owner == me && first {
                    let table = self.shared.table.clone();
                    tokio::spawn(async move { table.fleet_bump(Some(false), FLEET_TIMEOUT).await });
                }
                owner != me
            })
            .collect();
        let changed =
            self.fleet_generation != Some(signal.generation) || self.draining_owners != draining;
        if changed {
            tracing::debug!(
                generation = signal.generation,
                draining = draining.len(),
                "fleet signal changed"
            );
        }
        self.fleet_generation = Some(signal.generation);
        self.draining_owners = draining;
        changed && !first
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

    /// The scheduled round: a scan, or while hurrying with a usable view, a round on that
    /// view. Returns the time until the next one.
    async fn hurried_round(&mut self) -> Duration {
        if self.view_rounds > 0 && self.view_rounds <= VIEW_ROUNDS {
            let hurry = self.acquire_round().await;
            if hurry && !self.raced && self.view_rounds < VIEW_ROUNDS {
                self.view_rounds += 1;
                return FAST_RESCAN.min(self.config.scan);
            }
            self.view_rounds = 0;
            return self.rescan_delay(hurry);
        }
        // After a lost race the view is stale where it matters: read what the winners wrote.
        let hurry = self.scan_round(self.raced).await;
        self.after_scan(hurry)
    }

    /// After a scan round: when hurrying only because the round's cap left candidates (no race
    /// lost) and the scan saw other owners (so the share it planned with is the fleet's, not a
    /// lone worker's), the next rounds reuse its view; after a lost race, a fresh scan.
    fn after_scan(&mut self, hurry: bool) -> Duration {
        if hurry && !self.raced && self.live_owners > 1 {
            self.view_rounds = 1;
            return FAST_RESCAN.min(self.config.scan);
        }
        self.view_rounds = 0;
        self.rescan_delay(hurry)
    }

    /// Until the next scan: the scan interval, or when hurrying, live owners × 2 × the last
    /// scan's time (at least [`MIN_RESCAN`]): each worker's scans then take at most a
    /// 1 / (2 × owners) share of the table's time, so all of them together at most half of it,
    /// whatever the table's size. 120 streams: ~40 ms; 2,000 streams and 20 workers: ~2.5 s.
    fn rescan_delay(&self, hurry: bool) -> Duration {
        if !hurry {
            return self.config.scan;
        }
        MIN_RESCAN
            .max(self.last_scan_took * self.live_owners.min(1000) as u32 * 2)
            .min(self.config.scan)
    }

    /// One discovery scan and acquisition round. Returns true when another round should follow soon.
    async fn scan_round(&mut self, consistent: bool) -> bool {
        let began = Instant::now();
        let scanned = self.shared.table.scan(SCAN_PAGE_TIMEOUT, consistent).await;
        self.last_scan_took = began.elapsed();
        match scanned {
            Ok(view) => {
                if !self.readiness.scanned.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        streams = view.items.len(),
                        "first discovery scan done; ready"
                    );
                }
                self.known = view.items;
                self.bids = view.bids;
                self.acquire_round().await
            }
            Err(e) => {
                tracing::warn!(error = %e, "discovery scan failed");
                false
            }
        }
    }

    /// Plans on the current view and acts: acquire, shed, set the next watch. Returns true when
    /// candidates remained that this worker wanted (so a quick rescan is worth it).
    async fn acquire_round(&mut self) -> bool {
        let now_ms = lease_table::now_ms();
        let owned: HashSet<String> = self.owned.keys().cloned().collect();
        let me = self.shared.owner_id.clone();
        let fresh = now_ms - self.config.lease.as_millis() as i64;
        // Draining (and drained) owners are leaving: neither their leases nor their last bids
        // make them live owners. A drained one that holds nothing and bids nothing any more is
        // forgotten, so the set stays small.
        let gone: Vec<String> = self
            .draining_owners
            .iter()
            .filter(|owner| {
                let holds = self.known.iter().any(|i| {
                    i.owner_id.as_deref() == Some(owner.as_str())
                        && i.lease_expires_at.is_some_and(|t| t >= now_ms)
                });
                let bids = self
                    .bids
                    .iter()
                    .any(|b| b.bidder == **owner && b.at >= fresh);
                !holds && !bids
            })
            .cloned()
            .collect();
        if !gone.is_empty() {
            tracing::debug!(?gone, "forgetting drained owners in the fleet signal");
            for owner in &gone {
                self.draining_owners.remove(owner);
            }
            let table = self.shared.table.clone();
            tokio::spawn(async move { table.fleet_forget(&gone, FLEET_TIMEOUT).await });
        }
        let bids: Vec<Bid> = self
            .bids
            .iter()
            .filter(|b| b.at >= fresh && *b.bidder != *me)
            .cloned()
            .collect();
        // Lapsed owners stay out of the live count for at least one lease and while they hold
        // anything, unless they renewed after they were seen lapsed (a paused owner that resumed
        // in time for some of its leases). "Hold" uses the plan's own test, expiry + skew: an
        // owner whose last lease has just expired but is inside the skew margin counts live in
        // the plan, so forgetting it then would shrink the share at the end of a takeover.
        let lease_ms = self.config.lease.as_millis() as i64;
        let cutoff = now_ms - self.limits().skew_ms;
        let known = &self.known;
        self.lapsed_owners.retain(|owner, seen| {
            let mut holds = false;
            for item in known
                .iter()
                .filter(|i| i.owner_id.as_deref() == Some(owner))
            {
                match item.lease_expires_at {
                    Some(t) if t > *seen + lease_ms => return false,
                    Some(t) if t >= cutoff => holds = true,
                    _ => {}
                }
            }
            holds || now_ms - *seen < lease_ms
        });
        let mut leaving = self.draining_owners.clone();
        leaving.extend(self.lapsed_owners.keys().cloned());
        let plan = decide::plan(
            &self.known,
            &bids,
            &leaving,
            &me,
            &owned,
            now_ms,
            self.limits(),
        );

        for owner in &plan.lapsed {
            self.lapsed_owners.entry(owner.clone()).or_insert(now_ms);
        }
        let metrics = &self.shared.metrics;
        metrics.table_streams.set(self.known.len() as i64);
        metrics.live_owners.set(plan.live_owners as i64);
        self.live_owners = plan.live_owners;
        metrics
            .fair_share
            .set(plan.target.min(i64::MAX as usize) as i64);
        let cutoff = now_ms - self.limits().skew_ms;
        let unowned = self
            .known
            .iter()
            .filter(|i| !owned.contains(&i.stream_id))
            .filter(|i| i.owner_id.is_none() || i.lease_expires_at.is_none_or(|t| t < cutoff))
            .count();
        metrics.unowned_streams.set(unowned as i64);

        let now = Instant::now();
        let cooldown = self.config.scan * 2;
        let known = &self.known;
        self.recently_shed.retain(|stream_id, (at, fence)| {
            let taken_since = known
                .iter()
                .find(|i| i.stream_id == *stream_id)
                .is_some_and(|i| i.fence_token.unwrap_or(0) > *fence);
            now.duration_since(*at) < cooldown && !taken_since
        });
        let attempts: Vec<String> = plan
            .acquire
            .into_iter()
            .filter(|s| !self.recently_shed.contains_key(s))
            .collect();
        let raced = self.acquire_all(&attempts).await;
        if let Some(stream_id) = &plan.bid {
            tracing::debug!(%stream_id, target = plan.target, owned = self.owned.len(), "starved below the fair share; bidding");
            if let Err(e) = self.shared.table.bid(stream_id, AWS_CALL_TIMEOUT).await {
                tracing::warn!(%stream_id, error = %e, "bid failed");
            }
        }

        let releasing = self.owned.values().filter(|o| o.releasing).count();
        let want = plan.shed.len().saturating_sub(releasing);
        let shed: Vec<String> = plan
            .shed
            .into_iter()
            .filter(|s| self.owned.get(s).is_some_and(|o| !o.releasing))
            .take(want)
            .collect();
        for stream_id in shed {
            let reason = if plan.honoured.contains(&stream_id) {
                "bid"
            } else {
                "shed"
            };
            self.release_one(&stream_id, reason);
        }

        // After the acquires: a refusal brought back the lease as it is now (renewed since the
        // scan, or just taken by a competitor), and that expiry is the one to watch.
        let owned: HashSet<String> = self.owned.keys().cloned().collect();
        self.next_watch_ms = decide::next_watch(
            &self.known,
            &me,
            &owned,
            lease_table::now_ms(),
            self.limits().skew_ms,
        );
        self.raced = raced;
        let filled = attempts.len() >= self.per_round && !raced;
        let hurry = (plan.deferred > 0 || raced) && self.owned.len() < plan.target;
        self.per_round = if hurry && filled {
            (self.per_round * 2).min(MAX_PER_ROUND)
        } else if hurry {
            self.per_round
        } else {
            PER_ROUND
        };
        hurry
    }

    /// Tries every stream in `streams` at once; returns true when any race was lost or any
    /// acquire's outcome is unknown.
    async fn acquire_all(&mut self, streams: &[String]) -> bool {
        if streams.is_empty() {
            return false;
        }
        let lease = self.config.lease;
        let skew = self.config.skew_margin;
        // Each stream starts as soon as its own acquire is answered, not when the slowest of
        // the round is.
        let mut pending: FuturesUnordered<_> = streams
            .iter()
            .map(|stream_id| {
                let table = self.shared.table.clone();
                let stream_id = stream_id.clone();
                async move {
                    let started = (Instant::now(), lease_table::now_ms());
                    let result = table
                        .acquire(&stream_id, lease, skew, ACQUIRE_TIMEOUT)
                        .await;
                    (stream_id, started, result)
                }
            })
            .collect();
        let mut raced = false;
        while let Some((stream_id, started, result)) = pending.next().await {
            match result {
                Ok(Outcome::Done(item)) => self.start(item, started),
                Ok(Outcome::Refused { current }) => {
                    raced = true;
                    tracing::debug!(%stream_id, holder = ?current.as_ref().and_then(|c| c.owner_id.clone()), "acquire refused");
                    if let Some(current) = current {
                        self.remember(current);
                    }
                }
                // A timed-out or dropped acquire may still have been written: the table may now
                // name this worker with a lease nobody serves. Like a lost race, it makes the view
                // stale, so the next round comes soon with a consistent scan, which offers a
                // stream naming this worker again (the acquire's condition admits its owner).
                Err(e) => {
                    raced = true;
                    tracing::warn!(%stream_id, error = %e, "acquire failed; its outcome is unknown, rescanning soon");
                }
            }
        }
        raced
    }

    fn remember(&mut self, item: LeaseItem) {
        match self
            .known
            .iter_mut()
            .find(|k| k.stream_id == item.stream_id)
        {
            Some(slot) => *slot = item,
            None => self.known.push(item),
        }
    }

    fn start(&mut self, item: LeaseItem, (started, started_unix_ms): (Instant, i64)) {
        let fence = item.fence_token.unwrap_or(0);
        let stream_id = item.stream_id.clone();
        self.remember(item.clone());
        if !self.fences.admit(&stream_id, fence) {
            tracing::error!(%stream_id, fence_token = fence, "acquired with a fence token not above one seen before (was the table restored?); not publishing with it");
            return;
        }
        let acquired = Acquired {
            stream_id: stream_id.clone(),
            fence,
            checkpoint: item.checkpoint.unwrap_or(0),
            started,
            started_unix_ms,
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

    fn release_one(&mut self, stream_id: &str, reason: &'static str) {
        let Some(owned) = self.owned.get_mut(stream_id) else {
            return;
        };
        owned.releasing = true;
        let by = Instant::now() + self.config.drain.min(self.config.lease / 2);
        let _ = owned.control.send(Control::Release { by, reason });
        match reason {
            "shed" => tracing::info!(%stream_id, "shedding a stream above the fair share"),
            "bid" => {
                tracing::info!(%stream_id, "handing a stream over to a bidder holding two fewer")
            }
            _ => return,
        }
        let fence = self
            .known
            .iter()
            .find(|i| i.stream_id == stream_id)
            .and_then(|i| i.fence_token)
            .unwrap_or(0);
        self.recently_shed
            .insert(stream_id.to_string(), (Instant::now(), fence));
    }

    fn on_exit(&mut self, joined: Result<(String, Exit), tokio::task::JoinError>) {
        match joined {
            Ok((stream_id, exit)) => {
                self.owned.remove(&stream_id);
                tracing::debug!(%stream_id, ?exit, "stream task ended");
                if exit == Exit::Released {
                    // A shed or a hand-over: tell the others (a starved bidder is waiting for exactly this).
                    self.announce_release();
                }
            }
            Err(e) => tracing::error!(error = %e, "a stream task was cancelled"),
        }
        self.shared
            .metrics
            .owned_streams
            .set(self.owned.len() as i64);
    }

    /// Drain: stop acquiring, ask every stream to flush and release, wait up to the budget.
    async fn drain(mut self) -> usize {
        self.readiness.draining.store(true, Ordering::Relaxed);
        let budget = self.config.drain;
        let deadline = Instant::now() + budget;
        // Leave a little of the budget for the release writes themselves.
        let by = Instant::now() + budget.mul_f64(0.8);
        tracing::info!(
            streams = self.owned.len(),
            budget_ms = budget.as_millis() as u64,
            "draining"
        );
        for owned in self.owned.values_mut() {
            owned.releasing = true;
            let _ = owned.control.send(Control::Release {
                by,
                reason: "drain",
            });
        }
        // While the streams flush: tell the fleet this worker is draining, so the others stop
        // counting it as a live owner (their share grows to cover its streams) and look at once.
        // (Even with nothing owned: a starved worker's last bids would otherwise count it live.)
        self.fleet_bump(Some(true), deadline).await;
        let mut unconfirmed = 0;
        let mut unannounced = 0;
        loop {
            let joined = tokio::time::timeout_at(deadline, self.tasks.join_next()).await;
            let mut batch = match joined {
                Ok(Some(first)) => vec![first],
                Ok(None) => break,
                Err(_) => {
                    unconfirmed += self.tasks.len();
                    tracing::error!(
                        left = self.tasks.len(),
                        "drain budget exhausted; leaving the rest to expire"
                    );
                    self.tasks.abort_all();
                    break;
                }
            };
            // Streams flush at about the same time: announce their releases together.
            while let Some(more) = self.tasks.try_join_next() {
                batch.push(more);
            }
            for joined in batch {
                match joined {
                    Ok((stream_id, exit)) => {
                        self.owned.remove(&stream_id);
                        if exit == Exit::Released {
                            unannounced += 1;
                        } else {
                            unconfirmed += 1;
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "a stream task was cancelled while draining");
                        unconfirmed += 1;
                    }
                }
            }
            if unannounced > 0 && !self.tasks.is_empty() {
                self.fleet_bump(None, deadline).await;
                unannounced = 0;
            }
        }
        if unannounced > 0 {
            // The last releases. The draining mark stays: this worker's last bids may still
            // look fresh; the others forget it once it holds and bids nothing.
            self.fleet_bump(None, deadline + Duration::from_millis(500))
                .await;
        }
        self.shared.metrics.owned_streams.set(0);
        unconfirmed
    }

    /// One fleet signal write during drain, bounded by `deadline` (a failure only costs speed:
    /// the others still find the released streams at their next scan).
    async fn fleet_bump(&self, draining: Option<bool>, deadline: Instant) {
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = FLEET_TIMEOUT.min(left).max(Duration::from_millis(100));
        if let Err(e) = self.shared.table.fleet_bump(draining, timeout).await {
            tracing::warn!(error = %e, "fleet signal write failed; others find the released streams at their next scan");
        }
    }
}
