//! The record kinds of `history.jsonl`. `t_ms` is milliseconds since the run's t0 (a monotonic
//! clock); `run_start.wall_ms` gives t0 in Unix milliseconds.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One line of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    RunStart(RunStart),
    Phase(Phase),
    WorkerStart(WorkerStart),
    WorkerExit(WorkerExit),
    Receipt(Receipt),
    Action(Action),
    OwnerSample(OwnerSample),
    UpstreamFinal(UpstreamFinal),
    CheckpointFinal(CheckpointFinal),
    Lease(LeaseChange),
    ContentMismatch(ContentMismatch),
    RunEnd(RunEnd),
}

/// First line: the scenario and its configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStart {
    pub t_ms: u64,
    /// Unix milliseconds of t0.
    pub wall_ms: i64,
    pub scenario: String,
    pub description: String,
    pub seed: u64,
    pub lease_ms: u64,
    pub renew_ms: u64,
    pub skew_margin_ms: u64,
    pub workers: usize,
    pub streams: usize,
    pub rate: f64,
    pub duration_ms: u64,
    pub fencing: bool,
    /// What ran. Absent from histories written before it was recorded.
    #[serde(default)]
    pub versions: Versions,
    /// The scenario file's TOML exactly as run (a `--seed` override shows in `seed`, not here).
    #[serde(default)]
    pub scenario_text: String,
    /// Where the `lease` records come from (`dynamodb_streams`, `poll`) and how finely they
    /// are timed; absent from histories written before the lease timeline was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_source: Option<LeaseSourceInfo>,
    /// A stream stalled longer than this counts in `stalled_streams`; absent in older
    /// histories (then twice the lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_threshold_ms: Option<u64>,
    /// The run has a warm-up that ends with a `warmup_done` phase: owner changes before it are
    /// the fleet balancing as it starts (`totals.warmup_takeovers`), not takeovers. Absent in
    /// older histories and hand-written ones: every change counts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
}

/// How the lease timeline of a run was read (design §9).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseSourceInfo {
    /// `dynamodb_streams` (the table's own change log) or `poll` (consistent scans).
    pub source: String,
    /// The interval at which the source is read, in ms: a `lease` record's `t_ms` is at most
    /// about this much after the write it reports.
    pub resolution_ms: u64,
}

/// The versions of what ran: the harness itself and the worker binary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Versions {
    /// The harness's crate version.
    pub harness: String,
    /// The worker binary's `--version` output, trimmed (`lease-worker 0.1.0`); null when it
    /// could not be read.
    pub worker: Option<String>,
    /// Why `WORKER-BIN --version` failed, when it did.
    pub worker_error: Option<String>,
    /// The DynamoDB backend, its version and licence (`moto 5.2.5 (Apache-2.0)`); null in
    /// histories written before it was recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamodb: Option<String>,
}

/// A phase boundary: `warmup_done`, `faults_done`, `production_stopped`, `settled`,
/// `settle_timeout`, `drained`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub t_ms: u64,
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A worker process started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStart {
    pub t_ms: u64,
    pub worker: String,
    pub pid: u32,
}

/// A worker process ended: exit `code`, or the `signal` that ended it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerExit {
    pub t_ms: u64,
    pub worker: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The last lines of the worker's log (what it said before it went), when readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
}

/// How the sink answered one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Accepted,
    Duplicate,
    Fenced,
}

/// One event as the sink received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub t_ms: u64,
    pub stream_id: String,
    pub seq: u64,
    pub fence_token: u64,
    pub owner_id: String,
    pub outcome: Outcome,
}

/// The receipts of one sink batch: what they share once, and each event's `(seq, outcome)`.
/// The writer expands it into one `receipt` line per event, the same bytes as [`Receipt`]'s.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptBatch {
    pub t_ms: u64,
    pub stream_id: String,
    pub fence_token: u64,
    pub owner_id: String,
    pub events: Vec<(u64, Outcome)>,
}

