//! `harness run --replay RUN_DIR`: the run directory's `scenario.toml` is run again, and the
//! actions it injected are compared with the original run's `history.jsonl` — the same actions
//! for each scheduled fault, in its order, on the same targets; each fault injected at the same
//! offset from the end of the warm-up, within [`INJECTION_TOLERANCE_MS`]. A fault's later
//! actions are compared by name and target, and their drift is reported, not judged: a rolling
//! deploy's batches wait for the new workers' readiness, a terminate's kill for the stop
//! timeout, so they follow the fleet, not the clock.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// How far apart a fault's injection may land in the original and the replay. Both are timed
/// from the warm-up's end on the harness's scheduler, a few ms off the schedule (100-run
/// campaign, 2026-12-06: 0–6 ms); a quarter second apart is a different schedule.
pub const INJECTION_TOLERANCE_MS: i64 = 250;

/// The scenario file a run directory holds.
pub const SCENARIO_FILE: &str = "scenario.toml";

/// One injected action, as the history recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub fault: u64,
    pub action: String,
    pub target: String,
    /// Milliseconds after the warm-up ended.
    pub offset_ms: i64,
}

/// The scenario of a run directory, or a message saying what is missing.
pub fn scenario_of(run_dir: &Path) -> Result<PathBuf, String> {
    let path = run_dir.join(SCENARIO_FILE);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "--replay {}: no {SCENARIO_FILE} there (a campaign writes one into every runs/NNN directory)",
            run_dir.display()
        ))
    }
}

/// The scheduled actions of a history (harness-internal ones, with no fault index, left out).
pub fn steps(history: &str) -> Vec<Step> {
    let records: Vec<Value> = history
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let t0 = records
        .iter()
        .find(|r| r["kind"] == "phase" && r["phase"] == "warmup_done")
        .and_then(|r| r["t_ms"].as_i64())
        .unwrap_or(0);
    records
        .iter()
        .filter(|r| r["kind"] == "action")
        .filter_map(|r| {
            Some(Step {
                fault: r["fault"].as_u64()?,
                action: r["action"].as_str()?.to_string(),
                target: r["target"].as_str()?.to_string(),
                offset_ms: r["t_ms"].as_i64()? - t0,
            })
        })
        .collect()
}

/// How a replay's actions compare with the original's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// What differs (empty: the same actions, order and targets).
    pub differences: Vec<String>,
    pub actions: usize,
    /// The largest difference of a fault's injection offset, ms (judged).
    pub injection_drift_ms: i64,
    /// The largest difference of any action's offset, ms (reported).
    pub max_drift_ms: i64,
}

/// Compares two runs' actions fault by fault: each scheduled fault's actions, in its own order,
/// on the same targets, its first action (the injection) within [`INJECTION_TOLERANCE_MS`] of
/// the original's. (Two faults' actions a few ms apart may interleave differently from one run
/// to the next; that is timing, not a different schedule.)
pub fn compare(original: &[Step], replay: &[Step]) -> Comparison {
    let by_fault = |steps: &[Step]| {
        let mut s = steps.to_vec();
        s.sort_by_key(|s| s.fault); // stable: each fault's actions keep their order
        s
    };
    let (original, replay) = (&by_fault(original)[..], &by_fault(replay)[..]);
    let mut differences = Vec::new();
    if original.len() != replay.len() {
        differences.push(format!(
            "{} actions in the original, {} in the replay",
            original.len(),
            replay.len()
        ));
    }
    let mut max_drift_ms = 0;
    let mut injection_drift_ms = 0;
    for (i, (a, b)) in original.iter().zip(replay).enumerate() {
        if (a.fault, &a.action, &a.target) != (b.fault, &b.action, &b.target) {
            differences.push(format!(
                "action {i}: original fault {} {} {}, replay fault {} {} {}",
                a.fault, a.action, a.target, b.fault, b.action, b.target
            ));
        }
        let drift = (a.offset_ms - b.offset_ms).abs();
        max_drift_ms = max_drift_ms.max(drift);
        let injection = i == 0 || original[i - 1].fault != a.fault;
        if injection {
            injection_drift_ms = injection_drift_ms.max(drift);
            if drift > INJECTION_TOLERANCE_MS {
                differences.push(format!(
                    "fault {} ({} {}): injected {} ms after the warm-up in the original, {} ms in the replay (more than {INJECTION_TOLERANCE_MS} ms apart)",
                    a.fault, a.action, a.target, a.offset_ms, b.offset_ms
                ));
            }
        }
    }
    Comparison {
        differences,
        actions: original.len(),
        injection_drift_ms,
        max_drift_ms,
    }
}

