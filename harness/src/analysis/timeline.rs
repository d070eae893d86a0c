//! The metrics that judge the sink's receipts against the table's own lease timeline and
//! against time (design §9): late, expired and superseded writes, every stream's longest stall
//! and longest time without a valid lease. Fed the history's records in file order; pure, so
//! `harness report` recomputes the same figures.
//!
//! Clocks: `t_ms` of a `lease` line is when the harness learned of the write (at most the
//! source's resolution after it), so a grant is never placed earlier than it happened and a
//! write is only called late once the harness had seen the grant. `lease_expires_at` is the
//! table's Unix ms, read on the harness's clock through `run_start.wall_ms`.

use std::collections::HashMap;

use crate::history::{LeaseChange, LeaseOp, Outcome, Receipt};

/// The figures this module computes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimelineFigures {
    pub late_writes: u64,
    pub late_write_ms_max: Option<u64>,
    pub expired_writes: u64,
    pub superseded_accepted: u64,
    pub max_stall_ms: Option<u64>,
    pub stalled_streams: u64,
    pub unowned_ms_max: Option<u64>,
    /// Per stream, the longest stall (ms), for the report's table.
    pub stalls: Vec<(String, u64)>,
}

/// One stream's view of the table and of its accepted events.
#[derive(Default)]
struct Stream {
    /// Grants in the order learned: (t_ms learned, fence).
    grants: Vec<(u64, u64)>,
    /// Latest expiry (Unix ms) the table showed for each fence, and when that fence's holder
    /// released it (run ms), if it did.
    expiry: HashMap<u64, i64>,
    released: HashMap<u64, u64>,
    /// The lease as last seen: (owner present, fence, expires at Unix ms).
    lease: Option<(bool, Option<u64>, Option<i64>)>,
    lease_t_ms: u64,
    /// Run ms since which the stream has had no valid lease, while inside the window.
    unowned_since: Option<u64>,
    /// Last accepted event (run ms) inside the production window, for stalls.
    last_accepted: Option<u64>,
    longest_stall: u64,
}

/// Reads receipts, lease lines and phase boundaries; [`Timeline::finish`] gives the figures.
#[derive(Default)]
pub struct Timeline {
    wall_ms: i64,
    stall_threshold_ms: u64,
    /// The judged window: from the end of the warm-up to production's stop.
    window_start: Option<u64>,
    window_end: Option<u64>,
    streams: HashMap<String, Stream>,
    figures: TimelineFigures,
    unowned_max: u64,
    saw_lease: bool,
}

impl Timeline {
    /// `wall_ms`: Unix ms of the run's t0; `stall_threshold_ms`: a stall longer than this makes
    /// a stream stalled.
    pub fn new(wall_ms: i64, stall_threshold_ms: u64) -> Timeline {
        Timeline {
            wall_ms,
            stall_threshold_ms,
            ..Timeline::default()
        }
    }

    /// The stream's state; a stream first seen inside the window counts as stalled and
    /// unowned from the window's start.
    fn stream(&mut self, id: &str) -> &mut Stream {
        if !self.streams.contains_key(id) {
            let mut s = Stream::default();
            if let (Some(start), None) = (self.window_start, self.window_end) {
                s.last_accepted = Some(start);
                s.unowned_since = Some(start);
            }
            self.streams.insert(id.to_string(), s);
        }
        self.streams.get_mut(id).expect("inserted above")
    }

    /// The warm-up ended at `t_ms`: stalls and unowned time count from here.
    pub fn window_start(&mut self, t_ms: u64) {
        if self.window_start.is_some() {
            return;
        }
        self.window_start = Some(t_ms);
        let wall = self.wall_ms;
        for s in self.streams.values_mut() {
            s.last_accepted = Some(t_ms);
            s.unowned_since = (!valid_at(s.lease, wall + t_ms as i64)).then_some(t_ms);
        }
    }

    /// Production stopped at `t_ms`: the window closes.
    pub fn window_end(&mut self, t_ms: u64) {
        let Some(start) = self.window_start else {
            return;
        };
        if self.window_end.is_some() {
            return;
        }
        self.window_end = Some(t_ms);
        let wall = self.wall_ms;
        let mut unowned_max = self.unowned_max;
        for s in self.streams.values_mut() {
            if let Some(last) = s.last_accepted {
                s.longest_stall = s.longest_stall.max(t_ms.saturating_sub(last));
            }
            advance(s, t_ms, wall, start, &mut unowned_max);
        }
        self.unowned_max = unowned_max;
    }

    /// A stream the run produced for (its `upstream_final`), so one that never showed up in
    /// the window still counts, stalled and unowned throughout.
    pub fn known_stream(&mut self, id: &str) {
        if self.streams.contains_key(id) {
            return;
        }
        if let (Some(start), Some(end)) = (self.window_start, self.window_end) {
            let s = self.stream(id);
            s.longest_stall = end - start;
            s.last_accepted = Some(start);
            self.unowned_max = self.unowned_max.max(end - start);
        }
    }

