//! `harness bench throughput`: ramps streams × per-stream rate through one fleet until the sink
//! accepts less than the upstream produces, and reports the highest sustained step: events/s
//! end to end, events/s per worker core (worker CPU from `/proc/PID/stat`), streams per worker,
//! worker RSS per owned stream and the harness's own CPU share.
//!
//! Each step is a fresh lab (the upstream's rate is fixed at start); a step counts as sustained
//! when the events accepted during its window are at least [`SUSTAINED`] of those produced.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::lab::{self, Lab, LabSpec};
use super::metrics;
use crate::report::{table_markdown, Cell, Table};

/// Accepted / produced in a step's window for the step to count as sustained.
pub const SUSTAINED: f64 = 0.97;
/// Batch delay given to the workers: fewer, larger sink posts at high rates.
pub const BATCH_MAX_DELAY_MS: u64 = 100;

/// What `harness bench throughput` was asked to do.
#[derive(Debug, Clone)]
pub struct ThroughputOptions {
    pub out: PathBuf,
    pub workers: usize,
    pub streams: Vec<usize>,
    pub rates: Vec<f64>,
    pub step_ms: u64,
    /// Each step is measured once per entry: `false` direct links, `true` every link through
    /// the harness's proxies.
    pub proxies: Vec<bool>,
    pub seed: u64,
    pub dynamodb: dynamodb_local::Mode,
    pub worker_bin: Option<PathBuf>,
    /// Checked before each step.
    pub interrupt: super::Interrupt,
}

/// One measured step.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub streams: usize,
    pub rate_per_stream: f64,
    pub workers: usize,
    /// Every link of every worker went through the harness's proxies (no fault applied).
    pub proxied: bool,
    pub window_ms: u64,
    pub produced_per_s: f64,
    pub accepted_per_s: f64,
    pub sustained: bool,
    /// Worker CPU seconds per second, summed over the fleet.
    pub worker_cores: f64,
    pub events_per_s_per_worker_core: f64,
    pub worker_rss_bytes: u64,
    pub worker_rss_bytes_per_stream: f64,
    /// Harness CPU over the machine's capacity (cores × window).
    pub harness_cpu_share: f64,
    /// Harness CPU over all CPU the machine spent in the window.
    pub harness_cpu_share_of_busy: f64,
    pub machine_cpu_busy_share: f64,
    /// From the fleet's start until every stream was held with accepted traffic; `None` when
    /// the warm-up did not complete (see `error`).
    pub warm_up_ms: Option<u64>,
    /// The fleet's lease writes over the whole step (warm-up and window), from its counters.
    pub lease_writes: LeaseWrites,
    pub error: Option<String>,
}

/// Lease writes of a fleet, summed over its workers' `/metrics` (issue #20: a cold start that
/// cannot collapse keeps timeouts under 1 % of requests and loses no lease).
#[derive(Debug, Clone, Default, Serialize)]
pub struct LeaseWrites {
    pub acquires: f64,
    pub acquire_timeouts: f64,
    pub renewals: f64,
    pub renewal_timeouts: f64,
    /// Acquires and renewals answered with a throttling error.
    pub throttled: f64,
    /// Leases lost without a release, any reason.
    pub leases_lost: f64,
}

impl LeaseWrites {
    /// Timed-out acquires and renewals over all acquires and renewals (0 when there were none).
    pub fn timeout_share(&self) -> f64 {
        let all = self.acquires + self.renewals;
        if all > 0.0 {
            (self.acquire_timeouts + self.renewal_timeouts) / all
        } else {
            0.0
        }
    }

    /// Sums the fleet's counters, one scrape of each worker (a worker that cannot be scraped
    /// fails the count).
    async fn of(lab: &Lab) -> anyhow::Result<LeaseWrites> {
        let texts = lab.scrape_fleet("lease writes", "").await?;
        Ok(LeaseWrites::from_metrics(&texts))
    }

    /// Sums the workers' `/metrics` texts.
    fn from_metrics(texts: &[String]) -> LeaseWrites {
        let count = |op: &str, outcome: Option<&str>| -> f64 {
            let mut filter = vec![("op", op)];
            filter.extend(outcome.map(|o| ("outcome", o)));
            texts
                .iter()
                .map(|t| metrics::sum_where(t, metrics::DYNAMODB_REQUESTS, &filter))
                .sum()
        };
        LeaseWrites {
            acquires: count("acquire", None),
            acquire_timeouts: count("acquire", Some("timeout")),
            renewals: count("renew", None),
            renewal_timeouts: count("renew", Some("timeout")),
            throttled: count("acquire", Some("throttled")) + count("renew", Some("throttled")),
            leases_lost: texts
                .iter()
                .flat_map(|t| {
                    metrics::sum_by_label(t, metrics::LEASES_LOST, "reason").into_values()
                })
                .sum(),
        }
    }
}

