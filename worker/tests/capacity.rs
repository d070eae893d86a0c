//! The consumed-capacity meter against DynamoDB Local: every answered `UpdateItem`, `Scan` and
//! `GetItem` is asked for its consumed capacity and the units land in
//! `lease_worker_dynamodb_capacity_units_total` — one write unit per lease write (items are
//! under 1 KB; a refused conditional write is counted as one), read units for every scan page
//! and fleet-signal read.

mod common;

use std::time::Duration;

use common::*;

const WRITE_OPS: &[&str] = &[
    "acquire",
    "renew",
    "checkpoint",
    "release",
    "bid",
    "fleet_bump",
];

fn requests(text: &str, op: &str, outcome: &str) -> f64 {
    sample_of(
        text,
        &format!(r#"lease_worker_dynamodb_requests_total{{op="{op}",outcome="{outcome}"}}"#),
    )
    .unwrap_or(0.0)
}

fn units(text: &str, api: &str, kind: &str) -> f64 {
    sample_of(
        text,
        &format!(r#"lease_worker_dynamodb_capacity_units_total{{api="{api}",kind="{kind}",table="leases"}}"#),
    )
    .unwrap_or(-1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answered_request_reports_the_capacity_it_consumed() {
    let _serial = SERIAL.lock().await;
    let names: Vec<String> = (1..=12).map(|i| format!("s-{i:04}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let rig = Rig::start(&refs, 5.0).await;
    let worker = Fleet {
        lease: "3",
        renew: "1",
        scan: "1",
        ..rig.fleet()
    }
    .spawn("w-1");
    eventually(Duration::from_secs(30), || async {
        let owned = worker.metric("lease_worker_owned_streams").await?;
        (owned as usize == names.len()).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the worker never owned every stream\n{}", worker.logs()));
    // A few renew rounds, scans and fleet reads.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let text = worker.metrics_text().await.expect("metrics answer");

    let answered: f64 = WRITE_OPS
        .iter()
        .map(|op| requests(&text, op, "ok") + requests(&text, op, "conditional_failed"))
        .sum();
    let write_units = units(&text, "UpdateItem", "write");
    assert!(
        answered >= 12.0 + 12.0,
        "12 acquires and some renewals: {answered}"
    );
    // Counted on two sides of the same call (the interceptor, then the caller): a write in
    // flight at the scrape may show on one side only.
    assert!(
        (write_units - answered).abs() <= 4.0,
        "one write unit per answered lease write: {write_units} units, {answered} writes\n{text}"
    );
    let scans = requests(&text, "scan", "ok");
    let scan_units = units(&text, "Scan", "read");
    assert!(scans >= 3.0, "{text}");
    // Twelve small items are one page: every whole-table scan counted is one page read (less
    // one in flight at the scrape).
    let whole = sample_of(&text, "lease_worker_scans_total").unwrap_or(-1.0);
    assert!(
        whole >= scans - 1.0 && whole <= scans,
        "{whole} scans for {scans} pages\n{text}"
    );
    // A page of 12 small items costs 1 unit strongly consistent (after a lost race or a fleet
    // change), half a unit eventually consistent (the periodic scans): which ones a run makes
    // depends on its races, so the sum lies between the two.
    assert!(
        scan_units >= scans * 0.5 - 1.0 && scan_units <= scans + 1.0,
        "{scan_units} scan units for {scans} pages\n{text}"
    );
    let fleet_reads = requests(&text, "fleet_read", "ok");
    let get_units = units(&text, "GetItem", "read");
    assert!(fleet_reads >= 10.0, "{text}");
    // An eventually consistent read of a small item costs half a unit.
    assert!(
        (get_units - fleet_reads / 2.0).abs() <= 2.0,
        "{get_units} units for {fleet_reads} fleet reads\n{text}"
    );
}
