//! The worker's configuration: flags with environment fallbacks (design §6), defaults as named
//! constants, and validation that refuses impossible settings at start with one clear line.
//!
//! Raw flags are strings so that every refusal is ours, names the variable and the value, and
//! fits on one line. This module never opens a socket, except to ask the ECS task metadata
//! endpoint for the task ARN when `OWNER_ID` is not set. Which CAs `wss://` and `https://`
//! trust is in [`tls`].

pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use lease_protocol::settings;

/// Every environment variable the worker reads itself (the AWS SDK reads its own as well).
///
/// A new setting is one line in [`lease_protocol::settings`], then `env = settings::NAME` on its
/// flag below; `every_flag_reads_a_listed_setting` (tests/cli.rs) checks the two agree.
pub const ENV_VARS: &[&str] = settings::ALL;

/// Set by ECS in every container: base URL of the task metadata endpoint v4.
pub const ECS_METADATA_ENV: &str = settings::ECS_CONTAINER_METADATA_URI_V4;

pub const DEFAULT_LEASE_SECONDS: &str = "30";
pub const DEFAULT_RENEW_SECONDS: &str = "10";
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:9090";
pub const DEFAULT_DRAIN_SECONDS: &str = "20";
pub const DEFAULT_SKEW_MARGIN_MS: &str = "200";
pub const DEFAULT_BATCH_MAX_EVENTS: &str = "100";
pub const DEFAULT_BATCH_MAX_DELAY_MS: &str = "20";
pub const DEFAULT_FLEET_POLL_MS: &str = "50";
/// The upstream liveness deadline: a socket silent this long (no event, ping or pong) is
/// dropped and reopened from the highest sequence taken + 1. The worker pings after a third of
/// it in silence, so a live but quiet upstream answers in time.
pub const DEFAULT_UPSTREAM_IDLE_MS: &str = "5000";
/// A sink's permanent rejection halts the stream unless dead-lettering is asked for.
pub const DEFAULT_SINK_REJECT_POLICY: &str = "halt";
/// The shortest liveness deadline accepted (a ping and its pong must fit in a third of it).
pub const MIN_UPSTREAM_IDLE: Duration = Duration::from_millis(300);
/// The local deadline ends `lease / SAFETY_DIVISOR` (at most [`MAX_SAFETY_MARGIN`]) before the lease.
pub const SAFETY_DIVISOR: u32 = 10;
pub const MAX_SAFETY_MARGIN: Duration = Duration::from_secs(1);

/// Shown at the end of `--help`: where the CAs for `wss://` and `https://` come from.
pub const TLS_HELP: &str =
    "TLS: wss:// upstreams and https:// sinks verify the server against the system CA \
store (/etc/ssl/certs). Set SSL_CERT_FILE (a PEM bundle) or SSL_CERT_DIR to trust other CAs: when \
either is set, only the certificates there are trusted, not the system store.";

/// `lease-worker`: owns WebSocket streams through DynamoDB leases and publishes them to a fenced sink.
#[derive(Debug, Parser)]
#[command(
    name = "lease-worker",
    version,
    about,
    args_conflicts_with_subcommands = true,
    after_help = TLS_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RawConfig,
}

/// Subcommands besides the default (run the worker).
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Exit 0 when the worker's /readyz answers 200 (for container health checks), else 1.
    Health {
        /// Address of the worker's metrics listener; defaults to METRICS_ADDR with 0.0.0.0 → 127.0.0.1.
        #[arg(long, env = settings::METRICS_ADDR, default_value = DEFAULT_METRICS_ADDR)]
        addr: String,
    },
}

