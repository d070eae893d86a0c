//! Property tests of the supervisor core ([`Supervision`]) on a virtual clock, over the fleet
//! model in `sim`.

use super::sim::*;
use super::*;
use proptest::prelude::*;
use std::time::Duration;

/// A cold start: `streams` free, `workers` started together, scans overlapping. Returns when
/// every stream was held (virtual ms; `None` within 20 s) and how many acquires lost a race.
fn cold_start(streams: usize, workers: usize) -> (Option<i64>, usize) {
    let starts: Vec<i64> = (0..workers as i64).map(|w| w % 3 * TICK_MS).collect();
    let mut sim = Sim::new(streams, &starts);
    sim.overlapping_scans = true;
    // A busy table: a scan takes a tenth of the scan interval, so hurried rescans are spaced
    // by the fleet's size times that, up to the interval itself.
    sim.scan_took = Duration::from_millis(100);
    while sim.now < 20_000 {
        sim.tick();
        if sim.shares().iter().sum::<usize>() == streams {
            return (Some(sim.now), sim.refused);
        }
    }
    (None, sim.refused)
}

/// Workers that see one another take different free streams (each first in line for its own,
/// as for freed ones), so fewer acquires of a cold start lose a race and wait for a rescan.
/// Measured here (2026-12-07): 169 of the acquires refused, all held at 2,400 ms; with rank
/// alone (the negative control: no lines for free streams), 228 refused. What remains are
/// rounds planned on a view taken before the later starters held anything.
#[test]
fn free_streams_in_lines_race_less_on_a_cold_start() {
    let (all_held, refused) = cold_start(600, 12);
    eprintln!("cold start 600 x 12: all held at {all_held:?} ms, {refused} acquires refused");
    assert!(
        all_held.is_some_and(|t| t <= 3_000),
        "all held at {all_held:?}"
    );
    assert!(refused <= 200, "{refused} acquires lost a race");
}

