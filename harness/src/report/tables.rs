//! The report's tables as plain data, so `report.md` and `report.html` show the same ones:
//! expectations, totals, faults, takeovers, streams per worker around each fault, gaps,
//! checkpoints ahead of the sink and fenced writes by owner.

use std::collections::BTreeSet;

use super::view::RunView;
use crate::report_json::{Percentiles, Report};

/// At most this many takeovers and gap ranges are listed (report.json holds them all).
pub const MAX_LISTED: usize = 50;

/// One cell; `passed` colours it in HTML.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub text: String,
    /// Text to show as code (a metric path, an expression).
    pub code: bool,
    /// Colours the cell green (true) or red (false).
    pub passed: Option<bool>,
    /// A verdict cell: markdown prefixes ✅ / ❌, HTML ✓ / ✗.
    pub mark: bool,
}

impl Cell {
    fn code(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            code: true,
            passed: None,
            mark: false,
        }
    }
}

impl<T: Into<String>> From<T> for Cell {
    fn from(text: T) -> Cell {
        Cell {
            text: text.into(),
            code: false,
            passed: None,
            mark: false,
        }
    }
}

/// A titled table with an optional sentence before it and a note after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Stable id, used as the HTML anchor.
    pub id: &'static str,
    pub title: String,
    pub intro: Option<String>,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    pub note: Option<String>,
}

