//! What a fleet starts its workers with: the executable, the log directory, and each worker's
//! environment — the settings every run and bench lab sets ([`WorkerEnv`]), the scenario's
//! `[fleet]` options, and the variables the harness always clears so the caller's shell cannot
//! change a run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use lease_protocol::settings;

use crate::scenario::Scenario;

/// AWS SDK variables the harness replaces: a run talks to DynamoDB Local with local
/// credentials, never with the caller's profile or session.
const AWS_CREDENTIALS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
];

/// libfaketime's settings: only a scenario's clock faults set them (see `faults::clock`).
const FAKETIME: &[&str] = &[
    "FAKETIME",
    "FAKETIME_TIMESTAMP_FILE",
    "FAKETIME_NO_CACHE",
    "FAKETIME_DONT_FAKE_MONOTONIC",
];

/// Every variable removed from a worker's inherited environment before the run's own are set,
/// so the caller's shell cannot change a run: each worker setting
/// ([`lease_protocol::settings::ALL`], so a new setting is covered without touching this list)
/// and the AWS credentials.
pub fn managed_env() -> impl Iterator<Item = &'static str> {
    settings::ALL
        .iter()
        .chain(AWS_CREDENTIALS)
        .chain(FAKETIME)
        .copied()
}

/// Adds to a worker's environment as it is spawned: its link proxies, its clock. A run installs
/// one only for the faults its scenario has, so a run without them pays nothing.
pub trait SpawnHook: Send + Sync + std::fmt::Debug {
    /// Extra environment for `worker` (set last, over everything else).
    fn env(&self, worker: &str) -> anyhow::Result<Vec<(String, String)>>;
}

/// How a fleet starts its workers.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The `lease-worker` executable.
    pub bin: PathBuf,
    /// Where `worker-N.log` and `worker-N.addr` go.
    pub dir: PathBuf,
    /// Environment for every worker (on top of the managed defaults).
    pub env: BTreeMap<String, String>,
    /// Extra environment per worker name.
    pub worker_env: BTreeMap<String, BTreeMap<String, String>>,
    /// Command-line arguments (none for `lease-worker`, which reads its environment).
    pub args: Vec<String>,
    /// Environment added per worker at spawn (fault machinery).
    pub hooks: Vec<Arc<dyn SpawnHook>>,
}

impl FleetConfig {
    /// The fleet a scenario asks for: `base` plus its `[fleet]` options, then its own `env` on
    /// top (a scenario may override anything), and its `worker_env` per worker.
    pub fn for_scenario(
        scenario: &Scenario,
        base: &WorkerEnv,
        bin: PathBuf,
        dir: PathBuf,
    ) -> FleetConfig {
        let fleet = &scenario.fleet;
        let mut env = base.env();
        if let Some(max) = fleet.max_streams {
            env.insert(settings::MAX_STREAMS.into(), max.to_string());
        }
        if let Some(ms) = fleet.drain_ms {
            env.insert(settings::DRAIN_SECONDS.into(), seconds(ms));
        }
        if let Some(ms) = fleet.scan_ms {
            env.insert(settings::SCAN_SECONDS.into(), seconds(ms));
        }
        if let Some(mode) = &fleet.acquire_mode {
            env.insert(settings::ACQUIRE_MODE.into(), mode.clone());
        }
        env.extend(fleet.env.clone());
        FleetConfig {
            bin,
            dir,
            env,
            worker_env: fleet.worker_env.clone(),
            args: Vec::new(),
            hooks: Vec::new(),
        }
    }
}

/// The settings every worker of a run or a bench lab gets: the table, the lease timing, where
/// the upstream, the sink and DynamoDB Local are, and local credentials.
#[derive(Debug, Clone)]
pub struct WorkerEnv {
    pub table: String,
    pub lease_ms: u64,
    pub renew_ms: u64,
    pub skew_margin_ms: u64,
    pub upstream_url: String,
    pub sink_url: String,
    pub dynamodb_endpoint: String,
}

impl WorkerEnv {
    /// The environment variables, by name.
    pub fn env(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (settings::LEASE_TABLE.to_string(), self.table.clone()),
            (settings::LEASE_SECONDS.to_string(), seconds(self.lease_ms)),
            (settings::RENEW_SECONDS.to_string(), seconds(self.renew_ms)),
            (
                settings::SKEW_MARGIN_MS.to_string(),
                self.skew_margin_ms.to_string(),
            ),
            (
                settings::UPSTREAM_URL.to_string(),
                self.upstream_url.clone(),
            ),
            (settings::SINK_URL.to_string(), self.sink_url.clone()),
            (
                settings::AWS_ENDPOINT_URL.to_string(),
                self.dynamodb_endpoint.clone(),
            ),
            ("AWS_ACCESS_KEY_ID".to_string(), "local".to_string()),
            ("AWS_SECRET_ACCESS_KEY".to_string(), "local".to_string()),
            (settings::AWS_REGION.to_string(), "us-east-1".to_string()),
        ])
    }
}

/// Milliseconds as the worker's `*_SECONDS` settings take them (`1500` → `1.5`).
fn seconds(ms: u64) -> String {
    format!("{}", ms as f64 / 1000.0)
}
