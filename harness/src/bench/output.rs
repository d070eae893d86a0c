//! The bench's files: `bench.json` (design §8 keys), `bench.md`, a self-contained `bench.html`
//! (inline SVG drawn with plotters) and `samples.csv`; and the table printed to stdout.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use super::stats::{Dist, Kind};
use super::takeover::{TakeoverBench, MODES};
use crate::chart_kit::{legend, mesh, palette, svg, swatch, FONT};
use crate::report::{html_escape, table_html, table_markdown, Cell, Table};

/// Chart width in pixels.
const WIDTH: u32 = 1000;

/// Writes `value` under `key` into `DIR/bench.json`, keeping the other top-level keys of an
/// existing file (so `takeover` and `throughput` can share one directory).
pub fn merge_json(
    dir: &Path,
    entries: serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<()> {
    let path = dir.join("bench.json");
    let mut doc = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    doc.extend(entries);
    // Written aside and renamed over, so an interruption never leaves half a file.
    let tmp = dir.join("bench.json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&doc)? + "\n")?;
    std::fs::rename(&tmp, &path)?;
    Ok(())
}

fn ms(v: Option<u64>) -> String {
    v.map_or("–".into(), |v| v.to_string())
}

/// `p50 / p99 / max` of a distribution, `–` where there is none.
pub(super) fn dist(d: &Dist) -> String {
    format!("{} / {} / {}", ms(d.p50), ms(d.p99), ms(d.max))
}

pub(super) fn headers(names: &[&str]) -> Vec<String> {
    names.iter().map(|h| h.to_string()).collect()
}

/// The start of a bench's self-contained HTML page: head, style, title and the command line.
pub(super) fn html_start(title: &str, command: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title><style>body{{font-family:sans-serif;max-width:1040px;margin:2em auto}}table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}svg{{max-width:100%;height:auto}}</style></head><body><h1>{title}</h1><p><code>{}</code></p>",
        html_escape(command)
    )
}

/// A table of the bench in the report's model, so markdown and HTML come from one renderer.
fn table(id: &'static str, title: &str, headers: Vec<String>, rows: Vec<Vec<Cell>>) -> Table {
    Table {
        id,
        title: title.to_string(),
        intro: None,
        headers,
        rows,
        note: None,
    }
}

/// The takeover table, also printed.
pub fn takeover_table(bench: &TakeoverBench) -> Table {
    let rows = bench
        .takeover
        .iter()
        .map(|r| {
            vec![
                r.lease_ms.to_string().into(),
                r.renew_ms.to_string().into(),
                r.mode.clone().into(),
                r.kind.name().into(),
                r.samples.to_string().into(),
                dist(&r.takeover_ms).into(),
                dist(&r.overhead_ms).into(),
                format!(
                    "{} / {}",
                    ms(r.to_acquired_ms.p50),
                    ms(r.to_acquired_ms.p99)
                )
                .into(),
                format!(
                    "{} / {}",
                    ms(r.acquired_to_accepted_ms.p50),
                    ms(r.acquired_to_accepted_ms.p99)
                )
                .into(),
                r.conflicts_per_takeover
                    .map_or("–".to_string(), |c| format!("{c:.2}"))
                    .into(),
            ]
        })
        .collect();
    let headers = headers(&[
        "lease ms",
        "renew ms",
        "mode",
        "kind",
        "samples",
        "takeover p50 / p99 / max ms",
        "overhead p50 / p99 / max ms",
        "fault→acquired p50 / p99 ms",
        "acquired→accepted p50 / p99 ms",
        "conflicts per takeover",
    ]);
    table("takeover", "Takeover", headers, rows)
}

