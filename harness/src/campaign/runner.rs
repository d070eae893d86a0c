//! Runs a campaign: one provisioned DynamoDB endpoint (started again every N runs) and one worker
//! binary for every run, a fresh lease table per run, each run's schedule written as `runs/NNN/scenario.toml` and run
//! through the ordinary `harness run` path, judged, pruned, and shrunk when it failed. Ctrl-C
//! finishes the run in progress; a second one stops it at once. Progress goes to stderr.

use std::path::{Path, PathBuf};
use std::time::Instant;

use aws_sdk_dynamodb::Client;
use serde_json::Value;
use tokio::sync::watch;

use super::schedule::{generate, GenConfig, Schedule};
use super::shrink;
use super::summary::{self, Failed, RunOutcome};
use crate::run::{RunError, RunOptions};

/// Files a passing run keeps with `--keep history`; `--keep reports` drops the history too.
const KEEP_HISTORY: &[&str] = &["scenario.toml", "report.json", "history.jsonl"];
const KEEP_REPORTS: &[&str] = &["scenario.toml", "report.json"];

/// Everything a campaign needs besides the generator's settings.
pub struct Runner {
    pub out: PathBuf,
    pub config: GenConfig,
    pub runs: u32,
    pub backend: tokio::sync::Mutex<Backend>,
    pub worker_bin: PathBuf,
    pub takeover_bound_ms: u64,
    pub keep_history: bool,
    pub shrink_runs: usize,
    pub shrink_failures: usize,
    /// Counts the signals received: 1 finishes the run in progress, 2 stops it.
    pub signals: watch::Receiver<u32>,
}

/// The DynamoDB every run uses (a fresh table each), started again every `restart_every` runs.
pub struct Backend {
    mode: dynamodb_local::Mode,
    ddb: dynamodb_local::DynamoLocal,
    restart_every: u32,
    runs_since: u32,
    /// How many times it was started again.
    pub restarts: u32,
}

impl Backend {
    /// Provisions `mode`; `restart_every` = 0 never starts it again.
    pub async fn start(
        mode: dynamodb_local::Mode,
        restart_every: u32,
    ) -> Result<Self, dynamodb_local::ProvisionError> {
        let ddb = Self::provision(&mode).await?;
        Ok(Backend {
            mode,
            ddb,
            restart_every,
            runs_since: 0,
            restarts: 0,
        })
    }

    async fn provision(
        mode: &dynamodb_local::Mode,
    ) -> Result<dynamodb_local::DynamoLocal, dynamodb_local::ProvisionError> {
        dynamodb_local::DynamoLocal::start(&dynamodb_local::Options {
            mode: mode.clone(),
            ..dynamodb_local::Options::default()
        })
        .await
    }

    /// The endpoint and a client for the next run, after starting a fresh instance when
    /// `restart_every` runs have used this one.
    async fn next_run(&mut self) -> Result<(String, Client), RunError> {
        if self.restart_every > 0 && self.runs_since >= self.restart_every {
            eprintln!(
                "campaign: starting a fresh DynamoDB Local after {} runs",
                self.runs_since
            );
            let fresh = Self::provision(&self.mode)
                .await
                .map_err(|e| RunError::Failed(format!("restarting DynamoDB Local: {e}")))?;
            // The old instance stops when dropped, after the new one answers.
            self.ddb = fresh;
            self.runs_since = 0;
            self.restarts += 1;
        }
        self.runs_since += 1;
        Ok((self.ddb.endpoint().to_string(), self.ddb.client()))
    }
}

/// What a campaign produced.
pub struct Finished {
    pub outcomes: Vec<RunOutcome>,
    pub failed: Vec<Failed>,
    pub interrupted: bool,
    pub shrink_runs: usize,
}

impl Runner {
    fn interrupted(&self) -> bool {
        *self.signals.borrow() > 0
    }

