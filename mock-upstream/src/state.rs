//! The state every HTTP handler and WebSocket connection shares: the feed, the fault knobs,
//! the shutdown signal and the open-connection count. A leaf both [`crate::server`] and
//! [`crate::connection`] read, so neither depends on the other for it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Duration;

use crate::faults::{FaultState, Faults};
use crate::feed::{Feed, ProductionState};

/// State shared by every handler and connection.
pub(crate) struct Shared {
    pub feed: Arc<Feed>,
    pub faults: Arc<FaultState>,
    pub ping_interval: Duration,
    /// Set to `true` once: every connection closes with "going away".
    pub shutdown: watch::Sender<bool>,
    /// Open WebSocket connections over all streams (shutdown waits for 0).
    pub open: watch::Sender<usize>,
}

impl Shared {
    /// Per stream with any, the ranges the gap fault lost (first ..= last).
    pub fn lost_ranges(&self) -> BTreeMap<String, Vec<(u64, u64)>> {
        self.feed
            .streams
            .iter()
            .map(|s| (s.id.to_string(), s.lost_ranges()))
            .filter(|(_, ranges)| !ranges.is_empty())
            .collect()
    }

    pub fn last_seqs(&self) -> BTreeMap<String, u64> {
        self.feed
            .streams
            .iter()
            .map(|s| (s.id.to_string(), s.last_seq()))
            .collect()
    }

    pub fn connections(&self) -> BTreeMap<String, usize> {
        self.feed
            .streams
            .iter()
            .map(|s| (s.id.to_string(), s.connections.load(Ordering::Relaxed)))
            .collect()
    }

    /// Production state and counters, for `GET /admin/status`.
    pub fn status(&self) -> Status {
        Status {
            state: self.feed.state(),
            streams: self.feed.streams.len(),
            events_produced: self.feed.produced.load(Ordering::Relaxed),
            events_sent: self.feed.sent.load(Ordering::Relaxed),
            open_connections: *self.open.borrow(),
            retained_bytes: self.feed.streams.iter().map(|s| s.retained_bytes()).sum(),
            faults: self.faults.current(),
        }
    }
}

/// Body of `GET /admin/status`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Running, paused or stopped.
    pub state: ProductionState,
    /// Number of streams served.
    pub streams: usize,
    /// Events produced over all streams.
    pub events_produced: u64,
    /// Event frames written to sockets over all connections.
    pub events_sent: u64,
    /// Open WebSocket connections over all streams.
    pub open_connections: usize,
    /// Approximate heap bytes held by all retention rings (bounded by retention).
    pub retained_bytes: usize,
    /// The connection faults in force.
    pub faults: Faults,
}
