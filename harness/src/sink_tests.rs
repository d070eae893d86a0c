//! Tests of the fencing sink: its decisions, its answers and the receipts it records.

use super::*;
use crate::history::{HistoryWriter, Record};
use lease_protocol::{event_id, SinkBatch, SinkEvent};

fn batch(owner: &str, fence: u64, seqs: &[u64]) -> SinkBatch {
    SinkBatch {
        owner_id: owner.into(),
        fence_token: fence,
        events: seqs
            .iter()
            .map(|&seq| SinkEvent {
                seq,
                event_id: event_id("s-0001", seq),
                payload: lease_protocol::payload_prefix("s-0001", seq) + "p",
            })
            .collect(),
    }
}

/// A fencing sink recording into a fresh history, and where to post `s-0001`'s batches.
struct Served {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    writer: HistoryWriter,
    sink: Sink,
    client: reqwest::Client,
    url: String,
}

async fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    let writer = HistoryWriter::create(&path).unwrap();
    let sink = Sink::start(writer.recorder(), true).await.unwrap();
    let url = format!("{}{}", sink.url(), lease_protocol::sink_path("s-0001"));
    Served {
        _dir: dir,
        path,
        writer,
        sink,
        client: reqwest::Client::new(),
        url,
    }
}

#[tokio::test]
async fn fences_dedups_and_records_every_receipt_over_http() {
    let Served {
        _dir,
        path,
        writer,
        sink,
        client,
        url,
    } = serve().await;
    let post = |b: SinkBatch| client.post(&url).json(&b).send();

    let r = post(batch("w1", 1, &[1, 2])).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<SinkAck>().await.unwrap(),
        SinkAck {
            accepted: 2,
            duplicates: 0
        }
    );
    let r = post(batch("w2", 2, &[2, 3])).await.unwrap();
    assert_eq!(
        r.json::<SinkAck>().await.unwrap(),
        SinkAck {
            accepted: 1,
            duplicates: 1
        }
    );
    let r = post(batch("w1", 1, &[4])).await.unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(r.json::<SinkRejection>().await.unwrap().highest_fence, 2);
    assert_eq!(sink.high_water("s-0001"), 3, "the fenced 4 was not stored");
    let r = post(batch("w2", 2, &[5])).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        sink.high_water("s-0001"),
        3,
        "4 is missing, so 5 does not raise the mark"
    );
    sink.stop().await;
    writer.finish().unwrap();

    let outcomes: Vec<(u64, Outcome)> = crate::history::read(&path)
        .unwrap()
        .map(|r| match r.unwrap() {
            Record::Receipt(r) => (r.seq, r.outcome),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    use Outcome::*;
    assert_eq!(
        outcomes,
        vec![
            (1, Accepted),
            (2, Accepted),
            (2, Duplicate),
            (3, Accepted),
            (4, Fenced),
            (5, Accepted)
        ]
    );
}

#[tokio::test]
async fn without_fencing_a_stale_token_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let writer = HistoryWriter::create(&dir.path().join("h.jsonl")).unwrap();
    let sink = Sink::start(writer.recorder(), false).await.unwrap();
    let shared = sink.shared.clone();
    assert!(matches!(
        decide_json(&shared, "s-0001", batch("w2", 2, &[1])),
        Decision::Stored(_)
    ));
    assert!(matches!(
        decide_json(&shared, "s-0001", batch("w1", 1, &[2])),
        Decision::Stored(_)
    ));
    assert_eq!(sink.high_water("s-0001"), 2);
    sink.stop().await;
}