/// Where the time goes: p50 / p99 of each phase, per lease, mode and kind.
pub fn phase_table(bench: &TakeoverBench) -> Table {
    let pair = |d: &Dist| match (d.p50, d.p99) {
        (Some(a), Some(b)) => format!("{a} / {b}"),
        _ => "–".to_string(),
    };
    let rows = bench
        .takeover
        .iter()
        .map(|r| {
            let detect = match (r.detect_ms.p50, r.detect_ms.p99, r.detect_ms.min) {
                (Some(a), Some(b), Some(lo)) if lo < 0 => format!("{a} / {b} (min {lo})"),
                _ => pair(&r.detect_ms),
            };
            vec![
                r.lease_ms.to_string().into(),
                r.mode.clone().into(),
                r.kind.name().into(),
                detect.into(),
                pair(&r.acquire_ms).into(),
                pair(&r.connect_ms).into(),
                pair(&r.replay_ms).into(),
                pair(&r.first_accept_ms).into(),
            ]
        })
        .collect();
    let headers = headers(&[
        "lease ms",
        "mode",
        "kind",
        "detection beyond the floor",
        "acquire round trip",
        "connect",
        "socket → first frame",
        "first frame → accepted",
    ]);
    let mut t = table(
        "phases",
        "Where the time goes (p50 / p99 ms)",
        headers,
        rows,
    );
    t.intro = Some("From each new owner's `first batch accepted` log line. Detection: from the fault to the acquire request, less the floor (crash: how late after the lease and skew ran out the new owner asked; negative = it asked before the floor estimate, a lease renewed after the table read at the kill; handoff: the old owner's flush and release plus the fleet signal's notice).".to_string());
    t
}

/// The cost table.
pub fn cost_table(bench: &TakeoverBench) -> Table {
    let rows = bench
        .cost
        .iter()
        .map(|c| {
            let ops: Vec<String> = c
                .by_op
                .iter()
                .filter(|(_, v)| **v > 0.0)
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect();
            vec![
                c.lease_ms.to_string().into(),
                c.renew_ms.to_string().into(),
                format!("{:.0}", c.requests_per_stream_hour_measured).into(),
                format!("{:.0}", c.requests_per_stream_hour_measured_poll).into(),
                format!("{:.0}", c.requests_per_stream_hour_formula).into(),
                ops.join(", ").into(),
            ]
        })
        .collect();
    let headers = headers(&[
        "lease ms",
        "renew ms",
        "measured req/stream/h (expiry-aware)",
        "measured (poll)",
        "formula 3600/renew + checkpoints",
        "by op (expiry-aware)",
    ]);
    table("cost", "DynamoDB cost", headers, rows)
}

