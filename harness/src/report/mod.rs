//! The human- and CI-facing renderings of a run: `report.md`, `report.html` (self-contained,
//! inline SVG charts) and `junit.xml`, all rendered from `history.jsonl` + `report.json` alone —
//! a pure function of those two files, with no clock or randomness, so `harness report DIR`
//! reproduces them byte for byte — plus the [`Progress`] line shown while a run goes.
//!
//! It never recomputes the verdict: the figures come from `report.json`; the history only adds
//! what the charts need over time (who published which stream when, events per second, the
//! injected actions, table scans of ownership).

mod charts;
mod html;
mod junit;
mod markdown;
mod progress;
mod tables;
mod view;

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::history::{self, Record};
use crate::report_json::Report;

pub use html::{escape as html_escape, STYLE as HTML_STYLE};
pub use junit::suite as junit_suite;
pub use markdown::verdict_line;
pub use progress::{phase_label, Counters, LogWriter, Progress, PLAIN_INTERVAL};
pub use tables::{Cell, Table};
pub use view::{RunView, MAX_TIMELINE_ROWS};

/// The history file in a run directory.
pub const HISTORY_FILE: &str = "history.jsonl";
/// The report document in a run directory.
pub const REPORT_FILE: &str = "report.json";
/// The rendered files.
pub const MARKDOWN_FILE: &str = "report.md";
pub const HTML_FILE: &str = "report.html";
pub const JUNIT_FILE: &str = "junit.xml";

/// The three rendered documents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub markdown: String,
    pub html: String,
    pub junit: String,
}

/// Where [`render_all`] wrote them, and the verdict they show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub markdown: PathBuf,
    pub html: PathBuf,
    pub junit: PathBuf,
    /// `passed` of the report.json they were rendered from.
    pub passed: bool,
}

/// Writes `report.json` into `dir`, then renders report.md, report.html and junit.xml from it
/// and the history.
pub fn write_reports(dir: &Path, report: &Report) -> anyhow::Result<()> {
    report.write(&dir.join(REPORT_FILE))?;
    render_all(dir)?;
    Ok(())
}

/// One table as markdown (a `##` title, intro, rows, note): the rendering `report.md` uses,
/// shared with the bench's files.
pub fn table_markdown(t: &Table) -> String {
    let mut out = String::new();
    markdown::table(&mut out, t);
    out
}

/// One table as an HTML `<section>`: the rendering `report.html` uses, shared with the bench's.
pub fn table_html(t: &Table) -> String {
    let mut out = String::new();
    html::table(&mut out, t);
    out
}

/// Renders the three documents from a history's records and its report.
pub fn render(
    records: impl IntoIterator<Item = Record>,
    report: &Report,
) -> anyhow::Result<Rendered> {
    let view = RunView::build(records, report);
    let tables = tables::all(report, &view);
    let charts = html::Charts {
        timeline: charts::timeline(&view)?,
        throughput: charts::throughput(&view)?,
        latency: charts::latency(&view, report)?,
        ownership: charts::ownership(&view)?,
    };
    Ok(Rendered {
        markdown: markdown::render(report, &tables),
        html: html::render(report, &view, &tables, &charts),
        junit: junit::render(report)?,
    })
}

/// Reads `DIR/history.jsonl` and `DIR/report.json` and renders them; an error names the file
/// (and the line of the history).
pub fn render_dir(dir: &Path) -> anyhow::Result<Rendered> {
    render_dir_with(dir, &Report::read(&dir.join(REPORT_FILE))?)
}

fn render_dir_with(dir: &Path, report: &Report) -> anyhow::Result<Rendered> {
    let mut bad_line = None;
    let records = history::read(&dir.join(HISTORY_FILE))?.map_while(|r| match r {
        Ok(record) => Some(record),
        Err(e) => {
            bad_line = Some(e);
            None
        }
    });
    let rendered = render(records, report)?;
    match bad_line {
        Some(e) => Err(e),
        None => Ok(rendered),
    }
}

/// Renders `DIR/report.md`, `DIR/report.html` and `DIR/junit.xml` from the run's
/// `history.jsonl` and `report.json` (what `harness report DIR` and the end of a run call).
pub fn render_all(dir: &Path) -> anyhow::Result<Paths> {
    let report = Report::read(&dir.join(REPORT_FILE))?;
    let rendered = render_dir_with(dir, &report)?;
    let paths = Paths {
        markdown: dir.join(MARKDOWN_FILE),
        html: dir.join(HTML_FILE),
        junit: dir.join(JUNIT_FILE),
        passed: report.passed,
    };
    for (path, text) in [
        (&paths.markdown, &rendered.markdown),
        (&paths.html, &rendered.html),
        (&paths.junit, &rendered.junit),
    ] {
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(paths)
}

/// `harness report DIR`: renders the files again and prints the verdict and where they are.
/// Exit code 0 when the report passed, 1 when it failed, 2 when the files cannot be read.
pub fn command(dir: &Path) -> std::process::ExitCode {
    match render_all(dir) {
        Ok(paths) => {
            let verdict = if paths.passed { "PASSED" } else { "FAILED" };
            println!("{verdict}: {}", dir.display());
            for path in [&paths.markdown, &paths.html, &paths.junit] {
                println!("  wrote {}", path.display());
            }
            std::process::ExitCode::from(if paths.passed { 0 } else { 1 })
        }
        Err(e) => {
            eprintln!("harness report: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
