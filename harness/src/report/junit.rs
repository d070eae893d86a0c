//! `junit.xml` (quick-junit): one test suite per scenario, one test case per expectation; a
//! failed expectation is a `<failure>` carrying the actual value and the threshold. A run that
//! did not complete adds a failed `run completed` case with the reasons. No timestamps or ids:
//! the file is a pure function of `report.json`.

use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, TestCase, TestCaseStatus, TestSuite};

use super::tables::num;
use crate::report_json::Report;

/// Renders the XML document.
pub fn render(report: &Report) -> anyhow::Result<String> {
    let mut junit = quick_junit::Report::new("harness");
    junit.add_test_suite(suite(report));
    junit
        .to_string()
        .map_err(|e| anyhow::anyhow!("cannot write junit.xml: {e}"))
}

/// The run's test suite: what `junit.xml` holds, and one suite of a batch's summary.
pub fn suite(report: &Report) -> TestSuite {
    let classname = format!("harness.{}", report.scenario);
    let mut suite = TestSuite::new(report.scenario.clone());
    suite.set_time(Duration::from_millis(report.harness.wall_ms));
    let c = &report.config;
    for (name, value) in [
        ("lease_ms", c.lease_ms.to_string()),
        ("renew_ms", c.renew_ms.to_string()),
        ("workers", c.workers.to_string()),
        ("streams", c.streams.to_string()),
        ("seed", c.seed.to_string()),
    ] {
        suite.add_property(Property::new(name, value));
    }
    let t = &report.totals;
    let opt = |v: Option<u64>| v.map_or("null".to_string(), |v| v.to_string());
    for (name, value) in [
        ("worker_crashes", t.worker_crashes.to_string()),
        ("late_writes", t.late_writes.to_string()),
        ("late_write_ms_max", opt(t.late_write_ms_max)),
        ("expired_writes", t.expired_writes.to_string()),
        ("superseded_accepted", t.superseded_accepted.to_string()),
        ("max_stall_ms", opt(t.max_stall_ms)),
        ("stalled_streams", t.stalled_streams.to_string()),
        ("unowned_ms_max", opt(t.unowned_ms_max)),
        ("content_mismatches", t.content_mismatches.to_string()),
    ] {
        suite.add_property(Property::new(name, value));
    }

    let mut completed = if report.errors.is_empty() {
        TestCaseStatus::success()
    } else {
        let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
        status
            .set_message(format!(
                "the run did not complete: {}",
                report.errors.join("; ")
            ))
            .set_type("run error");
        status
    };
    if let TestCaseStatus::NonSuccess { .. } = completed {
        completed.set_description(report.errors.join("\n"));
    }
    let mut case = TestCase::new("run completed", completed);
    case.set_classname(classname.clone());
    suite.add_test_case(case);

    for e in &report.expectations {
        let actual = e.actual.map_or("null (no value)".to_string(), num);
        let threshold = if e.threshold_expr.is_empty() || e.threshold_expr == num(e.threshold) {
            num(e.threshold)
        } else {
            format!("{} ({})", num(e.threshold), e.threshold_expr)
        };
        let status = if e.passed {
            TestCaseStatus::success()
        } else {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status
                .set_message(format!(
                    "{}: actual {actual}, expected {} {threshold}",
                    e.metric, e.op
                ))
                .set_type("expectation failed")
                .set_description(format!(
                    "metric:    {}\nactual:    {actual}\nthreshold: {} {threshold}\n{}",
                    e.metric,
                    e.op,
                    crash_details(report, &e.metric)
                ));
            status
        };
        let mut case = TestCase::new(e.name.clone(), status);
        case.set_classname(classname.clone());
        case.add_property(Property::new("metric", e.metric.clone()));
        case.add_property(Property::new("actual", actual));
        case.add_property(Property::new("threshold", format!("{} {threshold}", e.op)));
        suite.add_test_case(case);
    }
    suite
}

/// For the worker-crash check: each crashed worker, how it ended and its log's last lines.
fn crash_details(report: &Report, metric: &str) -> String {
    if metric != "totals.worker_crashes" {
        return String::new();
    }
    let mut text = String::new();
    for c in &report.worker_crashes {
        let how = match (c.code, c.signal) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!("signal {signal}"),
            (None, None) => "unknown exit".to_string(),
        };
        text.push_str(&format!("\n{} at {} ms: {how}\n", c.worker, c.t_ms));
        if let Some(tail) = &c.log_tail {
            text.push_str(tail);
            text.push('\n');
        }
    }
    text
}
