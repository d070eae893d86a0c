//! The conditional lease writes of design §2 against DynamoDB Local, with the clock passed in so
//! that expiry is exact: stale tokens are refused, release keeps fence and checkpoint, items with
//! only `stream_id` (and items from `lease_demo.py`) are acquired, missing items are not created.

mod common;

use aws_sdk_dynamodb::types::AttributeValue;
use common::*;
use lease_table::ops::{self, Holder, Outcome};

const LEASE_MS: i64 = 3_000;

fn holder(owner: &str, token: u64) -> Holder<'_> {
    Holder {
        owner_id: owner,
        fence_token: token,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_tokens_are_refused_and_release_keeps_fence_and_checkpoint() {
    let _serial = SERIAL.lock().await;
    let ddb = dynamo(&["s"]).await;
    let c = ddb.client();
    let t0 = 1_000_000;

    // An item holding only stream_id is acquired with fence 1.
    let a = ops::acquire(&c, TABLE, "s", "a", LEASE_MS, t0, 200)
        .await
        .unwrap();
    let Outcome::Done(a) = a else { panic!("{a:?}") };
    assert_eq!(
        (a.owner_id.as_deref(), a.fence_token, a.checkpoint),
        (Some("a"), Some(1), None)
    );

    // Held: b is refused and told who holds it.
    let refused = ops::acquire(&c, TABLE, "s", "b", LEASE_MS, t0 + 1_000, 200)
        .await
        .unwrap();
    match refused {
        Outcome::Refused { current: Some(cur) } => assert_eq!(cur.owner_id.as_deref(), Some("a")),
        other => panic!("{other:?}"),
    }
    // Within the skew margin after expiry: still refused.
    let skewed = ops::acquire(&c, TABLE, "s", "b", LEASE_MS, t0 + LEASE_MS + 100, 200)
        .await
        .unwrap();
    assert!(matches!(skewed, Outcome::Refused { .. }));

    // a renews with a checkpoint, then the lease lapses and b takes over with fence 2.
    let r = ops::renew(&c, TABLE, "s", holder("a", 1), LEASE_MS, t0 + 500, Some(41))
        .await
        .unwrap();
    assert_eq!(r, Outcome::Done(()));
    let expired_at = t0 + 500 + LEASE_MS;
    let b = ops::acquire(&c, TABLE, "s", "b", LEASE_MS, expired_at + 201, 200)
        .await
        .unwrap();
    let Outcome::Done(b) = b else { panic!("{b:?}") };
    assert_eq!(b.fence_token, Some(2));
    assert_eq!(
        b.checkpoint,
        Some(41),
        "the new owner starts from the old checkpoint"
    );

    // The old owner's token is stale for every write.
    let now = expired_at + 300;
    assert!(matches!(
        ops::checkpoint(&c, TABLE, "s", holder("a", 1), 99, now)
            .await
            .unwrap(),
        Outcome::Refused { .. }
    ));
    assert!(matches!(
        ops::renew(&c, TABLE, "s", holder("a", 1), LEASE_MS, now, None)
            .await
            .unwrap(),
        Outcome::Refused { .. }
    ));
    assert!(matches!(
        ops::release(&c, TABLE, "s", holder("a", 1), Some(99), now)
            .await
            .unwrap(),
        Outcome::Refused { .. }
    ));
    // Same owner name with an old token is stale too (a restarted process must re-acquire).
    assert!(matches!(
        ops::checkpoint(&c, TABLE, "s", holder("b", 1), 99, now)
            .await
            .unwrap(),
        Outcome::Refused { .. }
    ));
    let it = item(&c, "s").await;
    assert_eq!(
        (it.owner_id.as_deref(), it.fence_token, it.checkpoint),
        (Some("b"), Some(2), Some(41))
    );

    // The holder's checkpoint and release work; release keeps the fence and the checkpoint.
    assert_eq!(
        ops::checkpoint(&c, TABLE, "s", holder("b", 2), 50, now)
            .await
            .unwrap(),
        Outcome::Done(())
    );
    assert_eq!(
        ops::release(&c, TABLE, "s", holder("b", 2), Some(60), now)
            .await
            .unwrap(),
        Outcome::Done(())
    );
    let it = item(&c, "s").await;
    assert_eq!(
        (
            it.owner_id,
            it.lease_expires_at,
            it.fence_token,
            it.checkpoint
        ),
        (None, None, Some(2), Some(60))
    );

    // Released: anyone acquires at once, fence 3.
    let again = ops::acquire(&c, TABLE, "s", "a", LEASE_MS, now + 1, 200)
        .await
        .unwrap();
    assert!(
        matches!(again, Outcome::Done(ref i) if i.fence_token == Some(3)),
        "{again:?}"
    );
}

/// Issue #17 (2): a renewal or checkpoint that timed out at the client and is applied after its
/// successor (DynamoDB's late apply) must be refused, not move the lease or the checkpoint back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_applied_renewal_or_checkpoint_never_moves_the_item_back() {
    let _serial = SERIAL.lock().await;
    let ddb = dynamo(&["s"]).await;
    let c = ddb.client();
    let t0 = 2_000_000;
    let a = ops::acquire(&c, TABLE, "s", "a", LEASE_MS, t0, 200)
        .await
        .unwrap();
    assert!(matches!(a, Outcome::Done(_)), "{a:?}");
    // The successor renewal (started at t0 + 1000, checkpoint 20) lands first.
    let later = ops::renew(
        &c,
        TABLE,
        "s",
        holder("a", 1),
        LEASE_MS,
        t0 + 1_000,
        Some(20),
    )
    .await
    .unwrap();
    assert_eq!(later, Outcome::Done(()));
    // The older one (started at t0 + 500, checkpoint 10) lands after it: refused, and the
    // refusal shows the item as it is (ours, with the later expiry).
    let late = ops::renew(&c, TABLE, "s", holder("a", 1), LEASE_MS, t0 + 500, Some(10))
        .await
        .unwrap();
    match late {
        Outcome::Refused { current: Some(cur) } => {
            assert_eq!(cur.lease_expires_at, Some(t0 + 1_000 + LEASE_MS))
        }
        other => panic!("a late renewal must be refused: {other:?}"),
    }
    // Without a checkpoint too: the expiry alone never moves back.
    let late = ops::renew(&c, TABLE, "s", holder("a", 1), LEASE_MS, t0 + 600, None)
        .await
        .unwrap();
    assert!(matches!(late, Outcome::Refused { .. }), "{late:?}");
    // A late checkpoint alone is refused too; an equal or higher one is written.
    let back = ops::checkpoint(&c, TABLE, "s", holder("a", 1), 15, t0 + 700)
        .await
        .unwrap();
    assert!(matches!(back, Outcome::Refused { .. }), "{back:?}");
    let it = item(&c, "s").await;
    assert_eq!(
        (it.lease_expires_at, it.checkpoint),
        (Some(t0 + 1_000 + LEASE_MS), Some(20))
    );
    for (at, cp) in [(t0 + 1_200, 20), (t0 + 1_300, 25)] {
        let ok = ops::renew(&c, TABLE, "s", holder("a", 1), LEASE_MS, at, Some(cp))
            .await
            .unwrap();
        assert_eq!(
            ok,
            Outcome::Done(()),
            "renewal at {at} with checkpoint {cp}"
        );
    }
    assert_eq!(
        ops::checkpoint(&c, TABLE, "s", holder("a", 1), 30, t0 + 1_400)
            .await
            .unwrap(),
        Outcome::Done(())
    );
    let it = item(&c, "s").await;
    assert_eq!(
        (it.lease_expires_at, it.checkpoint),
        (Some(t0 + 1_300 + LEASE_MS), Some(30))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_demo_items_are_compatible_and_missing_items_are_not_created() {
    let _serial = SERIAL.lock().await;
    let ddb = dynamo(&[]).await;
    let c = ddb.client();
    let now = 5_000_000;
    // Exactly what lease_demo.py's acquire writes (numbers as the SDK sends them).
    put_demo_item(
        &c,
        "orders-us-east",
        "worker-a",
        now - 1_000,
        7,
        now - 31_000,
    )
    .await;
    let got = ops::acquire(&c, TABLE, "orders-us-east", "rust", LEASE_MS, now, 200)
        .await
        .unwrap();
    assert!(
        matches!(got, Outcome::Done(ref i) if i.fence_token == Some(8) && i.checkpoint.is_none()),
        "{got:?}"
    );

    // The demo's renew condition (owner, token, unexpired) holds on what the worker wrote.
    let demo_renew = c
        .update_item()
        .table_name(TABLE)
        .key("stream_id", AttributeValue::S("orders-us-east".into()))
        .update_expression("SET lease_expires_at = :expires, updated_at = :now")
        .condition_expression(
            "owner_id = :owner AND fence_token = :token AND lease_expires_at >= :now",
        )
        .expression_attribute_values(":owner", AttributeValue::S("rust".into()))
        .expression_attribute_values(":token", AttributeValue::N("8".into()))
        .expression_attribute_values(":expires", AttributeValue::N((now + 30_000).to_string()))
        .expression_attribute_values(":now", AttributeValue::N((now + 10).to_string()))
        .send()
        .await;
    assert!(demo_renew.is_ok(), "{demo_renew:?}");

    // No item, no lease: acquire never creates streams.
    let missing = ops::acquire(&c, TABLE, "nope", "rust", LEASE_MS, now, 200)
        .await
        .unwrap();
    assert!(matches!(missing, Outcome::Refused { .. }));
    assert!(lease_table::get(&c, TABLE, "nope").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_signal_counts_releases_tracks_draining_owners_and_is_never_a_stream() {
    let _serial = SERIAL.lock().await;
    // `__odd` is a real stream: only the exact reserved ids are not streams.
    let ddb = dynamo(&["s", "__odd"]).await;
    let c = ddb.client();

    // No item yet: generation 0, nobody draining.
    let signal = ops::fleet_read(&c, TABLE).await.unwrap();
    assert_eq!((signal.generation, signal.draining.len()), (0, 0));

    ops::fleet_bump(&c, TABLE, "a", Some(true), 1)
        .await
        .unwrap();
    ops::fleet_bump(&c, TABLE, "b", Some(true), 2)
        .await
        .unwrap();
    ops::fleet_bump(&c, TABLE, "a", None, 3).await.unwrap();
    let signal = ops::fleet_read(&c, TABLE).await.unwrap();
    let mut draining = signal.draining.clone();
    draining.sort();
    assert_eq!(
        (signal.generation, draining),
        (3, vec!["a".into(), "b".into()])
    );

    // Forgetting removes without bumping; removing an absent owner is harmless.
    ops::fleet_forget(&c, TABLE, &["a".into(), "zz".into()], 4)
        .await
        .unwrap();
    ops::fleet_bump(&c, TABLE, "b", Some(false), 5)
        .await
        .unwrap();
    let signal = ops::fleet_read(&c, TABLE).await.unwrap();
    assert_eq!((signal.generation, signal.draining.len()), (4, 0));

    // The reserved item is not a stream: neither the shared scan nor a worker acquires it.
    let items = lease_table::scan_all(&c, TABLE).await.unwrap();
    let ids: Vec<&str> = items.iter().map(|i| i.stream_id.as_str()).collect();
    assert_eq!(ids, ["__odd", "s"]);
    let odd = ops::acquire(&c, TABLE, "__odd", "w", LEASE_MS, 6, 200)
        .await
        .unwrap();
    assert!(matches!(odd, Outcome::Done(_)), "{odd:?}");

    // Nor to a tool that reads the table the source design's way: lease_demo.py's acquire
    // (free when no owner, expired, or its own) is refused on it, at any time.
    let now = i64::MAX - 1;
    let demo_acquire = c
        .update_item()
        .table_name(TABLE)
        .key(
            "stream_id",
            AttributeValue::S(lease_table::FLEET_ITEM.into()),
        )
        .update_expression(
            "SET owner_id = :owner, lease_expires_at = :expires, \
             fence_token = if_not_exists(fence_token, :zero) + :one, updated_at = :now",
        )
        .condition_expression(
            "attribute_not_exists(owner_id) OR lease_expires_at < :now OR owner_id = :owner",
        )
        .expression_attribute_values(":owner", AttributeValue::S("demo".into()))
        .expression_attribute_values(":expires", AttributeValue::N(now.to_string()))
        .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
        .expression_attribute_values(":zero", AttributeValue::N("0".into()))
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await;
    let refused = demo_acquire
        .as_ref()
        .err()
        .and_then(|e| e.as_service_error())
        .is_some_and(|e| e.is_conditional_check_failed_exception());
    assert!(
        refused,
        "the seed's acquire took the fleet item: {demo_acquire:?}"
    );
    let metrics = std::sync::Arc::new(lease_worker::metrics::Metrics::new());
    let table = lease_worker::lease::LeaseTable::new(c.clone(), TABLE, "w", metrics);
    let view = table
        .scan(std::time::Duration::from_secs(5), true, None)
        .await
        .unwrap();
    let mut ids: Vec<&str> = view.items.iter().map(|i| i.stream_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["__odd", "s"]);
    assert_eq!(
        table
            .fleet_read(std::time::Duration::from_secs(5))
            .await
            .unwrap()
            .generation,
        4
    );
}

/// The worker's acquire (`acquire_observed`) never trusts wall-clock expiry: a lease written by
/// a worker whose clock runs 4 s behind looks expired to everyone the moment it lands, and the
/// design's condition lets any worker take it (a zombie by skew); the observed condition refuses
/// unless the taker saw that exact lease unchanged (its own, skew-free judgement of death).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observed_acquire_ignores_wall_clock_expiry_and_takes_only_what_it_saw() {
    let _serial = SERIAL.lock().await;
    let ddb = dynamo(&["s"]).await;
    let c = ddb.client();
    let real = 10_000_000;
    // a's clock runs 4 s behind: its lease "expires" 1 s before the real now.
    let behind = real - 4_000;
    let Outcome::Done(a) =
        ops::acquire_observed(&c, TABLE, "s", "a", "i-a", LEASE_MS, behind, None)
            .await
            .unwrap()
    else {
        panic!("a free item is acquired")
    };
    assert_eq!(a.lease_expires_at, Some(real - 1_000));

    // The design's condition, on b's (correct) clock, would take it at once.
    // The observed one, with nothing seen (b thought it free): refused, and told the holder.
    match ops::acquire_observed(&c, TABLE, "s", "b", "i-b", LEASE_MS, real, None)
        .await
        .unwrap()
    {
        Outcome::Refused { current: Some(cur) } => assert_eq!(cur.owner_id.as_deref(), Some("a")),
        other => panic!("{other:?}"),
    }
    // A stale observation (a renewed since) is refused too.
    let stale = ops::Seen {
        owner_id: "a".into(),
        fence_token: 1,
        lease_expires_at: real - 2_000,
    };
    assert!(matches!(
        ops::acquire_observed(&c, TABLE, "s", "b", "i-b", LEASE_MS, real, Some(&stale))
            .await
            .unwrap(),
        Outcome::Refused { .. }
    ));
    // The exact lease b saw unchanged for long enough: taken, fence bumped.
    let seen = ops::Seen {
        owner_id: "a".into(),
        fence_token: 1,
        lease_expires_at: real - 1_000,
    };
    let Outcome::Done(b) =
        ops::acquire_observed(&c, TABLE, "s", "b", "i-b", LEASE_MS, real, Some(&seen))
            .await
            .unwrap()
    else {
        panic!("the item was exactly as seen")
    };
    assert_eq!((b.owner_id.as_deref(), b.fence_token), (Some("b"), Some(2)));
    // Its own item (the same owner id and instance) is always re-acquirable.
    assert!(matches!(
        ops::acquire_observed(&c, TABLE, "s", "b", "i-b", LEASE_MS, real + 10, None)
            .await
            .unwrap(),
        Outcome::Done(_)
    ));
    // Another process under the same owner id (another instance) is not "ours": refused, unless
    // it saw that exact lease unchanged (the previous run of a restarted worker, judged dead).
    let held = item(&c, "s").await;
    assert_eq!(held.owner_instance.as_deref(), Some("i-b"));
    assert!(matches!(
        ops::acquire_observed(&c, TABLE, "s", "b", "i-other", LEASE_MS, real + 20, None)
            .await
            .unwrap(),
        Outcome::Refused { .. }
    ));
    let seen = ops::Seen {
        owner_id: "b".into(),
        fence_token: held.fence_token.unwrap(),
        lease_expires_at: held.lease_expires_at.unwrap(),
    };
    let Outcome::Done(taken) = ops::acquire_observed(
        &c,
        TABLE,
        "s",
        "b",
        "i-other",
        LEASE_MS,
        real + 30,
        Some(&seen),
    )
    .await
    .unwrap() else {
        panic!("the item was exactly as seen")
    };
    assert_eq!(taken.owner_instance.as_deref(), Some("i-other"));
    // A release clears the instance with the owner.
    let Outcome::Done(()) = ops::release(
        &c,
        TABLE,
        "s",
        Holder {
            owner_id: "b",
            fence_token: taken.fence_token.unwrap(),
        },
        None,
        real + 40,
    )
    .await
    .unwrap() else {
        panic!("released")
    };
    assert_eq!(item(&c, "s").await.owner_instance, None);
}