/// Writes bench.json, bench.md, bench.html and samples.csv into `dir`.
pub fn write_takeover(dir: &Path, bench: &TakeoverBench, command: &str) -> anyhow::Result<()> {
    let mut entries = serde_json::Map::new();
    entries.insert(
        "takeover_config".into(),
        serde_json::to_value(&bench.config)?,
    );
    entries.insert("takeover".into(), serde_json::to_value(&bench.takeover)?);
    entries.insert("cost".into(), serde_json::to_value(&bench.cost)?);
    entries.insert(
        "takeover_errors".into(),
        serde_json::to_value(&bench.errors)?,
    );
    entries.insert("takeover_interrupted".into(), bench.interrupted.into());
    merge_json(dir, entries)?;

    let mut csv =
        String::from("lease_ms,mode,kind,stream_id,takeover_ms,floor_ms,overhead_ms,acquired_ms\n");
    for (lease, mode, s) in &bench.samples {
        let _ = writeln!(
            csv,
            "{lease},{mode},{},{},{},{},{},{}",
            s.kind.name(),
            s.stream_id,
            s.takeover_ms,
            s.floor_ms,
            s.overhead_ms(),
            s.acquired_ms.map_or(String::new(), |a| a.to_string())
        );
    }
    std::fs::write(dir.join("samples.csv"), csv)?;

    let c = &bench.config.sweep;
    let mut md = String::new();
    let _ = writeln!(md, "# harness bench takeover\n");
    let _ = writeln!(md, "`{command}`\n");
    if bench.interrupted {
        let _ = writeln!(
            md,
            "**Interrupted by a signal**: only what was measured before it is here.\n"
        );
    }
    let _ = writeln!(
        md,
        "{} streams at {} events/s each over {} workers per lab; {} crash takeovers (SIGKILL of a random owner) and {} graceful handoffs (SIGTERM) per lease and mode, the two modes side by side; skew margin {} ms; discovery scan {}; seed {}.\n",
        c.streams,
        c.rate,
        c.workers,
        c.runs,
        c.runs,
        c.skew_margin_ms,
        c.scan_seconds
            .map_or("every renew interval (the worker's default)".to_string(), |s| format!("every {s} s")),
        c.seed
    );
    let _ = writeln!(md, "overhead = takeover_ms − floor (crash: lease remaining at the kill + skew margin; handoff: 0). fault→acquired: from the signal to the new owner's `stream acquired` log line (detection + acquire round trip); acquired→accepted: upstream connect + replay + first accepted batch.\n");
    for table in [takeover_table(bench), phase_table(bench), cost_table(bench)] {
        md.push_str(&table_markdown(&table));
    }
    if !bench.errors.is_empty() {
        let _ = writeln!(md, "\n## Problems\n");
        for e in &bench.errors {
            let _ = writeln!(md, "- {e}");
        }
    }
    std::fs::write(dir.join("bench.md"), &md)?;

    let mut html = html_start("harness bench takeover", command);
    if bench.interrupted {
        html.push_str("<p><strong>Interrupted by a signal</strong>: only what was measured before it is here.</p>");
    }
    html.push_str(&table_html(&takeover_table(bench)));
    html.push_str(&table_html(&phase_table(bench)));
    html.push_str("<h2>Overhead above the floor, crash takeovers</h2>");
    html.push_str(&overhead_cdf(bench, Kind::Crash)?);
    html.push_str("<h2>Graceful handoff (floor 0)</h2>");
    html.push_str(&overhead_cdf(bench, Kind::Handoff)?);
    html.push_str("<h2>Cost against takeover time</h2><p>Each point is one lease setting: DynamoDB requests per stream per hour (measured) against the p99 crash takeover.</p>");
    html.push_str(&tradeoff(bench)?);
    html.push_str(&table_html(&cost_table(bench)));
    html.push_str("</body></html>\n");
    std::fs::write(dir.join("bench.html"), html)?;
    Ok(())
}

/// CDF of overhead_ms (log x axis), one line per (lease, mode): colour = lease, dashed = poll.
fn overhead_cdf(bench: &TakeoverBench, kind: Kind) -> anyhow::Result<String> {
    let leases = &bench.config.sweep.leases_ms;
    let series: Vec<(usize, &str, Vec<f64>)> = leases
        .iter()
        .enumerate()
        .flat_map(|(li, lease)| {
            MODES.iter().map(move |mode| {
                let mut v: Vec<f64> = bench
                    .samples
                    .iter()
                    .filter(|(l, m, s)| l == lease && m == mode && s.kind == kind)
                    .map(|(_, _, s)| (s.overhead_ms().max(1)) as f64)
                    .collect();
                v.sort_by(f64::total_cmp);
                (li, *mode, v)
            })
        })
        .collect();
    let x_max = series
        .iter()
        .flat_map(|(_, _, v)| v.last())
        .fold(10.0f64, |a, b| a.max(*b))
        * 1.5;
    svg(WIDTH, 360, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d((1f64..x_max).log_scale(), 0f64..1.02)?;
        mesh(&mut chart)
            .x_desc("overhead above the floor, ms (log)")
            .y_desc("fraction of samples")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.1}"))
            .draw()?;
        for (li, mode, v) in &series {
            if v.is_empty() {
                continue;
            }
            let color = palette(*li);
            let n = v.len() as f64;
            let points: Vec<(f64, f64)> = v
                .iter()
                .enumerate()
                .map(|(i, x)| (*x, (i + 1) as f64 / n))
                .collect();
            let label = format!("lease {} ms, {mode}", leases[*li]);
            let style = color.stroke_width(2);
            if *mode == "poll" {
                chart
                    .draw_series(DashedLineSeries::new(points, 6, 4, style))?
                    .label(label)
                    .legend(swatch(style));
            } else {
                chart
                    .draw_series(LineSeries::new(points, style))?
                    .label(label)
                    .legend(swatch(style));
            }
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    })
}

