//! End to end: a short scenario against real DynamoDB Local and real `lease-worker` processes,
//! through the `harness` command line. Needs `target/debug/lease-worker` (built by
//! `cargo test --workspace`, or `cargo build -p lease-worker`).

mod e2e_common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use e2e_common::{
    assert_exit, harness, is_alive, report as read_report, run_scenario, wait_gone, worker_bin,
    worker_pids,
};

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

/// The seed the kill test passes on the command line (the scenario says 3).
const CLI_SEED: u64 = 11;

#[test]
fn a_kill_scenario_passes_and_leaves_no_process_behind() {
    let dir = tempfile::tempdir().unwrap();
    let seed = CLI_SEED.to_string();
    let (output, out) = run_scenario(dir.path(), "kill", KILL_SCENARIO, &["--seed", &seed]);
    assert_exit(&output, 0);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("PASSED"), "{stdout}");

    let report = read_report(&out);
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

    // --seed overrides the scenario's seed, and the `random` target is the one it draws
    // (both workers are running at the kill, in start order).
    assert_eq!(report["config"]["seed"], CLI_SEED);
    let drawn = harness::faults::draws(CLI_SEED, 1)[0];
    let expected =
        harness::faults::pick_random(&["worker-1".into(), "worker-2".into()], drawn).unwrap();
    let kill = &report["faults"].as_array().unwrap()[0];
    assert_eq!(kill["action"], "kill");
    assert_eq!(kill["target"], expected.as_str(), "{kill}");

    // What ran: the versions and the scenario text, in the report and in run_start.
    assert_eq!(report["versions"]["harness"], env!("CARGO_PKG_VERSION"));
    let worker = report["versions"]["worker"].as_str().unwrap_or_default();
    assert!(
        worker.starts_with("lease-worker "),
        "{}",
        report["versions"]
    );
    assert_eq!(report["scenario_text"], KILL_SCENARIO);
    let run_start = &e2e_common::history(&out)[0];
    assert_eq!(run_start["kind"], "run_start");
    assert_eq!(run_start["versions"], report["versions"]);
    assert_eq!(run_start["scenario_text"], KILL_SCENARIO);

    // The report is recomputable from the history alone, and the rendered files from the
    // history and report.json.
    let recomputed = harness::analysis::analyse_file(&out.join("history.jsonl")).unwrap();
    assert_eq!(
        serde_json::to_value(&recomputed.totals).unwrap(),
        report["totals"]
    );
    assert_eq!(
        serde_json::to_value(&recomputed.versions).unwrap(),
        report["versions"]
    );
    let files = ["report.md", "report.html", "junit.xml"];
    let before: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(out.join(f)).unwrap())
        .collect();
    harness::report::render_all(&out).unwrap();
    for (name, bytes) in files.iter().zip(&before) {
        assert!(
            std::fs::read(out.join(name)).unwrap() == *bytes,
            "{name} rendered differently"
        );
    }

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
        // A subfolder's scenario shows with its folder.
        "scale/scale-2000",
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
    // `false --version` fails: the run records why instead of stopping.
    assert!(
        report["versions"]["worker"].is_null(),
        "{}",
        report["versions"]
    );
    let version_error = report["versions"]["worker_error"].as_str().unwrap();
    assert!(
        version_error.contains("/bin/false --version` failed"),
        "{version_error}"
    );
    // The run still ended properly: what the upstream produced (possibly nothing, when every
    // worker is gone before the first tick) is on record, and all of it counts as gaps.
    assert!(report["totals"]["events_produced"].is_u64());
    assert_eq!(
        report["totals"]["gaps"],
        report["totals"]["events_produced"]
    );
}

/// The same kill scenario on moto (the open-source backend): the worker needs nothing DynamoDB
/// Local has and moto lacks, and the report names the backend. Its safety expectations stand;
/// the takeover-time bound is left out here (moto serves one request at a time, and on a loaded
/// test machine its renewals queue: timing is `.ci/run`'s moto scenarios' job, not this test's).
#[test]
fn a_kill_scenario_passes_on_moto() {
    let dir = tempfile::tempdir().unwrap();
    let timing = "\n[[expect]]\nmetric = \"totals.takeover_ms.max\"";
    let cut = KILL_SCENARIO
        .find(timing)
        .expect("the kill scenario bounds takeover time");
    let (output, out) = run_scenario(
        dir.path(),
        "kill",
        &KILL_SCENARIO[..cut],
        &["--dynamodb", "moto", "--summary-json"],
    );
    assert_exit(&output, 0);
    let report = read_report(&out);
    assert_eq!(report["versions"]["dynamodb"], "moto 5.2.5 (Apache-2.0)");
    assert_eq!(report["totals"]["stale_accepted"], 0);
    // --summary-json: stdout is exactly one JSON line, the human tables went to stderr.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(line["passed"], true);
    assert_eq!(line["dynamodb"], "moto 5.2.5 (Apache-2.0)");
    assert!(String::from_utf8_lossy(&output.stderr).contains("PASSED"));
}

/// Several scenarios in one call: a directory each, one summary, the worst verdict as exit code,
/// one JSON line per run; an invalid one among them stops the batch before anything runs.
#[test]
fn a_batch_runs_each_scenario_into_its_own_directory_and_sums_them_up() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("set");
    std::fs::create_dir(&set).unwrap();
    for name in ["one", "two"] {
        std::fs::write(set.join(format!("{name}.toml")), KILL_SCENARIO).unwrap();
    }
    let out = dir.path().join("out");
    // `false` exits at once: each run fails its warm-up (exit 1) quickly.
    let output = harness()
        .arg("run")
        .arg(&set)
        .arg("--out")
        .arg(&out)
        .args(["--worker-bin", "/bin/false", "--summary-json"])
        .output()
        .unwrap();
    assert_exit(&output, 1);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for (line, name) in lines.iter().zip(["one", "two"]) {
        assert_eq!(line["exit_code"], 1);
        assert_eq!(line["dir"], out.join(name).display().to_string());
        assert!(out.join(name).join("report.json").is_file());
    }
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert_eq!(junit.matches("<testsuite ").count(), 2, "{junit}");
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("0 of 2 scenarios passed"), "{summary}");
    assert!(out.join("summary.json").is_file());

    std::fs::write(
        set.join("zz-bad.toml"),
        "name = \"bad\"\n[lease]\nseconds = \"x\"\n",
    )
    .unwrap();
    let out2 = dir.path().join("out2");
    let output = harness()
        .arg("run")
        .arg(&set)
        .arg("--out")
        .arg(&out2)
        .args(["--worker-bin", "/bin/false"])
        .output()
        .unwrap();
    assert_exit(&output, 2);
    assert!(String::from_utf8_lossy(&output.stderr).contains("zz-bad.toml:"));
    assert!(
        !out2.exists(),
        "nothing may start when one scenario is invalid"
    );
}
