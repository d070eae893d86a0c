//! Unit and property tests of the decision core, on a virtual clock.

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_millis(3000);
const MARGIN: Duration = Duration::from_millis(300);

fn timing() -> Timing {
    Timing {
        lease: LEASE,
        safety_margin: MARGIN,
    }
}

#[test]
fn deadline_counts_from_the_request_start() {
    let t0 = Instant::now();
    let mut core = StreamCore::new(1, 0, t0, timing(), true);
    assert_eq!(core.deadline(), t0 + LEASE - MARGIN);
    assert!(core.may_publish(t0 + LEASE - MARGIN - Duration::from_millis(1)));
    assert!(!core.may_publish(t0 + LEASE - MARGIN));
    core.on_renewed(t0 + Duration::from_millis(1000));
    assert_eq!(
        core.deadline(),
        t0 + Duration::from_millis(1000) + LEASE - MARGIN
    );
    // An older renewal answering late never moves the deadline back.
    core.on_renewed(t0 + Duration::from_millis(10));
    assert_eq!(
        core.deadline(),
        t0 + Duration::from_millis(1000) + LEASE - MARGIN
    );
}

#[test]
fn the_lease_timeline_carries_the_written_expiry_on_the_monotonic_clock() {
    let t0 = Instant::now();
    let lease = Duration::from_millis(2_000);
    let mut timeline = LeaseTimeline::new(10_000, t0, 8_000, lease);
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    // Clocks agree: wall clock + lease, judged at the wall clock.
    assert_eq!(timeline.renewal(8_500, at(500)), (8_500, 10_500));
    timeline.on_applied(10_500, at(500));
    // The wall clock stepped 6 s back: the carried expiry, past the stored one, so the
    // monotone condition holds; judged at the wall clock (the earlier).
    assert_eq!(timeline.renewal(3_500, at(1_000)), (3_500, 11_000));
    timeline.on_applied(11_000, at(1_000));
    // Stepped 8 s forward: the wall clock's expiry; judged at the carried time, so the
    // condition's "not expired yet" still holds against the stored 11,000.
    assert_eq!(timeline.renewal(17_500, at(1_500)), (9_500, 19_500));
    timeline.on_applied(19_500, at(1_500));
    // Never backwards, whatever the wall clock does next.
    let (_, expires) = timeline.renewal(0, at(2_000));
    assert_eq!(expires, 20_000);
    // An answer to an older request never moves the anchor back.
    timeline.on_applied(12_000, at(1_900));
    assert_eq!(timeline.renewal(0, at(2_000)).1, 20_000);
}

/// An acquire that waited 40 ms for the write window before it read the wall clock: its expiry
/// is wall clock + lease from the moment it left, and a renewal when the clocks agree asks for
/// wall clock + lease again, not 40 ms more (carried from the wait's start it did, and every
/// renewal after it: `bench takeover` then saw takeovers before the table's expiry + skew).
#[test]
fn a_wait_before_the_acquire_left_is_not_carried_into_the_expiry() {
    let t0 = Instant::now();
    let lease = Duration::from_millis(2_000);
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut timeline = LeaseTimeline::new(10_040, t0, 8_000, lease);
    assert_eq!(timeline.renewal(8_500, at(500)), (8_500, 10_500));
    timeline.on_applied(10_500, at(500));
    assert_eq!(timeline.renewal(9_500, at(1_500)), (9_500, 11_500));
}

#[test]
fn chaos_mode_ignores_the_deadline_but_not_a_loss() {
    let t0 = Instant::now();
    let mut core = StreamCore::new(1, 0, t0, timing(), false);
    assert!(core.may_publish(t0 + LEASE * 10));
    assert!(!core.past_deadline(t0 + LEASE * 10));
    core.on_lost(LostReason::SinkFenced);
    assert!(!core.may_publish(t0));
}

