//! `campaign.json` (design §11): what each run found ([`RunOutcome`], read from its
//! `report.json`) and the campaign's summary over them ([`summarise`]) — runs and violations per
//! fault kind, takeover and stall distributions, the failures with their seeds and shrunk
//! scenarios, the slowest runs, and the harness's own overhead per run. Pure: outcomes in,
//! summary out.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::analysis::percentiles;
use crate::report_json::{metric, MetricValue, Percentiles};

/// How many of the slowest runs the summary lists.
pub const SLOWEST: usize = 5;

/// What one run found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    pub run: u32,
    /// The run's scenario seed (`run.seed` of its scenario.toml).
    pub seed: u64,
    /// The run's directory, relative to the campaign's.
    pub dir: String,
    /// The fault kinds its schedule holds, in schedule order.
    pub faults: Vec<String>,
    /// Actions the history recorded per scheduled fault index: what took effect.
    pub injected: Vec<usize>,
    /// Scheduled faults that caused at least one takeover.
    pub caused_takeovers: Vec<usize>,
    pub passed: bool,
    /// Why it failed, one line each (a failed expectation, a run error, a bound exceeded).
    pub reasons: Vec<String>,
    /// The kind of each reason (a metric path, `takeover_bound`, `run_error`): a shrink keeps
    /// a candidate only when it fails for one of the same kinds.
    pub reason_keys: Vec<String>,
    pub takeover_ms: Vec<u64>,
    /// The same, by the kind of the fault that caused each.
    pub takeover_ms_by_kind: BTreeMap<String, Vec<u64>>,
    pub max_stall_ms: Option<u64>,
    /// Wall time of the whole run, provisioning of its table to the last report file.
    pub wall_ms: u64,
    /// Wall time not spent in the scenario's fault phase (`duration_seconds`): table, start,
    /// warm-up, settle, drain, analysis and reports.
    pub overhead_ms: u64,
    /// The harness's own CPU time during the run (workers not included).
    pub harness_cpu_ms: u64,
}

/// Judges a run from its `report.json` (as JSON, so metrics added later are read by name):
/// the report's own verdict plus the campaign's takeover bound.
pub fn judge(report: &Value, takeover_bound_ms: u64) -> (Vec<String>, Vec<String>) {
    let mut reasons = Vec::new();
    let mut keys = Vec::new();
    for e in report["errors"].as_array().into_iter().flatten() {
        reasons.push(format!("run error: {}", e.as_str().unwrap_or("?")));
        keys.push("run_error".to_string());
    }
    for e in report["expectations"].as_array().into_iter().flatten() {
        if e["passed"].as_bool() == Some(false) {
            let actual = e["actual"]
                .as_f64()
                .map_or("null".into(), |a| a.to_string());
            reasons.push(format!(
                "{}: actual {actual}, expected {} {}",
                e["metric"].as_str().unwrap_or("?"),
                e["op"].as_str().unwrap_or("?"),
                e["threshold"]
            ));
            keys.push(e["metric"].as_str().unwrap_or("?").to_string());
        }
    }
    let periods = fault_periods(report);
    let slow: Vec<&Value> = report["takeovers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| {
            let (Some(ms), Some(at)) = (t["takeover_ms"].as_u64(), t["at_ms"].as_u64()) else {
                return false;
            };
            let new_owner = t["to_owner"].as_str().unwrap_or("");
            ms > takeover_bound_ms + blocked(&periods, new_owner, at.saturating_sub(ms), at)
        })
        .collect();
    if let Some(worst) = slow.iter().max_by_key(|t| t["takeover_ms"].as_u64()) {
        reasons.push(format!(
            "takeover bound: {} takeovers over {takeover_bound_ms} ms, worst {} ms ({} from {} to {})",
            slow.len(),
            worst["takeover_ms"],
            worst["stream_id"].as_str().unwrap_or("?"),
            worst["from_owner"].as_str().unwrap_or("?"),
            worst["to_owner"].as_str().unwrap_or("?"),
        ));
        keys.push("takeover_bound".to_string());
    }
    (reasons, keys)
}

/// The periods `[start, end)` of the run's faults, each with its target (from the report's
/// `faults`, each closed by its `heal` or `resume`; one without is instantaneous).
fn fault_periods(report: &Value) -> Vec<(&str, u64, u64)> {
    let faults: Vec<&Value> = report["faults"].as_array().into_iter().flatten().collect();
    let closing = |f: &Value| f["action"] == "heal" || f["action"] == "resume";
    faults
        .iter()
        .filter(|f| !closing(f))
        .filter_map(|f| {
            let start = f["t_ms"].as_u64()?;
            let end = faults
                .iter()
                .filter(|h| closing(h) && h["fault"] == f["fault"])
                .filter_map(|h| h["t_ms"].as_u64())
                .find(|&t| t >= start)
                .unwrap_or(start);
            Some((f["target"].as_str().unwrap_or(""), start, end))
        })
        .collect()
}

