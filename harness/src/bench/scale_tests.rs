//! Unit tests of `bench::scale`'s pure parts: a fleet size's row and the cost model.

use super::*;
use crate::bench::lab::Counts;

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
            scans: workers,
        },
        harness_cpu_ms: 2_000,
        fleet_rss_bytes: 1_000 * 20_480,
    }
}

#[test]
fn a_row_turns_counts_into_rates_per_stream_hour() {
    let r = row(1_000, 10, &window(10.0), &[], 2, Vec::new());
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
    let measured = row(1_000, 10, &window(10.0), &[], 2, Vec::new());
    let m = cost_model(
        &measured,
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
