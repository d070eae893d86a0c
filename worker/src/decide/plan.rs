//! The acquisition plan: from one view of the table, which streams to try, which to shed, which
//! to bid on and when a held lease is worth trying again.
//!
//! Plain data in, plan out; the clock is passed in as Unix milliseconds.

use std::collections::{HashMap, HashSet};

use super::census::Census;
use lease_table::LeaseItem;

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
    /// A lease the table says is expired is taken only once its item has been seen unchanged
    /// this long (on this worker's monotonic clock): a healthy owner changes its item every
    /// renew interval, so however fast this worker's wall clock runs, it never takes a
    /// healthy lease. 0 = no such guard.
    pub quiet_ms: i64,
    /// An item seen unchanged this long (a full lease + the skew margin) is dead whatever the
    /// wall clocks say (its owner's may run ahead, or this one's behind): taken with a
    /// compare-and-swap on the state seen. `i64::MAX` = never.
    pub stale_ms: i64,
}

/// For each held item, how long (ms, this worker's monotonic clock) it has been seen in its
/// current state (owner, fence, expiry); a missing item counts as 0.
pub type Unchanged = HashMap<String, i64>;

impl PlanLimits {
    /// Unix ms at which a lease held by someone else becomes takeable: when the table says it
    /// is expired (`expires + skew + 1`) and it has been quiet for `quiet_ms`, or when it has
    /// been unchanged for `stale_ms`, whichever comes first. `unchanged` is how long it has been
    /// seen in this state at `now_ms`.
    pub fn takeable_at(&self, expires: i64, unchanged: i64, now_ms: i64) -> i64 {
        let seen_at = now_ms - unchanged;
        let expired = (expires + self.skew_ms + 1).max(seen_at.saturating_add(self.quiet_ms));
        expired.min(seen_at.saturating_add(self.stale_ms))
    }
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
    /// Segmented discovery: free streams this worker found but has no room for. Nobody else
    /// may read their segment this interval; they are pointed out to members with room.
    pub stranded: Vec<String>,
    /// A held stream on which to record a bid (this worker is below the fair share while an
    /// owner holds at least two more than it; the bid makes this worker count as a live owner
    /// for everyone, and asks that owner to hand the stream over).
    pub bid: Option<String>,
    /// Owned streams in `shed` because a bidder holding at least two fewer asked for them.
    pub honoured: Vec<String>,
    /// The other live owners (sorted): with this worker, the contenders for a stream that
    /// becomes free, ranked per stream by [`herd_position`].
    pub contenders: Vec<String>,
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
/// workers with a fresh bid (`bids`: the caller passes only fresh bids, this worker's own
/// included), plus `me`. Candidates are free items, expired ones, and items naming `me` that
/// this process does not run, except those `held_back` (just released or left unconfirmed:
/// not taken back for a while, see `Supervision::on_unconfirmed`). They are ordered by a hash
/// of `(me, stream)` so that workers prefer different streams and contend less.
///
/// A stream released in answer to a bid (free, written within [`HERD_RECENT_MS`], with a bid
/// older than the release) belongs to its bidder: the bidder takes it at once, the others leave
/// it alone while the bidder is live. Otherwise the bidder stays as starved as before and bids
/// again, and the fleet passes one stream around for ever.
///
/// Balance: a worker above `target + 1` sheds its excess. A worker below the target with nothing
/// to take bids on a stream of an owner holding at least two more than it; that owner hands the
/// stream over (sheds it) when it still holds at least two more than the bidder. Both sides
/// apply the same "two more" rule, so a bid is answered rather than repeated forever, and each
/// hand-over narrows the spread (the sum of squares of the counts falls), so bidding stops.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    items: &[LeaseItem],
    bids: &[Bid],
    leaving: &HashSet<String>,
    me: &str,
    owned: &HashSet<String>,
    held_back: &HashSet<String>,
    unchanged: &Unchanged,
    now_ms: i64,
    limits: PlanLimits,
    census: Option<&Census>,
) -> Plan {
    let mut live: HashSet<&str> = HashSet::new();
    let mut dead: HashSet<&str> = HashSet::new();
    let mut candidates: Vec<&str> = Vec::new();
    // Candidates every watcher could try at once: decided below, by herd rank.
    let mut contested: Vec<(&str, i64)> = Vec::new();
    // Free streams neither just released nor named for anyone (they are lined up below).
    let mut free = 0;
    let mut watch = Vec::new();
    let mut held_by: HashMap<&str, Vec<&str>> = HashMap::new();
    // Streams released in answer to a bid: reserved for their bidder while recent.
    let bid_on: HashMap<&str, &Bid> = bids.iter().map(|b| (b.stream_id.as_str(), b)).collect();
    let mut reserved: Vec<(&str, &str, i64)> = Vec::new();
    for item in items {
        let id = item.stream_id.as_str();
        if owned.contains(id) {
            continue;
        }
        match (&item.owner_id, item.lease_expires_at) {
            // Released moments ago (a drain or a shed): the fleet looks at once; rank decides.
            (None, _) if released_at(item, now_ms).is_some() => {
                let released = released_at(item, now_ms).unwrap_or(0);
                match bid_on.get(id) {
                    // This worker asked for it, or its owner handed it to this worker: no herd.
                    Some(bid) if bid.bidder == me && bid.at <= released => candidates.push(id),
                    // Another worker asked for it and was answered: it is that worker's. Taking
                    // it here would leave the bidder as starved as before, so it would bid
                    // again and the fleet would pass one stream around for ever (found by the
                    // fleet simulation: 29 streams, 4 workers resting at [7, 8, 8, 6]).
                    Some(bid) if bid.at <= released => reserved.push((id, &bid.bidder, released)),
                    _ => contested.push((id, released)),
                }
            }
            (None, _) => {
                candidates.push(id);
                free += 1;
            }
            (Some(owner), _) if owner == me => candidates.push(id),
            // Held with no expiry: the acquire condition can never hold; nothing to do.
            (Some(_), None) => {}
            (Some(owner), Some(expires)) => {
                let quiet = unchanged.get(id).copied().unwrap_or(0);
                let at = limits.takeable_at(expires, quiet, now_ms);
                if now_ms >= at {
                    dead.insert(owner.as_str());
                    contested.push((id, at));
                } else {
                    live.insert(owner.as_str());
                    held_by.entry(owner.as_str()).or_default().push(id);
                    watch.push((id.to_string(), at));
                }
            }
        }
    }
    // Segmented discovery: the membership table names the live owners, most of whose streams
    // this worker's segments do not show.
    if let Some(census) = census {
        live.extend(census.live.iter().map(String::as_str));
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
    let mut contenders: Vec<&str> = live.iter().copied().collect();
    contenders.sort_unstable();
    // A reserved stream whose bidder is no longer live (it died or drains since it bid) is
    // contended like any other release.
    for (id, bidder, released) in reserved {
        if !live.contains(bidder) {
            contested.push((id, released));
        }
    }
    let live_owners = live.len() + 1;
    let streams = census.map_or(items.len(), |c| c.streams);
    let target = streams.div_ceil(live_owners).min(limits.max_streams);
    // How many streams an owner runs: as the membership table says when it says, else as seen.
    let count = |owner: &str| {
        census
            .and_then(|c| c.held.get(owner).copied())
            .unwrap_or_else(|| held_by.get(owner).map_or(0, Vec::len))
    };
    // Who is first in line for each freed stream: a worker already at its share holds no
    // place (see [`Lines`]). With segments, the others do not see this worker's segment: it
    // is alone in every line.
    let freed: Vec<&str> = contested.iter().map(|(id, _)| *id).collect();
    let line_others: &[&str] = if census.is_some() { &[] } else { &contenders };
    let lines = Lines::new(me, owned.len(), line_others, count, target, freed);
    let mut place: HashMap<&str, usize> = HashMap::new();
    for (id, base) in contested {
        let position = lines.place(id);
        if now_ms >= base + herd_delay_ms(position) {
            candidates.push(id);
            place.insert(id, position);
        }
    }

    // Free streams, in full discovery with other owners known, stand in the same lines (with
    // no delay: nobody watches them), so workers with one view fill their room with different
    // ones. In the simulated cold start of 600 streams over 12 workers 169 acquires lose a
    // race, 228 by rank alone (`free_streams_in_lines_race_less_on_a_cold_start`), and a worker
    // that lost one waits for a consistent rescan — seconds, on a busy table. The lines cost a
    // rank per free stream and contender: beyond [`FREE_LINES_BUDGET`] of them, rank alone.
    let roomy: Vec<&str> = contenders
        .iter()
        .copied()
        .filter(|o| count(o) < target)
        .collect();
    let free_lines =
        census.is_none() && !roomy.is_empty() && free * roomy.len() <= FREE_LINES_BUDGET;
    let line_place = |id: &str| match place.get(id) {
        Some(p) => *p,
        None if free_lines => herd_position(me, &roomy, id),
        None => 0,
    };
    // The streams this worker is first in line for come first, so its room goes where the
    // other watchers expect it to.
    candidates.sort_by_cached_key(|id| (line_place(id), rank(me, id), *id));
    // With segments, a stream that expired or was freed in this worker's own segment may be
    // seen by nobody else for many intervals (a rotating reader sees it once, too briefly for
    // the quiet time of an expired lease): the owner of the segment takes it up to one above
    // the share, which is still no reason to shed (only more than one above is), and bidders
    // holding two fewer pull the extra one away.
    let ceiling = if census.is_some() { target + 1 } else { target };
    // A held-back stream is no candidate (it stays in the lines and counts, as every other
    // worker sees it): left among them, it took room a stream just freed needed and was then
    // filtered out (found by the fleet simulation: a worker that had answered a bid kept
    // picking the stream it handed over, and took a drained stream a scan late). Streams it
    // is releasing (held back too) leave room as they go.
    candidates.retain(|id| !held_back.contains(*id));
    let running = owned.iter().filter(|s| !held_back.contains(*s)).count();
    let room = ceiling.saturating_sub(running);
    // With segments, a takeover — a lapsed lease, a release nobody was named for — is not
    // held to the share: the worker that sees it may be the only one that does this interval
    // (the standby reader of a dead member's segment). It takes all it sees, up to
    // `MAX_STREAMS`, and hands the excess on (a shed whose streams are each named for a member
    // with room, see `Census::handoffs`). A stream named for this worker, like a free one, is
    // held to the share + 1: taking it beyond would start a shed of its own, and with counts a
    // little stale, streams would be passed around.
    let takeover_room = limits.max_streams.saturating_sub(running);
    let mut acquire: Vec<String> = Vec::new();
    let (mut ordinary, mut takeovers) = (0, 0);
    let mut stranded = Vec::new();
    for id in &candidates {
        let takeover = census.is_some() && place.contains_key(id);
        takeovers += usize::from(takeover);
        if acquire.len() >= limits.per_round {
            continue;
        }
        if takeover && acquire.len() < takeover_room {
            acquire.push(id.to_string());
        } else if !takeover && ordinary < room && acquire.len() < takeover_room.max(room) {
            ordinary += 1;
            acquire.push(id.to_string());
        } else if !takeover && census.is_some() && ordinary >= room {
            stranded.push(id.to_string());
        }
    }
    let deferred = candidates.len() - acquire.len();

    let mut shed = Vec::new();
    // With segments, no shed while a takeover is under way: the streams taken beyond the
    // share are handed on once it is over.
    let taking_over = takeovers > 0 && takeover_room > 0;
    if owned.len() > target + 1 && !taking_over {
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
        let theirs = count(bid.bidder.as_str());
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
            .filter(|(owner, _)| {
                **owner != me
                    && !dead.contains(*owner)
                    && !leaving.contains(**owner)
                    // More than one above us: taking one from them narrows the spread. A
                    // bar at `target` alone would leave a late worker starved whenever the
                    // early ones hold exactly their (too small a fleet's) share.
                    && count(owner) > owned.len() + 1
            })
            .max_by_key(|(owner, _)| (count(owner), std::cmp::Reverse(**owner)));
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
        contenders: contenders.iter().map(|o| o.to_string()).collect(),
        target,
        live_owners,
        acquire,
        shed,
        watch,
        deferred,
        stranded,
        bid,
        honoured,
        lapsed,
    }
}

/// When to try next: the earliest time still in the future at which this worker may try a
/// stream someone else holds ([`PlanLimits::takeable_at`] plus its herd delay, for streams
/// where it is among the first [`HERD_WATCHERS`] contenders; the others find the stream free,
/// or taken, in their next scan), or, while it has room, a stream released moments ago (the
/// release time plus the herd delay of its place in that stream's line). Computed again after
/// an acquire round, whose refusals reveal leases renewed (or taken) since the scan.
///
/// `lined_up_with` is how many streams this worker ran when `plan` lined the released streams
/// up: the lines are drawn again with that count, so each place `plan` left for later gets
/// its wake. (Drawn with the count after the round's acquires, a place could come out first
/// and due at once, and no wake was set.) `owned` leaves out the streams the round releases.
#[allow(clippy::too_many_arguments)]
pub fn next_watch(
    items: &[LeaseItem],
    me: &str,
    owned: &HashSet<String>,
    lined_up_with: usize,
    contenders: &[String],
    unchanged: &Unchanged,
    now_ms: i64,
    limits: PlanLimits,
) -> Option<i64> {
    let contenders: Vec<&str> = contenders.iter().map(String::as_str).collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    let mut by_holder: HashMap<&str, Vec<&LeaseItem>> = HashMap::new();
    for item in items {
        let Some(owner) = item.owner_id.as_deref() else {
            continue;
        };
        *counts.entry(owner).or_default() += 1;
        if owner != me && !owned.contains(&item.stream_id) {
            by_holder.entry(owner).or_default().push(item);
        }
    }
    let share = |owners: usize| items.len().div_ceil(owners).min(limits.max_streams);
    let mut next: Option<i64> = None;
    let mut consider = |at: i64| {
        if at > now_ms && next.is_none_or(|n| at < n) {
            next = Some(at);
        }
    };
    // Streams released moments ago (a drain, a shed): `plan` lines them up over the workers
    // with room, and this worker, if it has room, tries each at its own place. Without a wake
    // for them it waited for an unrelated round when the worker first in line had filled its
    // room elsewhere (views read milliseconds apart during a drain line streams up differently:
    // a 1,173 ms handoff at lease 30 s, 2026-12-06).
    let target = share(contenders.len() + 1);
    if owned.len() < target {
        let released: Vec<(&str, i64)> = items
            .iter()
            .filter(|i| i.owner_id.is_none() && !owned.contains(&i.stream_id))
            .filter_map(|i| Some((i.stream_id.as_str(), released_at(i, now_ms)?)))
            .collect();
        let lines = Lines::new(
            me,
            lined_up_with,
            &contenders,
            |o| counts.get(o).copied().unwrap_or(0),
            target,
            released.iter().map(|(id, _)| *id).collect(),
        );
        for (id, at) in released {
            consider(at + herd_delay_ms(lines.place(id)));
        }
    }
    for (holder, held) in by_holder {
        // The fleet as `plan` will see it once this holder is gone: its share grows when the
        // holder was one of the live owners, not when it had already left. The holder never
        // watches its own streams (it did, ranked among the watchers: a dead holder took one
        // of the two places, and its stream waited for a scan — a renew interval; issue #17).
        let others: Vec<&str> = contenders
            .iter()
            .copied()
            .filter(|o| *o != holder)
            .collect();
        let lines = Lines::new(
            me,
            owned.len(),
            &others,
            |o| counts.get(o).copied().unwrap_or(0),
            share(others.len() + 1),
            held.iter().map(|i| i.stream_id.as_str()).collect(),
        );
        for item in held {
            let position = lines.place(&item.stream_id);
            let quiet = unchanged.get(&item.stream_id).copied().unwrap_or(0);
            if let Some(expires) = item.lease_expires_at.filter(|_| position < HERD_WATCHERS) {
                consider(limits.takeable_at(expires, quiet, now_ms) + herd_delay_ms(position));
            }
        }
    }
    next
}

/// The order in which the workers with room try streams freed together (a dead or leaving
/// owner's, or ones just released). In id order, each stream is first in line for the
/// best-ranked worker that still has room; after it come the other workers with room, by rank.
/// Every worker with the same view computes the same lines, so the freed streams spread over
/// the room there is (it was rank alone: the two best-ranked watchers of a stream could both be
/// full after taking others, and it waited for a scan).
struct Lines<'a> {
    me: &'a str,
    /// The other workers with room.
    roomy: Vec<&'a str>,
    first: HashMap<&'a str, &'a str>,
}

