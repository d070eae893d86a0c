//! Evaluates a scenario's expectations against a report and sets its verdict.

use crate::report_json::{metric, ExpectationResult, MetricValue, Report};
use crate::scenario::{Expectation, Op};

/// The checks every run makes whether or not its scenario names them (a scenario that bounds
/// the same metric itself replaces the implicit check with its own).
pub fn implicit_expectations() -> Vec<Expectation> {
    vec![Expectation {
        name: "no worker exited on its own".to_string(),
        metric: "totals.worker_crashes".to_string(),
        op: Op::Eq,
        threshold_expr: "0".to_string(),
        threshold: 0.0,
    }]
}

/// Fills `report.expectations` and `report.passed` (every expectation held and the run
/// completed). The [`implicit_expectations`] come first, unless the scenario bounds their metric.
pub fn judge(report: &mut Report, expectations: &[Expectation]) {
    let shape = serde_json::to_value(&*report).expect("a report serialises");
    let implicit = implicit_expectations()
        .into_iter()
        .filter(|i| !expectations.iter().any(|e| e.metric == i.metric));
    let all: Vec<Expectation> = implicit.chain(expectations.iter().cloned()).collect();
    report.expectations = all
        .iter()
        .map(|e| {
            let actual = match metric(&shape, &e.metric) {
                Some(MetricValue::Number(n)) => Some(n),
                _ => None,
            };
            ExpectationResult {
                name: e.name.clone(),
                metric: e.metric.clone(),
                op: e.op.symbol().to_string(),
                threshold: e.threshold,
                threshold_expr: e.threshold_expr.clone(),
                actual,
                passed: actual.is_some_and(|a| e.op.holds(a, e.threshold)),
            }
        })
        .collect();
    report.passed = report.errors.is_empty() && report.expectations.iter().all(|e| e.passed);
}

/// A plain-text table of the verdict for the terminal.
pub fn summary_table(report: &Report) -> String {
    use std::fmt::Write;
    let t = &report.totals;
    let mut out = String::new();
    let verdict = if report.passed { "PASSED" } else { "FAILED" };
    let _ = writeln!(out, "scenario {}: {verdict}", report.scenario);
    for e in &report.errors {
        let _ = writeln!(out, "  error: {e}");
    }
    let _ = writeln!(
        out,
        "  produced {}  accepted {}  gaps {}  duplicates {}  stale rejected {}  stale accepted {}  checkpoint ahead {}",
        t.events_produced, t.events_accepted, t.gaps, t.duplicates, t.stale_rejected, t.stale_accepted, t.checkpoint_ahead
    );
    let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    let _ = writeln!(
        out,
        "  takeovers {} ({} after a fault)  takeover_ms p50 {}  p99 {}  max {}",
        t.takeovers,
        t.fault_takeovers,
        ms(t.takeover_ms.p50),
        ms(t.takeover_ms.p99),
        ms(t.takeover_ms.max)
    );
    let _ = writeln!(
        out,
        "  late writes {} (max {} ms after the grant)  expired writes {}  superseded accepted {}  worker crashes {}",
        t.late_writes,
        ms(t.late_write_ms_max),
        t.expired_writes,
        t.superseded_accepted,
        t.worker_crashes
    );
    let _ = writeln!(
        out,
        "  longest stall {} ms  stalled streams {}  longest unowned {} ms",
        ms(t.max_stall_ms),
        t.stalled_streams,
        ms(t.unowned_ms_max)
    );
    for c in &report.worker_crashes {
        let _ = writeln!(
            out,
            "  {} exited on its own at {:.1} s (code {:?}, signal {:?})",
            c.worker,
            c.t_ms as f64 / 1000.0,
            c.code,
            c.signal
        );
    }
    let width = report
        .expectations
        .iter()
        .map(|e| e.name.len())
        .max()
        .unwrap_or(0);
    for e in &report.expectations {
        let actual = e.actual.map_or("null".to_string(), |a| format!("{a}"));
        let mark = if e.passed { "ok  " } else { "FAIL" };
        // A named expectation also shows its metric, so a failure names what to look at.
        let metric = if e.name.starts_with(&e.metric) {
            String::new()
        } else {
            format!(" [{}]", e.metric)
        };
        let _ = writeln!(
            out,
            "  {mark} {:width$}  actual {actual} (threshold {} {}){metric}",
            e.name, e.op, e.threshold
        );
    }
    let h = &report.harness;
    let _ = writeln!(
        out,
        "  harness: {:.1} s wall, {:.1} s CPU, max RSS {} MB, {} receipts ({:.0}/s)",
        h.wall_ms as f64 / 1000.0,
        h.cpu_ms as f64 / 1000.0,
        h.max_rss_bytes / (1 << 20),
        h.receipts,
        h.receipts_per_s
    );
    out
}