    fn in_window(&self) -> bool {
        self.window_start.is_some() && self.window_end.is_none()
    }

    /// One `lease` line.
    pub fn lease(&mut self, l: &LeaseChange) {
        self.saw_lease = true;
        let window = self.window_start.filter(|_| self.window_end.is_none());
        let wall = self.wall_ms;
        let mut unowned_max = self.unowned_max;
        let s = self.stream(&l.stream_id);
        if let Some(start) = window {
            advance(s, l.t_ms, wall, start, &mut unowned_max);
        }
        let before_fence = s.lease.and_then(|(_, f, _)| f);
        if let (Some(fence), Some(_)) = (l.fence_token, &l.owner_id) {
            if l.op == LeaseOp::Acquire || before_fence < Some(fence) {
                s.grants.push((l.t_ms, fence));
            }
            if let Some(at) = l.lease_expires_at {
                let e = s.expiry.entry(fence).or_insert(at);
                *e = (*e).max(at);
            }
        }
        if l.owner_id.is_none() {
            if let Some(fence) = before_fence {
                s.released.entry(fence).or_insert(l.t_ms);
            }
        }
        s.lease = Some((l.owner_id.is_some(), l.fence_token, l.lease_expires_at));
        s.lease_t_ms = l.t_ms;
        if window.is_some() {
            if valid_at(s.lease, wall + l.t_ms as i64) {
                s.unowned_since = None;
            } else if s.unowned_since.is_none() {
                s.unowned_since = Some(l.t_ms);
            }
        }
        self.unowned_max = unowned_max;
    }

    /// One receipt (any outcome).
    pub fn receipt(&mut self, r: &Receipt) {
        let in_window = self.in_window();
        let wall = self.wall_ms;
        let s = self.stream(&r.stream_id);
        // Late: the table had granted a higher fence before the sink received this.
        let superseded_at = s
            .grants
            .iter()
            .filter(|(t, f)| *f > r.fence_token && *t <= r.t_ms)
            .map(|(t, _)| *t)
            .min();
        let mut late_by = None;
        if let Some(t) = superseded_at {
            late_by = Some(r.t_ms - t);
        }
        // Expired: past the table's last expiry for this fence, or after its release.
        let expired = s
            .expiry
            .get(&r.fence_token)
            .is_some_and(|&e| wall + r.t_ms as i64 > e)
            || s.released.get(&r.fence_token).is_some_and(|&t| r.t_ms > t);
        if r.outcome == Outcome::Accepted && in_window {
            if let Some(last) = s.last_accepted {
                s.longest_stall = s.longest_stall.max(r.t_ms.saturating_sub(last));
            }
            s.last_accepted = Some(r.t_ms);
        }
        let f = &mut self.figures;
        if let Some(ms) = late_by {
            f.late_writes += 1;
            f.late_write_ms_max = f.late_write_ms_max.max(Some(ms));
            if r.outcome == Outcome::Accepted {
                f.superseded_accepted += 1;
            }
        }
        if expired {
            f.expired_writes += 1;
        }
    }

    /// The figures. Stall and unowned figures are null when the window never opened; unowned
    /// is null without any `lease` line (a history written before they were recorded).
    pub fn finish(mut self) -> TimelineFigures {
        if self.window_start.is_none() {
            return self.figures;
        }
        let mut stalls: Vec<(String, u64)> = self
            .streams
            .iter()
            .filter(|(_, s)| s.last_accepted.is_some())
            .map(|(id, s)| (id.clone(), s.longest_stall))
            .collect();
        stalls.sort();
        let f = &mut self.figures;
        f.max_stall_ms = stalls.iter().map(|(_, ms)| *ms).max();
        f.stalled_streams = stalls
            .iter()
            .filter(|(_, ms)| *ms > self.stall_threshold_ms)
            .count() as u64;
        f.stalls = stalls;
        if self.saw_lease && self.window_end.is_some() {
            f.unowned_ms_max = Some(self.unowned_max);
        }
        self.figures
    }
}

/// True when the lease `(owner present, fence, expires)` is valid at Unix ms `wall_now`.
fn valid_at(lease: Option<(bool, Option<u64>, Option<i64>)>, wall_now: i64) -> bool {
    matches!(lease, Some((true, _, Some(expires))) if expires >= wall_now)
}

