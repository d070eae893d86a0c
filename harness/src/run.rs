//! `harness run`: one scenario, end to end. Provision DynamoDB Local, create and seed the table,
//! start the upstream, the fencing sink and the fleet; warm up; inject the faults on schedule;
//! stop production and settle; record the final state; drain the fleet; analyse the history
//! that was written and judge it.
//!
//! Exit codes (design §5): 0 every expectation held, 1 an expectation failed or the run could
//! not complete, 2 the scenario or the environment is invalid.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use tokio::time::Instant;

use crate::faults::Injector;
use crate::fleet::{Fleet, FleetConfig, WorkerEnv};
use crate::history::{
    CheckpointFinal, HistoryWriter, OwnerSample, Phase, Record, Recorder, RunEnd, RunStart,
    UpstreamFinal, Versions,
};
use crate::lease_log::stable::{Stability, Unsettled};
use crate::lease_log::LeaseSource;
use crate::report_json::Report;
use crate::scenario::Scenario;
use crate::sink::Sink;

/// Interval between ownership samples (table scans) for the timeline.
pub const OWNER_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// How often warm-up and settle check their condition.
const POLL: Duration = Duration::from_millis(500);
/// Renew intervals without a change of hands (and with every stream held, no bid open) before
/// the warm-up counts the fleet as settled.
pub const STABLE_RENEWS: u64 = 3;
/// Extra time, beyond a worker's drain, before the final shutdown SIGKILLs it.
const SHUTDOWN_GRACE_EXTRA: Duration = Duration::from_secs(3);
/// Bound on waiting for fault tasks still running at the run's end.
const FAULTS_GRACE: Duration = Duration::from_secs(30);

/// What `harness run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub scenario: PathBuf,
    pub out: PathBuf,
    pub seed: Option<u64>,
    pub dynamodb: dynamodb_local::Mode,
    pub worker_bin: Option<PathBuf>,
    /// The lease table (default `websocket-leases`): a campaign gives each run its own on one
    /// shared endpoint.
    pub table: Option<String>,
    /// No progress line (a campaign prints its own).
    pub quiet: bool,
}

/// Why a run stopped before a verdict.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The scenario or the environment is invalid (exit 2).
    #[error("{0}")]
    Invalid(String),
    /// The run started but could not produce a report (exit 1).
    #[error("{0}")]
    Failed(String),
}

impl RunError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Invalid(_) => 2,
            RunError::Failed(_) => 1,
        }
    }
}

