//! The worker's Prometheus metrics (`lease_worker_*`), one registry per process.
//!
//! Counters are bumped once per batch or per call, never per event in a tight loop. Per-stream
//! gauges (checkpoint lag, seconds since the last event) are computed at scrape time from each
//! stream's [`StreamStats`], so the hot path only stores a few atomics. Every labelled counter
//! exists at zero from the start (CloudWatch's agent only sends deltas after a first sample).
//! This module never decides anything; it only counts.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// DynamoDB operation labels (`op`).
pub const DYNAMO_OPS: &[&str] = &[
    "acquire",
    "renew",
    "checkpoint",
    "release",
    "scan",
    "bid",
    "fleet_read",
    "fleet_bump",
];
/// The (api, kind) series of `lease_worker_dynamodb_capacity_units_total`, present at zero
/// (on the lease table; the membership table's appear with its first answer).
pub const CAPACITY_SERIES: &[(&str, &str)] = &[
    ("UpdateItem", "write"),
    ("Scan", "read"),
    ("GetItem", "read"),
];
/// DynamoDB outcome labels (`outcome`).
pub const DYNAMO_OUTCOMES: &[&str] = &[
    "ok",
    "conditional_failed",
    "throttled",
    "error",
    "timeout",
    "queued",
];
/// Lease-loss reasons (`reason`).
pub const LOST_REASONS: &[&str] = &["renew_refused", "deadline", "sink_fenced"];
/// Sink rejection statuses (`status`): `409`, `5xx`, `4xx`, `timeout`, `connect`.
pub const SINK_STATUSES: &[&str] = &["409", "5xx", "4xx", "timeout", "connect"];
/// Release reasons (`reason`).
pub const RELEASE_REASONS: &[&str] = &["drain", "shed", "bid"];
/// Gap kinds (`kind`): an upstream gap notice, or a sequence jump without one.
pub const GAP_KINDS: &[&str] = &["notice", "sequence_jump"];

/// Live counters of one owned stream, read at scrape time.
#[derive(Debug, Default)]
pub struct StreamStats {
    /// Highest sequence taken from the upstream.
    pub taken: AtomicU64,
    /// Highest sequence persisted as checkpoint.
    pub persisted: AtomicU64,
    /// Unix ms of the last event received (0 = none yet).
    pub last_event_ms: AtomicI64,
    /// Fence token held.
    pub fence: AtomicU64,
}

