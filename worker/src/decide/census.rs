//! Segmented discovery's view of the fleet (issue #20), without I/O: from the membership
//! table's items, which workers are live, how many streams each runs, how many streams the
//! table holds, which lease-table segments this worker scans, and which gone members to delete.
//!
//! With `DISCOVERY=segmented` a worker reads the membership table (one small item per worker)
//! and three segments of the lease table: its own (`Segment` = its rank among the dealt
//! members, `TotalSegments` = their number), its predecessor's (the *standby* read: when that
//! member dies, its segment is still watched every interval by a worker that saw its leases
//! before they lapsed, so they are taken as they expire), and one other that rotates. The
//! fleet reads the lease table about three times per scan interval whatever its size. A
//! member is dealt a segment while its heartbeat is fresh and for one lease after (a dead or
//! drained member's segment keeps its boundaries, and its standby reader, until its streams
//! are taken). Every figure here is a hint; ownership still changes only by conditional
//! writes.

use std::collections::{HashMap, HashSet};

use std::time::Duration;

use lease_table::members::{Member, FORGET_AFTER_LEASES};
use lease_table::LeaseItem;
use tokio::time::Instant;

use super::owners::Supervision;
use super::plan::{rank, Bid};

/// At most this many lapsed leases outside the view are remembered between rotating reads.
pub const MAX_KEPT_LAPSED: usize = 10_000;
/// At most this many streams bid on or handed to this worker are read on their own per scan
/// (they may lie in none of its segments).
pub const MAX_FOLLOWED: usize = 64;

/// The lease-table segments one scan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Segments {
    /// This worker's own segment.
    pub own: usize,
    /// `TotalSegments`: the number of dealt members.
    pub total: usize,
    /// Its predecessor's segment (`None` alone).
    pub standby: Option<usize>,
    /// One more, in turn (`None` with fewer than three segments).
    pub rotating: Option<usize>,
}

impl Segments {
    /// Every segment read, own first.
    pub fn read(&self) -> Vec<usize> {
        let mut all = vec![self.own];
        all.extend(self.standby);
        all.extend(self.rotating);
        all
    }
}

/// What the membership table says, as one worker plans with it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Live members (fresh heartbeat, not draining), this worker included, sorted.
    pub live: Vec<String>,
    /// Members dealt a lease-table segment: live, draining, or gone for less than a lease;
    /// this worker included, sorted.
    pub dealt: Vec<String>,
    /// Streams each live member runs (this worker's own count is the caller's).
    pub held: HashMap<String, usize>,
    /// Lease items in the table: the live members' own-segment counts, this worker's from its
    /// own last scan.
    pub streams: usize,
    /// Members that announced a drain and have not expired.
    pub draining: Vec<String>,
    /// The live members' fresh bids, and the handoffs of live and draining members (a stream
    /// handed to a member is as good as its bid: released to it, it is that member's).
    pub bids: Vec<Bid>,
    /// Members gone for [`FORGET_AFTER_LEASES`] leases: (owner, the expiry seen), to delete.
    pub forget: Vec<(String, i64)>,
}

impl Census {
    /// The census of `members` at `now_ms` for worker `me`, whose own segment last held
    /// `mine.0` items of `mine.1` segments. A member is live while `expires_at` ≥ `now_ms` and it does not
    /// drain; bids older than `lease_ms` are stale.
    pub fn read(
        members: &[Member],
        me: &str,
        mine: (usize, usize),
        now_ms: i64,
        lease_ms: i64,
    ) -> Census {
        let mut census = Census::default();
        // (items, segments) of each dealt member's own-segment count, this worker's first.
        let mut counts = vec![mine];
        for m in members {
            if m.owner_id == me {
                continue;
            }
            if m.expires_at >= now_ms - lease_ms {
                census.dealt.push(m.owner_id.clone());
                counts.push((m.segment_items, m.segments));
            }
            if m.expires_at < now_ms {
                if m.expires_at < now_ms - FORGET_AFTER_LEASES * lease_ms {
                    census.forget.push((m.owner_id.clone(), m.expires_at));
                }
                continue;
            }
            if m.handoff_at >= now_ms - lease_ms {
                census.bids.extend(m.handoff.iter().map(|(stream, to)| Bid {
                    stream_id: stream.clone(),
                    bidder: to.clone(),
                    at: m.handoff_at,
                }));
            }
            if m.draining {
                census.draining.push(m.owner_id.clone());
                continue;
            }
            census.live.push(m.owner_id.clone());
            census.held.insert(m.owner_id.clone(), m.held);
            if let Some((stream, at)) = &m.bid {
                if *at >= now_ms - lease_ms {
                    census.bids.push(Bid {
                        stream_id: stream.clone(),
                        bidder: m.owner_id.clone(),
                        at: *at,
                    });
                }
            }
        }
        census.live.push(me.to_string());
        census.live.sort();
        census.dealt.push(me.to_string());
        census.dealt.sort();
        census.streams = table_size(&counts, census.dealt.len());
        census.draining.sort();
        census
    }