/// How long the faults that keep `new_owner` from delivering — those on the sink, on the
/// upstream, or aimed at `new_owner` itself — cover of `[from, to)`. A takeover is timed to
/// the new owner's first accepted event, which no worker produces while the sink fails or its
/// own links are cut: the campaign's bound grows by that much (seed 1 run 16: a takeover waited
/// out a 2.8 s `sink_error`; run 92: the new owner acquired in time, but a `reset` of its
/// upstream link held its first event 3.3 s).
fn blocked(periods: &[(&str, u64, u64)], new_owner: &str, from: u64, to: u64) -> u64 {
    periods
        .iter()
        .filter(|(target, ..)| ["sink", "upstream", new_owner].contains(target))
        .map(|&(_, start, end)| end.min(to).saturating_sub(start.max(from)))
        .sum()
}

/// The fault-caused takeover times of a report.
pub fn takeover_samples(report: &Value) -> Vec<u64> {
    report["takeovers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["takeover_ms"].as_u64())
        .collect()
}

/// Fault-caused takeover times by the kind of the causing fault (`kinds[fault index]`).
pub fn takeovers_by_kind(report: &Value, kinds: &[String]) -> BTreeMap<String, Vec<u64>> {
    let mut by = BTreeMap::<String, Vec<u64>>::new();
    for t in report["takeovers"].as_array().into_iter().flatten() {
        let (Some(ms), Some(i)) = (t["takeover_ms"].as_u64(), t["fault"].as_u64()) else {
            continue;
        };
        if let Some(kind) = kinds.get(i as usize) {
            by.entry(kind.clone()).or_default().push(ms);
        }
    }
    by
}

/// `totals.max_stall_ms`, when the report has it.
pub fn max_stall(report: &Value) -> Option<u64> {
    match metric(report, "totals.max_stall_ms") {
        Some(MetricValue::Number(n)) => Some(n as u64),
        _ => None,
    }
}

/// Scheduled fault indices with a recorded action, and those that caused takeovers.
pub fn fault_effects(report: &Value) -> (Vec<usize>, Vec<usize>) {
    let mut injected = BTreeSet::new();
    let mut caused = BTreeSet::new();
    for f in report["faults"].as_array().into_iter().flatten() {
        if let Some(i) = f["fault"].as_u64() {
            injected.insert(i as usize);
            if f["takeovers"].as_u64().unwrap_or(0) > 0 {
                caused.insert(i as usize);
            }
        }
    }
    (injected.into_iter().collect(), caused.into_iter().collect())
}

/// `campaign.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Campaign {
    /// The command line that produced it.
    pub command: String,
    pub seed: u64,
    /// Runs completed.
    pub runs: usize,
    /// Runs asked for (more than `runs` when interrupted).
    pub runs_requested: u32,
    /// Runs that violated a check.
    pub violations: usize,
    /// True when Ctrl-C / SIGTERM stopped the campaign early.
    pub interrupted: bool,
    pub by_fault: BTreeMap<String, ByFault>,
    pub failed: Vec<Failed>,
    /// Over every run: fault-caused takeover times, and each run's longest stall.
    pub takeover_ms: Percentiles,
    pub max_stall_ms: Percentiles,
    pub slowest: Vec<Slow>,
    pub harness: Overhead,
    pub run_results: Vec<RunOutcome>,
}

/// One fault kind over the campaign.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ByFault {
    /// Runs whose schedule held this kind.
    pub runs: usize,
    /// Of those, runs that violated.
    pub violations: usize,
    /// Faults of this kind scheduled, injected (recorded), and that caused a takeover.
    pub scheduled: usize,
    pub injected: usize,
    pub caused_takeovers: usize,
    /// Takeover times this kind caused.
    pub takeover_ms: Percentiles,
    pub max_stall_ms: Percentiles,
    /// Seeds of its violating runs (the scenario seed; `run` replays the same).
    pub violation_runs: Vec<u32>,
}

/// A run that violated.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Failed {
    pub run: u32,
    pub seed: u64,
    pub dir: String,
    pub reasons: Vec<String>,
    /// The smallest schedule found that still fails, as a scenario file (null: not shrunk).
    pub shrunk_scenario: Option<String>,
    /// Its faults, described (`pause worker-1 at 2.3 s for 4 s`).
    pub shrunk_faults: Vec<String>,
}

/// One of the slowest runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Slow {
    pub run: u32,
    pub wall_ms: u64,
    pub faults: Vec<String>,
}

/// The harness's own cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Overhead {
    /// Wall time of the whole campaign, shrinking included.
    pub wall_ms: u64,
    /// Per run: wall time, the part outside the fault phase, and the harness's CPU time.
    pub run_wall_ms: Percentiles,
    pub run_overhead_ms: Percentiles,
    pub run_harness_cpu_ms: Percentiles,
    /// Runs spent shrinking.
    pub shrink_runs: usize,
    /// Times DynamoDB Local was started again (`--restart-dynamodb-every`).
    #[serde(default)]
    pub dynamodb_restarts: u32,
}

