//! `harness run` over several scenarios in one call (files, or folders of `*.toml`): one run
//! directory per scenario under `--out`, then one summary of them all — `summary.md`,
//! `junit.xml` (one test suite per scenario) and `summary.json` — so a pipeline needs one
//! command. The exit code is the worst verdict (2 over 1 over 0).
//!
//! Every scenario is validated before any runs: an invalid one stops the batch with exit 2 and
//! nothing started. [`summary_line`] is the machine-readable line `--summary-json` prints per
//! run; its fields are documented in `harness/README.md` and stay stable.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::future::Future;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::report_json::Report;
use crate::run::RunOptions;
use crate::scenario::Scenario;

/// The summary files a batch writes into `--out`.
pub const SUMMARY_MARKDOWN: &str = "summary.md";
pub const SUMMARY_JUNIT: &str = "junit.xml";
pub const SUMMARY_JSON: &str = "summary.json";

/// One scenario of a batch: its file, its name and where its run directory goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub file: PathBuf,
    pub scenario: String,
    pub dir: PathBuf,
}

/// The scenario files named by `inputs`: a file as given, a folder's `*.toml` directly inside it
/// (sorted; subfolders such as `pending/` are not entered — name them to run them). Errors name
/// the input that is missing or holds no scenario.
pub fn expand(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(input)
                .map_err(|e| format!("cannot read {}: {e}", input.display()))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "toml"))
                .collect();
            if found.is_empty() {
                return Err(format!(
                    "{}: no *.toml scenario directly in this folder",
                    input.display()
                ));
            }
            found.sort();
            files.extend(found);
        } else if input.is_file() {
            files.push(input.clone());
        } else {
            return Err(format!(
                "{}: no such scenario file or folder",
                input.display()
            ));
        }
    }
    Ok(files)
}

/// True when `inputs` call for a batch (one directory per scenario plus a summary) rather than
/// one run written straight into `--out`: several inputs, or a folder.
pub fn is_batch(inputs: &[PathBuf]) -> bool {
    inputs.len() > 1 || inputs.iter().any(|p| p.is_dir())
}

/// Loads every file (the first invalid one is the error, as `harness validate` words it) and
/// gives each a run directory `out/<file stem>`, made unique with `-2`, `-3`… when two files
/// share a stem.
pub fn plan(files: &[PathBuf], out: &Path) -> Result<Vec<Planned>, String> {
    let mut taken = HashSet::new();
    let mut planned = Vec::new();
    for file in files {
        let scenario = Scenario::load(file).map_err(|e| e.to_string())?;
        let stem = file
            .file_stem()
            .map_or("scenario".into(), |s| s.to_string_lossy().into_owned());
        let mut name = stem.clone();
        let mut n = 1;
        while !taken.insert(name.clone()) {
            n += 1;
            name = format!("{stem}-{n}");
        }
        planned.push(Planned {
            file: file.clone(),
            scenario: scenario.name,
            dir: out.join(name),
        });
    }
    Ok(planned)
}

/// How one run of a batch ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub planned: Planned,
    /// 0 passed, 1 failed, 2 invalid (design §5).
    pub exit_code: u8,
    /// The judged report, when the run produced one.
    pub report: Option<Report>,
    /// Why there is no report (or the run's own error), when there is one.
    pub error: Option<String>,
}

/// One failed expectation, as the summary line carries it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailedExpectation {
    pub name: String,
    pub metric: String,
    pub actual: Option<f64>,
    pub op: String,
    pub threshold: f64,
}

/// The `--summary-json` line of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryLine {
    pub scenario: String,
    pub file: String,
    pub dir: String,
    pub exit_code: u8,
    pub passed: bool,
    /// The DynamoDB backend that ran (e.g. `moto 5.2.5 (Apache-2.0)`); null when none started.
    pub dynamodb: Option<String>,
    pub wall_ms: Option<u64>,
    pub takeover_ms_p99: Option<u64>,
    pub stale_accepted: Option<u64>,
    pub gaps: Option<u64>,
    pub failed_expectations: Vec<FailedExpectation>,
    pub errors: Vec<String>,
}

/// Runs one planned scenario to its [`Outcome`]; `shutdown` ending aborts it (exit 1).
pub async fn run_one(
    options: &RunOptions,
    mut planned: Planned,
    shutdown: impl Future<Output = ()>,
) -> Outcome {
    match crate::run::run(options, shutdown).await {
        Ok(report) => {
            planned.scenario = report.scenario.clone();
            Outcome {
                planned,
                exit_code: if report.passed { 0 } else { 1 },
                report: Some(report),
                error: None,
            }
        }
        Err(e) => Outcome {
            planned,
            exit_code: e.exit_code(),
            report: None,
            error: Some(e.to_string()),
        },
    }
}

