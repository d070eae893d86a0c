//! Issue #17 (1): a half-open upstream socket (silent, without FIN or RST) must not stall its
//! stream for ever under a healthy lease. A proxy between the worker and the real mock upstream
//! freezes the open connection; the worker must notice the silence within `UPSTREAM_IDLE_MS`,
//! reconnect from the highest sequence taken + 1 and keep publishing, with no sequence lost.

mod common;

#[path = "common/freeze_proxy.rs"]
mod freeze_proxy;

use std::time::Duration;

use common::*;
use freeze_proxy::FreezeProxy;
use tokio::time::Instant;

const STREAM: &str = "s-0001";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_upstream_is_reopened_after_the_liveness_deadline() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&[STREAM], 50.0).await;
    let proxy = FreezeProxy::start(rig.upstream_addr).await;
    let fleet = Fleet {
        upstream: proxy.addr,
        lease: "3",
        renew: "1",
        scan: "1",
        extra: vec![("UPSTREAM_IDLE_MS", "1000".into())],
        ..rig.fleet()
    };
    let worker = fleet.spawn("w-1");
    rig.sink
        .wait_accepted(STREAM, Duration::from_secs(30), |_| true)
        .await
        .unwrap_or_else(|| panic!("never published\n{}", worker.logs()));
    tokio::time::sleep(Duration::from_millis(500)).await;

    let frozen = proxy.freeze_open();
    let at = Instant::now();
    assert!(frozen >= 1);
    // The lease stays healthy throughout (renewals go to DynamoDB, not through the proxy), so
    // only the liveness deadline can bring the stream back.
    let resumed = rig
        .sink
        .wait_accepted(STREAM, Duration::from_secs(10), |r| {
            r.at > at + Duration::from_millis(1500)
        })
        .await;
    assert!(
        resumed.is_some(),
        "the stream stayed stalled behind a half-open socket\n{}",
        worker.logs()
    );
    assert!(proxy.accepted() > frozen, "the worker opened a new socket");
    let mut seqs: Vec<u64> = rig.sink.accepted(STREAM).iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    let max = *seqs.last().unwrap();
    assert_eq!(
        seqs,
        (1..=max).collect::<Vec<_>>(),
        "resumed at the highest taken + 1, nothing lost"
    );
    let timeouts = worker
        .metric("lease_worker_upstream_idle_timeouts_total")
        .await;
    assert!(timeouts.unwrap_or(0.0) >= 1.0, "counted: {timeouts:?}");
    assert!(worker.logs().contains("liveness deadline"), "logged");
}
