//! `harness`: parses the command line and hands over to the library.

use clap::Parser;

/// The harness allocates per event it relays (frames, batches, receipts) on many threads;
/// mimalloc's thread-local heaps cost it a fraction of glibc's arenas there (see the README's
/// Performance section).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Colour only for a person at a terminal (never in CI logs or files), and not with NO_COLOR.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_ansi(ansi)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "harness=info,warn".into()),
        )
        .with_writer(harness::report::LogWriter)
        .init();
    harness::cli::main(harness::cli::Cli::parse()).await
}
