//! Test fixtures: DynamoDB Local with a seeded table, the real mock upstream in-process, a tiny
//! fencing sink that records every receipt, and `lease-worker` child processes that are killed
//! when their guard drops (also on panic).

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use lease_protocol::{SinkAck, SinkBatch, SinkRejection};
use tokio::time::Instant;

pub const TABLE: &str = "websocket-leases";

/// Heavy tests (DynamoDB Local + worker processes) run one at a time: timing bounds stay honest
/// on a shared two-core machine.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// DynamoDB Local with the lease table created and `streams` seeded (items holding only `stream_id`).
pub async fn dynamo(streams: &[&str]) -> dynamodb_local::DynamoLocal {
    let ddb = dynamodb_local::DynamoLocal::start(&dynamodb_local::Options::default())
        .await
        .expect("DynamoDB Local starts");
    let client = ddb.client();
    lease_table::create_table(&client, TABLE)
        .await
        .expect("table");
    lease_table::seed_streams(&client, TABLE, streams)
        .await
        .expect("seed");
    ddb
}

/// The real mock upstream, its configuration changed by `change`.
pub async fn upstream_with(
    streams: &[&str],
    change: impl FnOnce(&mut mock_upstream::UpstreamConfig),
) -> (SocketAddr, mock_upstream::UpstreamHandle) {
    let mut config =
        mock_upstream::UpstreamConfig::new(streams.iter().map(|s| s.to_string()).collect());
    change(&mut config);
    mock_upstream::start(config)
        .await
        .expect("mock upstream starts")
}

/// One test's surroundings: DynamoDB Local with the streams seeded, the mock upstream producing
/// them and the fencing sink. Drop `ddb` on its own to take DynamoDB away mid-test.
pub struct Rig {
    pub ddb: dynamodb_local::DynamoLocal,
    pub upstream_addr: SocketAddr,
    pub upstream: mock_upstream::UpstreamHandle,
    pub sink_addr: SocketAddr,
    pub sink: TestSink,
}

impl Rig {
    /// Starts DynamoDB Local with `streams` seeded, the upstream at `rate` events/s per stream,
    /// and the sink.
    pub async fn start(streams: &[&str], rate: f64) -> Rig {
        Rig::start_with(streams, |c| c.rate = rate).await
    }

    /// As `start`, with the upstream's configuration changed by `change`.
    pub async fn start_with(
        streams: &[&str],
        change: impl FnOnce(&mut mock_upstream::UpstreamConfig),
    ) -> Rig {
        let ddb = dynamo(streams).await;
        let (upstream_addr, upstream) = upstream_with(streams, change).await;
        let (sink_addr, sink) = TestSink::start().await;
        Rig {
            ddb,
            upstream_addr,
            upstream,
            sink_addr,
            sink,
        }
    }

