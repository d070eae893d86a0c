//! `lease-worker`: the reference DynamoDB lease worker for sequenced WebSocket streams.
//!
//! It owns logical streams through conditional writes on the lease table (design §2), consumes
//! each owned stream's upstream from its checkpoint (§3), publishes batches to a fenced sink (§4),
//! checkpoints after the sink accepts, and drains cleanly on SIGTERM. The decisions live in the
//! pure [`decide`] module; the other modules are thin I/O around it.
//!
//! Entry point: [`run`] with a validated [`Config`] and a shutdown future.

pub mod capacity;
pub mod config;
pub mod decide;
pub mod discovery;
pub mod http;
pub mod lease;
pub mod membership;
pub mod metrics;
pub mod run;
pub mod sink;
pub mod stream;
pub mod write_gate;

pub use config::{Cli, Config, ConfigError, RawConfig, ENV_VARS};
pub use lease::{DYNAMODB_ACTIONS, MEMBERS_DYNAMODB_ACTIONS};
pub use run::{run, RunError, RunSummary};

/// Installs the global `tracing` subscriber: human text, or one JSON object a line.
/// `RUST_LOG` refines the default filter (`info`, quieter AWS/HTTP internals). Text is coloured
/// only on a terminal and without `NO_COLOR`.
pub fn init_tracing(format: config::LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new("info,aws_config=warn,aws_smithy_runtime=warn,hyper=warn,tungstenite=warn")
    });
    // Colour only for a person at a terminal: never in files, pipes or CloudWatch, nor when
    // NO_COLOR is set (no-color.org).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = match format {
        config::LogFormat::Text => builder.with_target(false).try_init(),
        config::LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}
