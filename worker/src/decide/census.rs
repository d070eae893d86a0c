//! Segmented discovery's view of the fleet (issue #20), without I/O: from the membership
//! table's items, which workers are live, how many streams each runs, how many streams the
//! table holds, which lease-table segments this worker scans, and which gone members to delete.
//!
//! With `DISCOVERY=segmented` a worker reads the membership table (one small item per worker)
//! and only its own segment of the lease table (`Segment` = its rank among the live members,
//! `TotalSegments` = their number) plus one other segment that rotates: the fleet reads the
//! lease table about twice per scan interval whatever its size. Every figure here is a hint;
//! ownership still changes only by conditional writes.

use std::collections::HashMap;

use std::time::Duration;

use lease_table::members::{Member, FORGET_AFTER_LEASES};
use lease_table::LeaseItem;
use tokio::time::Instant;

use super::owners::Supervision;
use super::plan::Bid;

/// At most this many lapsed leases outside the view are remembered between rotating reads.
pub const MAX_KEPT_LAPSED: usize = 10_000;

/// What the membership table says, as one worker plans with it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Live members (fresh heartbeat, not draining), this worker included, sorted.
    pub live: Vec<String>,
    /// Streams each live member runs (this worker's own count is the caller's).
    pub held: HashMap<String, usize>,
    /// Lease items in the table: the live members' own-segment counts, this worker's from its
    /// own last scan.
    pub streams: usize,
    /// Members that announced a drain and have not expired.
    pub draining: Vec<String>,
    /// The live members' fresh bids.
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
        // (items, segments) of each live member's own-segment count, this worker's first.
        let mut counts = vec![mine];
        for m in members {
            if m.owner_id == me {
                continue;
            }
            if m.expires_at < now_ms {
                if m.expires_at < now_ms - FORGET_AFTER_LEASES * lease_ms {
                    census.forget.push((m.owner_id.clone(), m.expires_at));
                }
                continue;
            }
            if m.draining {
                census.draining.push(m.owner_id.clone());
                continue;
            }
            census.live.push(m.owner_id.clone());
            census.held.insert(m.owner_id.clone(), m.held);
            counts.push((m.segment_items, m.segments));
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
        census.streams = table_size(&counts, census.live.len());
        census.draining.sort();
        census
    }

    /// This worker's segment and the number of segments: its rank among the live members.
    pub fn segment(&self, me: &str) -> (usize, usize) {
        let total = self.live.len().max(1);
        let rank = self.live.iter().position(|m| m == me).unwrap_or(0);
        (rank, total)
    }

    /// The other segment to scan at scan number `turn`: each of the others in turn, so every
    /// segment is read by a second worker within `segments − 1` intervals (free streams beyond
    /// the share of a segment's owner are found there). `None` with one segment.
    pub fn rotating(&self, me: &str, turn: u64) -> Option<usize> {
        let (rank, total) = self.segment(me);
        if total < 2 {
            return None;
        }
        let step = 1 + (turn % (total as u64 - 1)) as usize;
        Some((rank + step) % total)
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

    /// Segmented discovery: which segments the next scan reads at `now_ms` — (own, total, the
    /// rotating other one) — and the count of this worker's own segment for its heartbeat.
    pub fn next_segments(&mut self, now_ms: i64) -> (usize, usize, Option<usize>) {
        let census = self.census(now_ms).unwrap_or_default();
        let census = if census.live.is_empty() {
            Census::read(&[], &self.me, (0, 1), now_ms, 0)
        } else {
            census
        };
        self.scan_turn += 1;
        let (own, total) = census.segment(&self.me);
        self.segments_scanned = total;
        (own, total, census.rotating(&self.me, self.scan_turn))
    }

    /// True once the membership table was read (segmented discovery).
    pub fn segmented(&self) -> bool {
        self.members.is_some()
    }

    /// Segmented discovery: the stream this worker bid on within the last lease, to read
    /// with the next scan (its owner's release goes to this worker, which must see it).
    pub fn bid_to_follow(&self, now_ms: i64) -> Option<Bid> {
        let lease_ms = self.settings.lease.as_millis() as i64;
        self.my_bid
            .as_ref()
            .filter(|(_, at)| *at >= now_ms - lease_ms)
            .map(|(stream, at)| Bid {
                stream_id: stream.clone(),
                bidder: self.me.clone(),
                at: *at,
            })
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
        let core = Supervision::new(super::super::sim_tests::settings(), "me");
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
        // Segments dealt over 3 members, 4 live now: the mean of the scaled counts.
        assert_eq!(c.streams, (31 + 34 + 33 + 33) * 3 / 4);
        assert_eq!(table_size(&[(5, 2), (6, 2)], 2), 11);
        assert_eq!(c.draining, ["w-d"]);
        assert_eq!(c.bids.len(), 1);
        assert_eq!(c.bids[0].bidder, "w-b");
        assert_eq!(c.forget, [("w-long-gone".to_string(), -50_000)]);
        assert_eq!(c.segment("me"), (0, 4));
        assert_eq!(c.segment("w-s"), (3, 4));
    }

    #[test]
    fn a_worker_not_yet_listed_is_a_segment_of_its_own() {
        let c = Census::read(&[], "me", (12, 1), 0, 3_000);
        assert_eq!((c.segment("me"), c.streams), ((0, 1), 12));
        assert_eq!(c.rotating("me", 5), None);
    }

    proptest! {
        /// Every live member has its own segment, and within `total − 1` turns each worker's
        /// rotating segment visits every other segment.
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
            let mut seen: Vec<usize> =
                (0..total.saturating_sub(1) as u64).filter_map(|t| c.rotating(me, t)).collect();
            seen.sort();
            let others: Vec<usize> = (0..total).filter(|s| *s != rank).collect();
            prop_assert_eq!(seen, others);
        }
    }
}
