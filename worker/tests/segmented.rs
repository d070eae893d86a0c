//! Segmented discovery (`DISCOVERY=segmented`, issue #20) with real processes against DynamoDB
//! Local: each worker heartbeats into the membership table and scans its own segment of the
//! lease table, its predecessor's and a rotating one. The first version named an attribute DynamoDB reserves
//! (`segments`): every heartbeat failed, each worker fell back to scanning the whole table as a
//! fleet of one, and the scenarios still passed. This test fails that way: it reads the
//! membership table and the workers' request counters, not just the outcome. It also checks
//! that a draining member names who takes each of its streams (its handoffs) before it
//! releases them.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use lease_table::members;

const STREAMS: [&str; 12] = [
    "s-0001", "s-0002", "s-0003", "s-0004", "s-0005", "s-0006", "s-0007", "s-0008", "s-0009",
    "s-0010", "s-0011", "s-0012",
];

/// Each stream's owner, as the lease table says.
async fn owners(client: &aws_sdk_dynamodb::Client) -> HashMap<&'static str, Option<String>> {
    let mut out = HashMap::new();
    for s in STREAMS {
        out.insert(s, item(client, s).await.owner_id);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segmented_workers_heartbeat_split_the_table_take_over_a_dead_ones_streams_and_hand_a_drained_ones_over(
) {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(&STREAMS, 10.0).await;
    let client = rig.ddb.client();
    let members_table = members::table_for(TABLE);
    members::create_table(&client, &members_table)
        .await
        .expect("membership table");
    let mut fleet = rig.fleet();
    fleet.extra.push(("DISCOVERY", "segmented".into()));
    let mut workers: Vec<Worker> = ["w-a", "w-b", "w-c", "w-d"]
        .iter()
        .map(|n| fleet.spawn(n))
        .collect();
    let logs = |workers: &[Worker]| -> String {
        workers
            .iter()
            .map(|w| format!("---- {} ----\n{}", w.name, w.logs()))
            .collect()
    };

    // Every member heartbeats, knows the fleet is four and how many it runs; together they
    // run every stream, each about its share.
    let settled = eventually(Duration::from_secs(30), || async {
        let live = members::scan(&client, &members_table).await.ok()?;
        let held: usize = live.iter().map(|m| m.held).sum();
        let ok = live.len() == 4
            && live
                .iter()
                .all(|m| m.segments == 4 && (2..=4).contains(&m.held))
            && held == STREAMS.len();
        ok.then_some(live)
    })
    .await;
    assert!(
        settled.is_some(),
        "the membership table never showed four members sharing 12 streams: {:?}\n{}",
        members::scan(&client, &members_table).await,
        logs(&workers)
    );
    for w in &workers {
        let puts = w
            .metric(r#"lease_worker_dynamodb_requests_total{op="member_put",outcome="ok"}"#)
            .await
            .unwrap_or(0.0);
        let scans = w
            .metric(r#"lease_worker_dynamodb_requests_total{op="member_scan",outcome="ok"}"#)
            .await
            .unwrap_or(0.0);
        assert!(
            puts >= 1.0 && scans >= 1.0,
            "{}: {puts} heartbeats, {scans} membership scans",
            w.name
        );
    }
    for s in STREAMS {
        assert!(
            rig.sink
                .wait_accepted(s, Duration::from_secs(10), |_| true)
                .await
                .is_some(),
            "{s} never flowed\n{}",
            logs(&workers)
        );
    }

    // SIGKILL one: its streams are taken by the three left (its own segment is read by its
    // standby every interval).
    let mut victim = workers.remove(0);
    victim.kill();
    let taken = eventually(Duration::from_secs(30), || async {
        let now = owners(&client).await;
        now.values()
            .all(|o| o.as_deref().is_some_and(|o| o != victim.name))
            .then_some(now)
    })
    .await;
    assert!(
        taken.is_some(),
        "{}'s streams were not taken over: {:?}\n{}",
        victim.name,
        owners(&client).await,
        logs(&workers)
    );

    // SIGTERM another: before releasing, its membership item names who takes each stream
    // (members with room), and they take them.
    let mut drained = workers.remove(0);
    let held: Vec<&str> = owners(&client)
        .await
        .into_iter()
        .filter(|(_, o)| o.as_deref() == Some(drained.name.as_str()))
        .map(|(s, _)| s)
        .collect();
    drained.signal("TERM");
    assert!(
        drained.wait_exit(Duration::from_secs(15)).await.is_some(),
        "{} did not exit on SIGTERM\n{}",
        drained.name,
        drained.logs()
    );
    let item = members::scan(&client, &members_table)
        .await
        .expect("membership read")
        .into_iter()
        .find(|m| m.owner_id == drained.name);
    assert!(
        item.as_ref().is_some_and(|m| m.draining
            && !held.is_empty()
            && m.handoff
                .iter()
                .all(|(s, to)| held.contains(&s.as_str()) && to != &drained.name)
            && !m.handoff.is_empty()),
        "{} drained holding {held:?}; its membership item named no handoffs: {item:?}\n{}",
        drained.name,
        drained.logs()
    );
    let retaken = eventually(Duration::from_secs(10), || async {
        let now = owners(&client).await;
        held.iter()
            .all(|s| now[s].as_deref().is_some_and(|o| o != drained.name))
            .then_some(now)
    })
    .await;
    assert!(
        retaken.is_some(),
        "{}'s released streams {held:?} were not taken: {:?}\n{}",
        drained.name,
        owners(&client).await,
        logs(&workers)
    );
    let two = eventually(Duration::from_secs(30), || async {
        let live = members::scan(&client, &members_table).await.ok()?;
        let now = lease_table::now_ms();
        let live: Vec<_> = live
            .into_iter()
            .filter(|m| m.expires_at > now && !m.draining)
            .collect();
        (live.len() == 2 && live.iter().all(|m| m.segments == 2)).then_some(live)
    })
    .await;
    assert!(
        two.is_some(),
        "the survivors never dealt the table in two segments: {:?}\n{}",
        members::scan(&client, &members_table).await,
        logs(&workers)
    );
}