/// The campaign's summary over `outcomes`; `failed` carries the shrink results.
pub fn summarise(outcomes: &[RunOutcome], failed: Vec<Failed>) -> Campaign {
    let mut by_fault: BTreeMap<String, (ByFault, Vec<u64>, Vec<u64>)> = BTreeMap::new();
    for o in outcomes {
        let kinds: BTreeSet<&String> = o.faults.iter().collect();
        for kind in kinds {
            let (entry, takeovers, stalls) = by_fault.entry(kind.clone()).or_default();
            entry.runs += 1;
            if !o.passed {
                entry.violations += 1;
                entry.violation_runs.push(o.run);
            }
            takeovers.extend(o.takeover_ms_by_kind.get(kind).into_iter().flatten());
            stalls.extend(o.max_stall_ms);
        }
        for (i, kind) in o.faults.iter().enumerate() {
            let (entry, _, _) = by_fault.entry(kind.clone()).or_default();
            entry.scheduled += 1;
            entry.injected += usize::from(o.injected.contains(&i));
            entry.caused_takeovers += usize::from(o.caused_takeovers.contains(&i));
        }
    }
    let by_fault = by_fault
        .into_iter()
        .map(|(kind, (mut entry, takeovers, stalls))| {
            entry.takeover_ms = percentiles(&takeovers);
            entry.max_stall_ms = percentiles(&stalls);
            (kind, entry)
        })
        .collect();
    let all =
        |f: fn(&RunOutcome) -> Vec<u64>| -> Vec<u64> { outcomes.iter().flat_map(f).collect() };
    let mut slowest: Vec<Slow> = outcomes
        .iter()
        .map(|o| Slow {
            run: o.run,
            wall_ms: o.wall_ms,
            faults: o.faults.clone(),
        })
        .collect();
    slowest.sort_by(|a, b| b.wall_ms.cmp(&a.wall_ms).then(a.run.cmp(&b.run)));
    slowest.truncate(SLOWEST);
    Campaign {
        runs: outcomes.len(),
        violations: outcomes.iter().filter(|o| !o.passed).count(),
        by_fault,
        failed,
        takeover_ms: percentiles(&all(|o| o.takeover_ms.clone())),
        max_stall_ms: percentiles(&all(|o| o.max_stall_ms.into_iter().collect())),
        slowest,
        harness: Overhead {
            run_wall_ms: percentiles(&all(|o| vec![o.wall_ms])),
            run_overhead_ms: percentiles(&all(|o| vec![o.overhead_ms])),
            run_harness_cpu_ms: percentiles(&all(|o| vec![o.harness_cpu_ms])),
            ..Overhead::default()
        },
        run_results: outcomes.to_vec(),
        ..Campaign::default()
    }
}

#[cfg(test)]
mod judge_tests {
    use super::*;
    use serde_json::json;

    fn report(faults: Value) -> Value {
        json!({
            "errors": [],
            "expectations": [],
            "faults": faults,
            "takeovers": [{"stream_id": "s-0002", "from_owner": "worker-2", "to_owner": "worker-1",
                           "at_ms": 16_732, "takeover_ms": 5_024}],
        })
    }

    /// Seed 1 run 16: the new owner's first event waited out a sink outage.
    #[test]
    fn a_sink_outage_during_a_takeover_extends_its_bound_by_the_overlap() {
        let bandwidth =
            json!({"fault": 1, "action": "bandwidth", "target": "worker-2", "t_ms": 11_708});
        let (reasons, _) = judge(&report(json!([bandwidth])), 5_000);
        assert_eq!(reasons.len(), 1, "no sink fault: over the bound");

        let with_outage = json!([
            bandwidth,
            {"fault": 2, "action": "sink_error", "target": "sink", "t_ms": 13_402},
            {"fault": 2, "action": "heal", "target": "sink", "t_ms": 16_203},
        ]);
        let (reasons, keys) = judge(&report(with_outage), 5_000);
        assert!(reasons.is_empty(), "{reasons:?} {keys:?}");
        // The overlap only: an outage over before the takeover began does not count.
        let early = json!([
            bandwidth,
            {"fault": 2, "action": "sink_error", "target": "sink", "t_ms": 1_000},
            {"fault": 2, "action": "heal", "target": "sink", "t_ms": 4_000},
        ]);
        assert_eq!(judge(&report(early), 5_000).0.len(), 1);
    }

    /// Seed 1 run 92: a fault on the new owner's own link held its first event; one on
    /// another worker does not count.
    #[test]
    fn a_fault_on_the_new_owner_extends_the_bound_and_one_elsewhere_does_not() {
        let reset = |target: &str| {
            json!([
                {"fault": 0, "action": "bandwidth", "target": "worker-2", "t_ms": 11_708},
                {"fault": 1, "action": "reset", "target": target, "t_ms": 12_000},
                {"fault": 1, "action": "heal", "target": target, "t_ms": 15_000},
            ])
        };
        assert!(judge(&report(reset("worker-1")), 5_000).0.is_empty());
        assert_eq!(judge(&report(reset("worker-3")), 5_000).0.len(), 1);
    }
}
