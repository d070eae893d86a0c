//! When the fleet has settled: the warm-up ends only once every stream is held, nobody's bid
//! is open, and no stream changed hands for a while — otherwise the balancing still under way
//! shows up as ownership changes in a run that injected nothing. Pure: fed consistent scans
//! and the two clocks by the caller.

use std::collections::HashMap;

use super::Row;

/// Tracks ownership across consistent scans.
#[derive(Debug, Default)]
pub struct Stability {
    /// (owner, fence) of each stream at the last scan.
    owners: HashMap<String, (Option<String>, Option<u64>)>,
    /// Run time (ms) of the last scan that saw a change.
    changed_ms: u64,
    /// Per stream: the `lease_expires_at` last seen, and the run time (ms) at which a scan first
    /// saw it move (`None` until one did).
    renewals: HashMap<String, (Option<i64>, Option<u64>)>,
}

/// Why the fleet is not settled yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsettled {
    /// Streams without a valid lease.
    Unowned(Vec<String>),
    /// Streams carrying a fresh bid from a worker other than the owner.
    OpenBids(Vec<String>),
    /// Ownership changed `ago_ms` ago, less than the window.
    Recent { ago_ms: u64 },
}

impl Stability {
    /// Takes one scan made at run time `t_ms` and wall time `wall_ms` (the table's clock); Ok
    /// when every stream is held, no bid younger than `lease_ms` is open and nothing changed
    /// hands for `window_ms`.
    pub fn observe(
        &mut self,
        rows: &[Row],
        t_ms: u64,
        wall_ms: i64,
        lease_ms: u64,
        window_ms: u64,
    ) -> Result<(), Unsettled> {
        let mut changed = self.owners.len() != rows.len();
        for row in rows {
            let now = (row.item.owner_id.clone(), row.item.fence_token);
            match self.owners.get(&row.item.stream_id) {
                Some(before) if *before == now => {}
                _ => {
                    changed = true;
                    self.owners.insert(row.item.stream_id.clone(), now);
                }
            }
        }
        if changed {
            self.changed_ms = t_ms;
        }
        for row in rows {
            let expires = row.item.lease_expires_at;
            let seen = self
                .renewals
                .entry(row.item.stream_id.clone())
                .or_insert((expires, None));
            if seen.0 != expires {
                *seen = (expires, Some(t_ms));
            }
        }
        // Held: an owner whose lease the table's clock calls unexpired, or whose expiry this
        // harness saw move within the last lease on its own clock. A worker whose wall clock runs
        // behind writes expiries already past on everyone else's: its renewals still show it
        // alive, as they do to a skew-tolerant worker (issue #17).
        let renewed = |row: &Row| {
            self.renewals
                .get(&row.item.stream_id)
                .and_then(|(_, at)| *at)
                .is_some_and(|at| t_ms.saturating_sub(at) < lease_ms)
        };
        let unowned: Vec<String> = rows
            .iter()
            .filter(|r| !(r.item.is_held_at(wall_ms) || r.item.owner_id.is_some() && renewed(r)))
            .map(|r| r.item.stream_id.clone())
            .collect();
        if !unowned.is_empty() {
            return Err(Unsettled::Unowned(unowned));
        }
        let fresh = wall_ms - lease_ms as i64;
        let bids: Vec<String> = rows
            .iter()
            .filter(|r| {
                r.bid.as_ref().is_some_and(|(bidder, at)| {
                    *at >= fresh && r.item.owner_id.as_deref() != Some(bidder.as_str())
                })
            })
            .map(|r| r.item.stream_id.clone())
            .collect();
        if !bids.is_empty() {
            return Err(Unsettled::OpenBids(bids));
        }
        let ago_ms = t_ms.saturating_sub(self.changed_ms);
        if changed || ago_ms < window_ms {
            return Err(Unsettled::Recent { ago_ms });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_table::LeaseItem;

    fn row(id: &str, owner: &str, fence: u64, bid: Option<(&str, i64)>) -> Row {
        Row {
            item: LeaseItem {
                stream_id: id.into(),
                owner_id: Some(owner.into()),
                fence_token: Some(fence),
                lease_expires_at: Some(10_000),
                ..LeaseItem::default()
            },
            bid: bid.map(|(b, at)| (b.to_string(), at)),
        }
    }

    #[test]
    fn settled_only_after_a_quiet_window_with_everything_held_and_no_open_bid() {
        let mut s = Stability::default();
        let a = [row("a", "w1", 1, None), row("b", "w2", 1, None)];
        assert_eq!(
            s.observe(&a, 0, 5_000, 3_000, 3_000),
            Err(Unsettled::Recent { ago_ms: 0 })
        );
        assert!(s.observe(&a, 2_000, 7_000, 3_000, 3_000).is_err());
        assert_eq!(s.observe(&a, 3_000, 8_000, 3_000, 3_000), Ok(()));
        // A change of hands restarts the window.
        let b = [row("a", "w1", 1, None), row("b", "w3", 2, None)];
        assert!(s.observe(&b, 3_500, 8_500, 3_000, 3_000).is_err());
        assert!(s.observe(&b, 6_000, 9_000, 3_000, 3_000).is_err());
        assert_eq!(s.observe(&b, 6_500, 9_500, 3_000, 3_000), Ok(()));
        // An open bid (fresh, not the owner's) holds it; a stale one or the owner's does not.
        let bid = [
            row("a", "w1", 1, Some(("w3", 9_000))),
            row("b", "w3", 2, None),
        ];
        assert_eq!(
            s.observe(&bid, 7_000, 9_600, 3_000, 3_000),
            Err(Unsettled::OpenBids(vec!["a".into()]))
        );
        let old = [
            row("a", "w1", 1, Some(("w3", 1_000))),
            row("b", "w3", 2, Some(("w3", 9_500))),
        ];
        assert_eq!(s.observe(&old, 7_000, 9_600, 3_000, 3_000), Ok(()));
        // An expired lease is no owner.
        assert!(matches!(
            s.observe(&old, 8_000, 10_001, 3_000, 3_000),
            Err(Unsettled::Unowned(ids)) if ids.len() == 2
        ));
    }

    /// A worker whose clock runs 4 s behind writes expiries that are past on the table's clock
    /// the moment they land: it holds its streams as long as it keeps renewing them.
    #[test]
    fn a_lease_renewed_by_a_skewed_clock_is_held_while_it_moves() {
        let at = |expires: i64| {
            let mut r = row("a", "w2", 1, None);
            r.item.lease_expires_at = Some(expires);
            r
        };
        let mut s = Stability::default();
        // First sight of an expired-looking lease: unknown, so not held.
        assert!(matches!(
            s.observe(&[at(9_000)], 0, 10_000, 3_000, 3_000),
            Err(Unsettled::Unowned(_))
        ));
        // Renewed (its expiry moved) but still in the past on the table's clock: held.
        assert!(matches!(
            s.observe(&[at(10_000)], 1_000, 11_000, 3_000, 3_000),
            Err(Unsettled::Recent { .. })
        ));
        assert_eq!(
            s.observe(&[at(12_000)], 3_000, 13_000, 3_000, 3_000),
            Ok(())
        );
        assert_eq!(
            s.observe(&[at(12_000)], 5_000, 15_000, 3_000, 3_000),
            Ok(())
        );
        // No renewal for a whole lease: no owner.
        assert!(matches!(
            s.observe(&[at(12_000)], 6_000, 16_000, 3_000, 3_000),
            Err(Unsettled::Unowned(_))
        ));
    }
}