    /// This worker's segment and the number of segments: its rank among the dealt members.
    pub fn segment(&self, me: &str) -> (usize, usize) {
        let total = self.dealt.len().max(1);
        let rank = self.dealt.iter().position(|m| m == me).unwrap_or(0);
        (rank, total)
    }

    /// The segments this worker reads at scan number `turn`: its own; its predecessor's (the
    /// standby read: a member that dies leaves its segment watched by one that saw its leases
    /// before they lapsed); and each of the others in turn, so every segment is read by a
    /// third worker within `segments − 2` intervals (free streams beyond the room of a
    /// segment's readers are found there).
    pub fn segments(&self, me: &str, turn: u64) -> Segments {
        let (own, total) = self.segment(me);
        let standby = (total >= 2).then(|| (own + total - 1) % total);
        let rotating = (total >= 3).then(|| {
            let step = 1 + (turn % (total as u64 - 2)) as usize;
            (own + step) % total
        });
        Segments {
            own,
            total,
            standby,
            rotating,
        }
    }

    /// Deals `streams` that this worker hands over (a shed, or its whole share in a drain:
    /// `leaving`) to the live members with room, each to the best-ranked member by the same
    /// hash the lines use, and at most [`lease_table::members::MAX_HANDOFFS`]; a stream for
    /// which nobody has room is released unassigned. The share counts this worker unless it
    /// is leaving.
    pub fn handoffs(&self, me: &str, streams: &[String], leaving: bool) -> Vec<(String, String)> {
        let others: Vec<&str> = self
            .live
            .iter()
            .map(String::as_str)
            .filter(|m| *m != me)
            .collect();
        let owners = others.len() + usize::from(!leaving);
        if others.is_empty() {
            return Vec::new();
        }
        let target = self.streams.div_ceil(owners.max(1));
        let mut room: Vec<(&str, usize)> = others
            .iter()
            .map(|m| {
                (
                    *m,
                    target.saturating_sub(self.held.get(*m).copied().unwrap_or(0)),
                )
            })
            .filter(|(_, r)| *r > 0)
            .collect();
        let mut sorted: Vec<&String> = streams.iter().collect();
        sorted.sort();
        let mut dealt = Vec::new();
        for stream in sorted {
            if dealt.len() >= lease_table::members::MAX_HANDOFFS {
                break;
            }
            let best = room
                .iter_mut()
                .filter(|(_, r)| *r > 0)
                .min_by_key(|(m, _)| (rank(m, stream), *m));
            if let Some((member, left)) = best {
                *left -= 1;
                dealt.push((stream.clone(), member.to_string()));
            }
        }
        dealt
    }
}

/// The lease table's size from the members' own-segment counts: their sum when every member
/// counted with the current number of segments `live` (each segment counted once: exact), else
/// — while the segments are dealt again after a join, a leave or a death — the mean of each
/// count scaled by its number of segments (a sum over mixed segment counts would count some
/// streams twice and miss others: the share came out a sixth short, found by
/// `a_drained_segmented_workers_streams_are_taken_soon`).
pub fn table_size(counts: &[(usize, usize)], live: usize) -> usize {
    if counts.iter().all(|(_, segments)| *segments == live) {
        return counts.iter().map(|(items, _)| items).sum();
    }
    let estimates: Vec<usize> = counts
        .iter()
        .filter(|(_, segments)| *segments > 0)
        .map(|(items, segments)| items * segments)
        .collect();
    if estimates.is_empty() {
        return 0;
    }
    let sum: usize = estimates.iter().sum();
    (sum + estimates.len() / 2) / estimates.len()
}

