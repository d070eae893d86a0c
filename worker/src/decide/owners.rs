//! The supervisor's state across rounds, without I/O: which other owners are live, lapsed or
//! draining, which streams this worker shed recently, how many acquisitions a round may make
//! (the ramp), when to scan again, when a watched lease is worth trying, and which fence tokens
//! were seen.
//!
//! [`Supervision`] is a state value; its methods take what the loop observed (a scan, an
//! acquire's answer, a fleet signal read) and the time (`Instant` and Unix ms, passed in), and
//! return what to do (a [`Round`]: acquire these, release those, bid on that; a delay; an instant
//! to wake at). `discovery` performs those actions and reports back. Nothing here reads a clock,
//! sleeps or touches the network, so the invariants are property-tested on a virtual clock.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use lease_table::members::Member;
use lease_table::LeaseItem;
/// The fleet signal's read budget, which [`super::fleet_poll_for`] keeps to.
pub use lease_table::FLEET_READS_PER_SECOND;

use super::round::*;
use tokio::time::Instant;

use super::items::{instance_alias, is_instance_alias, ItemState};
use super::plan::{self, Bid, PlanLimits, Unchanged};
use super::stream::FenceBook;

/// At most this many acquisitions (and sheds) in a first round, so a cold start spreads.
pub const PER_ROUND: usize = 8;
/// The ceiling of the per-round ramp.
pub const MAX_PER_ROUND: usize = 64;
/// While below the fair share with candidates left, the next round comes this soon.
pub const FAST_RESCAN: Duration = Duration::from_millis(250);
/// The shortest wait before a hurried rescan (see [`Supervision::rescan_delay`]).
pub const MIN_RESCAN: Duration = Duration::from_millis(20);
/// Rounds planned on the last scan's view (its candidates, corrected by refused acquires) before
/// a hurried worker scans again. A scan costs the table a read of every item, and a cold start of
/// W workers rescanning every 250 ms costs W × 4 full reads a second: 20 workers on 2,000 streams
/// is more than one DynamoDB Local answers, so hurried rounds reuse the view instead.
pub const VIEW_ROUNDS: u32 = 4;
/// How often the fleet signal is read while some owner is marked draining (a rolling deploy):
/// its releases are announced within the drain, and seeing them sooner is the handoff time.
/// 33 reads/s per worker, for the few seconds a deploy lasts.
pub const FLEET_POLL_DRAINING: Duration = Duration::from_millis(30);

/// The supervisor's decisions and memory.
#[derive(Debug)]
pub struct Supervision {
    pub(super) settings: Settings,
    pub(super) me: String,
    known: Vec<LeaseItem>,
    bids: Vec<Bid>,
    fences: FenceBook,
    /// Each known item's state (owner, fence, expiry) and when, on the monotonic clock, it was
    /// first seen in it: skew-tolerant expiry judges "unchanged for long enough" from this.
    pub(super) seen: HashMap<String, (ItemState, Instant)>,
    /// Streams this worker does not take back until the instant given, unless someone else
    /// has held them since (a fence above the one given): those it shed or handed over (for two
    /// scan intervals), and those whose lease it lost, or whose acquire or release went
    /// unanswered (for a lease + the skew margin: its writes may be held somewhere and land
    /// late — an acquire sent now would extend a lease nobody serves, and the fleet would wait
    /// for it a second time).
    held_back: HashMap<String, (Instant, u64)>,
    next_watch_ms: Option<i64>,
    /// Acquisitions allowed in the next round: [`PER_ROUND`], doubled after each round that
    /// took its fill and left candidates behind (a cold start fills a large share in a few
    /// rounds instead of share / 8), back to [`PER_ROUND`] once a round wants nothing more.
    per_round: usize,
    /// Hurried rounds planned on the current view since the last scan.
    pub(super) view_rounds: u32,
    /// Whether the last round lost an acquire race (its view is stale).
    pub(super) raced: bool,
    /// How long the last scan took (see [`Supervision::rescan_delay`]).
    pub(super) last_scan_took: Duration,
    /// Live owners in the last plan (this worker included).
    pub(super) live_owners: usize,
    /// The other live owners in the last plan: the herd for an expiring stream.
    pub(super) contenders: Vec<String>,
    /// Last fleet generation read (`None` before the first read).
    fleet_generation: Option<u64>,
    /// Owners the fleet signal names as draining (never this worker while it runs).
    pub(super) draining_owners: HashSet<String>,
    /// Owners seen with a lapsed lease (dead, or paused past their lease), with the Unix ms at
    /// which they were first seen so: not live owners until they hold nothing any more, or
    /// renew a lease past that moment (a resumed owner).
    lapsed_owners: HashMap<String, i64>,
    /// This process's instance id (`owner_instance` on what it acquires), when it writes one.
    /// An item naming `me` under another instance belongs to another process with the same
    /// `OWNER_ID` (or to this worker's previous run): planned as another owner's, taken only
    /// once judged dead, by compare-and-swap.
    instance: Option<String>,
    /// Lease requests the worker may have in flight now (its congestion window): a round
    /// sends no more acquires than that, the rest wait for the next round.
    write_window: usize,
    /// Segmented discovery: the membership table as last read (`None` in full discovery).
    pub(super) members: Option<Vec<Member>>,
    /// Segmented discovery: lease items in this worker's own segment at its last scan.
    pub(super) segment_items: usize,
    /// Segmented discovery: scans made, which picks the rotating segment.
    pub(super) scan_turn: u64,
    /// Segmented discovery: the number of segments of the last scan.
    pub(super) segments_scanned: usize,
    /// Segmented discovery: this worker's last bid (stream, Unix ms). The stream may lie
    /// outside the segments it reads next, so it is read on its own while the bid is fresh.
    pub(super) my_bid: Option<(String, i64)>,
}

