//! The sink client (design §4): posts one serialised `SinkBatch` and classifies the answer.
//!
//! One shared `reqwest` client (connection pool) for every stream of the process. This module
//! sends exactly one request per call; retrying, and what a 409 or another 4xx means, are the
//! stream runner's. [`dead_letter`] writes a permanently rejected batch aside.

use std::time::Duration;

use bytes::Bytes;
use lease_protocol::{SinkAck, SinkBatch};

/// What the sink said about a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkAnswer {
    /// 2xx: stored (duplicates counted by the sink).
    Accepted(Option<SinkAck>),
    /// 409: a higher fence token exists; the stream is lost.
    Fenced(String),
    /// A permanent rejection of this batch: a 4xx other than 409, 408 and 429 (400, 413, 422…).
    /// Sending the same bytes again will not help until the sink changes; the stream's
    /// `SINK_REJECT_POLICY` decides (halt, or dead-letter and continue).
    Rejected { status: u16, detail: String },
    /// Anything else: retry with backoff. `status` is the metric label.
    Transient {
        status: &'static str,
        detail: String,
    },
    /// Not sent: the local deadline passed before the request left (e.g. the process was paused).
    NotSent,
}

/// A sink client for one `SINK_URL`.
#[derive(Clone)]
pub struct Sink {
    client: reqwest::Client,
    base: String,
}

impl Sink {
    /// A client posting under `base` (no trailing slash). `https://` trusts the CAs described in
    /// [`crate::config::tls`].
    pub fn new(base: &str) -> Self {
        let builder = || {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(2))
                .pool_idle_timeout(Duration::from_secs(30))
                .tcp_nodelay(true)
        };
        // reqwest loads the CA certificates when it builds and refuses to build without any (an
        // image with no CA bundle). A plain http:// sink does not need them; an https:// one was
        // refused at start by `tls::check`, so reaching this with https:// is a race with the files.
        let client = builder().build().unwrap_or_else(|e| {
            if base.starts_with("https://") {
                tracing::error!(error = %chain(&e), source = %crate::config::tls::ca_source(), "sink client: no CA certificate to trust; every https post will fail");
            }
            builder()
                .tls_certs_only(Vec::new())
                .build()
                .expect("a client trusting no CA has no certificates to load")
        });
        Sink {
            client,
            base: base.trim_end_matches('/').to_string(),
        }
    }

    /// The URL batches of `stream_id` go to.
    pub fn url_for(&self, stream_id: &str) -> String {
        format!("{}{}", self.base, lease_protocol::sink_path(stream_id))
    }

    /// Serialises a batch once; the bytes are reused on retries.
    pub fn encode(batch: &SinkBatch) -> Bytes {
        Bytes::from(serde_json::to_vec(batch).expect("sink batches always serialise"))
    }

    /// Posts `body` to `url` within `timeout`, unless `not_after` has already passed when the
    /// request is about to leave (the last check before bytes hit the wire).
    pub async fn post(
        &self,
        url: &str,
        body: Bytes,
        timeout: Duration,
        not_after: Option<tokio::time::Instant>,
    ) -> SinkAnswer {
        if not_after.is_some_and(|t| tokio::time::Instant::now() >= t) {
            return SinkAnswer::NotSent;
        }
        let sent = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .timeout(timeout)
            .body(body)
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return SinkAnswer::Transient {
                    status: "timeout",
                    detail: chain(&e),
                }
            }
            Err(e) => {
                return SinkAnswer::Transient {
                    status: "connect",
                    detail: chain(&e),
                }
            }
        };
        let status = response.status();
        if status.is_success() {
            let ack = response.json::<SinkAck>().await.ok();
            return SinkAnswer::Accepted(ack);
        }
        let detail = response.text().await.unwrap_or_default();
        let detail: String = detail.chars().take(200).collect();
        let permanent = status.is_client_error() && !matches!(status.as_u16(), 408 | 429);
        if status.as_u16() == 409 {
            SinkAnswer::Fenced(detail)
        } else if permanent {
            SinkAnswer::Rejected {
                status: status.as_u16(),
                detail,
            }
        } else {
            SinkAnswer::Transient {
                status: if status.is_server_error() {
                    "5xx"
                } else {
                    "4xx"
                },
                detail: format!("HTTP {status}: {detail}"),
            }
        }
    }
}

/// Writes a batch the sink rejected permanently into `dir` as
/// `{stream}-{first}-{through}-f{fence}.json` (the request body as sent), atomically; returns the
/// file's path.
pub fn dead_letter(
    dir: &std::path::Path,
    stream_id: &str,
    (first, through): (u64, u64),
    fence: u64,
    body: &[u8],
) -> std::io::Result<std::path::PathBuf> {
    let name = format!("{stream_id}-{first}-{through}-f{fence}.json");
    let path = dir.join(&name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// An error and its causes on one line: reqwest's own message omits why the request failed
/// (e.g. "invalid peer certificate: UnknownIssuer").
fn chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = e.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = e.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_says_why() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let sink = Sink::new(&format!("http://{addr}"));
        let answer = sink
            .post(
                &sink.url_for("s-1"),
                Bytes::from_static(b"{}"),
                Duration::from_secs(2),
                None,
            )
            .await;
        let SinkAnswer::Transient { status, detail } = answer else {
            panic!("a closed port is transient: {answer:?}");
        };
        assert_eq!(status, "connect");
        assert!(detail.to_lowercase().contains("refused"), "{detail}");
    }
}
