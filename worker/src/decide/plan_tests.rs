//! Unit and property tests of the acquisition plan (`plan`), on plain data.

use super::*;
use lease_table::LeaseItem;
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

fn item(id: &str, owner: Option<&str>, expires: Option<i64>) -> LeaseItem {
    LeaseItem {
        stream_id: id.to_string(),
        owner_id: owner.map(str::to_string),
        lease_expires_at: expires,
        ..LeaseItem::default()
    }
}

fn limits(max: usize) -> PlanLimits {
    PlanLimits {
        max_streams: max,
        per_round: 8,
        skew_ms: 200,
        quiet_ms: 0,
        stale_ms: i64::MAX,
    }
}

#[test]
fn free_and_expired_streams_are_candidates_held_ones_are_watched() {
    let now = 100_000;
    let items = vec![
        item("free", None, None),
        item("expired", Some("dead"), Some(now - 1_000)),
        item("skewed", Some("b"), Some(now - 100)), // within the skew margin: still held
        item("held", Some("b"), Some(now + 5_000)),
        item("mine-stale", Some("me"), Some(now + 5_000)),
    ];
    let plan = plain(&items, &HashSet::new(), now);
    let mut acquire = plan.acquire.clone();
    acquire.sort();
    assert_eq!(acquire, ["expired", "free", "mine-stale"]);
    let mut watch = plan.watch.clone();
    watch.sort();
    assert_eq!(
        watch,
        [
            ("held".to_string(), now + 5_201),
            ("skewed".to_string(), now + 101)
        ]
    );
    assert_eq!(plan.live_owners, 2, "b and me; `dead` let a lease lapse");
    assert_eq!(plan.target, 3);
}

#[test]
fn an_owner_with_a_lapsed_lease_is_not_counted_live() {
    let now = 50_000;
    let items = vec![
        item("a", Some("x"), Some(now - 5_000)),
        item("b", Some("x"), Some(now + 5_000)),
        item("c", Some("y"), Some(now + 5_000)),
        item("d", Some("y"), Some(now + 5_000)),
    ];
    let plan = plain(&items, &HashSet::new(), now);
    assert_eq!(plan.live_owners, 2);
    assert_eq!(plan.acquire, ["a"]);
}

#[test]
fn a_draining_owner_is_not_counted_live_and_its_released_streams_are_taken() {
    let now = 50_000;
    // x is draining: it released a and b already and still holds c and d for a moment.
    let items = vec![
        item("a", None, None),
        item("b", None, None),
        item("c", Some("x"), Some(now + 5_000)),
        item("d", Some("x"), Some(now + 5_000)),
    ];
    let draining: HashSet<String> = ["x".to_string()].into();
    let plan = plan(
        &items,
        &[],
        &draining,
        "me",
        &HashSet::new(),
        &HashSet::new(),
        &Unchanged::new(),
        now,
        limits(usize::MAX),
        None,
    );
    // Alone with x gone, the whole table is this worker's share: both free streams now, and
    // x's held ones are watched, never bid on.
    assert_eq!(plan.live_owners, 1);
    assert_eq!(plan.target, 4);
    let mut acquire = plan.acquire.clone();
    acquire.sort();
    assert_eq!(acquire, ["a", "b"]);
    assert_eq!(plan.watch.len(), 2);
    assert_eq!(plan.bid, None);

    // Without the signal x counts as live: half the table each.
    let counted = plan_without_draining(&items, now);
    assert_eq!(counted.live_owners, 2);
    assert_eq!(counted.target, 2);
}

