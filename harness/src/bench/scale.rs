//! `harness bench scale`: what the lease machinery costs as the fleet grows. One table of
//! streams, fleets of W = 10, 50, 100 workers measured one after the other on one DynamoDB
//! Local: every request by operation and the capacity DynamoDB reported for it (the workers ask
//! for `ReturnConsumedCapacity` and export the sums), the hottest item's reads per second, a
//! crash takeover and a graceful handoff at that scale, worker memory per stream and the
//! harness's own CPU; then a cost model that prices the measured rates at any fleet size.
//!
//! Issue #20's goal is discovery whose cost per stream-hour stays flat as W grows; this bench is
//! its measure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::lab::{self, LabSpec, Window};
use super::output::{dist, headers, html_start};
use super::stats::{self, Dist, Kind, TakeoverRow};
use super::takeover::{self, LabPlan};
use crate::cost::Discovery;
use crate::report::{html_escape, table_html, table_markdown, Cell, Table};

pub use super::scale_model::{cost_model, cost_model_table, CostModel, CostModelRow};

/// `SKEW_MARGIN_MS` given to the workers (part of the crash floor).
const SKEW_MARGIN_MS: u64 = 200;

/// What `harness bench scale` was asked to do.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleConfig {
    pub streams: usize,
    /// Discovery designs measured (`DISCOVERY`), each at every fleet size.
    pub discovery: Vec<Discovery>,
    /// Fleet sizes, measured one after the other.
    pub workers: Vec<usize>,
    /// Events per second per stream.
    pub rate: f64,
    pub lease_ms: u64,
    pub renew_ms: u64,
    /// `FLEET_POLL_MS` given to the workers (the cost model prices the fleet signal with it).
    pub fleet_poll_ms: u64,
    /// Length of the quiet window the rates come from.
    pub window_ms: u64,
    /// Crash takeovers per fleet size (as many handoffs again).
    pub runs: usize,
    pub seed: u64,
    /// On-demand prices for the cost model, USD per million request units.
    pub write_price: f64,
    pub read_price: f64,
    /// Fleet sizes the cost model prices (streams, workers), besides the measured ones.
    pub model_sizes: Vec<(u64, u64)>,
    pub worker_bin: String,
}

/// What the bench needs beyond its configuration.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    pub out: PathBuf,
    pub config: ScaleConfig,
    pub dynamodb: dynamodb_local::Mode,
    pub worker_bin: Option<PathBuf>,
    pub interrupt: super::Interrupt,
}

/// One measured fleet size: `bench.json`'s `scale` entry (design §11).
#[derive(Debug, Clone, Serialize)]
pub struct ScaleRow {
    pub discovery: Discovery,
    pub streams: usize,
    pub workers: usize,
    pub read_units_per_stream_hour: f64,
    pub write_units_per_stream_hour: f64,
    /// By `op` label (acquire, renew, scan pages, fleet_read, ...).
    pub requests_per_stream_hour: BTreeMap<String, f64>,
    /// Capacity units by API (`Scan` and `GetItem` read, `UpdateItem` write), both tables.
    pub units_per_stream_hour_by_api: BTreeMap<String, f64>,
    /// Of which on the membership table (segmented discovery), by API.
    pub member_units_per_stream_hour_by_api: BTreeMap<String, f64>,
    /// Reads of the most-read item per second. Full discovery: every scan reads every item,
    /// and the fleet signal is also read on its own. Segmented: the fleet signal's segment is
    /// read about three times per scan interval (its owner, its standby and a rotating reader) besides its
    /// polls, and every membership item once per scan of any worker.
    pub hottest_item_reads_per_s: f64,
    pub scans_per_s: f64,
    pub fleet_reads_per_s: f64,
    /// Crash takeover time over its floor (lease left at the kill + skew margin).
    pub crash_overhead_ms: Dist,
    /// Graceful handoff time (its floor is 0).
    pub handoff_ms: Dist,
    pub crash_samples: usize,
    pub handoff_samples: usize,
    pub worker_rss_bytes_per_stream: f64,
    /// The harness's CPU over the machine's capacity during the quiet window.
    pub harness_cpu_share: f64,
    pub window_ms: u64,
    pub errors: Vec<String>,
}

