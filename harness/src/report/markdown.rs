//! `report.md`: GitHub-flavoured markdown for a PR comment or `$GITHUB_STEP_SUMMARY` — the
//! verdict line, then the same tables as the HTML page.

use std::fmt::Write;

use super::tables::{Cell, Table};
use crate::report_json::Report;

/// The one-line verdict shared by every rendering.
pub fn verdict_line(report: &Report) -> String {
    let held = report.expectations.iter().filter(|e| e.passed).count();
    let total = report.expectations.len();
    let mut line = if report.passed {
        format!("PASSED: {held} of {total} expectations held")
    } else {
        format!("FAILED: {held} of {total} expectations held")
    };
    if !report.errors.is_empty() {
        let _ = write!(line, "; the run did not complete");
    }
    line
}

/// What ran, for the line under the verdict: `harness 0.1.0 · worker lease-worker 0.1.0`, or
/// why the worker's version is unknown. `None` for reports written before versions were
/// recorded.
pub fn versions_line(report: &Report) -> Option<String> {
    let v = &report.versions;
    if v.harness.is_empty() {
        return None;
    }
    let worker = match (&v.worker, &v.worker_error) {
        (Some(worker), _) => format!("worker {worker}"),
        (None, Some(error)) => format!("worker version unknown: {error}"),
        (None, None) => "worker version unknown".to_string(),
    };
    let dynamodb = v
        .dynamodb
        .as_ref()
        .map_or(String::new(), |d| format!(" · DynamoDB {d}"));
    Some(format!("harness {} · {worker}{dynamodb}", v.harness))
}

/// Escapes what would break a table cell or start markup: `|`, backslashes, newlines, and a
/// `<` that could open an HTML tag (`<=` stays readable).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push_str("\\\\"),
            '|' => out.push_str("\\|"),
            '\n' => out.push(' '),
            '<' if chars
                .peek()
                .is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, '/' | '!' | '?')) =>
            {
                out.push_str("&lt;")
            }
            c => out.push(c),
        }
    }
    out
}

fn cell(c: &Cell) -> String {
    if c.mark {
        let mark = if c.passed == Some(true) { "✅" } else { "❌" };
        return format!("{mark} {}", escape(&c.text));
    }
    if c.code {
        format!("`{}`", c.text.replace('`', "'").replace('|', "\\|"))
    } else {
        escape(&c.text)
    }
}

/// Renders one table (used for every table of the document, and by the bench).
pub(super) fn table(out: &mut String, t: &Table) {
    let _ = writeln!(out, "## {}\n", escape(&t.title));
    if let Some(intro) = &t.intro {
        let _ = writeln!(out, "{}\n", escape(intro));
    }
    if !t.rows.is_empty() {
        let headers: Vec<String> = t.headers.iter().map(|h| escape(h)).collect();
        let _ = writeln!(out, "| {} |", headers.join(" | "));
        let _ = writeln!(out, "|{}", "---|".repeat(t.headers.len()));
        for row in &t.rows {
            let cells: Vec<String> = row.iter().map(cell).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out.push('\n');
    }
    if let Some(note) = &t.note {
        let _ = writeln!(out, "{}\n", escape(note));
    }
}

/// Renders the whole document.
pub fn render(report: &Report, tables: &[Table]) -> String {
    let mut out = String::new();
    let mark = if report.passed { "✅" } else { "❌" };
    let _ = writeln!(
        out,
        "# {mark} {}: {}\n",
        escape(&report.scenario),
        verdict_line(report)
    );
    if let Some(versions) = versions_line(report) {
        let _ = writeln!(out, "<sub>{}</sub>\n", escape(&versions));
    }
    if !report.description.is_empty() {
        let _ = writeln!(out, "> {}\n", escape(&report.description));
    }
    for error in &report.errors {
        let _ = writeln!(out, "**Error:** {}\n", escape(error));
    }
    for t in tables {
        table(&mut out, t);
    }
    let _ = writeln!(
        out,
        "_Charts: `report.html` beside this file. Rendered from `history.jsonl` + `report.json`; \
         `harness report DIR` renders it again._"
    );
    out
}
