//! `harness bench`: takeover latency against its physical floor over a lease sweep, with the
//! DynamoDB cost of each setting ([`takeover`]), and end-to-end throughput ([`throughput`]).
//! Both reuse the run machinery — fleet, fencing sink, history, analysis, DynamoDB Local.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{Args, Subcommand};

mod lab;
pub mod logs;
pub mod metrics;
pub mod output;
pub mod scale;
mod scale_model;
pub mod stats;
pub mod takeover;
pub mod throughput;

/// `harness bench` subcommands.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Crash and handoff takeover time against the floor, expiry-aware vs poll, per lease; cost.
    Takeover(TakeoverArgs),
    /// Highest sustained events/s through a fleet; per core, per stream RSS, harness CPU share.
    Throughput(ThroughputArgs),
    /// DynamoDB cost per stream-hour, hottest item, takeover and memory as the fleet grows
    /// (W = 10, 50, 100 side by side), and a cost model at any size.
    Scale(ScaleArgs),
}

/// Flags shared by both benches.
#[derive(Debug, Args)]
pub struct Common {
    /// Output directory (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// A short variant (under 3 minutes) for CI.
    #[arg(long)]
    pub quick: bool,
    /// auto | container | jar | endpoint=URL
    #[arg(long, default_value = "auto", env = dynamodb_local::ENV_MODE)]
    pub dynamodb: String,
    /// The lease-worker executable (default: beside this harness).
    #[arg(long)]
    pub worker_bin: Option<PathBuf>,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// `harness bench takeover` flags.
#[derive(Debug, Args)]
pub struct TakeoverArgs {
    #[command(flatten)]
    pub common: Common,
    /// Crash takeovers per lease and mode (as many handoffs again). Default 3, quick 2.
    #[arg(long)]
    pub runs: Option<usize>,
    /// Lease lengths in seconds, comma-separated. Default 1,3,10,30, quick 3,5.
    #[arg(long, value_delimiter = ',')]
    pub lease: Option<Vec<f64>>,
    /// renew = lease / ratio.
    #[arg(long, default_value_t = 3.0)]
    pub renew_ratio: f64,
    /// Streams per lab. Default 120, quick 60.
    #[arg(long)]
    pub streams: Option<usize>,
    /// Workers per lab. Default 4, quick 3.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Events per second per stream.
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// SKEW_MARGIN_MS given to the workers (part of the crash floor).
    #[arg(long, default_value_t = 200)]
    pub skew_margin_ms: u64,
    /// SCAN_SECONDS given to the workers (default: theirs, = renew). Released streams are
    /// found by scans, so this bounds a graceful handoff.
    #[arg(long)]
    pub scan_seconds: Option<f64>,
}

/// `harness bench throughput` flags.
#[derive(Debug, Args)]
pub struct ThroughputArgs {
    #[command(flatten)]
    pub common: Common,
    /// Workers in the fleet. Default 20, quick 4.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Stream counts to ramp through, comma-separated. Default 500,1000,2000, quick 100,200.
    #[arg(long, value_delimiter = ',')]
    pub streams: Option<Vec<usize>>,
    /// Per-stream rates to ramp through (events/s), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub rates: Option<Vec<f64>>,
    /// Seconds each step is measured. Default 15, quick 6.
    #[arg(long)]
    pub step_seconds: Option<u64>,
    /// Route the workers' links through the harness's fault proxies (no fault applied):
    /// `none`, `all` (every link of every worker), or `both` (each step measured without, then
    /// with, side by side: what the fault machinery costs when a scenario uses it).
    #[arg(long, default_value = "none", value_parser = ["none", "all", "both"])]
    pub proxies: String,
}

/// `harness bench scale` flags.
#[derive(Debug, Args)]
pub struct ScaleArgs {
    #[command(flatten)]
    pub common: Common,
    /// Streams in the table. Default 2000, quick 60.
    #[arg(long)]
    pub streams: Option<usize>,
    /// Fleet sizes measured one after the other, comma-separated. Default 10,50,100, quick 2,4.
    #[arg(long, value_delimiter = ',')]
    pub workers: Option<Vec<usize>>,
    /// Events per second per stream (low: this bench measures the lease machinery).
    #[arg(long, default_value_t = 0.5)]
    pub rate: f64,
    /// Lease in seconds (renew = lease / 3). Default 30 (the worker's), quick 6.
    #[arg(long)]
    pub lease: Option<f64>,
    /// Seconds of the quiet window the rates come from. Default 60, quick 8.
    #[arg(long)]
    pub window_seconds: Option<u64>,
    /// Crash takeovers per fleet size (as many graceful handoffs again).
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// FLEET_POLL_MS given to the workers.
    #[arg(long, default_value_t = 50)]
    pub fleet_poll_ms: u64,
    /// Discovery designs measured, comma-separated (`full`, `segmented`: the worker's
    /// DISCOVERY), each at every fleet size, side by side in one run.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "full")]
    pub discovery: Vec<crate::cost::Discovery>,
    /// Extra sizes the cost model prices, STREAMS:WORKERS, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10000:100,100000:1000")]
    pub model: Vec<String>,
    /// On-demand price, USD per million write request units (us-east-1, 2026).
    #[arg(long, default_value_t = 0.625)]
    pub write_price: f64,
    /// On-demand price, USD per million read request units (us-east-1, 2026).
    #[arg(long, default_value_t = 0.125)]
    pub read_price: f64,
}

/// `STREAMS:WORKERS` → the pair, or what is wrong with it.
fn model_size(text: &str) -> Result<(u64, u64), String> {
    let bad =
        || format!("--model {text:?}: expected STREAMS:WORKERS, both positive (e.g. 100000:1000)");
    let (s, w) = text.split_once(':').ok_or_else(bad)?;
    let (s, w) = (s.trim().parse::<u64>(), w.trim().parse::<u64>());
    match (s, w) {
        (Ok(s), Ok(w)) if s > 0 && w > 0 => Ok((s, w)),
        _ => Err(bad()),
    }
}

/// Set by the first Ctrl-C or SIGTERM. The bench finishes the fault or step it is in (its
/// workers, DynamoDB Local and files are ended properly), writes what it measured and exits 130;
/// a second signal quits at once (workers and a DynamoDB Local jar die with the harness through
/// `PR_SET_PDEATHSIG`; a DynamoDB Local container is left running).
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// Whether a signal asked the bench to stop.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Listens for the signals for the rest of the process. The handlers are installed before
    /// this returns and the same pair serves both signals, so neither can slip past.
    fn listen() -> std::io::Result<Interrupt> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let interrupt = Interrupt::default();
        let flag = interrupt.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            flag.set();
            eprintln!(
                "harness bench: interrupted — finishing the current fault or step, then writing what was measured (signal again to quit at once)"
            );
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            eprintln!("harness bench: second signal — quitting without writing");
            std::process::exit(130);
        });
        Ok(interrupt)
    }
}