/// `bench.json`'s `throughput` (design §8): the highest sustained step, and every step.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    pub events_per_s: f64,
    pub events_per_s_per_worker_core: f64,
    pub streams: usize,
    pub workers: usize,
    pub streams_per_worker: f64,
    /// The most streams of any sustained step (at whatever rate).
    pub max_streams_sustained: usize,
    pub worker_rss_bytes_per_stream: f64,
    pub harness_cpu_share: f64,
    pub rate_per_stream: f64,
    pub cores: usize,
    pub batch_max_delay_ms: u64,
    pub worker_bin: String,
    pub steps: Vec<Step>,
    /// A signal cut the ramp short: the steps measured before it are here.
    pub interrupted: bool,
}

/// Runs the ramp.
pub async fn run(options: &ThroughputOptions) -> anyhow::Result<Throughput> {
    let (bin, ddb) = lab::prepare(
        &options.out,
        options.worker_bin.as_deref(),
        &options.dynamodb,
    )
    .await?;
    let cores = metrics::machine_busy_ms().map_or(1, |(_, c)| c);
    let mut steps = Vec::new();
    let mut interrupted = false;
    'streams: for &streams in &options.streams {
        for &rate in &options.rates {
            if options.interrupt.is_set() {
                interrupted = true;
                break 'streams;
            }
            let mut sustained = true;
            for &proxied in &options.proxies {
                if options.interrupt.is_set() {
                    interrupted = true;
                    break 'streams;
                }
                eprintln!(
                    "bench throughput: {streams} streams × {rate} events/s over {} workers{}",
                    options.workers,
                    if proxied { ", every link proxied" } else { "" }
                );
                let step = measure(options, &ddb, &bin, streams, rate, proxied).await;
                let step = match step {
                    Ok(s) => s,
                    Err(e) => failed_step(options, streams, rate, proxied, format!("{e:#}")),
                };
                eprintln!(
                    "  produced {:.0}/s accepted {:.0}/s, workers {:.2} cores, harness {:.0} % of the machine",
                    step.produced_per_s,
                    step.accepted_per_s,
                    step.worker_cores,
                    step.harness_cpu_share * 100.0
                );
                sustained &= step.sustained;
                steps.push(step);
            }
            if !sustained {
                // A higher rate on as many streams will not do better; more streams neither.
                if rate == options.rates[0] {
                    break 'streams;
                }
                break;
            }
        }
    }
    drop(ddb);
    // The headline figures come from the first way of linking measured (direct, unless only
    // proxied steps ran).
    let headline = options.proxies.first().copied().unwrap_or(false);
    let best = steps
        .iter()
        .filter(|s| s.sustained && s.proxied == headline)
        .max_by(|a, b| a.accepted_per_s.total_cmp(&b.accepted_per_s))
        .cloned();
    let max_streams_sustained = steps
        .iter()
        .filter(|s| s.sustained)
        .map(|s| s.streams)
        .max()
        .unwrap_or(0);
    let b =
        best.unwrap_or_else(|| failed_step(options, 0, 0.0, false, "no step was sustained".into()));
    Ok(Throughput {
        events_per_s: b.accepted_per_s,
        events_per_s_per_worker_core: b.events_per_s_per_worker_core,
        streams: b.streams,
        workers: options.workers,
        streams_per_worker: b.streams as f64 / options.workers as f64,
        max_streams_sustained,
        worker_rss_bytes_per_stream: b.worker_rss_bytes_per_stream,
        harness_cpu_share: b.harness_cpu_share,
        rate_per_stream: b.rate_per_stream,
        cores,
        batch_max_delay_ms: BATCH_MAX_DELAY_MS,
        worker_bin: bin.display().to_string(),
        steps,
        interrupted,
    })
}

fn failed_step(
    options: &ThroughputOptions,
    streams: usize,
    rate: f64,
    proxied: bool,
    error: String,
) -> Step {
    Step {
        streams,
        rate_per_stream: rate,
        workers: options.workers,
        proxied,
        window_ms: 0,
        produced_per_s: 0.0,
        accepted_per_s: 0.0,
        sustained: false,
        worker_cores: 0.0,
        events_per_s_per_worker_core: 0.0,
        worker_rss_bytes: 0,
        worker_rss_bytes_per_stream: 0.0,
        harness_cpu_share: 0.0,
        harness_cpu_share_of_busy: 0.0,
        machine_cpu_busy_share: 0.0,
        warm_up_ms: None,
        lease_writes: LeaseWrites::default(),
        error: Some(error),
    }
}

