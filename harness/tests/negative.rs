//! Negative controls: runs that MUST fail, each proving a check of the harness can fire. If the
//! checker stops catching one of these, its test fails. Real DynamoDB Local and real
//! `lease-worker` processes, through the `harness` command line (needs
//! `target/debug/lease-worker`, built by `cargo test --workspace` or `cargo build -p lease-worker`).

mod e2e_common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use e2e_common::{assert_exit, harness, report as read_report, worker_bin};
use harness::scenario::{FaultAction, Scenario, Target};

fn scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

/// Runs a scenario file with the real worker (or `bin`) into `DIR/out`.
fn run_file(dir: &Path, scenario: &Path, bin: &Path) -> (std::process::Output, PathBuf) {
    let out = dir.join("out");
    let output = harness()
        .arg("run")
        .arg(scenario)
        .arg("--out")
        .arg(&out)
        .arg("--worker-bin")
        .arg(bin)
        .output()
        .unwrap();
    (output, out)
}

/// The failed expectation on `metric`, or a panic showing them all.
fn failed_on(report: &serde_json::Value, metric: &str) -> serde_json::Value {
    let expectations = report["expectations"].as_array().unwrap();
    expectations
        .iter()
        .find(|e| e["metric"] == metric && e["passed"] == false)
        .unwrap_or_else(|| panic!("no failed expectation on {metric}: {expectations:#?}"))
        .clone()
}

#[test]
fn the_zombie_writer_schedule_is_pause_past_lease_with_the_deadline_check_off() {
    let shipped = Scenario::load(&scenarios().join("pause-past-lease.toml")).unwrap();
    let zombie = Scenario::load(&scenarios().join("negative/zombie-writer.toml")).unwrap();
    assert_eq!(zombie.lease, shipped.lease);
    assert_eq!(zombie.upstream, shipped.upstream);
    assert_eq!(zombie.run, shipped.run);
    assert_eq!(zombie.faults.len(), shipped.faults.len());
    for (z, s) in zombie.faults.iter().zip(&shipped.faults) {
        assert_eq!(z.at_ms, s.at_ms);
        match (&z.action, &s.action) {
            (
                FaultAction::Pause {
                    target: Target::Worker(n),
                    duration_ms: a,
                },
                FaultAction::Pause { duration_ms: b, .. },
            ) => {
                assert_eq!(a, b);
                let name = harness::scenario::worker_name(*n);
                assert_eq!(
                    zombie.fleet.worker_env[&name]["CHAOS_SKIP_DEADLINE_CHECK"],
                    "true"
                );
            }
            other => panic!("not the same pause: {other:?}"),
        }
    }
    let names = |s: &Scenario| -> Vec<(String, String)> {
        s.expectations
            .iter()
            .map(|e| (e.metric.clone(), e.threshold_expr.clone()))
            .collect()
    };
    assert_eq!(names(&zombie), names(&shipped), "the same expectations");
}

#[test]
fn a_writer_past_its_lease_fails_on_late_writes() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenarios().join("negative/zombie-writer.toml");
    let (output, out) = run_file(dir.path(), &scenario, &worker_bin());
    assert_exit(&output, 1);
    let report = read_report(&out);
    let late = report["totals"]["late_writes"].as_u64().unwrap();
    assert!(late > 0, "{}", report["totals"]);
    assert!(report["totals"]["late_write_ms_max"].as_u64().is_some());
    failed_on(&report, "totals.late_writes");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("FAIL") && stdout.contains("[totals.late_writes]"),
        "{stdout}"
    );
    // Fencing still refused the zombie: the failure is the timeline's finding, not the sink's.
    assert_eq!(report["totals"]["stale_accepted"], 0);
    assert_eq!(report["lease_source"]["source"], "dynamodb_streams");
}