impl Supervision {
    /// Segmented discovery: the membership table as read now.
    pub fn on_members(&mut self, members: Vec<Member>) {
        self.members = Some(members);
    }

    /// Segmented discovery: a scan of this worker's own segment (`own_items` of the `items`)
    /// and of another one; see [`Supervision::on_scan`].
    pub fn on_segment_scan(
        &mut self,
        items: Vec<LeaseItem>,
        bids: Vec<Bid>,
        own_items: usize,
        took: Duration,
        now: Instant,
        now_ms: i64,
    ) {
        self.segment_items = own_items;
        // A lapsed lease outside this view was seen by this worker's rotating reader, once per
        // round of the segments: remembered (while the owner of that segment may have no room
        // for it), a second sighting, unchanged, proves the quiet time that taking it needs.
        let (_, segments) = self.census(now_ms).unwrap_or_default().segment(&self.me);
        let keep_for = self.settings.scan * segments as u32 + self.settings.lease * 2;
        let ids: std::collections::HashSet<&str> =
            items.iter().map(|i| i.stream_id.as_str()).collect();
        let kept: Vec<(String, (super::items::ItemState, Instant))> = self
            .seen
            .iter()
            .filter(|(id, (state, at))| {
                state.lapsed_at(now_ms)
                    && now.duration_since(*at) < keep_for
                    && !ids.contains(id.as_str())
            })
            .take(MAX_KEPT_LAPSED)
            .map(|(id, entry)| (id.clone(), entry.clone()))
            .collect();
        drop(ids);
        self.on_scan(items, bids, took, now);
        self.seen.extend(kept);
    }

    /// Segmented discovery: the fleet as the membership table shows it at `now_ms` (`None`
    /// before it was read, and in full discovery).
    pub fn census(&self, now_ms: i64) -> Option<Census> {
        let members = self.members.as_ref()?;
        let lease_ms = self.settings.lease.as_millis() as i64;
        Some(Census::read(
            members,
            &self.me,
            (self.segment_items, self.segments_scanned),
            now_ms,
            lease_ms,
        ))
    }

    /// Segmented discovery: which segments the next scan reads at `now_ms` (see
    /// [`Census::segments`]).
    pub fn next_segments(&mut self, now_ms: i64) -> Segments {
        let census = self.census(now_ms).unwrap_or_default();
        let census = if census.dealt.is_empty() {
            Census::read(&[], &self.me, (0, 1), now_ms, 0)
        } else {
            census
        };
        self.scan_turn += 1;
        let segments = census.segments(&self.me, self.scan_turn);
        self.segments_scanned = segments.total;
        segments
    }

    /// True once the membership table was read (segmented discovery).
    pub fn segmented(&self) -> bool {
        self.members.is_some()
    }

    /// Segmented discovery: the streams to read on their own with the next scan, as bids of
    /// this worker — the one it bid on within the last lease (its owner's release goes to this
    /// worker, which must see it) and those members hand over to it — at most
    /// [`MAX_FOLLOWED`], none it runs.
    pub fn streams_to_follow(&self, now_ms: i64, owned: &HashSet<String>) -> Vec<Bid> {
        let lease_ms = self.settings.lease.as_millis() as i64;
        let mine = self
            .my_bid
            .as_ref()
            .filter(|(_, at)| *at >= now_ms - lease_ms)
            .map(|(stream, at)| Bid {
                stream_id: stream.clone(),
                bidder: self.me.clone(),
                at: *at,
            });
        let handed = self
            .census(now_ms)
            .map(|c| c.bids)
            .unwrap_or_default()
            .into_iter()
            .filter(|b| b.bidder == self.me);
        let mut follow: Vec<Bid> = Vec::new();
        for bid in mine.into_iter().chain(handed) {
            if !owned.contains(&bid.stream_id)
                && !follow.iter().any(|f| f.stream_id == bid.stream_id)
            {
                follow.push(bid);
            }
        }
        follow.truncate(MAX_FOLLOWED);
        follow
    }

