//! The command line (clap derive) and what each subcommand does; `main` only calls [`main`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::batch;
use crate::run::RunOptions;
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
    /// Run scenarios: one file writes its report into --out; several files or a folder write one
    /// directory per scenario plus summary.md, junit.xml and summary.json (exit: worst verdict).
    Run(RunArgs),
    /// Check scenario files without running them (exit 2 on the first invalid one).
    Validate {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// List the scenarios with their one-line descriptions (subfolders too, shown by path).
    List {
        #[arg(long, default_value = DEFAULT_SCENARIO_DIR)]
        dir: PathBuf,
    },
    /// Benchmarks: `bench takeover` (takeover vs its floor, cost per lease), `bench throughput`.
    Bench(crate::bench::BenchArgs),
    /// Randomized, seeded fault schedules run many times, each judged; failures shrunk to the
    /// smallest schedule that still fails; campaign.json/md/html (see `harness campaign --help`).
    Campaign(crate::campaign::CampaignArgs),
    /// Price the lease machinery on DynamoDB on-demand for fleets too large to run here
    /// (renewals, discovery scans, fleet-signal reads; a model, see `harness cost --help`).
    Cost(crate::cost::CostArgs),
    /// Render report.md, report.html and junit.xml again from DIR/history.jsonl + DIR/report.json
    /// (exit 0 when the report passed, 1 when it failed, 2 when the files cannot be read).
    Report { dir: PathBuf },
}

/// `harness run` flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenario files, or folders whose *.toml (directly inside, not subfolders) are all run.
    #[arg(
        required_unless_present = "replay",
        conflicts_with = "replay",
        value_name = "SCENARIO|FOLDER"
    )]
    pub scenarios: Vec<PathBuf>,
    /// Run a campaign run's directory again (`DIR/runs/017`): its scenario.toml, same actions,
    /// offsets and targets; the actions are then compared with the original run's history.
    #[arg(long, value_name = "RUN_DIR")]
    pub replay: Option<PathBuf>,
    /// Output directory (created if missing). One scenario file: its report goes here. Several,
    /// or a folder: OUT/<file stem>/ per scenario, plus OUT/summary.md, junit.xml, summary.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Overrides the scenario's seed (every scenario's, in a batch).
    #[arg(long)]
    pub seed: Option<u64>,
    /// The DynamoDB backend: auto (DynamoDB Local: a container if Docker answers, else the jar),
    /// container, jar, moto (open source, Apache-2.0: installed once with pip into the user
    /// cache), or endpoint=URL (one you run; nothing started or deleted).
    #[arg(long, default_value = "auto", env = dynamodb_local::ENV_MODE)]
    pub dynamodb: String,
    /// Print one JSON line per run on stdout as it ends (fields: harness/README.md); the
    /// human-readable tables go to stderr instead.
    #[arg(long)]
    pub summary_json: bool,
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
        Command::Cost(args) => crate::cost::main(args),
    }
}