/// Requests per stream hour (x, log) against p99 crash takeover (y, log), one line per mode.
fn tradeoff(bench: &TakeoverBench) -> anyhow::Result<String> {
    // Per mode: (requests per stream hour, p99 ms, lease ms) for each lease.
    type Points = Vec<(f64, f64, u64)>;
    let mut lines: Vec<(&str, Points)> = Vec::new();
    for mode in MODES {
        let mut points = Vec::new();
        for cost in &bench.cost {
            let row = bench
                .takeover
                .iter()
                .find(|r| r.lease_ms == cost.lease_ms && r.mode == mode && r.kind == Kind::Crash);
            let measured = if mode == "poll" {
                cost.requests_per_stream_hour_measured_poll
            } else {
                cost.requests_per_stream_hour_measured
            };
            if let Some(p99) = row.and_then(|r| r.takeover_ms.p99) {
                points.push((measured.max(1.0), p99.max(1) as f64, cost.lease_ms));
            }
        }
        lines.push((mode, points));
    }
    let all: Vec<&(f64, f64, u64)> = lines.iter().flat_map(|(_, p)| p).collect();
    let x_max = all.iter().map(|p| p.0).fold(10.0f64, f64::max) * 2.0;
    let x_min = all
        .iter()
        .map(|p| p.0)
        .fold(f64::MAX, f64::min)
        .min(x_max / 4.0)
        / 2.0;
    let y_max = all.iter().map(|p| p.1).fold(10.0f64, f64::max) * 2.0;
    let y_min = all
        .iter()
        .map(|p| p.1)
        .fold(f64::MAX, f64::min)
        .min(y_max / 4.0)
        / 2.0;
    svg(WIDTH, 380, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(
                (x_min.max(0.5)..x_max).log_scale(),
                (y_min.max(0.5)..y_max).log_scale(),
            )?;
        mesh(&mut chart)
            .x_desc("DynamoDB requests per stream per hour (measured, log)")
            .y_desc("crash takeover p99, ms (log)")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()?;
        for (i, (mode, points)) in lines.iter().enumerate() {
            let color = palette(i);
            let style = color.stroke_width(2);
            chart
                .draw_series(LineSeries::new(points.iter().map(|p| (p.0, p.1)), style))?
                .label(*mode)
                .legend(swatch(style));
            chart.draw_series(points.iter().map(|p| {
                EmptyElement::at((p.0, p.1))
                    + Circle::new((0, 0), 4, color.filled())
                    + Text::new(
                        format!("lease {} s", p.2 as f64 / 1000.0),
                        (6, -14),
                        (FONT, 11),
                    )
            }))?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stats::{row, Sample};
    use crate::bench::takeover::{CostRow, Sweep, TakeoverConfig};

    /// Two leases × both modes × both kinds, with overheads spread over two decades.
    fn bench() -> TakeoverBench {
        let leases_ms = vec![3_000, 5_000];
        let mut samples = Vec::new();
        let mut takeover = Vec::new();
        let mut cost = Vec::new();
        for &lease in &leases_ms {
            for mode in MODES {
                let mine: Vec<Sample> = (0..6u64)
                    .map(|i| Sample {
                        kind: if i % 2 == 0 {
                            Kind::Crash
                        } else {
                            Kind::Handoff
                        },
                        stream_id: format!("s-{i:04}"),
                        to_owner: "worker-2".into(),
                        to_fence: 2,
                        fault_t_ms: 1_000 * i,
                        takeover_ms: lease / 2 + 40 * i * i + if mode == "poll" { 700 } else { 0 },
                        floor_ms: if i % 2 == 0 { lease / 2 } else { 0 },
                        acquired_ms: Some(lease / 2 + 10 * i),
                        phases: Some(super::super::stats::Phases {
                            detect: 5 * i as i64 - 10,
                            acquire: 8,
                            connect: 2,
                            replay: 1,
                            first_accept: 6 + i,
                        }),
                    })
                    .collect();
                for kind in [Kind::Crash, Kind::Handoff] {
                    takeover.push(row(lease, lease / 3, mode, kind, &mine, 3, 0));
                }
                samples.extend(mine.into_iter().map(|s| (lease, mode.to_string(), s)));
            }
            cost.push(CostRow {
                lease_ms: lease,
                renew_ms: lease / 3,
                requests_per_stream_hour_measured: 3_600_000.0 / (lease / 3) as f64,
                requests_per_stream_hour_formula: 3_600_000.0 / (lease / 3) as f64,
                requests_per_stream_hour_measured_poll: 2.0 * 3_600_000.0 / (lease / 3) as f64,
                by_op: [("renew".to_string(), 1_000.0), ("scan".to_string(), 0.0)]
                    .into_iter()
                    .collect(),
                window_ms: 6_000,
                streams: 60,
                workers: 3,
            });
        }
        TakeoverBench {
            config: TakeoverConfig {
                sweep: Sweep {
                    runs: 3,
                    leases_ms,
                    renew_ratio: 3.0,
                    streams: 60,
                    workers: 3,
                    rate: 10.0,
                    seed: 1,
                    skew_margin_ms: 200,
                    scan_seconds: None,
                },
                worker_bin: "lease-worker".into(),
            },
            takeover,
            cost,
            errors: vec!["lease 1000 ms: <too short>".into()],
            violations: Vec::new(),
            interrupted: false,
            samples,
        }
    }

    #[test]
    fn writes_the_takeover_files_with_three_charts() {
        let dir = tempfile::tempdir().unwrap();
        write_takeover(dir.path(), &bench(), "harness bench takeover --quick").unwrap();
        let html = std::fs::read_to_string(dir.path().join("bench.html")).unwrap();
        assert_eq!(
            html.matches("<svg").count(),
            3,
            "two CDFs and the trade-off"
        );
        for label in [
            "lease 3000 ms, poll",
            "lease 5000 ms, expiry-aware",
            "lease 5 s",
        ] {
            assert!(html.contains(label), "{label} is drawn");
        }
        // The tables come from the report's renderer: the same model in both files.
        for id in ["takeover", "phases", "cost"] {
            assert!(html.contains(&format!("<section id=\"{id}\">")), "{id}");
        }
        let md = std::fs::read_to_string(dir.path().join("bench.md")).unwrap();
        assert!(md.contains("## Problems\n\n- lease 1000 ms: <too short>"));
        assert!(
            md.contains("## Takeover\n\n| lease ms | renew ms | mode |"),
            "{md}"
        );
        assert!(md.contains("## Where the time goes"));
        assert!(
            md.contains("| 8 / 8 | 2 / 2 | 1 / 1 |"),
            "acquire, connect and first-frame phases: {md}"
        );
        assert!(
            md.contains("(min -10)"),
            "a detection before the floor shows"
        );
        let csv = std::fs::read_to_string(dir.path().join("samples.csv")).unwrap();
        assert_eq!(csv.lines().count(), 1 + 24);
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("bench.json")).unwrap())
                .unwrap();
        assert_eq!(json["takeover"].as_array().map(Vec::len), Some(8));
        let config = json["takeover_config"].as_object().unwrap();
        let mut keys: Vec<&str> = config.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "leases_ms",
                "rate",
                "renew_ratio",
                "runs",
                "scan_seconds",
                "seed",
                "skew_margin_ms",
                "streams",
                "worker_bin",
                "workers"
            ],
            "design §8's flat takeover_config"
        );
    }
}
