//! `harness campaign` end to end, with real workers and DynamoDB Local: a small campaign on a
//! healthy worker passes; the same machinery on a deliberately broken one (its deadline check
//! off and the sink's fencing off) fails, shrinks the failure to one fault, and
//! `harness run --replay` of the failed run injects the same schedule again.

mod e2e_common;

use std::path::Path;
use std::process::Output;

use e2e_common::{assert_exit, harness, worker_bin};

/// The two campaigns run one after the other: side by side on a small machine, their takeover
/// times would measure the contention, not the worker.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn campaign(out: &Path, extra: &[&str]) -> Output {
    harness()
        .arg("campaign")
        .arg("--out")
        .arg(out)
        .arg("--worker-bin")
        .arg(worker_bin())
        .args(extra)
        .output()
        .unwrap()
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_small_campaign_on_a_healthy_worker_passes() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("campaign");
    let output = campaign(
        &out,
        &[
            "--runs",
            "3",
            "--seed",
            "7",
            "--duration-seconds",
            "10",
            // Every kind (the default).
        ],
    );
    assert_exit(&output, 0);
    let summary = json(&out.join("campaign.json"));
    assert_eq!(summary["runs"], 3);
    assert_eq!(summary["violations"], 0);
    assert!(summary["failed"].as_array().unwrap().is_empty());
    assert!(summary["by_fault"]
        .as_object()
        .is_some_and(|m| !m.is_empty()));
    for file in ["campaign.md", "campaign.html"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    for run in 0..3 {
        let run_dir = out.join(format!("runs/{run:03}"));
        for kept in ["scenario.toml", "report.json", "history.jsonl"] {
            assert!(run_dir.join(kept).is_file(), "{}/{kept}", run_dir.display());
        }
        // A passing run keeps no worker logs nor rendered reports.
        assert!(!run_dir.join("workers").exists());
        assert!(!run_dir.join("report.html").exists());
        let report = json(&run_dir.join("report.json"));
        assert_eq!(report["passed"], true);
    }
}

#[test]
fn a_broken_worker_fails_shrinks_to_one_fault_and_replays() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("campaign");
    let output = campaign(
        &out,
        &[
            "--runs",
            "1",
            "--seed",
            "3",
            "--faults",
            "pause",
            "--faults-per-run",
            "2",
            "--fault-seconds",
            "4-5",
            "--duration-seconds",
            "12",
            "--worker-env",
            "CHAOS_SKIP_DEADLINE_CHECK=true",
            "--no-fencing",
            "--shrink-runs",
            "3",
        ],
    );
    assert_exit(&output, 1);
    let summary = json(&out.join("campaign.json"));
    assert_eq!(summary["violations"], 1);
    let failed = &summary["failed"][0];
    assert_eq!(failed["dir"], "runs/000");
    let reasons = failed["reasons"].to_string();
    assert!(reasons.contains("stale_accepted"), "{reasons}");
    assert_eq!(
        failed["shrunk_faults"].as_array().unwrap().len(),
        1,
        "{failed}"
    );
    let shrunk = out.join(failed["shrunk_scenario"].as_str().unwrap());
    let check = harness().arg("validate").arg(&shrunk).output().unwrap();
    assert_exit(&check, 0);
    assert!(
        String::from_utf8_lossy(&check.stdout).contains("1 faults"),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    // The failed run keeps everything, worker logs included.
    assert!(out.join("runs/000/workers").is_dir());

    let replay_out = dir.path().join("replay");
    let replay = harness()
        .arg("run")
        .arg("--replay")
        .arg(out.join("runs/000"))
        .arg("--out")
        .arg(&replay_out)
        .arg("--worker-bin")
        .arg(worker_bin())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&replay.stderr);
    // The same actions, per fault, in order, on the same targets, each fault injected within
    // 250 ms of the original's offset (later actions' drift is reported, not judged).
    assert!(stderr.contains("replay: the same schedule"), "{stderr}");
    assert!(stderr.contains("each fault injected within"), "{stderr}");
    assert_exit(&replay, 1); // the broken worker fails again
}
