//! The `report.json` document (design §5): its types, the lookup of a metric by dotted path, and
//! reading a report back. Built by `analysis` + `expect`; read by the report renderers.
//! Every figure here is recomputable from `history.jsonl`.

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::history::Versions;

/// The whole `report.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// The scenario's one-paragraph description.
    pub description: String,
    /// The harness's version and the worker binary's `--version` (empty in reports written
    /// before they were recorded).
    #[serde(default)]
    pub versions: Versions,
    /// True when every expectation held and the run completed.
    pub passed: bool,
    /// Why the run did not complete (warm-up failed, settle timed out…); empty when it did.
    pub errors: Vec<String>,
    pub config: ReportConfig,
    /// One entry per owner change of a stream, in time order.
    pub takeovers: Vec<Takeover>,
    pub totals: Totals,
    /// One entry per injected action, with what it caused.
    pub faults: Vec<FaultSummary>,
    /// Ranges of sequences never accepted (the first 100).
    pub gap_ranges: Vec<GapRange>,
    /// Streams whose final checkpoint is beyond the sink's contiguous accepted high-water mark.
    pub checkpoint_ahead_streams: Vec<CheckpointAhead>,
    /// The streams with the longest stalls (at most ten), longest first.
    #[serde(default)]
    pub longest_stalls: Vec<StreamStall>,
    /// Where the lease timeline came from and at what resolution (null before it existed).
    #[serde(default)]
    pub lease_source: Option<crate::history::LeaseSourceInfo>,
    /// Workers that exited without the harness causing it, with how and their last words.
    #[serde(default)]
    pub worker_crashes: Vec<WorkerCrash>,
    /// Fenced (rejected) events by the owner that sent them: who the zombies were.
    pub fenced_by_owner: std::collections::BTreeMap<String, u64>,
    pub expectations: Vec<ExpectationResult>,
    /// The harness's own cost, from the `run_end` record.
    pub harness: HarnessStats,
    /// The scenario file's TOML exactly as run, from `run_start` (empty in older reports).
    #[serde(default)]
    pub scenario_text: String,
}

/// The run's configuration, as recorded in `run_start`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportConfig {
    pub lease_ms: u64,
    pub renew_ms: u64,
    pub skew_margin_ms: u64,
    pub workers: usize,
    pub streams: usize,
    /// Events per second per stream.
    pub rate: f64,
    pub seed: u64,
    pub duration_ms: u64,
    /// False when the sink ran without fencing (a demonstration of what fencing prevents).
    pub fencing: bool,
    /// Unix milliseconds of the run's t = 0.
    pub started_at_ms: i64,
    /// A stream whose longest stall exceeds this is counted in `totals.stalled_streams`.
    #[serde(default)]
    pub stall_threshold_ms: u64,
}

/// A stream that changed owner (design §5).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Takeover {
    pub stream_id: String,
    pub from_owner: String,
    pub to_owner: String,
    pub from_fence: u64,
    pub to_fence: u64,
    /// Run time (ms since t0) of the first event accepted under `to_fence`.
    pub at_ms: u64,
    /// From the causing injection to `at_ms`; null when no injected action caused it.
    pub takeover_ms: Option<u64>,
    /// Lease left on the stream when the fault hit, read from the table; null without a fault.
    pub lease_remaining_ms: Option<i64>,
    /// The causing action (`kill`, `pause`, `terminate`) and its index in `faults`.
    pub cause: Option<String>,
    pub fault: Option<usize>,
}

