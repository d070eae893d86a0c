//! `harness campaign` flags, and their resolution into the generator's settings
//! ([`CampaignArgs::plan`]): two stages, as ripgrep does (raw flags, then a checked plan).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;

use super::kinds::{self, DrawBounds};
use super::schedule::GenConfig;

/// `harness campaign`: randomized, seeded fault schedules, many runs, each judged; failures
/// shrunk to the smallest schedule that still fails.
///
/// Run I of seed S draws its schedule (fault kinds, times, targets, durations) from (S, I)
/// alone: `DIR/runs/NNN/scenario.toml` is that schedule as a scenario file, and
/// `harness run --replay DIR/runs/NNN --out OUT` runs it again. Every run is judged on the
/// safety and liveness set (gaps, stale or superseded writes accepted, late writes, checkpoint
/// ahead, stalled streams, worker crashes: whichever the report computes) plus a takeover
/// bound. A violating run keeps its whole directory; a passing one keeps report.json,
/// history.jsonl and scenario.toml (`--keep reports`: no history). Writes DIR/campaign.json,
/// campaign.md and campaign.html; exit 0 when every run passed, 1 on any violation, 2 when the
/// flags or the environment are invalid, 130 when interrupted (Ctrl-C finishes the run in
/// progress and writes the summary; a second Ctrl-C stops at once).
///
/// Example, before a release: harness campaign --runs 100 --seed 1 --out reports/campaign
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct CampaignArgs {
    /// How many runs.
    #[arg(long, default_value_t = 8)]
    pub runs: u32,
    /// The campaign seed: with the run index, it decides every run's schedule.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output directory (created if missing): campaign.json/md/html and runs/NNN/.
    #[arg(long)]
    pub out: PathBuf,
    /// Fault kinds to draw from, comma-separated (default: every kind the harness supports).
    #[arg(long, value_name = "KINDS", default_value_t = kinds::names())]
    pub faults: String,
    /// Faults per run, `MIN-MAX` or one number.
    #[arg(long, value_name = "MIN-MAX", default_value = "1-3")]
    pub faults_per_run: String,
    /// Most faults active at the same instant.
    #[arg(long, default_value_t = 2)]
    pub max_overlap: usize,
    /// Length of a pause (and any fault with a window), `MIN-MAX` seconds
    /// (default: half the lease to twice the lease plus one second).
    #[arg(long, value_name = "MIN-MAX")]
    pub fault_seconds: Option<String>,
    /// stopTimeout of terminate and rolling_deploy, seconds.
    #[arg(long, default_value_t = 4.0)]
    pub stop_timeout_seconds: f64,
    /// LEASE_SECONDS of every worker (short leases pack more runs into the time).
    #[arg(long, default_value_t = 2.0)]
    pub lease_seconds: f64,
    /// RENEW_SECONDS of every worker (below the lease).
    #[arg(long, default_value_t = 0.5)]
    pub renew_seconds: f64,
    /// DRAIN_SECONDS of every worker.
    #[arg(long, default_value_t = 2.0)]
    pub drain_seconds: f64,
    /// Workers at the start of each run.
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// Streams of the upstream.
    #[arg(long, default_value_t = 10)]
    pub streams: usize,
    /// Events per second per stream.
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// The fault phase of each run, seconds (faults fall inside it).
    #[arg(long, default_value_t = 12.0)]
    pub duration_seconds: f64,
    /// Upper bound on each run's warm-up, seconds.
    #[arg(long, default_value_t = 20.0)]
    pub warmup_seconds: f64,
    /// Upper bound on each run's settle, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub settle_seconds: f64,
    /// A fault-caused takeover slower than the lease plus this many seconds is a violation.
    #[arg(long, default_value_t = 3.0)]
    pub takeover_slack_seconds: f64,
    /// What a passing run keeps: `history` (report.json, history.jsonl, scenario.toml) or
    /// `reports` (report.json, scenario.toml). A violating run keeps everything.
    #[arg(long, default_value = "history", value_parser = ["history", "reports"])]
    pub keep: String,
    /// Runs each failure may spend on shrinking (0: do not shrink).
    #[arg(long, default_value_t = 12)]
    pub shrink_runs: usize,
    /// Failures shrunk (the first ones; the others keep their full schedule).
    #[arg(long, default_value_t = 3)]
    pub shrink_failures: usize,
    /// Extra environment for every worker, KEY=VALUE (repeatable), e.g. the negative control
    /// CHAOS_SKIP_DEADLINE_CHECK=true.
    #[arg(long = "worker-env", value_name = "KEY=VALUE")]
    pub worker_env: Vec<String>,
    /// Run the sink without fencing (a negative control: shows what fencing prevents).
    #[arg(long)]
    pub no_fencing: bool,
    /// auto | container | jar | endpoint=URL: provisioned once for the whole campaign, a fresh
    /// table per run.
    #[arg(long, default_value = "auto", env = dynamodb_local::ENV_MODE)]
    pub dynamodb: String,
    /// Start a fresh DynamoDB Local every N runs (0: never; never for `endpoint=URL`). One
    /// instance slows down as a campaign's tables come and go: the harness's overhead per run
    /// grew from about 3 s to 21 s over 96 runs on 2026-12-03.
    #[arg(long, default_value_t = 25, value_name = "N")]
    pub restart_dynamodb_every: u32,
    /// The lease-worker executable (default: beside this harness).
    #[arg(long)]
    pub worker_bin: Option<PathBuf>,
}

