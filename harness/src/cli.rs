//! The command line (clap derive) and what each subcommand does; `main` only calls [`main`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::run::{RunError, RunOptions};
use crate::scenario::Scenario;

/// Default directory `harness list` reads.
pub const DEFAULT_SCENARIO_DIR: &str = "scenarios";

/// `harness`: chaos and load harness for the DynamoDB lease worker.
#[derive(Debug, Parser)]
#[command(name = "harness", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one scenario and write report.json, history.jsonl and worker logs into --out.
    Run(RunArgs),
    /// Check scenario files without running them (exit 2 on the first invalid one).
    Validate {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// List the scenarios with their one-line descriptions.
    List {
        #[arg(long, default_value = DEFAULT_SCENARIO_DIR)]
        dir: PathBuf,
    },
    /// Benchmarks: `bench takeover` (takeover vs its floor, cost per lease), `bench throughput`.
    Bench(crate::bench::BenchArgs),
    /// Randomized, seeded fault schedules run many times, each judged; failures shrunk to the
    /// smallest schedule that still fails; campaign.json/md/html (see `harness campaign --help`).
    Campaign(crate::campaign::CampaignArgs),
    /// Render report.md, report.html and junit.xml again from DIR/history.jsonl + DIR/report.json
    /// (exit 0 when the report passed, 1 when it failed, 2 when the files cannot be read).
    Report { dir: PathBuf },
}

/// `harness run` flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The scenario file.
    #[arg(required_unless_present = "replay", conflicts_with = "replay")]
    pub scenario: Option<PathBuf>,
    /// Run a campaign run's directory again (`DIR/runs/017`): its scenario.toml, same actions,
    /// offsets and targets; the actions are then compared with the original run's history.
    #[arg(long, value_name = "RUN_DIR")]
    pub replay: Option<PathBuf>,
    /// Output directory (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Overrides the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// auto | container | jar | endpoint=URL
    #[arg(long, default_value = "auto", env = dynamodb_local::ENV_MODE)]
    pub dynamodb: String,
    /// The lease-worker executable (default: beside this harness).
    #[arg(long)]
    pub worker_bin: Option<PathBuf>,
}

/// Arguments of a subcommand slot that another module fills in.
#[derive(Debug, Args)]
pub struct PassThrough {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Runs the parsed command; the exit code follows design §5.
pub async fn main(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Run(args) => run(args).await,
        Command::Validate { files } => validate(&files),
        Command::List { dir } => list(&dir),
        Command::Report { dir } => crate::report::command(&dir),
        Command::Bench(args) => crate::bench::main(args).await,
        Command::Campaign(args) => crate::campaign::main(args).await,
    }
}

async fn run(args: RunArgs) -> ExitCode {
    let dynamodb = match args.dynamodb.parse::<dynamodb_local::Mode>() {
        Ok(mode) => mode,
        Err(e) => {
            eprintln!("harness: --dynamodb {}: {e}", args.dynamodb);
            return ExitCode::from(2);
        }
    };
    let scenario = match (&args.replay, args.scenario) {
        (Some(dir), _) => match crate::campaign::replay::scenario_of(dir) {
            Ok(path) => path,
            Err(e) => {
                eprintln!("harness: {e}");
                return ExitCode::from(2);
            }
        },
        (None, Some(path)) => path,
        (None, None) => {
            eprintln!("harness: run needs a scenario file or --replay RUN_DIR");
            return ExitCode::from(2);
        }
    };
    let options = RunOptions {
        scenario,
        out: args.out,
        seed: args.seed,
        dynamodb,
        worker_bin: args.worker_bin,
        table: None,
        quiet: false,
    };
    match crate::run::run(&options, shutdown_signal()).await {
        Ok(report) => {
            print!("{}", crate::expect::summary_table(&report));
            println!("  report: {}", options.out.join("report.json").display());
            let same = match &args.replay {
                Some(original) => crate::campaign::replay::report(original, &options.out),
                None => true,
            };
            ExitCode::from(if report.passed && same { 0 } else { 1 })
        }
        Err(e) => {
            eprintln!("harness: {e}");
            if let RunError::Failed(_) = e {
                eprintln!("  worker logs: {}", options.out.join("workers").display());
            }
            ExitCode::from(e.exit_code())
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn validate(files: &[PathBuf]) -> ExitCode {
    let mut ok = true;
    for file in files {
        match Scenario::load(file) {
            Ok(s) => println!(
                "{}: ok ({}, {} faults, {} expectations)",
                file.display(),
                s.name,
                s.faults.len(),
                s.expectations.len()
            ),
            Err(e) => {
                eprintln!("{e}");
                ok = false;
            }
        }
    }
    ExitCode::from(if ok { 0 } else { 2 })
}

fn list(dir: &Path) -> ExitCode {
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect(),
        Err(e) => {
            eprintln!("harness: cannot read {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    };
    paths.sort();
    let mut ok = true;
    for path in paths {
        match Scenario::load(&path) {
            Ok(s) => println!(
                "{:<20} {}",
                s.name,
                s.description.lines().next().unwrap_or("")
            ),
            Err(e) => {
                println!(
                    "{:<20} INVALID: {e}",
                    path.file_stem().unwrap_or_default().to_string_lossy()
                );
                ok = false;
            }
        }
    }
    ExitCode::from(if ok { 0 } else { 2 })
}
