//! The four charts of `report.html`, drawn with plotters' SVG backend into strings that the page
//! inlines: the per-stream ownership timeline, accepted events per second, the takeover latency
//! CDF against its floor, and streams owned per worker. Pure functions of the [`RunView`].

use plotters::chart::MeshStyle;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::view::{OwnershipSource, RunView};
use crate::chart_kit::{self, legend, palette, swatch, DrawResult, FONT};
use crate::report_json::Report;

pub use crate::chart_kit::hex;

/// Chart width in pixels; the page scales them down on narrow screens.
const WIDTH: u32 = 1100;
/// Height of one timeline row.
const ROW_PX: u32 = 14;
/// The x axis of the charts over the run's time.
const RUN_SECONDS: &str = "seconds since the run started";

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

const FAULT_RED: RGBColor = RGBColor(200, 30, 30);
/// Data colours of the events-per-second chart (also listed on the figure for the page check).
pub const ACCEPTED: RGBColor = RGBColor(31, 119, 180);
pub const DUPLICATE: RGBColor = RGBColor(255, 127, 14);
pub const FENCED: RGBColor = RGBColor(204, 0, 102);
const PERIOD_FILL: RGBColor = RGBColor(255, 170, 60);
const LIGHT_GRID: RGBColor = RGBColor(236, 236, 236);

/// The colour of owner number `index`.
pub fn owner_color(index: usize) -> RGBColor {
    palette(index)
}

/// `#rrggbb` of owner number `index`, for the HTML legend.
pub fn owner_hex(index: usize) -> String {
    hex(owner_color(index))
}

/// Axis labels: whole numbers without a decimal point, others with one.
fn tick(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Fractions on the CDF's axis.
fn fraction(v: &f64) -> String {
    format!("{v:.1}")
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

fn text_style(size: u32, pos: Pos) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).pos(pos)
}

fn render(
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> DrawResult,
) -> anyhow::Result<String> {
    chart_kit::svg(WIDTH, height, draw)
}

/// The frame of every report chart: margins, label areas and axes from 0 to `x_max`, `y_max`.
fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    margin_top: u32,
    x_max: f64,
    y_max: f64,
) -> DrawResult<Chart<'a, 'b>> {
    Ok(ChartBuilder::on(root)
        .margin(10)
        .margin_top(margin_top)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?)
}

/// The light grid with tick labels; the caller describes the axes and draws it.
fn grid<'a, 'b, 'c>(
    chart: &'c mut Chart<'a, 'b>,
) -> MeshStyle<'a, 'c, RangedCoordf64, RangedCoordf64, SVGBackend<'b>> {
    let mut style = chart_kit::mesh(chart);
    style
        .light_line_style(LIGHT_GRID)
        .max_light_lines(2)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick);
    style
}

/// Markers closer than this many pixels share one label.
const LABEL_GROUP_PX: i32 = 90;