async fn measure(
    options: &ThroughputOptions,
    ddb: &dynamodb_local::DynamoLocal,
    bin: &Path,
    streams: usize,
    rate: f64,
    proxied: bool,
) -> anyhow::Result<Step> {
    let spec = LabSpec {
        name: format!(
            "throughput-{streams}x{rate}{}",
            if proxied { "-proxied" } else { "" }
        ),
        proxied,
        lease_ms: 30_000,
        renew_ms: 10_000,
        skew_margin_ms: 200,
        mode: None,
        streams,
        workers: options.workers,
        rate,
        seed: options.seed,
        env: BTreeMap::from([
            (
                "BATCH_MAX_DELAY_MS".to_string(),
                BATCH_MAX_DELAY_MS.to_string(),
            ),
            ("BATCH_MAX_EVENTS".to_string(), "1000".to_string()),
            ("RUST_LOG".to_string(), "warn".to_string()),
        ]),
    };
    let lab = Lab::start(spec, &options.out, ddb.client(), ddb.endpoint(), bin).await?;
    let result = async {
        // A stream or two lost to a slow renewal does not invalidate a throughput step: the
        // window's accepted/produced ratio judges it. Keep the note.
        let warm_up = lab.warm_up(Duration::from_secs(60)).await;
        let warm_up_ms = warm_up.as_ref().ok().map(|d| d.as_millis() as u64);
        let note = warm_up.err().map(|e| e.to_string());
        // Let replay backlogs from the warm-up drain before measuring.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let produced0 = lab.upstream.events_produced();
        let accepted0 = lab.sink.accepted();
        let (worker_cpu0, _) = lab.fleet_usage();
        let (harness_cpu0, _) = crate::usage::self_usage();
        let machine0 = metrics::machine_busy_ms();
        let started = Instant::now();
        tokio::time::sleep(Duration::from_millis(options.step_ms)).await;
        let window_ms = started.elapsed().as_millis().max(1) as u64;
        let produced = lab.upstream.events_produced() - produced0;
        let accepted = lab.sink.accepted() - accepted0;
        let (worker_cpu1, rss) = lab.fleet_usage();
        let (harness_cpu1, _) = crate::usage::self_usage();
        let machine1 = metrics::machine_busy_ms();
        let seconds = window_ms as f64 / 1000.0;
        let worker_cores = (worker_cpu1.saturating_sub(worker_cpu0)) as f64 / window_ms as f64;
        let harness_ms = harness_cpu1.saturating_sub(harness_cpu0) as f64;
        let (busy_ms, cores) = match (machine0, machine1) {
            (Some((b0, c)), Some((b1, _))) => (b1.saturating_sub(b0) as f64, c),
            _ => (0.0, 1),
        };
        let accepted_per_s = accepted as f64 / seconds;
        let lease_writes = LeaseWrites::of(&lab).await?;
        anyhow::Ok(Step {
            streams,
            rate_per_stream: rate,
            workers: options.workers,
            proxied,
            window_ms,
            produced_per_s: produced as f64 / seconds,
            accepted_per_s,
            sustained: produced > 0 && accepted as f64 >= SUSTAINED * produced as f64,
            worker_cores,
            events_per_s_per_worker_core: if worker_cores > 0.0 {
                accepted_per_s / worker_cores
            } else {
                0.0
            },
            worker_rss_bytes: rss,
            worker_rss_bytes_per_stream: rss as f64 / streams.max(1) as f64,
            harness_cpu_share: harness_ms / (window_ms as f64 * cores as f64),
            harness_cpu_share_of_busy: if busy_ms > 0.0 {
                harness_ms / busy_ms
            } else {
                0.0
            },
            machine_cpu_busy_share: busy_ms / (window_ms as f64 * cores as f64),
            warm_up_ms,
            lease_writes,
            error: note,
        })
    }
    .await;
    let _ = lab.finish().await;
    result
}

