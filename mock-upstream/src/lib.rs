//! `mock-upstream`: a sequenced WebSocket feed with replay, bounded retention, an admin API and
//! fault knobs (design §3). The stand-in for the real exchange or tenant feed.
//!
//! [`start`] binds, starts the producer and serves until [`UpstreamHandle::shutdown`]; the harness
//! embeds it in-process and drives it through the handle, other processes through the admin HTTP
//! API on the same port. The `mock-upstream` binary is a thin wrapper.

mod config;
mod connection;
mod faults;
mod feed;
mod server;
mod state;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Duration;

pub use config::{
    check_stream_id, UpstreamConfig, DEFAULT_PAYLOAD_BYTES, DEFAULT_PING_INTERVAL, DEFAULT_RATE,
    DEFAULT_RETENTION, DEFAULT_TICK,
};
pub use connection::{CLOSE_DROPPED, CLOSE_GOING_AWAY, CLOSE_SLOW_CONSUMER};
pub use faults::Faults;
pub use feed::ProductionState;
pub use state::Status;

use faults::FaultState;
use feed::Feed;
use state::Shared;

/// How long [`UpstreamHandle::shutdown`] waits for connections to say goodbye.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is impossible; the message names the field and value.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Starts the server on `config.listen` (port 0 allowed) and returns the bound address and the
/// handle that controls it. Must be called inside a Tokio runtime.
pub async fn start(config: UpstreamConfig) -> Result<(SocketAddr, UpstreamHandle), Error> {
    config.validate()?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| Error::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: config.listen,
        source,
    })?;
    let feed = Arc::new(Feed::new(
        &config.streams,
        config.rate,
        config.payload_bytes,
        config.retention,
    ));
    let shared = Arc::new(Shared {
        feed: feed.clone(),
        faults: Arc::new(FaultState::default()),
        ping_interval: config.ping_interval,
        shutdown: watch::Sender::new(false),
        open: watch::Sender::new(0),
    });
    let producer = tokio::spawn(feed.run_producer(config.tick));
    let mut stopping = shared.shutdown.subscribe();
    let app = server::router(shared.clone());
    let server = tokio::spawn(async move {
        let stopped = async move {
            let _ = stopping.wait_for(|&s| s).await;
        };
        if let Err(err) = axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await
        {
            tracing::error!(%err, "mock-upstream server failed");
        }
    });
    tracing::info!(%addr, streams = config.streams.len(), rate = config.rate, "mock-upstream listening");
    Ok((
        addr,
        UpstreamHandle {
            shared,
            server: Some(server),
            producer: Some(producer),
        },
    ))
}

/// Controls a running server in-process: the same operations as the admin HTTP API.
/// Dropping the handle stops the server (without waiting); prefer [`UpstreamHandle::shutdown`].
pub struct UpstreamHandle {
    shared: Arc<Shared>,
    server: Option<JoinHandle<()>>,
    producer: Option<JoinHandle<()>>,
}

impl UpstreamHandle {
    /// Last produced sequence per stream (0 = nothing yet); final after [`Self::stop_production`].
    pub fn last_seqs(&self) -> BTreeMap<String, u64> {
        self.shared.last_seqs()
    }

    /// Per stream with any, the ranges lost by the gap fault (first ..= last): the consumer
    /// was told of them and can never read them.
    pub fn lost_ranges(&self) -> BTreeMap<String, Vec<(u64, u64)>> {
        self.shared.lost_ranges()
    }

    /// Last produced sequence of one stream, or `None` for an unknown stream.
    pub fn last_seq(&self, stream_id: &str) -> Option<u64> {
        self.shared.feed.stream(stream_id).map(|s| s.last_seq())
    }

    /// Open WebSocket connections per stream.
    pub fn connections(&self) -> BTreeMap<String, usize> {
        self.shared.connections()
    }

    /// Events produced so far over all streams (a cheap counter).
    pub fn events_produced(&self) -> u64 {
        self.shared.feed.produced.load(Ordering::Relaxed)
    }

    /// Event frames written to sockets so far over all connections (a cheap counter).
    pub fn events_sent(&self) -> u64 {
        self.shared.feed.sent.load(Ordering::Relaxed)
    }

    /// Production state, counters and faults (what `GET /admin/status` answers).
    pub fn status(&self) -> Status {
        self.shared.status()
    }

    /// Pauses production (no-op once stopped).
    pub fn pause(&self) -> ProductionState {
        self.shared.feed.set_state(ProductionState::Paused)
    }

