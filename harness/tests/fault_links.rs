//! The link proxy's faults on real sockets (127.0.0.1, port 0), against an echo server: a
//! partition holds bytes and hangs new connections, a reset sends RST, a half-open connection
//! goes silent with no FIN, latency and bandwidth slow the bytes. Bounds are generous: the
//! machine running these is shared.

use std::net::SocketAddr;
use std::time::Duration;

use harness::faults::proxy::{Applied, Proxy};
use harness::scenario::menu::{Direction, LinkFault};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{timeout, Instant};

/// An echo server on port 0.
async fn echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

async fn proxy() -> Proxy {
    Proxy::start(echo().await, false, 1).unwrap()
}

/// Sends `msg` and reads it back within `limit`: `Some(bytes)`, `None` on timeout.
async fn round_trip(
    s: &mut TcpStream,
    msg: &[u8],
    limit: Duration,
) -> Option<std::io::Result<Vec<u8>>> {
    s.write_all(msg).await.ok()?;
    let mut got = vec![0u8; msg.len()];
    match timeout(limit, s.read_exact(&mut got)).await {
        Err(_) => None,
        Ok(Ok(_)) => Some(Ok(got)),
        Ok(Err(e)) => Some(Err(e)),
    }
}

const SHORT: Duration = Duration::from_millis(600);
const LONG: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_partition_holds_bytes_and_hangs_new_connections_until_the_heal() {
    let p = proxy().await;
    let mut open = TcpStream::connect(p.addr()).await.unwrap();
    assert_eq!(
        round_trip(&mut open, b"before", LONG)
            .await
            .unwrap()
            .unwrap(),
        b"before"
    );
    p.apply(
        0,
        Applied::Link(LinkFault::Partition {
            direction: Direction::Both,
        }),
    );
    assert!(
        round_trip(&mut open, b"held", SHORT).await.is_none(),
        "bytes passed a partition"
    );
    // A new connection is accepted but hangs: the client sees a timeout, not an error.
    let mut new = TcpStream::connect(p.addr()).await.unwrap();
    assert!(
        round_trip(&mut new, b"new", SHORT).await.is_none(),
        "a new connection worked during a partition"
    );
    p.heal(0);
    // What was held is delivered after the heal, as TCP would retransmit it.
    let mut got = [0u8; 4];
    timeout(LONG, open.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got, b"held");
    let mut got = [0u8; 3];
    timeout(LONG, new.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got, b"new");
}

#[tokio::test]
async fn a_one_way_partition_holds_only_its_way() {
    let p = proxy().await;
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    assert!(round_trip(&mut s, b"x", LONG).await.is_some());
    // Inbound held: the echo server gets the bytes (outbound passes) but the answer is held.
    p.apply(
        1,
        Applied::Link(LinkFault::Partition {
            direction: Direction::Inbound,
        }),
    );
    assert!(round_trip(&mut s, b"y", SHORT).await.is_none());
    p.heal(1);
    let mut got = [0u8; 1];
    timeout(LONG, s.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got, b"y");
}

#[tokio::test]
async fn a_reset_sends_rst_and_refuses_new_connections() {
    let p = proxy().await;
    let mut open = TcpStream::connect(p.addr()).await.unwrap();
    assert!(round_trip(&mut open, b"a", LONG).await.is_some());
    p.apply(2, Applied::Link(LinkFault::Reset));
    let mut buf = [0u8; 8];
    let read = timeout(LONG, open.read(&mut buf))
        .await
        .expect("no answer to a reset");
    let err = read.expect_err("a reset connection must fail, not end with FIN");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    let mut new = TcpStream::connect(p.addr()).await.unwrap();
    let read = timeout(LONG, new.read(&mut buf)).await.unwrap();
    assert_eq!(
        read.expect_err("new connections are reset").kind(),
        std::io::ErrorKind::ConnectionReset
    );
    assert!(p.stats().reset >= 2);
    p.heal(2);
    let mut after = TcpStream::connect(p.addr()).await.unwrap();
    assert!(round_trip(&mut after, b"ok", LONG).await.unwrap().is_ok());
}