/// `2-5` → (2, 5); `3` → (3, 3).
fn range<T: std::str::FromStr + PartialOrd + Copy>(
    flag: &str,
    text: &str,
) -> Result<(T, T), String> {
    let bad = || format!("--{flag} {text:?}: expected MIN-MAX (e.g. 1-3) or one number");
    let (lo, hi) = match text.split_once('-') {
        Some((lo, hi)) => (lo.trim(), hi.trim()),
        None => (text.trim(), text.trim()),
    };
    let lo: T = lo.parse().map_err(|_| bad())?;
    let hi: T = hi.parse().map_err(|_| bad())?;
    if hi < lo {
        return Err(format!("--{flag} {text:?}: MIN is above MAX"));
    }
    Ok((lo, hi))
}

fn ms(flag: &str, seconds: f64) -> Result<u64, String> {
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err(format!(
            "--{flag} {seconds}: must be a positive number of seconds"
        ));
    }
    Ok((seconds * 1000.0).round() as u64)
}

impl CampaignArgs {
    /// The generator's settings, or a message naming the bad flag and value.
    pub fn plan(&self) -> Result<GenConfig, String> {
        let kinds = kinds::parse_list(&self.faults).map_err(|e| format!("--faults: {e}"))?;
        let faults = range::<usize>("faults-per-run", &self.faults_per_run)?;
        let lease_ms = ms("lease-seconds", self.lease_seconds)?;
        let renew_ms = ms("renew-seconds", self.renew_seconds)?;
        if renew_ms >= lease_ms {
            return Err(format!(
                "--renew-seconds {} must be below --lease-seconds {}",
                self.renew_seconds, self.lease_seconds
            ));
        }
        let window_ms = match &self.fault_seconds {
            Some(text) => {
                let (lo, hi) = range::<f64>("fault-seconds", text)?;
                (ms("fault-seconds", lo)?, ms("fault-seconds", hi)?)
            }
            None => (lease_ms / 2, lease_ms * 2 + 1000),
        };
        if self.workers < 2 {
            return Err(format!(
                "--workers {}: a campaign needs at least 2 (one is always left to take over)",
                self.workers
            ));
        }
        if self.streams == 0 {
            return Err("--streams 0: a run needs at least one stream".into());
        }
        if self.max_overlap == 0 {
            return Err("--max-overlap 0: must be at least 1".into());
        }
        let mut env = BTreeMap::new();
        for pair in &self.worker_env {
            let (k, v) = pair
                .split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| format!("--worker-env {pair:?}: expected KEY=VALUE"))?;
            env.insert(k.to_string(), v.to_string());
        }
        Ok(GenConfig {
            seed: self.seed,
            kinds,
            faults,
            max_overlap: self.max_overlap,
            bounds: DrawBounds {
                window_ms,
                stop_timeout_ms: ms("stop-timeout-seconds", self.stop_timeout_seconds)?,
                streams: self.streams,
                lease_ms,
            },
            lease_ms,
            renew_ms,
            workers: self.workers,
            streams: self.streams,
            rate: self.rate,
            warmup_ms: ms("warmup-seconds", self.warmup_seconds)?,
            duration_ms: ms("duration-seconds", self.duration_seconds)?,
            settle_ms: ms("settle-seconds", self.settle_seconds)?,
            drain_ms: ms("drain-seconds", self.drain_seconds)?,
            fencing: !self.no_fencing,
            env,
            expect: super::default_expect(),
        })
    }

    /// The takeover bound, ms: lease plus slack.
    pub fn takeover_bound_ms(&self) -> u64 {
        (self.lease_seconds * 1000.0 + self.takeover_slack_seconds * 1000.0).round() as u64
    }
}