/// What a bench measured, as far as its ending is concerned.
trait Measured {
    /// A signal stopped a loop before its end.
    fn interrupted(&self) -> bool;
    /// Nothing was measured at all.
    fn is_empty(&self) -> bool;
    /// What the measurement found wrong (fails the bench, exit 1, once the files are written).
    fn violations(&self) -> &[String] {
        &[]
    }
}

impl Measured for takeover::TakeoverBench {
    fn interrupted(&self) -> bool {
        self.interrupted
    }
    fn is_empty(&self) -> bool {
        self.takeover.is_empty() && self.cost.is_empty()
    }
    fn violations(&self) -> &[String] {
        &self.violations
    }
}

impl Measured for scale::ScaleBench {
    fn interrupted(&self) -> bool {
        self.interrupted
    }
    fn is_empty(&self) -> bool {
        self.scale.is_empty()
    }
    fn violations(&self) -> &[String] {
        &self.violations
    }
}

impl Measured for throughput::Throughput {
    fn interrupted(&self) -> bool {
        self.interrupted
    }
    fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

fn mode(text: &str) -> Result<dynamodb_local::Mode, ExitCode> {
    text.parse::<dynamodb_local::Mode>().map_err(|e| {
        eprintln!("harness: --dynamodb {text}: {e}");
        ExitCode::from(2)
    })
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// Runs `harness bench ...`; exit 0 when the files were written, 1 when the bench failed, 2
/// for invalid arguments, 130 when a signal cut it short.
pub async fn main(args: BenchArgs) -> ExitCode {
    let common = match &args.command {
        BenchCommand::Takeover(a) => &a.common,
        BenchCommand::Throughput(a) => &a.common,
        BenchCommand::Scale(a) => &a.common,
    };
    let dynamodb = match mode(&common.dynamodb) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let interrupt = match Interrupt::listen() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("harness: installing the Ctrl-C / SIGTERM handlers: {e}");
            return ExitCode::from(1);
        }
    };
    match args.command {
        BenchCommand::Takeover(a) => takeover_main(a, dynamodb, interrupt).await,
        BenchCommand::Throughput(a) => throughput_main(a, dynamodb, interrupt).await,
        BenchCommand::Scale(a) => scale_main(a, dynamodb, interrupt).await,
    }
}

