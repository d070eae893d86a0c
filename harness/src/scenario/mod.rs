//! Scenario files (TOML): the model a run executes, and its validation. Every error names the
//! file, the line and the field, and is found before anything starts (exit code 2).
//!
//! Two stages, as ripgrep does with its flags: serde reads the file as written ([`raw`]), then
//! [`Scenario::parse`] checks it and resolves it into the plan a run follows (milliseconds,
//! typed faults, thresholds evaluated). The model is in [`model`], the checks in `validate`,
//! ECS deploy batching (a pure calculation validation and the injector share) in [`deploy`].

mod deploy;
mod error;
mod expr;
pub mod menu;
mod model;
pub mod raw;
mod spans;
mod validate;

use std::collections::BTreeMap;
use std::path::Path;

use error::de_error;
use raw::RawScenario;
use validate::Validator;

pub use crate::worker_id::{parse_worker, worker_name};
pub use deploy::{deploy_batches, DeployStep};
pub use error::ScenarioError;
pub use model::*;
pub use spans::SpanMap;

/// Default skew margin added before trying an expired lease (`SKEW_MARGIN_MS`).
pub const DEFAULT_SKEW_MARGIN_MS: u64 = 200;
/// Default upstream payload size.
pub const DEFAULT_PAYLOAD_BYTES: usize = 64;
/// Default replay retention, events per stream: enough that a run never loses data to retention.
pub const DEFAULT_RETENTION: usize = 100_000;
/// Default stream name prefix (`s-0001`…).
pub const DEFAULT_STREAM_PREFIX: &str = "s-";
/// Default seed when neither the file nor `--seed` gives one.
pub const DEFAULT_SEED: u64 = 1;
/// Default `stop_timeout_seconds` for `terminate` and `rolling_deploy` (ECS's default is 30).
pub const DEFAULT_STOP_TIMEOUT_MS: u64 = 10_000;

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: path.to_path_buf(),
            line: 0,
            field: String::new(),
            message: format!("cannot read the scenario file: {e}"),
        })?;
        Scenario::parse(&text, path)
    }

    /// Parses and validates scenario text; `file` is only used in messages.
    pub fn parse(text: &str, file: &Path) -> Result<Scenario, ScenarioError> {
        let spans = SpanMap::new(text);
        let raw: RawScenario = toml::from_str(text).map_err(|e| de_error(&e, &spans, file))?;
        let scenario = Validator {
            spans: &spans,
            file,
        }
        .resolve(raw)?;
        Ok(Scenario {
            source: text.to_string(),
            ..scenario
        })
    }

    /// The names threshold expressions may use, with their values.
    pub fn threshold_vars(&self) -> BTreeMap<&'static str, f64> {
        vars(&self.lease, &self.fleet, &self.upstream, &self.run)
    }

    /// The stream ids of this scenario, `s-0001…`.
    pub fn stream_ids(&self) -> Vec<String> {
        upstream_stream_ids(&self.upstream)
    }
}

/// The stream ids an upstream configuration names, `s-0001…`.
fn upstream_stream_ids(upstream: &Upstream) -> Vec<String> {
    (1..=upstream.streams)
        .map(|i| lease_protocol::stream_name(&upstream.stream_prefix, i))
        .collect()
}

/// The names threshold expressions may use, with their values.
fn vars(
    lease: &Lease,
    fleet: &Fleet,
    upstream: &Upstream,
    run: &RunTimes,
) -> BTreeMap<&'static str, f64> {
    BTreeMap::from([
        ("lease_ms", lease.lease_ms as f64),
        ("renew_ms", lease.renew_ms as f64),
        ("skew_margin_ms", lease.skew_margin_ms as f64),
        ("workers", fleet.workers as f64),
        ("streams", upstream.streams as f64),
        ("rate", upstream.rate),
        ("duration_ms", run.duration_ms as f64),
    ])
}

#[cfg(test)]
mod tests;