    /// Segmented discovery: to whom `streams` this worker releases go (see
    /// [`Census::handoffs`]); `leaving` in a drain. Empty in full discovery.
    pub fn handoffs(
        &self,
        streams: &[String],
        leaving: bool,
        now_ms: i64,
    ) -> Vec<(String, String)> {
        self.census(now_ms)
            .map(|c| c.handoffs(&self.me, streams, leaving))
            .unwrap_or_default()
    }

    /// Lease items in this worker's own segment at its last scan, and of how many segments.
    pub fn segment_count(&self) -> (usize, usize) {
        (self.segment_items, self.segments_scanned)
    }

    /// Whether the membership heartbeat is due at `now`, the last written at `last_beat`: half
    /// a renew interval later (a heartbeat expires a lease after it is written, so two are
    /// missed before the others count this worker gone).
    pub fn heartbeat_due(&self, last_beat: Option<Instant>, now: Instant) -> bool {
        last_beat.is_none_or(|at| now.saturating_duration_since(at) >= self.settings.renew / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn member(id: &str, held: usize, items: usize, expires_at: i64) -> Member {
        Member {
            owner_id: id.into(),
            held,
            segment_items: items,
            segments: 3,
            expires_at,
            ..Member::default()
        }
    }

    #[test]
    fn the_heartbeat_is_due_first_and_every_half_renew_interval() {
        let core = Supervision::new(super::super::sim::settings(), "me");
        let t0 = Instant::now();
        let half = core.settings().renew / 2;
        assert!(core.heartbeat_due(None, t0));
        assert!(!core.heartbeat_due(Some(t0), t0 + half - Duration::from_millis(1)));
        assert!(core.heartbeat_due(Some(t0), t0 + half));
    }

    #[test]
    fn live_draining_gone_and_bids_are_told_apart() {
        let mut draining = member("w-d", 5, 30, 10_000);
        draining.draining = true;
        let mut bidder = member("w-b", 1, 33, 10_000);
        bidder.bid = Some(("s-1".into(), 9_500));
        let mut stale_bidder = member("w-s", 1, 33, 10_000);
        stale_bidder.bid = Some(("s-2".into(), 1_000));
        let members = [
            member("w-a", 9, 34, 10_000),
            bidder,
            stale_bidder,
            draining,
            member("w-gone", 9, 30, 9_999),
            member("w-long-gone", 9, 30, -50_000),
            member("me", 0, 0, 10_000),
        ];
        let c = Census::read(&members, "me", (31, 3), 10_000, 3_000);
        assert_eq!(c.live, ["me", "w-a", "w-b", "w-s"]);
        // Dealt: the live, the draining and the gone for less than a lease.
        assert_eq!(c.dealt, ["me", "w-a", "w-b", "w-d", "w-gone", "w-s"]);
        // Segments dealt over 3 members, 6 now: the mean of the scaled counts.
        assert_eq!(c.streams, ((31 + 34 + 33 + 33 + 30 + 30) * 3 + 3) / 6);
        assert_eq!(table_size(&[(5, 2), (6, 2)], 2), 11);
        assert_eq!(c.draining, ["w-d"]);
        assert_eq!(c.bids.len(), 1);
        assert_eq!(c.bids[0].bidder, "w-b");
        assert_eq!(c.forget, [("w-long-gone".to_string(), -50_000)]);
        assert_eq!(c.segment("me"), (0, 6));
        assert_eq!(c.segment("w-s"), (5, 6));
    }

    #[test]
    fn a_member_gone_for_less_than_a_lease_keeps_its_segment() {
        let members = [
            member("w-a", 9, 34, 10_000),
            member("w-dead", 9, 30, 8_000),
            member("w-long-dead", 9, 30, 6_000),
            member("me", 0, 31, 10_000),
        ];
        let c = Census::read(&members, "me", (31, 3), 10_000, 3_000);
        assert_eq!(c.live, ["me", "w-a"]);
        assert_eq!(c.dealt, ["me", "w-a", "w-dead"]);
        // The dead member's segment (2 of 3) is this worker's standby read.
        let theirs = Census::read(&members, "w-a", (34, 3), 10_000, 3_000);
        assert_eq!(theirs.segments("w-a", 0).standby, Some(0));
        assert_eq!(c.segments("me", 0).standby, Some(2));
    }

    #[test]
    fn handed_over_streams_go_to_members_with_room_and_read_as_their_bids() {
        let mut giver = member("w-g", 3, 10, 10_000);
        giver.draining = true;
        giver.handoff = vec![("s-1".into(), "me".into()), ("s-2".into(), "w-a".into())];
        giver.handoff_at = 9_000;
        let mut old = member("w-o", 3, 10, 10_000);
        old.handoff = vec![("s-3".into(), "me".into())];
        old.handoff_at = 1_000;
        let mut members = [
            giver,
            old,
            member("w-a", 15, 10, 10_000),
            member("w-b", 16, 10, 10_000),
        ];
        for m in &mut members {
            m.segments = 5;
        }
        members[1].held = 14;
        let c = Census::read(&members, "me", (10, 5), 10_000, 3_000);
        assert_eq!((c.streams, c.dealt.len()), (50, 5));
        let mut bids: Vec<(&str, &str)> = c
            .bids
            .iter()
            .map(|b| (b.stream_id.as_str(), b.bidder.as_str()))
            .collect();
        bids.sort();
        assert_eq!(
            bids,
            [("s-1", "me"), ("s-2", "w-a")],
            "stale handoffs are dropped"
        );
        // 50 streams over w-a, w-b and w-o when this worker leaves (w-g drains): a share of
        // 17; they hold 15, 16 and 14, so 6 of the 20 streams find room.
        let streams: Vec<String> = (0..20).map(|i| format!("s-{i:02}")).collect();
        let dealt = c.handoffs("me", &streams, true);
        let to = |m: &str| dealt.iter().filter(|(_, t)| t == m).count();
        assert_eq!((to("w-a"), to("w-b"), to("w-o"), dealt.len()), (2, 1, 3, 6));
        // Staying, this worker counts in the share (50 / 4: 13): nobody has room.
        assert!(c.handoffs("me", &streams, false).is_empty());
        assert!(Census::default().handoffs("me", &streams, true).is_empty());
    }

    #[test]
    fn a_worker_not_yet_listed_is_a_segment_of_its_own() {
        let c = Census::read(&[], "me", (12, 1), 0, 3_000);
        assert_eq!((c.segment("me"), c.streams), ((0, 1), 12));
        assert_eq!(c.segments("me", 5).read(), [0]);
    }

    proptest! {
        /// Every dealt member has its own segment and reads its predecessor's, and within
        /// `total − 2` turns each worker's rotating segment visits every other segment.
        #[test]
        fn segments_partition_and_rotation_covers(workers in 1usize..40, me in 0usize..40) {
            let members: Vec<Member> = (0..workers)
                .map(|i| member(&format!("w-{i:02}"), 0, 0, 1_000))
                .collect();
            let names: Vec<String> = members.iter().map(|m| m.owner_id.clone()).collect();
            let mut ranks: Vec<usize> = names
                .iter()
                .map(|n| Census::read(&members, n, (0, 0), 0, 3_000).segment(n).0)
                .collect();
            ranks.sort();
            prop_assert_eq!(ranks, (0..workers).collect::<Vec<_>>());
            let me = &names[me % workers];
            let c = Census::read(&members, me, (0, 0), 0, 3_000);
            let (rank, total) = c.segment(me);
            let mut seen: Vec<usize> = (0..total.saturating_sub(2).max(1) as u64)
                .flat_map(|t| c.segments(me, t).read())
                .collect();
            seen.sort();
            seen.dedup();
            prop_assert_eq!(seen, (0..total).collect::<Vec<_>>());
            // Each segment is some member's standby.
            let mut standbys: Vec<usize> = names
                .iter()
                .filter_map(|n| Census::read(&members, n, (0, 0), 0, 3_000).segments(n, 0).standby)
                .collect();
            standbys.sort();
            if total >= 2 {
                prop_assert_eq!(standbys, (0..total).collect::<Vec<_>>());
            }
            prop_assert!(c.segments(me, 0).standby != Some(rank));
        }
    }
}
