//! `campaign.md` and `campaign.html` from a [`Campaign`]: the report's table model and renderers
//! (so they read like a run's report), and one chart — the takeover-time CDF per fault kind —
//! drawn with the shared chart helpers. Pure: the summary in, text out.

use std::fmt::Write;

use plotters::prelude::*;

use super::summary::{Campaign, RunOutcome};
use crate::chart_kit::{self, DrawResult};
use crate::report::{Cell, Table};
use crate::report_json::Percentiles;

fn pct(p: &Percentiles) -> String {
    if p.count == 0 {
        return "–".into();
    }
    let v = |x: Option<u64>| x.map_or("–".into(), |x| x.to_string());
    format!("{} / {} / {}", v(p.p50), v(p.p99), v(p.max))
}

fn verdict(passed: bool, text: String) -> Cell {
    Cell {
        text,
        code: false,
        passed: Some(passed),
        mark: true,
    }
}

fn code(text: String) -> Cell {
    Cell {
        text,
        code: true,
        passed: None,
        mark: false,
    }
}

/// The campaign's tables, in reading order.
pub fn tables(c: &Campaign) -> Vec<Table> {
    let mut out = Vec::new();
    out.push(Table {
        id: "by-fault",
        title: "Runs per fault kind".into(),
        intro: Some(
            "A run counts under every kind its schedule holds. Injected: the history recorded the action; \
             caused takeovers: the action moved at least one stream. takeover_ms: the takeovers this kind caused; \
             max_stall_ms: the runs holding it. Times in ms: p50 / p99 / max."
                .into(),
        ),
        headers: ["kind", "runs", "violations", "scheduled", "injected", "caused takeovers", "takeover_ms", "max_stall_ms"]
            .map(String::from)
            .to_vec(),
        rows: c
            .by_fault
            .iter()
            .map(|(kind, f)| {
                vec![
                    code(kind.clone()),
                    f.runs.to_string().into(),
                    verdict(f.violations == 0, f.violations.to_string()),
                    f.scheduled.to_string().into(),
                    f.injected.to_string().into(),
                    f.caused_takeovers.to_string().into(),
                    pct(&f.takeover_ms).into(),
                    pct(&f.max_stall_ms).into(),
                ]
            })
            .collect(),
        note: None,
    });
    out.push(Table {
        id: "failed",
        title: "Violations".into(),
        intro: Some(if c.failed.is_empty() {
            "No run violated a check.".into()
        } else {
            "Each failing run keeps its whole directory; `harness run --replay DIR/runs/NNN --out OUT` runs its schedule again, \
             and its shrunk scenario is the smallest schedule found that still fails."
                .into()
        }),
        headers: ["run", "seed", "reasons", "shrunk scenario", "shrunk faults"].map(String::from).to_vec(),
        rows: c
            .failed
            .iter()
            .map(|f| {
                vec![
                    code(f.dir.clone()),
                    f.seed.to_string().into(),
                    f.reasons.join("; ").into(),
                    f.shrunk_scenario.clone().map_or_else(|| "not shrunk".into(), code),
                    f.shrunk_faults.join("; ").into(),
                ]
            })
            .collect(),
        note: None,
    });
    out.push(Table {
        id: "distributions",
        title: "Over all runs".into(),
        intro: None,
        headers: ["figure", "p50", "p99", "max", "samples"]
            .map(String::from)
            .to_vec(),
        rows: [
            ("takeover_ms (fault-caused takeovers)", &c.takeover_ms),
            ("max_stall_ms (one per run)", &c.max_stall_ms),
            ("run wall time, ms", &c.harness.run_wall_ms),
            (
                "harness overhead per run, ms (wall outside the fault phase)",
                &c.harness.run_overhead_ms,
            ),
            ("harness CPU per run, ms", &c.harness.run_harness_cpu_ms),
        ]
        .into_iter()
        .map(|(name, p)| {
            let v = |x: Option<u64>| x.map_or("–".to_string(), |x| x.to_string());
            vec![
                name.into(),
                v(p.p50).into(),
                v(p.p99).into(),
                v(p.max).into(),
                p.count.to_string().into(),
            ]
        })
        .collect(),
        note: Some(format!(
            "Campaign wall time {:.1} s for {} runs and {} shrink runs; DynamoDB Local started again {} times.",
            c.harness.wall_ms as f64 / 1000.0,
            c.runs,
            c.harness.shrink_runs,
            c.harness.dynamodb_restarts
        )),
    });
    out.push(Table {
        id: "slowest",
        title: "Slowest runs".into(),
        intro: None,
        headers: ["run", "wall s", "faults"].map(String::from).to_vec(),
        rows: c
            .slowest
            .iter()
            .map(|s| {
                vec![
                    code(format!("runs/{:03}", s.run)),
                    format!("{:.1}", s.wall_ms as f64 / 1000.0).into(),
                    s.faults.join(", ").into(),
                ]
            })
            .collect(),
        note: None,
    });
    out
}

