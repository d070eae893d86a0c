//! End to end: an ECS rolling deploy in batches (minimumHealthyPercent=50, maximumPercent=100)
//! of four real `lease-worker` processes against DynamoDB Local. ECS may then run no more than
//! four tasks and must keep two healthy: it stops two old tasks, starts two new ones, waits until
//! they are ready, then stops the next two old ones, and so on. Checked from `history.jsonl`:
//! the batches in that order, never more than four workers alive nor fewer than two healthy,
//! every old worker terminated, no gap, nothing stale accepted, the new set owning every stream.

mod e2e_common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e_common::{assert_exit, history, report, run_scenario, wait_gone, worker_pids};
use serde_json::Value;

const WORKERS: usize = 4;
const MIN_HEALTHY_PERCENT: u32 = 50;
const MAX_PERCENT: u32 = 100;

const BATCH_DEPLOY: &str = r#"
name = "e2e-rolling-batches"
description = "Four workers replaced two at a time (ECS 50/100) under traffic."

[lease]
seconds = 2
renew_seconds = 0.5

[fleet]
workers = 4
drain_seconds = 2

[upstream]
streams = 12
rate = 20

[run]
warmup_seconds = 20
duration_seconds = 14
settle_timeout_seconds = 10
seed = 1

[[faults]]
at_seconds = 1
action = "rolling_deploy"
minimum_healthy_percent = 50
maximum_percent = 100
stop_timeout_seconds = 6

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
"#;

fn worker(n: usize) -> String {
    format!("worker-{n}")
}

/// The deploy's action lines (fault 0) other than SIGKILLs of stragglers, as runs of one
/// action: (action, targets sorted), in history order.
fn action_runs(lines: &[Value]) -> Vec<(String, Vec<String>)> {
    let mut runs: Vec<(String, Vec<String>)> = Vec::new();
    let actions = lines
        .iter()
        .filter(|l| l["kind"] == "action" && l["fault"] == 0 && l["action"] != "kill");
    for line in actions {
        let action = line["action"].as_str().unwrap().to_string();
        let target = line["target"].as_str().unwrap().to_string();
        match runs.last_mut() {
            Some((last, targets)) if *last == action => targets.push(target),
            _ => runs.push((action, vec![target])),
        }
    }
    for (_, targets) in &mut runs {
        targets.sort();
    }
    runs
}

/// The runs the deploy plan calls for: per step, start the new workers, see each ready, then
/// terminate the next old ones.
fn planned_runs() -> Vec<(String, Vec<String>)> {
    let steps =
        harness::scenario::deploy_batches(WORKERS, MIN_HEALTHY_PERCENT, MAX_PERCENT).unwrap();
    let (mut next_old, mut next_new) = (1, WORKERS + 1);
    let mut runs = Vec::new();
    for step in steps {
        let started: Vec<String> = (next_new..next_new + step.start).map(worker).collect();
        next_new += step.start;
        if !started.is_empty() {
            runs.push(("start".to_string(), started.clone()));
            runs.push(("ready".to_string(), started));
        }
        let stopped: Vec<String> = (next_old..next_old + step.stop).map(worker).collect();
        next_old += step.stop;
        if !stopped.is_empty() {
            runs.push(("terminate".to_string(), stopped));
        }
    }
    runs
}