/// `harness run --replay RUN_DIR`: a campaign run's scenario again, its actions compared with the
/// original history's.
async fn replay(
    dir: &std::path::Path,
    out: PathBuf,
    seed: Option<u64>,
    dynamodb: dynamodb_local::Mode,
    worker_bin: Option<PathBuf>,
) -> ExitCode {
    let scenario = match crate::campaign::replay::scenario_of(dir) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("harness: {e}");
            return ExitCode::from(2);
        }
    };
    let options = RunOptions {
        scenario,
        out,
        seed,
        dynamodb,
        worker_bin,
        table: None,
        quiet: false,
    };
    match crate::run::run(&options, shutdown_signal()).await {
        Ok(report) => {
            print!("{}", crate::expect::summary_table(&report));
            println!("  report: {}", options.out.join("report.json").display());
            let same = crate::campaign::replay::report(dir, &options.out);
            ExitCode::from(if report.passed && same { 0 } else { 1 })
        }
        Err(e) => {
            eprintln!("harness: {e}");
            ExitCode::from(e.exit_code())
        }
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
    if let Some(dir) = &args.replay {
        return replay(dir, args.out, args.seed, dynamodb, args.worker_bin).await;
    }
    let files = match batch::expand(&args.scenarios) {
        Ok(files) => files,
        Err(e) => {
            eprintln!("harness: {e}");
            return ExitCode::from(2);
        }
    };
    let is_batch = batch::is_batch(&args.scenarios);
    let planned = if is_batch {
        batch::plan(&files, &args.out)
    } else {
        // One file: its report goes straight into --out (design §5); run::run validates it.
        Ok(vec![batch::Planned {
            file: files[0].clone(),
            scenario: files[0]
                .file_stem()
                .map_or(String::new(), |s| s.to_string_lossy().into_owned()),
            dir: args.out.clone(),
        }])
    };
    let planned = match planned {
        Ok(planned) => planned,
        Err(e) => {
            eprintln!("{e}");
            eprintln!(
                "harness: nothing was run (every scenario is checked before the first starts)"
            );
            return ExitCode::from(2);
        }
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let mut outcomes = Vec::new();
    for (i, plan) in planned.iter().enumerate() {
        if *stop_rx.borrow() {
            eprintln!(
                "harness: interrupted: {} scenario(s) not run",
                planned.len() - i
            );
            break;
        }
        if is_batch {
            eprintln!(
                "harness: [{}/{}] {} -> {}",
                i + 1,
                planned.len(),
                plan.file.display(),
                plan.dir.display()
            );
        }
        let options = RunOptions {
            scenario: plan.file.clone(),
            out: plan.dir.clone(),
            seed: args.seed,
            dynamodb: dynamodb.clone(),
            worker_bin: args.worker_bin.clone(),
            table: None,
            quiet: false,
        };
        let mut stop = stop_rx.clone();
        let outcome = batch::run_one(&options, plan.clone(), async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        })
        .await;
        let human = match &outcome.report {
            Some(report) => format!(
                "{}  report: {}\n",
                crate::expect::summary_table(report),
                plan.dir.join("report.json").display()
            ),
            None => format!(
                "harness: {}\n",
                outcome.error.as_deref().unwrap_or("no report")
            ),
        };
        if args.summary_json {
            eprint!("{human}");
            println!(
                "{}",
                serde_json::to_string(&batch::summary_line(&outcome))
                    .expect("a summary line serialises")
            );
        } else if outcome.report.is_some() {
            print!("{human}");
        } else {
            eprint!("{human}");
        }
        if outcome.exit_code == 1 && outcome.report.is_none() {
            eprintln!("  worker logs: {}", plan.dir.join("workers").display());
        }
        outcomes.push(outcome);
    }
    if is_batch {
        if let Err(e) = batch::write_summary(&outcomes, &args.out) {
            eprintln!("harness: {e:#}");
            return ExitCode::from(2);
        }
        let table = batch::summary_markdown(&outcomes, &args.out);
        if args.summary_json {
            eprint!("\n{table}");
        } else {
            print!("\n{table}");
        }
        eprintln!(
            "harness: summary in {}",
            args.out.join(batch::SUMMARY_MARKDOWN).display()
        );
    }
    ExitCode::from(batch::worst(&outcomes))
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
    let mut paths = Vec::new();
    if let Err(e) = scenario_files(dir, &mut paths) {
        eprintln!("harness: cannot read {}: {e}", dir.display());
        return ExitCode::from(2);
    }
    paths.sort();
    let mut ok = true;
    for path in paths {
        // A scenario in a subfolder shows as `sub/name`, so `harness run` can be given its path.
        let folder = path
            .parent()
            .and_then(|p| p.strip_prefix(dir).ok())
            .filter(|p| !p.as_os_str().is_empty())
            .map(|p| format!("{}/", p.display()))
            .unwrap_or_default();
        match Scenario::load(&path) {
            Ok(s) => println!(
                "{:<20} {}",
                format!("{folder}{}", s.name),
                s.description.lines().next().unwrap_or("")
            ),
            Err(e) => {
                println!(
                    "{:<20} INVALID: {e}",
                    format!(
                        "{folder}{}",
                        path.file_stem().unwrap_or_default().to_string_lossy()
                    )
                );
                ok = false;
            }
        }
    }
    ExitCode::from(if ok { 0 } else { 2 })
}

/// Every `*.toml` under `dir`, subfolders included.
fn scenario_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            scenario_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(path);
        }
    }
    Ok(())
}