fn headline(c: &Campaign) -> String {
    format!(
        "{} of {} runs violated (seed {}){}",
        c.violations,
        c.runs,
        c.seed,
        if c.interrupted {
            format!(
                ", interrupted after {} of {} runs",
                c.runs, c.runs_requested
            )
        } else {
            String::new()
        }
    )
}

/// `campaign.md`.
pub fn markdown(c: &Campaign) -> String {
    let mut out = String::new();
    let mark = if c.violations == 0 { "✅" } else { "❌" };
    let _ = writeln!(out, "# {mark} campaign: {}\n", headline(c));
    let _ = writeln!(out, "`{}`\n", c.command);
    for t in tables(c) {
        out.push_str(&crate::report::table_markdown(&t));
    }
    let _ = writeln!(
        out,
        "_Charts: `campaign.html` beside this file; every run's files under `runs/`._"
    );
    out
}

/// `campaign.html`: self-contained, the tables and the takeover CDF per fault kind.
pub fn html(c: &Campaign) -> anyhow::Result<String> {
    let esc = crate::report::html_escape;
    let mut out = String::new();
    let pass = c.violations == 0;
    let _ = writeln!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>campaign seed {}</title><style>{}</style></head><body>",
        c.seed,
        crate::report::HTML_STYLE
    );
    let _ = writeln!(
        out,
        "<h1><span class=\"verdict {}\">{}</span> campaign: {}</h1>\n<p class=\"description\"><code>{}</code></p>",
        if pass { "pass" } else { "fail" },
        if pass { "PASSED" } else { "FAILED" },
        esc(&headline(c)),
        esc(&c.command)
    );
    let chart = takeover_cdf(&c.run_results)?;
    let _ = writeln!(
        out,
        "<figure data-chart=\"takeover-cdf\"><figcaption><b>Takeover time by fault kind</b> — share of the takeovers a kind caused (y) done within x ms, over every run.</figcaption>{chart}</figure>"
    );
    for t in tables(c) {
        out.push_str(&crate::report::table_html(&t));
    }
    out.push_str("</body></html>\n");
    Ok(out)
}

/// One CDF line per fault kind over the takeover times of the runs that hold it.
fn takeover_cdf(runs: &[RunOutcome]) -> anyhow::Result<String> {
    let mut by_kind: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for r in runs {
        for (k, samples) in &r.takeover_ms_by_kind {
            by_kind.entry(k).or_default().extend(samples);
        }
    }
    by_kind.retain(|_, v| !v.is_empty());
    let max = by_kind
        .values()
        .flatten()
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.05;
    chart_kit::svg(860, 320, |root| -> DrawResult {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..max, 0f64..1.0)?;
        chart_kit::mesh(&mut chart)
            .x_desc("takeover_ms")
            .y_desc("share of takeovers")
            .draw()?;
        for (i, (kind, samples)) in by_kind.iter().enumerate() {
            let mut s = samples.clone();
            s.sort_unstable();
            let n = s.len() as f64;
            let color = chart_kit::palette(i);
            let points = s
                .iter()
                .enumerate()
                .map(|(j, v)| (*v as f64, (j + 1) as f64 / n));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(format!("{kind} ({} takeovers)", s.len()))
                .legend(chart_kit::swatch(color.stroke_width(2)));
        }
        if !by_kind.is_empty() {
            chart_kit::legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        }
        Ok(())
    })
}
