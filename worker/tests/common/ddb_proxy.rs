//! A proxy between a worker and DynamoDB Local that forwards every request unchanged, except
//! `Scan`s, which it can hold back for a while or answer with a throttling error (the error
//! DynamoDB sends when a table is over its capacity), for the tests of a busy table.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::Router;

const SCAN: &str = "DynamoDB_20120810.Scan";

pub struct DdbProxy {
    target: String,
    client: reqwest::Client,
    /// Scans still to answer with a throttling error.
    throttle_scans: AtomicUsize,
    /// Scans held this long (ms) before they are forwarded.
    hold_scans_ms: AtomicU64,
    /// Scans seen.
    scans: AtomicUsize,
}

impl DdbProxy {
    /// Listens on 127.0.0.1:0 and forwards to `target` (DynamoDB Local's endpoint URL).
    pub async fn start(target: &str) -> (SocketAddr, Arc<DdbProxy>) {
        let proxy = Arc::new(DdbProxy {
            target: target.trim_end_matches('/').to_string(),
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            throttle_scans: AtomicUsize::new(0),
            hold_scans_ms: AtomicU64::new(0),
            scans: AtomicUsize::new(0),
        });
        let app = Router::new().fallback(forward).with_state(proxy.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (addr, proxy)
    }

    /// The next `n` scans are answered with `ProvisionedThroughputExceededException`.
    pub fn throttle_scans(&self, n: usize) {
        self.throttle_scans.store(n, Ordering::SeqCst);
    }

    /// Every scan from now on is held `hold` before it is forwarded.
    pub fn hold_scans(&self, hold: Duration) {
        self.hold_scans_ms
            .store(hold.as_millis() as u64, Ordering::SeqCst);
    }

    /// Scans seen so far.
    pub fn scans(&self) -> usize {
        self.scans.load(Ordering::SeqCst)
    }
}

fn passes(name: &header::HeaderName) -> bool {
    ![
        header::CONNECTION,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
    ]
    .contains(name)
}

async fn forward(
    State(proxy): State<Arc<DdbProxy>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let is_scan = headers
        .get("x-amz-target")
        .is_some_and(|t| t.as_bytes() == SCAN.as_bytes());
    if is_scan {
        proxy.scans.fetch_add(1, Ordering::SeqCst);
        let throttle = proxy
            .throttle_scans
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if throttle {
            return Response::builder()
                .status(StatusCode::BAD_REQUEST)
                .header("content-type", "application/x-amz-json-1.0")
                .header("x-amzn-errortype", "ProvisionedThroughputExceededException")
                .body(Body::from(
                    r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded."}"#,
                ))
                .unwrap();
        }
        let hold = proxy.hold_scans_ms.load(Ordering::SeqCst);
        if hold > 0 {
            tokio::time::sleep(Duration::from_millis(hold)).await;
        }
    }
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
    let mut response = Response::builder().status(status);
    for (name, value) in headers.iter().filter(|(n, _)| passes(n)) {
        response = response.header(name, value);
    }
    response.body(Body::from(body)).unwrap()
}