/// Everything the scale bench measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleBench {
    pub config: ScaleConfig,
    pub scale: Vec<ScaleRow>,
    /// Priced from the largest fleet measured of each discovery.
    pub cost_model: Option<CostModel>,
    pub errors: Vec<String>,
    /// Crash takeovers before the lease the table held at the kill ran out (fails the bench).
    pub violations: Vec<String>,
    pub interrupted: bool,
}

/// A fleet size's row from its quiet window and its takeover rows. Pure.
pub fn row(
    discovery: Discovery,
    streams: usize,
    workers: usize,
    window: &Window,
    takeovers: &[TakeoverRow],
    cores: usize,
    errors: Vec<String>,
) -> ScaleRow {
    let c = &window.counts;
    let per_s = |n: f64| n * 1000.0 / window.ms.max(1) as f64;
    let fleet_reads_per_s = per_s(c.requests.get("fleet_read").copied().unwrap_or(0.0));
    let scans_per_s = per_s(c.scans);
    let hottest_item_reads_per_s = match discovery {
        Discovery::Full => scans_per_s + fleet_reads_per_s,
        Discovery::Segmented => {
            let readers = crate::cost::SEGMENTS_PER_WORKER;
            let segment_reads = readers * scans_per_s / workers.max(1) as f64;
            (fleet_reads_per_s + segment_reads).max(scans_per_s)
        }
    };
    let per_stream_hour = |m: &BTreeMap<String, f64>| -> BTreeMap<String, f64> {
        m.iter()
            .map(|(k, n)| (k.clone(), stats::per_stream_hour(*n, streams, window.ms)))
            .collect()
    };
    let of = |kind: Kind| takeovers.iter().find(|r| r.kind == kind);
    ScaleRow {
        discovery,
        streams,
        workers,
        read_units_per_stream_hour: stats::per_stream_hour(c.read_units(), streams, window.ms),
        write_units_per_stream_hour: stats::per_stream_hour(c.write_units(), streams, window.ms),
        requests_per_stream_hour: per_stream_hour(&c.requests),
        units_per_stream_hour_by_api: per_stream_hour(&c.capacity),
        member_units_per_stream_hour_by_api: per_stream_hour(&c.member_capacity),
        hottest_item_reads_per_s,
        scans_per_s,
        fleet_reads_per_s,
        crash_overhead_ms: of(Kind::Crash)
            .map(|r| r.overhead_ms.clone())
            .unwrap_or_default(),
        handoff_ms: of(Kind::Handoff)
            .map(|r| r.takeover_ms.clone())
            .unwrap_or_default(),
        crash_samples: of(Kind::Crash).map_or(0, |r| r.samples),
        handoff_samples: of(Kind::Handoff).map_or(0, |r| r.samples),
        worker_rss_bytes_per_stream: window.fleet_rss_bytes as f64 / streams.max(1) as f64,
        harness_cpu_share: window.harness_cpu_ms as f64
            / (window.ms.max(1) as f64 * cores.max(1) as f64),
        window_ms: window.ms,
        errors,
    }
}