/// Run totals (design §5 definitions).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Sum over streams of the upstream's last sequence.
    pub events_produced: u64,
    /// Receipts with outcome `accepted`.
    pub events_accepted: u64,
    /// Sequences in `1..=last_seq` never accepted, over all streams.
    pub gaps: u64,
    /// Of the gaps, those inside a range the upstream itself lost (its `upstream_gap` fault:
    /// retention gone, the consumer told): no worker could have delivered them.
    #[serde(default)]
    pub upstream_lost: u64,
    /// `gaps - upstream_lost`: sequences lost on the worker's side.
    #[serde(default)]
    pub gaps_unexplained: u64,
    /// Receipts with outcome `duplicate`.
    pub duplicates: u64,
    /// Receipts with outcome `fenced`.
    pub stale_rejected: u64,
    /// Accepted events whose token was lower than one already accepted for the stream.
    pub stale_accepted: u64,
    /// Streams whose final checkpoint is ahead of the accepted high-water mark.
    pub checkpoint_ahead: u64,
    /// Owner changes after the warm-up, whatever caused them.
    pub takeovers: u64,
    /// Owner changes before the warm-up ended (the fleet balancing as it starts: a bid
    /// answered, an excess shed). Not in `takeovers`.
    #[serde(default)]
    pub warmup_takeovers: u64,
    /// Owner changes attributed to an injected action.
    pub fault_takeovers: u64,
    /// Percentiles of `takeover_ms` over fault-caused takeovers.
    pub takeover_ms: Percentiles,
    /// Percentiles of `lease_remaining_ms` at the injections that caused takeovers.
    pub lease_remaining_ms: Percentiles,
    /// Workers that exited without the harness causing it (no kill or terminate of theirs,
    /// before the fleet's final stop). Any fails the run unless the scenario bounds it itself.
    #[serde(default)]
    pub worker_crashes: u64,
    /// Events the sink received (any outcome) under a fence lower than one the table had
    /// already granted for the stream (per the lease timeline).
    #[serde(default)]
    pub late_writes: u64,
    /// The most a late write came after that grant; null when there was none.
    #[serde(default)]
    pub late_write_ms_max: Option<u64>,
    /// Events received after the sender's lease had expired by the table's `lease_expires_at`
    /// (read on the harness's clock) or after the sender released it.
    #[serde(default)]
    pub expired_writes: u64,
    /// Accepted events whose fence the table had already superseded.
    #[serde(default)]
    pub superseded_accepted: u64,
    /// Over every stream, the longest time between the warm-up's end and production's stop
    /// without an accepted event; null when the warm-up never ended.
    #[serde(default)]
    pub max_stall_ms: Option<u64>,
    /// Streams whose longest stall exceeded the run's stall threshold.
    #[serde(default)]
    pub stalled_streams: u64,
    /// The longest time any stream had no valid lease in the table over the same window;
    /// null without a lease timeline.
    #[serde(default)]
    pub unowned_ms_max: Option<u64>,
    /// Accepted events whose payload is not the upstream's for their (stream, seq).
    #[serde(default)]
    pub content_mismatches: u64,
}

/// One stream's longest time without an accepted event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamStall {
    pub stream_id: String,
    pub stall_ms: u64,
}

/// A worker exit the harness did not cause.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerCrash {
    pub worker: String,
    pub t_ms: u64,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The last lines of its log.
    pub log_tail: Option<String>,
}

/// p50 / p99 / max over `count` samples; null when there are none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: Option<u64>,
    pub p99: Option<u64>,
    pub max: Option<u64>,
    pub count: u64,
}

/// One injected action and what followed from it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultSummary {
    /// Index of the scenario fault that issued it (null for harness-internal actions).
    pub fault: Option<usize>,
    pub action: String,
    pub target: String,
    pub t_ms: u64,
    /// Streams the target owned at the instant of injection.
    pub streams_owned: usize,
    /// Takeovers attributed to this action.
    pub takeovers: usize,
    pub takeover_ms_max: Option<u64>,
}

/// `from..=to` of a stream never accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapRange {
    pub stream_id: String,
    pub from: u64,
    pub to: u64,
}

/// A stream whose table checkpoint claims more than the sink holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointAhead {
    pub stream_id: String,
    pub checkpoint: u64,
    pub accepted_high_water: u64,
}