/// A bench's ending: its files written and its summary printed (exit 0; 130 when a signal cut
/// it short), or why not (exit 1). A bench interrupted before it measured anything writes
/// nothing, so an earlier run's files in the same directory are kept.
fn conclude<T: Measured>(
    bench: &str,
    result: anyhow::Result<T>,
    write: impl FnOnce(&T) -> anyhow::Result<()>,
    summary: impl FnOnce(&T),
) -> ExitCode {
    let done = match result {
        Ok(done) => done,
        Err(e) => {
            eprintln!("harness: bench {bench}: {e:#}");
            return ExitCode::from(1);
        }
    };
    if done.interrupted() && done.is_empty() {
        eprintln!(
            "harness: bench {bench}: interrupted before anything was measured; nothing written"
        );
        return ExitCode::from(130);
    }
    if let Err(e) = write(&done) {
        eprintln!("harness: writing the bench files: {e}");
        return ExitCode::from(1);
    }
    summary(&done);
    if !done.violations().is_empty() {
        for v in done.violations() {
            eprintln!("harness: bench {bench}: VIOLATION: {v}");
        }
        return ExitCode::from(1);
    }
    if done.interrupted() {
        eprintln!("harness: bench {bench}: interrupted; the files hold what was measured before the signal");
        return ExitCode::from(130);
    }
    ExitCode::SUCCESS
}

async fn takeover_main(
    a: TakeoverArgs,
    dynamodb: dynamodb_local::Mode,
    interrupt: Interrupt,
) -> ExitCode {
    let quick = a.common.quick;
    let leases = a.lease.unwrap_or_else(|| {
        if quick {
            vec![3.0, 5.0]
        } else {
            vec![1.0, 3.0, 10.0, 30.0]
        }
    });
    if leases.iter().any(|l| !(l.is_finite() && *l > 0.0)) || a.renew_ratio <= 1.0 {
        eprintln!("harness: --lease must be positive seconds and --renew-ratio above 1");
        return ExitCode::from(2);
    }
    let options = takeover::TakeoverOptions {
        out: a.common.out.clone(),
        sweep: takeover::Sweep {
            runs: a.runs.unwrap_or(if quick { 2 } else { 3 }).max(1),
            leases_ms: leases.iter().map(|l| (l * 1000.0).round() as u64).collect(),
            renew_ratio: a.renew_ratio,
            streams: a.streams.unwrap_or(if quick { 60 } else { 120 }).max(1),
            workers: a.workers.unwrap_or(if quick { 3 } else { 4 }).max(2),
            rate: a.rate,
            seed: a.common.seed,
            skew_margin_ms: a.skew_margin_ms,
            scan_seconds: a.scan_seconds,
        },
        dynamodb,
        worker_bin: a.common.worker_bin.clone(),
        interrupt: interrupt.clone(),
    };
    conclude(
        "takeover",
        takeover::run(&options).await,
        |bench| output::write_takeover(&options.out, bench, &command_line()),
        |bench| {
            print!(
                "{}",
                crate::report::table_markdown(&output::takeover_table(bench))
            );
            println!();
            print!(
                "{}",
                crate::report::table_markdown(&output::cost_table(bench))
            );
            for e in &bench.errors {
                eprintln!("warning: {e}");
            }
            println!("  written: {}", options.out.join("bench.html").display());
        },
    )
}