#[test]
fn a_lone_worker_takes_everything() {
    let mut sim = Sim::new(30, &[0]);
    sim.run_until(10_000);
    assert_eq!(sim.shares(), vec![30]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Workers started at random moments own every stream, settle within one of each other, and
    /// then stop moving streams. (Its saved seed — 29 streams, workers started at 451 / 1151 /
    /// 2151 / 2551 ms — found the bid/shed ping-pong: a stream handed over to a bidder was taken
    /// by a third worker, so the bidder bid again for ever. A released stream now goes to its
    /// bidder; see `plan::plan`.)
    #[test]
    fn fleet_settles_without_oscillation(
        streams in 0usize..48,
        starts in prop::collection::vec(0i64..4000, 1..6),
    ) {
        let mut sim = Sim::new(streams, &starts);
        sim.run_until(40_000);
        let quiet = sim.now;
        sim.run_until(60_000);
        sim.check_settled(streams, quiet)?;
    }

    /// After a worker dies, the others take all its streams and settle again.
    #[test]
    fn a_dead_workers_streams_are_taken_and_shares_settle(
        streams in 1usize..40,
        starts in prop::collection::vec(0i64..2000, 2..6),
        victim in 0usize..6,
    ) {
        let mut sim = Sim::new(streams, &starts);
        sim.run_until(30_000);
        sim.kill(victim % starts.len());
        sim.run_until(70_000);
        let quiet = sim.now;
        sim.run_until(90_000);
        sim.check_settled(streams, quiet)?;
    }

    /// Issue #17's crash takeover: each stream of a dead worker is taken as its lease expires
    /// (+ the skew margin, a tick and the second watcher's jitter), not a scan later. The dead
    /// owner still counts as live until its leases expire, so it must not take a watcher's place
    /// on its own streams (it did: a stream whose holder ranked first or second had one live
    /// watcher or none, and waited for the next scan).
    #[test]
    fn a_dead_workers_streams_are_taken_as_their_leases_expire(
        streams in 1usize..40,
        starts in prop::collection::vec(0i64..2000, 2..6),
        victim in 0usize..6,
    ) {
        let mut sim = Sim::new(streams, &starts);
        sim.run_until(30_000);
        let victim = victim % starts.len();
        let name = sim.workers[victim].name.clone();
        let killed_at = sim.now;
        let expiring: Vec<(String, i64)> = sim
            .held_by(&name)
            .into_iter()
            .map(|i| (i.stream_id.clone(), i.lease_expires_at.unwrap_or(0) - sim.base_ms))
            .collect();
        sim.kill(victim);
        sim.run_until(killed_at + LEASE_MS + 10_000);
        for (stream, expires) in expiring {
            let taken = sim.taken_at(&stream, killed_at);
            let bound = expires + SKEW_MS + 2 * TICK_MS + HERD_JITTER_MS;
            prop_assert!(
                taken.is_some_and(|t| t <= bound),
                "{stream} (lease to {expires} ms) taken at {taken:?}, bound {bound} ms"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A drain is a handoff: each released stream is taken moments after its release (the fleet
    /// signal read, plus the herd delay of the taker's place), never a scan later. Releases come
    /// in two batches a tick apart and workers read the signal at different ticks. (The sim's
    /// scans are snapshots, so its views do not diverge the way real paged scans during a drain
    /// do; `a_just_released_stream_wakes_a_worker_with_room_at_its_place` covers that case. A
    /// fleet that ignores the signal fails this: its streams wait for a scan.)
    #[test]
    fn a_drained_workers_streams_are_taken_at_once(
        streams in 4usize..60,
        starts in prop::collection::vec(0i64..2000, 4..8),
        victim in 0usize..7,
        reads in prop::collection::vec(0i64..3, 7),
        split in 0usize..60,
    ) {
        drain_handoff(streams, &starts, victim, &reads, split)?;
    }
}

/// The drain property's body (see `a_drained_workers_streams_are_taken_at_once`).
fn drain_handoff(
    streams: usize,
    starts: &[i64],
    victim: usize,
    reads: &[i64],
    split: usize,
) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(streams, starts);
    for w in &mut sim.workers {
        w.core.on_fleet_signal(0, Vec::new());
    }
    sim.run_until(30_000);
    let victim = victim % starts.len();
    let name = sim.workers[victim].name.clone();
    let mut held: Vec<String> = sim
        .held_by(&name)
        .into_iter()
        .map(|i| i.stream_id.clone())
        .collect();
    held.sort();
    let later = held.split_off(split % (held.len() + 1));
    sim.kill(victim);
    sim.draining = vec![name.clone()];
    let mut released = Vec::new();
    for batch in [held, later] {
        released.extend(batch.iter().map(|s| (s.clone(), sim.now)));
        sim.release(&name, &batch, reads);
        sim.tick();
    }
    sim.run_until(sim.now + 5_000);
    for (stream, at) in released {
        let taken = sim.taken_at(&stream, at);
        let bound = at + 2 * TICK_MS + herd_delay_ms(starts.len()) + 2 * TICK_MS;
        prop_assert!(
            taken.is_some_and(|t| t <= bound),
            "{stream} (released at {at} ms) taken at {taken:?}, bound {bound} ms"
        );
    }
    Ok(())
}

/// A case the property once failed: the taker lined the last stream up for a worker that had
/// not read the signal yet and, drawing the line again after its own acquires, found itself
/// first and due at once — and set no wake for it (taken 1,000 ms after its release).
#[test]
fn a_stream_lined_up_for_a_late_reader_is_taken_by_the_next_in_line() {
    drain_handoff(57, &[1251, 951, 1051, 751], 4, &[0, 0, 0, 2, 0, 0, 0], 1).unwrap();
}

/// Two more it failed, with a worker reading the signal late: the taker had answered a bid
/// in the same round (counted as still running the stream it handed over, it set no wake for
/// the last freed stream) and then kept picking that handed-over stream, held back, in the
/// room the freed one needed.
#[test]
fn a_worker_answering_a_bid_during_a_drain_still_takes_its_place() {
    drain_handoff(18, &[1251, 901, 1001, 1151], 6, &[0, 2, 0, 0, 0, 0, 0], 28).unwrap();
    drain_handoff(
        45,
        &[151, 101, 451, 101, 151, 951],
        0,
        &[0, 0, 0, 0, 0, 2, 0],
        28,
    )
    .unwrap();
}
