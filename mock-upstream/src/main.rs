//! `mock-upstream`: parses flags into an [`UpstreamConfig`], serves until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use mock_upstream::{UpstreamConfig, DEFAULT_PAYLOAD_BYTES, DEFAULT_RATE, DEFAULT_RETENTION};

/// A sequenced WebSocket feed with replay, bounded retention, an admin API and fault knobs.
///
/// Clients connect to ws://LISTEN/streams/{id}?from=SEQ; the admin API is on the same port
/// (GET /admin/streams, /admin/connections, /admin/status; POST /admin/pause, /admin/resume,
/// /admin/stop, /admin/faults, /admin/streams/{id}/drop, /admin/streams/{id}/produce?count=N).
#[derive(Debug, Parser)]
#[command(name = "mock-upstream", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port, printed at start).
    #[arg(long, env = "MOCK_UPSTREAM_LISTEN", default_value = "127.0.0.1:9001")]
    listen: SocketAddr,

    /// Comma-separated stream ids, e.g. s-0001,s-0002.
    #[arg(long, value_delimiter = ',', conflicts_with = "stream_count")]
    streams: Vec<String>,

    /// Number of streams named PREFIX0001, PREFIX0002, ... (instead of --streams).
    #[arg(long)]
    stream_count: Option<usize>,

    /// Prefix for --stream-count names.
    #[arg(long, default_value = "s-", requires = "stream_count")]
    stream_prefix: String,

    /// Events per second per stream (fractions allowed; 0 = only when the admin API produces).
    #[arg(long, default_value_t = DEFAULT_RATE)]
    rate: f64,

    /// Payload size of each event in bytes.
    #[arg(long, default_value_t = DEFAULT_PAYLOAD_BYTES)]
    payload_bytes: usize,

    /// Events kept per stream for ?from= replay (a ring buffer).
    #[arg(long, default_value_t = DEFAULT_RETENTION)]
    retention: usize,
}

impl Args {
    fn into_config(self) -> Result<UpstreamConfig, String> {
        let streams = match self.stream_count {
            Some(0) => return Err("--stream-count 0 is invalid: serve at least one stream".into()),
            Some(n) => (1..=n)
                .map(|i| lease_protocol::stream_name(&self.stream_prefix, i))
                .collect(),
            None if self.streams.is_empty() => {
                return Err("no streams: give --streams a,b,c or --stream-count N".into())
            }
            None => self.streams,
        };
        let mut config = UpstreamConfig::new(streams);
        config.listen = self.listen;
        config.rate = self.rate;
        config.payload_bytes = self.payload_bytes;
        config.retention = self.retention;
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // Colour only for a person at a terminal (never in CI logs or files), and not with NO_COLOR.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config = match args.into_config() {
        Ok(config) => config,
        Err(msg) => {
            eprintln!("mock-upstream: {msg}");
            return ExitCode::from(2);
        }
    };
    let streams = config.streams.len();
    let (addr, handle) = match mock_upstream::start(config).await {
        Ok(started) => started,
        Err(err) => {
            eprintln!("mock-upstream: {err}");
            return ExitCode::from(1);
        }
    };
    println!("mock-upstream listening on {addr} with {streams} streams");
    shutdown_signal().await;
    eprintln!("mock-upstream: stopping");
    handle.shutdown().await;
    ExitCode::SUCCESS
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("install SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
