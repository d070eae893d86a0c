//! `harness`: parses the command line and hands over to the library.

use clap::Parser;

/// The harness allocates per event it relays (frames, batches, receipts) on many threads;
/// mimalloc's thread-local heaps cost it a fraction of glibc's arenas there (see the README's
/// Performance section).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "harness=info,warn".into()),
        )
        .with_writer(harness::report::LogWriter)
        .init();
    harness::cli::main(harness::cli::Cli::parse()).await
}