/// The label of markers drawn at nearly the same place: `kill worker-2` for one,
/// `start ×3, terminate ×3` for several.
fn group_label(group: &[&super::view::Marker]) -> String {
    if let [one] = group {
        return format!("{} {}", one.action, one.target);
    }
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for m in group {
        match counts.iter_mut().find(|(a, _)| *a == m.action) {
            Some((_, n)) => *n += 1,
            None => counts.push((&m.action, 1)),
        }
    }
    counts
        .iter()
        .map(|(action, n)| {
            if *n == 1 {
                action.to_string()
            } else {
                format!("{action} ×{n}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Shades the fault periods (overlapping ones merged) and draws a vertical line at every
/// injected action, labelled; actions at nearly the same instant share a label, and labels that
/// would still overlap are stacked on a second line.
fn draw_faults(chart: &mut Chart, view: &RunView, y_top: f64) -> DrawResult {
    let area = chart.plotting_area().clone();
    let mut periods: Vec<(u64, u64)> = view
        .periods
        .iter()
        .map(|p| (p.start_ms, p.end_ms))
        .collect();
    periods.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (start, end) in periods {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    for (start, end) in merged {
        area.draw(&Rectangle::new(
            [(seconds(start), 0.0), (seconds(end), y_top)],
            PERIOD_FILL.mix(0.18).filled(),
        ))?;
    }
    draw_link_bands(&area, view, y_top)?;
    let mut groups: Vec<(i32, Vec<&super::view::Marker>)> = Vec::new();
    // A heal is the end of a band, not an injection: no line of its own.
    for m in view.markers.iter().filter(|m| m.action != "heal") {
        let x = seconds(m.t_ms);
        area.draw(&PathElement::new(
            vec![(x, 0.0), (x, y_top)],
            FAULT_RED.stroke_width(1),
        ))?;
        let (px, _) = chart.backend_coord(&(x, y_top));
        match groups.last_mut() {
            Some((first_px, group)) if px - *first_px < LABEL_GROUP_PX => group.push(m),
            _ => groups.push((px, vec![m])),
        }
    }
    let mut last_label_px = [i32::MIN; 2];
    for (px, group) in groups {
        let label = group_label(&group);
        let width = (label.chars().count() * 6) as i32;
        let Some(level) = (0..2).find(|&l| px > last_label_px[l]) else {
            continue; // a third label in the same place would be unreadable
        };
        last_label_px[level] = px + width;
        let label_style = text_style(11, Pos::new(HPos::Left, VPos::Bottom)).color(&FAULT_RED);
        let element = EmptyElement::at((seconds(group[0].t_ms), y_top))
            + Text::new(label, (2, -3 - 12 * level as i32), label_style);
        area.draw(&element)?;
    }
    Ok(())
}

/// Colour of each link's fault band.
const LINK_COLOURS: [(&str, RGBColor); 3] = [
    ("dynamodb", RGBColor(230, 120, 0)),
    ("upstream", RGBColor(40, 110, 200)),
    ("sink", RGBColor(140, 60, 170)),
];

/// Fault periods per link: one thin band per link along the top of the chart (dynamodb, then
/// upstream, then sink), labelled with the fault and its target.
fn draw_link_bands(
    area: &DrawingArea<SVGBackend<'_>, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    view: &RunView,
    y_top: f64,
) -> DrawResult {
    let band = (y_top / 30.0).max(0.08);
    for (row, (link, colour)) in LINK_COLOURS.iter().enumerate() {
        let y1 = y_top - band * (row as f64 * 1.3);
        let y0 = y1 - band;
        for p in view
            .periods
            .iter()
            .filter(|p| p.link.as_deref() == Some(*link))
        {
            area.draw(&Rectangle::new(
                [(seconds(p.start_ms), y0), (seconds(p.end_ms), y1)],
                colour.mix(0.75).filled(),
            ))?;
            let style = text_style(10, Pos::new(HPos::Left, VPos::Center)).color(colour);
            area.draw(&Text::new(
                p.label.clone(),
                (seconds(p.end_ms), (y0 + y1) / 2.0),
                style,
            ))?;
        }
    }
    Ok(())
}

/// Chart 1: one row per sampled stream, coloured by the owner publishing it; a black tick where
/// the fence token changed, red crosses at fenced (rejected) writes, faults marked and shaded.
pub fn timeline(view: &RunView) -> anyhow::Result<String> {
    let rows = view.timeline_rows.len().max(1);
    let height = 70 + rows as u32 * ROW_PX + 40;
    let end_s = seconds(view.end_ms);
    render(height, |root| {
        let mut chart = frame(root, 36, end_s, rows as f64)?;
        grid(&mut chart)
            .disable_y_mesh()
            .y_labels(0)
            .x_desc(RUN_SECONDS)
            .draw()?;
        draw_faults(&mut chart, view, rows as f64)?;
        let min_width = end_s / 400.0;
        for (i, id) in view.timeline_rows.iter().enumerate() {
            let y0 = (rows - i - 1) as f64;
            let (lo, hi) = (y0 + 0.2, y0 + 0.84);
            let (px, py) = chart.backend_coord(&(0.0, y0 + 0.5));
            root.draw(&Text::new(
                id.clone(),
                (px - 6, py),
                text_style(11, Pos::new(HPos::Right, VPos::Center)),
            ))?;
            // The table's view under the writes: each owner's valid lease, a thin strip.
            let leases = view.leases.get(id).map(Vec::as_slice).unwrap_or(&[]);
            chart.draw_series(leases.iter().map(|s| {
                let x0 = seconds(s.start_ms);
                let x1 = seconds(s.end_ms).max(x0 + min_width);
                Rectangle::new(
                    [(x0, y0 + 0.04), (x1, y0 + 0.14)],
                    owner_color(view.owner_index(&s.owner)).filled(),
                )
            }))?;
            let segments = view.segments.get(id).map(Vec::as_slice).unwrap_or(&[]);
            chart.draw_series(segments.iter().map(|s| {
                let x0 = seconds(s.start_ms);
                let x1 = seconds(s.end_ms).max(x0 + min_width);
                Rectangle::new(
                    [(x0, lo), (x1, hi)],
                    owner_color(view.owner_index(&s.owner)).filled(),
                )
            }))?;
            chart.draw_series(segments.iter().skip(1).map(|s| {
                let x = seconds(s.start_ms);
                PathElement::new(vec![(x, y0 + 0.02), (x, y0 + 0.98)], BLACK.stroke_width(2))
            }))?;
            if let Some(marks) = view.fenced.get(id) {
                chart.draw_series(
                    marks
                        .iter()
                        .map(|&t| Cross::new((seconds(t), y0 + 0.5), 4, FAULT_RED.stroke_width(2))),
                )?;
            }
        }
        Ok(())
    })
}

/// Chart 2: accepted events per second (and duplicates and fenced writes when there were any),
/// with the faults marked: the dip and the recovery.
pub fn throughput(view: &RunView) -> anyhow::Result<String> {
    let end_s = seconds(view.end_ms);
    let peak = [
        &view.accepted_per_s,
        &view.duplicate_per_s,
        &view.fenced_per_s,
    ]
    .iter()
    .flat_map(|s| s.iter())
    .copied()
    .max()
    .unwrap_or(0)
    .max(1);
    // Headroom above the peak for the legend.
    let y_top = peak as f64 * 1.4;
    render(340, |root| {
        let mut chart = frame(root, 36, end_s, y_top)?;
        grid(&mut chart)
            .x_desc(RUN_SECONDS)
            .y_desc("events / s")
            .draw()?;
        draw_faults(&mut chart, view, y_top)?;
        let series: [(&str, &Vec<u64>, RGBColor); 3] = [
            ("accepted", &view.accepted_per_s, ACCEPTED),
            ("duplicate", &view.duplicate_per_s, DUPLICATE),
            ("fenced (rejected)", &view.fenced_per_s, FENCED),
        ];
        let seconds_with_data = series.iter().map(|s| s.1.len()).max().unwrap_or(0);
        for (name, counts, color) in series {
            if counts.iter().all(|&c| c == 0) {
                continue;
            }
            // Every series spans the whole run: a second without receipts is a zero.
            let points = (0..seconds_with_data).map(|second| {
                let c = counts.get(second).copied().unwrap_or(0);
                (second as f64 + 0.5, c as f64)
            });
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(name)
                .legend(swatch(color.stroke_width(2)));
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })
}

/// Step points of an empirical CDF over sorted `values`.
fn cdf_steps(values: &[u64]) -> Vec<(f64, f64)> {
    let n = values.len() as f64;
    let mut points = Vec::with_capacity(values.len() * 2 + 1);
    points.push((values.first().copied().unwrap_or(0) as f64, 0.0));
    for (i, &v) in values.iter().enumerate() {
        points.push((v as f64, i as f64 / n));
        points.push((v as f64, (i + 1) as f64 / n));
    }
    points
}

/// Chart 3: the CDF of takeover_ms over fault-caused takeovers, beside the CDF of each one's
/// floor (lease remaining at the fault + skew margin; 0 for a graceful handoff), and the lease.
pub fn latency(view: &RunView, report: &Report) -> anyhow::Result<String> {
    let mut takeovers: Vec<u64> = view.latencies.iter().map(|l| l.takeover_ms).collect();
    let mut floors: Vec<u64> = view.latencies.iter().map(|l| l.floor_ms).collect();
    takeovers.sort_unstable();
    floors.sort_unstable();
    let lease = report.config.lease_ms;
    let x_max = takeovers
        .iter()
        .chain(&floors)
        .copied()
        .chain([lease + report.config.skew_margin_ms])
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.1;
    render(340, |root| {
        let mut chart = frame(root, 20, x_max, 1.05)?;
        grid(&mut chart)
            .x_desc("milliseconds from the fault's injection")
            .y_desc("fraction of takeovers")
            .y_label_formatter(&fraction)
            .draw()?;
        let lease_x = lease as f64;
        let purple = RGBColor(120, 60, 160);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(lease_x, 0.0), (lease_x, 1.05)],
                purple.stroke_width(2),
            )))?
            .label(format!("lease ({lease} ms)"))
            .legend(swatch(purple.stroke_width(2)));
        if takeovers.is_empty() {
            chart.draw_series(std::iter::once(Text::new(
                "no takeover followed an injected fault",
                (x_max * 0.05, 0.55),
                (FONT, 16),
            )))?;
        } else {
            let grey = RGBColor(120, 120, 120);
            chart
                .draw_series(DashedLineSeries::new(
                    cdf_steps(&floors),
                    6,
                    4,
                    grey.stroke_width(2),
                ))?
                .label("floor: lease remaining at the fault + skew margin")
                .legend(swatch(grey.stroke_width(2)));
            let blue = ACCEPTED;
            chart
                .draw_series(LineSeries::new(cdf_steps(&takeovers), blue.stroke_width(2)))?
                .label("takeover_ms")
                .legend(swatch(blue.stroke_width(2)));
            let n = takeovers.len() as f64;
            chart.draw_series(
                takeovers
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| Circle::new((v as f64, (i + 1) as f64 / n), 3, blue.filled())),
            )?;
        }
        // A CDF leaves empty the corner away from its data: upper left when takeovers sit near
        // the lease (crashes), lower right when they sit near 0 (handoffs).
        let median = takeovers.get(takeovers.len() / 2).copied().unwrap_or(0) as f64;
        let corner = if median > x_max / 2.0 {
            SeriesLabelPosition::UpperLeft
        } else {
            SeriesLabelPosition::LowerRight
        };
        legend(&mut chart, corner)
    })
}

/// Chart 4: streams owned per worker over time (step lines in the owners' colours), the free or
/// expired ones dashed grey, faults marked.
pub fn ownership(view: &RunView) -> anyhow::Result<String> {
    let end_s = seconds(view.end_ms);
    let peak = view
        .ownership
        .iter()
        .flat_map(|p| p.owners.values().copied().chain([p.free]))
        .max()
        .unwrap_or(0)
        .max(1);
    let y_top = peak as f64 * 1.15;
    let desc = match view.ownership_source {
        OwnershipSource::Table => "streams owned",
        OwnershipSource::Receipts => "streams published",
    };
    render(340, |root| {
        let mut chart = frame(root, 36, end_s, y_top)?;
        grid(&mut chart).x_desc(RUN_SECONDS).y_desc(desc).draw()?;
        draw_faults(&mut chart, view, y_top)?;
        let steps = |value: &dyn Fn(usize) -> usize| {
            let mut points = Vec::with_capacity(view.ownership.len() * 2);
            for (i, p) in view.ownership.iter().enumerate() {
                let t = seconds(p.t_ms);
                if i > 0 {
                    points.push((t, value(i - 1) as f64));
                }
                points.push((t, value(i) as f64));
            }
            points
        };
        let grey = RGBColor(150, 150, 150);
        chart.draw_series(DashedLineSeries::new(
            steps(&|i| view.ownership[i].free),
            6,
            4,
            grey.stroke_width(2),
        ))?;
        for (index, owner) in view.owners.iter().enumerate() {
            let count = |i: usize| view.ownership[i].owners.get(owner).copied().unwrap_or(0);
            if (0..view.ownership.len()).all(|i| count(i) == 0) {
                continue;
            }
            chart.draw_series(LineSeries::new(
                steps(&count),
                owner_color(index).stroke_width(2),
            ))?;
        }
        Ok(())
    })
}