#[tokio::test]
async fn a_half_open_connection_goes_silent_for_good_without_fin() {
    let p = proxy().await;
    let mut open = TcpStream::connect(p.addr()).await.unwrap();
    assert!(round_trip(&mut open, b"a", LONG).await.is_some());
    p.apply(3, Applied::Link(LinkFault::HalfOpen));
    // Writes still succeed (nothing says the peer is gone) and nothing comes back: no bytes,
    // no FIN (a read returning 0), no RST (an error) — the read just times out.
    assert!(
        round_trip(&mut open, b"lost", SHORT).await.is_none(),
        "a half-open connection answered or closed"
    );
    p.heal(3);
    assert!(
        round_trip(&mut open, b"still", SHORT).await.is_none(),
        "a silenced connection came back after the heal"
    );
    let mut buf = [0u8; 8];
    assert!(
        timeout(SHORT, open.read(&mut buf)).await.is_err(),
        "a FIN or RST reached the client"
    );
    // Connections opened after the fault work.
    let mut new = TcpStream::connect(p.addr()).await.unwrap();
    assert_eq!(
        round_trip(&mut new, b"new", LONG).await.unwrap().unwrap(),
        b"new"
    );
    assert_eq!(p.stats().silenced, 1);
}

#[tokio::test]
async fn latency_and_bandwidth_slow_the_bytes() {
    let p = proxy().await;
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    p.apply(
        4,
        Applied::Link(LinkFault::Latency {
            latency_ms: 300,
            jitter_ms: 50,
            direction: Direction::Both,
        }),
    );
    let start = Instant::now();
    assert!(round_trip(&mut s, b"slow", LONG).await.unwrap().is_ok());
    assert!(
        start.elapsed() >= Duration::from_millis(600),
        "{:?}: latency is per direction",
        start.elapsed()
    );
    p.heal(4);
    p.apply(
        5,
        Applied::Link(LinkFault::Bandwidth {
            bytes_per_second: 20_000,
            direction: Direction::Outbound,
        }),
    );
    let big = vec![7u8; 40_000];
    let start = Instant::now();
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        w.write_all(&big).await.unwrap();
        w
    });
    let mut got = vec![0u8; 40_000];
    timeout(LONG, r.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    writer.await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(1500),
        "40 kB at 20 kB/s took {:?}",
        start.elapsed()
    );
}

/// POSTs a batch of `seqs` of `stream` to the sink; the status.
async fn post(sink: &harness::sink::Sink, stream: &str, seqs: &[u64]) -> u16 {
    let events: Vec<serde_json::Value> = seqs
        .iter()
        .map(|s| serde_json::json!({"seq": s, "event_id": format!("{stream}:{s}"), "payload": "p"}))
        .collect();
    let body = serde_json::json!({"owner_id": "w", "fence_token": 1, "events": events});
    reqwest::Client::new()
        .post(format!("{}/streams/{stream}/events", sink.url()))
        .json(&body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn sink_faults_answer_over_http_and_store_nothing() {
    use harness::scenario::menu::{PoisonSeq, SinkFault};
    let dir = tempfile::tempdir().unwrap();
    let writer = harness::history::HistoryWriter::create(&dir.path().join("h.jsonl")).unwrap();
    let sink = harness::sink::Sink::start(writer.recorder(), true)
        .await
        .unwrap();
    let faults = sink.faults();
    faults.apply(
        0,
        SinkFault::Poison {
            stream: "s-1".into(),
            seq: PoisonSeq::At(3),
            status: 422,
        },
    );
    assert_eq!(post(&sink, "s-1", &[1, 2]).await, 200);
    assert_eq!(post(&sink, "s-1", &[3, 4]).await, 422);
    assert_eq!(
        post(&sink, "s-2", &[3]).await,
        200,
        "poison is one stream's"
    );
    assert_eq!(
        sink.high_water("s-1"),
        2,
        "a poisoned batch stored something"
    );
    faults.apply(
        1,
        SinkFault::Error {
            status: 503,
            fraction: 1.0,
        },
    );
    assert_eq!(post(&sink, "s-2", &[4]).await, 503);
    assert_eq!(faults.heal(1), 1);
    faults.apply(2, SinkFault::Slow { latency_ms: 400 });
    let start = Instant::now();
    assert_eq!(post(&sink, "s-2", &[4]).await, 200);
    assert!(start.elapsed() >= Duration::from_millis(400));
    faults.heal(2);
    faults.heal(0);
    assert_eq!(post(&sink, "s-1", &[3, 4]).await, 200);
    assert_eq!(sink.high_water("s-1"), 4);
    sink.stop().await;
}