/// Runs every fleet size; each is a fresh lab on its own table.
pub async fn run(options: &ScaleOptions) -> anyhow::Result<ScaleBench> {
    let (bin, ddb) = lab::prepare(
        &options.out,
        options.worker_bin.as_deref(),
        &options.dynamodb,
    )
    .await?;
    let cores = super::metrics::machine_busy_ms().map_or(1, |(_, c)| c);
    let mut config = options.config.clone();
    config.worker_bin = bin.display().to_string();
    let mut bench = ScaleBench {
        config,
        scale: Vec::new(),
        cost_model: None,
        errors: Vec::new(),
        violations: Vec::new(),
        interrupted: false,
    };
    let c = &options.config;
    let sizes = c
        .discovery
        .iter()
        .flat_map(|d| c.workers.iter().map(move |w| (*d, *w)));
    for (discovery, workers) in sizes {
        if options.interrupt.is_set() {
            bench.interrupted = true;
            break;
        }
        let label = format!("{workers} workers, {} discovery", discovery.name());
        eprintln!(
            "bench scale: {} streams over {label}, lease {} ms, renew {} ms",
            c.streams, c.lease_ms, c.renew_ms
        );
        let spec = LabSpec {
            name: format!("scale-{}-{}x{workers}", discovery.name(), c.streams),
            lease_ms: c.lease_ms,
            renew_ms: c.renew_ms,
            skew_margin_ms: SKEW_MARGIN_MS,
            mode: None,
            streams: c.streams,
            workers,
            rate: c.rate,
            seed: c.seed ^ workers as u64,
            env: BTreeMap::from([
                ("RUST_LOG".to_string(), "warn".to_string()),
                (
                    lease_protocol::settings::FLEET_POLL_MS.to_string(),
                    c.fleet_poll_ms.to_string(),
                ),
                (
                    lease_protocol::settings::DISCOVERY.to_string(),
                    discovery.name().to_string(),
                ),
            ]),
            proxied: false,
        };
        let plan = LabPlan {
            out: &options.out,
            interrupt: &options.interrupt,
            runs: c.runs,
            window: Duration::from_millis(c.window_ms),
            // A cold start of many streams over many workers on a 2-core DynamoDB Local.
            warm_up: Duration::from_millis(120_000 + 3 * c.lease_ms),
        };
        let measured = takeover::one_mode(
            spec,
            plan,
            ddb.client(),
            ddb.endpoint().to_string(),
            bin.clone(),
        )
        .await;
        match measured {
            Ok(Some(m)) => {
                bench.interrupted |= m.interrupted;
                let tagged: Vec<_> = m
                    .samples
                    .iter()
                    .map(|s| (c.lease_ms, label.clone(), s.clone()))
                    .collect();
                bench
                    .violations
                    .extend(takeover::early_takeovers(&tagged, SKEW_MARGIN_MS));
                let r = row(
                    discovery, c.streams, workers, &m.window, &m.rows, cores, m.errors,
                );
                eprintln!(
                    "  read units {:.1} / write units {:.1} per stream-hour, hottest item {:.0} reads/s, crash overhead p99 {} ms, handoff p99 {} ms",
                    r.read_units_per_stream_hour,
                    r.write_units_per_stream_hour,
                    r.hottest_item_reads_per_s,
                    r.crash_overhead_ms.p99.map_or("–".into(), |v| v.to_string()),
                    r.handoff_ms.p99.map_or("–".into(), |v| v.to_string()),
                );
                bench.scale.push(r);
            }
            Ok(None) => {
                bench.interrupted = true;
                break;
            }
            Err(e) => {
                // One fleet size failing (a warm-up this machine cannot finish) is a finding.
                eprintln!("bench scale: {label}: {e:#}");
                bench.errors.push(format!("{label}: {e:#}"));
            }
        }
    }
    drop(ddb);
    if !bench.scale.is_empty() {
        let mut sizes: Vec<(u64, u64)> = bench
            .scale
            .iter()
            .map(|r| (r.streams as u64, r.workers as u64))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes.extend(&c.model_sizes);
        bench.cost_model = Some(cost_model(
            &bench.scale,
            &sizes,
            c.fleet_poll_ms,
            c.write_price,
            c.read_price,
        ));
    }
    Ok(bench)
}