/// Runs the scenario; returns the judged report (exit 0 when `passed`, else 1). `shutdown`
/// ending (Ctrl-C, SIGTERM) aborts the run; every child process is killed on the way out.
pub async fn run(
    options: &RunOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<Report, RunError> {
    let scenario = prepare(options)?;
    crate::faults::check_environment(&scenario).map_err(RunError::Invalid)?;
    let bin = crate::fleet::resolve_worker_bin(options.worker_bin.as_deref())
        .map_err(RunError::Invalid)?;
    let versions = crate::fleet::versions(&bin).await;
    let expected_ms = scenario.run.warmup_ms + scenario.run.duration_ms;
    let progress = if options.quiet {
        crate::report::Progress::plain(
            &scenario.name,
            expected_ms,
            Box::new(std::io::sink()),
            crate::report::PLAIN_INTERVAL,
        )
    } else {
        crate::report::Progress::stderr(&scenario.name, expected_ms)
    };
    progress.set_phase("provisioning DynamoDB");
    let workers_dir = options.out.join("workers");
    std::fs::create_dir_all(&workers_dir)
        .map_err(|e| RunError::Invalid(format!("cannot create {}: {e}", workers_dir.display())))?;
    let ddb_options = dynamodb_local::Options {
        mode: options.dynamodb.clone(),
        ..dynamodb_local::Options::default()
    };
    let ddb = dynamodb_local::DynamoLocal::start(&ddb_options)
        .await
        .map_err(|e| RunError::Invalid(format!("DynamoDB ({}): {e}", options.dynamodb)))?;
    let versions = Versions {
        dynamodb: Some(ddb.describe()),
        ..versions
    };
    let history_path = options.out.join("history.jsonl");
    let writer =
        HistoryWriter::create(&history_path).map_err(|e| RunError::Invalid(e.to_string()))?;
    let recorder = writer.recorder();
    let client = ddb.client();
    let env = Env {
        scenario: &scenario,
        table: options
            .table
            .clone()
            .unwrap_or_else(|| lease_table::DEFAULT_TABLE.to_string()),
        client,
        endpoint: ddb.endpoint().to_string(),
        recorder: recorder.clone(),
        bin,
        versions,
        workers_dir,
        progress: progress.clone(),
    };
    let errors = tokio::select! {
        result = env.execute() => result,
        () = shutdown => Err(RunError::Failed("interrupted: the run was stopped by a signal".into())),
    };
    // Every child process of the run is gone once `execute` is dropped (fleet guard).
    let mut errors = match errors {
        Ok(errors) => errors,
        Err(RunError::Invalid(e)) => return Err(RunError::Invalid(e)),
        Err(RunError::Failed(e)) => vec![e],
    };
    let (cpu_ms, max_rss_bytes) = crate::usage::self_usage();
    recorder.record(Record::RunEnd(RunEnd {
        t_ms: recorder.now_ms(),
        errors: errors.clone(),
        receipts: recorder.receipt_count(),
        harness_cpu_ms: cpu_ms,
        harness_max_rss_bytes: max_rss_bytes,
    }));
    drop(ddb);
    if let Err(e) = writer.finish() {
        errors.push(e.to_string());
        return Err(RunError::Failed(errors.join("; ")));
    }
    let mut report = crate::analysis::analyse_file(&history_path)
        .map_err(|e| RunError::Failed(e.to_string()))?;
    crate::expect::judge(&mut report, &scenario.expectations);
    crate::report::write_reports(&options.out, &report)
        .map_err(|e| RunError::Failed(e.to_string()))?;
    progress.finish(report.passed, &options.out.join(crate::report::HTML_FILE));
    Ok(report)
}

/// Loads the scenario a run is asked for, with `--seed` (when given) in place of its own seed.
pub fn prepare(options: &RunOptions) -> Result<Scenario, RunError> {
    let mut scenario =
        Scenario::load(&options.scenario).map_err(|e| RunError::Invalid(e.to_string()))?;
    if let Some(seed) = options.seed {
        scenario.run.seed = seed;
    }
    Ok(scenario)
}

struct Env<'a> {
    scenario: &'a Scenario,
    table: String,
    client: Client,
    endpoint: String,
    recorder: Recorder,
    bin: PathBuf,
    versions: Versions,
    workers_dir: PathBuf,
    progress: crate::report::Progress,
}