    /// Workers against this rig with a 2 s lease, renewed and scanned every 0.5 s; change
    /// fields with `Fleet { lease: "30", ..rig.fleet() }`.
    pub fn fleet(&self) -> Fleet {
        Fleet {
            endpoint: self.ddb.endpoint().to_string(),
            upstream: self.upstream_addr,
            sink: self.sink_addr,
            lease: "2",
            renew: "0.5",
            scan: "0.5",
            extra: vec![],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Accepted,
    Duplicate,
    Fenced,
}

/// One event as the sink saw it.
#[derive(Debug, Clone)]
pub struct Receipt {
    pub at: Instant,
    pub stream_id: String,
    pub seq: u64,
    pub fence: u64,
    pub owner: String,
    pub outcome: Outcome,
    /// The event's payload length in bytes.
    pub payload_len: usize,
}

#[derive(Default)]
struct SinkState {
    highest: HashMap<String, u64>,
    seen: HashSet<String>,
    receipts: Vec<Receipt>,
    /// A batch holding this sequence is refused with this status (a poisoned event).
    poison: Option<(u64, u16)>,
    /// Batches refused for poison.
    poisoned: usize,
}

/// The fencing sink of design §4, in-process.
#[derive(Clone, Default)]
pub struct TestSink {
    state: Arc<Mutex<SinkState>>,
}

impl TestSink {
    pub async fn start() -> (SocketAddr, TestSink) {
        let sink = TestSink::default();
        let app = Router::new()
            .route("/streams/{id}/events", post(receive))
            // Batches of large payloads exceed axum's 2 MB default.
            .layer(DefaultBodyLimit::max(64 << 20))
            .with_state(sink.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (addr, sink)
    }

    /// From now on, refuse every batch holding `seq` with `status` (`None`: accept again).
    pub fn poison(&self, poison: Option<(u64, u16)>) {
        self.state.lock().unwrap().poison = poison;
    }

    /// Batches refused for poison so far.
    pub fn poisoned(&self) -> usize {
        self.state.lock().unwrap().poisoned
    }

    pub fn receipts(&self) -> Vec<Receipt> {
        self.state.lock().unwrap().receipts.clone()
    }

    pub fn accepted(&self, stream: &str) -> Vec<Receipt> {
        self.receipts()
            .into_iter()
            .filter(|r| r.stream_id == stream && r.outcome == Outcome::Accepted)
            .collect()
    }

    /// The first accepted receipt of `stream` that `wanted` picks, waiting at most `limit`.
    pub async fn wait_accepted(
        &self,
        stream: &str,
        limit: Duration,
        wanted: impl Fn(&Receipt) -> bool,
    ) -> Option<Receipt> {
        eventually(limit, || async {
            self.accepted(stream).into_iter().find(|r| wanted(r))
        })
        .await
    }
}

async fn receive(
    State(sink): State<TestSink>,
    Path(id): Path<String>,
    Json(batch): Json<SinkBatch>,
) -> Result<Json<SinkAck>, (StatusCode, Json<SinkRejection>)> {
    let now = Instant::now();
    let receipt = |e: &lease_protocol::SinkEvent, outcome: Outcome| Receipt {
        at: now,
        stream_id: id.clone(),
        seq: e.seq,
        payload_len: e.payload.len(),
        fence: batch.fence_token,
        owner: batch.owner_id.clone(),
        outcome,
    };
    let mut state = sink.state.lock().unwrap();
    if let Some((seq, status)) = state.poison {
        if batch.events.iter().any(|e| e.seq == seq) {
            state.poisoned += 1;
            return Err((
                StatusCode::from_u16(status).unwrap(),
                Json(SinkRejection {
                    reason: format!("event {seq} is malformed"),
                    highest_fence: 0,
                }),
            ));
        }
    }
    let highest = state.highest.get(&id).copied().unwrap_or(0);
    if batch.fence_token < highest {
        for e in &batch.events {
            state.receipts.push(receipt(e, Outcome::Fenced));
        }
        return Err((
            StatusCode::CONFLICT,
            Json(SinkRejection {
                reason: "stale fence token".into(),
                highest_fence: highest,
            }),
        ));
    }
    state.highest.insert(id.clone(), batch.fence_token);
    let mut ack = SinkAck {
        accepted: 0,
        duplicates: 0,
    };
    for e in &batch.events {
        let outcome = if state.seen.insert(e.event_id.clone()) {
            ack.accepted += 1;
            Outcome::Accepted
        } else {
            ack.duplicates += 1;
            Outcome::Duplicate
        };
        state.receipts.push(receipt(e, outcome));
    }
    Ok(Json(ack))
}

/// A `lease-worker` child process; SIGKILLed and reaped when dropped.
pub struct Worker {
    pub name: String,
    child: Option<Child>,
    addr_file: PathBuf,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

/// Settings shared by the workers of one test.
#[derive(Clone)]
pub struct Fleet {
    pub endpoint: String,
    pub upstream: SocketAddr,
    pub sink: SocketAddr,
    pub lease: &'static str,
    pub renew: &'static str,
    pub scan: &'static str,
    pub extra: Vec<(&'static str, String)>,
}

impl Fleet {
    pub fn spawn(&self, name: &str) -> Worker {
        let dir = tempfile::tempdir().unwrap();
        let addr_file = dir.path().join("metrics.addr");
        let log = dir.path().join("worker.log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lease-worker"));
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LEASE_TABLE", TABLE)
            .env("OWNER_ID", name)
            .env("LEASE_SECONDS", self.lease)
            .env("RENEW_SECONDS", self.renew)
            .env("SCAN_SECONDS", self.scan)
            .env("UPSTREAM_URL", format!("ws://{}", self.upstream))
            .env("SINK_URL", format!("http://{}", self.sink))
            .env("AWS_ENDPOINT_URL", &self.endpoint)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "local")
            .env("AWS_SECRET_ACCESS_KEY", "local")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("METRICS_ADDR", "127.0.0.1:0")
            .env("METRICS_ADDR_FILE", &addr_file)
            .env("RUST_LOG", "info,lease_worker=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in &self.extra {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("lease-worker spawns");
        Worker {
            name: name.to_string(),
            child: Some(child),
            addr_file,
            log,
            _dir: dir,
        }
    }
}

impl Worker {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig} {}", self.pid());
    }

    pub fn kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for the process to exit within `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    pub async fn metrics_addr(&self) -> SocketAddr {
        eventually(Duration::from_secs(20), || async {
            std::fs::read_to_string(&self.addr_file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "{} never wrote its metrics address\n{}",
                self.name,
                self.logs()
            )
        })
    }

    /// The worker's whole `/metrics` text (one scrape), or `None` when it does not answer.
    pub async fn metrics_text(&self) -> Option<String> {
        let addr = self.metrics_addr().await;
        reqwest::get(format!("http://{addr}/metrics"))
            .await
            .ok()?
            .text()
            .await
            .ok()
    }

    /// The value of an unlabelled metric sample, or a labelled one written exactly as `name{...}`.
    pub async fn metric(&self, sample: &str) -> Option<f64> {
        sample_of(&self.metrics_text().await?, sample)
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("---- {} log ----\n{}", self.name, self.logs());
        }
    }
}

/// The value of `sample` (an unlabelled name, or `name{labels}` exactly as written) in a
/// `/metrics` text.
pub fn sample_of(text: &str, sample: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        l.strip_prefix(sample)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Polls `check` every 50 ms until it returns `Some`, for at most `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes `stream`'s item exactly as the source design's `lease_demo.py` acquire leaves it:
/// owner, expiry, fence token and update time (Unix ms), no checkpoint.
pub async fn put_demo_item(
    client: &aws_sdk_dynamodb::Client,
    stream: &str,
    owner: &str,
    expires_at: i64,
    fence: u64,
    updated_at: i64,
) {
    use aws_sdk_dynamodb::types::AttributeValue;
    client
        .put_item()
        .table_name(TABLE)
        .item("stream_id", AttributeValue::S(stream.into()))
        .item("owner_id", AttributeValue::S(owner.into()))
        .item(
            "lease_expires_at",
            AttributeValue::N(expires_at.to_string()),
        )
        .item("fence_token", AttributeValue::N(fence.to_string()))
        .item("updated_at", AttributeValue::N(updated_at.to_string()))
        .send()
        .await
        .expect("put the lease_demo.py item");
}

/// The table's item for `stream`.
pub async fn item(client: &aws_sdk_dynamodb::Client, stream: &str) -> lease_table::LeaseItem {
    lease_table::get(client, TABLE, stream)
        .await
        .unwrap()
        .expect("item exists")
}