impl<'a> Lines<'a> {
    /// The lines for `streams` among `me` (holding `mine`) and `others` (holding `held(o)`),
    /// each with room up to `target`.
    fn new(
        me: &'a str,
        mine: usize,
        others: &[&'a str],
        held: impl Fn(&str) -> usize,
        target: usize,
        mut streams: Vec<&'a str>,
    ) -> Self {
        let mut room: Vec<(&str, usize)> = others
            .iter()
            .filter(|o| **o != me)
            .map(|o| (*o, target.saturating_sub(held(o))))
            .filter(|(_, r)| *r > 0)
            .collect();
        let roomy = room.iter().map(|(o, _)| *o).collect();
        if target > mine {
            room.push((me, target - mine));
        }
        streams.sort_unstable();
        let mut first = HashMap::new();
        for stream in streams {
            let best = room
                .iter_mut()
                .filter(|(_, r)| *r > 0)
                .min_by_key(|(o, _)| (rank(o, stream), *o));
            if let Some((owner, left)) = best {
                *left -= 1;
                first.insert(stream, *owner);
            }
        }
        Lines { me, roomy, first }
    }

    /// This worker's place in `stream`'s line (0 = first).
    fn place(&self, stream: &str) -> usize {
        match self.first.get(stream) {
            Some(first) if *first == self.me => 0,
            Some(first) => 1 + herd_position_excluding(self.me, &self.roomy, stream, Some(first)),
            None => herd_position(self.me, &self.roomy, stream),
        }
    }
}

/// Of the workers watching one expiring stream, this many try it as it expires (the first at
/// once, the second [`HERD_JITTER_MS`] later); the rest wait [`HERD_STEP_MS`] per place behind
/// and try only if their next scan still shows it free. A crashed worker's stream then costs
/// about one conditional-write conflict, not one per live worker (issue #17: at 1,000 workers,
/// a burst of throttled writes on one key).
pub const HERD_WATCHERS: usize = 2;
/// The second watcher's delay behind the first.
pub const HERD_JITTER_MS: i64 = 20;
/// Each later contender's extra delay: long enough for the places ahead to answer (an acquire
/// takes a few ms on a healthy table), short enough that a handoff whose first in line filled
/// its room elsewhere is not left waiting (it was 500 ms: a later place waited 520+ ms).
pub const HERD_STEP_MS: i64 = 100;
/// The most (free stream, contender) pairs a plan ranks to line up free streams (2,000 free
/// streams over 20 workers: 40,000).
pub const FREE_LINES_BUDGET: usize = 1_000_000;
/// A free item written this recently was just released: contended by rank like an expiry.
pub const HERD_RECENT_MS: i64 = 2_000;

/// When `item`, free, was released, if that was within [`HERD_RECENT_MS`] of `now_ms`.
fn released_at(item: &LeaseItem, now_ms: i64) -> Option<i64> {
    item.updated_at
        .filter(|t| item.owner_id.is_none() && *t > now_ms - HERD_RECENT_MS)
}

/// This worker's place (0 = first) among `me` and `others` for `stream`, by [`rank`]: the same
/// order on every worker that sees the same live owners.
pub fn herd_position(me: &str, others: &[&str], stream: &str) -> usize {
    herd_position_excluding(me, others, stream, None)
}

/// [`herd_position`] with `excluded` (the worker first in line, see [`Lines`]) left out of
/// `others`.
fn herd_position_excluding(
    me: &str,
    others: &[&str],
    stream: &str,
    excluded: Option<&str>,
) -> usize {
    let mine = (rank(me, stream), me);
    others
        .iter()
        .filter(|o| **o != me && Some(**o) != excluded && (rank(o, stream), **o) < mine)
        .count()
}

/// How long after a stream becomes takeable the worker at `position` may try it.
pub fn herd_delay_ms(position: usize) -> i64 {
    match position {
        0 => 0,
        p if p < HERD_WATCHERS => HERD_JITTER_MS * p as i64,
        p => HERD_JITTER_MS + HERD_STEP_MS * (p + 1 - HERD_WATCHERS) as i64,
    }
}

/// A stable per-(worker, stream) preference: FNV-1a of both names, then the splitmix64
/// finaliser (FNV alone leaves names that differ in their last characters, `s-1960`…`s-1979`,
/// next to each other in every worker's order, so workers contended for the same runs).
pub(super) fn rank(me: &str, stream: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in me.bytes().chain([0u8]).chain(stream.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}
