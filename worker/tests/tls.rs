//! TLS end to end: a real `lease-worker` reads the mock upstream over `wss://` and posts to the
//! fencing sink over `https://`, through TLS-terminating proxies that hold a `localhost`
//! certificate from a test CA (rcgen). Trusting that CA through `SSL_CERT_FILE`, the worker
//! delivers the stream in order; without it, it publishes nothing, logs a certificate error and
//! keeps running. CA problems it can see at start are refused with exit code 2.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use tokio_rustls::rustls::crypto::aws_lc_rs;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

const STREAM: &str = "s-tls";

/// A certificate authority made for one test.
struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        TestCa { issuer }
    }

    /// Writes the CA certificate as PEM into `dir` and returns its path (for `SSL_CERT_FILE`).
    fn write_pem(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, self.issuer.pem()).unwrap();
        path
    }

    /// A server configuration presenting a certificate for `localhost` and 127.0.0.1 signed by
    /// this CA.
    fn server_config(&self) -> Arc<ServerConfig> {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let config = ServerConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        Arc::new(config)
    }
}

/// Terminates TLS on 127.0.0.1:0 and pipes the plain bytes to `target`; counts TCP connections
/// and completed handshakes. Stops accepting when dropped.
struct TlsProxy {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    handshakes: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsProxy {
    async fn start(config: Arc<ServerConfig>, target: SocketAddr) -> TlsProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = TlsAcceptor::from(config);
        let connections = Arc::new(AtomicUsize::new(0));
        let handshakes = Arc::new(AtomicUsize::new(0));
        let (conns, shakes) = (connections.clone(), handshakes.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                conns.fetch_add(1, Ordering::SeqCst);
                let (acceptor, shakes) = (acceptor.clone(), shakes.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    shakes.fetch_add(1, Ordering::SeqCst);
                    if let Ok(mut plain) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    }
                });
            }
        });
        TlsProxy {
            addr,
            connections,
            handshakes,
            task,
        }
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The rig's mock upstream and sink, each behind a TLS proxy holding a certificate from `ca`.
struct Tls {
    upstream: TlsProxy,
    sink: TlsProxy,
}

impl Tls {
    async fn start(rig: &Rig, ca: &TestCa) -> Tls {
        let config = ca.server_config();
        Tls {
            upstream: TlsProxy::start(config.clone(), rig.upstream_addr).await,
            sink: TlsProxy::start(config, rig.sink_addr).await,
        }
    }

    fn wss(&self) -> String {
        format!("wss://localhost:{}", self.upstream.port())
    }

    fn https(&self) -> String {
        format!("https://localhost:{}", self.sink.port())
    }
}