#[test]
fn a_zombie_against_an_unfenced_sink_fails_on_stale_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenarios().join("negative/zombie-unfenced.toml");
    let (output, out) = run_file(dir.path(), &scenario, &worker_bin());
    assert_exit(&output, 1);
    let report = read_report(&out);
    assert_eq!(report["config"]["fencing"], false);
    assert!(
        report["totals"]["stale_accepted"].as_u64().unwrap() > 0,
        "{}",
        report["totals"]
    );
    failed_on(&report, "totals.stale_accepted");
    assert!(report["totals"]["superseded_accepted"].as_u64().unwrap() > 0);
}

#[test]
fn the_stuck_upstream_schedule_is_upstream_half_open_with_the_idle_deadline_off() {
    let shipped = Scenario::load(&scenarios().join("upstream-half-open.toml")).unwrap();
    let stuck = Scenario::load(&scenarios().join("negative/stuck-upstream.toml")).unwrap();
    assert_eq!(stuck.lease, shipped.lease);
    assert_eq!(stuck.upstream, shipped.upstream);
    assert_eq!(stuck.run, shipped.run);
    assert_eq!(stuck.faults.len(), shipped.faults.len());
    for (a, b) in stuck.faults.iter().zip(&shipped.faults) {
        assert_eq!((a.at_ms, &a.action), (b.at_ms, &b.action));
    }
    assert_eq!(stuck.expectations, shipped.expectations);
    assert_eq!(
        stuck.fleet.env.get("UPSTREAM_IDLE_MS").map(String::as_str),
        Some("0")
    );
    assert!(
        shipped.fleet.env.is_empty(),
        "the shipped run keeps the default deadline"
    );
}

/// A stream stuck under a healthy lease (its owner renews, publishes nothing, logs nothing)
/// fails the run on its stall, not only on what the settle finds missing.
#[test]
fn a_stream_stuck_under_a_healthy_lease_fails_on_max_stall() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenarios().join("negative/stuck-upstream.toml");
    let (output, out) = run_file(dir.path(), &scenario, &worker_bin());
    assert_exit(&output, 1);
    let report = read_report(&out);
    let failed = failed_on(&report, "totals.max_stall_ms");
    assert!(failed["actual"].as_f64().unwrap() > 9000.0, "{failed}");
    // Nothing stale or late: the only finding is the stall (and what it left undelivered).
    assert_eq!(report["totals"]["stale_accepted"], 0);
    assert_eq!(report["totals"]["late_writes"], 0);
}

const CRASH_SCENARIO: &str = r#"
name = "worker-crash"
description = "NEGATIVE CONTROL: worker-2 dies on its own; the run must fail."

[lease]
seconds = 2
renew_seconds = 0.5

[fleet]
workers = 2
drain_seconds = 2

[upstream]
streams = 6
rate = 20

[run]
warmup_seconds = 20
duration_seconds = 8
settle_timeout_seconds = 10

[[expect]]
metric = "totals.gaps"
op = "=="
threshold = 0
"#;

#[test]
fn a_worker_that_exits_on_its_own_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    // worker-2 runs the real worker, which a sibling SIGKILLs after a few seconds: no action
    // of the harness's ends it.
    let wrapper = dir.path().join("crashing-worker");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$OWNER_ID\" = worker-2 ]; then (sleep 6; kill -9 $$) & fi\nexec {} \"$@\"\n",
            worker_bin().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let scenario = dir.path().join("crash.toml");
    std::fs::write(&scenario, CRASH_SCENARIO).unwrap();
    let (output, out) = run_file(dir.path(), &scenario, &wrapper);
    assert_exit(&output, 1);
    let report = read_report(&out);
    assert_eq!(
        report["totals"]["worker_crashes"], 1,
        "{}",
        report["totals"]
    );
    let crash = &report["worker_crashes"][0];
    assert_eq!(crash["worker"], "worker-2");
    assert_eq!(crash["signal"], 9);
    let failed = failed_on(&report, "totals.worker_crashes");
    assert_eq!(failed["name"], "no worker exited on its own");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("worker-2 exited on its own"), "{stdout}");
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(junit.contains("worker-2 at"), "{junit}");
}
