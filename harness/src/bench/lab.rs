//! A lab: one fleet of real `lease-worker` processes on its own lease table, with its own
//! in-process upstream, fencing sink and `history.jsonl`. The takeover bench runs two labs at
//! once (one per acquisition mode) on one DynamoDB Local; the throughput bench runs one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use lease_protocol::settings;
use lease_table::LeaseItem;
use tokio::time::Instant;

use super::metrics;
use crate::fleet::{Fleet, FleetConfig, WorkerEnv};
use crate::history::{HistoryWriter, Phase, Record, Recorder, RunEnd, RunStart};
use crate::sink::Sink;

/// How long a started worker may take to answer `/readyz`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a warm-up says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Once every stream has traffic, the warm-up reads the table at most this often to see them
/// all held.
const HELD_CHECK_EVERY: Duration = Duration::from_secs(1);

/// What a lab runs.
#[derive(Debug, Clone)]
pub struct LabSpec {
    /// Names the table, the directory and the history (`lease-1000-poll`).
    pub name: String,
    pub lease_ms: u64,
    pub renew_ms: u64,
    pub skew_margin_ms: u64,
    /// `ACQUIRE_MODE`; `None` leaves the worker's default.
    pub mode: Option<String>,
    pub streams: usize,
    pub workers: usize,
    /// Events per second per stream.
    pub rate: f64,
    pub seed: u64,
    /// Extra worker environment.
    pub env: BTreeMap<String, String>,
    /// Route every worker's three links (DynamoDB, upstream, sink) through the harness's
    /// fault proxies, with no fault applied: what the proxies cost.
    pub proxied: bool,
}

/// A running lab. [`Lab::finish`] ends it and returns its history.
pub struct Lab {
    pub spec: LabSpec,
    pub dir: PathBuf,
    pub table: String,
    pub stream_ids: Vec<String>,
    pub client: Client,
    pub fleet: Fleet,
    pub sink: Sink,
    pub upstream: mock_upstream::UpstreamHandle,
    pub recorder: Recorder,
    writer: HistoryWriter,
    /// Unix ms at the history's t0.
    pub wall_t0_ms: i64,
    /// Metrics address of every worker that became ready.
    addrs: Mutex<BTreeMap<String, SocketAddr>>,
    http: reqwest::Client,
}

impl Lab {
    /// Creates and seeds the table, starts upstream, sink and `spec.workers` workers, and waits
    /// until every worker is ready.
    pub async fn start(
        spec: LabSpec,
        out: &Path,
        client: Client,
        endpoint: &str,
        bin: &Path,
    ) -> anyhow::Result<Lab> {
        let dir = out.join(&spec.name);
        std::fs::create_dir_all(&dir)?;
        let table = format!("bench-{}", spec.name);
        let stream_ids: Vec<String> = (1..=spec.streams)
            .map(|i| lease_protocol::stream_name("s-", i))
            .collect();
        lease_table::create_table(&client, &table).await?;
        lease_table::members::create_table(&client, &lease_table::members::table_for(&table))
            .await?;
        let chunk = stream_ids.len().div_ceil(16).max(1);
        let seeds = stream_ids
            .chunks(chunk)
            .map(|c| lease_table::seed_streams(&client, &table, c));
        for result in futures_util::future::join_all(seeds).await {
            result?;
        }
        let writer = HistoryWriter::create(&dir.join("history.jsonl"))?;
        let recorder = writer.recorder();
        let wall_t0_ms = lease_table::now_ms() - recorder.now_ms() as i64;
        recorder.record(Record::RunStart(RunStart {
            t_ms: 0,
            wall_ms: wall_t0_ms,
            scenario: format!("bench-{}", spec.name),
            description: "harness bench".into(),
            seed: spec.seed,
            lease_ms: spec.lease_ms,
            renew_ms: spec.renew_ms,
            skew_margin_ms: spec.skew_margin_ms,
            workers: spec.workers,
            streams: spec.streams,
            rate: spec.rate,
            duration_ms: 0,
            fencing: true,
            ..RunStart::default()
        }));
        let mut upstream_config = mock_upstream::UpstreamConfig::new(stream_ids.clone());
        upstream_config.rate = spec.rate;
        let (upstream_addr, upstream) = mock_upstream::start(upstream_config).await?;
        let sink = Sink::start(recorder.clone(), true).await?;
        let mut env = WorkerEnv {
            table: table.clone(),
            lease_ms: spec.lease_ms,
            renew_ms: spec.renew_ms,
            skew_margin_ms: spec.skew_margin_ms,
            upstream_url: format!("ws://{upstream_addr}"),
            sink_url: sink.url(),
            dynamodb_endpoint: endpoint.to_string(),
        }
        .env();
        env.insert(settings::LOG_FORMAT.to_string(), "json".to_string());
        if let Some(mode) = &spec.mode {
            env.insert(settings::ACQUIRE_MODE.into(), mode.clone());
        }
        env.extend(spec.env.clone());
        let mut hooks: Vec<Arc<dyn crate::fleet::SpawnHook>> = Vec::new();
        if spec.proxied {
            use crate::scenario::menu::Link;
            let servers = crate::faults::links::servers(endpoint, upstream_addr, sink.addr())?;
            let every = [Link::Dynamodb, Link::Upstream, Link::Sink]
                .into_iter()
                .collect();
            hooks.push(Arc::new(crate::faults::links::Links::new(
                every, servers, spec.seed,
            )?));
        }
        let fleet = Fleet::new(
            FleetConfig {
                bin: bin.to_path_buf(),
                dir: dir.join("workers"),
                env,
                worker_env: BTreeMap::new(),
                args: Vec::new(),
                hooks,
            },
            recorder.clone(),
        );
        std::fs::create_dir_all(dir.join("workers"))?;
        let lab = Lab {
            spec,
            dir,
            table,
            stream_ids,
            client,
            fleet,
            sink,
            upstream,
            recorder,
            writer,
            wall_t0_ms,
            addrs: Mutex::new(BTreeMap::new()),
            http: reqwest::Client::new(),
        };
        let mut names = Vec::new();
        for _ in 0..lab.spec.workers {
            names.push(lab.fleet.spawn()?);
        }
        for name in &names {
            lab.wait_ready(name).await?;
        }
        Ok(lab)
    }