    /// Resumes production at the configured rate, without a catch-up burst.
    pub fn resume(&self) -> ProductionState {
        self.shared.feed.set_state(ProductionState::Running)
    }

    /// Stops production for good; connections stay open so consumers can catch up.
    pub fn stop_production(&self) -> ProductionState {
        self.shared.feed.set_state(ProductionState::Stopped)
    }

    /// Produces `count` events on one stream now (for `rate = 0`); returns its new last sequence,
    /// or `None` if the stream is unknown or production is stopped.
    pub fn produce(&self, stream_id: &str, count: u64) -> Option<u64> {
        let stream = self.shared.feed.stream(stream_id)?;
        self.shared.feed.produce_now(stream, count)
    }

    /// Closes every connection of one stream; returns how many were open, `None` if unknown.
    pub fn drop_stream(&self, stream_id: &str) -> Option<usize> {
        self.shared
            .feed
            .stream(stream_id)
            .map(|s| s.drop_connections())
    }

    /// Closes every connection of every stream; returns how many were open.
    pub fn drop_all(&self) -> usize {
        self.shared
            .feed
            .streams
            .iter()
            .map(|s| s.drop_connections())
            .sum()
    }

    /// Replaces the connection faults (an empty [`Faults`] clears them).
    pub fn set_faults(&self, faults: Faults) -> Result<(), Error> {
        faults.validate().map_err(Error::Config)?;
        self.shared.faults.set(faults, &self.shared.feed);
        Ok(())
    }

    /// Stops production, closes every connection (waiting a short grace for them) and the
    /// listener.
    pub async fn shutdown(mut self) {
        self.signal_shutdown();
        let mut open = self.shared.open.subscribe();
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, open.wait_for(|&n| n == 0)).await;
        if let Some(server) = self.server.take() {
            if tokio::time::timeout(SHUTDOWN_GRACE, server).await.is_err() {
                tracing::warn!("mock-upstream server did not stop within the grace period");
            }
        }
        if let Some(producer) = self.producer.take() {
            let _ = producer.await;
        }
    }

    fn signal_shutdown(&self) {
        self.shared.feed.set_state(ProductionState::Stopped);
        self.shared.shutdown.send_replace(true);
    }
}

impl UpstreamHandle {
    /// A cloneable handle on the fault knobs, for code that injects faults while the owner of
    /// this handle keeps it.
    pub fn control(&self) -> UpstreamControl {
        UpstreamControl {
            shared: self.shared.clone(),
        }
    }
}

/// The upstream's fault knobs (the admin API's drop, pause, gap and skip), cheap to clone.
#[derive(Clone)]
pub struct UpstreamControl {
    shared: Arc<Shared>,
}

impl UpstreamControl {
    /// Closes every connection of one stream (every stream when `None`); returns how many were
    /// open, `None` for an unknown stream.
    pub fn drop_connections(&self, stream_id: Option<&str>) -> Option<usize> {
        let feed = &self.shared.feed;
        match stream_id {
            Some(id) => feed.stream(id).map(|s| s.drop_connections()),
            None => Some(feed.streams.iter().map(|s| s.drop_connections()).sum()),
        }
    }

    /// Pauses production (no-op once stopped).
    pub fn pause(&self) -> ProductionState {
        self.shared.feed.set_state(ProductionState::Paused)
    }

    /// Resumes production (no-op once stopped).
    pub fn resume(&self) -> ProductionState {
        self.shared.feed.set_state(ProductionState::Running)
    }

    /// The last produced sequence of one stream, or `None` for an unknown stream.
    pub fn last_seq(&self, stream_id: &str) -> Option<u64> {
        self.shared.feed.stream(stream_id).map(|s| s.last_seq())
    }

    /// Loses `count` new events of one stream together with everything it retained (a gap
    /// the consumer is told about); returns the lost range `(first, last)`. `None` for an
    /// unknown stream or once production stopped.
    pub fn lose(&self, stream_id: &str, count: u64) -> Option<(u64, u64)> {
        let feed = &self.shared.feed;
        feed.lose_now(feed.stream(stream_id)?, count)
    }

    /// Withholds the next sequence of one stream without a gap notice; returns it. `None` for
    /// an unknown stream or once production stopped.
    pub fn skip(&self, stream_id: &str) -> Option<u64> {
        let feed = &self.shared.feed;
        feed.skip_now(feed.stream(stream_id)?)
    }
}

impl Drop for UpstreamHandle {
    fn drop(&mut self) {
        self.signal_shutdown();
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}