#[test]
fn a_lapsed_owner_is_reported_and_stays_out_while_remembered() {
    let now = 50_000;
    // x died: one lease lapsed (taken by me since), two still run out. y and me hold 2 each.
    let mut items = vec![
        item("x1", Some("x"), Some(now - 1_000)),
        item("x2", Some("x"), Some(now + 2_000)),
        item("x3", Some("x"), Some(now + 2_500)),
        item("y1", Some("y"), Some(now + 5_000)),
        item("y2", Some("y"), Some(now + 5_000)),
        item("m1", Some("me"), Some(now + 5_000)),
        item("m2", Some("me"), Some(now + 5_000)),
    ];
    let owned: HashSet<String> = ["m1".to_string(), "m2".to_string()].into();
    let first = plain(&items, &owned, now);
    assert_eq!(first.lapsed, ["x"]);
    assert_eq!(first.live_owners, 2, "y and me");
    assert_eq!(first.target, 4);
    assert_eq!(first.acquire, ["x1"]);

    // x1 taken: the view no longer shows a lapsed lease of x. Forgotten, x looks live again
    // and the share shrinks (what made takeovers shed and churn); remembered, it does not.
    items[0] = item("x1", Some("me"), Some(now + 10_000));
    let owned: HashSet<String> = ["m1", "m2", "x1"].iter().map(|s| s.to_string()).collect();
    let forgot = plain(&items, &owned, now);
    assert_eq!(forgot.live_owners, 3);
    assert_eq!(forgot.target, 3);
    let leaving: HashSet<String> = ["x".to_string()].into();
    let kept = plan(
        &items,
        &[],
        &leaving,
        "me",
        &owned,
        &HashSet::new(),
        &Unchanged::new(),
        now,
        limits(usize::MAX),
        None,
    );
    assert_eq!(kept.live_owners, 2);
    assert_eq!(kept.target, 4);
    assert!(kept.shed.is_empty());
    assert_eq!(kept.bid, None, "a leaving owner is never bid on");
}

#[test]
fn a_bid_from_an_owner_whose_lease_lapsed_counts_for_nothing() {
    let now = 50_000;
    // x bid on one of my streams, then died: its lease lapsed.
    let items = vec![
        item("x1", Some("x"), Some(now - 1_000)),
        item("m1", Some("me"), Some(now + 5_000)),
        item("m2", Some("me"), Some(now + 5_000)),
        item("m3", Some("me"), Some(now + 5_000)),
    ];
    let owned: HashSet<String> = ["m1", "m2", "m3"].iter().map(|s| s.to_string()).collect();
    let p = plan(
        &items,
        &[bid("m1", "x")],
        &HashSet::new(),
        "me",
        &owned,
        &HashSet::new(),
        &Unchanged::new(),
        now,
        limits(usize::MAX),
        None,
    );
    assert_eq!(p.live_owners, 1, "x's bid does not make it live");
    assert_eq!(p.target, 4);
    assert!(p.shed.is_empty() && p.honoured.is_empty(), "{p:?}");
    assert_eq!(p.acquire, ["x1"]);
}

/// A plan by "me" with no bids, nobody leaving and no cap.
fn plain(items: &[LeaseItem], owned: &HashSet<String>, now: i64) -> Plan {
    plan(
        items,
        &[],
        &HashSet::new(),
        "me",
        owned,
        &HashSet::new(),
        &Unchanged::new(),
        now,
        limits(usize::MAX),
        None,
    )
}

fn plan_without_draining(items: &[LeaseItem], now: i64) -> Plan {
    plain(items, &HashSet::new(), now)
}

#[test]
fn excess_above_fair_share_plus_one_is_shed() {
    let now = 0;
    let mut items: Vec<LeaseItem> = (0..10)
        .map(|i| item(&format!("s{i}"), Some("me"), Some(now + 9_000)))
        .collect();
    items.push(item("t0", Some("other"), Some(now + 9_000)));
    let owned: HashSet<String> = (0..10).map(|i| format!("s{i}")).collect();
    // 11 streams, 2 live owners: target 6, owned 10 → shed 4.
    let plan = plain(&items, &owned, now);
    assert_eq!(plan.target, 6);
    assert_eq!(plan.shed.len(), 4);
    assert!(plan.shed.iter().all(|s| owned.contains(s)));
    assert!(plan.acquire.is_empty());
}

fn bid(stream: &str, bidder: &str) -> Bid {
    Bid {
        stream_id: stream.to_string(),
        bidder: bidder.to_string(),
        at: 0,
    }
}