/// [`decide`] on `b` as it reaches the server: serialised, then read back as a [`BatchIn`].
fn decide_json(shared: &Shared, stream: &str, b: SinkBatch) -> Decision {
    let body = serde_json::to_vec(&b).unwrap();
    decide(shared, stream, &serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn a_malformed_batch_is_a_400_naming_the_problem_and_records_nothing() {
    let Served {
        _dir,
        path,
        writer,
        sink,
        client,
        url,
    } = serve().await;
    let bodies = [
        ("not json", "expected"),
        (
            r#"{"owner_id":"w1","events":[]}"#,
            "missing field `fence_token`",
        ),
        (
            r#"{"owner_id":"w1","fence_token":1,"events":[{"seq":1,"event_id":"s-0001:1"}]}"#,
            "missing field `payload`",
        ),
        (
            r#"{"owner_id":"w1","fence_token":-1,"events":[]}"#,
            "invalid value",
        ),
    ];
    for (body, words) in bodies {
        let r = client.post(&url).body(body).send().await.unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let text = r.text().await.unwrap();
        assert!(text.contains(words), "{body}: {text}");
    }
    // Escaped strings (owned rather than borrowed) are read like plain ones.
    let escaped = r#"{"owner_id":"w\"1","fence_token":1,"events":[{"seq":1,"event_id":"s-0001:\u0031","payload":"s-0001/1.\u0078"}]}"#;
    let r = client.post(&url).body(escaped).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<SinkAck>().await.unwrap(),
        SinkAck {
            accepted: 1,
            duplicates: 0
        }
    );
    assert_eq!(
        sink.high_water("s-0001"),
        1,
        "the canonical id was recognised"
    );
    sink.stop().await;
    assert_eq!(writer.finish().unwrap(), 1, "only the good batch's receipt");
    let owners: Vec<String> = crate::history::read(&path)
        .unwrap()
        .map(|r| match r.unwrap() {
            Record::Receipt(r) => r.owner_id,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(owners, ["w\"1"]);
}

#[tokio::test]
async fn an_absurd_seq_is_a_400_and_the_sink_stays_up() {
    let Served {
        _dir,
        path,
        writer,
        sink,
        client,
        url,
    } = serve().await;
    for seq in [1u64 << 63, u64::MAX, MAX_SEQ_AHEAD + 1] {
        let r = client
            .post(&url)
            .json(&batch("w1", 1, &[1, seq]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "seq {seq}");
        let text = r.text().await.unwrap();
        assert!(text.contains(&seq.to_string()), "{text}");
    }
    assert_eq!(
        sink.high_water("s-0001"),
        0,
        "nothing of a refused batch is stored"
    );
    // The sink still serves, and a seq within reach of the mark is stored.
    let r = client
        .post(&url)
        .json(&batch("w1", 1, &[1, MAX_SEQ_AHEAD]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(sink.high_water("s-0001"), 1);
    sink.stop().await;
    assert_eq!(
        writer.finish().unwrap(),
        2,
        "receipts of the stored batch only"
    );
    drop(path);
}

#[tokio::test]
async fn a_payload_that_is_not_the_upstreams_is_recorded_as_a_mismatch() {
    let Served {
        _dir,
        path,
        writer,
        sink,
        client,
        url,
    } = serve().await;
    let mut b = batch("w1", 1, &[1, 2, 3]);
    b.events[1].payload = lease_protocol::payload_prefix("s-0001", 3) + "p"; // seq 2 carries 3's
    let r = client.post(&url).json(&b).send().await.unwrap();
    assert_eq!(
        r.status(),
        200,
        "accepted all the same: the check is the harness's"
    );
    let r = client.post(&url).json(&b).send().await.unwrap();
    assert_eq!(r.status(), 200);
    sink.stop().await;
    writer.finish().unwrap();
    let mismatches: Vec<u64> = crate::history::read(&path)
        .unwrap()
        .filter_map(|r| match r.unwrap() {
            Record::ContentMismatch(m) => Some(m.seq),
            _ => None,
        })
        .collect();
    assert_eq!(
        mismatches,
        [2],
        "once: the repeat is a duplicate, not a new acceptance"
    );
}

#[test]
fn canonical_ids_are_recognised() {
    assert!(is_canonical("s-0001:42", "s-0001", 42));
    assert!(!is_canonical("s-0001:42", "s-0001", 41));
    assert!(!is_canonical("s-00012:42", "s-0001", 42));
    assert!(!is_canonical("x", "s-0001", 42));
}