/// One evaluated expectation (design §5: `name`, `threshold`, `actual`, `passed`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExpectationResult {
    pub name: String,
    pub metric: String,
    pub op: String,
    pub threshold: f64,
    /// The threshold as written, e.g. `"lease_ms + 1500"`.
    pub threshold_expr: String,
    /// Null when the metric has no value (e.g. a percentile over no samples): that fails.
    pub actual: Option<f64>,
    pub passed: bool,
}

/// The harness's own resource use over the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HarnessStats {
    pub wall_ms: u64,
    pub cpu_ms: u64,
    pub max_rss_bytes: u64,
    pub receipts: u64,
    pub receipts_per_s: f64,
}

impl Report {
    /// Reads a `report.json`.
    pub fn read(path: &Path) -> anyhow::Result<Report> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{} is not a report.json: {e}", path.display()))
    }

    /// Copies what `run_start` says about the run itself — the versions and the scenario text —
    /// which the analysis of the figures leaves aside.
    pub fn set_provenance(&mut self, start: &crate::history::RunStart) {
        self.versions = start.versions.clone();
        self.scenario_text = start.scenario_text.clone();
    }

    /// Writes it pretty-printed.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
    }
}

/// What a dotted metric path names in a report.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricValue {
    /// A number.
    Number(f64),
    /// The path exists but holds null (no samples).
    Missing,
}

/// Looks up `path` (`totals.gaps`, `totals.takeover_ms.p99`, `takeovers.count`…) in a report
/// serialised as JSON. `.count` on a list is its length. `None`: the path names nothing numeric.
pub fn metric(report: &serde_json::Value, path: &str) -> Option<MetricValue> {
    let mut value = report;
    for part in path.split('.') {
        value = match value {
            serde_json::Value::Array(items) if part == "count" => {
                return Some(MetricValue::Number(items.len() as f64))
            }
            serde_json::Value::Object(map) => map.get(part)?,
            _ => return None,
        };
    }
    match value {
        serde_json::Value::Number(n) => n.as_f64().map(MetricValue::Number),
        serde_json::Value::Bool(b) => Some(MetricValue::Number(if *b { 1.0 } else { 0.0 })),
        serde_json::Value::Null => Some(MetricValue::Missing),
        _ => None,
    }
}

/// True when `path` names a numeric metric of report.json (checked against the report's shape).
pub fn is_known_metric(path: &str) -> bool {
    let shape = serde_json::to_value(Report::default()).expect("a report serialises");
    metric(&shape, path).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_paths_resolve_against_the_report_shape() {
        for known in [
            "totals.gaps",
            "totals.stale_accepted",
            "totals.takeover_ms.p99",
            "totals.takeover_ms.count",
            "takeovers.count",
            "faults.count",
            "config.lease_ms",
        ] {
            assert!(is_known_metric(known), "{known}");
        }
        for unknown in ["totals", "totals.gap", "takeovers.first", "scenario", ""] {
            assert!(!is_known_metric(unknown), "{unknown}");
        }
    }

    #[test]
    fn a_report_written_before_versions_and_scenario_text_still_reads() {
        let mut value = serde_json::to_value(Report {
            scenario: "old".into(),
            ..Report::default()
        })
        .unwrap();
        let object = value.as_object_mut().unwrap();
        assert!(object.remove("versions").is_some());
        assert!(object.remove("scenario_text").is_some());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        std::fs::write(&path, serde_json::to_string(&value).unwrap()).unwrap();
        let report = Report::read(&path).unwrap();
        assert_eq!(report.scenario, "old");
        assert_eq!(report.versions, Versions::default());
        assert!(report.scenario_text.is_empty());
    }

    #[test]
    fn null_percentiles_are_missing_not_zero() {
        let report = serde_json::to_value(Report::default()).unwrap();
        assert_eq!(
            metric(&report, "totals.takeover_ms.max"),
            Some(MetricValue::Missing)
        );
        assert_eq!(
            metric(&report, "totals.gaps"),
            Some(MetricValue::Number(0.0))
        );
    }
}