/// Flags as given (strings), before validation.
#[derive(Debug, Clone, Args)]
pub struct RawConfig {
    /// DynamoDB lease table.
    #[arg(long, env = settings::LEASE_TABLE, default_value = lease_table::DEFAULT_TABLE)]
    pub lease_table: String,
    /// This worker's identity in the table; unique per process [default: ECS task ARN, else
    /// host name, pid and a random suffix].
    #[arg(long, env = settings::OWNER_ID)]
    pub owner_id: Option<String>,
    /// Lease length in seconds (fractions allowed).
    #[arg(long, env = settings::LEASE_SECONDS, default_value = DEFAULT_LEASE_SECONDS)]
    pub lease_seconds: String,
    /// Renew interval in seconds; must be shorter than the lease minus its safety margin.
    #[arg(long, env = settings::RENEW_SECONDS, default_value = DEFAULT_RENEW_SECONDS)]
    pub renew_seconds: String,
    /// Upstream WebSocket base URL (ws:// or wss://HOST:PORT); streams are at /streams/{id}?from=SEQ.
    #[arg(long, env = settings::UPSTREAM_URL)]
    pub upstream_url: Option<String>,
    /// Sink base URL (http:// or https://HOST:PORT); batches go to POST /streams/{id}/events.
    #[arg(long, env = settings::SINK_URL)]
    pub sink_url: Option<String>,
    /// Most streams this worker holds [default: no limit besides the fair share].
    #[arg(long, env = settings::MAX_STREAMS)]
    pub max_streams: Option<String>,
    /// AWS region for DynamoDB [default: the SDK's chain].
    #[arg(long, env = settings::AWS_REGION)]
    pub aws_region: Option<String>,
    /// DynamoDB endpoint override (DynamoDB Local) [default: the SDK's chain].
    #[arg(long, env = settings::AWS_ENDPOINT_URL)]
    pub aws_endpoint_url: Option<String>,
    /// Listener for /metrics, /healthz and /readyz (port 0 = any free port).
    #[arg(long, env = settings::METRICS_ADDR, default_value = DEFAULT_METRICS_ADDR)]
    pub metrics_addr: String,
    /// After binding, write the bound IP:PORT into this file (atomically).
    #[arg(long, env = settings::METRICS_ADDR_FILE)]
    pub metrics_addr_file: Option<PathBuf>,
    /// Seconds allowed for a drain on SIGTERM/SIGINT (keep under ECS's stopTimeout).
    #[arg(long, env = settings::DRAIN_SECONDS, default_value = DEFAULT_DRAIN_SECONDS)]
    pub drain_seconds: String,
    /// Clock-skew margin in milliseconds added before trying an expired lease.
    #[arg(long, env = settings::SKEW_MARGIN_MS, default_value = DEFAULT_SKEW_MARGIN_MS)]
    pub skew_margin_ms: String,
    /// How often (ms) to read the fleet signal, which announces graceful releases (drains,
    /// sheds) so they are taken at once: one small eventually consistent GetItem each time
    /// (50 ms: 72,000 a worker-hour). 0 = never (released streams wait for the next scan).
    #[arg(long, env = settings::FLEET_POLL_MS, default_value = DEFAULT_FLEET_POLL_MS)]
    pub fleet_poll_ms: String,
    /// Upstream liveness deadline in milliseconds: a socket silent this long (no event, ping or
    /// pong; the worker pings after a third of it) is reopened from the last sequence taken + 1.
    /// 0 = never (a half-open socket then stalls its stream until the lease is lost).
    #[arg(long, env = settings::UPSTREAM_IDLE_MS, default_value = DEFAULT_UPSTREAM_IDLE_MS)]
    pub upstream_idle_ms: String,
    /// What a sink's permanent rejection of a batch (a 4xx other than 409, 408, 429) does:
    /// `halt` keeps the lease and retries that batch with a capped backoff, the stream stopped
    /// at its last accepted event; `dead-letter` writes the batch into DEAD_LETTER_DIR, records
    /// the skipped range and continues.
    #[arg(long, env = settings::SINK_REJECT_POLICY, default_value = DEFAULT_SINK_REJECT_POLICY)]
    pub sink_reject_policy: String,
    /// Directory for dead-lettered batches (required with SINK_REJECT_POLICY=dead-letter).
    #[arg(long, env = settings::DEAD_LETTER_DIR)]
    pub dead_letter_dir: Option<PathBuf>,
    /// Discovery scan interval in seconds [default: RENEW_SECONDS].
    #[arg(long, env = settings::SCAN_SECONDS)]
    pub scan_seconds: Option<String>,
    /// `expiry-aware` (try a held lease right when it expires) or `poll` (scan only).
    #[arg(long, env = settings::ACQUIRE_MODE, default_value = "expiry-aware")]
    pub acquire_mode: String,
    /// `full` (every worker scans the whole lease table) or `segmented` (each scans its own
    /// segment and one other, and reads the membership table MEMBERS_TABLE: discovery's reads
    /// stay flat as the fleet grows; see the README's "Discovery at scale").
    #[arg(long, env = settings::DISCOVERY, default_value = "full")]
    pub discovery: String,
    /// The membership table of segmented discovery [default: LEASE_TABLE-members].
    #[arg(long, env = settings::MEMBERS_TABLE)]
    pub members_table: Option<String>,
    /// TEST ONLY: skip the local-deadline check (a zombie writer for the harness). Never in production.
    #[arg(long, env = settings::CHAOS_SKIP_DEADLINE_CHECK, default_value = "false")]
    pub chaos_skip_deadline_check: String,
    /// Log format: `text` or `json` (one object a line).
    #[arg(long, env = settings::LOG_FORMAT, default_value = "text")]
    pub log_format: String,
    /// Most events in one sink batch.
    #[arg(long, env = settings::BATCH_MAX_EVENTS, default_value = DEFAULT_BATCH_MAX_EVENTS)]
    pub batch_max_events: String,
    /// Longest an event waits in a batch before it is sent, in milliseconds.
    #[arg(long, env = settings::BATCH_MAX_DELAY_MS, default_value = DEFAULT_BATCH_MAX_DELAY_MS)]
    pub batch_max_delay_ms: String,
}

