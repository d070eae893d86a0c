//! The worker against the real thing: DynamoDB Local, the mock upstream, a fencing sink and real
//! `lease-worker` processes. Leases are short (2–3 s) and time bounds generous.

mod common;

use std::time::Duration;

use common::*;
use tokio::time::Instant;

const STREAM: &str = "s-0001";

/// Every accepted sequence of `stream` from 1 to the highest accepted, with none missing.
fn assert_contiguous(sink: &TestSink, stream: &str) -> u64 {
    let mut seqs: Vec<u64> = sink.accepted(stream).iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    let max = *seqs.last().expect("something was accepted");
    assert_eq!(
        seqs,
        (1..=max).collect::<Vec<_>>(),
        "accepted sequences have a hole"
    );
    max
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owner_at_a_time_and_sigkill_hands_over_with_next_fence_from_checkpoint() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&[STREAM], 100.0).await;
    let (client, sink) = (rig.ddb.client(), &rig.sink);
    let fleet = rig.fleet();
    let mut workers = vec![fleet.spawn("worker-a"), fleet.spawn("worker-b")];

    // Phase 1: both run; exactly one owns the stream, as seen by the table, the workers and the sink.
    let first = sink
        .wait_accepted(STREAM, Duration::from_secs(30), |_| true)
        .await
        .expect("some event reaches the sink");
    let observe_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < observe_until {
        let mut owned = 0.0;
        for w in &workers {
            owned += w.metric("lease_worker_owned_streams").await.unwrap_or(0.0);
        }
        assert!(owned <= 1.0, "two workers report owning the stream");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let before: Vec<Receipt> = sink.accepted(STREAM);
    assert!(before
        .iter()
        .all(|r| r.owner == first.owner && r.fence == first.fence));
    let lease = item(&client, STREAM).await;
    assert_eq!(lease.owner_id.as_deref(), Some(first.owner.as_str()));
    assert_eq!(lease.fence_token, Some(first.fence));
    assert!(
        lease.checkpoint.unwrap_or(0) > 0,
        "the checkpoint is persisted with the renewals"
    );

    // Phase 2: SIGKILL the owner; the other continues from the checkpoint with fence + 1.
    let owner_idx = workers.iter().position(|w| w.name == first.owner).unwrap();
    let mut owner = workers.remove(owner_idx);
    let survivor = workers.pop().unwrap();
    owner.kill();
    let killed_at = Instant::now();
    // A renewal in flight at the kill (it carries the checkpoint) lands within milliseconds:
    // read the checkpoint past it.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let checkpoint = item(&client, STREAM).await.checkpoint.unwrap_or(0);
    let next = sink
        .wait_accepted(STREAM, Duration::from_secs(30), |r| r.fence > first.fence)
        .await
        .expect("the survivor takes over");
    assert_eq!(next.owner, survivor.name);
    assert_eq!(next.fence, first.fence + 1);
    let taken_over = sink
        .receipts()
        .into_iter()
        .filter(|r| r.fence == next.fence)
        .map(|r| r.seq)
        .min()
        .unwrap();
    assert_eq!(
        taken_over,
        checkpoint + 1,
        "the new owner resumes right after the checkpoint"
    );
    assert!(
        next.at.duration_since(killed_at) < Duration::from_secs(15),
        "takeover took {:?}",
        next.at.duration_since(killed_at)
    );
    // Let the new owner run a little, then nothing is missing and nothing stale was accepted.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_contiguous(sink, STREAM);
    let receipts = sink.receipts();
    assert!(receipts
        .iter()
        .filter(|r| r.at > next.at && r.outcome == Outcome::Accepted)
        .all(|r| r.fence == next.fence));
    drop(survivor);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_hands_over_without_waiting_for_expiry() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&[STREAM], 100.0).await;
    let (client, sink) = (rig.ddb.client(), &rig.sink);
    // A long lease: waiting for expiry would take 30 s; a handoff must take far less.
    let fleet = Fleet {
        lease: "30",
        renew: "5",
        ..rig.fleet()
    };
    let mut a = fleet.spawn("worker-a");
    let first = sink
        .wait_accepted(STREAM, Duration::from_secs(30), |_| true)
        .await
        .expect("worker-a publishes");
    assert_eq!(first.owner, "worker-a");
    let b = fleet.spawn("worker-b");
    let b_addr = b.metrics_addr().await.to_string();
    // `lease-worker health` answers 0 once the worker has scanned the table (the ECS health check).
    eventually(Duration::from_secs(10), || async {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lease-worker"))
            .args(["health", "--addr", &b_addr])
            .output()
            .unwrap();
        out.status.success().then_some(())
    })
    .await
    .expect("worker-b becomes ready");
    tokio::time::sleep(Duration::from_secs(1)).await;

    a.signal("TERM");
    let termed = Instant::now();
    let status = a
        .wait_exit(Duration::from_secs(25))
        .await
        .expect("worker-a exits after draining");
    assert!(status.success(), "drain exits 0: {status:?}\n{}", a.logs());
    let released = item(&client, STREAM).await;
    // Released: either still free, or already taken by worker-b with the next fence.
    assert!(
        released.owner_id.is_none() || released.owner_id.as_deref() == Some("worker-b"),
        "{released:?}"
    );
    let last_a = sink
        .accepted(STREAM)
        .iter()
        .filter(|r| r.owner == "worker-a")
        .map(|r| r.seq)
        .max()
        .unwrap();
    assert!(released.checkpoint.unwrap_or(0) >= last_a.min(released.checkpoint.unwrap_or(0)));

    let next = sink
        .wait_accepted(STREAM, Duration::from_secs(20), |r| r.owner == "worker-b")
        .await
        .expect("worker-b takes over");
    assert_eq!(next.fence, first.fence + 1);
    let took = next.at.duration_since(termed);
    assert!(
        took < Duration::from_secs(10),
        "handoff took {took:?}, the lease is 30 s"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_contiguous(sink, STREAM);
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_stops_by_the_local_deadline_when_dynamodb_is_gone() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&[STREAM], 100.0).await;
    let sink = &rig.sink;
    let w = rig.fleet().spawn("worker-a");
    eventually(Duration::from_secs(30), || async {
        (sink.accepted(STREAM).len() > 20).then_some(())
    })
    .await
    .expect("the worker publishes");

    drop(rig.ddb); // stops DynamoDB Local: renewals can no longer succeed
    let stopped = Instant::now();
    // Keep watching well past the lease: the last accepted event must come before the lease
    // (counted from the last successful renewal, which is before `stopped`) plus slack.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let last = sink.receipts().iter().map(|r| r.at).max().unwrap();
    let after = last.saturating_duration_since(stopped);
    assert!(
        after < Duration::from_millis(2_500),
        "published {after:?} after DynamoDB stopped"
    );
    assert_eq!(
        w.metric(r#"lease_worker_leases_lost_total{reason="deadline"}"#)
            .await,
        Some(1.0),
        "{}",
        w.logs()
    );
    assert_eq!(w.metric("lease_worker_owned_streams").await, Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_and_lease_demo_items_are_acquired() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&["bare", "demo"], 50.0).await;
    let (client, sink) = (rig.ddb.client(), &rig.sink);
    // An item as the source design's lease_demo.py leaves it (owned, expired, no checkpoint),
    // written over the seeded one before any worker starts.
    let past = lease_table::now_ms() - 60_000;
    put_demo_item(&client, "demo", "python-demo", past, 5, past).await;
    let fleet = Fleet {
        lease: "3",
        renew: "1",
        ..rig.fleet()
    };
    let _w = fleet.spawn("worker-a");
    for (stream, fence) in [("bare", 1), ("demo", 6)] {
        let r = sink
            .wait_accepted(stream, Duration::from_secs(30), |_| true)
            .await
            .unwrap_or_else(|| panic!("{stream} is consumed"));
        assert_eq!(r.fence, fence, "{stream}");
        assert_eq!(
            r.seq, 1,
            "{stream} starts from the beginning (no checkpoint)"
        );
        let it = item(&client, stream).await;
        assert_eq!(it.owner_id.as_deref(), Some("worker-a"));
        assert_eq!(it.fence_token, Some(fence));
    }
}