    /// Waits for `/readyz` of `name` and remembers its metrics address.
    pub async fn wait_ready(&self, name: &str) -> anyhow::Result<()> {
        let addr = self.fleet.wait_ready(name, READY_TIMEOUT).await?;
        self.addrs
            .lock()
            .expect("addrs lock poisoned")
            .insert(name.to_string(), addr);
        Ok(())
    }

    /// Starts one more worker and waits until it is ready; returns its name.
    pub async fn spawn_ready(&self) -> anyhow::Result<String> {
        let name = self.fleet.spawn()?;
        self.wait_ready(&name).await?;
        Ok(name)
    }

    /// The lease table now.
    pub async fn snapshot(&self) -> anyhow::Result<Vec<LeaseItem>> {
        Ok(lease_table::scan_all(&self.client, &self.table).await?)
    }

    /// Waits until every stream is held and has accepted traffic, within `limit`; says how far
    /// it got every few seconds, and records a `warmup_done` phase when done. Returns how long
    /// it took.
    ///
    /// The sink is free to ask; the table is scanned only for the progress line, once every
    /// stream flows (at most once a [`HELD_CHECK_EVERY`]) and at the deadline. It was scanned
    /// every 200 ms: on the 2,000-stream cold start a consistent scan took 0.2–2 s, so the
    /// warm-up kept DynamoDB Local scanning most of the time, the workers' lease writes slowed
    /// past their congestion bound, and acquisitions stalled until the warm-up gave up
    /// (2026-12-07: 720 of 2,000 held from 20 s to 55 s, then 1,104 within 25 s of its end).
    pub async fn warm_up(&self, limit: Duration) -> anyhow::Result<Duration> {
        let began = Instant::now();
        let deadline = began + limit;
        let mut next_progress = began + PROGRESS_EVERY;
        let mut next_held_check = began;
        let mut held = 0;
        loop {
            let flowing = self.sink.streams_with_traffic().len();
            let streams = self.stream_ids.len();
            let now = Instant::now();
            let progress_due = now >= next_progress || now >= deadline;
            if progress_due || (flowing == streams && now >= next_held_check) {
                let items = self.snapshot().await?;
                let now_ms = lease_table::now_ms();
                held = items.iter().filter(|i| i.is_held_at(now_ms)).count();
                next_held_check = Instant::now() + HELD_CHECK_EVERY;
            }
            if held == streams && flowing == streams {
                let took = began.elapsed();
                eprintln!(
                    "  {}: warm-up done in {:.1} s",
                    self.spec.name,
                    took.as_secs_f64()
                );
                self.recorder.record(Record::Phase(Phase {
                    t_ms: self.recorder.now_ms(),
                    phase: "warmup_done".into(),
                    detail: Some(format!("{streams} streams held with traffic")),
                }));
                return Ok(took);
            }
            if Instant::now() >= next_progress {
                next_progress += PROGRESS_EVERY;
                eprintln!(
                    "  {}: warming up {:.0} s: {held} of {streams} streams held, {flowing} with accepted traffic",
                    self.spec.name,
                    began.elapsed().as_secs_f64()
                );
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "{}: warm-up incomplete after {limit:?}: {held} of {} streams held, {flowing} with accepted traffic; see {}",
                    self.spec.name,
                    self.stream_ids.len(),
                    self.dir.join("workers").display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Every live worker's `/metrics` text but `except`'s. A worker whose address is unknown or
    /// whose scrape fails fails the measurement (a sum over fewer workers than ran would
    /// understate it, silently); `what` names the measurement in the error.
    pub async fn scrape_fleet(&self, what: &str, except: &str) -> anyhow::Result<Vec<String>> {
        let addrs: Vec<(String, SocketAddr)> = {
            let addrs = self.addrs.lock().expect("addrs lock poisoned");
            self.fleet
                .alive()
                .into_iter()
                .filter(|n| n != except)
                .map(|n| {
                    let a = addrs.get(&n).copied().ok_or_else(|| {
                        anyhow::anyhow!("{what}: no metrics address for {n} (not ready?)")
                    })?;
                    Ok((n, a))
                })
                .collect::<anyhow::Result<_>>()?
        };
        let scrapes = addrs.iter().map(|(name, a)| async move {
            metrics::scrape(&self.http, *a)
                .await
                .map_err(|e| anyhow::anyhow!("{what}: scraping {name} at {a}: {e}"))
        });
        futures_util::future::join_all(scrapes)
            .await
            .into_iter()
            .collect()
    }

    /// Sums a counter family over the series matching `filter`, over every live worker but
    /// `except` (a scrape failure fails the measurement, see [`Lab::scrape_fleet`]).
    pub async fn counter_where(
        &self,
        metric: &str,
        filter: &[(&str, &str)],
        except: &str,
    ) -> anyhow::Result<f64> {
        let texts = self.scrape_fleet(metric, except).await?;
        Ok(texts
            .iter()
            .map(|text| metrics::sum_where(text, metric, filter))
            .sum())
    }

    /// CPU ms and RSS bytes summed over the fleet's live workers (from `/proc`).
    pub fn fleet_usage(&self) -> (u64, u64) {
        self.fleet
            .alive()
            .iter()
            .filter_map(|n| self.fleet.pid(n))
            .filter_map(metrics::proc_usage)
            .fold((0, 0), |(c, r), (c2, r2)| (c + c2, r + r2))
    }

    /// Watches the fleet for `length` with nothing injected: what its counters, the harness's
    /// CPU and the workers' memory did (each worker scraped once at each end).
    pub async fn window(&self, length: Duration) -> anyhow::Result<Window> {
        let before = Counts::of(&self.scrape_fleet("the quiet window", "").await?);
        let (harness_cpu0, _) = crate::usage::self_usage();
        let started = Instant::now();
        tokio::time::sleep(length).await;
        let after = Counts::of(&self.scrape_fleet("the quiet window", "").await?);
        let ms = started.elapsed().as_millis().max(1) as u64;
        let (harness_cpu1, _) = crate::usage::self_usage();
        let (_, fleet_rss_bytes) = self.fleet_usage();
        Ok(Window {
            ms,
            counts: after.minus(&before),
            harness_cpu_ms: harness_cpu1.saturating_sub(harness_cpu0),
            fleet_rss_bytes,
        })
    }

    /// Ends the lab: SIGKILLs the fleet, stops sink and upstream, closes the history and
    /// returns its records.
    pub async fn finish(self) -> anyhow::Result<Vec<Record>> {
        self.fleet.kill_all();
        for name in self.fleet.alive() {
            self.fleet.wait_exit(&name, Duration::from_secs(5)).await;
        }
        self.sink.stop().await;
        self.upstream.shutdown().await;
        let (cpu_ms, rss) = crate::usage::self_usage();
        self.recorder.record(Record::RunEnd(RunEnd {
            t_ms: self.recorder.now_ms(),
            errors: Vec::new(),
            receipts: self.recorder.receipt_count(),
            harness_cpu_ms: cpu_ms,
            harness_max_rss_bytes: rss,
        }));
        let path = self.dir.join("history.jsonl");
        self.writer.finish()?;
        let records: anyhow::Result<Vec<Record>> = crate::history::read(&path)?.collect();
        records
    }
}

/// Counters of a fleet, summed over its workers' `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Counts {
    /// DynamoDB requests by `op` (`lease_worker_dynamodb_requests_total`).
    pub requests: BTreeMap<String, f64>,
    /// Capacity units DynamoDB reported, by `api` (`UpdateItem` are write units, `Scan` and
    /// `GetItem` read units: `lease_worker_dynamodb_capacity_units_total`).
    pub capacity: BTreeMap<String, f64>,
    /// Of which on the membership table of segmented discovery, by `api`.
    pub member_capacity: BTreeMap<String, f64>,
    /// Discovery scans completed (`lease_worker_scans_total`).
    pub scans: f64,
}

impl Counts {
    /// Sums the workers' `/metrics` texts.
    pub fn of(texts: &[String]) -> Counts {
        let mut c = Counts::default();
        for text in texts {
            for (k, v) in metrics::sum_by_label(text, metrics::DYNAMODB_REQUESTS, "op") {
                *c.requests.entry(k).or_default() += v;
            }
            for (k, v) in metrics::sum_by_label(text, metrics::DYNAMODB_CAPACITY, "api") {
                *c.capacity.entry(k).or_default() += v;
            }
            for api in ["UpdateItem", "Scan"] {
                let filter = [("api", api), ("table", "members")];
                let n = metrics::sum_where(text, metrics::DYNAMODB_CAPACITY, &filter);
                if n > 0.0 {
                    *c.member_capacity.entry(api.to_string()).or_default() += n;
                }
            }
            c.scans += metrics::sum_by_label(text, metrics::SCANS, "")
                .values()
                .sum::<f64>();
        }
        c
    }

    /// What grew from `earlier` to `self` (a series absent before counts from 0).
    pub fn minus(&self, earlier: &Counts) -> Counts {
        let diff = |now: &BTreeMap<String, f64>, then: &BTreeMap<String, f64>| {
            now.iter()
                .map(|(k, v)| (k.clone(), v - then.get(k).copied().unwrap_or(0.0)))
                .collect()
        };
        Counts {
            requests: diff(&self.requests, &earlier.requests),
            capacity: diff(&self.capacity, &earlier.capacity),
            member_capacity: diff(&self.member_capacity, &earlier.member_capacity),
            scans: self.scans - earlier.scans,
        }
    }

    /// Read units (`Scan` and `GetItem`).
    pub fn read_units(&self) -> f64 {
        ["Scan", "GetItem"]
            .iter()
            .map(|api| self.capacity.get(*api).copied().unwrap_or(0.0))
            .sum()
    }

    /// Write units (`UpdateItem`).
    pub fn write_units(&self) -> f64 {
        self.capacity.get("UpdateItem").copied().unwrap_or(0.0)
    }
}

/// A quiet window: [`Lab::window`].
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Window {
    pub ms: u64,
    pub counts: Counts,
    /// The harness's own CPU time over the window.
    pub harness_cpu_ms: u64,
    /// The fleet's RSS at the window's end.
    pub fleet_rss_bytes: u64,
}

/// What every bench starts from: the worker executable (resolved), `out` (created) and a
/// DynamoDB Local in `mode`, started and warmed up.
pub async fn prepare(
    out: &Path,
    worker_bin: Option<&Path>,
    mode: &dynamodb_local::Mode,
) -> anyhow::Result<(PathBuf, dynamodb_local::DynamoLocal)> {
    let bin = crate::fleet::resolve_worker_bin(worker_bin).map_err(|e| anyhow::anyhow!(e))?;
    std::fs::create_dir_all(out)?;
    let ddb = dynamodb_local::DynamoLocal::start(&dynamodb_local::Options {
        mode: mode.clone(),
        ..dynamodb_local::Options::default()
    })
    .await
    .map_err(|e| anyhow::anyhow!("DynamoDB Local: {e}"))?;
    warm_dynamodb(&ddb.client()).await?;
    Ok((bin, ddb))
}

/// Exercises a fresh DynamoDB Local (its JVM compiles hot paths on first use) so the first
/// measured lease does not pay for the warm-up in timed-out renewals.
async fn warm_dynamodb(client: &Client) -> anyhow::Result<()> {
    let table = "bench-warmup";
    lease_table::create_table(client, table).await?;
    let ids: Vec<String> = (1..=1_600)
        .map(|i| lease_protocol::stream_name("w-", i))
        .collect();
    for _ in 0..2 {
        let seeds = ids
            .chunks(100)
            .map(|c| lease_table::seed_streams(client, table, c));
        for result in futures_util::future::join_all(seeds).await {
            result?;
        }
        for _ in 0..3 {
            lease_table::scan_all(client, table).await?;
        }
    }
    Ok(())
}