/// A number as people write it: integers without a decimal point, others to 3 decimals.
pub fn num(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        let s = format!("{value:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Milliseconds or a dash.
pub fn ms(value: Option<u64>) -> String {
    value.map_or("–".to_string(), |v| v.to_string())
}

/// Seconds since t0 with one decimal.
pub fn secs(t_ms: u64) -> String {
    format!("{:.1}", t_ms as f64 / 1000.0)
}

fn percentiles(p: &Percentiles) -> String {
    if p.count == 0 {
        return "no samples".to_string();
    }
    format!(
        "p50 {} · p99 {} · max {} ({} samples)",
        ms(p.p50),
        ms(p.p99),
        ms(p.max),
        p.count
    )
}

/// Every table of the report, in reading order; empty optional tables are left out.
pub fn all(report: &Report, view: &RunView) -> Vec<Table> {
    let mut tables = vec![expectations(report), totals(report)];
    tables.extend(worker_crashes(report));
    tables.extend(faults(report));
    tables.extend(takeovers(report));
    tables.extend(per_worker(view));
    tables.extend(longest_stalls(report));
    tables.extend(gaps(report));
    tables.extend(checkpoint_ahead(report));
    tables.extend(fenced_by_owner(report));
    tables.push(harness(report));
    tables
}

fn expectations(report: &Report) -> Table {
    let rows = report
        .expectations
        .iter()
        .map(|e| {
            let threshold = if e.threshold_expr.is_empty() || e.threshold_expr == num(e.threshold) {
                format!("{} {}", e.op, num(e.threshold))
            } else {
                format!("{} {} (= {})", e.op, num(e.threshold), e.threshold_expr)
            };
            let verdict = if e.passed { "pass" } else { "FAIL" };
            vec![
                e.name.clone().into(),
                Cell::code(e.metric.clone()),
                threshold.into(),
                e.actual.map_or("null (no value)".to_string(), num).into(),
                Cell {
                    passed: Some(e.passed),
                    mark: true,
                    ..Cell::from(verdict)
                },
            ]
        })
        .collect();
    Table {
        id: "expectations",
        title: "Expectations".into(),
        intro: None,
        headers: ["expectation", "metric", "threshold", "actual", "result"]
            .map(String::from)
            .to_vec(),
        rows,
        note: report
            .expectations
            .is_empty()
            .then(|| "The scenario states no expectations.".to_string()),
    }
}

fn totals(report: &Report) -> Table {
    let t = &report.totals;
    let zero_is_good = |name: &str, value: u64| -> Vec<Cell> {
        vec![
            name.into(),
            Cell {
                passed: Some(value == 0),
                ..Cell::from(value.to_string())
            },
        ]
    };
    let plain = |name: &str, value: String| -> Vec<Cell> { vec![name.into(), value.into()] };
    Table {
        id: "totals",
        title: "Totals".into(),
        intro: None,
        headers: vec!["metric".into(), "value".into()],
        rows: vec![
            plain("events produced", t.events_produced.to_string()),
            plain("events accepted", t.events_accepted.to_string()),
            zero_is_good("gaps (never accepted)", t.gaps),
            plain("duplicates", t.duplicates.to_string()),
            plain(
                "stale writes rejected (fenced)",
                t.stale_rejected.to_string(),
            ),
            zero_is_good("stale writes accepted", t.stale_accepted),
            zero_is_good("checkpoints ahead of the sink", t.checkpoint_ahead),
            plain(
                "takeovers (after a fault)",
                format!("{} ({})", t.takeovers, t.fault_takeovers),
            ),
            plain("takeover_ms", percentiles(&t.takeover_ms)),
            plain(
                "lease remaining at the fault (ms)",
                percentiles(&t.lease_remaining_ms),
            ),
            zero_is_good("workers that exited on their own", t.worker_crashes),
            zero_is_good("late writes (after a higher grant)", t.late_writes),
            plain(
                "latest late write (ms after the grant)",
                ms(t.late_write_ms_max),
            ),
            zero_is_good("writes after the lease expired", t.expired_writes),
            zero_is_good("superseded writes accepted", t.superseded_accepted),
            plain("longest stall of a stream (ms)", ms(t.max_stall_ms)),
            zero_is_good("stalled streams", t.stalled_streams),
            plain(
                "longest time without a valid lease (ms)",
                ms(t.unowned_ms_max),
            ),
            zero_is_good(
                "events accepted with the wrong content",
                t.content_mismatches,
            ),
        ],
        note: report.lease_source.as_ref().map(|s| {
            format!(
                "Lease timeline from {} (resolution {} ms); stalls over {} ms count as stalled.",
                s.source, s.resolution_ms, report.config.stall_threshold_ms
            )
        }),
    }
}

fn worker_crashes(report: &Report) -> Option<Table> {
    if report.worker_crashes.is_empty() {
        return None;
    }
    let rows = report
        .worker_crashes
        .iter()
        .map(|c| {
            let how = match (c.code, c.signal) {
                (Some(code), _) => format!("exit code {code}"),
                (None, Some(signal)) => format!("signal {signal}"),
                (None, None) => "unknown".to_string(),
            };
            vec![
                c.worker.clone().into(),
                secs(c.t_ms).into(),
                how.into(),
                Cell::code(c.log_tail.clone().unwrap_or_default()),
            ]
        })
        .collect();
    Some(Table {
        id: "worker-crashes",
        title: "Workers that exited on their own".into(),
        intro: None,
        headers: ["worker", "at (s)", "how", "last lines of its log"]
            .map(String::from)
            .to_vec(),
        rows,
        note: None,
    })
}

fn longest_stalls(report: &Report) -> Option<Table> {
    if report.longest_stalls.is_empty() {
        return None;
    }
    let threshold = report.config.stall_threshold_ms;
    let rows = report
        .longest_stalls
        .iter()
        .map(|s| {
            vec![
                s.stream_id.clone().into(),
                Cell {
                    passed: Some(s.stall_ms <= threshold),
                    ..Cell::from(s.stall_ms.to_string())
                },
            ]
        })
        .collect();
    Some(Table {
        id: "stalls",
        title: "Longest stalls".into(),
        intro: None,
        headers: ["stream", "longest time without an accepted event (ms)"]
            .map(String::from)
            .to_vec(),
        rows,
        note: None,
    })
}

fn faults(report: &Report) -> Option<Table> {
    if report.faults.is_empty() {
        return None;
    }
    let rows = report
        .faults
        .iter()
        .map(|f| {
            vec![
                f.fault
                    .map_or("–".to_string(), |i| (i + 1).to_string())
                    .into(),
                secs(f.t_ms).into(),
                f.action.clone().into(),
                f.target.clone().into(),
                f.streams_owned.to_string().into(),
                f.takeovers.to_string().into(),
                ms(f.takeover_ms_max).into(),
            ]
        })
        .collect();
    Some(Table {
        id: "faults",
        title: "Injected actions".into(),
        intro: None,
        headers: [
            "fault",
            "at (s)",
            "action",
            "target",
            "streams it owned",
            "takeovers caused",
            "slowest takeover (ms)",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        note: None,
    })
}

fn takeovers(report: &Report) -> Option<Table> {
    if report.takeovers.is_empty() {
        return None;
    }
    let rows = report
        .takeovers
        .iter()
        .take(MAX_LISTED)
        .map(|t| {
            vec![
                Cell::code(t.stream_id.clone()),
                format!("{} → {}", t.from_owner, t.to_owner).into(),
                format!("{} → {}", t.from_fence, t.to_fence).into(),
                secs(t.at_ms).into(),
                ms(t.takeover_ms).into(),
                t.lease_remaining_ms
                    .map_or("–".to_string(), |v| v.to_string())
                    .into(),
                t.cause.clone().unwrap_or_else(|| "–".to_string()).into(),
            ]
        })
        .collect();
    let more = report.takeovers.len().saturating_sub(MAX_LISTED);
    Some(Table {
        id: "takeovers",
        title: format!("Takeovers ({})", report.takeovers.len()),
        intro: None,
        headers: [
            "stream",
            "owner",
            "fence",
            "at (s)",
            "takeover ms",
            "lease remaining at the fault (ms)",
            "cause",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        note: (more > 0).then(|| format!("… and {more} more in report.json.")),
    })
}

/// Streams held by each worker just before each scenario fault, and just before the next one
/// (or before production stopped, for the last).
fn per_worker(view: &RunView) -> Option<Table> {
    let faults = view.faults();
    if faults.is_empty() || view.ownership.is_empty() {
        return None;
    }
    let end = view.production_stopped_ms.unwrap_or(view.end_ms);
    let mut headers = vec!["worker".to_string()];
    let mut snapshots = Vec::new();
    for (k, (index, t, what)) in faults.iter().enumerate() {
        let next = faults.get(k + 1).map_or(end, |f| f.1);
        headers.push(format!(
            "before fault {} ({what} at {} s)",
            index + 1,
            secs(*t)
        ));
        headers.push(format!("after fault {}", index + 1));
        snapshots.push(view.ownership_at(t.saturating_sub(1)));
        snapshots.push(view.ownership_at(next.saturating_sub(1)));
    }
    let mut workers: BTreeSet<&String> = BTreeSet::new();
    for point in snapshots.iter().flatten() {
        workers.extend(point.owners.keys());
    }
    let mut rows: Vec<Vec<Cell>> = workers
        .iter()
        .map(|w| {
            let mut row: Vec<Cell> = vec![w.to_string().into()];
            row.extend(snapshots.iter().map(|p| {
                p.map_or("–".to_string(), |p| {
                    p.owners.get(*w).copied().unwrap_or(0).to_string()
                })
                .into()
            }));
            row
        })
        .collect();
    let mut free: Vec<Cell> = vec!["(no owner / expired)".into()];
    free.extend(
        snapshots
            .iter()
            .map(|p| p.map_or("–".to_string(), |p| p.free.to_string()).into()),
    );
    rows.push(free);
    let source = match view.ownership_source {
        super::view::OwnershipSource::Table => "scans of the lease table",
        super::view::OwnershipSource::Receipts => {
            "the sink's receipts (who was publishing each stream; the history has no table scans)"
        }
    };
    Some(Table {
        id: "per-worker",
        title: "Streams per worker around each fault".into(),
        intro: Some(format!(
            "From {source}: just before each fault, and just before the next fault \
             (or the end of production)."
        )),
        headers,
        rows,
        note: None,
    })
}

fn gaps(report: &Report) -> Option<Table> {
    if report.gap_ranges.is_empty() {
        return None;
    }
    let rows = report
        .gap_ranges
        .iter()
        .take(MAX_LISTED)
        .map(|g| {
            vec![
                Cell::code(g.stream_id.clone()),
                format!("{}..={}", g.from, g.to).into(),
                (g.to - g.from + 1).to_string().into(),
            ]
        })
        .collect();
    Some(Table {
        id: "gaps",
        title: "Gaps: sequences never accepted".into(),
        intro: None,
        headers: ["stream", "sequences", "count"].map(String::from).to_vec(),
        rows,
        note: (report.gap_ranges.len() > MAX_LISTED).then(|| {
            format!(
                "… the first {MAX_LISTED} ranges; {} sequences in all.",
                report.totals.gaps
            )
        }),
    })
}

fn checkpoint_ahead(report: &Report) -> Option<Table> {
    if report.checkpoint_ahead_streams.is_empty() {
        return None;
    }
    let rows = report
        .checkpoint_ahead_streams
        .iter()
        .take(MAX_LISTED)
        .map(|c| {
            vec![
                Cell::code(c.stream_id.clone()),
                c.checkpoint.to_string().into(),
                c.accepted_high_water.to_string().into(),
            ]
        })
        .collect();
    Some(Table {
        id: "checkpoint-ahead",
        title: "Checkpoints ahead of the sink".into(),
        intro: Some(
            "The table claims these sequences were delivered, but the sink never accepted them."
                .into(),
        ),
        headers: ["stream", "final checkpoint", "accepted high-water mark"]
            .map(String::from)
            .to_vec(),
        rows,
        note: None,
    })
}

fn fenced_by_owner(report: &Report) -> Option<Table> {
    if report.fenced_by_owner.is_empty() {
        return None;
    }
    let rows = report
        .fenced_by_owner
        .iter()
        .map(|(owner, n)| vec![owner.clone().into(), n.to_string().into()])
        .collect();
    Some(Table {
        id: "fenced",
        title: "Stale writes rejected, by the owner that sent them".into(),
        intro: Some("Zombie owners: the sink refused these writes (HTTP 409).".into()),
        headers: vec!["owner".into(), "events rejected".into()],
        rows,
        note: None,
    })
}

/// The text, or `unknown` when it was not recorded (older reports).
fn or_unknown(text: &str) -> String {
    if text.is_empty() {
        "unknown".to_string()
    } else {
        text.to_string()
    }
}

fn harness(report: &Report) -> Table {
    let h = &report.harness;
    let c = &report.config;
    let plain = |name: &str, value: String| -> Vec<Cell> { vec![name.into(), value.into()] };
    Table {
        id: "run",
        title: "Run".into(),
        intro: None,
        headers: vec!["setting".into(), "value".into()],
        rows: vec![
            plain(
                "lease / renew / skew margin",
                format!(
                    "{} ms / {} ms / {} ms",
                    c.lease_ms, c.renew_ms, c.skew_margin_ms
                ),
            ),
            plain(
                "workers × streams",
                format!(
                    "{} × {} at {} events/s each",
                    c.workers,
                    c.streams,
                    num(c.rate)
                ),
            ),
            plain("seed", c.seed.to_string()),
            plain("harness version", or_unknown(&report.versions.harness)),
            plain(
                "worker version",
                match (&report.versions.worker, &report.versions.worker_error) {
                    (Some(worker), _) => worker.clone(),
                    (None, Some(error)) => format!("unknown: {error}"),
                    (None, None) => "unknown".to_string(),
                },
            ),
            plain(
                "DynamoDB backend",
                report
                    .versions
                    .dynamodb
                    .clone()
                    .unwrap_or_else(|| "not recorded".to_string()),
            ),
            plain(
                "fencing sink",
                if c.fencing { "on" } else { "off" }.to_string(),
            ),
            plain("wall time", format!("{} s", secs(h.wall_ms))),
            plain("harness CPU", format!("{} s", secs(h.cpu_ms))),
            plain(
                "harness max RSS",
                format!("{} MB", num((h.max_rss_bytes as f64 / 1048576.0).round())),
            ),
            plain(
                "receipts recorded",
                format!("{} ({}/s)", h.receipts, num(h.receipts_per_s.round())),
            ),
        ],
        note: None,
    }
}