/// The measured rows in the report's table model.
pub fn scale_table(b: &ScaleBench) -> Table {
    let rows = b
        .scale
        .iter()
        .map(|r| -> Vec<Cell> {
            let by = |m: &BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(0.0);
            vec![
                r.discovery.name().into(),
                r.streams.to_string().into(),
                r.workers.to_string().into(),
                format!("{:.1}", r.read_units_per_stream_hour).into(),
                format!(
                    "{:.1}",
                    by(&r.units_per_stream_hour_by_api, "Scan")
                        - by(&r.member_units_per_stream_hour_by_api, "Scan")
                )
                .into(),
                format!("{:.1}", by(&r.units_per_stream_hour_by_api, "GetItem")).into(),
                format!(
                    "{:.1}",
                    r.member_units_per_stream_hour_by_api.values().sum::<f64>()
                )
                .into(),
                format!("{:.0}", r.write_units_per_stream_hour).into(),
                format!("{:.0}", r.hottest_item_reads_per_s).into(),
                format!("{} ({})", dist(&r.crash_overhead_ms), r.crash_samples).into(),
                format!("{} ({})", dist(&r.handoff_ms), r.handoff_samples).into(),
                format!("{:.0} KiB", r.worker_rss_bytes_per_stream / 1024.0).into(),
                format!("{:.0} %", r.harness_cpu_share * 100.0).into(),
            ]
        })
        .collect();
    let names = [
        "discovery",
        "streams",
        "workers",
        "read units / stream-hour",
        "of which lease-table scans",
        "of which fleet signal",
        "membership units / stream-hour",
        "write units / stream-hour",
        "hottest item reads/s",
        "crash overhead ms p50 / p99 / max (n)",
        "handoff ms p50 / p99 / max (n)",
        "worker RSS per stream",
        "harness CPU (of machine)",
    ];
    Table {
        id: "scale",
        title: "Cost and takeover as the fleet grows".to_string(),
        intro: Some(format!(
            "lease {} ms, renew {} ms, {} events/s per stream; rates from a {:.0} s quiet window (capacity units as DynamoDB Local reported them); {} crash takeover(s) and as many handoffs per fleet size",
            b.config.lease_ms,
            b.config.renew_ms,
            b.config.rate,
            b.config.window_ms as f64 / 1000.0,
            b.config.runs
        )),
        headers: headers(&names),
        rows,
        note: None,
    }
}

/// Merges `scale_config`, `scale` and `cost_model` into `bench.json`; writes `scale.md` and a
/// self-contained `scale.html`.
pub fn write(dir: &Path, b: &ScaleBench, command: &str) -> anyhow::Result<()> {
    let mut entries = serde_json::Map::new();
    entries.insert("scale_config".into(), serde_json::to_value(&b.config)?);
    entries.insert("scale".into(), serde_json::to_value(&b.scale)?);
    entries.insert("cost_model".into(), serde_json::to_value(&b.cost_model)?);
    entries.insert("scale_errors".into(), serde_json::to_value(&b.errors)?);
    entries.insert("scale_interrupted".into(), b.interrupted.into());
    super::output::merge_json(dir, entries)?;
    let mut tables = vec![scale_table(b)];
    tables.extend(b.cost_model.as_ref().map(cost_model_table));
    let problems: Vec<&String> = b
        .errors
        .iter()
        .chain(b.scale.iter().flat_map(|r| &r.errors))
        .collect();
    let interrupted = if b.interrupted {
        "**Interrupted by a signal**: only the fleet sizes measured before it are here.\n\n"
    } else {
        ""
    };
    let mut md = format!("# harness bench scale\n\n`{command}`\n\n{interrupted}");
    for t in &tables {
        md.push_str(&table_markdown(t));
        md.push('\n');
    }
    if !problems.is_empty() {
        md.push_str("## Problems\n\n");
        for p in &problems {
            md.push_str(&format!("- {p}\n"));
        }
    }
    std::fs::write(dir.join("scale.md"), md)?;
    let mut html = html_start("harness bench scale", command);
    if b.interrupted {
        html.push_str("<p><strong>Interrupted by a signal</strong>: only the fleet sizes measured before it are here.</p>");
    }
    for t in &tables {
        html.push_str(&table_html(t));
    }
    if !problems.is_empty() {
        html.push_str("<h2>Problems</h2><ul>");
        for p in &problems {
            html.push_str(&format!("<li>{}</li>", html_escape(p)));
        }
        html.push_str("</ul>");
    }
    html.push_str("</body></html>\n");
    std::fs::write(dir.join("scale.html"), html)?;
    Ok(())
}

#[cfg(test)]
#[path = "scale_tests.rs"]
mod tests;
