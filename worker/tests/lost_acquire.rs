//! An acquire whose answer never comes: DynamoDB wrote it (the table names this worker), but the
//! worker timed out and does not know. A proxy between the worker and DynamoDB Local forwards
//! every request unchanged and returns the real answer, except for the first acquire, whose
//! answer it withholds. With a long lease expiry cannot help; the worker must treat the unknown
//! outcome like a lost race, rescan consistently at once and take the stream back (fence 2).

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::Router;
use common::*;
use tokio::time::Instant;

const STREAM: &str = "s-0001";
/// Only the acquire's update expression contains this (lease-table/src/ops.rs `acquire`).
const ACQUIRE_MARK: &str = "if_not_exists(fence_token";
const UPDATE_ITEM: &str = "DynamoDB_20120810.UpdateItem";

/// Forwards to DynamoDB Local; answers the first acquire's request never (after forwarding it).
struct Proxy {
    target: String,
    client: reqwest::Client,
    /// Acquire requests seen (the withheld one included).
    acquires: AtomicUsize,
    /// When DynamoDB answered the withheld acquire, and with which status.
    withheld: Mutex<Option<(Instant, StatusCode)>>,
}

impl Proxy {
    async fn start(target: &str) -> (SocketAddr, Arc<Proxy>) {
        let proxy = Arc::new(Proxy {
            target: target.trim_end_matches('/').to_string(),
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            acquires: AtomicUsize::new(0),
            withheld: Mutex::new(None),
        });
        let app = Router::new().fallback(forward).with_state(proxy.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (addr, proxy)
    }

    fn withheld(&self) -> Option<(Instant, StatusCode)> {
        *self.withheld.lock().unwrap()
    }
}

/// Hop-by-hop and framing headers are the proxy's own; everything else (host, x-amz-target,
/// authorization, x-amz-date, content-type…) passes unchanged both ways.
fn passes(name: &header::HeaderName) -> bool {
    ![
        header::CONNECTION,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
    ]
    .contains(name)
}

async fn forward(
    State(proxy): State<Arc<Proxy>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let is_acquire = headers
        .get("x-amz-target")
        .is_some_and(|t| t.as_bytes() == UPDATE_ITEM.as_bytes())
        && String::from_utf8_lossy(&body).contains(ACQUIRE_MARK);
    let withhold = is_acquire && proxy.acquires.fetch_add(1, Ordering::SeqCst) == 0;
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = proxy
        .client
        .request(method, format!("{}{path}", proxy.target))
        .body(body);
    for (name, value) in headers.iter().filter(|(n, _)| passes(n)) {
        request = request.header(name, value);
    }
    let answer = async {
        let response = request.send().await?;
        let status = response.status();
        let headers = response.headers().clone();
        Ok::<_, reqwest::Error>((status, headers, response.bytes().await?))
    }
    .await;
    let (status, headers, body) = match answer {
        Ok(answer) => answer,
        Err(e) => {
            return Response::builder()
                .status(StatusCode::BAD_GATEWAY)
                .body(Body::from(format!("proxy: {e}")))
                .unwrap()
        }
    };
    if withhold {
        // Written (or refused) by DynamoDB; the worker never learns which.
        *proxy.withheld.lock().unwrap() = Some((Instant::now(), status));
        std::future::pending::<()>().await;
    }
    let mut response = Response::builder().status(status);
    for (name, value) in headers.iter().filter(|(n, _)| passes(n)) {
        response = response.header(name, value);
    }
    response.body(Body::from(body)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_that_times_out_after_being_written_is_taken_back_at_once() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&[STREAM], 50.0).await;
    let (client, sink) = (rig.ddb.client(), &rig.sink);
    let (proxy_addr, proxy) = Proxy::start(rig.ddb.endpoint()).await;
    // A 60 s lease and a 20 s renew and scan interval: neither expiry nor the next scheduled
    // scan comes within the bound below.
    let fleet = Fleet {
        endpoint: format!("http://{proxy_addr}"),
        lease: "60",
        renew: "20",
        scan: "20",
        ..rig.fleet()
    };
    let w = fleet.spawn("worker-a");

    // 1. The first acquire reached DynamoDB and was written; its answer is withheld.
    let (withheld_at, status) = eventually(Duration::from_secs(30), || async { proxy.withheld() })
        .await
        .unwrap_or_else(|| panic!("the worker never tried to acquire\n{}", w.logs()));
    assert_eq!(
        status,
        StatusCode::OK,
        "DynamoDB applied the withheld acquire"
    );
    let written = item(&client, STREAM).await;
    assert_eq!(
        (written.owner_id.as_deref(), written.fence_token),
        (Some("worker-a"), Some(1)),
        "{written:?}"
    );

    // 2. The acquire times out after ACQUIRE_TIMEOUT (5 s); treated as a lost race, a consistent
    // rescan follows within milliseconds and re-acquires (the condition admits the owner), so
    // events flow with fence 2 about 5.5 s after the withheld write. Without that, the next
    // scan comes one scan interval (20 s ± 10 %) after the timeout: at least 23 s. 12 s leaves
    // 6 s of slack for a slow machine and still tells the two apart.
    let bound = Duration::from_secs(12);
    let first = sink
        .wait_accepted(
            STREAM,
            (withheld_at + bound).saturating_duration_since(Instant::now()),
            |_| true,
        )
        .await
        .unwrap_or_else(|| {
            panic!(
                "nothing reached the sink within {bound:?} of the withheld acquire\n{}",
                w.logs()
            )
        });
    let took = first.at.duration_since(withheld_at);
    assert!(took <= bound, "served {took:?} after the withheld acquire");
    assert_eq!((first.owner.as_str(), first.fence), ("worker-a", 2));
    assert!(
        proxy.acquires.load(Ordering::SeqCst) >= 2,
        "the stream was acquired again"
    );
    let taken = item(&client, STREAM).await;
    assert_eq!(
        (taken.owner_id.as_deref(), taken.fence_token),
        (Some("worker-a"), Some(2)),
        "{taken:?}"
    );
    // Nobody published with the fence whose answer never came.
    assert!(sink.receipts().iter().all(|r| r.fence == 2));

    // 3. The worker said what happened.
    let logs = w.logs();
    assert!(
        logs.contains("acquire failed; its outcome is unknown"),
        "{logs}"
    );
    eprintln!("served {took:?} after the withheld acquire was written");
}
