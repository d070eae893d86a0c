//! Unit tests of the supervisor core ([`Supervision`]) on hand-made views: another process
//! under this worker's id, a stream lost unconfirmed.

use super::sim::{settings, LEASE_MS, SKEW_MS};
use super::*;
use lease_table::LeaseItem;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// Another process under this worker's own id (another `owner_instance`) is another owner: its
/// live leases are left alone and reported; once dead they are taken by compare-and-swap on
/// what was seen, since "already ours" does not cover another instance.
#[test]
fn another_instance_under_my_id_is_another_owner() {
    let t0 = Instant::now();
    let base = 1_800_000_000_000;
    let held = |stream: &str, expires: i64| LeaseItem {
        stream_id: stream.into(),
        owner_id: Some("dup".into()),
        owner_instance: Some("theirs".into()),
        fence_token: Some(1),
        lease_expires_at: Some(expires),
        ..LeaseItem::default()
    };
    let free = LeaseItem {
        stream_id: "s-3".into(),
        ..LeaseItem::default()
    };
    let mut core = Supervision::new(settings(), "dup").with_instance("mine");
    let items = vec![
        held("s-1", base + LEASE_MS),
        held("s-2", base + LEASE_MS),
        free,
    ];
    core.on_scan(items, Vec::new(), Duration::from_millis(5), t0);
    let round = core.round(&HashMap::new(), base, t0);
    let ids: Vec<&str> = round.acquire.iter().map(|a| a.stream_id.as_str()).collect();
    assert_eq!(
        ids,
        ["s-3"],
        "the other instance's live leases are not ours"
    );
    assert_eq!(round.gauges.duplicate_owners, 1);
    assert_eq!(round.gauges.live_owners, 2);

    // Its leases lapse and stay unchanged: taken, each by a compare-and-swap on what was seen.
    let later = t0 + Duration::from_millis(5_000);
    let round = core.round(&HashMap::new(), base + 5_000, later);
    for stream in ["s-1", "s-2"] {
        let attempt = round
            .acquire
            .iter()
            .find(|a| a.stream_id == stream)
            .unwrap_or_else(|| panic!("{stream} taken once dead: {round:?}"));
        let seen = attempt.seen.as_ref().expect("a compare-and-swap");
        assert_eq!((seen.owner_id.as_str(), seen.fence_token), ("dup", 1));
    }
    assert_eq!(round.gauges.duplicate_owners, 0);

    // Without an instance of its own (an older worker), items under its id are its own.
    let mut old = Supervision::new(settings(), "dup");
    old.on_scan(
        vec![held("s-1", base + LEASE_MS)],
        Vec::new(),
        Duration::from_millis(5),
        t0,
    );
    let round = old.round(&HashMap::new(), base, t0);
    assert_eq!(round.acquire.len(), 1);
    assert_eq!(round.acquire[0].seen, None);
}

/// A stream this worker lost (or whose acquire went unanswered) is not tried again while the
/// table still shows it as the worker left it: a held write may yet land. Once the lease + skew
/// have passed, or once the item shows a higher fence (the unanswered acquire landed, or someone
/// else took it), it is a candidate again.
#[test]
fn a_stream_lost_unconfirmed_is_held_back_until_its_lease_has_passed() {
    let t0 = Instant::now();
    let base = 1_000_000;
    let mine = |fence: u64| LeaseItem {
        stream_id: "s-1".into(),
        owner_id: Some("me".into()),
        owner_instance: Some("i".into()),
        fence_token: Some(fence),
        lease_expires_at: Some(base + LEASE_MS),
        ..LeaseItem::default()
    };
    let mut core = Supervision::new(settings(), "me").with_instance("i");
    core.on_scan(vec![mine(4)], Vec::new(), Duration::from_millis(5), t0);
    core.on_unconfirmed("s-1", t0);
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let round = core.round(&HashMap::new(), base + 100, at(100));
    assert!(round.acquire.is_empty(), "held back: {round:?}");
    let round = core.round(&HashMap::new(), base + 3_000, at(3_000));
    assert!(
        round.acquire.is_empty(),
        "still inside lease + skew: {round:?}"
    );
    let round = core.round(
        &HashMap::new(),
        base + (LEASE_MS + SKEW_MS) + 1,
        at((LEASE_MS + SKEW_MS) as u64 + 1),
    );
    assert_eq!(
        round.acquire.len(),
        1,
        "taken back once its lease has passed"
    );

    // An unanswered acquire that landed: the next scan shows a higher fence; taken at once.
    let mut core = Supervision::new(settings(), "me").with_instance("i");
    core.on_scan(vec![mine(4)], Vec::new(), Duration::from_millis(5), t0);
    core.on_unconfirmed("s-1", t0);
    core.on_scan(vec![mine(5)], Vec::new(), Duration::from_millis(5), at(200));
    let round = core.round(&HashMap::new(), base + 200, at(200));
    assert_eq!(round.acquire.len(), 1, "landed: taken back at once");
}
