//! What the supervisor remembers of an item between views — the part that changes when its lease
//! is renewed or taken — and how another process under this worker's own `OWNER_ID` is named in
//! a plan.

use lease_table::ops::Seen;
use lease_table::LeaseItem;

/// The part of an item that changes when its lease is renewed or taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ItemState {
    owner_id: Option<String>,
    fence_token: Option<u64>,
    lease_expires_at: Option<i64>,
}

impl ItemState {
    pub(super) fn of(item: &LeaseItem) -> Self {
        ItemState {
            owner_id: item.owner_id.clone(),
            fence_token: item.fence_token,
            lease_expires_at: item.lease_expires_at,
        }
    }

    /// Held by someone under a lease that expired before `now_ms`, as the table says.
    pub(super) fn lapsed_at(&self, now_ms: i64) -> bool {
        self.owner_id.is_some() && self.lease_expires_at.is_some_and(|t| t < now_ms)
    }

    /// The state as a [`Seen`] when someone other than `me` holds the lease (or another
    /// process under `me`'s id: `other_instance`).
    pub(super) fn held_by_other(self, me: &str, other_instance: bool) -> Option<Seen> {
        match (self.owner_id, self.fence_token, self.lease_expires_at) {
            (Some(owner_id), Some(fence_token), Some(lease_expires_at))
                if owner_id != me || other_instance =>
            {
                Some(Seen {
                    owner_id,
                    fence_token,
                    lease_expires_at,
                })
            }
            _ => None,
        }
    }
}

/// The owner name another process under `me`'s id is planned as (never a real `OWNER_ID`:
/// it holds a space).
pub fn instance_alias(me: &str, instance: &str) -> String {
    format!("{me} (instance {instance})")
}

/// Whether `owner` is an [`instance_alias`] of `me`.
pub(super) fn is_instance_alias(me: &str, owner: &str) -> bool {
    owner
        .strip_prefix(me)
        .and_then(|rest| rest.strip_prefix(" (instance "))
        .is_some_and(|rest| rest.ends_with(')'))
}
