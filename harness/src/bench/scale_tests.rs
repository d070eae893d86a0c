//! Unit tests of `bench::scale`'s pure parts: a fleet size's row and the cost model.

use super::*;
use crate::bench::lab::Counts;
use crate::bench::scale_model::MONTH_SECONDS;
use crate::cost::Discovery;

fn window(workers: f64) -> Window {
    // 10 s, 1,000 streams: renewals every 10 s, one 49-unit scan per worker per 10 s, each
    // worker reading the fleet signal 20 times a second at 0.5 units.
    Window {
        ms: 10_000,
        counts: Counts {
            requests: BTreeMap::from([
                ("renew".to_string(), 1_000.0),
                ("scan".to_string(), workers),
                ("fleet_read".to_string(), 200.0 * workers),
            ]),
            capacity: BTreeMap::from([
                ("UpdateItem".to_string(), 1_000.0),
                ("Scan".to_string(), 49.0 * workers),
                ("GetItem".to_string(), 100.0 * workers),
            ]),
            member_capacity: BTreeMap::new(),
            scans: workers,
        },
        harness_cpu_ms: 2_000,
        fleet_rss_bytes: 1_000 * 20_480,
    }
}

#[test]
fn a_row_turns_counts_into_rates_per_stream_hour() {
    let r = row(
        Discovery::Full,
        1_000,
        10,
        &window(10.0),
        &[],
        2,
        Vec::new(),
    );
    assert_eq!(r.write_units_per_stream_hour, 360.0);
    // (490 scan + 1,000 fleet units) over 1,000 streams in 10 s.
    assert!((r.read_units_per_stream_hour - 536.4).abs() < 1e-9, "{r:?}");
    assert_eq!(r.requests_per_stream_hour["renew"], 360.0);
    // Each of 10 workers scans once in 10 s: every item read once a second, the fleet item
    // 200 times more.
    assert_eq!(r.scans_per_s, 1.0);
    assert_eq!(r.hottest_item_reads_per_s, 201.0);
    assert_eq!(r.worker_rss_bytes_per_stream, 20_480.0);
    assert_eq!(r.harness_cpu_share, 0.1);
    assert_eq!(r.crash_samples, 0);
}

#[test]
fn the_cost_model_grows_scans_with_workers_and_caps_the_fleet_signal() {
    let measured = row(
        Discovery::Full,
        1_000,
        10,
        &window(10.0),
        &[],
        2,
        Vec::new(),
    );
    let m = cost_model(
        &[measured],
        &[(1_000, 10), (100_000, 1_000)],
        50,
        0.625,
        0.125,
    );
    let small = &m.rows[0];
    // The measured size prices back to what was measured.
    assert!((small.write_units_per_s - 100.0).abs() < 1e-9);
    assert!(
        (small.read_units_per_s - (49.0 + 100.0)).abs() < 1e-9,
        "{small:?}"
    );
    assert!((small.hottest_item_reads_per_s - 201.0).abs() < 1e-9);
    let large = &m.rows[1];
    assert!((large.write_units_per_s - 10_000.0).abs() < 1e-6);
    // Scans: 4.9e-3 units per stream per worker per second × 1e5 × 1e3; the fleet signal's
    // polls get what the 1,000 workers' scans (100 a second) leave of 1,000 reads/s: 900 ×
    // 0.5 units.
    assert!(
        (large.read_units_per_s - (490_000.0 + 450.0)).abs() < 1e-6,
        "{large:?}"
    );
    assert!((large.hottest_item_reads_per_s - 1_000.0).abs() < 1e-6);
    let usd = (10_000.0 * 0.625 + 490_450.0 * 0.125) * MONTH_SECONDS / 1e6;
    assert!((large.usd_per_month - usd).abs() < 1e-6);
    assert!(m.assumptions.iter().any(|a| a.contains("1000 reads/s")));
}

/// A segmented fleet of 10 in 10 s over 1,000 streams: each worker scans three segments of 100
/// items (about 5 units each), heartbeats once and reads the 10 members (0.5 units).
fn segmented_window() -> Window {
    Window {
        ms: 10_000,
        counts: Counts {
            requests: BTreeMap::from([
                ("renew".to_string(), 1_000.0),
                ("scan".to_string(), 30.0),
                ("member_scan".to_string(), 10.0),
                ("member_put".to_string(), 10.0),
                ("fleet_read".to_string(), 2_000.0),
            ]),
            capacity: BTreeMap::from([
                ("UpdateItem".to_string(), 1_010.0),
                ("Scan".to_string(), 105.0),
                ("GetItem".to_string(), 1_000.0),
            ]),
            member_capacity: BTreeMap::from([
                ("UpdateItem".to_string(), 10.0),
                ("Scan".to_string(), 5.0),
            ]),
            scans: 10.0,
        },
        harness_cpu_ms: 1_000,
        fleet_rss_bytes: 0,
    }
}

#[test]
fn segmented_scans_are_priced_per_stream_and_members_per_worker_squared() {
    let measured = row(
        Discovery::Segmented,
        1_000,
        10,
        &segmented_window(),
        &[],
        2,
        Vec::new(),
    );
    // The fleet signal's segment: its 200 polls a second plus 3 × (1 scan a second / 10).
    assert!(
        (measured.hottest_item_reads_per_s - 200.3).abs() < 1e-9,
        "{measured:?}"
    );
    let m = cost_model(
        &[measured],
        &[(1_000, 10), (100_000, 1_000)],
        50,
        0.625,
        0.125,
    );
    let small = &m.rows[0];
    assert_eq!(small.discovery, Discovery::Segmented);
    // Renewals 100 + heartbeats 1 a second; lease scans 10, members 0.5, fleet 100 units/s.
    assert!((small.write_units_per_s - 101.0).abs() < 1e-9, "{small:?}");
    assert!((small.read_units_per_s - 110.5).abs() < 1e-9, "{small:?}");
    let large = &m.rows[1];
    // Segments: measured 10 units/s where 3 block reads of 5 blocks (100 items of 200 bytes)
    // per worker every 10 s give 7.5, so ×4/3; at 100× the streams and workers each segment
    // still holds 100 items: 1,000 × 0.1 × 3 × 5 × 0.5 × 4/3 = 1,000 units/s (100× the scans,
    // not 10,000×). Members: measured 0.5/s = 10 × 0.1 × 1 block × 0.5 (×1); at 1,000 workers
    // a member read is 37 blocks: 1,000 × 0.1 × 37 × 0.5 = 1,850. The fleet signal's polls get
    // what three scans every 10 s leave of its 1,000 reads/s (999.7), 0.5 units each.
    assert!((large.write_units_per_s - (10_000.0 + 100.0)).abs() < 1e-6);
    assert!(
        (large.read_units_per_s - (1_000.0 + 1_850.0 + 499.85)).abs() < 1e-6,
        "{large:?}"
    );
    // A membership item is read by each of 1,000 workers' scans (one each 10 s): 100/s; the
    // fleet signal 999.7 + 0.3: the budget, no more.
    assert!(
        (large.hottest_item_reads_per_s - 1_000.0).abs() < 1e-6,
        "{large:?}"
    );
    assert!(m.assumptions.iter().any(|a| a.starts_with("segmented:")));
}