impl ReceiptBatch {
    /// One receipt as a batch of one.
    pub fn one(r: Receipt) -> ReceiptBatch {
        ReceiptBatch {
            t_ms: r.t_ms,
            stream_id: r.stream_id,
            fence_token: r.fence_token,
            owner_id: r.owner_id,
            events: vec![(r.seq, r.outcome)],
        }
    }
}

impl Outcome {
    /// The name `history.jsonl` gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Duplicate => "duplicate",
            Outcome::Fenced => "fenced",
        }
    }
}

/// A harness action (`kill`, `pause`, `resume`, `terminate`, `start`), with what the target
/// owned at that instant, read from the lease table. `ready` is no injection but what a rolling
/// deploy waited for: a worker it started answered `/readyz`.
///
/// Fault-menu actions (design §10) also say which `link` they hit and carry their parameters
/// in `detail`; a fault with a period ends with a `heal` line of the same `fault` index (its
/// `detail.healed` names the fault and what it did).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Action {
    pub t_ms: u64,
    pub action: String,
    pub target: String,
    /// Index of the scenario fault that issued it.
    #[serde(default)]
    pub fault: Option<usize>,
    pub streams: Vec<ActionStream>,
    /// `dynamodb`, `upstream` or `sink`, for a fault on a worker's link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// The fault's parameters (and, on a `heal`, what it did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

/// A stream the target held at injection time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionStream {
    pub stream_id: String,
    pub fence_token: u64,
    pub lease_remaining_ms: i64,
}

/// Who owns how many streams, from a table scan (for the ownership timeline).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnerSample {
    pub t_ms: u64,
    /// Streams held under an unexpired lease, by owner.
    pub owners: BTreeMap<String, usize>,
    /// Streams with no owner or an expired lease.
    pub free: usize,
}

/// The upstream's last produced sequence of a stream, after production stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamFinal {
    pub stream_id: String,
    pub last_seq: u64,
}

/// A stream's final table item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointFinal {
    pub stream_id: String,
    pub owner_id: Option<String>,
    pub fence_token: Option<u64>,
    pub checkpoint: Option<u64>,
}

/// One change to a stream's lease item, as the table's change log (or a consistent poll) showed
/// it (design §9). `t_ms` is when the harness learned of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseChange {
    pub t_ms: u64,
    pub stream_id: String,
    pub op: LeaseOp,
    pub owner_id: Option<String>,
    pub fence_token: Option<u64>,
    /// Unix milliseconds (the table's own value).
    pub lease_expires_at: Option<i64>,
    pub checkpoint: Option<u64>,
    /// The item's `updated_at`, Unix ms, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<i64>,
}

/// An event the sink accepted whose payload is not what the upstream produced for its
/// (stream, seq) (design §9 `content_mismatches`). Written only when it happens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentMismatch {
    pub t_ms: u64,
    pub stream_id: String,
    pub seq: u64,
    pub owner_id: String,
    pub fence_token: u64,
}

/// What a lease change did, judged from the item before and after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseOp {
    /// The fence token went up: a new grant.
    Acquire,
    /// Same owner and fence, a later expiry.
    Renew,
    /// The owner was removed.
    Release,
    /// Same owner and fence, a new checkpoint and nothing else of note.
    Checkpoint,
    /// Anything else (seeding, a bid, a foreign writer).
    Other,
}

/// Last line: how the run ended and what the harness itself cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    pub t_ms: u64,
    /// Why the run did not complete, if it did not.
    #[serde(default)]
    pub errors: Vec<String>,
    pub receipts: u64,
    pub harness_cpu_ms: u64,
    pub harness_max_rss_bytes: u64,
}