/// `fleet` with `env` set on top of its own variables.
fn with(fleet: &Fleet, env: &[(&'static str, String)]) -> Fleet {
    let mut fleet = fleet.clone();
    fleet.extra.extend(env.iter().cloned());
    fleet
}

/// Waits up to `limit` for `times` lines of `worker`'s log that contain every one of `words`.
async fn wait_log(worker: &Worker, limit: Duration, times: usize, words: &[&str]) -> bool {
    eventually(limit, || async {
        let logs = worker.logs();
        let found = logs
            .lines()
            .filter(|l| words.iter().all(|w| l.contains(w)))
            .count();
        (found >= times).then_some(())
    })
    .await
    .is_some()
}

/// The worker is still running and its /healthz answers 200.
async fn assert_alive(worker: &mut Worker) {
    assert!(
        worker.wait_exit(Duration::from_millis(200)).await.is_none(),
        "{} exited:\n{}",
        worker.name,
        worker.logs()
    );
    let addr = worker.metrics_addr().await;
    let status = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .expect("/healthz answers")
        .status();
    assert_eq!(status, 200, "{} /healthz", worker.name);
}

/// The worker logged `words` at least `times` times within `limit` (else fails with `why` and
/// its logs), and is still alive.
async fn refused_and_alive(
    worker: &mut Worker,
    limit: Duration,
    times: usize,
    words: &[&str],
    why: &str,
) {
    assert!(
        wait_log(worker, limit, times, words).await,
        "{why}:\n{}",
        worker.logs()
    );
    assert_alive(worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_ca_delivers_the_stream_in_order_over_wss_and_https() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&[STREAM], 100.0).await;
    let ca = TestCa::new("lease-worker test CA");
    let tls = Tls::start(&rig, &ca).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_pem(dir.path(), "ca.pem").display().to_string();
    let mut worker = with(
        &rig.fleet(),
        &[
            ("UPSTREAM_URL", tls.wss()),
            ("SINK_URL", tls.https()),
            ("SSL_CERT_FILE", ca_file),
        ],
    )
    .spawn("worker-tls");

    rig.sink
        .wait_accepted(STREAM, Duration::from_secs(30), |r| r.seq >= 200)
        .await
        .unwrap_or_else(|| panic!("200 events reach the sink\n{}", worker.logs()));

    // In arrival order: 1, 2, 3, … with none missing, all from this worker's one lease.
    let accepted = rig.sink.accepted(STREAM);
    let seqs: Vec<u64> = accepted.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(accepted
        .iter()
        .all(|r| r.owner == "worker-tls" && r.fence == accepted[0].fence));
    // Through the proxies: the worker was given no plain address to bypass them with.
    assert!(tls.upstream.handshakes() >= 1, "no wss:// handshake");
    assert!(tls.sink.handshakes() >= 1, "no https:// handshake");
    let logs = worker.logs();
    assert!(logs.contains("TLS: trusting 1 CA certificates"), "{logs}");
    assert!(
        !logs.contains("invalid peer certificate"),
        "a certificate complaint with the CA trusted:\n{logs}"
    );
    assert_alive(&mut worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_publishes_nothing_is_logged_and_is_survived() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&[STREAM], 100.0).await;
    let ca = TestCa::new("lease-worker test CA");
    let tls = Tls::start(&rig, &ca).await;
    let dir = tempfile::tempdir().unwrap();
    let unrelated = TestCa::new("an unrelated CA").write_pem(dir.path(), "unrelated.pem");
    let fleet = rig.fleet();
    let limit = Duration::from_secs(30);

    // 1. The system CA store (SSL_CERT_FILE unset): the upstream's certificate is refused.
    let system_has_cas = !rustls_native_certs::load_native_certs().certs.is_empty();
    let mut worker = with(
        &fleet,
        &[("UPSTREAM_URL", tls.wss()), ("SINK_URL", tls.https())],
    )
    .spawn("system-cas");
    if system_has_cas {
        let failed = ["upstream connect failed", "invalid peer certificate"];
        refused_and_alive(&mut worker, limit, 2, &failed, "no certificate error").await;
    } else {
        // No CA at all on this machine: refused at start instead.
        let status = worker.wait_exit(limit).await.expect("exits");
        assert_eq!(status.code(), Some(2), "{}", worker.logs());
    }
    worker.kill();

    // 2. SSL_CERT_FILE names an unrelated CA: the same for the upstream…
    let mut worker = with(
        &fleet,
        &[
            ("UPSTREAM_URL", tls.wss()),
            ("SINK_URL", tls.https()),
            ("SSL_CERT_FILE", unrelated.display().to_string()),
        ],
    )
    .spawn("unrelated-ca-upstream");
    let failed = ["upstream connect failed", "invalid peer certificate"];
    refused_and_alive(&mut worker, limit, 2, &failed, "no certificate error").await;
    worker.kill();
    assert_eq!(tls.upstream.handshakes(), 0, "an upstream handshake passed");
    assert!(
        tls.upstream.connections() >= 2,
        "the upstream was not tried"
    );

    // 3. …and for the sink, with a plain upstream feeding the worker events to post.
    let mut worker = with(
        &fleet,
        &[
            ("SINK_URL", tls.https()),
            ("SSL_CERT_FILE", unrelated.display().to_string()),
        ],
    )
    .spawn("unrelated-ca-sink");
    // Every attempt fails the same way; it keeps retrying rather than giving up or crashing.
    let failed = ["sink post failed", "invalid peer certificate"];
    let why = "no certificate error, or no retry";
    refused_and_alive(&mut worker, limit, 3, &failed, why).await;
    worker.kill();
    assert_eq!(tls.sink.handshakes(), 0, "a sink handshake passed");
    assert!(tls.sink.connections() >= 1, "the sink was not tried");

    assert!(
        rig.sink.receipts().is_empty(),
        "the sink received events without a trusted certificate: {:?}",
        rig.sink.receipts().len()
    );
}

/// Runs `lease-worker` with only `env` (no DynamoDB needed: these are refused before it starts).
fn refused(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lease-worker"));
    cmd.env_clear();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_ca_file_and_foreign_schemes_are_refused_at_start() {
    let (code, stderr) = refused(&[
        ("UPSTREAM_URL", "wss://localhost:9"),
        ("SINK_URL", "http://127.0.0.1:9"),
        ("SSL_CERT_FILE", "/nonexistent/ca.pem"),
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    for part in ["UPSTREAM_URL=\"wss://localhost:9\"", "/nonexistent/ca.pem"] {
        assert!(stderr.contains(part), "{part} missing: {stderr}");
    }

    let (code, stderr) = refused(&[
        ("UPSTREAM_URL", "ws://127.0.0.1:9"),
        ("SINK_URL", "ftp://127.0.0.1:9"),
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("SINK_URL=\"ftp://127.0.0.1:9\" must be a http:// or https:// URL"),
        "{stderr}"
    );
}