async fn throughput_main(
    a: ThroughputArgs,
    dynamodb: dynamodb_local::Mode,
    interrupt: Interrupt,
) -> ExitCode {
    let quick = a.common.quick;
    let options = throughput::ThroughputOptions {
        out: a.common.out.clone(),
        workers: a.workers.unwrap_or(if quick { 4 } else { 20 }).max(1),
        streams: a.streams.unwrap_or_else(|| {
            if quick {
                vec![100, 200]
            } else {
                vec![500, 1000, 2000]
            }
        }),
        rates: a.rates.unwrap_or_else(|| {
            if quick {
                vec![20.0, 100.0]
            } else {
                vec![10.0, 25.0, 50.0, 100.0]
            }
        }),
        step_ms: a.step_seconds.unwrap_or(if quick { 6 } else { 15 }) * 1000,
        proxies: match a.proxies.as_str() {
            "all" => vec![true],
            "both" => vec![false, true],
            _ => vec![false],
        },
        seed: a.common.seed,
        dynamodb,
        worker_bin: a.common.worker_bin.clone(),
        interrupt: interrupt.clone(),
    };
    conclude(
        "throughput",
        throughput::run(&options).await,
        |result| throughput::write(&options.out, result, &command_line()),
        |result| {
            print!(
                "{}",
                crate::report::table_markdown(&throughput::table(result))
            );
            println!("  written: {}", options.out.join("bench.json").display());
        },
    )
}

async fn scale_main(
    a: ScaleArgs,
    dynamodb: dynamodb_local::Mode,
    interrupt: Interrupt,
) -> ExitCode {
    let quick = a.common.quick;
    let lease = a.lease.unwrap_or(if quick { 6.0 } else { 30.0 });
    let workers =
        a.workers
            .clone()
            .unwrap_or_else(|| if quick { vec![2, 4] } else { vec![10, 50, 100] });
    let problem = if !(lease.is_finite() && lease >= 1.0) {
        Some(format!("--lease {lease}: must be at least 1 second"))
    } else if let Some(w) = workers.iter().find(|w| **w < 2) {
        Some(format!(
            "--workers {w}: each fleet needs at least 2 workers (one is killed, one is drained)"
        ))
    } else if !(a.rate.is_finite() && a.rate > 0.0) {
        Some(format!("--rate {}: must be a positive number", a.rate))
    } else if !(a.write_price > 0.0 && a.read_price > 0.0) {
        Some("--write-price and --read-price must be positive".to_string())
    } else {
        None
    };
    if let Some(p) = problem {
        eprintln!("harness bench scale: {p}");
        return ExitCode::from(2);
    }
    let model_sizes = match a.model.iter().map(|m| model_size(m)).collect() {
        Ok(sizes) => sizes,
        Err(e) => {
            eprintln!("harness bench scale: {e}");
            return ExitCode::from(2);
        }
    };
    let lease_ms = (lease * 1000.0).round() as u64;
    let options = scale::ScaleOptions {
        out: a.common.out.clone(),
        config: scale::ScaleConfig {
            streams: a.streams.unwrap_or(if quick { 60 } else { 2000 }).max(1),
            discovery: {
                let mut d = a.discovery.clone();
                d.sort_unstable();
                d.dedup();
                d
            },
            workers,
            rate: a.rate,
            lease_ms,
            renew_ms: takeover::renew_ms(lease_ms, 3.0),
            fleet_poll_ms: a.fleet_poll_ms,
            window_ms: a
                .window_seconds
                .unwrap_or(if quick { 8 } else { 60 })
                .max(1)
                * 1000,
            runs: a.runs.max(1),
            seed: a.common.seed,
            write_price: a.write_price,
            read_price: a.read_price,
            model_sizes,
            worker_bin: String::new(),
        },
        dynamodb,
        worker_bin: a.common.worker_bin.clone(),
        interrupt,
    };
    conclude(
        "scale",
        scale::run(&options).await,
        |b| scale::write(&options.out, b, &command_line()),
        |b| {
            print!("{}", crate::report::table_markdown(&scale::scale_table(b)));
            if let Some(m) = &b.cost_model {
                println!();
                print!(
                    "{}",
                    crate::report::table_markdown(&scale::cost_model_table(m))
                );
            }
            for e in &b.errors {
                eprintln!("warning: {e}");
            }
            println!("  written: {}", options.out.join("scale.html").display());
        },
    )
}