impl Record {
    /// The record's `t_ms`, when it has one.
    pub fn t_ms(&self) -> Option<u64> {
        match self {
            Record::RunStart(r) => Some(r.t_ms),
            Record::Phase(r) => Some(r.t_ms),
            Record::WorkerStart(r) => Some(r.t_ms),
            Record::WorkerExit(r) => Some(r.t_ms),
            Record::Receipt(r) => Some(r.t_ms),
            Record::Action(r) => Some(r.t_ms),
            Record::OwnerSample(r) => Some(r.t_ms),
            Record::RunEnd(r) => Some(r.t_ms),
            Record::Lease(r) => Some(r.t_ms),
            Record::ContentMismatch(r) => Some(r.t_ms),
            Record::UpstreamFinal(_) | Record::CheckpointFinal(_) => None,
        }
    }
}

/// Reads a `history.jsonl` lazily; an error names the line.
pub fn read(path: &Path) -> anyhow::Result<impl Iterator<Item = anyhow::Result<Record>>> {
    let file = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
    let shown = path.display().to_string();
    Ok(std::io::BufReader::with_capacity(1 << 20, file)
        .lines()
        .enumerate()
        .filter(|(_, line)| !matches!(line, Ok(l) if l.trim().is_empty()))
        .map(move |(i, line)| {
            let line = line.map_err(|e| anyhow::anyhow!("{shown}:{}: {e}", i + 1))?;
            serde_json::from_str(&line).map_err(|e| anyhow::anyhow!("{shown}:{}: {e}", i + 1))
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipt_line_matches_the_design() {
        let line = r#"{"kind":"receipt","t_ms":5,"stream_id":"s-0001","seq":3,"fence_token":2,"owner_id":"worker-1","outcome":"fenced"}"#;
        let record: Record = serde_json::from_str(line).unwrap();
        assert!(
            matches!(&record, Record::Receipt(r) if r.outcome == Outcome::Fenced && r.seq == 3)
        );
        assert_eq!(serde_json::to_string(&record).unwrap(), line);
    }

    #[test]
    fn checkpoint_final_allows_nulls() {
        let line = r#"{"kind":"checkpoint_final","stream_id":"s-0001","owner_id":null,"fence_token":4,"checkpoint":null}"#;
        let record: Record = serde_json::from_str(line).unwrap();
        assert_eq!(serde_json::to_string(&record).unwrap(), line);
    }

    #[test]
    fn run_start_carries_versions_and_scenario_text_and_reads_old_lines() {
        let start = RunStart {
            scenario: "s".into(),
            versions: Versions {
                harness: "0.1.0".into(),
                worker: None,
                worker_error: Some("`w --version` failed (exit status: 2)".into()),
                dynamodb: None,
            },
            scenario_text: "name = \"s\"\n# <b>&</b>\n".into(),
            ..RunStart::default()
        };
        let line = serde_json::to_string(&Record::RunStart(start.clone())).unwrap();
        assert!(
            line.contains(r#""versions":{"harness":"0.1.0","worker":null,"#),
            "{line}"
        );
        let back: Record = serde_json::from_str(&line).unwrap();
        assert_eq!(back, Record::RunStart(start));

        // A history written before these were recorded still reads.
        let old = r#"{"kind":"run_start","t_ms":0,"wall_ms":5,"scenario":"s","description":"","seed":1,"lease_ms":3000,"renew_ms":1000,"skew_margin_ms":200,"workers":3,"streams":20,"rate":20.0,"duration_ms":20000,"fencing":true}"#;
        match serde_json::from_str::<Record>(old).unwrap() {
            Record::RunStart(s) => {
                assert_eq!(s.versions, Versions::default());
                assert_eq!(s.scenario_text, "");
                assert_eq!(s.lease_ms, 3000);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn action_line_matches_the_design() {
        let line = r#"{"kind":"action","t_ms":9,"action":"kill","target":"worker-2","fault":0,"streams":[{"stream_id":"s-0001","fence_token":3,"lease_remaining_ms":2140}]}"#;
        let record: Record = serde_json::from_str(line).unwrap();
        assert_eq!(serde_json::to_string(&record).unwrap(), line);
    }
}