#[test]
fn a_batched_rolling_deploy_keeps_half_healthy_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (output, out) = run_scenario(dir.path(), "batches", BATCH_DEPLOY, &[]);
    assert_exit(&output, 0);
    let report = report(&out);
    let totals = &report["totals"];
    assert_eq!(totals["gaps"], 0, "{totals}");
    assert_eq!(totals["stale_accepted"], 0, "{totals}");
    assert!(totals["events_accepted"].as_u64().unwrap() > 0, "{totals}");
    let errors = report["errors"].as_array().unwrap();
    assert!(errors.is_empty(), "{errors:?}");

    let lines = history(&out);
    let t = |l: &Value| l["t_ms"].as_u64().unwrap();

    // The batches, in ECS order: with 50/100 two old workers stop first, two new ones start and
    // become ready, and only then do the next two old ones stop.
    let runs = action_runs(&lines);
    let expected = planned_runs();
    assert_eq!(
        expected[0],
        ("terminate".to_string(), vec![worker(1), worker(2)]),
        "the plan itself: 50/100 makes room before it starts anything"
    );
    assert_eq!(runs, expected, "the deploy's actions, batch by batch");
    let deploy: Vec<&Value> = lines
        .iter()
        .filter(|l| l["kind"] == "action" && l["fault"] == 0)
        .collect();
    assert!(
        deploy.windows(2).all(|w| t(w[0]) <= t(w[1])),
        "action lines in time order"
    );

    // Every old worker was terminated and exited during the deploy.
    let exits: BTreeMap<String, u64> = lines
        .iter()
        .filter(|l| l["kind"] == "worker_exit")
        .map(|l| (l["worker"].as_str().unwrap().to_string(), t(l)))
        .collect();
    let faults_done = lines
        .iter()
        .find(|l| l["kind"] == "phase" && l["phase"] == "faults_done")
        .map(t)
        .expect("a faults_done phase");
    for n in 1..=WORKERS {
        let exit = exits.get(&worker(n));
        assert!(
            exit.is_some_and(|e| *e <= faults_done),
            "old {} did not exit during the deploy (exit at {exit:?}, faults done at {faults_done})",
            worker(n)
        );
    }

    // Never more than 100 % alive; never fewer than 50 % healthy (ready and not stopping).
    let (mut alive, mut healthy) = (BTreeSet::new(), BTreeSet::new());
    let (mut most_alive, mut fewest_healthy) = (0, usize::MAX);
    let warmed = lines
        .iter()
        .position(|l| l["kind"] == "phase" && l["phase"] == "warmup_done")
        .expect("a warmup_done phase");
    for (i, line) in lines.iter().enumerate() {
        let name = || {
            line["worker"]
                .as_str()
                .or(line["target"].as_str())
                .unwrap()
                .to_string()
        };
        match (line["kind"].as_str().unwrap(), line["action"].as_str()) {
            ("worker_start", _) => {
                alive.insert(name());
                if i < warmed {
                    healthy.insert(name()); // the initial fleet, ready by the end of warm-up
                }
            }
            ("worker_exit", _) => {
                alive.remove(&name());
                healthy.remove(&name());
            }
            ("action", Some("ready")) => {
                healthy.insert(name());
            }
            ("action", Some("terminate" | "kill")) => {
                healthy.remove(&name());
            }
            _ => continue,
        }
        most_alive = most_alive.max(alive.len());
        if i > warmed && t(line) <= faults_done {
            fewest_healthy = fewest_healthy.min(healthy.len());
        }
    }
    assert!(most_alive <= WORKERS, "{most_alive} workers alive at once");
    assert!(
        fewest_healthy >= WORKERS / 2,
        "only {fewest_healthy} healthy workers at one point"
    );

    // The final state is read after the fleet drained: a stream is released (no owner) or held
    // by the new set, never by an old worker.
    let new: BTreeSet<String> = (WORKERS + 1..=2 * WORKERS).map(worker).collect();
    let finals: Vec<&Value> = lines
        .iter()
        .filter(|l| l["kind"] == "checkpoint_final")
        .collect();
    assert_eq!(finals.len(), 12);
    for f in &finals {
        let owner = f["owner_id"].as_str().unwrap_or("(none)");
        assert!(
            owner == "(none)" || new.contains(owner),
            "{} ends owned by {owner}",
            f["stream_id"]
        );
    }

    let pids = worker_pids(&out.join("history.jsonl"));
    assert_eq!(pids.len(), 2 * WORKERS);
    assert!(
        wait_gone(&pids, Duration::from_secs(5)).is_empty(),
        "workers outlived the harness"
    );
}
