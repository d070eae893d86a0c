//! The fencing sink (design §4), hosted in-process: per stream, the highest fence token seen;
//! a batch under a lower token is refused with 409 and nothing of it stored; events are
//! idempotent by `event_id`. Every event it receives becomes a `receipt` in the history.
//!
//! State is sharded by stream so thousands of batches per second do not contend on one lock,
//! and no lock is ever held across an await: a batch is decided and its receipts queued to the
//! history writer (a non-blocking send) inside one short critical section, which also keeps
//! each stream's receipts in decision order in the file.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lease_protocol::{SinkAck, SinkRejection};
use serde::Deserialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::faults::sink_hook::SinkFaults;
use crate::history::{ContentMismatch, Outcome, ReceiptBatch, Record, Recorder};

const SHARDS: usize = 64;
/// How far past a stream's contiguous high-water mark an event's `seq` may be for the sink to
/// store it (its bitmap then grows by at most 128 KiB). A real upstream never runs this far
/// ahead of what was delivered; a seq beyond it (2^63, say) is refused with 400, not stored.
pub const MAX_SEQ_AHEAD: u64 = 1 << 20;

/// One stream's state in the sink.
#[derive(Default)]
struct StreamState {
    highest_fence: u64,
    /// Bit `seq` set when the event `{stream}:{seq}` is stored.
    stored: Vec<u64>,
    /// Events whose id is not the canonical `{stream}:{seq}`.
    other_ids: HashSet<String>,
    /// Highest `h` with `1..=h` all stored.
    high_water: u64,
}

impl StreamState {
    fn has(&self, seq: u64) -> bool {
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        self.stored.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }

    /// Stores `seq`; false when it was already stored.
    fn insert(&mut self, seq: u64) -> bool {
        if self.has(seq) {
            return false;
        }
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if self.stored.len() <= word {
            self.stored.resize(word + 1, 0);
        }
        self.stored[word] |= 1 << bit;
        while self.has(self.high_water + 1) {
            self.high_water += 1;
        }
        true
    }
}

/// From a contiguous `high_water`, the highest `h` such that every seq in `1..=h` is delivered
/// (`has`) or inside one of the `lost` ranges (first ..= last).
pub fn high_water_past(mut high_water: u64, has: impl Fn(u64) -> bool, lost: &[(u64, u64)]) -> u64 {
    while let Some(&(_, last)) = lost
        .iter()
        .find(|(first, last)| *first <= high_water + 1 && high_water < *last)
    {
        high_water = last;
        while has(high_water + 1) {
            high_water += 1;
        }
    }
    high_water
}

struct Shared {
    shards: Vec<Mutex<HashMap<String, StreamState>>>,
    hasher: RandomState,
    recorder: Recorder,
    fencing: bool,
    /// For the progress line only (the report counts from the history).
    accepted: AtomicU64,
    fence_raises: AtomicU64,
    /// Scenario sink faults, asked before each batch is decided.
    faults: Arc<SinkFaults>,
}

impl Shared {
    /// The shard holding `stream`, locked. A poisoned lock is taken anyway: nothing in a
    /// critical section leaves a stream half-updated in a way a later batch could trip on.
    fn shard(&self, stream: &str) -> std::sync::MutexGuard<'_, HashMap<String, StreamState>> {
        let shard = &self.shards[self.hasher.hash_one(stream) as usize % SHARDS];
        shard.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running sink. Dropping it does not stop the server: call [`Sink::stop`].
pub struct Sink {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// What [`decide`] answered for a batch.
enum Decision {
    Stored(SinkAck),
    Fenced(SinkRejection),
    /// The batch holds an event the sink cannot store (400, nothing stored or recorded).
    Refused(String),
}

impl Sink {
    /// Binds `127.0.0.1:0` and serves. `fencing = false` accepts stale tokens (a demonstration
    /// of what fencing prevents; receipts still say what was accepted).
    pub async fn start(recorder: Recorder, fencing: bool) -> std::io::Result<Sink> {
        let shared = Arc::new(Shared {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            recorder,
            fencing,
            accepted: AtomicU64::new(0),
            fence_raises: AtomicU64::new(0),
            faults: Arc::new(SinkFaults::default()),
        });
        let app = Router::new()
            .route("/streams/{stream_id}/events", post(post_events))
            .route("/healthz", get(|| async { "ok" }))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(e) = serve.await {
                tracing::error!("sink server failed: {e}");
            }
        });
        Ok(Sink {
            addr,
            shared,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The switchboard of the scenario's sink faults.
    pub fn faults(&self) -> Arc<SinkFaults> {
        self.shared.faults.clone()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, the workers' `SINK_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The contiguous accepted high-water mark of `stream` (0 when nothing accepted).
    pub fn high_water(&self, stream: &str) -> u64 {
        let shard = self.shared.shard(stream);
        shard.get(stream).map_or(0, |s| s.high_water)
    }

    /// The high-water mark of `stream` counting the upstream's `lost` ranges (first ..= last)
    /// as delivered: what the stream has caught up to when those events can never come.
    pub fn high_water_past(&self, stream: &str, lost: &[(u64, u64)]) -> u64 {
        let shard = self.shared.shard(stream);
        match shard.get(stream) {
            Some(s) => high_water_past(s.high_water, |seq| s.has(seq), lost),
            None => high_water_past(0, |_| false, lost),
        }
    }

    /// Streams that have at least one accepted event.
    pub fn streams_with_traffic(&self) -> HashSet<String> {
        let mut out = HashSet::new();
        for shard in &self.shared.shards {
            let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            out.extend(
                shard
                    .iter()
                    .filter(|(_, s)| s.high_water > 0 || !s.stored.is_empty())
                    .map(|(k, _)| k.clone()),
            );
        }
        out
    }

    /// Events accepted so far (for the progress line).
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Times a stream's highest fence token went up after its first owner: takeovers so far,
    /// as the progress line counts them.
    pub fn fence_raises(&self) -> u64 {
        self.shared.fence_raises.load(Ordering::Relaxed)
    }

    /// Stops serving and waits for in-flight requests to finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), task).await;
        }
    }
}

/// A [`lease_protocol::SinkBatch`] as the sink reads it: strings borrowed from the body where
/// they need no unescaping, and the payload checked against the upstream's content for its
/// (stream, seq) but not kept (the sink stores event identities, not their contents).
#[derive(Deserialize)]
struct BatchIn<'a> {
    #[serde(borrow)]
    owner_id: Cow<'a, str>,
    fence_token: u64,
    #[serde(borrow)]
    events: Vec<EventIn<'a>>,
}

#[derive(Deserialize)]
struct EventIn<'a> {
    seq: u64,
    #[serde(borrow)]
    event_id: Cow<'a, str>,
    /// Checked against what the upstream produced for (stream, seq), then dropped.
    #[serde(borrow)]
    payload: Cow<'a, str>,
}

