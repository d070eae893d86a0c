//! The upstream over real WebSocket clients on loopback: sequences, replay, gaps, fan-out, drops,
//! stop, slow consumers and the HTTP error cases.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::StreamExt;
use lease_protocol::{upstream_path, GapNotice, UpstreamFrame};
use mock_upstream::{UpstreamConfig, UpstreamHandle, CLOSE_DROPPED};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Generous bound on anything that should happen "soon".
const PATIENCE: Duration = Duration::from_secs(20);

async fn start(streams: &[&str], rate: f64, retention: usize) -> (SocketAddr, UpstreamHandle) {
    let mut config = UpstreamConfig::new(streams.iter().map(|s| s.to_string()).collect());
    config.rate = rate;
    config.retention = retention;
    config.payload_bytes = 16;
    mock_upstream::start(config).await.expect("start upstream")
}

async fn connect(addr: SocketAddr, stream: &str, from: Option<u64>) -> Ws {
    let url = format!("ws://{addr}{}", upstream_path(stream, from));
    let (ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("connect");
    ws
}

/// What a client saw next: a frame, or the end of the connection (with the close code if any).
#[derive(Debug)]
enum Seen {
    Frame(UpstreamFrame),
    Closed(Option<CloseCode>),
}

async fn next(ws: &mut Ws) -> Seen {
    loop {
        let msg = tokio::time::timeout(PATIENCE, ws.next())
            .await
            .expect("no frame within the patience bound");
        match msg {
            Some(Ok(Message::Text(text))) => {
                return Seen::Frame(UpstreamFrame::parse(&text).expect("frame parses"))
            }
            Some(Ok(Message::Close(frame))) => return Seen::Closed(frame.map(|f| f.code)),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return Seen::Closed(None),
        }
    }
}

async fn next_seq(ws: &mut Ws) -> u64 {
    match next(ws).await {
        Seen::Frame(UpstreamFrame::Event(ev)) => ev.seq,
        other => panic!("expected an event, saw {other:?}"),
    }
}

/// Reads events until `last` (inclusive), asserting each is exactly one more than the previous.
async fn read_contiguous(ws: &mut Ws, first: u64, last: u64) {
    for expected in first..=last {
        assert_eq!(next_seq(ws).await, expected, "hole or repeat");
    }
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn live_events_are_contiguous() {
    let (addr, handle) = start(&["s-0001"], 200.0, 1000).await;
    let mut ws = connect(addr, "s-0001", None).await;
    let first = next_seq(&mut ws).await;
    assert!(first >= 1);
    read_contiguous(&mut ws, first + 1, first + 300).await;
    handle.shutdown().await;
}

#[tokio::test]
async fn replay_then_live_has_no_hole_or_repeat_at_the_seam() {
    let (addr, handle) = start(&["s-0001"], 500.0, 100_000).await;
    wait_for("some history", || handle.last_seq("s-0001").unwrap() >= 200).await;
    let mut ws = connect(addr, "s-0001", Some(1)).await;
    // Produced at connect time plus 500 more: crosses the replay/live seam under production.
    let target = handle.last_seq("s-0001").unwrap() + 500;
    read_contiguous(&mut ws, 1, target).await;
    handle.shutdown().await;
}

#[tokio::test]
async fn from_older_than_retention_sends_one_gap_then_the_oldest_retained() {
    let (addr, handle) = start(&["s-0001"], 0.0, 50).await;
    assert_eq!(handle.produce("s-0001", 120), Some(120));
    let mut ws = connect(addr, "s-0001", Some(5)).await;
    match next(&mut ws).await {
        Seen::Frame(UpstreamFrame::Gap(GapNotice {
            stream_id,
            requested,
            oldest_available,
        })) => assert_eq!(
            (stream_id.as_str(), requested, oldest_available),
            ("s-0001", 5, 71)
        ),
        other => panic!("expected a gap frame, saw {other:?}"),
    }
    read_contiguous(&mut ws, 71, 120).await;
    handle.produce("s-0001", 3);
    read_contiguous(&mut ws, 121, 123).await;
    handle.shutdown().await;
}

#[tokio::test]
async fn from_beyond_the_head_waits_for_it() {
    let (addr, handle) = start(&["s-0001"], 0.0, 100).await;
    handle.produce("s-0001", 2);
    let mut ws = connect(addr, "s-0001", Some(10)).await;
    handle.produce("s-0001", 12);
    assert_eq!(next_seq(&mut ws).await, 10);
    read_contiguous(&mut ws, 11, 14).await;
    handle.shutdown().await;
}

#[tokio::test]
async fn two_subscribers_each_get_the_full_sequence() {
    let (addr, handle) = start(&["s-0001", "s-0002"], 300.0, 100_000).await;
    let mut a = connect(addr, "s-0001", Some(1)).await;
    let mut b = connect(addr, "s-0001", Some(1)).await;
    let mut other = connect(addr, "s-0002", Some(1)).await;
    wait_for("both subscribers", || handle.connections()["s-0001"] == 2).await;
    read_contiguous(&mut a, 1, 400).await;
    read_contiguous(&mut b, 1, 400).await;
    read_contiguous(&mut other, 1, 10).await;
    handle.shutdown().await;
}

#[tokio::test]
async fn drop_closes_only_that_streams_connections_and_replay_resumes() {
    let (addr, handle) = start(&["s-0001", "s-0002"], 100.0, 100_000).await;
    let mut a = connect(addr, "s-0001", Some(1)).await;
    let mut other = connect(addr, "s-0002", Some(1)).await;
    read_contiguous(&mut a, 1, 20).await;
    read_contiguous(&mut other, 1, 5).await;

    let resp = http(addr, "POST", "/admin/streams/s-0001/drop").await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    // Everything before the close is still contiguous, then the close carries CLOSE_DROPPED.
    let mut last = 20;
    let code = loop {
        match next(&mut a).await {
            Seen::Frame(UpstreamFrame::Event(ev)) => {
                assert_eq!(ev.seq, last + 1);
                last = ev.seq;
            }
            Seen::Frame(gap) => panic!("unexpected {gap:?}"),
            Seen::Closed(code) => break code,
        }
    };
    assert_eq!(code, Some(CloseCode::from(CLOSE_DROPPED)));
    read_contiguous(&mut other, 6, 30).await;
    wait_for("drop to be counted", || handle.connections()["s-0001"] == 0).await;

    let mut again = connect(addr, "s-0001", Some(last + 1)).await;
    read_contiguous(&mut again, last + 1, last + 50).await;
    handle.shutdown().await;
}

#[tokio::test]
async fn stop_freezes_last_seq_and_consumers_can_catch_up() {
    let (addr, handle) = start(&["s-0001", "s-0002"], 200.0, 100_000).await;
    wait_for("production", || handle.last_seq("s-0002").unwrap() >= 50).await;
    let resp = http(addr, "POST", "/admin/stop").await;
    assert!(resp.contains("\"stopped\""), "{resp}");
    let frozen = handle.last_seqs();
    assert!(handle.produce("s-0001", 1).is_none());
    handle.resume();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(handle.last_seqs(), frozen);
    let body = http(addr, "GET", "/admin/streams").await;
    let json: std::collections::BTreeMap<String, u64> =
        serde_json::from_str(body.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(json, frozen);
    let mut ws = connect(addr, "s-0001", Some(1)).await;
    read_contiguous(&mut ws, 1, frozen["s-0001"]).await;
    handle.shutdown().await;
}

#[tokio::test]
async fn slow_consumer_is_cut_off_while_a_fast_one_keeps_every_event() {
    let mut config = UpstreamConfig::new(vec!["s-0001".into()]);
    // 5 MB/s with 10 MB of retention: the fast reader has ~2 s of slack, the silent one
    // fills its socket buffers and then falls out of retention.
    config.rate = 5_000.0;
    config.retention = 10_000;
    config.payload_bytes = 1_000;
    let (addr, handle) = mock_upstream::start(config).await.unwrap();
    let mut fast = connect(addr, "s-0001", Some(1)).await;
    let mut slow = connect(addr, "s-0001", Some(1)).await;
    wait_for("both connected", || handle.connections()["s-0001"] == 2).await;

    // The fast one reads everything, concurrently, until the final sequence it is told about.
    let (final_tx, mut final_rx) = tokio::sync::watch::channel(0u64);
    let reader = tokio::spawn(async move {
        let mut last = 0;
        while last == 0 || last != *final_rx.borrow_and_update() {
            tokio::select! {
                seen = next(&mut fast) => match seen {
                    Seen::Frame(UpstreamFrame::Event(ev)) => {
                        assert_eq!(ev.seq, last + 1, "fast consumer saw a hole or repeat");
                        last = ev.seq;
                    }
                    other => panic!("fast consumer: unexpected {other:?} after seq {last}"),
                },
                _ = final_rx.changed() => {}
            }
        }
        last
    });
    wait_for("the slow consumer to be cut off", || {
        handle.connections()["s-0001"] == 1
    })
    .await;
    handle.stop_production();
    let last = handle.last_seq("s-0001").unwrap();
    final_tx.send(last).unwrap();
    assert_eq!(reader.await.unwrap(), last);

    // The slow one received a contiguous prefix, then its connection ended.
    let mut received = 0;
    loop {
        match next(&mut slow).await {
            Seen::Frame(UpstreamFrame::Event(ev)) => {
                assert_eq!(ev.seq, received + 1, "slow consumer saw a hole or repeat");
                received = ev.seq;
            }
            Seen::Frame(gap) => panic!("unexpected {gap:?}"),
            Seen::Closed(_) => break,
        }
    }
    assert!(received < last, "the slow consumer was not behind");
    handle.shutdown().await;
}

#[tokio::test]
async fn unknown_stream_is_404_and_bad_from_is_400_before_the_upgrade() {
    let (addr, handle) = start(&["s-0001"], 0.0, 10).await;
    let url = format!("ws://{addr}/streams/nope");
    match tokio_tungstenite::connect_async(url).await {
        Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 404),
        other => panic!("expected 404, got {:?}", other.map(|(_, r)| r.status())),
    }
    for bad in ["abc", "0", "-3", ""] {
        let url = format!("ws://{addr}/streams/s-0001?from={bad}");
        match tokio_tungstenite::connect_async(url).await {
            Err(tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 400, "from={bad}");
                let body = String::from_utf8(resp.body().clone().unwrap_or_default()).unwrap();
                assert!(body.contains("from="), "reason missing: {body}");
            }
            other => panic!(
                "from={bad}: expected 400, got {:?}",
                other.map(|(_, r)| r.status())
            ),
        }
    }
    let resp = http(addr, "POST", "/admin/streams/nope/drop").await;
    assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
    handle.shutdown().await;
}

#[tokio::test]
async fn refuse_fault_answers_503_then_expires() {
    let (addr, handle) = start(&["s-0001"], 0.0, 10).await;
    let body = r#"{"refuse_new":true,"duration_secs":0.5}"#;
    let resp = http_body(addr, "POST", "/admin/faults", body).await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let url = format!("ws://{addr}/streams/s-0001");
    match tokio_tungstenite::connect_async(&url).await {
        Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 503),
        other => panic!("expected 503, got {:?}", other.map(|(_, r)| r.status())),
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if tokio_tungstenite::connect_async(&url).await.is_ok() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "refusal never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let resp = http_body(addr, "POST", "/admin/faults", r#"{"drop_every_secs":-1}"#).await;
    assert!(
        resp.starts_with("HTTP/1.1 400") && resp.contains("drop_every_secs"),
        "{resp}"
    );
    handle.shutdown().await;
}

#[tokio::test]
async fn drop_fault_closes_connections_repeatedly() {
    let (addr, handle) = start(&["s-0001"], 50.0, 10_000).await;
    handle
        .set_faults(mock_upstream::Faults {
            drop_every_secs: Some(0.2),
            ..Default::default()
        })
        .unwrap();
    for _ in 0..2 {
        let mut ws = connect(addr, "s-0001", None).await;
        let code = loop {
            if let Seen::Closed(code) = next(&mut ws).await {
                break code;
            }
        };
        assert_eq!(code, Some(CloseCode::from(CLOSE_DROPPED)));
    }
    handle.set_faults(Default::default()).unwrap();
    let mut ws = connect(addr, "s-0001", Some(1)).await;
    read_contiguous(&mut ws, 1, 30).await;
    ws.close(None).await.ok();
    handle.shutdown().await;
}

/// A minimal HTTP/1.1 request over a fresh connection; returns the whole response text.
async fn http(addr: SocketAddr, method: &str, path: &str) -> String {
    http_body(addr, method, path, "").await
}

async fn http_body(addr: SocketAddr, method: &str, path: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(PATIENCE, tcp.read_to_string(&mut out))
        .await
        .expect("http response in time")
        .unwrap();
    out
}

#[tokio::test]
async fn a_gap_fault_closes_the_reader_and_its_reconnect_gets_a_gap_notice() {
    let (addr, up) = start(&["g"], 0.0, 1000).await;
    up.produce("g", 5);
    let mut ws = connect(addr, "g", Some(1)).await;
    for want in 1..=5 {
        assert_eq!(next_seq(&mut ws).await, want);
    }
    // 10 new events are lost with everything retained (1..=5 as well).
    assert_eq!(up.control().lose("g", 10), Some((1, 15)));
    assert!(
        matches!(next(&mut ws).await, Seen::Closed(_)),
        "the reader behind must be closed"
    );
    let mut again = connect(addr, "g", Some(6)).await;
    match next(&mut again).await {
        Seen::Frame(UpstreamFrame::Gap(GapNotice {
            requested,
            oldest_available,
            ..
        })) => {
            assert_eq!((requested, oldest_available), (6, 16));
        }
        other => panic!("expected a gap notice, got {other:?}"),
    }
    up.produce("g", 1);
    assert_eq!(next_seq(&mut again).await, 16);
}

#[tokio::test]
async fn a_skip_fault_withholds_one_seq_without_a_gap_notice() {
    let (addr, up) = start(&["k"], 0.0, 1000).await;
    up.produce("k", 2);
    assert_eq!(up.control().skip("k"), Some(3));
    up.produce("k", 2);
    let mut ws = connect(addr, "k", Some(1)).await;
    let seen: Vec<u64> = [
        next_seq(&mut ws).await,
        next_seq(&mut ws).await,
        next_seq(&mut ws).await,
        next_seq(&mut ws).await,
    ]
    .to_vec();
    assert_eq!(seen, vec![1, 2, 4, 5], "seq 3 must be withheld, silently");
    assert_eq!(up.last_seq("k"), Some(5));
}