#[test]
fn a_bid_from_a_worker_two_below_is_answered_and_only_then() {
    let now = 0;
    // 7 streams, me 3, b 1, c 3 → target ⌈7/3⌉ = 3: the excess rule sheds nothing.
    let mut items: Vec<LeaseItem> = (0..3)
        .map(|i| item(&format!("s{i}"), Some("me"), Some(now + 9_000)))
        .collect();
    items.push(item("t0", Some("b"), Some(now + 9_000)));
    items.extend((0..3).map(|i| item(&format!("u{i}"), Some("c"), Some(now + 9_000))));
    let owned: HashSet<String> = (0..3).map(|i| format!("s{i}")).collect();
    let run = |items: &[LeaseItem], bids: &[Bid]| {
        plan(
            items,
            bids,
            &HashSet::new(),
            "me",
            &owned,
            &HashSet::new(),
            &Unchanged::new(),
            now,
            limits(usize::MAX),
            None,
        )
    };
    let quiet = run(&items, &[]);
    assert_eq!(quiet.target, 3);
    assert!(quiet.shed.is_empty());

    // b (1) bids on s1: me (3) holds two more, so it hands s1 over.
    let answered = run(&items, &[bid("s1", "b")]);
    assert_eq!(answered.shed, ["s1"]);
    assert_eq!(answered.honoured, ["s1"]);

    // A bid on a stream that is not mine, or from a worker only one below, is not answered.
    assert!(run(&items, &[bid("u0", "b")]).shed.is_empty());
    items.push(item("t1", Some("b"), Some(now + 9_000)));
    let close = run(&items, &[bid("s1", "b")]);
    assert!(close.shed.is_empty(), "{close:?}");
}

/// A stream released in answer to a bid belongs to its bidder: a third worker with room leaves
/// it alone (else the bidder stays starved, bids again, and one stream circles the fleet), and
/// the bidder takes it at once, ahead of the herd order.
#[test]
fn a_stream_handed_over_for_a_bid_goes_to_the_bidder() {
    let now = 10_000;
    // Released by a moments ago (updated_at = now - 100), after b bid on it (at = now - 500).
    let mut released = item("x", None, None);
    released.updated_at = Some(now - 100);
    let mut items = vec![released];
    items.extend((0..3).map(|i| item(&format!("b{i}"), Some("b"), Some(now + 9_000))));
    items.extend((0..3).map(|i| item(&format!("c{i}"), Some("c"), Some(now + 9_000))));
    let fresh_bid = Bid {
        at: now - 500,
        ..bid("x", "b")
    };
    let run = |me: &str, bids: &[Bid]| {
        let owned: HashSet<String> = items
            .iter()
            .filter(|i| i.owner_id.as_deref() == Some(me))
            .map(|i| i.stream_id.clone())
            .collect();
        plan(
            &items,
            bids,
            &HashSet::new(),
            me,
            &owned,
            &HashSet::new(),
            &Unchanged::new(),
            now,
            limits(usize::MAX),
            None,
        )
    };
    // "me" holds nothing: it would take the free stream, but it is b's.
    let third = run("me", std::slice::from_ref(&fresh_bid));
    assert!(!third.acquire.contains(&"x".to_string()), "{third:?}");
    // b, the bidder, takes it now.
    let bidder = run("b", std::slice::from_ref(&fresh_bid));
    assert_eq!(bidder.acquire, ["x"]);
    // With no bid on it, the release is contended by herd rank as usual (me comes early enough).
    assert!(run("me", &[]).acquire.contains(&"x".to_string()));
    // A bid placed after the release was not answered by it: no reservation.
    let later = Bid {
        at: now - 50,
        ..bid("x", "b")
    };
    assert!(run("me", &[later]).acquire.contains(&"x".to_string()));
    // A bidder that left (draining) reserves nothing.
    let leaving: HashSet<String> = ["b".to_string()].into();
    let p = plan(
        &items,
        &[fresh_bid],
        &leaving,
        "me",
        &HashSet::new(),
        &HashSet::new(),
        &Unchanged::new(),
        now,
        limits(usize::MAX),
        None,
    );
    assert!(p.acquire.contains(&"x".to_string()), "{p:?}");
}

#[test]
fn a_worker_bids_only_on_an_owner_two_above_it() {
    let now = 0;
    // 7 streams: a holds 3, b holds 3, me holds 1 → target ⌈7/3⌉ = 3, nothing free.
    let mut items = vec![item("m0", Some("me"), Some(now + 9_000))];
    items.extend((0..3).map(|i| item(&format!("a{i}"), Some("a"), Some(now + 9_000))));
    items.extend((0..3).map(|i| item(&format!("b{i}"), Some("b"), Some(now + 9_000))));
    let owned: HashSet<String> = ["m0".to_string()].into();
    let p = plain(&items, &owned, now);
    let target = p.bid.expect("me (1) is two below a and b (3)");
    assert!(
        target.starts_with('a'),
        "ties go to the lower owner name: {target}"
    );
    // With two of its own, nobody holds two more: no bid.
    items.push(item("m1", Some("me"), Some(now + 9_000)));
    let owned: HashSet<String> = ["m0".to_string(), "m1".to_string()].into();
    let p = plain(&items, &owned, now);
    assert_eq!(p.bid, None);
}

