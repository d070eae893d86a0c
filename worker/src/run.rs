//! Wiring: builds the DynamoDB client, the sink client, metrics and the HTTP listener, runs the
//! supervisor until `shutdown` resolves, then drains within `DRAIN_SECONDS`.
//!
//! Shutdown is a parameter, so tests pass their own signal; OS signals are handled by the binary.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;

use crate::capacity::CapacityMeter;
use crate::config::{resolve_owner_id, Config};
use crate::decide::Timing;
use crate::discovery::Supervisor;
use crate::http::{self, Readiness};
use crate::lease::LeaseTable;
use crate::metrics::Metrics;
use crate::sink::Sink;
use crate::stream::Shared;

/// Why the worker could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The metrics listener could not be bound or its address file written.
    #[error("{0}")]
    Listener(#[from] std::io::Error),
}

/// What a finished run reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    /// The owner id the worker used.
    pub owner_id: String,
    /// Streams whose release at drain could not be confirmed (left to expire).
    pub unreleased: usize,
}

/// Builds the DynamoDB client: the SDK's default chain, our region/endpoint when given, no
/// SDK-level retries (the worker retries itself, bounded by each lease's local deadline), and
/// every request's consumed capacity counted in `metrics` ([`CapacityMeter`]).
pub async fn dynamodb_client(config: &Config, metrics: Arc<Metrics>) -> aws_sdk_dynamodb::Client {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(1))
                .build(),
        );
    if let Some(region) = &config.aws_region {
        loader = loader.region(aws_config::Region::new(region.clone()));
    }
    if let Some(endpoint) = &config.aws_endpoint_url {
        loader = loader.endpoint_url(endpoint);
    }
    let sdk = loader.load().await;
    let members_table = match &config.discovery {
        crate::config::Discovery::Segmented { members_table } => Some(members_table.clone()),
        crate::config::Discovery::Full => None,
    };
    let dynamodb = aws_sdk_dynamodb::config::Builder::from(&sdk)
        .interceptor(CapacityMeter::new(metrics, members_table))
        .build();
    aws_sdk_dynamodb::Client::from_conf(dynamodb)
}

/// Runs the worker until `shutdown` resolves, then drains and returns.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<RunSummary, RunError> {
    let owner_id = resolve_owner_id(config.owner_id.as_deref()).await;
    if config.chaos_skip_deadline_check {
        tracing::error!(
            owner_id = %owner_id,
            "CHAOS_SKIP_DEADLINE_CHECK is ON: this worker ignores its local lease deadline and \
             refused renewals and keeps publishing until the sink fences it. TEST ONLY."
        );
    }
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::default());
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let (bound, http_task) = http::serve(
        config.metrics_addr,
        config.metrics_addr_file.as_deref(),
        metrics.clone(),
        readiness.clone(),
        async move {
            let _ = http_stopped.await;
        },
    )
    .await?;
    tracing::info!(
        owner_id = %owner_id,
        metrics_addr = %bound,
        table = %config.table,
        lease_ms = config.lease.as_millis() as u64,
        renew_ms = config.renew.as_millis() as u64,
        scan_ms = config.scan.as_millis() as u64,
        mode = ?config.acquire_mode,
        discovery = ?config.discovery,
        "lease-worker started"
    );

    let client = dynamodb_client(&config, metrics.clone()).await;
    let owner: Arc<str> = owner_id.as_str().into();
    let mut table = LeaseTable::new(client, &config.table, &owner_id, metrics.clone());
    if let crate::config::Discovery::Segmented { members_table } = &config.discovery {
        table = table.with_members(members_table);
    }
    let shared = Arc::new(Shared {
        table,
        sink: Sink::new(&config.sink_url),
        metrics: metrics.clone(),
        owner_id: owner,
        upstream_url: config.upstream_url.clone(),
        timing: Timing {
            lease: config.lease,
            safety_margin: config.safety_margin,
        },
        renew_every: config.renew,
        batch_max_events: config.batch_max_events,
        batch_max_delay: config.batch_max_delay,
        upstream_idle: config.upstream_idle,
        sink_reject: config.sink_reject.clone(),
        enforce_deadline: !config.chaos_skip_deadline_check,
    });
    let config = Arc::new(config);
    let supervisor = Supervisor::new(shared, config, readiness);
    let unreleased = supervisor.run(shutdown).await;
    tracing::info!(unreleased, "drained; exiting");
    let _ = stop_http.send(());
    let _ = tokio::time::timeout(Duration::from_secs(1), http_task).await;
    Ok(RunSummary {
        owner_id,
        unreleased,
    })
}
