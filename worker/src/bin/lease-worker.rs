//! `lease-worker` binary: flags → config → `lease_worker::run`, with OS signals as shutdown.
//! Exit codes: 0 after a drain (or a healthy `health`), 1 on a runtime failure or unhealthy
//! `health`, 2 for a refused configuration (including a `wss://`/`https://` URL with no CA
//! certificate to trust), 130 on a second signal.

use std::process::ExitCode;

use clap::Parser;
use lease_worker::config::{tls, Command};
use lease_worker::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lease-worker: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(Command::Health { addr }) = cli.command {
        return match runtime.block_on(lease_worker::http::check_health(&addr)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lease-worker health: not ready: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let config = match cli.run.validate() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("lease-worker: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    tls::install_crypto_provider();
    let trust = match tls::check(&config) {
        Ok(trust) => trust,
        Err(e) => {
            eprintln!("lease-worker: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    lease_worker::init_tracing(config.log_format);
    if let Some(trust) = trust {
        tracing::info!(roots = trust.roots, source = %trust.source, "TLS: trusting {} CA certificates", trust.roots);
        for warning in &trust.warnings {
            tracing::warn!(source = %trust.source, %warning, "TLS: a CA certificate could not be loaded");
        }
    }
    runtime.block_on(async {
        match lease_worker::run(config, first_signal()).await {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "lease-worker failed");
                ExitCode::FAILURE
            }
        }
    })
}

/// Resolves on the first SIGTERM or SIGINT; a second one exits the process at once.
async fn first_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; only a kill will stop this worker");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining (a second signal exits at once)"),
        _ = int.recv() => tracing::info!("SIGINT: draining (a second signal exits at once)"),
    }
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        eprintln!("lease-worker: second signal; exiting without finishing the drain");
        std::process::exit(130);
    });
}
