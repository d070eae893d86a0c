//! The worker's HTTP listener: `/metrics` (Prometheus text), `/healthz` (the process is alive)
//! and `/readyz` (DynamoDB answered and a discovery scan completed; not while draining), plus the
//! client side of `lease-worker health`.
//!
//! It only reports state owned elsewhere; it never changes it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// Readiness as the worker sees it.
#[derive(Debug, Default)]
pub struct Readiness {
    /// A discovery scan succeeded (DynamoDB is reachable).
    pub scanned: AtomicBool,
    /// The worker is draining: not ready for more work.
    pub draining: AtomicBool,
}

impl Readiness {
    /// Ready: scanned at least once and not draining.
    pub fn is_ready(&self) -> bool {
        self.scanned.load(Ordering::Relaxed) && !self.draining.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
}

/// Binds `addr`, writes the bound address to `addr_file` (tmp + rename) when given, and serves
/// until `shutdown` resolves. Returns the bound address and the server task.
pub async fn serve(
    addr: SocketAddr,
    addr_file: Option<&Path>,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(e.kind(), format!("cannot bind METRICS_ADDR={addr}: {e}"))
    })?;
    let bound = listener.local_addr()?;
    if let Some(path) = addr_file {
        write_atomically(path, &bound.to_string()).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot write METRICS_ADDR_FILE={}: {e}", path.display()),
            )
        })?;
    }
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready_handler))
        .with_state(AppState { metrics, readiness });
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "metrics listener failed");
        }
    });
    Ok((bound, task))
}

fn write_atomically(path: &Path, contents: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    let body = state.metrics.render(lease_table::now_ms());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
}

async fn ready_handler(State(state): State<AppState>) -> impl IntoResponse {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ready\n")
    } else if state.readiness.draining.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "no discovery scan has succeeded yet\n",
        )
    }
}

/// `lease-worker health`: true when `GET http://{addr}/readyz` answers 200 within 3 s.
/// An unspecified IP (0.0.0.0 or ::) means this host.
pub async fn check_health(addr: &str) -> Result<(), String> {
    let target = match addr.parse::<SocketAddr>() {
        Ok(mut sock) => {
            if sock.ip().is_unspecified() {
                sock.set_ip(if sock.is_ipv4() {
                    std::net::Ipv4Addr::LOCALHOST.into()
                } else {
                    std::net::Ipv6Addr::LOCALHOST.into()
                });
            }
            sock.to_string()
        }
        Err(_) => addr.to_string(),
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .map_err(|e| e.to_string())?;
    let url = format!("http://{target}/readyz");
    let response = client
        .get(&url)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if response.status() == StatusCode::OK {
        Ok(())
    } else {
        Err(format!("{url} answered {}", response.status()))
    }
}