    /// Every run, then the shrinking of the first failures.
    pub async fn run_all(&self) -> Result<Finished, RunError> {
        let mut outcomes = Vec::new();
        let started = Instant::now();
        for run in 0..self.runs {
            if self.interrupted() {
                break;
            }
            let schedule = generate(&self.config, run);
            let dir = format!("runs/{run:03}");
            let faults: Vec<String> = schedule.faults.iter().map(|f| f.describe()).collect();
            eprintln!(
                "campaign: run {:>3}/{} [{}]",
                run + 1,
                self.runs,
                if faults.is_empty() {
                    "no fault".into()
                } else {
                    faults.join("; ")
                }
            );
            let Some(outcome) = self
                .one(&schedule, &dir, &format!("campaign-{run:03}"))
                .await?
            else {
                break; // stopped by a second signal: the run is incomplete, not counted
            };
            if outcome.passed {
                self.prune(&self.out.join(&dir));
            }
            let failed_so_far = outcomes.iter().filter(|o: &&RunOutcome| !o.passed).count()
                + usize::from(!outcome.passed);
            eprintln!(
                "campaign: run {:>3}/{} {} in {:.1} s (harness overhead {:.1} s){}; {} of {} failed so far, {:.0} s elapsed",
                run + 1,
                self.runs,
                if outcome.passed { "passed" } else { "FAILED" },
                outcome.wall_ms as f64 / 1000.0,
                outcome.overhead_ms as f64 / 1000.0,
                outcome
                    .reasons
                    .first()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default(),
                failed_so_far,
                run + 1,
                started.elapsed().as_secs_f64()
            );
            outcomes.push(outcome);
        }
        let mut failed = Vec::new();
        let mut shrink_runs = 0;
        for o in outcomes.iter().filter(|o| !o.passed) {
            let mut f = Failed {
                run: o.run,
                seed: o.seed,
                dir: o.dir.clone(),
                reasons: o.reasons.clone(),
                shrunk_scenario: None,
                shrunk_faults: Vec::new(),
            };
            if failed.len() < self.shrink_failures && self.shrink_runs > 0 && !self.interrupted() {
                let (path, faults, spent) = self.shrink(o).await?;
                shrink_runs += spent;
                f.shrunk_scenario = path;
                f.shrunk_faults = faults;
            }
            failed.push(f);
        }
        Ok(Finished {
            outcomes,
            failed,
            interrupted: self.interrupted(),
            shrink_runs,
        })
    }