#[test]
fn replays_are_skipped_and_jumps_retried_for_a_bounded_time() {
    let t0 = Instant::now();
    let mut core = StreamCore::new(1, 10, t0, timing(), true);
    assert_eq!(core.resume_from(), 11);
    assert_eq!(core.on_event(9, t0), EventVerdict::Replayed);
    assert_eq!(core.on_event(11, t0), EventVerdict::Take);
    assert_eq!(core.on_event(11, t0), EventVerdict::Replayed);
    assert_eq!(core.on_event(14, t0), EventVerdict::Jump { expected: 12 });
    assert_eq!(core.resume_from(), 12);
    // Retried (reconnect and ask again) until the patience runs out...
    let almost = t0 + JUMP_PATIENCE - Duration::from_millis(1);
    assert_eq!(
        core.on_event(14, almost),
        EventVerdict::Jump { expected: 12 }
    );
    assert_eq!(
        core.on_event(13, almost),
        EventVerdict::Jump { expected: 12 }
    );
    // ...then recorded as loss.
    let after = t0 + JUMP_PATIENCE;
    assert_eq!(
        core.on_event(14, after),
        EventVerdict::TakeAfterGap { missing: 2 }
    );
    assert_eq!(core.resume_from(), 15);
    // A jump that heals in time loses nothing.
    assert_eq!(
        core.on_event(17, after),
        EventVerdict::Jump { expected: 15 }
    );
    assert_eq!(
        core.on_event(15, after + JUMP_PATIENCE / 2),
        EventVerdict::Take
    );
    assert_eq!(
        core.on_event(16, after + JUMP_PATIENCE / 2),
        EventVerdict::Take
    );
}

#[test]
fn gap_notice_moves_past_lost_events_only() {
    let mut core = StreamCore::new(1, 4, Instant::now(), timing(), true);
    assert_eq!(core.on_gap(900), 895);
    assert_eq!(core.resume_from(), 900);
    assert_eq!(core.accepted(), 4, "a gap is not an acceptance");
    assert_eq!(core.on_gap(10), 0);
}

#[test]
fn checkpoint_follows_the_sink() {
    let mut core = StreamCore::new(3, 0, Instant::now(), timing(), true);
    assert_eq!(core.checkpoint_due(), None);
    for seq in 1..=5 {
        assert_eq!(core.on_event(seq, Instant::now()), EventVerdict::Take);
    }
    assert_eq!(core.checkpoint_due(), None, "nothing accepted yet");
    core.on_sink_accepted(3);
    assert_eq!(core.checkpoint_due(), Some(3));
    core.on_checkpoint_written(3);
    assert_eq!(core.checkpoint_due(), None);
    assert_eq!(core.checkpoint_lag(), 2);
}

#[test]
fn backoff_is_bounded_and_stops_at_the_deadline() {
    let t0 = Instant::now();
    let core = StreamCore::new(1, 0, t0, timing(), true);
    let b = Backoff {
        base: Duration::from_millis(100),
        cap: Duration::from_millis(1000),
    };
    assert_eq!(b.delay(0, 0.999_999).as_millis(), 99);
    assert_eq!(b.delay(30, 0.5), Duration::from_millis(500));
    assert!(core.retry_after(b, 3, 0.5, t0).is_some());
    let late = core.deadline() - Duration::from_millis(100);
    assert_eq!(core.retry_after(b, 5, 0.5, late), None);
}