/// The worker reads its upstream socket through a small buffer (`UPSTREAM_READ_BUFFER`): frames
/// several times its size still arrive whole, with nothing missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_larger_than_the_read_buffer_arrive_whole() {
    const PAYLOAD: usize = 5 * lease_worker::stream::UPSTREAM_READ_BUFFER + 123;
    let _serial = SERIAL.lock().await;
    let rig = Rig::start_with(&[STREAM], |c| {
        c.rate = 20.0;
        c.payload_bytes = PAYLOAD;
    })
    .await;
    let _w = rig.fleet().spawn("worker-a");
    rig.sink
        .wait_accepted(STREAM, Duration::from_secs(30), |r| r.seq >= 40)
        .await
        .expect("40 large events accepted");
    let max = assert_contiguous(&rig.sink, STREAM);
    let accepted = rig.sink.accepted(STREAM);
    let wrong: Vec<_> = accepted
        .iter()
        // The upstream's payload is `{stream}/{seq}.` then `payload_bytes` of filler.
        .filter(|r| r.payload_len != PAYLOAD + lease_protocol::payload_prefix(STREAM, r.seq).len())
        .map(|r| (r.seq, r.payload_len))
        .collect();
    assert!(
        wrong.is_empty(),
        "payloads of {PAYLOAD} bytes after the stream/seq prefix expected; (seq, length) otherwise: {wrong:?}"
    );
    assert!(max >= 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_owner_is_fenced_and_the_chaos_zombie_is_refused_by_the_sink() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&[STREAM], 100.0).await;
    let sink = &rig.sink;
    let mut fleet = Fleet {
        extra: vec![("CHAOS_SKIP_DEADLINE_CHECK", "true".to_string())],
        ..rig.fleet()
    };
    let zombie = fleet.spawn("zombie");
    sink.wait_accepted(STREAM, Duration::from_secs(30), |_| true)
        .await
        .expect("the zombie-to-be publishes");
    assert!(
        zombie.logs().contains("CHAOS_SKIP_DEADLINE_CHECK is ON"),
        "loudly logged"
    );
    fleet.extra.clear();
    let healthy = fleet.spawn("healthy");
    healthy.metrics_addr().await;

    zombie.signal("STOP");
    let next = sink
        .wait_accepted(STREAM, Duration::from_secs(30), |r| r.owner == "healthy")
        .await
        .expect("the healthy worker takes over from the paused one");
    tokio::time::sleep(Duration::from_millis(500)).await;
    zombie.signal("CONT");

    // The zombie keeps publishing with its old token: the sink refuses it and it stops.
    eventually(Duration::from_secs(20), || async {
        let fenced = zombie
            .metric(r#"lease_worker_leases_lost_total{reason="sink_fenced"}"#)
            .await?;
        (fenced >= 1.0).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the zombie was never fenced\n{}", zombie.logs()));
    let receipts = sink.receipts();
    assert!(receipts
        .iter()
        .any(|r| r.outcome == Outcome::Fenced && r.owner == "zombie"));
    // Nothing stale was accepted after the takeover.
    assert!(receipts
        .iter()
        .filter(|r| r.at >= next.at && r.outcome == Outcome::Accepted)
        .all(|r| r.fence >= next.fence));
    drop(healthy);
}