impl Env<'_> {
    fn phase(&self, phase: &str, detail: Option<String>) {
        tracing::info!(phase, detail = detail.as_deref().unwrap_or(""), "run phase");
        self.progress.set_phase(crate::report::phase_label(phase));
        self.recorder.record(Record::Phase(Phase {
            t_ms: self.recorder.now_ms(),
            phase: phase.to_string(),
            detail,
        }));
    }

    /// The run proper; returns the problems that fail it (empty when it completed).
    async fn execute(&self) -> Result<Vec<String>, RunError> {
        let s = self.scenario;
        let table = self.table.as_str();
        let streams = s.stream_ids();
        let invalid =
            |what: &str, e: &dyn std::fmt::Display| RunError::Invalid(format!("{what}: {e}"));
        lease_table::create_table(&self.client, table)
            .await
            .map_err(|e| invalid("creating the lease table", &e))?;
        // Segmented discovery's membership table (`DISCOVERY=segmented`); unused otherwise.
        lease_table::members::create_table(&self.client, &lease_table::members::table_for(table))
            .await
            .map_err(|e| invalid("creating the membership table", &e))?;
        // The timeline's source: the table's stream where the backend has one, else polling.
        let lease_source = crate::lease_log::choose(&self.client, &self.endpoint, table).await;
        self.recorder.record(Record::RunStart(RunStart {
            t_ms: 0,
            wall_ms: lease_table::now_ms() - self.recorder.now_ms() as i64,
            scenario: s.name.clone(),
            description: s.description.clone(),
            seed: s.run.seed,
            lease_ms: s.lease.lease_ms,
            renew_ms: s.lease.renew_ms,
            skew_margin_ms: s.lease.skew_margin_ms,
            workers: s.fleet.workers,
            streams: s.upstream.streams,
            rate: s.upstream.rate,
            duration_ms: s.run.duration_ms,
            fencing: s.fencing,
            versions: self.versions.clone(),
            scenario_text: s.source.clone(),
            lease_source: Some(lease_source.info()),
            stall_threshold_ms: Some(s.run.stall_threshold_ms),
            warmup: true,
        }));
        seed(&self.client, table, &streams)
            .await
            .map_err(|e| invalid("seeding the lease table", &e))?;

        let mut upstream_config = mock_upstream::UpstreamConfig::new(streams.clone());
        upstream_config.rate = s.upstream.rate;
        upstream_config.payload_bytes = s.upstream.payload_bytes;
        upstream_config.retention = s.upstream.retention;
        let (upstream_addr, upstream) = mock_upstream::start(upstream_config)
            .await
            .map_err(|e| invalid("starting the upstream", &e))?;
        let sink = Sink::start(self.recorder.clone(), s.fencing)
            .await
            .map_err(|e| invalid("starting the sink", &e))?;

        let base = WorkerEnv {
            table: table.to_string(),
            lease_ms: s.lease.lease_ms,
            renew_ms: s.lease.renew_ms,
            skew_margin_ms: s.lease.skew_margin_ms,
            upstream_url: format!("ws://{upstream_addr}"),
            sink_url: sink.url(),
            dynamodb_endpoint: self.endpoint.clone(),
        };
        let servers = crate::faults::links::servers(&self.endpoint, upstream_addr, sink.addr())
            .map_err(|e| invalid("the fault links", &e))?;
        let (kit, hooks) = crate::faults::prepare_kit(
            s,
            servers,
            &self.workers_dir,
            sink.faults(),
            upstream.control(),
        )
        .map_err(RunError::Invalid)?;
        let mut config =
            FleetConfig::for_scenario(s, &base, self.bin.clone(), self.workers_dir.clone());
        config.hooks = hooks;
        let fleet = Fleet::new(config, self.recorder.clone());
        let work = self.with_fleet(
            &fleet,
            &sink,
            &upstream,
            &streams,
            Arc::new(kit),
            &lease_source,
        );
        let result = (self.progress)
            .drive(work, || crate::report::Counters {
                elapsed_ms: self.recorder.now_ms(),
                produced: upstream.events_produced(),
                accepted: sink.accepted(),
                takeovers: sink.fence_raises(),
            })
            .await;
        fleet.kill_all();
        sink.stop().await;
        upstream.shutdown().await;
        result
    }

    async fn with_fleet(
        &self,
        fleet: &Fleet,
        sink: &Sink,
        upstream: &mock_upstream::UpstreamHandle,
        streams: &[String],
        kit: Arc<crate::faults::FaultKit>,
        lease_source: &LeaseSource,
    ) -> Result<Vec<String>, RunError> {
        let s = self.scenario;
        let table = self.table.as_str();
        // The lease timeline starts before the first worker, so it sees every grant.
        let _lease_log = AbortOnDrop(lease_source.spawn(
            self.client.clone(),
            table.to_string(),
            self.recorder.clone(),
        ));
        for _ in 0..s.fleet.workers {
            fleet
                .spawn()
                .map_err(|e| RunError::Invalid(e.to_string()))?;
        }
        let sampler = tokio::spawn(sample_owners(
            self.client.clone(),
            self.table.clone(),
            self.recorder.clone(),
        ));
        let _sampler_guard = AbortOnDrop(sampler);
        self.progress.set_phase("warm-up");

        // A failed warm-up still ends like any run (production stopped, final state recorded),
        // so the report's figures describe what happened; only the faults and settle are skipped.
        let warm = self.warm_up(fleet, sink, streams).await;
        let mut errors = match &warm {
            Ok(()) => self.inject_faults(fleet, kit).await,
            Err(e) => {
                self.phase("warmup_failed", Some(e.clone()));
                vec![e.clone()]
            }
        };

        // End: stop production, settle, record the final state, drain the fleet.
        upstream.stop_production();
        let last_seqs = upstream.last_seqs();
        self.phase("production_stopped", None);
        if warm.is_ok() {
            match self.settle(sink, &last_seqs, &upstream.lost_ranges()).await {
                Ok(()) => self.phase("settled", None),
                Err(e) => {
                    self.phase("settle_timeout", Some(e.clone()));
                    errors.push(e);
                }
            }
        }
        for (stream_id, last_seq) in &last_seqs {
            self.recorder.record(Record::UpstreamFinal(UpstreamFinal {
                stream_id: stream_id.clone(),
                last_seq: *last_seq,
            }));
        }
        // From here on every worker exit is the harness's doing.
        self.phase(crate::analysis::FLEET_STOP_PHASE, None);
        let grace =
            Duration::from_millis(s.fleet.drain_ms.unwrap_or(20_000)) + SHUTDOWN_GRACE_EXTRA;
        let killed = fleet.shutdown(grace).await;
        self.phase(
            "drained",
            (!killed.is_empty())
                .then(|| format!("SIGKILLed after {grace:?}: {}", killed.join(", "))),
        );
        // Read after the drain, so the checkpoints its final batches wrote are checked too.
        match lease_table::scan_all(&self.client, table).await {
            Ok(items) => {
                for item in items {
                    self.recorder
                        .record(Record::CheckpointFinal(CheckpointFinal {
                            stream_id: item.stream_id,
                            owner_id: item.owner_id,
                            fence_token: item.fence_token,
                            checkpoint: item.checkpoint,
                        }));
                }
            }
            Err(e) => errors.push(format!("reading the final table state: {e}")),
        }
        Ok(errors)
    }

    /// Runs the fault schedule for `duration_ms` from now; returns the problems met.
    async fn inject_faults(&self, fleet: &Fleet, kit: Arc<crate::faults::FaultKit>) -> Vec<String> {
        let s = self.scenario;
        let table = self.table.as_str();

        // Faults, each on its own task so a pause or a deploy does not hold up the next one.
        let injector = Injector {
            fleet: fleet.clone(),
            client: self.client.clone(),
            table: table.to_string(),
            recorder: self.recorder.clone(),
            errors: Arc::new(Mutex::new(Vec::new())),
            kit,
        };
        let start = Instant::now();
        let draws = crate::faults::draws(s.run.seed, s.faults.len());
        let mut tasks = Vec::new();
        for (index, (fault, draw)) in s.faults.iter().zip(draws).enumerate() {
            let injector = injector.clone();
            let fault = fault.clone();
            let (progress, count) = (self.progress.clone(), s.faults.len());
            tasks.push(AbortOnDrop(tokio::spawn(async move {
                tokio::time::sleep_until(start + Duration::from_millis(fault.at_ms)).await;
                progress.set_phase(format!("fault {} of {count}", index + 1));
                injector.inject(index, &fault, draw).await;
            })));
        }
        tokio::time::sleep_until(start + Duration::from_millis(s.run.duration_ms)).await;
        let pending = tasks.iter().filter(|t| !t.0.is_finished()).count();
        if pending > 0 {
            let all = futures_util::future::join_all(tasks.iter_mut().map(|t| &mut t.0));
            if tokio::time::timeout(FAULTS_GRACE, all).await.is_err() {
                injector
                    .errors
                    .lock()
                    .expect("errors lock poisoned")
                    .push(format!(
                        "faults still running {FAULTS_GRACE:?} after the run's end"
                    ));
            }
        }
        drop(tasks);
        // Faults without a duration last until here: heal them so the run can settle.
        injector.heal_everything();
        self.phase("faults_done", None);
        let errors = injector
            .errors
            .lock()
            .expect("errors lock poisoned")
            .clone();
        errors
    }

    /// Waits until every stream has accepted traffic and ownership has settled (every stream
    /// held, no open bid, no change of hands for [`STABLE_RENEWS`] renew intervals), within
    /// `warmup_ms`.
    async fn warm_up(&self, fleet: &Fleet, sink: &Sink, streams: &[String]) -> Result<(), String> {
        let s = self.scenario;
        let deadline = Instant::now() + Duration::from_millis(s.run.warmup_ms);
        let window_ms = STABLE_RENEWS * s.lease.renew_ms;
        let mut stability = Stability::default();
        loop {
            // The sink is free to ask; the table is only scanned once every stream flows (or at
            // the deadline, for the message), so warm-up adds no load to a busy DynamoDB Local.
            let flowing = sink.streams_with_traffic();
            let silent: Vec<&str> = streams
                .iter()
                .filter(|id| !flowing.contains(*id))
                .map(String::as_str)
                .collect();
            let expired = Instant::now() >= deadline;
            let settled = if silent.is_empty() || expired {
                let rows = crate::lease_log::scan_consistent(&self.client, &self.table)
                    .await
                    .map_err(|e| format!("warm-up: reading the lease table: {e}"))?;
                let (t_ms, wall_ms) = (self.recorder.now_ms(), lease_table::now_ms());
                stability.observe(&rows, t_ms, wall_ms, s.lease.lease_ms, window_ms)
            } else {
                Err(Unsettled::Unowned(Vec::new()))
            };
            if silent.is_empty() && settled.is_ok() {
                self.phase("warmup_done", None);
                return Ok(());
            }
            if fleet.alive().is_empty() {
                return Err(format!(
                    "warm-up: every worker exited; see the logs in {}",
                    self.workers_dir.display()
                ));
            }
            if expired {
                let sample = |v: &[&str]| v.iter().take(5).copied().collect::<Vec<_>>().join(", ");
                let unsettled = match &settled {
                    Ok(()) => "ownership had settled".to_string(),
                    Err(Unsettled::Unowned(ids)) => format!(
                        "{} streams had no owner ({})",
                        ids.len(),
                        sample(&ids.iter().map(String::as_str).collect::<Vec<_>>())
                    ),
                    Err(Unsettled::OpenBids(ids)) => format!(
                        "{} streams carried an open bid ({}): the fleet was still balancing",
                        ids.len(),
                        sample(&ids.iter().map(String::as_str).collect::<Vec<_>>())
                    ),
                    Err(Unsettled::Recent { ago_ms }) => format!(
                        "a stream changed hands {ago_ms} ms before the end (settled needs {window_ms} ms without a change)"
                    ),
                };
                return Err(format!(
                    "warm-up did not complete within {} s: {unsettled}, and {} of {} streams had no accepted traffic ({}); see the worker logs in {}",
                    s.run.warmup_ms as f64 / 1000.0,
                    silent.len(),
                    streams.len(),
                    sample(&silent),
                    self.workers_dir.display()
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the sink's accepted high-water reaches the last sequence of every stream
    /// (the events an upstream gap fault lost, `lost`, never come: they count as reached).
    async fn settle(
        &self,
        sink: &Sink,
        last_seqs: &BTreeMap<String, u64>,
        lost: &BTreeMap<String, Vec<(u64, u64)>>,
    ) -> Result<(), String> {
        let mark = |id: &str| sink.high_water_past(id, lost.get(id).map_or(&[][..], Vec::as_slice));
        let limit = Duration::from_millis(self.scenario.run.settle_timeout_ms);
        let deadline = Instant::now() + limit;
        let mut behind: HashSet<&String> = last_seqs.keys().collect();
        loop {
            behind.retain(|id| mark(id) < last_seqs[*id]);
            if behind.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let mut sample: Vec<String> = behind
                    .iter()
                    .map(|id| format!("{id} at {} of {}", mark(id), last_seqs[*id]))
                    .collect();
                sample.sort();
                sample.truncate(5);
                return Err(format!(
                    "settle: {} streams did not reach their last sequence within {limit:?} ({})",
                    behind.len(),
                    sample.join(", ")
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Seeds the streams with a few concurrent writers (2,000 sequential puts would take seconds).
async fn seed(
    client: &Client,
    table: &str,
    streams: &[String],
) -> Result<(), lease_table::TableError> {
    let chunk = streams.len().div_ceil(16).max(1);
    let seeds = streams
        .chunks(chunk)
        .map(|c| lease_table::seed_streams(client, table, c));
    for result in futures_util::future::join_all(seeds).await {
        result?;
    }
    Ok(())
}

/// Records who owns how many streams, every [`OWNER_SAMPLE_INTERVAL`] or four times as long as a
/// scan takes, whichever is longer (so sampling a large table never loads DynamoDB Local much),
/// until aborted.
async fn sample_owners(client: Client, table: String, recorder: Recorder) {
    loop {
        let started = Instant::now();
        if let Ok(items) = lease_table::scan_all(&client, &table).await {
            let now = lease_table::now_ms();
            let mut owners = BTreeMap::new();
            let mut free = 0;
            for item in &items {
                match &item.owner_id {
                    Some(owner) if item.is_held_at(now) => {
                        *owners.entry(owner.clone()).or_default() += 1
                    }
                    _ => free += 1,
                }
            }
            recorder.record(Record::OwnerSample(OwnerSample {
                t_ms: recorder.now_ms(),
                owners,
                free,
            }));
        }
        let pause = OWNER_SAMPLE_INTERVAL.max(started.elapsed() * 4);
        tokio::time::sleep_until(started + pause).await;
    }
}

/// Aborts a task when dropped, so no task of a run outlives it.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests;