#[test]
fn the_next_watch_is_the_earliest_future_expiry_of_others() {
    let now = 10_000;
    let items = vec![
        item("mine", Some("me"), Some(now + 100)),
        item("gone", Some("a"), Some(now - 5_000)),
        item("soon", Some("a"), Some(now + 700)),
        item("late", Some("b"), Some(now + 3_000)),
        item("free", None, None),
        item("run", Some("x"), Some(now + 50)),
    ];
    let owned: HashSet<String> = ["run".to_string()].into();
    assert_eq!(
        next_watch(
            &items,
            "me",
            &owned,
            owned.len(),
            &[],
            &Unchanged::new(),
            now,
            limits(usize::MAX)
        ),
        Some(now + 901)
    );
    assert_eq!(
        next_watch(
            &items,
            "me",
            &owned,
            owned.len(),
            &[],
            &Unchanged::new(),
            now + 901,
            limits(usize::MAX)
        ),
        Some(now + 3_201)
    );
    assert_eq!(
        next_watch(
            &items,
            "me",
            &owned,
            owned.len(),
            &[],
            &Unchanged::new(),
            now + 3_201,
            limits(usize::MAX)
        ),
        None
    );
}

/// A stream released moments ago wakes a worker with room at its own place in the stream's
/// line, not only at the next scan: when the workers ahead fill their room elsewhere (their
/// views, read milliseconds apart during a drain, line streams up differently), it is taken
/// after the herd delay (it waited 1,173 ms for an unrelated round at lease 30 s, 2026-12-06).
#[test]
fn a_just_released_stream_wakes_a_worker_with_room_at_its_place() {
    let now = 100_000;
    let others = ["a", "b", "c", "d"];
    // A stream for which `me` is fourth in line (place 3) among five workers with room.
    let stream = (0..1_000)
        .map(|i| format!("s-{i}"))
        .find(|s| herd_position("me", &others, s) == 3)
        .expect("some stream ranks me fourth");
    let released = now - 10;
    let mut items = vec![LeaseItem {
        stream_id: stream.clone(),
        updated_at: Some(released),
        ..LeaseItem::default()
    }];
    for (i, owner) in others.iter().enumerate() {
        items.push(item(&format!("held-{i}"), Some(owner), Some(now + 60_000)));
    }
    // Free for a while (not just released): 15 streams over 5 workers, a share of 3, so
    // every worker has room.
    for i in 0..10 {
        items.push(item(&format!("old-{i}"), None, None));
    }
    let contenders: Vec<String> = others.iter().map(|o| o.to_string()).collect();
    let watch = |items: &[LeaseItem], owned: &HashSet<String>, at: i64| {
        next_watch(
            items,
            "me",
            owned,
            owned.len(),
            &contenders,
            &Unchanged::new(),
            at,
            limits(usize::MAX),
        )
    };
    let wake = released + herd_delay_ms(3);
    assert_eq!(wake, released + HERD_JITTER_MS + 2 * HERD_STEP_MS);
    // The held streams' expiry (a minute away) comes later: the release is the next watch.
    assert_eq!(watch(&items, &HashSet::new(), now), Some(wake));
    // Once that moment has passed, the release wakes nobody again.
    assert_eq!(
        watch(&items, &HashSet::new(), wake),
        Some(now + 60_000 + 201)
    );
    // A worker already at its share (18 streams over 5 workers: 4) has no place in the line.
    let owned: HashSet<String> = (1..=4).map(|i| format!("m-{i}")).collect();
    for id in &owned {
        items.push(item(id, Some("me"), Some(now + 60_000)));
    }
    assert_eq!(
        watch(&items, &owned, now),
        Some(now + 60_000 + 201),
        "a full worker does not wake for the release, only for the held leases' expiry"
    );
}

fn arb_items() -> impl Strategy<Value = Vec<LeaseItem>> {
    let owners = prop::sample::select(vec!["a", "b", "c", "me"]);
    prop::collection::vec(
        (
            prop::option::of(owners),
            prop::option::of(-10_000i64..10_000),
        ),
        0..40,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (owner, expires))| item(&format!("s{i:03}"), owner, expires))
            .collect()
    })
}