/// The steps as a table in the report's model (printed and written as markdown).
pub fn table(t: &Throughput) -> Table {
    let rows = t
        .steps
        .iter()
        .map(|st| -> Vec<Cell> {
            vec![
                st.streams.to_string().into(),
                st.rate_per_stream.to_string().into(),
                if st.proxied { "proxied" } else { "direct" }.into(),
                format!("{:.0}", st.produced_per_s).into(),
                format!("{:.0}", st.accepted_per_s).into(),
                if st.sustained { "yes" } else { "no" }.into(),
                format!("{:.2}", st.worker_cores).into(),
                format!("{:.0}", st.events_per_s_per_worker_core).into(),
                format!("{:.0} KiB", st.worker_rss_bytes_per_stream / 1024.0).into(),
                format!("{:.0} %", st.harness_cpu_share * 100.0).into(),
                st.warm_up_ms
                    .map_or_else(
                        || "incomplete".to_string(),
                        |ms| format!("{:.1} s", ms as f64 / 1000.0),
                    )
                    .into(),
                format!(
                    "{:.0} / {:.0} ({:.2} %)",
                    st.lease_writes.acquire_timeouts,
                    st.lease_writes.renewal_timeouts,
                    st.lease_writes.timeout_share() * 100.0
                )
                .into(),
                format!("{:.0}", st.lease_writes.leases_lost).into(),
            ]
        })
        .collect();
    let headers = [
        "streams",
        "rate/stream",
        "links",
        "produced/s",
        "accepted/s",
        "sustained",
        "worker cores",
        "events/s per worker core",
        "worker RSS per stream",
        "harness CPU (of machine)",
        "warm-up",
        "lease-write timeouts (acquire / renew)",
        "leases lost",
    ];
    let note = format!(
        "highest sustained: {:.0} events/s end to end ({} streams × {} events/s), {:.0} events/s per worker core, {} workers ({:.0} streams per worker; most streams sustained: {}), {:.0} KiB worker RSS per stream, harness {:.0} % of the machine's CPU ({} cores)",
        t.events_per_s,
        t.streams,
        t.rate_per_stream,
        t.events_per_s_per_worker_core,
        t.workers,
        t.streams_per_worker,
        t.max_streams_sustained,
        t.worker_rss_bytes_per_stream / 1024.0,
        t.harness_cpu_share * 100.0,
        t.cores
    );
    let mut note = note;
    for direct in t.steps.iter().filter(|s| !s.proxied && s.window_ms > 0) {
        let Some(proxied) = t.steps.iter().find(|p| {
            p.proxied
                && p.window_ms > 0
                && p.streams == direct.streams
                && p.rate_per_stream == direct.rate_per_stream
        }) else {
            continue;
        };
        note.push_str(&format!(
            "; proxies at {} × {}: harness {:.1} % of the machine with every link proxied, {:.1} % without; accepted {:.0}/s vs {:.0}/s",
            direct.streams,
            direct.rate_per_stream,
            proxied.harness_cpu_share * 100.0,
            direct.harness_cpu_share * 100.0,
            proxied.accepted_per_s,
            direct.accepted_per_s
        ));
    }
    Table {
        id: "throughput",
        title: "Throughput steps".to_string(),
        intro: None,
        headers: headers.iter().map(|h| h.to_string()).collect(),
        rows,
        note: Some(note),
    }
}

/// Merges `throughput` into bench.json and writes throughput.md.
pub fn write(dir: &Path, t: &Throughput, command: &str) -> anyhow::Result<()> {
    let mut entries = serde_json::Map::new();
    entries.insert("throughput".into(), serde_json::to_value(t)?);
    super::output::merge_json(dir, entries)?;
    let note = if t.interrupted {
        "**Interrupted by a signal**: only the steps measured before it are here.\n\n"
    } else {
        ""
    };
    let md = format!(
        "# harness bench throughput\n\n`{command}`\n\n{note}{}",
        table_markdown(&table(t))
    );
    std::fs::write(dir.join("throughput.md"), md)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts fire: timeouts, throttling and lost leases in the workers' counters show up,
    /// summed over workers, and other operations and outcomes do not leak in.
    #[test]
    fn lease_writes_sum_the_fleets_counters() {
        let worker = |timeouts: u32, lost: u32| {
            format!(
                "lease_worker_dynamodb_requests_total{{op=\"acquire\",outcome=\"ok\"}} 10\n\
                 lease_worker_dynamodb_requests_total{{op=\"acquire\",outcome=\"timeout\"}} {timeouts}\n\
                 lease_worker_dynamodb_requests_total{{op=\"renew\",outcome=\"ok\"}} 100\n\
                 lease_worker_dynamodb_requests_total{{op=\"renew\",outcome=\"throttled\"}} 2\n\
                 lease_worker_dynamodb_requests_total{{op=\"scan\",outcome=\"timeout\"}} 7\n\
                 lease_worker_leases_lost_total{{reason=\"deadline\"}} {lost}\n\
                 lease_worker_leases_lost_total{{reason=\"renew_refused\"}} 1\n"
            )
        };
        let w = LeaseWrites::from_metrics(&[worker(3, 0), worker(1, 2)]);
        assert_eq!((w.acquires, w.acquire_timeouts), (24.0, 4.0));
        assert_eq!((w.renewals, w.renewal_timeouts), (204.0, 0.0));
        assert_eq!((w.throttled, w.leases_lost), (4.0, 4.0));
        assert!((w.timeout_share() - 4.0 / 228.0).abs() < 1e-12);
        let quiet = LeaseWrites::from_metrics(&[worker(0, 0)]);
        assert_eq!(quiet.acquire_timeouts, 0.0);
    }
}