/// All metrics of the process.
pub struct Metrics {
    registry: Registry,
    pub owned_streams: Gauge,
    pub unowned_streams: Gauge,
    /// Other live processes seen holding leases under this worker's own OWNER_ID.
    pub duplicate_owners: Gauge,
    pub write_window: Gauge,
    pub table_streams: Gauge,
    pub live_owners: Gauge,
    pub fair_share: Gauge,
    pub acquisitions: Counter,
    /// Whole-table discovery scans completed (every page read).
    pub scans: Counter,
    pub leases_lost: Family<Labels, Counter>,
    pub releases: Family<Labels, Counter>,
    pub renew_latency: Histogram,
    pub renew_failures: Family<Labels, Counter>,
    pub dynamodb_requests: Family<Labels, Counter>,
    /// Capacity units DynamoDB reported consumed, by API and kind (see `capacity.rs`).
    pub dynamodb_capacity: Family<Labels, Counter<f64, AtomicU64>>,
    pub events_published: Counter,
    pub events_replayed_skipped: Counter,
    pub batches_published: Counter,
    pub sink_rejections: Family<Labels, Counter>,
    pub upstream_reconnects: Counter,
    pub upstream_idle_timeouts: Counter,
    pub halted_streams: Gauge,
    pub dead_lettered_events: Counter,
    pub gaps_detected: Family<Labels, Counter>,
    pub gap_events_missing: Counter,
    pub malformed_frames: Counter,
    checkpoint_lag_max: Gauge,
    stream_checkpoint_lag: Family<Labels, Gauge>,
    stream_seconds_since_event: Family<Labels, Gauge<f64, AtomicU64>>,
    streams: Mutex<BTreeMap<String, Arc<StreamStats>>>,
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

impl Metrics {
    /// Registers every metric, with every labelled counter present at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            owned_streams: Gauge::default(),
            unowned_streams: Gauge::default(),
            duplicate_owners: Gauge::default(),
            write_window: Gauge::default(),
            table_streams: Gauge::default(),
            live_owners: Gauge::default(),
            fair_share: Gauge::default(),
            acquisitions: Counter::default(),
            scans: Counter::default(),
            leases_lost: Family::default(),
            releases: Family::default(),
            renew_latency: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            renew_failures: Family::default(),
            dynamodb_requests: Family::default(),
            dynamodb_capacity: Family::default(),
            events_published: Counter::default(),
            events_replayed_skipped: Counter::default(),
            batches_published: Counter::default(),
            sink_rejections: Family::default(),
            upstream_reconnects: Counter::default(),
            upstream_idle_timeouts: Counter::default(),
            halted_streams: Gauge::default(),
            dead_lettered_events: Counter::default(),
            gaps_detected: Family::default(),
            gap_events_missing: Counter::default(),
            malformed_frames: Counter::default(),
            checkpoint_lag_max: Gauge::default(),
            stream_checkpoint_lag: Family::default(),
            stream_seconds_since_event: Family::default(),
            streams: Mutex::new(BTreeMap::new()),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "lease_worker_owned_streams",
            "Streams this worker holds a lease on",
            m.owned_streams.clone(),
        );
        r.register(
            "lease_worker_unowned_streams",
            "Streams the last scan saw with no live owner",
            m.unowned_streams.clone(),
        );
        r.register(
            "lease_worker_duplicate_owners",
            "Other live processes seen holding leases under this worker's own OWNER_ID (must be 0: ids must be unique per process)",
            m.duplicate_owners.clone(),
        );
        r.register(
            "lease_worker_write_window",
            "Lease requests this worker may have in flight (its congestion window: grows on timely answers, halves on slow ones, timeouts and throttling)",
            m.write_window.clone(),
        );
        r.register(
            "lease_worker_table_streams",
            "Items in the lease table at the last scan",
            m.table_streams.clone(),
        );
        r.register(
            "lease_worker_live_owners",
            "Distinct live owners at the last scan, this worker included",
            m.live_owners.clone(),
        );
        r.register(
            "lease_worker_fair_share",
            "This worker's target: ceil(streams / live owners), capped by MAX_STREAMS",
            m.fair_share.clone(),
        );
        r.register(
            "lease_worker_acquisitions",
            "Leases acquired",
            m.acquisitions.clone(),
        );
        r.register(
            "lease_worker_scans",
            "Discovery scans completed (all pages of the table read)",
            m.scans.clone(),
        );
        r.register(
            "lease_worker_leases_lost",
            "Leases lost without a release, by reason",
            m.leases_lost.clone(),
        );
        r.register(
            "lease_worker_releases",
            "Leases released gracefully, by reason",
            m.releases.clone(),
        );
        r.register(
            "lease_worker_renew_latency_seconds",
            "Latency of successful renewals",
            m.renew_latency.clone(),
        );
        r.register(
            "lease_worker_renew_failures",
            "Failed renew attempts, by kind",
            m.renew_failures.clone(),
        );
        r.register(
            "lease_worker_dynamodb_requests",
            "DynamoDB requests, by operation and outcome",
            m.dynamodb_requests.clone(),
        );
        r.register(
            "lease_worker_dynamodb_capacity_units",
            "Capacity units DynamoDB reported consumed (ReturnConsumedCapacity), by API and kind; a refused conditional write counts 1",
            m.dynamodb_capacity.clone(),
        );
        r.register(
            "lease_worker_events_published",
            "Events the sink accepted (2xx)",
            m.events_published.clone(),
        );
        r.register(
            "lease_worker_events_replayed_skipped",
            "Replayed upstream events skipped because already taken",
            m.events_replayed_skipped.clone(),
        );
        r.register(
            "lease_worker_batches_published",
            "Batches the sink accepted (2xx)",
            m.batches_published.clone(),
        );
        r.register(
            "lease_worker_sink_rejections",
            "Sink answers other than 2xx, by status",
            m.sink_rejections.clone(),
        );
        r.register(
            "lease_worker_upstream_reconnects",
            "Upstream WebSocket reconnects",
            m.upstream_reconnects.clone(),
        );
        r.register(
            "lease_worker_upstream_idle_timeouts",
            "Upstream sockets dropped for silence past UPSTREAM_IDLE_MS (then reopened)",
            m.upstream_idle_timeouts.clone(),
        );
        r.register(
            "lease_worker_halted_streams",
            "Streams halted on a sink's permanent rejection (SINK_REJECT_POLICY=halt), retrying",
            m.halted_streams.clone(),
        );
        r.register(
            "lease_worker_dead_lettered_events",
            "Events a sink rejected permanently, written to DEAD_LETTER_DIR and skipped",
            m.dead_lettered_events.clone(),
        );
        r.register(
            "lease_worker_gaps_detected",
            "Upstream gaps detected, by kind",
            m.gaps_detected.clone(),
        );
        r.register(
            "lease_worker_gap_events_missing",
            "Events lost to upstream gaps",
            m.gap_events_missing.clone(),
        );
        r.register(
            "lease_worker_malformed_frames",
            "Upstream frames that could not be parsed, skipped",
            m.malformed_frames.clone(),
        );
        r.register(
            "lease_worker_checkpoint_lag_events",
            "Largest checkpoint lag (events taken, not yet persisted) over owned streams",
            m.checkpoint_lag_max.clone(),
        );
        r.register(
            "lease_worker_stream_checkpoint_lag_events",
            "Checkpoint lag in events, per owned stream",
            m.stream_checkpoint_lag.clone(),
        );
        r.register(
            "lease_worker_stream_seconds_since_last_event",
            "Seconds since the last upstream event, per owned stream",
            m.stream_seconds_since_event.clone(),
        );
        for op in DYNAMO_OPS {
            for outcome in DYNAMO_OUTCOMES {
                let _ = m
                    .dynamodb_requests
                    .get_or_create(&labels(&[("op", op), ("outcome", outcome)]));
            }
        }
        for (api, kind) in CAPACITY_SERIES {
            let _ = m.dynamodb_capacity.get_or_create(&labels(&[
                ("api", api),
                ("kind", kind),
                ("table", "leases"),
            ]));
        }
        for reason in LOST_REASONS {
            let _ = m.leases_lost.get_or_create(&labels(&[("reason", reason)]));
        }
        for reason in RELEASE_REASONS {
            let _ = m.releases.get_or_create(&labels(&[("reason", reason)]));
        }
        for kind in ["refused", "throttled", "error", "timeout", "queued"] {
            let _ = m.renew_failures.get_or_create(&labels(&[("kind", kind)]));
        }
        for status in SINK_STATUSES {
            let _ = m
                .sink_rejections
                .get_or_create(&labels(&[("status", status)]));
        }
        for kind in GAP_KINDS {
            let _ = m.gaps_detected.get_or_create(&labels(&[("kind", kind)]));
        }
        Metrics { registry, ..m }
    }

    /// Counts one DynamoDB request.
    pub fn dynamodb(&self, op: &'static str, outcome: &'static str) {
        self.dynamodb_requests
            .get_or_create(&labels(&[("op", op), ("outcome", outcome)]))
            .inc();
    }

    /// Adds `units` of capacity consumed by one `api` call.
    pub fn capacity(&self, api: &'static str, kind: &'static str, table: &'static str, units: f64) {
        self.dynamodb_capacity
            .get_or_create(&labels(&[("api", api), ("kind", kind), ("table", table)]))
            .inc_by(units);
    }

    /// Counts a lease lost for `reason`.
    pub fn lost(&self, reason: &'static str) {
        self.leases_lost
            .get_or_create(&labels(&[("reason", reason)]))
            .inc();
    }

    /// Counts a graceful release for `reason`.
    pub fn released(&self, reason: &'static str) {
        self.releases
            .get_or_create(&labels(&[("reason", reason)]))
            .inc();
    }

    /// Counts a failed renew attempt of `kind`.
    pub fn renew_failed(&self, kind: &'static str) {
        self.renew_failures
            .get_or_create(&labels(&[("kind", kind)]))
            .inc();
    }

    /// Counts a non-2xx sink answer.
    pub fn sink_rejected(&self, status: &'static str) {
        self.sink_rejections
            .get_or_create(&labels(&[("status", status)]))
            .inc();
    }

    /// Counts a gap of `kind` with `missing` events.
    pub fn gap(&self, kind: &'static str, missing: u64) {
        self.gaps_detected
            .get_or_create(&labels(&[("kind", kind)]))
            .inc();
        self.gap_events_missing.inc_by(missing);
    }

    /// Starts tracking an owned stream; the returned stats are updated by its task.
    pub fn track_stream(&self, stream_id: &str) -> Arc<StreamStats> {
        let stats = Arc::new(StreamStats::default());
        self.streams
            .lock()
            .expect("metrics lock")
            .insert(stream_id.to_string(), stats.clone());
        stats
    }

    /// Stops tracking a stream (its per-stream series disappear).
    pub fn untrack_stream(&self, stream_id: &str) {
        self.streams.lock().expect("metrics lock").remove(stream_id);
        let key = labels(&[("stream_id", stream_id)]);
        self.stream_checkpoint_lag.remove(&key);
        self.stream_seconds_since_event.remove(&key);
    }

    /// Renders the Prometheus text exposition, refreshing the per-stream gauges first.
    pub fn render(&self, now_ms: i64) -> String {
        let mut max_lag = 0u64;
        for (stream_id, stats) in self.streams.lock().expect("metrics lock").iter() {
            let key = labels(&[("stream_id", stream_id)]);
            let taken = stats.taken.load(Ordering::Relaxed);
            let persisted = stats.persisted.load(Ordering::Relaxed);
            let lag = taken.saturating_sub(persisted);
            max_lag = max_lag.max(lag);
            self.stream_checkpoint_lag
                .get_or_create(&key)
                .set(lag.min(i64::MAX as u64) as i64);
            let last = stats.last_event_ms.load(Ordering::Relaxed);
            if last > 0 {
                let since = (now_ms - last).max(0) as f64 / 1000.0;
                self.stream_seconds_since_event
                    .get_or_create(&key)
                    .set(since);
            }
        }
        self.checkpoint_lag_max
            .set(max_lag.min(i64::MAX as u64) as i64);
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labelled_counters_exist_at_zero() {
        let metrics = Metrics::new();
        let text = metrics.render(0);
        assert!(
            text.contains(r#"lease_worker_dynamodb_requests_total{op="renew",outcome="ok"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"lease_worker_leases_lost_total{reason="sink_fenced"} 0"#),
            "{text}"
        );
        assert!(text.contains("lease_worker_owned_streams 0"), "{text}");
    }

    #[test]
    fn per_stream_gauges_come_and_go() {
        let metrics = Metrics::new();
        let stats = metrics.track_stream("s-1");
        stats.taken.store(10, Ordering::Relaxed);
        stats.persisted.store(4, Ordering::Relaxed);
        stats.last_event_ms.store(1_000, Ordering::Relaxed);
        let text = metrics.render(3_500);
        assert!(
            text.contains(r#"lease_worker_stream_checkpoint_lag_events{stream_id="s-1"} 6"#),
            "{text}"
        );
        assert!(
            text.contains("lease_worker_checkpoint_lag_events 6"),
            "{text}"
        );
        assert!(
            text.contains(r#"lease_worker_stream_seconds_since_last_event{stream_id="s-1"} 2.5"#),
            "{text}"
        );
        metrics.untrack_stream("s-1");
        let text = metrics.render(3_500);
        assert!(!text.contains(r#"stream_id="s-1""#), "{text}");
    }
}
