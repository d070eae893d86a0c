//! `harness campaign`: many runs of randomized, seeded fault schedules, each judged with the
//! full safety and liveness set, failures shrunk to the smallest schedule that still fails, and
//! a summary (`campaign.json`, `campaign.md`, `campaign.html`, design §11).
//!
//! [`schedule`] draws each run's scenario from (seed, run index) — pure, property-tested;
//! [`kinds`] is the table of fault kinds it draws from; [`runner`] runs and judges them;
//! [`shrink`] says what to try smaller; [`summary`] and [`render`] write the results;
//! [`replay`] compares a replayed run's actions with the original's.

mod args;
pub mod kinds;
pub mod render;
pub mod replay;
pub mod runner;
pub mod schedule;
pub mod shrink;
pub mod summary;

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

pub use args::CampaignArgs;
use tokio::sync::watch;

/// `campaign.json`, `campaign.md`, `campaign.html` (design §11).
pub const JSON_FILE: &str = "campaign.json";
pub const MARKDOWN_FILE: &str = "campaign.md";
pub const HTML_FILE: &str = "campaign.html";

/// The expectations every generated run carries, as (metric, op, threshold): the safety and
/// liveness counts that must be zero. Metrics the report does not have (yet) are left out, so
/// each new one is judged as soon as the analysis computes it.
const SAFETY_SET: &[(&str, &str, &str)] = &[
    // Gaps the upstream did not cause (an `upstream_gap` loses events on purpose).
    ("totals.gaps_unexplained", "==", "0"),
    ("totals.stale_accepted", "==", "0"),
    ("totals.superseded_accepted", "==", "0"),
    ("totals.late_writes", "==", "0"),
    ("totals.checkpoint_ahead", "==", "0"),
    ("totals.content_mismatches", "==", "0"),
    ("totals.stalled_streams", "==", "0"),
    ("totals.worker_crashes", "==", "0"),
];

/// The safety set this harness's report can judge.
pub fn default_expect() -> Vec<(String, String, String)> {
    SAFETY_SET
        .iter()
        .filter(|(metric, _, _)| crate::report_json::is_known_metric(metric))
        .map(|(m, o, t)| (m.to_string(), o.to_string(), t.to_string()))
        .collect()
}

/// `harness campaign`: exit 0 every run passed, 1 a violation, 2 invalid flags or
/// environment, 130 interrupted without a violation.
pub async fn main(args: CampaignArgs) -> ExitCode {
    match campaign(&args).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("harness campaign: {e}");
            ExitCode::from(2)
        }
    }
}

async fn campaign(args: &CampaignArgs) -> Result<u8, String> {
    let started = Instant::now();
    let config = args.plan()?;
    let dynamodb = args
        .dynamodb
        .parse::<dynamodb_local::Mode>()
        .map_err(|e| format!("--dynamodb {}: {e}", args.dynamodb))?;
    let worker_bin = crate::fleet::resolve_worker_bin(args.worker_bin.as_deref())?;
    std::fs::create_dir_all(args.out.join("runs"))
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    let restart_every = match dynamodb {
        dynamodb_local::Mode::Endpoint(_) => 0,
        _ => args.restart_dynamodb_every,
    };
    let backend = runner::Backend::start(dynamodb, restart_every)
        .await
        .map_err(|e| format!("DynamoDB Local: {e}"))?;
    let (tx, signals) = watch::channel(0u32);
    let listener = tokio::spawn(count_signals(tx));
    let runner = runner::Runner {
        out: args.out.clone(),
        config,
        runs: args.runs,
        backend: tokio::sync::Mutex::new(backend),
        worker_bin,
        takeover_bound_ms: args.takeover_bound_ms(),
        keep_history: args.keep == "history",
        shrink_runs: args.shrink_runs,
        shrink_failures: args.shrink_failures,
        signals,
    };
    let finished = runner.run_all().await.map_err(|e| e.to_string())?;
    listener.abort();
    let restarts = runner.backend.lock().await.restarts;
    let mut summary = summary::summarise(&finished.outcomes, finished.failed);
    summary.command = command_line();
    summary.seed = args.seed;
    summary.runs_requested = args.runs;
    summary.interrupted = finished.interrupted;
    summary.harness.wall_ms = started.elapsed().as_millis() as u64;
    summary.harness.shrink_runs = finished.shrink_runs;
    summary.harness.dynamodb_restarts = restarts;
    write(&args.out, &summary).map_err(|e| format!("writing the summary: {e}"))?;
    eprintln!(
        "campaign: {} of {} runs violated; {} ({:.0} s)",
        summary.violations,
        summary.runs,
        args.out.join(HTML_FILE).display(),
        started.elapsed().as_secs_f64()
    );
    for f in &summary.failed {
        eprintln!(
            "  {} (seed {}): {}{}",
            f.dir,
            f.seed,
            f.reasons.join("; "),
            f.shrunk_scenario
                .as_ref()
                .map(|s| format!("\n    shrunk: {}", args.out.join(s).display()))
                .unwrap_or_default()
        );
    }
    Ok(if summary.violations > 0 {
        1
    } else if summary.interrupted {
        130
    } else {
        0
    })
}

/// Writes campaign.json, campaign.md and campaign.html into `dir`.
pub fn write(dir: &Path, summary: &summary::Campaign) -> anyhow::Result<()> {
    std::fs::write(
        dir.join(JSON_FILE),
        serde_json::to_string_pretty(summary)? + "\n",
    )?;
    std::fs::write(dir.join(MARKDOWN_FILE), render::markdown(summary))?;
    std::fs::write(dir.join(HTML_FILE), render::html(summary)?)?;
    Ok(())
}

/// Counts Ctrl-C / SIGTERM: the first lets the run in progress finish, the second stops it.
async fn count_signals(tx: watch::Sender<u32>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return;
    };
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tx.send_modify(|n| *n += 1);
        if *tx.borrow() == 1 {
            eprintln!("campaign: finishing the run in progress, then writing the summary (again to stop at once)");
        }
    }
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_support;
