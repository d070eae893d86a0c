//! End to end: a short scenario against real DynamoDB Local and real `lease-worker` processes,
//! through the `harness` command line. Needs `target/debug/lease-worker` (built by
//! `cargo test --workspace`, or `cargo build -p lease-worker`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KILL_SCENARIO: &str = r#"
name = "e2e-kill"
description = "Short task-kill for the test suite."

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
seed = 3

[[faults]]
at_seconds = 2
action = "kill"
target = "random"

[[expect]]
metric = "totals.gaps"
op = "=="
threshold = 0

[[expect]]
metric = "totals.stale_accepted"
op = "=="
threshold = 0

[[expect]]
metric = "totals.checkpoint_ahead"
op = "=="
threshold = 0

[[expect]]
metric = "totals.fault_takeovers"
op = ">="
threshold = 1

[[expect]]
metric = "totals.takeover_ms.max"
op = "<="
threshold = "lease_ms + 1500"
"#;

/// `target/debug/lease-worker`, or a failure that says how to build it.
fn worker_bin() -> PathBuf {
    let harness = PathBuf::from(env!("CARGO_BIN_EXE_harness"));
    let bin = harness.with_file_name("lease-worker");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p lease-worker` (cargo test --workspace builds it too)",
        bin.display()
    );
    bin
}

fn harness() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_harness"));
    cmd.env("RUST_LOG", "warn");
    cmd
}

fn is_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Zombies (exited, not reaped) count as gone.
fn is_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Pids of the worker processes a history recorded.
fn worker_pids(history: &Path) -> Vec<i32> {
    std::fs::read_to_string(history)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["kind"] == "worker_start")
        .filter_map(|v| v["pid"].as_i64().map(|p| p as i32))
        .collect()
}

fn wait_gone(pids: &[i32], limit: Duration) -> Vec<i32> {
    let start = Instant::now();
    loop {
        let alive: Vec<i32> = pids.iter().copied().filter(|p| is_running(*p)).collect();
        if alive.is_empty() || start.elapsed() > limit {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_kill_scenario_passes_and_leaves_no_process_behind() {
    let bin = worker_bin();
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("kill.toml");
    std::fs::write(&scenario, KILL_SCENARIO).unwrap();
    let out = dir.path().join("out");
    let output = harness()
        .args([
            "run",
            scenario.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--worker-bin",
        ])
        .arg(&bin)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("PASSED"), "{stdout}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["passed"], true);
    assert_eq!(report["config"]["workers"], 2);
    assert_eq!(report["config"]["lease_ms"], 2000);
    let totals = &report["totals"];
    assert!(totals["events_accepted"].as_u64().unwrap() > 0);
    assert_eq!(
        totals["events_produced"], totals["events_accepted"],
        "no gap means everything produced was accepted"
    );
    // Takeovers may also come from rebalancing; at least one must be the kill's.
    let takeovers = report["takeovers"].as_array().unwrap();
    let killed = takeovers
        .iter()
        .find(|t| t["cause"] == "kill")
        .unwrap_or_else(|| panic!("no takeover caused by the kill: {takeovers:?}"));
    assert!(killed["takeover_ms"].as_u64().is_some(), "{killed}");
    assert!(killed["lease_remaining_ms"].as_i64().is_some(), "{killed}");

    // The report is recomputable from the history alone.
    let recomputed = harness::run::analyse_file(&out.join("history.jsonl")).unwrap();
    assert_eq!(
        serde_json::to_value(&recomputed.totals).unwrap(),
        report["totals"]
    );

    let pids = worker_pids(&out.join("history.jsonl"));
    assert_eq!(pids.len(), 2);
    assert!(
        wait_gone(&pids, Duration::from_secs(5)).is_empty(),
        "workers outlived the harness"
    );
    assert!(out.join("workers/worker-1.log").is_file());
}

#[test]
fn killing_the_harness_kills_its_workers() {
    let bin = worker_bin();
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("kill.toml");
    std::fs::write(
        &scenario,
        KILL_SCENARIO.replace("duration_seconds = 8", "duration_seconds = 60"),
    )
    .unwrap();
    let out = dir.path().join("out");
    let mut child = harness()
        .args([
            "run",
            scenario.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--worker-bin",
        ])
        .arg(&bin)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let harness_pid = child.id() as i32;
    let history = out.join("history.jsonl");
    let start = Instant::now();
    let pids = loop {
        let pids = worker_pids(&history);
        if pids.len() == 2 {
            break pids;
        }
        if start.elapsed() > Duration::from_secs(60) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!(
                "the harness did not start its workers; history: {}",
                history.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let guard = KillOnDrop(child);
    assert!(pids.iter().all(|p| is_alive(*p)));
    // SIGKILL: no destructor runs, only PR_SET_PDEATHSIG can end the workers.
    unsafe { libc::kill(harness_pid, libc::SIGKILL) };
    drop(guard);
    let survivors = wait_gone(&pids, Duration::from_secs(10));
    for pid in &survivors {
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        survivors.is_empty(),
        "workers {survivors:?} survived a SIGKILLed harness"
    );
}

#[test]
fn an_invalid_scenario_exits_2_naming_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("bad.toml");
    std::fs::write(
        &scenario,
        KILL_SCENARIO.replace("renew_seconds = 0.5", "renew_seconds = 2"),
    )
    .unwrap();
    let out = harness()
        .args([
            "run",
            scenario.to_str().unwrap(),
            "--out",
            dir.path().join("out").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = KILL_SCENARIO
        .lines()
        .position(|l| l.starts_with("renew_seconds"))
        .unwrap()
        + 1;
    assert!(
        stderr.contains(&format!("bad.toml:{line}: field `lease.renew_seconds`")),
        "{stderr}"
    );
    assert!(
        !dir.path().join("out").exists(),
        "nothing may start for an invalid scenario"
    );

    let out = harness()
        .args(["validate"])
        .arg(&scenario)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_missing_worker_binary_exits_2_and_says_how_to_build_it() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("ok.toml");
    std::fs::write(&scenario, KILL_SCENARIO).unwrap();
    let out = harness()
        .args([
            "run",
            scenario.to_str().unwrap(),
            "--out",
            dir.path().join("out").to_str().unwrap(),
        ])
        .args(["--worker-bin", "/nonexistent/lease-worker"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--worker-bin /nonexistent/lease-worker"));
}

#[test]
fn list_shows_the_shipped_scenarios() {
    let out = harness()
        .args(["list", "--dir"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for name in [
        "baseline",
        "task-kill",
        "pause-past-lease",
        "rolling-deploy",
        "zombie-writer",
    ] {
        assert!(stdout.contains(name), "{name} missing from:\n{stdout}");
    }
}

#[test]
fn a_fleet_that_cannot_warm_up_fails_with_exit_1_and_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("kill.toml");
    std::fs::write(&scenario, KILL_SCENARIO).unwrap();
    let out = dir.path().join("out");
    // `false` exits at once: no stream is ever owned.
    let output = harness()
        .args([
            "run",
            scenario.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .args(["--worker-bin", "/bin/false"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["passed"], false);
    let error = report["errors"][0].as_str().unwrap();
    assert!(error.contains("every worker exited"), "{error}");
    // The run still ended properly: what the upstream produced (possibly nothing, when every
    // worker is gone before the first tick) is on record, and all of it counts as gaps.
    assert!(report["totals"]["events_produced"].is_u64());
    assert_eq!(
        report["totals"]["gaps"],
        report["totals"]["events_produced"]
    );
}
