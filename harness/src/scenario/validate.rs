//! Validation: resolves a scenario as written ([`super::raw`]) into the plan a run follows
//! ([`Scenario`]), refusing impossible values with an error that names the line and the field.

use std::path::Path;

use super::expr;
use super::model::*;
use super::raw::{self, RawAction, RawFault, RawScenario, RawThreshold};
use super::{vars, ScenarioError, SpanMap};
use super::{DEFAULT_PAYLOAD_BYTES, DEFAULT_RETENTION, DEFAULT_SEED, DEFAULT_SKEW_MARGIN_MS};
use super::{DEFAULT_STOP_TIMEOUT_MS, DEFAULT_STREAM_PREFIX};
use crate::worker_id::parse_worker;

pub(super) struct Validator<'a> {
    pub spans: &'a SpanMap,
    pub file: &'a Path,
}

impl Validator<'_> {
    pub(super) fn err(&self, field: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: self.file.to_path_buf(),
            line: self.spans.line(field),
            field: field.to_string(),
            message: message.into(),
        }
    }

    pub(super) fn ms(&self, field: &str, seconds: f64) -> Result<u64, ScenarioError> {
        if !seconds.is_finite() || seconds < 0.0 {
            return Err(self.err(
                field,
                format!("must be a non-negative number of seconds, got {seconds}"),
            ));
        }
        Ok((seconds * 1000.0).round() as u64)
    }

    pub(super) fn positive_ms(&self, field: &str, seconds: f64) -> Result<u64, ScenarioError> {
        match self.ms(field, seconds)? {
            0 => Err(self.err(field, "must be greater than zero")),
            ms => Ok(ms),
        }
    }

    /// A fault's `duration_seconds` in milliseconds: positive, and over by the run's end when
    /// the fault starts at `at_ms`. Otherwise the error says when `what` ends, then `advice`.
    pub(super) fn ends_in_run(
        &self,
        field: &str,
        seconds: f64,
        at_ms: u64,
        run: &RunTimes,
        what: &str,
        advice: &str,
    ) -> Result<u64, ScenarioError> {
        let ms = self.positive_ms(field, seconds)?;
        if at_ms + ms > run.duration_ms {
            return Err(self.err(
                field,
                format!(
                    "{what} ends at {}s, after the run's end ({}s){advice}",
                    (at_ms + ms) as f64 / 1000.0,
                    run.duration_ms as f64 / 1000.0
                ),
            ));
        }
        Ok(ms)
    }

    pub fn resolve(&self, raw: RawScenario) -> Result<Scenario, ScenarioError> {
        if raw.name.trim().is_empty() {
            return Err(self.err("name", "must not be empty"));
        }
        let lease = Lease {
            lease_ms: self.positive_ms("lease.seconds", raw.lease.seconds)?,
            renew_ms: self.positive_ms("lease.renew_seconds", raw.lease.renew_seconds)?,
            skew_margin_ms: raw.lease.skew_margin_ms.unwrap_or(DEFAULT_SKEW_MARGIN_MS),
        };
        if lease.renew_ms >= lease.lease_ms {
            return Err(self.err(
                "lease.renew_seconds",
                format!(
                    "renew interval ({} ms) must be shorter than the lease ({} ms), or leases expire between renewals",
                    lease.renew_ms, lease.lease_ms
                ),
            ));
        }
        let fleet = self.fleet(raw.fleet)?;
        let upstream = self.upstream(raw.upstream)?;
        let run = RunTimes {
            warmup_ms: self.positive_ms("run.warmup_seconds", raw.run.warmup_seconds)?,
            duration_ms: self.positive_ms("run.duration_seconds", raw.run.duration_seconds)?,
            settle_timeout_ms: self
                .positive_ms("run.settle_timeout_seconds", raw.run.settle_timeout_seconds)?,
            seed: raw.run.seed.unwrap_or(DEFAULT_SEED),
            stall_threshold_ms: match raw.run.stall_threshold_seconds {
                Some(seconds) => self.positive_ms("run.stall_threshold_seconds", seconds)?,
                None => 2 * lease.lease_ms,
            },
        };
        let stream_ids = super::upstream_stream_ids(&upstream);
        let faults = self.faults(&raw.faults, &fleet, &run, &stream_ids)?;
        for name in fleet.worker_env.keys() {
            let n = parse_worker(name);
            let started = total_workers(&fleet, &faults);
            if !n.is_some_and(|n| n >= 1 && n <= started) {
                return Err(self.err(
                    &format!("fleet.worker_env.{name}"),
                    format!("no worker named {name:?}: the run starts worker-1 … worker-{started}"),
                ));
            }
        }
        match (raw.expect.is_empty(), raw.no_expectations) {
            (true, None | Some(false)) => {
                return Err(ScenarioError {
                    file: self.file.to_path_buf(),
                    line: self.spans.line("no_expectations").max(1),
                    field: "expect".to_string(),
                    message: "the scenario has no [[expect]], so a run of it could never fail: \
                              add expectations (e.g. totals.gaps == 0), or write \
                              `no_expectations = true` at the top if it is meant to judge nothing"
                        .to_string(),
                });
            }
            (false, Some(true)) => {
                return Err(self.err(
                    "no_expectations",
                    "says the scenario has no expectations, but it has [[expect]] entries: remove one or the other",
                ));
            }
            _ => {}
        }
        let vars = vars(&lease, &fleet, &upstream, &run);
        let mut expectations = Vec::new();
        for (i, e) in raw.expect.into_iter().enumerate() {
            let at = |f: &str| format!("expect[{i}].{f}");
            if !crate::report_json::is_known_metric(&e.metric) {
                return Err(self.err(
                    &at("metric"),
                    format!("{:?} is not a numeric metric of report.json (e.g. totals.gaps, totals.takeover_ms.p99, takeovers.count)", e.metric),
                ));
            }
            let op = Op::parse(&e.op).ok_or_else(|| {
                self.err(
                    &at("op"),
                    format!("unknown operator {:?}: use ==, !=, <, <=, > or >=", e.op),
                )
            })?;
            let (threshold_expr, threshold) = match e.threshold {
                RawThreshold::Number(n) => (format_number(n), n),
                RawThreshold::Expr(text) => {
                    let value =
                        expr::eval(&text, &vars).map_err(|m| self.err(&at("threshold"), m))?;
                    (text, value)
                }
            };
            let name = e
                .name
                .unwrap_or_else(|| format!("{} {} {}", e.metric, op.symbol(), threshold_expr));
            expectations.push(Expectation {
                name,
                metric: e.metric,
                op,
                threshold_expr,
                threshold,
            });
        }
        Ok(Scenario {
            name: raw.name,
            description: raw.description.trim().to_string(),
            lease,
            fleet,
            upstream,
            fencing: raw.sink.fencing.unwrap_or(true),
            run,
            faults,
            expectations,
            source: String::new(),
        })
    }

    fn fleet(&self, raw: raw::RawFleet) -> Result<Fleet, ScenarioError> {
        if raw.workers == 0 {
            return Err(self.err("fleet.workers", "a run needs at least one worker"));
        }
        if raw.max_streams == Some(0) {
            return Err(self.err(
                "fleet.max_streams",
                "must be at least 1 (omit it for no limit)",
            ));
        }
        if let Some(mode) = &raw.acquire_mode {
            if mode != "expiry-aware" && mode != "poll" {
                return Err(self.err(
                    "fleet.acquire_mode",
                    format!("{mode:?}: use \"expiry-aware\" or \"poll\""),
                ));
            }
        }
        Ok(Fleet {
            workers: raw.workers,
            max_streams: raw.max_streams,
            drain_ms: raw
                .drain_seconds
                .map(|s| self.ms("fleet.drain_seconds", s))
                .transpose()?,
            scan_ms: raw
                .scan_seconds
                .map(|s| self.positive_ms("fleet.scan_seconds", s))
                .transpose()?,
            acquire_mode: raw.acquire_mode,
            env: raw.env,
            worker_env: raw.worker_env,
        })
    }

    fn upstream(&self, raw: raw::RawUpstream) -> Result<Upstream, ScenarioError> {
        if raw.streams == 0 {
            return Err(self.err("upstream.streams", "a run needs at least one stream"));
        }
        if !(raw.rate.is_finite() && raw.rate > 0.0) {
            return Err(self.err(
                "upstream.rate",
                "continuous traffic needs a rate above zero (events/s per stream)",
            ));
        }
        if raw.retention == Some(0) {
            return Err(self.err("upstream.retention", "must keep at least one event"));
        }
        Ok(Upstream {
            streams: raw.streams,
            rate: raw.rate,
            payload_bytes: raw.payload_bytes.unwrap_or(DEFAULT_PAYLOAD_BYTES),
            retention: raw.retention.unwrap_or(DEFAULT_RETENTION),
            stream_prefix: raw
                .stream_prefix
                .unwrap_or_else(|| DEFAULT_STREAM_PREFIX.to_string()),
        })
    }

    fn faults(
        &self,
        raw: &[RawFault],
        fleet: &Fleet,
        run: &RunTimes,
        streams: &[String],
    ) -> Result<Vec<Fault>, ScenarioError> {
        let mut faults = Vec::new();
        // Workers that exist by each fault's time: the initial fleet plus those started earlier.
        let mut order: Vec<usize> = (0..raw.len()).collect();
        order.sort_by(|a, b| raw[*a].at_seconds.total_cmp(&raw[*b].at_seconds));
        let mut existing = vec![0; raw.len()];
        let mut count = fleet.workers;
        for &i in &order {
            existing[i] = count;
            match raw[i].action {
                RawAction::Start => count += raw[i].count.unwrap_or(1),
                RawAction::RollingDeploy => count += count_alive_estimate(count),
                _ => {}
            }
        }
        for (i, f) in raw.iter().enumerate() {
            let at = |name: &str| format!("faults[{i}].{name}");
            let at_ms = self.ms(&at("at_seconds"), f.at_seconds)?;
            if at_ms >= run.duration_ms {
                return Err(self.err(
                    &at("at_seconds"),
                    format!(
                        "the fault at {}s is at or after the run's end (run.duration_seconds = {}s)",
                        f.at_seconds,
                        run.duration_ms as f64 / 1000.0
                    ),
                ));
            }
            let allowed: &[&str] = match f.action {
                RawAction::Kill => &["target"],
                RawAction::Pause => &["target", "duration_seconds"],
                RawAction::Terminate => &["target", "stop_timeout_seconds"],
                RawAction::Start => &["count"],
                RawAction::RollingDeploy => &[
                    "minimum_healthy_percent",
                    "maximum_percent",
                    "stop_timeout_seconds",
                ],
                other => super::menu::fields(other).unwrap_or(&[]),
            };
            let given = [
                ("target", f.target.is_some()),
                ("duration_seconds", f.duration_seconds.is_some()),
                ("stop_timeout_seconds", f.stop_timeout_seconds.is_some()),
                ("count", f.count.is_some()),
                (
                    "minimum_healthy_percent",
                    f.minimum_healthy_percent.is_some(),
                ),
                ("maximum_percent", f.maximum_percent.is_some()),
            ]
            .into_iter()
            .chain(super::menu::given(f));
            for (name, present) in given {
                if present && !allowed.contains(&name) {
                    return Err(self.err(
                        &at(name),
                        format!(
                            "not used by action {:?} (it takes: {})",
                            f.action.name(),
                            allowed.join(", ")
                        ),
                    ));
                }
            }
            let target = || self.target(&at("target"), f.target.as_deref(), existing[i]);
            let stop_timeout_ms = f
                .stop_timeout_seconds
                .map(|s| self.ms(&at("stop_timeout_seconds"), s))
                .transpose()?
                .unwrap_or(DEFAULT_STOP_TIMEOUT_MS);
            let action = match f.action {
                RawAction::Kill => FaultAction::Kill { target: target()? },
                RawAction::Pause => {
                    let seconds = f.duration_seconds.ok_or_else(|| {
                        self.err(
                            &at("duration_seconds"),
                            "action \"pause\" needs duration_seconds",
                        )
                    })?;
                    let duration_ms = self.ends_in_run(
                        &at("duration_seconds"),
                        seconds,
                        at_ms,
                        run,
                        "the pause",
                        ": resume must happen inside the run",
                    )?;
                    FaultAction::Pause {
                        target: target()?,
                        duration_ms,
                    }
                }
                RawAction::Terminate => FaultAction::Terminate {
                    target: target()?,
                    stop_timeout_ms,
                },
                RawAction::Start => {
                    let count = f.count.unwrap_or(1);
                    if count == 0 {
                        return Err(self.err(&at("count"), "must start at least one worker"));
                    }
                    FaultAction::Start { count }
                }
                RawAction::RollingDeploy => {
                    let min = f.minimum_healthy_percent.unwrap_or(100);
                    let max = f.maximum_percent.unwrap_or(200);
                    if min > 100 {
                        return Err(self.err(
                            &at("minimum_healthy_percent"),
                            format!("{min} is above 100"),
                        ));
                    }
                    if !(100..=200).contains(&max) {
                        return Err(self.err(
                            &at("maximum_percent"),
                            format!("{max} must be between 100 and 200, as in ECS"),
                        ));
                    }
                    if super::deploy_batches(fleet.workers, min, max).is_none() {
                        return Err(self.err(
                            &at("maximum_percent"),
                            format!("minimum_healthy_percent {min} with maximum_percent {max} leaves no room to replace any of {} workers", fleet.workers),
                        ));
                    }
                    FaultAction::RollingDeploy {
                        minimum_healthy_percent: min,
                        maximum_percent: max,
                        stop_timeout_ms,
                    }
                }
                _ => FaultAction::Menu(self.menu(i, f, at_ms, existing[i], streams, run)?),
            };
            faults.push(Fault {
                at_ms,
                action,
                line: self.spans.line(&format!("faults[{i}]")),
            });
        }
        faults.sort_by_key(|f| f.at_ms);
        Ok(faults)
    }

    pub(super) fn target(
        &self,
        field: &str,
        target: Option<&str>,
        existing: usize,
    ) -> Result<Target, ScenarioError> {
        match target {
            None => Err(self.err(field, "this action needs a target: worker-N, random or busiest")),
            Some("random") => Ok(Target::Random),
            Some("busiest") => Ok(Target::Busiest),
            Some(name) => match parse_worker(name) {
                Some(n) if n >= 1 && n <= existing => Ok(Target::Worker(n)),
                Some(_) => Err(self.err(
                    field,
                    format!("target {name:?} does not exist at that time: workers are worker-1 … worker-{existing}"),
                )),
                None => Err(self.err(field, format!("unknown target {name:?}: use worker-N, random or busiest"))),
            },
        }
    }
}

/// A rolling deploy replaces every running worker; statically we assume all are running.
fn count_alive_estimate(count: usize) -> usize {
    count
}

/// Every worker name a run may start: the initial fleet plus `start` and `rolling_deploy` faults.
fn total_workers(fleet: &Fleet, faults: &[Fault]) -> usize {
    let mut count = fleet.workers;
    for f in faults {
        match f.action {
            FaultAction::Start { count: n } => count += n,
            FaultAction::RollingDeploy { .. } => count += count_alive_estimate(count),
            _ => {}
        }
    }
    count
}

fn format_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}
