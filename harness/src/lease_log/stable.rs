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
        let unowned: Vec<String> = rows
            .iter()
            .filter(|r| !r.item.is_held_at(wall_ms))
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
}