impl Supervision {
    /// A supervisor for owner `me` that has seen nothing yet.
    pub fn new(settings: Settings, me: &str) -> Self {
        Supervision {
            settings,
            me: me.to_string(),
            known: Vec::new(),
            bids: Vec::new(),
            fences: FenceBook::default(),
            seen: HashMap::new(),
            held_back: HashMap::new(),
            next_watch_ms: None,
            per_round: PER_ROUND,
            view_rounds: 0,
            raced: false,
            last_scan_took: Duration::ZERO,
            live_owners: 1,
            contenders: Vec::new(),
            fleet_generation: None,
            draining_owners: HashSet::new(),
            lapsed_owners: HashMap::new(),
            instance: None,
            write_window: usize::MAX,
            members: None,
            segment_items: 0,
            scan_turn: 0,
            segments_scanned: 0,
            my_bid: None,
        }
    }

    /// The same supervisor, for a process that writes `instance` with its acquires.
    pub fn with_instance(mut self, instance: &str) -> Self {
        self.instance = Some(instance.to_string());
        self
    }

    /// The instance id of another process under this worker's `OWNER_ID` that `item` names.
    fn foreign_instance<'a>(&self, item: &'a LeaseItem) -> Option<&'a str> {
        let mine = self.instance.as_deref()?;
        match (&item.owner_id, &item.owner_instance) {
            (Some(owner), Some(other)) if *owner == self.me && other != mine => Some(other),
            _ => None,
        }
    }

    /// The table as planned: an item held under this worker's id by another instance shows as
    /// held by [`instance_alias`] of it, another owner. The view itself, uncopied, when no item
    /// is (the usual case: this runs every round, over every stream).
    fn planned_view(&self) -> Cow<'_, [LeaseItem]> {
        if !self
            .known
            .iter()
            .any(|i| self.foreign_instance(i).is_some())
        {
            return Cow::Borrowed(&self.known);
        }
        self.known
            .iter()
            .map(|item| match self.foreign_instance(item) {
                Some(other) => LeaseItem {
                    owner_id: Some(instance_alias(&self.me, other)),
                    ..item.clone()
                },
                None => item.clone(),
            })
            .collect()
    }

    /// The congestion window of the worker's lease requests (see
    /// [`crate::decide::WriteWindow`]): caps the acquires of the next rounds.
    pub fn on_write_window(&mut self, window: usize) {
        self.write_window = window.max(1);
    }

    /// The settings decided with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The lease items as last seen (scan, corrected by acquire answers).
    pub fn known(&self) -> &[LeaseItem] {
        &self.known
    }

    /// Owners the fleet signal names as draining.
    pub fn draining_owners(&self) -> &HashSet<String> {
        &self.draining_owners
    }

    fn skew_ms(&self) -> i64 {
        self.settings.skew.as_millis() as i64
    }

    fn stale_ms(&self) -> i64 {
        (self.settings.lease + self.settings.skew).as_millis() as i64
    }

    /// How long each known item has been seen in its current state, at `now`.
    fn unchanged(&self, now: Instant) -> Unchanged {
        self.seen
            .iter()
            .map(|(id, (_, at))| (id.clone(), now.duration_since(*at).as_millis() as i64))
            .collect()
    }

    /// Records when each known item was first seen in its current state.
    fn observe(&mut self, now: Instant) {
        let mut seen = std::mem::take(&mut self.seen);
        let ids: HashSet<&str> = self.known.iter().map(|i| i.stream_id.as_str()).collect();
        seen.retain(|id, _| ids.contains(id.as_str()));
        for item in &self.known {
            let state = ItemState::of(item);
            match seen.get(&item.stream_id) {
                Some((s, _)) if *s == state => {}
                _ => {
                    seen.insert(item.stream_id.clone(), (state, now));
                }
            }
        }
        self.seen = seen;
    }

    fn limits(&self) -> PlanLimits {
        // Once a scan has shown other owners, the share is the fleet's and the ramp (which is
        // there to spread a cold start) only slows a takeover down.
        let per_round = if self.live_owners > 1 {
            MAX_PER_ROUND
        } else {
            self.per_round
        }
        .min(self.write_window);
        PlanLimits {
            max_streams: self.settings.max_streams,
            per_round,
            skew_ms: self.skew_ms(),
            quiet_ms: self.settings.quiet().as_millis() as i64,
            stale_ms: self.stale_ms(),
        }
    }

    /// A scan answered at `now` (`took` long) with these items and bids.
    pub fn on_scan(&mut self, items: Vec<LeaseItem>, bids: Vec<Bid>, took: Duration, now: Instant) {
        self.known = items;
        self.bids = bids;
        self.last_scan_took = took;
        self.observe(now);
    }

    /// A scan failed after `took`: the view stays as it was.
    pub fn on_scan_failed(&mut self, took: Duration) {
        self.last_scan_took = took;
    }

    /// Plans one round on the current view at (`now`, `now_ms`). `owned` maps each stream this
    /// worker runs to whether it is already being released.
    pub fn round(&mut self, owned: &HashMap<String, bool>, now_ms: i64, now: Instant) -> Round {
        let me = self.me.clone();
        let owned_set: HashSet<String> = owned.keys().cloned().collect();
        let fresh = now_ms - self.settings.lease.as_millis() as i64;
        // Draining (and drained) owners are leaving: neither their leases nor their last bids
        // make them live owners. A drained one that holds nothing and bids nothing any more is
        // forgotten, so the set stays small.
        let mut forget_draining: Vec<String> = self
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
        forget_draining.sort();
        for owner in &forget_draining {
            self.draining_owners.remove(owner);
        }
        let census = self.census(now_ms);
        let mut bids: Vec<Bid> = self
            .bids
            .iter()
            // This worker's own bids too: a stream released in answer to one is taken at once.
            .filter(|b| b.at >= fresh)
            .cloned()
            .collect();
        self.forget_lapsed(now_ms);
        let mut leaving = self.draining_owners.clone();
        leaving.extend(self.lapsed_owners.keys().cloned());
        if let Some(census) = &census {
            // Bids the members announce that this worker's segments do not show.
            for bid in &census.bids {
                if !bids
                    .iter()
                    .any(|b| b.stream_id == bid.stream_id && b.at >= bid.at)
                {
                    bids.retain(|b| b.stream_id != bid.stream_id);
                    bids.push(bid.clone());
                }
            }
            leaving.extend(census.draining.iter().cloned());
        }
        let limits = self.limits();
        let unchanged = self.unchanged(now);
        let known = &self.known;
        self.held_back.retain(|stream_id, (until, fence)| {
            let taken_since = known
                .iter()
                .find(|i| i.stream_id == *stream_id)
                .is_some_and(|i| i.fence_token.unwrap_or(0) > *fence);
            now < *until && !taken_since
        });
        let held_back: HashSet<String> = self.held_back.keys().cloned().collect();
        let view = self.planned_view();
        let plan = plan::plan(
            &view,
            &bids,
            &leaving,
            &me,
            &owned_set,
            &held_back,
            &unchanged,
            now_ms,
            limits,
            census.as_ref(),
        );
        for owner in &plan.lapsed {
            self.lapsed_owners.entry(owner.clone()).or_insert(now_ms);
        }
        self.live_owners = plan.live_owners;
        let duplicate_owners = plan
            .contenders
            .iter()
            .filter(|o| is_instance_alias(&me, o))
            .count();
        self.contenders = plan.contenders;
        let cutoff = now_ms - limits.skew_ms;
        let unowned = self
            .known
            .iter()
            .filter(|i| !owned.contains_key(&i.stream_id))
            .filter(|i| i.owner_id.is_none() || i.lease_expires_at.is_none_or(|t| t < cutoff))
            .count();
        let gauges = Gauges {
            table_streams: census.as_ref().map_or(self.known.len(), |c| c.streams),
            live_owners: plan.live_owners,
            fair_share: plan.target,
            unowned,
            duplicate_owners,
        };

        let acquire: Vec<Attempt> = plan
            .acquire
            .into_iter()
            .filter(|s| !self.held_back.contains_key(s))
            .map(|stream_id| {
                let seen = self
                    .known
                    .iter()
                    .find(|i| i.stream_id == stream_id)
                    .and_then(|i| {
                        // Held under this id by another instance: "ours" does not cover it.
                        let other = self.foreign_instance(i).is_some();
                        ItemState::of(i).held_by_other(&me, other)
                    });
                Attempt { stream_id, seen }
            })
            .collect();

        let releasing = owned.values().filter(|r| **r).count();
        let want = plan.shed.len().saturating_sub(releasing);
        let release: Vec<(String, ReleaseReason)> = plan
            .shed
            .into_iter()
            .filter(|s| owned.get(s).is_some_and(|r| !r))
            .take(want)
            .map(|s| {
                let reason = if plan.honoured.contains(&s) {
                    ReleaseReason::Bid
                } else {
                    ReleaseReason::Shed
                };
                (s, reason)
            })
            .collect();
        // Segmented: a shed stream goes to a member with room, named in this worker's
        // membership item; one with nobody to go to is kept (released unnamed, it would be
        // taken as a takeover, beyond a reader's share, and shed again).
        let mut release = release;
        let (handoffs, pointers) = match &census {
            Some(census) => {
                let shed: Vec<String> = release
                    .iter()
                    .filter(|(_, reason)| *reason == ReleaseReason::Shed)
                    .map(|(s, _)| s.clone())
                    .collect();
                let handoffs = census.handoffs(&me, &shed, false);
                release.retain(|(s, reason)| {
                    *reason != ReleaseReason::Shed || handoffs.iter().any(|(h, _)| h == s)
                });
                // Free streams this worker has no room for are pointed out the same way: the
                // member named reads each on its own and takes it if it still has room (a
                // free stream's readers may all be full; the rotating reader comes to its
                // segment only every few intervals).
                (handoffs, census.handoffs(&me, &plan.stranded, false))
            }
            None => (Vec::new(), Vec::new()),
        };
        let cooldown = self.settings.scan * 2;
        for (stream_id, _) in &release {
            self.hold_back(stream_id, now + cooldown);
        }
        if let Some(stream) = &plan.bid {
            self.my_bid = Some((stream.clone(), now_ms));
        }
        Round {
            forget_draining,
            forget_members: census.map(|c| c.forget).unwrap_or_default(),
            acquire,
            bid: plan.bid,
            release,
            handoffs,
            pointers,
            gauges,
            target: plan.target,
            deferred: plan.deferred,
            lined_up_with: owned_set.len(),
        }
    }

    /// Not taken back before `until` unless someone takes it first (see `held_back`).
    fn hold_back(&mut self, stream_id: &str, until: Instant) {
        let fence = self
            .known
            .iter()
            .find(|i| i.stream_id == stream_id)
            .and_then(|i| i.fence_token)
            .unwrap_or(0);
        let slot = self
            .held_back
            .entry(stream_id.to_string())
            .or_insert((until, fence));
        *slot = (slot.0.max(until), fence);
    }

    /// A stream this worker ran stopped at `now` without a confirmed release (its lease was
    /// lost, its release unanswered, its task failed), or an acquire of it went unanswered: not
    /// tried again for a lease + the skew margin while the table shows it as this worker left it.
    /// Its renewals, release or acquire may still be held in the network and land late; one
    /// more acquire would renew a lease no one serves, and the others would wait out that lease
    /// too (campaign seed 1 run 7, `late_apply`: a takeover of 5,700 ms at a 2 s lease). An
    /// unanswered acquire that did land shows a higher fence: the stream is then taken at once.
    pub fn on_unconfirmed(&mut self, stream_id: &str, now: Instant) {
        let until = now + self.settings.lease + self.settings.skew;
        self.hold_back(stream_id, until);
    }

    /// Lapsed owners stay out of the live count for at least one lease and while they hold
    /// anything, unless they renewed after they were seen lapsed (a paused owner that resumed
    /// in time for some of its leases). "Hold" uses the plan's own test, expiry + skew: an
    /// owner whose last lease has just expired but is inside the skew margin counts live in
    /// the plan, so forgetting it then would shrink the share at the end of a takeover.
    fn forget_lapsed(&mut self, now_ms: i64) {
        let lease_ms = self.settings.lease.as_millis() as i64;
        let cutoff = now_ms - self.skew_ms();
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
    }

    /// An acquire succeeded with `item`. False when its fence is not above one seen before for
    /// that stream (a restored table): the stream must not be run with it.
    pub fn on_acquired(&mut self, item: LeaseItem, now: Instant) -> bool {
        let fence = item.fence_token.unwrap_or(0);
        let admitted = self.fences.admit(&item.stream_id, fence);
        self.remember(item, now);
        admitted
    }

    /// An acquire was refused; `current` is the item as the table holds it now, when it said
    /// (renewed since the scan, or just taken by a competitor): that expiry is the one to watch.
    pub fn on_refused(&mut self, current: Option<LeaseItem>, now: Instant) {
        if let Some(item) = current {
            self.remember(item, now);
        }
    }

    fn remember(&mut self, item: LeaseItem, now: Instant) {
        let state = ItemState::of(&item);
        match self.seen.get(&item.stream_id) {
            Some((s, _)) if *s == state => {}
            _ => {
                self.seen.insert(item.stream_id.clone(), (state, now));
            }
        }
        match self
            .known
            .iter_mut()
            .find(|k| k.stream_id == item.stream_id)
        {
            Some(slot) => *slot = item,
            None => self.known.push(item),
        }
    }

    /// Ends the round after its acquires: `raced` when any was refused or its outcome is
    /// unknown; `owned` is what this worker runs now; `now_ms` the wall clock after the
    /// acquires. Sets the next watch and the ramp; returns true when candidates this worker
    /// wanted remain (so another round should follow soon).
    pub fn finish_round(
        &mut self,
        round: &Round,
        raced: bool,
        owned: &HashSet<String>,
        now_ms: i64,
        now: Instant,
    ) -> bool {
        // The streams being released (this round's and earlier ones', all held back) are as
        // good as gone, as in the plan's room: counted, this worker would look full and set no
        // wake for a stream just freed (found by the fleet simulation: a worker answering a
        // bid while a drain freed streams took its last one a scan later).
        let keeps: HashSet<String> = owned
            .iter()
            .filter(|s| !self.held_back.contains_key(*s))
            .cloned()
            .collect();
        let owned = &keeps;
        self.next_watch_ms = plan::next_watch(
            &self.planned_view(),
            &self.me,
            owned,
            round.lined_up_with,
            // Segmented: nobody else watches this worker's segments.
            if self.segmented() {
                &[]
            } else {
                &self.contenders
            },
            &self.unchanged(now),
            now_ms,
            self.limits(),
        );
        self.raced = raced;
        let filled = round.acquire.len() >= self.per_round && !raced;
        let hurry = (round.deferred > 0 || raced) && owned.len() < round.target;
        self.per_round = if hurry && filled {
            (self.per_round * 2).min(MAX_PER_ROUND)
        } else if hurry {
            self.per_round
        } else {
            PER_ROUND
        };
        hurry
    }

    /// Unix ms at which to try a watched lease (expiry-aware mode only).
    pub fn watch_at_ms(&self) -> Option<i64> {
        self.next_watch_ms.filter(|_| self.settings.expiry_aware)
    }

    /// A fleet signal read: its generation and the owners it names as draining.
    pub fn on_fleet_signal(&mut self, generation: u64, draining: Vec<String>) -> FleetRead {
        let first = self.fleet_generation.is_none();
        let clear_own_mark = first && draining.contains(&self.me);
        let draining: HashSet<String> = draining.into_iter().filter(|o| *o != self.me).collect();
        let changed = self.fleet_generation != Some(generation) || self.draining_owners != draining;
        self.fleet_generation = Some(generation);
        self.draining_owners = draining;
        FleetRead {
            changed: changed && !first,
            clear_own_mark,
        }
    }
}
