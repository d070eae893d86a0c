//! Issue #17 (8): two live processes under one `OWNER_ID` (host networking, a copied task
//! definition) must not take each other's leases back and forth. Before, "already ours" was
//! `owner_id = :me` alone, so by the rules the second process would take every stream of the
//! first at once (items naming its id that it does not run were candidates), the first's renewals
//! would be refused and it would take them back at its next round, each time under a new fence,
//! for as long as both ran (not measured on the old code: this test needs the new metric). Now
//! each acquire writes `owner_instance` (a random id per process), an item under this id but
//! another instance is planned as another owner's, and the process that sees one says so
//! (`lease_worker_duplicate_owners`, an error line). Real processes, DynamoDB Local.

mod common;

use std::time::Duration;

use common::*;

const STREAMS: [&str; 6] = ["s-0001", "s-0002", "s-0003", "s-0004", "s-0005", "s-0006"];

/// The fence tokens of every stream, in order.
async fn fences(client: &aws_sdk_dynamodb::Client) -> Vec<Option<u64>> {
    let mut out = Vec::new();
    for s in STREAMS {
        out.push(item(client, s).await.fence_token);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_under_the_same_owner_id_is_reported_not_fought() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&STREAMS, 20.0).await;
    let client = rig.ddb.client();
    let first = rig.fleet().spawn("dup");
    // The first process holds every stream and publishes on each.
    for s in STREAMS {
        let flowing = rig
            .sink
            .wait_accepted(s, Duration::from_secs(20), |_| true)
            .await;
        assert!(flowing.is_some(), "{s} never flowed\n{}", first.logs());
    }
    let second = rig.fleet().spawn("dup");
    // The second sees another live process under its id.
    let seen = eventually(Duration::from_secs(15), || async {
        (second.metric("lease_worker_duplicate_owners").await == Some(1.0)).then_some(())
    })
    .await;
    assert!(
        seen.is_some(),
        "the second process never reported the first\n{}",
        second.logs()
    );
    assert!(
        second
            .logs()
            .contains("another live process holds leases under this worker's OWNER_ID"),
        "{}",
        second.logs()
    );
    // Nothing changes hands for 6 s (12 renew intervals, 12 scans of each process).
    let before = fences(&client).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = fences(&client).await;
    assert_eq!(
        before,
        after,
        "leases changed hands between two processes of one OWNER_ID\n---- first ----\n{}\n---- second ----\n{}",
        first.logs(),
        second.logs()
    );
    // And every stream still flows.
    for s in STREAMS {
        let last = rig.sink.accepted(s).last().map(|r| r.seq).unwrap_or(0);
        let more = rig
            .sink
            .wait_accepted(s, Duration::from_secs(5), |r| r.seq > last)
            .await;
        assert!(more.is_some(), "{s} stopped flowing");
    }
}