/// Brings the stream's unowned run up to run ms `t_ms`: a lease valid at its last line may
/// have lapsed since (then the stream is unowned from its expiry); an open run counts so far.
fn advance(s: &mut Stream, t_ms: u64, wall: i64, window_start: u64, max: &mut u64) {
    if s.unowned_since.is_none() {
        if let Some((true, _, Some(expires))) = s.lease {
            let lapsed = expires - wall;
            if lapsed < t_ms as i64 {
                let since = (lapsed.max(0) as u64).max(s.lease_t_ms).max(window_start);
                s.unowned_since = Some(since);
            }
        }
    }
    if let Some(since) = s.unowned_since {
        *max = (*max).max(t_ms.saturating_sub(since));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WALL: i64 = 1_000_000;

    fn lease(
        t_ms: u64,
        op: LeaseOp,
        owner: Option<&str>,
        fence: u64,
        expires_run: i64,
    ) -> LeaseChange {
        LeaseChange {
            t_ms,
            stream_id: "s".into(),
            op,
            owner_id: owner.map(String::from),
            fence_token: Some(fence),
            lease_expires_at: Some(WALL + expires_run),
            checkpoint: None,
            updated_at: None,
        }
    }

    fn receipt(t_ms: u64, fence: u64, owner: &str, outcome: Outcome) -> Receipt {
        Receipt {
            t_ms,
            stream_id: "s".into(),
            seq: t_ms,
            fence_token: fence,
            owner_id: owner.into(),
            outcome,
        }
    }

    /// w1 holds fence 1 (renewed to expire at 3 050), is paused, and w2 is granted fence 2 at
    /// 3 300; w1 wakes at 5 000 and writes twice more.
    fn zombie(w1_checks_its_deadline: bool) -> TimelineFigures {
        let mut t = Timeline::new(WALL, 2_000);
        t.lease(&lease(100, LeaseOp::Acquire, Some("w1"), 1, 2_100));
        t.window_start(500);
        t.receipt(&receipt(600, 1, "w1", Outcome::Accepted));
        t.receipt(&receipt(1_000, 1, "w1", Outcome::Accepted));
        t.lease(&lease(1_050, LeaseOp::Renew, Some("w1"), 1, 3_050));
        t.lease(&lease(3_300, LeaseOp::Acquire, Some("w2"), 2, 6_300));
        t.receipt(&receipt(3_400, 2, "w2", Outcome::Accepted));
        if !w1_checks_its_deadline {
            t.receipt(&receipt(5_000, 1, "w1", Outcome::Accepted)); // fencing off
            t.receipt(&receipt(5_010, 1, "w1", Outcome::Fenced));
        }
        t.receipt(&receipt(5_500, 2, "w2", Outcome::Accepted));
        t.window_end(6_000);
        t.finish()
    }

    #[test]
    fn a_zombie_that_writes_after_the_new_grant_is_late_expired_and_superseded() {
        let f = zombie(false);
        assert_eq!(f.late_writes, 2);
        assert_eq!(f.late_write_ms_max, Some(5_010 - 3_300));
        assert_eq!(f.expired_writes, 2);
        assert_eq!(f.superseded_accepted, 1);
        // Stalls: w1 last wrote at 1 000, w2 first at 3 400.
        assert_eq!(f.max_stall_ms, Some(2_400));
        assert_eq!(f.stalled_streams, 1, "2 400 > the 2 000 threshold");
        // No valid lease from w1's expiry at 3 050 to w2's grant seen at 3 300.
        assert_eq!(f.unowned_ms_max, Some(250));
    }

    #[test]
    fn a_worker_that_stops_at_its_deadline_writes_nothing_late() {
        let f = zombie(true);
        assert_eq!(
            (f.late_writes, f.expired_writes, f.superseded_accepted),
            (0, 0, 0)
        );
        assert_eq!(f.late_write_ms_max, None);
    }

    #[test]
    fn a_write_after_its_own_release_is_expired() {
        let mut t = Timeline::new(WALL, 10_000);
        t.lease(&lease(100, LeaseOp::Acquire, Some("w1"), 1, 3_100));
        t.window_start(200);
        t.receipt(&receipt(300, 1, "w1", Outcome::Accepted));
        t.lease(&lease(400, LeaseOp::Release, None, 1, 3_100));
        t.receipt(&receipt(500, 1, "w1", Outcome::Accepted));
        t.window_end(1_000);
        let f = t.finish();
        assert_eq!(f.expired_writes, 1);
        assert_eq!(f.late_writes, 0, "no higher fence was granted");
        assert_eq!(
            f.unowned_ms_max,
            Some(600),
            "released at 400, window ends at 1 000"
        );
    }

    #[test]
    fn a_stream_that_never_flows_stalls_for_the_whole_window() {
        let mut t = Timeline::new(WALL, 1_000);
        t.window_start(1_000);
        t.window_end(4_000);
        t.known_stream("quiet");
        let f = t.finish();
        assert_eq!(f.max_stall_ms, Some(3_000));
        assert_eq!(f.stalled_streams, 1);
        assert_eq!(f.unowned_ms_max, None, "no lease timeline, no figure");
    }

    #[test]
    fn without_a_warm_up_there_is_no_stall_figure() {
        let mut t = Timeline::new(WALL, 1_000);
        t.receipt(&receipt(300, 1, "w1", Outcome::Accepted));
        t.window_end(4_000);
        assert_eq!(t.finish().max_stall_ms, None);
    }
}