proptest! {
    /// Whatever the sequence of renewals and clock jumps, a stream may publish only before the
    /// latest successful renewal's request start + lease − margin, and every timeout and retry
    /// delay the core hands out ends before the deadline.
    #[test]
    fn never_publishes_past_the_local_deadline(
        steps in prop::collection::vec((0u64..2_000, any::<bool>(), 0u64..2_000, 0.0f64..1.0), 1..60)
    ) {
        let t0 = Instant::now();
        let mut core = StreamCore::new(1, 0, t0, timing(), true);
        let mut now = t0;
        let mut latest_start = t0;
        for (advance, renewed, started_ago, unit) in steps {
            now += Duration::from_millis(advance);
            if renewed {
                let started = now.checked_sub(Duration::from_millis(started_ago)).unwrap_or(t0).max(t0);
                core.on_renewed(started);
                latest_start = latest_start.max(started);
            }
            let bound = latest_start + LEASE - MARGIN;
            if core.may_publish(now) {
                prop_assert!(now < bound);
            } else {
                prop_assert!(core.past_deadline(now));
            }
            if let Some(t) = core.call_timeout(now, Duration::from_secs(5)) {
                prop_assert!(now + t <= core.deadline());
            }
            let b = Backoff { base: Duration::from_millis(50), cap: Duration::from_secs(2) };
            if let Some(d) = core.retry_after(b, 4, unit, now) {
                prop_assert!(now + d < core.deadline());
            }
        }
    }

    /// Fence tokens admitted for a stream strictly increase, whatever the table answers.
    #[test]
    fn fence_never_decreases(acquisitions in prop::collection::vec((0usize..3, 0u64..20), 0..80)) {
        let mut book = FenceBook::default();
        let mut last: HashMap<usize, u64> = HashMap::new();
        for (stream, fence) in acquisitions {
            if book.admit(&format!("s{stream}"), fence) {
                if let Some(prev) = last.get(&stream) {
                    prop_assert!(fence > *prev);
                }
                last.insert(stream, fence);
            }
        }
    }

    /// The checkpoint due (and persisted) never passes what the sink accepted, accepted never
    /// passes what was taken, and no sequence is taken twice.
    #[test]
    fn checkpoint_never_passes_sink_accepted(
        start in 0u64..50,
        ops in prop::collection::vec((0u8..5, 0u64..8), 0..120)
    ) {
        let mut clock = Instant::now();
        let mut core = StreamCore::new(1, start, clock, timing(), true);
        let mut taken: Vec<u64> = Vec::new();
        let mut acked_upto = 0usize;
        let mut accepted_points = vec![start];
        for (op, n) in ops {
            match op {
                // Next events, possibly a replay (n small) or a jump (n large).
                0 | 1 => {
                    let seq = (core.resume_from() + n).saturating_sub(2);
                    clock += Duration::from_secs(1);
                    match core.on_event(seq, clock) {
                        EventVerdict::Take | EventVerdict::TakeAfterGap { .. } => {
                            if let Some(prev) = taken.last() { prop_assert!(seq > *prev); }
                            prop_assert!(seq > start);
                            taken.push(seq);
                        }
                        EventVerdict::Replayed => prop_assert!(seq <= core.taken()),
                        EventVerdict::Jump { expected } => prop_assert_eq!(expected, core.resume_from()),
                    }
                }
                // The sink accepts the next batch of up to n taken events.
                2 => {
                    let upto = (acked_upto + n as usize).min(taken.len());
                    if upto > acked_upto {
                        let through = taken[upto - 1];
                        core.on_sink_accepted(through);
                        accepted_points.push(through);
                        acked_upto = upto;
                    }
                }
                // A renewal carries the due checkpoint.
                3 => {
                    if let Some(cp) = core.checkpoint_due() {
                        prop_assert!(cp <= core.accepted());
                        core.on_checkpoint_written(cp);
                    }
                }
                // A gap notice.
                _ => {
                    core.on_gap(core.resume_from() + n);
                }
            }
            prop_assert!(core.persisted() <= core.accepted());
            prop_assert!(core.accepted() <= core.taken());
            prop_assert!(accepted_points.contains(&core.accepted()));
            prop_assert!(accepted_points.contains(&core.persisted()));
        }
    }

}

/// The fleet signal is never a hot key: the whole fleet reads it, polls and scans together, at
/// most `FLEET_READS_PER_SECOND` times a second whenever the scans leave room (and the polls
/// take at most half the budget when they do not); a small fleet polls at the configured
/// interval.
#[test]
fn fleet_signal_reads_stay_under_the_budget_at_any_fleet_size() {
    let base = Duration::from_millis(50);
    let scan = Duration::from_secs(10);
    let ms = |d: Duration| d.as_millis();
    assert_eq!(fleet_poll_for(base, 1, scan), base);
    assert_eq!(fleet_poll_for(base, 49, scan), base);
    assert_eq!(ms(fleet_poll_for(base, 100, scan)), 101);
    assert_eq!(ms(fleet_poll_for(base, 1_000, scan)), 1_111);
    assert_eq!(
        fleet_poll_for(Duration::from_millis(30), 0, scan),
        Duration::from_millis(30)
    );
    for owners in [1usize, 7, 49, 51, 333, 1_000, 10_000, 100_000] {
        for base_ms in [1u64, 30, 50, 200] {
            for scan_s in [0.0, 1.0, 10.0, 30.0] {
                let scan = Duration::from_secs_f64(scan_s);
                let every = fleet_poll_for(Duration::from_millis(base_ms), owners, scan);
                let polls = owners as f64 / every.as_secs_f64();
                let scans = if scan_s == 0.0 {
                    0.0
                } else {
                    owners as f64 / scan_s
                };
                let budget = f64::from(FLEET_READS_PER_SECOND);
                assert!(
                    // (1e-3: the interval is rounded to whole nanoseconds.)
                    polls + scans <= budget + 1e-3 || polls <= budget / 2.0 + 1e-3,
                    "{owners} workers at {every:?}, scan {scan_s} s: {polls} polls/s + {scans} scans/s"
                );
                assert!(every >= Duration::from_millis(base_ms));
            }
        }
    }
}