/// The machine-readable summary of one run (also one element of `summary.json`).
pub fn summary_line(outcome: &Outcome) -> SummaryLine {
    let report = outcome.report.as_ref();
    let mut errors: Vec<String> = report.map(|r| r.errors.clone()).unwrap_or_default();
    if let Some(e) = &outcome.error {
        if !errors.contains(e) {
            errors.push(e.clone());
        }
    }
    SummaryLine {
        scenario: outcome.planned.scenario.clone(),
        file: outcome.planned.file.display().to_string(),
        dir: outcome.planned.dir.display().to_string(),
        exit_code: outcome.exit_code,
        passed: outcome.exit_code == 0,
        dynamodb: report.and_then(|r| r.versions.dynamodb.clone()),
        wall_ms: report.map(|r| r.harness.wall_ms),
        takeover_ms_p99: report.and_then(|r| r.totals.takeover_ms.p99),
        stale_accepted: report.map(|r| r.totals.stale_accepted),
        gaps: report.map(|r| r.totals.gaps),
        failed_expectations: report
            .map(|r| {
                r.expectations
                    .iter()
                    .filter(|e| !e.passed)
                    .map(|e| FailedExpectation {
                        name: e.name.clone(),
                        metric: e.metric.clone(),
                        actual: e.actual,
                        op: e.op.clone(),
                        threshold: e.threshold,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        errors,
    }
}

/// The worst exit code of a batch (0 for an empty one).
pub fn worst(outcomes: &[Outcome]) -> u8 {
    outcomes.iter().map(|o| o.exit_code).max().unwrap_or(0)
}

/// `summary.md`: a verdict line, then one table row per scenario with its headline figures and
/// a link to its report, then each failure's reasons.
pub fn summary_markdown(outcomes: &[Outcome], out: &Path) -> String {
    let passed = outcomes.iter().filter(|o| o.exit_code == 0).count();
    let mut md = String::new();
    let verdict = if passed == outcomes.len() {
        "✅ PASSED"
    } else {
        "❌ FAILED"
    };
    let _ = writeln!(
        md,
        "# Harness runs: {verdict} ({passed} of {} scenarios passed)\n",
        outcomes.len()
    );
    let backends: Vec<String> = outcomes
        .iter()
        .filter_map(|o| o.report.as_ref()?.versions.dynamodb.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if !backends.is_empty() {
        let _ = writeln!(md, "DynamoDB backend: {}\n", backends.join(", "));
    }
    md.push_str(
        "| scenario | verdict | takeover p99 (ms) | gaps | stale accepted | wall (s) | report |\n",
    );
    md.push_str("| --- | --- | ---: | ---: | ---: | ---: | --- |\n");
    for o in outcomes {
        let line = summary_line(o);
        let verdict = match o.exit_code {
            0 => "passed",
            1 => "**FAILED**",
            _ => "**INVALID**",
        };
        let opt = |v: Option<u64>| v.map_or("–".to_string(), |v| v.to_string());
        let rel = o.planned.dir.strip_prefix(out).unwrap_or(&o.planned.dir);
        let _ = writeln!(
            md,
            "| {} | {verdict} | {} | {} | {} | {} | [{}]({}/{}) |",
            cell(&line.scenario),
            opt(line.takeover_ms_p99),
            opt(line.gaps),
            opt(line.stale_accepted),
            line.wall_ms
                .map_or("–".to_string(), |ms| format!("{:.1}", ms as f64 / 1000.0)),
            cell(&rel.display().to_string()),
            rel.display(),
            crate::report::MARKDOWN_FILE,
        );
    }
    for o in outcomes.iter().filter(|o| o.exit_code != 0) {
        let line = summary_line(o);
        let _ = writeln!(md, "\n## {} failed\n", cell(&line.scenario));
        for e in &line.errors {
            let _ = writeln!(md, "- error: {}", cell(e));
        }
        for e in &line.failed_expectations {
            let actual = e.actual.map_or("null".to_string(), |a| a.to_string());
            let _ = writeln!(
                md,
                "- expectation `{}` ({}): actual {actual}, expected {} {}",
                cell(&e.name),
                e.metric,
                e.op,
                e.threshold
            );
        }
    }
    md
}

/// Keeps a table cell on one line and free of `|`.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// `junit.xml` of the batch: each run's own suite (as its own `junit.xml` has it), and for a
/// run that left no report, a suite whose one failed case says why.
pub fn summary_junit(outcomes: &[Outcome]) -> anyhow::Result<String> {
    use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus, TestSuite};
    let mut junit = quick_junit::Report::new("harness");
    for o in outcomes {
        match &o.report {
            Some(report) => junit.add_test_suite(crate::report::junit_suite(report)),
            None => {
                let mut suite = TestSuite::new(o.planned.scenario.clone());
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                let why = o.error.clone().unwrap_or_else(|| "no report".into());
                status
                    .set_message(format!("the run did not complete: {why}"))
                    .set_type("run error")
                    .set_description(why);
                let mut case = TestCase::new("run completed", status);
                case.set_classname(format!("harness.{}", o.planned.scenario));
                suite.add_test_case(case);
                junit.add_test_suite(suite)
            }
        };
    }
    junit
        .to_string()
        .map_err(|e| anyhow::anyhow!("cannot write junit.xml: {e}"))
}

/// Writes `summary.md`, `junit.xml` and `summary.json` into `out`.
pub fn write_summary(outcomes: &[Outcome], out: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let write = |name: &str, text: String| {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write(SUMMARY_MARKDOWN, summary_markdown(outcomes, out))?;
    write(SUMMARY_JUNIT, summary_junit(outcomes)?)?;
    let lines: Vec<SummaryLine> = outcomes.iter().map(summary_line).collect();
    write(SUMMARY_JSON, serde_json::to_string_pretty(&lines)? + "\n")?;
    Ok(())
}

#[cfg(test)]
#[path = "batch/tests.rs"]
mod tests;