proptest! {
    /// A plan never exceeds the fair share, the cap or the per-round limit, never targets a stream
    /// held by another live owner, and sheds only above fair share + 1.
    #[test]
    fn plans_respect_fair_share_and_leases(
        items in arb_items(),
        owned_mask in prop::collection::vec(any::<bool>(), 40),
        max in 1usize..30,
    ) {
        let now = 0i64;
        let owned: HashSet<String> = items
            .iter()
            .zip(&owned_mask)
            .filter(|(i, m)| **m && i.owner_id.as_deref() == Some("me"))
            .map(|(i, _)| i.stream_id.clone())
            .collect();
        let l = limits(max);
        let p = plan(&items, &[], &HashSet::new(), "me", &owned, &HashSet::new(), &Unchanged::new(), now, l, None);
        prop_assert!(p.target <= max);
        prop_assert!(p.acquire.len() <= l.per_round);
        prop_assert!(owned.len() + p.acquire.len() <= p.target.max(owned.len()));
        for id in &p.acquire {
            let it = items.iter().find(|i| &i.stream_id == id).unwrap();
            prop_assert!(!owned.contains(id));
            let free = it.owner_id.is_none()
                || it.owner_id.as_deref() == Some("me")
                || it.lease_expires_at.is_some_and(|t| t < now - l.skew_ms);
            prop_assert!(free, "{:?} is held", it);
        }
        if !p.shed.is_empty() {
            prop_assert!(owned.len() > p.target + 1);
            prop_assert!(p.shed.iter().all(|s| owned.contains(s)));
        }
    }

    /// Workers planning in turn over one table (a cold start, then a churn of rounds, with
    /// bids written on items and answered by their holders) settle: every stream owned, counts
    /// within one of each other, nobody above ⌈streams / workers⌉ + 1, and then nothing moves
    /// and nobody bids any more.
    #[test]
    fn cold_start_spreads_over_workers(workers in 1usize..12, streams in 0usize..120) {
        let names: Vec<String> = (0..workers).map(|w| format!("w{w}")).collect();
        let mut table: Vec<LeaseItem> = (0..streams).map(|s| item(&format!("s{s:03}"), None, None)).collect();
        let now = 1_000_000;
        // One bid slot per item, as in the table.
        let mut bids: HashMap<String, Bid> = HashMap::new();
        let rounds = 200;
        let mut last_change = 0;
        let mut last_bid = 0;
        for round in 0..rounds {
            for me in &names {
                let owned: HashSet<String> = table
                    .iter()
                    .filter(|i| i.owner_id.as_deref() == Some(me.as_str()))
                    .map(|i| i.stream_id.clone())
                    .collect();
                let others: Vec<Bid> = bids.values().filter(|b| b.bidder != *me).cloned().collect();
                let p = plan(&table, &others, &HashSet::new(), me, &owned, &HashSet::new(), &Unchanged::new(), now, limits(usize::MAX), None);
                prop_assert!(p.honoured.iter().all(|s| p.shed.contains(s)));
                if let Some(stream_id) = p.bid {
                    last_bid = round;
                    bids.insert(stream_id.clone(), Bid { stream_id, bidder: me.clone(), at: now });
                }
                for id in p.acquire {
                    let it = table.iter_mut().find(|i| i.stream_id == id).unwrap();
                    it.owner_id = Some(me.clone());
                    it.lease_expires_at = Some(now + 10_000);
                    last_change = round;
                }
                for id in p.shed {
                    let it = table.iter_mut().find(|i| i.stream_id == id).unwrap();
                    it.owner_id = None;
                    it.lease_expires_at = None;
                    last_change = round;
                }
            }
        }
        prop_assert!(last_change < rounds - 10, "ownership still moving in round {last_change}");
        prop_assert!(last_bid < rounds - 10, "still bidding in round {last_bid}");
        prop_assert!(table.iter().all(|i| i.owner_id.is_some()), "a stream was left unowned");
        let counts: Vec<usize> = names
            .iter()
            .map(|me| table.iter().filter(|i| i.owner_id.as_deref() == Some(me.as_str())).count())
            .collect();
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        prop_assert!(hi - lo <= 1, "counts {counts:?} spread more than one");
        let fair = streams.div_ceil(workers);
        for me in &names {
            let n = table.iter().filter(|i| i.owner_id.as_deref() == Some(me.as_str())).count();
            prop_assert!(n <= fair + 1, "{me} owns {n}, fair share {fair}");
        }
    }
}
