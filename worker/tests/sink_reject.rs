//! Issue #17 (4): a sink's permanent rejection (a 4xx other than 409) must not be retried for
//! ever as if transient and unsaid. Default `SINK_REJECT_POLICY=halt`: the stream stops at its
//! last accepted event, keeps its lease, says so (gauge and a log line naming the stream, the
//! sequence range, the status and the answer) and retries with a capped backoff until the sink
//! accepts. `dead-letter`: the batch is written aside, the skip recorded, the stream continues.

mod common;

use std::time::Duration;

use common::*;

const STREAM: &str = "s-0001";

async fn highest_accepted(sink: &TestSink) -> u64 {
    sink.accepted(STREAM)
        .iter()
        .map(|r| r.seq)
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_rejection_halts_the_stream_until_the_sink_accepts() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&[STREAM], 50.0).await;
    let worker = Fleet {
        lease: "3",
        renew: "1",
        scan: "1",
        ..rig.fleet()
    }
    .spawn("w-1");
    rig.sink
        .wait_accepted(STREAM, Duration::from_secs(30), |_| true)
        .await
        .unwrap_or_else(|| panic!("never published\n{}", worker.logs()));
    let poison = highest_accepted(&rig.sink).await + 25;
    rig.sink.poison(Some((poison, 422)));
    let halted = eventually(Duration::from_secs(10), || async {
        (worker.metric("lease_worker_halted_streams").await == Some(1.0)).then_some(())
    })
    .await;
    assert!(
        halted.is_some(),
        "halted gauge never rose\n{}",
        worker.logs()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        highest_accepted(&rig.sink).await < poison,
        "nothing past the rejected event is accepted while halted"
    );
    let logs = worker.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("rejected a batch permanently"))
        .unwrap_or_else(|| panic!("no log line\n{logs}"));
    for part in [STREAM, "422", "malformed", "first_seq", "last_seq"] {
        assert!(line.contains(part), "{part} missing from: {line}");
    }
    assert_eq!(
        worker
            .metric(r#"lease_worker_leases_lost_total{reason="deadline"}"#)
            .await
            .unwrap_or(0.0),
        0.0,
        "the lease is kept while halted"
    );

    // The sink is fixed: the same batch goes through, and the stream resumes with nothing lost.
    rig.sink.poison(None);
    let resumed = rig
        .sink
        .wait_accepted(STREAM, Duration::from_secs(40), |r| r.seq > poison + 10)
        .await;
    assert!(resumed.is_some(), "never resumed\n{}", worker.logs());
    let mut seqs: Vec<u64> = rig.sink.accepted(STREAM).iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    let max = *seqs.last().unwrap();
    assert_eq!(seqs, (1..=max).collect::<Vec<_>>(), "nothing skipped");
    assert_eq!(
        worker.metric("lease_worker_halted_streams").await,
        Some(0.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_writes_the_batch_aside_records_it_and_continues() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&[STREAM], 50.0).await;
    let dir = tempfile::tempdir().unwrap();
    let worker = Fleet {
        lease: "3",
        renew: "1",
        scan: "1",
        extra: vec![
            ("SINK_REJECT_POLICY", "dead-letter".into()),
            ("DEAD_LETTER_DIR", dir.path().display().to_string()),
        ],
        ..rig.fleet()
    }
    .spawn("w-1");
    rig.sink
        .wait_accepted(STREAM, Duration::from_secs(30), |_| true)
        .await
        .unwrap_or_else(|| panic!("never published\n{}", worker.logs()));
    let poison = highest_accepted(&rig.sink).await + 25;
    rig.sink.poison(Some((poison, 400)));
    let past = rig
        .sink
        .wait_accepted(STREAM, Duration::from_secs(20), |r| r.seq > poison + 10)
        .await;
    assert!(past.is_some(), "did not continue\n{}", worker.logs());
    assert!(rig.sink.accepted(STREAM).iter().all(|r| r.seq != poison));
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let body = std::fs::read_to_string(&files[0]).unwrap();
    assert!(body.contains(&format!("\"seq\":{poison}")), "{body}");
    assert!(worker
        .metric("lease_worker_dead_lettered_events_total")
        .await
        .is_some_and(|n| n >= 1.0));
    let recorded = eventually(Duration::from_secs(5), || async {
        let out = rig
            .ddb
            .client()
            .get_item()
            .table_name(TABLE)
            .key(
                "stream_id",
                aws_sdk_dynamodb::types::AttributeValue::S(STREAM.into()),
            )
            .send()
            .await
            .ok()?;
        let range = out.item()?.get("dead_letter_range")?.as_s().ok()?.clone();
        Some(range)
    })
    .await;
    let range = recorded.expect("the skipped range is on the item");
    let (first, through) = range.split_once('-').unwrap();
    let (first, through): (u64, u64) = (first.parse().unwrap(), through.parse().unwrap());
    assert!(
        first <= poison && poison <= through,
        "{range} covers {poison}"
    );
}
