//! `report.html`: one self-contained page (inline CSS, inline SVG charts, one small inline script
//! and nothing fetched) with the verdict, the four charts and the same tables as `report.md`.
//!
//! The script only checks the page: per chart it counts the shapes drawn (`data-drawn`), the
//! data marks among them — shapes in the chart's data colours, listed in `data-colors` — and
//! their vertices (`data-marks`, `data-mark-points`), measures the drawing (`data-box`) and, for
//! the timeline, the stream rows labelled (`data-rows-drawn`). The headless-browser test reads
//! these; a person sees a warning if a chart came out empty.

use std::fmt::Write;

use super::charts::{hex, owner_hex, ACCEPTED, DUPLICATE, FENCED};
use super::markdown::{verdict_line, versions_line};
use super::tables::{Cell, Table};
use super::view::{OwnershipSource, RunView, MAX_TIMELINE_ROWS};
use crate::report_json::Report;

/// The rendered charts, one SVG document each.
pub struct Charts {
    pub timeline: String,
    pub throughput: String,
    pub latency: String,
    pub ownership: String,
}

/// Escapes text for HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

pub const STYLE: &str = r#"
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1160px; padding: 16px 24px 48px; color: #1b1b1b; }
h1 { font-size: 1.6rem; margin: 8px 0; }
h2 { font-size: 1.2rem; margin-top: 32px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.verdict { display: inline-block; padding: 2px 10px; border-radius: 4px; color: #fff; font-weight: 600; }
.verdict.pass { background: #1a7f37; } .verdict.fail { background: #cf222e; }
.description { color: #444; margin: 4px 0 12px; }
.versions { color: #555; font-size: 0.85rem; margin: -8px 0 12px; }
details.scenario { margin: 8px 0 12px; }
details.scenario summary { cursor: pointer; font-size: 0.9rem; }
details.scenario pre { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 4px; padding: 8px 12px; overflow-x: auto; font-size: 0.85rem; }
.error { background: #ffebe9; border: 1px solid #cf222e; padding: 8px 12px; border-radius: 4px; }
#render-warning { background: #fff8c5; border: 1px solid #bf8700; padding: 8px 12px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 0.9rem; }
th, td { border: 1px solid #d0d7de; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.pass { color: #1a7f37; font-weight: 600; } td.fail { color: #cf222e; font-weight: 700; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 0.85em; }
figure { margin: 16px 0 28px; }
figcaption { font-size: 0.9rem; color: #333; margin-bottom: 6px; }
figcaption b { font-size: 1rem; color: #1b1b1b; }
figure svg { max-width: 100%; height: auto; border: 1px solid #eee; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 0.85rem; margin: 4px 0; }
.chip { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 4px; vertical-align: -1px; }
.note, footer { color: #555; font-size: 0.85rem; }
nav a { margin-right: 12px; font-size: 0.9rem; }
"#;

const CHECK_SCRIPT: &str = r#"
(function () {
  var empty = [];
  document.querySelectorAll('figure[data-chart]').forEach(function (figure) {
    var svg = figure.querySelector('svg');
    var drawn = svg ? svg.querySelectorAll('rect,line,polyline,path,circle,polygon,text').length : 0;
    var box = svg ? svg.getBBox() : { width: 0, height: 0 };
    figure.setAttribute('data-drawn', String(drawn));
    figure.setAttribute('data-box', Math.round(box.width) + 'x' + Math.round(box.height));
    var colors = (figure.getAttribute('data-colors') || '').toUpperCase().split(' ').filter(Boolean);
    var marks = 0, points = 0;
    if (svg) {
      svg.querySelectorAll('*').forEach(function (el) {
        var fill = (el.getAttribute('fill') || '').toUpperCase();
        var stroke = (el.getAttribute('stroke') || '').toUpperCase();
        if (colors.indexOf(fill) < 0 && colors.indexOf(stroke) < 0) { return; }
        marks += 1;
        var p = el.getAttribute('points');
        points += p ? p.trim().split(/\s+/).length : 1;
      });
    }
    figure.setAttribute('data-marks', String(marks));
    figure.setAttribute('data-mark-points', String(points));
    var wanted = (figure.getAttribute('data-streams') || '').split(' ').filter(Boolean);
    if (wanted.length && svg) {
      var labels = {};
      svg.querySelectorAll('text').forEach(function (t) { labels[t.textContent.trim()] = true; });
      figure.setAttribute('data-rows-drawn', String(wanted.filter(function (s) { return labels[s]; }).length));
    }
    if (!svg || drawn === 0 || box.width === 0 || box.height === 0) { empty.push(figure.getAttribute('data-chart')); }
  });
  document.body.setAttribute('data-render-check', empty.length ? 'empty: ' + empty.join(',') : 'ok');
  if (empty.length) {
    var warning = document.getElementById('render-warning');
    warning.textContent = 'These charts did not render: ' + empty.join(', ');
    warning.hidden = false;
  }
})();
"#;

/// Renders one table (used for every table of the document, and by the bench).
pub(super) fn table(out: &mut String, t: &Table) {
    let _ = writeln!(out, "<section id=\"{}\">", t.id);
    let _ = writeln!(out, "<h2>{}</h2>", escape(&t.title));
    if let Some(intro) = &t.intro {
        let _ = writeln!(out, "<p>{}</p>", escape(intro));
    }
    if !t.rows.is_empty() {
        out.push_str("<table>\n<thead><tr>");
        for h in &t.headers {
            let _ = write!(out, "<th>{}</th>", escape(h));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for row in &t.rows {
            out.push_str("<tr>");
            for c in row {
                out.push_str(&cell(c));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody>\n</table>\n");
    }
    if let Some(note) = &t.note {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(note));
    }
    out.push_str("</section>\n");
}

fn cell(c: &Cell) -> String {
    let class = match c.passed {
        Some(true) => " class=\"pass\"",
        Some(false) => " class=\"fail\"",
        None => "",
    };
    if c.mark {
        let mark = if c.passed == Some(true) { "✓" } else { "✗" };
        format!("<td{class}>{mark} {}</td>", escape(&c.text))
    } else if c.code {
        format!("<td{class}><code>{}</code></td>", escape(&c.text))
    } else {
        format!("<td{class}>{}</td>", escape(&c.text))
    }
}

fn owner_legend(view: &RunView) -> String {
    let mut out = String::from("<div class=\"legend\">");
    for (i, owner) in view.owners.iter().enumerate() {
        let _ = write!(
            out,
            "<span><span class=\"chip\" style=\"background:{}\"></span>{}</span>",
            owner_hex(i),
            escape(owner)
        );
    }
    out.push_str("</div>");
    out
}

/// The owners' colours, space-separated, for `data-colors`.
fn owner_colors(view: &RunView) -> String {
    (0..view.owners.len())
        .map(owner_hex)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Renders the whole page.
pub fn render(report: &Report, view: &RunView, tables: &[Table], charts: &Charts) -> String {
    let mut out = String::with_capacity(256 * 1024);
    let (class, word) = if report.passed {
        ("pass", "PASSED")
    } else {
        ("fail", "FAILED")
    };
    let title = format!("{} — {word}", report.scenario);
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>",
        escape(&title)
    );
    let _ = writeln!(
        out,
        "<header>\n<h1>{} <span class=\"verdict {class}\">{word}</span></h1>",
        escape(&report.scenario)
    );
    let _ = writeln!(out, "<p><b>{}</b></p>", escape(&verdict_line(report)));
    if let Some(versions) = versions_line(report) {
        let _ = writeln!(out, "<p class=\"versions\">{}</p>", escape(&versions));
    }
    if !report.description.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"description\">{}</p>",
            escape(&report.description)
        );
    }
    for error in &report.errors {
        let _ = writeln!(
            out,
            "<p class=\"error\"><b>Error:</b> {}</p>",
            escape(error)
        );
    }
    if !report.scenario_text.is_empty() {
        let _ = writeln!(
            out,
            "<details class=\"scenario\" id=\"scenario-text\"><summary>Scenario file, as run \
             (seed {})</summary>\n<pre><code>{}</code></pre>\n</details>",
            report.config.seed,
            escape(&report.scenario_text)
        );
    }
    out.push_str("<p id=\"render-warning\" hidden></p>\n");
    out.push_str("<nav>");
    for (id, name) in [
        ("chart-timeline", "timeline"),
        ("chart-throughput", "events/s"),
        ("chart-latency", "takeover latency"),
        ("chart-ownership", "streams per worker"),
    ] {
        let _ = write!(out, "<a href=\"#{id}\">{name}</a>");
    }
    for t in tables {
        let _ = write!(out, "<a href=\"#{}\">{}</a>", t.id, escape(&t.title));
    }
    out.push_str("</nav>\n</header>\n<main>\n");

    // Expectations and totals first: the verdict's reasons before the pictures.
    let (first, rest) = tables.split_at(tables.len().min(2));
    for t in first {
        table(&mut out, t);
    }

    let shown = view.timeline_rows.len();
    let sampled = if view.stream_count > shown {
        format!(
            " Showing {shown} of {} streams (at most {MAX_TIMELINE_ROWS}): streams taken over, \
             picked from each fault in turn, and streams with fenced writes, plus a few no fault \
             touched for contrast.",
            view.stream_count
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "<h2>Charts</h2>\n<figure id=\"chart-timeline\" data-chart=\"timeline\" data-rows=\"{shown}\" \
         data-colors=\"{}\" data-streams=\"{}\">\n<figcaption><b>Timeline per stream.</b> Each row is a stream, \
         coloured by the owner whose writes the sink received; the thin strip under it, the owner \
         whose lease the table held valid (grant to release, successor or expiry); a black tick \
         marks a new fence token, a red cross a write the sink rejected as stale, red lines the injected actions, \
         orange shading each fault until the last takeover it caused (a pause until its resume).{}\
         </figcaption>\n{}\n{}\n</figure>",
        owner_colors(view),
        escape(&view.timeline_rows.join(" ")),
        escape(&sampled),
        owner_legend(view),
        charts.timeline
    );
    let _ = writeln!(
        out,
        "<figure id=\"chart-throughput\" data-chart=\"throughput\" data-colors=\"{} {} {}\">\n<figcaption><b>Accepted events \
         per second.</b> The dip after a fault is the takeover; the bump after it, the replay \
         from the checkpoint.</figcaption>\n{}\n</figure>",
        hex(ACCEPTED),
        hex(DUPLICATE),
        hex(FENCED),
        charts.throughput
    );
    let _ = writeln!(
        out,
        "<figure id=\"chart-latency\" data-chart=\"takeover-latency\" data-points=\"{}\" \
         data-colors=\"{}\">\n\
         <figcaption><b>Takeover latency (CDF).</b> From the fault's injection to the first event \
         accepted under the new fence, against its floor: the lease the fault left plus the skew \
         margin (0 for a graceful handoff). The gap between the curves is what the fleet added.\
         </figcaption>\n{}\n</figure>",
        view.latencies.len(),
        hex(ACCEPTED),
        charts.latency
    );
    let source = match view.ownership_source {
        OwnershipSource::Table => "from scans of the lease table",
        OwnershipSource::Receipts => "derived from the sink's receipts (no table scans recorded)",
    };
    let _ = writeln!(
        out,
        "<figure id=\"chart-ownership\" data-chart=\"ownership\" data-series=\"{}\" \
         data-colors=\"{}\">\n\
         <figcaption><b>Streams owned per worker</b>, {source}; dashed grey: streams with no \
         live owner.</figcaption>\n{}\n{}\n</figure>",
        view.owners.len(),
        owner_colors(view),
        owner_legend(view),
        charts.ownership
    );

    for t in rest {
        table(&mut out, t);
    }
    out.push_str(
        "</main>\n<footer><p>Rendered from <code>history.jsonl</code> and \
         <code>report.json</code>; <code>harness report DIR</code> renders it again.</p></footer>\n",
    );
    let _ = writeln!(out, "<script>{CHECK_SCRIPT}</script>\n</body>\n</html>");
    out
}