/// How the worker finds leases to acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireMode {
    /// Remember when held leases expire and try right then.
    ExpiryAware,
    /// The source design's plain polling: only scans find candidates.
    Poll,
}

/// How the worker discovers streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discovery {
    /// Every worker scans the whole lease table.
    Full,
    /// Each worker scans its own segment of the lease table and one other; live owners and
    /// their counts come from this membership table.
    Segmented { members_table: String },
}

/// What a sink's permanent rejection (4xx other than 409, 408, 429) of a batch does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RejectPolicy {
    /// Keep the lease, stop the stream at its last accepted event, retry the batch with a capped
    /// backoff (a fixed sink may accept it later).
    Halt,
    /// Write the batch into this directory, record the skipped range, continue.
    DeadLetter(PathBuf),
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub table: String,
    /// `None` until resolved by [`resolve_owner_id`].
    pub owner_id: Option<String>,
    pub lease: Duration,
    pub renew: Duration,
    pub safety_margin: Duration,
    pub upstream_url: String,
    pub sink_url: String,
    pub max_streams: usize,
    pub aws_region: Option<String>,
    pub aws_endpoint_url: Option<String>,
    pub metrics_addr: SocketAddr,
    pub metrics_addr_file: Option<PathBuf>,
    pub drain: Duration,
    pub skew_margin: Duration,
    /// Fleet signal read interval; zero = not read.
    pub fleet_poll: Duration,
    /// Upstream liveness deadline; zero = none.
    pub upstream_idle: Duration,
    pub sink_reject: RejectPolicy,
    pub scan: Duration,
    pub acquire_mode: AcquireMode,
    pub discovery: Discovery,
    pub chaos_skip_deadline_check: bool,
    pub log_format: LogFormat,
    pub batch_max_events: usize,
    pub batch_max_delay: Duration,
}

/// A refused setting; the message names the variable, the value and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn refuse(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

fn seconds(name: &str, value: &str) -> Result<Duration, ConfigError> {
    let parsed: f64 = value.trim().parse().map_err(|_| {
        refuse(format!(
            "{name}={value:?} is not a number of seconds (e.g. 30 or 2.5)"
        ))
    })?;
    if !parsed.is_finite() || parsed <= 0.0 || parsed > 86_400.0 {
        return Err(refuse(format!(
            "{name}={value:?} must be a positive number of seconds, at most 86400"
        )));
    }
    Ok(Duration::from_secs_f64(parsed))
}

fn millis(name: &str, value: &str, allow_zero: bool) -> Result<Duration, ConfigError> {
    let parsed: u64 = value.trim().parse().map_err(|_| {
        refuse(format!(
            "{name}={value:?} is not a whole number of milliseconds"
        ))
    })?;
    if !allow_zero && parsed == 0 {
        return Err(refuse(format!("{name}={value:?} must be positive")));
    }
    Ok(Duration::from_millis(parsed))
}