/// Compares the histories of `original_dir` and `replay_dir` and says so on stderr; false when
/// the schedules differ. A missing original history (pruned with `--keep reports`) is said,
/// not judged.
pub fn report(original_dir: &Path, replay_dir: &Path) -> bool {
    let read = |d: &Path| std::fs::read_to_string(d.join("history.jsonl"));
    let (Ok(a), Ok(b)) = (read(original_dir), read(replay_dir)) else {
        eprintln!(
            "replay: no history.jsonl in {} to compare the actions with",
            original_dir.display()
        );
        return true;
    };
    let c = compare(&steps(&a), &steps(&b));
    if c.differences.is_empty() {
        eprintln!(
            "replay: the same schedule as {}: {} actions, same faults, actions and targets, each fault injected within {} ms of the original (at most {INJECTION_TOLERANCE_MS}), every action within {} ms",
            original_dir.display(),
            c.actions,
            c.injection_drift_ms,
            c.max_drift_ms
        );
        true
    } else {
        eprintln!(
            "replay: the schedule differs from {}:",
            original_dir.display()
        );
        for d in &c.differences {
            eprintln!("  {d}");
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HISTORY: &str = r#"{"kind":"phase","t_ms":4000,"phase":"warmup_done"}
{"kind":"action","t_ms":6000,"action":"pause","target":"worker-2","fault":0,"streams":[]}
{"kind":"action","t_ms":9000,"action":"resume","target":"worker-2","fault":0,"streams":[]}
{"kind":"action","t_ms":9100,"action":"kill","target":"worker-9","streams":[]}
"#;

    #[test]
    fn steps_are_the_scheduled_actions_from_the_warm_up_end() {
        let s = steps(HISTORY);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].offset_ms, 2000);
        assert_eq!(
            (s[1].action.as_str(), s[1].target.as_str()),
            ("resume", "worker-2")
        );
    }

    #[test]
    fn a_different_target_or_a_missing_action_is_a_difference() {
        let a = steps(HISTORY);
        let mut b = a.clone();
        b[0].offset_ms += 40;
        let same = compare(&a, &b);
        assert!(same.differences.is_empty());
        assert_eq!(same.max_drift_ms, 40);
        b[1].target = "worker-3".into();
        assert_eq!(compare(&a, &b).differences.len(), 1);
        assert_eq!(compare(&a, &b[..1]).differences.len(), 1);
    }

    /// A fault injected more than the tolerance later is a different schedule; its later
    /// actions (a resume after a slow pause, a deploy's next batch) drift without failing.
    #[test]
    fn an_injection_moved_past_the_tolerance_is_a_difference_a_later_action_is_not() {
        let a = steps(HISTORY);
        let mut late = a.clone();
        late[0].offset_ms += INJECTION_TOLERANCE_MS + 1;
        late[1].offset_ms += INJECTION_TOLERANCE_MS + 1;
        let c = compare(&a, &late);
        assert_eq!(c.differences.len(), 1, "{:?}", c.differences);
        assert!(
            c.differences[0].contains("injected 2000 ms"),
            "{:?}",
            c.differences
        );
        let mut slow_resume = a.clone();
        slow_resume[1].offset_ms += 3_000;
        let c = compare(&a, &slow_resume);
        assert!(c.differences.is_empty(), "{:?}", c.differences);
        assert_eq!((c.injection_drift_ms, c.max_drift_ms), (0, 3_000));
    }

    #[test]
    fn two_faults_ending_together_may_interleave_either_way() {
        let step = |fault, action: &str, target: &str, offset_ms| Step {
            fault,
            action: action.into(),
            target: target.into(),
            offset_ms,
        };
        let a = [
            step(0, "pause", "worker-1", 100),
            step(1, "pause", "worker-3", 200),
            step(0, "resume", "worker-1", 5000),
            step(1, "resume", "worker-3", 5001),
        ];
        let b = [a[0].clone(), a[1].clone(), a[3].clone(), a[2].clone()];
        assert!(compare(&a, &b).differences.is_empty());
        let mut c = b.clone();
        c[2].target = "worker-2".into();
        assert_eq!(compare(&a, &c).differences.len(), 1);
    }
}