async fn post_events(
    State(shared): State<Arc<Shared>>,
    Path(stream_id): Path<String>,
    body: Bytes,
) -> Response {
    let batch: BatchIn = match serde_json::from_slice(&body) {
        Ok(batch) => batch,
        Err(e) => {
            let reason = format!("not a sink batch (design §4): {e}");
            return (StatusCode::BAD_REQUEST, reason).into_response();
        }
    };
    let seqs = batch.events.iter().map(|e| e.seq);
    if let Some((status, reason)) = shared.faults.before(&stream_id, seqs).await {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        return (status, reason).into_response();
    }
    match decide(&shared, &stream_id, &batch) {
        Decision::Stored(ack) => (StatusCode::OK, Json(ack)).into_response(),
        Decision::Fenced(rejection) => (StatusCode::CONFLICT, Json(rejection)).into_response(),
        Decision::Refused(reason) => (StatusCode::BAD_REQUEST, reason).into_response(),
    }
}

/// Decides a batch and queues its receipts, under the stream's shard lock.
fn decide(shared: &Shared, stream_id: &str, batch: &BatchIn) -> Decision {
    let mut shard = shared.shard(stream_id);
    let high_water = shard.get(stream_id).map_or(0, |s| s.high_water);
    if let Some(e) = batch
        .events
        .iter()
        .find(|e| e.seq > high_water.saturating_add(MAX_SEQ_AHEAD))
    {
        return Decision::Refused(format!(
            "event seq {} of {stream_id} is more than {MAX_SEQ_AHEAD} past the stream's \
             delivered high-water mark {high_water}: the sink cannot store it",
            e.seq
        ));
    }
    if !shard.contains_key(stream_id) {
        shard.insert(stream_id.to_string(), StreamState::default());
    }
    let state = shard.get_mut(stream_id).expect("inserted above");
    let receipts = |events| ReceiptBatch {
        t_ms: shared.recorder.now_ms(),
        stream_id: stream_id.to_string(),
        fence_token: batch.fence_token,
        owner_id: batch.owner_id.to_string(),
        events,
    };
    if shared.fencing && batch.fence_token < state.highest_fence {
        let fenced = batch.events.iter().map(|e| (e.seq, Outcome::Fenced));
        shared.recorder.receipts(receipts(fenced.collect()));
        return Decision::Fenced(SinkRejection {
            reason: format!(
                "fence token {} is lower than {} already seen for {stream_id}",
                batch.fence_token, state.highest_fence
            ),
            highest_fence: state.highest_fence,
        });
    }
    if state.highest_fence > 0 && batch.fence_token > state.highest_fence {
        shared.fence_raises.fetch_add(1, Ordering::Relaxed);
    }
    state.highest_fence = state.highest_fence.max(batch.fence_token);
    let mut ack = SinkAck {
        accepted: 0,
        duplicates: 0,
    };
    let mut outcomes = Vec::with_capacity(batch.events.len());
    let mut mismatched = Vec::new();
    for event in &batch.events {
        let new = if is_canonical(&event.event_id, stream_id, event.seq) {
            state.insert(event.seq)
        } else {
            state.other_ids.insert(event.event_id.to_string())
        };
        let outcome = if new {
            ack.accepted += 1;
            if !lease_protocol::payload_matches(&event.payload, stream_id, event.seq) {
                mismatched.push(event.seq);
            }
            Outcome::Accepted
        } else {
            ack.duplicates += 1;
            Outcome::Duplicate
        };
        outcomes.push((event.seq, outcome));
    }
    let t_ms = shared.recorder.now_ms();
    shared.recorder.receipts(receipts(outcomes));
    for seq in mismatched {
        shared
            .recorder
            .record(Record::ContentMismatch(ContentMismatch {
                t_ms,
                stream_id: stream_id.to_string(),
                seq,
                owner_id: batch.owner_id.to_string(),
                fence_token: batch.fence_token,
            }));
    }
    shared.accepted.fetch_add(ack.accepted, Ordering::Relaxed);
    Decision::Stored(ack)
}

/// True when `id` is `{stream}:{seq}` (the protocol's `event_id`), checked without allocating.
fn is_canonical(id: &str, stream: &str, seq: u64) -> bool {
    id.strip_prefix(stream)
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(|n| n.parse::<u64>().ok())
        == Some(seq)
}

#[cfg(test)]
#[path = "sink_tests.rs"]
mod tests;