    /// Runs `schedule` in `DIR/rel` on table `table` and judges it; None when a second signal
    /// stopped it.
    async fn one(
        &self,
        schedule: &Schedule,
        rel: &str,
        table: &str,
    ) -> Result<Option<RunOutcome>, RunError> {
        let dir = self.out.join(rel);
        std::fs::create_dir_all(&dir)
            .map_err(|e| RunError::Invalid(format!("cannot create {}: {e}", dir.display())))?;
        let scenario = dir.join("scenario.toml");
        std::fs::write(&scenario, schedule.to_toml())
            .map_err(|e| RunError::Invalid(format!("cannot write {}: {e}", scenario.display())))?;
        let (endpoint, client) = self.backend.lock().await.next_run().await?;
        let options = RunOptions {
            scenario,
            out: dir.clone(),
            seed: None,
            dynamodb: dynamodb_local::Mode::Endpoint(endpoint),
            worker_bin: Some(self.worker_bin.clone()),
            table: Some(table.to_string()),
            quiet: true,
        };
        let mut signals = self.signals.clone();
        let second = async move {
            let _ = signals.wait_for(|n| *n >= 2).await;
        };
        let started = Instant::now();
        let cpu_before = crate::usage::self_usage().0;
        let result = crate::run::run(&options, second).await;
        let wall_ms = started.elapsed().as_millis() as u64;
        let harness_cpu_ms = crate::usage::self_usage().0.saturating_sub(cpu_before);
        let _ = client.delete_table().table_name(table).send().await;
        if *self.signals.borrow() >= 2 {
            return Ok(None);
        }
        let report: Option<Value> = std::fs::read_to_string(dir.join("report.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let (mut reasons, mut keys) = match &report {
            Some(r) => summary::judge(r, self.takeover_bound_ms),
            None => (Vec::new(), Vec::new()),
        };
        match result {
            Err(RunError::Invalid(e)) => {
                return Err(RunError::Invalid(format!("{rel}: {e}")));
            }
            Err(RunError::Failed(e)) if report.is_none() => {
                reasons.push(format!("run error: {e}"));
                keys.push("run_error".into());
            }
            _ => {}
        }
        let empty = Value::Null;
        let r = report.as_ref().unwrap_or(&empty);
        let (injected, caused_takeovers) = summary::fault_effects(r);
        let kinds: Vec<String> = schedule.faults.iter().map(|f| f.kind.to_string()).collect();
        Ok(Some(RunOutcome {
            run: schedule.run,
            seed: schedule.seed,
            dir: rel.to_string(),
            takeover_ms_by_kind: summary::takeovers_by_kind(r, &kinds),
            faults: kinds,
            injected,
            caused_takeovers,
            passed: reasons.is_empty(),
            reasons,
            reason_keys: keys,
            takeover_ms: summary::takeover_samples(r),
            max_stall_ms: summary::max_stall(r),
            wall_ms,
            overhead_ms: wall_ms.saturating_sub(schedule.config.duration_ms),
            harness_cpu_ms,
        }))
    }

    /// Removes what a passing run does not keep.
    fn prune(&self, dir: &Path) {
        let keep = if self.keep_history {
            KEEP_HISTORY
        } else {
            KEEP_REPORTS
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if keep.iter().any(|k| name == *k) {
                continue;
            }
            let path = entry.path();
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
    }

    /// Shrinks a failed run: the smallest schedule found that still fails for one of the same
    /// reasons, written as `runs/NNN/shrunk.toml`. Returns its path (relative), its faults and
    /// the runs spent.
    async fn shrink(
        &self,
        failed: &RunOutcome,
    ) -> Result<(Option<String>, Vec<String>, usize), RunError> {
        let mut current = generate(&self.config, failed.run);
        let mut keys = failed.reason_keys.clone();
        let mut spent = 0;
        eprintln!(
            "campaign: shrinking run {:03} ({} faults; fails on {})",
            failed.run,
            current.faults.len(),
            keys.join(", ")
        );
        'outer: while spent < self.shrink_runs {
            for candidate in shrink::candidates(&current) {
                if spent >= self.shrink_runs || self.interrupted() {
                    break 'outer;
                }
                spent += 1;
                let rel = format!("{}/shrink/{spent:02}", failed.dir);
                let table = format!("campaign-{:03}-shrink-{spent:02}", failed.run);
                let Some(outcome) = self.one(&candidate, &rel, &table).await? else {
                    break 'outer;
                };
                let still = !outcome.passed && shrink::same_failure(&keys, &outcome.reason_keys);
                eprintln!(
                    "campaign:   try {spent:>2}: {} → {}",
                    describe(&candidate),
                    if still {
                        "still fails: kept"
                    } else {
                        "passes (or fails otherwise)"
                    }
                );
                if still {
                    current = candidate;
                    keys.retain(|k| outcome.reason_keys.contains(k));
                    continue 'outer;
                }
                let _ = std::fs::remove_dir_all(self.out.join(&rel));
            }
            break;
        }
        let mut shrunk = current.clone();
        shrunk.name = format!("{}-shrunk", current.name);
        if keys.iter().any(|k| k == "takeover_bound") {
            shrunk.config.expect.push((
                "totals.takeover_ms.max".into(),
                "<=".into(),
                format!("{}", self.takeover_bound_ms),
            ));
        }
        let header = format!(
            "# Shrunk by `harness campaign` from run {:03} of seed {} ({} runs spent): the smallest\n\
             # schedule found that still fails on {}. Commit it as a regression scenario.\n",
            failed.run,
            current.campaign_seed,
            spent,
            keys.join(", ")
        );
        let rel = format!("{}/shrunk.toml", failed.dir);
        let path = self.out.join(&rel);
        std::fs::write(&path, format!("{header}{}", shrunk.to_toml()))
            .map_err(|e| RunError::Invalid(format!("cannot write {}: {e}", path.display())))?;
        eprintln!(
            "campaign: run {:03} shrunk to {}: {}",
            failed.run,
            path.display(),
            describe(&shrunk)
        );
        Ok((
            Some(rel),
            shrunk.faults.iter().map(|f| f.describe()).collect(),
            spent,
        ))
    }
}

fn describe(s: &Schedule) -> String {
    if s.faults.is_empty() {
        return "no fault".into();
    }
    s.faults
        .iter()
        .map(|f| f.describe())
        .collect::<Vec<_>>()
        .join("; ")
}