fn count(name: &str, value: &str) -> Result<usize, ConfigError> {
    match value.trim().parse::<usize>() {
        Ok(0) => Err(refuse(format!("{name}={value:?} must be at least 1"))),
        Ok(n) => Ok(n),
        Err(_) => Err(refuse(format!(
            "{name}={value:?} is not a positive whole number"
        ))),
    }
}

fn url(name: &str, value: Option<&str>, schemes: &[&str]) -> Result<String, ConfigError> {
    let value = value.ok_or_else(|| {
        refuse(format!(
            "{name} is required (e.g. {}://127.0.0.1:9001)",
            schemes[0]
        ))
    })?;
    let parsed = reqwest::Url::parse(value)
        .map_err(|e| refuse(format!("{name}={value:?} is not a URL: {e}")))?;
    if !schemes.contains(&parsed.scheme()) || parsed.host_str().is_none() {
        return Err(refuse(format!(
            "{name}={value:?} must be a {}:// URL with a host",
            schemes.join(":// or ")
        )));
    }
    Ok(value.trim_end_matches('/').to_string())
}

impl RawConfig {
    /// Validates every setting; the first refusal wins.
    pub fn validate(&self) -> Result<Config, ConfigError> {
        let lease = seconds("LEASE_SECONDS", &self.lease_seconds)?;
        let renew = seconds("RENEW_SECONDS", &self.renew_seconds)?;
        if renew >= lease {
            return Err(refuse(format!(
                "RENEW_SECONDS={} must be shorter than LEASE_SECONDS={}",
                self.renew_seconds, self.lease_seconds
            )));
        }
        let safety_margin = (lease / SAFETY_DIVISOR).min(MAX_SAFETY_MARGIN);
        if renew >= lease - safety_margin {
            return Err(refuse(format!(
                "RENEW_SECONDS={} must be shorter than LEASE_SECONDS={} minus the {} ms safety margin",
                self.renew_seconds,
                self.lease_seconds,
                safety_margin.as_millis()
            )));
        }
        let scan = match &self.scan_seconds {
            Some(s) => seconds("SCAN_SECONDS", s)?,
            None => renew,
        };
        let drain = seconds("DRAIN_SECONDS", &self.drain_seconds)?;
        let skew_margin = millis("SKEW_MARGIN_MS", &self.skew_margin_ms, true)?;
        let fleet_poll = millis("FLEET_POLL_MS", &self.fleet_poll_ms, true)?;
        let upstream_idle = millis("UPSTREAM_IDLE_MS", &self.upstream_idle_ms, true)?;
        if !upstream_idle.is_zero() && upstream_idle < MIN_UPSTREAM_IDLE {
            return Err(refuse(format!(
                "UPSTREAM_IDLE_MS={} must be 0 (off) or at least {} ms",
                self.upstream_idle_ms,
                MIN_UPSTREAM_IDLE.as_millis()
            )));
        }
        let batch_max_delay = millis("BATCH_MAX_DELAY_MS", &self.batch_max_delay_ms, true)?;
        let batch_max_events = count("BATCH_MAX_EVENTS", &self.batch_max_events)?;
        let max_streams = match &self.max_streams {
            Some(m) => count("MAX_STREAMS", m)?,
            None => usize::MAX,
        };
        let upstream_url = url("UPSTREAM_URL", self.upstream_url.as_deref(), &["ws", "wss"])?;
        let sink_url = url("SINK_URL", self.sink_url.as_deref(), &["http", "https"])?;
        let aws_endpoint_url = match &self.aws_endpoint_url {
            Some(e) if !e.is_empty() => Some(url("AWS_ENDPOINT_URL", Some(e), &["http", "https"])?),
            _ => None,
        };
        let metrics_addr: SocketAddr = self.metrics_addr.trim().parse().map_err(|_| {
            refuse(format!(
                "METRICS_ADDR={:?} is not an IP:PORT address (e.g. 0.0.0.0:9090)",
                self.metrics_addr
            ))
        })?;
        let acquire_mode = match self.acquire_mode.trim() {
            "expiry-aware" => AcquireMode::ExpiryAware,
            "poll" => AcquireMode::Poll,
            other => {
                return Err(refuse(format!(
                    "ACQUIRE_MODE={other:?} must be `expiry-aware` or `poll`"
                )))
            }
        };
        let discovery = match self.discovery.trim() {
            "full" => Discovery::Full,
            "segmented" => Discovery::Segmented {
                members_table: match self.members_table.as_deref().map(str::trim) {
                    Some("") => {
                        return Err(refuse(
                            "MEMBERS_TABLE is set but empty; unset it or give a name",
                        ))
                    }
                    Some(t) => t.to_string(),
                    None => lease_table::members::table_for(self.lease_table.trim()),
                },
            },
            other => {
                return Err(refuse(format!(
                    "DISCOVERY={other:?} must be `full` or `segmented`"
                )))
            }
        };
        let chaos_skip_deadline_check = match self.chaos_skip_deadline_check.trim() {
            "true" | "1" => true,
            "false" | "0" | "" => false,
            other => {
                return Err(refuse(format!(
                    "CHAOS_SKIP_DEADLINE_CHECK={other:?} must be true, 1, false or 0"
                )))
            }
        };
        let log_format = match self.log_format.trim() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                return Err(refuse(format!(
                    "LOG_FORMAT={other:?} must be `text` or `json`"
                )))
            }
        };
        let sink_reject = match (self.sink_reject_policy.trim(), &self.dead_letter_dir) {
            ("halt", _) => RejectPolicy::Halt,
            ("dead-letter", Some(dir)) if dir.is_dir() => RejectPolicy::DeadLetter(dir.clone()),
            ("dead-letter", Some(dir)) => {
                return Err(refuse(format!(
                    "DEAD_LETTER_DIR={:?} is not a directory (SINK_REJECT_POLICY=dead-letter writes rejected batches there)",
                    dir.display().to_string()
                )))
            }
            ("dead-letter", None) => {
                return Err(refuse(
                    "SINK_REJECT_POLICY=dead-letter needs DEAD_LETTER_DIR (a directory for the rejected batches)",
                ))
            }
            (other, _) => {
                return Err(refuse(format!(
                    "SINK_REJECT_POLICY={other:?} must be `halt` or `dead-letter`"
                )))
            }
        };
        let owner_id = match &self.owner_id {
            Some(o) if o.trim().is_empty() => {
                return Err(refuse("OWNER_ID is set but empty; unset it or give a name"))
            }
            Some(o) => Some(o.trim().to_string()),
            None => None,
        };
        if self.lease_table.trim().is_empty() {
            return Err(refuse("LEASE_TABLE must not be empty"));
        }
        Ok(Config {
            table: self.lease_table.trim().to_string(),
            owner_id,
            lease,
            renew,
            safety_margin,
            upstream_url,
            sink_url,
            max_streams,
            aws_region: self.aws_region.clone().filter(|r| !r.is_empty()),
            aws_endpoint_url,
            metrics_addr,
            metrics_addr_file: self.metrics_addr_file.clone(),
            drain,
            skew_margin,
            fleet_poll,
            upstream_idle,
            sink_reject,
            scan,
            acquire_mode,
            discovery,
            chaos_skip_deadline_check,
            log_format,
            batch_max_events,
            batch_max_delay,
        })
    }
}

/// The owner id to use: `OWNER_ID`, else the ECS task ARN, else `{hostname}-{pid}-{suffix}`
/// with a random suffix: host name and pid alone collide (host networking, or two containers
/// with the same host name whose process is pid 1), and two processes with one id both "own"
/// the same streams through `owner_id = :me`.
pub async fn resolve_owner_id(configured: Option<&str>) -> String {
    if let Some(owner) = configured {
        return owner.to_string();
    }
    if let Ok(base) = std::env::var(ECS_METADATA_ENV) {
        match ecs_task_arn(&base).await {
            Ok(arn) => return arn,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the ECS task ARN; using host name and pid")
            }
        }
    }
    format!(
        "{}-{}-{:06x}",
        hostname(),
        std::process::id(),
        rand::random::<u32>() & 0xff_ffff
    )
}

async fn ecs_task_arn(base: &str) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    struct Task {
        #[serde(rename = "TaskARN")]
        task_arn: String,
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .map_err(|e| e.to_string())?;
    let task: Task = client
        .get(format!("{}/task", base.trim_end_matches('/')))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    Ok(task.task_arn)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests;
