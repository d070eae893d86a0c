//! Issue #17 (5, 7): a busy table must not blind discovery nor hold up a drain. Through a proxy
//! to DynamoDB Local: a throttled scan page is retried from its own start key instead of
//! failing the whole scan (which left the worker blind until the next scan interval); and a
//! SIGTERM is noticed within one second even while a scan hangs, with nothing acquired after it.

mod common;

#[path = "common/ddb_proxy.rs"]
mod ddb_proxy;

use std::time::Duration;

use common::*;
use ddb_proxy::DdbProxy;
use tokio::time::Instant;

const STREAM: &str = "s-0001";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_scan_page_is_retried_not_the_whole_scan_lost() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&[STREAM], 50.0).await;
    let (addr, proxy) = DdbProxy::start(rig.ddb.endpoint()).await;
    proxy.throttle_scans(2);
    // Scans every 30 s: a failed first scan would leave the stream unowned that long.
    let worker = Fleet {
        endpoint: format!("http://{addr}"),
        lease: "30",
        renew: "10",
        scan: "30",
        ..rig.fleet()
    }
    .spawn("w-1");
    let started = Instant::now();
    let first = rig
        .sink
        .wait_accepted(STREAM, Duration::from_secs(15), |_| true)
        .await;
    assert!(
        first.is_some(),
        "a throttled scan page left the worker blind until the next scan\n{}",
        worker.logs()
    );
    assert!(proxy.scans() >= 3, "two throttled pages, then one answered");
    assert!(
        !worker.logs().contains("discovery scan failed"),
        "{}",
        worker.logs()
    );
    let throttled = worker
        .metric(r#"lease_worker_dynamodb_requests_total{op="scan",outcome="throttled"}"#)
        .await;
    assert_eq!(throttled, Some(2.0));
    eprintln!("first accepted after {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_is_noticed_within_a_second_during_a_hanging_scan() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&[STREAM], 50.0).await;
    let (addr, proxy) = DdbProxy::start(rig.ddb.endpoint()).await;
    proxy.hold_scans(Duration::from_secs(4));
    let mut worker = Fleet {
        endpoint: format!("http://{addr}"),
        lease: "30",
        renew: "10",
        scan: "30",
        ..rig.fleet()
    }
    .spawn("w-1");
    // The first scan is held at the proxy.
    let held = eventually(Duration::from_secs(20), || async {
        (proxy.scans() >= 1).then_some(())
    })
    .await;
    assert!(
        held.is_some(),
        "no scan reached the proxy\n{}",
        worker.logs()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = Instant::now();
    worker.signal("TERM");
    let status = worker.wait_exit(Duration::from_secs(10)).await;
    let took = sent.elapsed();
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        worker.logs()
    );
    // Nothing owned, so the drain has nothing to flush: the exit time is the notice time
    // (plus the drain's fleet-signal write, bounded at 1 s).
    assert!(
        took < Duration::from_millis(2500),
        "SIGTERM waited for the scan: exit after {took:?}\n{}",
        worker.logs()
    );
    assert!(
        !worker.logs().contains("stream acquired"),
        "nothing is acquired after the signal\n{}",
        worker.logs()
    );
    assert!(rig.sink.accepted(STREAM).is_empty());
}
