//! The membership table (issue #20): one small item per worker, `<LEASE_TABLE>-members`, keyed
//! by `owner_id`. With segmented discovery (`DISCOVERY=segmented`) every worker writes its own
//! item once per scan interval (how many streams it holds, how many lease items its own segment
//! held, a heartbeat expiry, whether it drains, its last bid) and reads the whole membership
//! table instead of the whole lease table: live owners, their counts and the table's size come
//! from here, so each worker needs to read only its segment of the lease table.
//!
//! Nothing here decides ownership: a membership item is a hint, like a scan. Leases are still
//! taken only by the conditional writes of [`crate::ops`]. Keeping the members in a table of
//! their own leaves the lease table holding streams and nothing else a stream-reading tool
//! could mistake for one.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

use crate::{Created, TableError};

/// The membership table that goes with lease table `lease_table`.
pub fn table_for(lease_table: &str) -> String {
    format!("{lease_table}-members")
}

/// Attribute names of a membership item.
pub mod member_attr {
    /// The key: the worker's `OWNER_ID`.
    pub const OWNER_ID: &str = "owner_id";
    /// The writing process's instance id.
    pub const INSTANCE: &str = "instance";
    /// Streams it runs.
    pub const HELD: &str = "held";
    /// Lease items its last scan of its own segment held.
    pub const SEGMENT_ITEMS: &str = "segment_items";
    /// The number of segments (live members) it scanned with.
    pub const SEGMENTS: &str = "segments";
    /// Unix ms after which the member counts as gone (heartbeat + one lease).
    pub const EXPIRES_AT: &str = "expires_at";
    /// True from the start of its drain.
    pub const DRAINING: &str = "draining";
    /// The stream it last bid on, and when (Unix ms).
    pub const BID_STREAM: &str = "bid_stream";
    pub const BID_AT: &str = "bid_at";
    /// Streams it is handing over, each to a named member (a map stream → owner id), and when
    /// it decided so (Unix ms): written before it releases them (a shed, a drain), so the
    /// named member takes each at once and the others leave it alone.
    pub const HANDOFF: &str = "handoff";
    pub const HANDOFF_AT: &str = "handoff_at";
    /// Unix ms of the write.
    pub const UPDATED_AT: &str = "updated_at";
    /// Unix seconds at which DynamoDB's TTL (when enabled on the table) may delete a gone
    /// member; workers also delete members gone for long ([`super::FORGET_AFTER_LEASES`]).
    pub const TTL: &str = "ttl";
}

/// Segments of the lease table each worker reads per scan interval in segmented discovery:
/// its own, its predecessor's (the standby read) and one rotating. The fleet reads the lease
/// table this many times an interval, whatever its size.
pub const SEGMENT_READS_PER_SCAN: usize = 3;

/// A member whose heartbeat expired this many leases ago is deleted by the first worker that
/// sees it (crashed workers leave their item behind; ECS gives every task a new id).
pub const FORGET_AFTER_LEASES: i64 = 10;

/// One worker's membership item.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    pub owner_id: String,
    pub instance: String,
    pub held: usize,
    pub segment_items: usize,
    pub segments: usize,
    /// Unix ms.
    pub expires_at: i64,
    pub draining: bool,
    /// (stream, Unix ms) of its last bid, while fresh.
    pub bid: Option<(String, i64)>,
    /// Streams it hands over, (stream, to whom), at most [`MAX_HANDOFFS`], decided at
    /// `handoff_at` (Unix ms); empty when none is fresh.
    pub handoff: Vec<(String, String)>,
    pub handoff_at: i64,
}

/// At most this many handoffs ride in one membership item (about 50 bytes each: the item stays
/// under 16 KB whatever the share; streams beyond are released unassigned, taken by whoever
/// reads them first).
pub const MAX_HANDOFFS: usize = 256;

impl Member {
    /// Reads a membership item; `None` for one without an owner id (not written by a worker).
    /// Missing or malformed numbers read as 0: a member is a hint, and a bad one expires.
    pub fn from_item(item: &HashMap<String, AttributeValue>) -> Option<Member> {
        let text = |name: &str| match item.get(name) {
            Some(AttributeValue::S(s)) => Some(s.clone()),
            _ => None,
        };
        let number = |name: &str| match item.get(name) {
            Some(AttributeValue::N(n)) => n.parse::<i64>().ok(),
            _ => None,
        };
        let count = |name: &str| number(name).unwrap_or(0).max(0) as usize;
        let bid = match (text(member_attr::BID_STREAM), number(member_attr::BID_AT)) {
            (Some(stream), Some(at)) => Some((stream, at)),
            _ => None,
        };
        let mut handoff: Vec<(String, String)> = match item.get(member_attr::HANDOFF) {
            Some(AttributeValue::M(map)) => map
                .iter()
                .filter_map(|(stream, to)| match to {
                    AttributeValue::S(to) => Some((stream.clone(), to.clone())),
                    _ => None,
                })
                .take(MAX_HANDOFFS)
                .collect(),
            _ => Vec::new(),
        };
        handoff.sort();
        Some(Member {
            owner_id: text(member_attr::OWNER_ID)?,
            instance: text(member_attr::INSTANCE).unwrap_or_default(),
            held: count(member_attr::HELD),
            segment_items: count(member_attr::SEGMENT_ITEMS),
            segments: count(member_attr::SEGMENTS),
            expires_at: number(member_attr::EXPIRES_AT).unwrap_or(0),
            draining: matches!(
                item.get(member_attr::DRAINING),
                Some(AttributeValue::Bool(true))
            ),
            bid,
            handoff,
            handoff_at: number(member_attr::HANDOFF_AT).unwrap_or(0),
        })
    }
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Writes `member` whole (one unconditional `UpdateItem`; a bid absent from it is removed).
/// Every attribute goes by an expression name: several (`segments`, `instance`, `ttl`) are
/// DynamoDB reserved words.
pub async fn heartbeat(
    client: &Client,
    table: &str,
    member: &Member,
    now_ms: i64,
) -> Result<
    (),
    aws_sdk_dynamodb::error::SdkError<aws_sdk_dynamodb::operation::update_item::UpdateItemError>,
> {
    use member_attr::*;
    let mut values: Vec<(&str, AttributeValue)> = vec![
        (INSTANCE, AttributeValue::S(member.instance.clone())),
        (HELD, n(member.held)),
        (SEGMENT_ITEMS, n(member.segment_items)),
        (SEGMENTS, n(member.segments)),
        (EXPIRES_AT, n(member.expires_at)),
        (DRAINING, AttributeValue::Bool(member.draining)),
        (UPDATED_AT, n(now_ms)),
        (TTL, n(member.expires_at / 1000 + 86_400)),
    ];
    let mut removed: Vec<&str> = Vec::new();
    match &member.bid {
        Some((stream, at)) => {
            values.push((BID_STREAM, AttributeValue::S(stream.clone())));
            values.push((BID_AT, n(at)));
        }
        None => removed.extend([BID_STREAM, BID_AT]),
    }
    if member.handoff.is_empty() {
        removed.extend([HANDOFF, HANDOFF_AT]);
    } else {
        let map = member
            .handoff
            .iter()
            .take(MAX_HANDOFFS)
            .map(|(stream, to)| (stream.clone(), AttributeValue::S(to.clone())))
            .collect();
        values.push((HANDOFF, AttributeValue::M(map)));
        values.push((HANDOFF_AT, n(member.handoff_at)));
    }
    let mut request = client
        .update_item()
        .table_name(table)
        .key(OWNER_ID, AttributeValue::S(member.owner_id.clone()));
    let mut sets = Vec::new();
    for (i, (name, value)) in values.into_iter().enumerate() {
        sets.push(format!("#a{i} = :v{i}"));
        request = request
            .expression_attribute_names(format!("#a{i}"), name)
            .expression_attribute_values(format!(":v{i}"), value);
    }
    let mut update = format!("SET {}", sets.join(", "));
    let mut names = Vec::new();
    for (i, name) in removed.into_iter().enumerate() {
        names.push(format!("#r{i}"));
        request = request.expression_attribute_names(format!("#r{i}"), name);
    }
    if !names.is_empty() {
        update.push_str(&format!(" REMOVE {}", names.join(", ")));
    }
    request.update_expression(update).send().await.map(|_| ())
}

/// Deletes `owner_id`'s item if it still expires at `expires_at` (a member that came back and
/// wrote again is kept). One conditional `DeleteItem`; a refused condition is not an error.
pub async fn forget(
    client: &Client,
    table: &str,
    owner_id: &str,
    expires_at: i64,
) -> Result<
    (),
    aws_sdk_dynamodb::error::SdkError<aws_sdk_dynamodb::operation::delete_item::DeleteItemError>,
> {
    let result = client
        .delete_item()
        .table_name(table)
        .key(
            member_attr::OWNER_ID,
            AttributeValue::S(owner_id.to_string()),
        )
        .condition_expression("#e = :e")
        .expression_attribute_names("#e", member_attr::EXPIRES_AT)
        .expression_attribute_values(":e", n(expires_at))
        .send()
        .await;
    match result {
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
        {
            Ok(())
        }
        other => other.map(|_| ()),
    }
}

/// Creates the membership table (`owner_id` S, on-demand) when it is missing and waits until it
/// is ACTIVE. Never alters an existing table.
pub async fn create_table(client: &Client, table: &str) -> Result<Created, TableError> {
    crate::create_keyed_table(client, table, member_attr::OWNER_ID).await
}

/// Reads every membership item (paginated, consistent), sorted by owner id.
pub async fn scan(client: &Client, table: &str) -> Result<Vec<Member>, TableError> {
    let mut members = Vec::new();
    crate::scan_items(client, table, |item| {
        members.extend(Member::from_item(item));
        Ok(())
    })
    .await?;
    members.sort_by(|a, b| a.owner_id.cmp(&b.owner_id));
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_reads_back_and_a_bad_one_is_a_hint() {
        let item: HashMap<String, AttributeValue> = [
            ("owner_id", AttributeValue::S("w-1".into())),
            ("held", n(7)),
            ("segment_items", n(40)),
            ("segments", n(3)),
            ("expires_at", n(1_000)),
            ("draining", AttributeValue::Bool(true)),
            ("bid_stream", AttributeValue::S("s-9".into())),
            ("bid_at", n(900)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let m = Member::from_item(&item).unwrap();
        assert_eq!((m.held, m.segment_items, m.segments), (7, 40, 3));
        assert!(m.draining);
        assert_eq!(m.bid, Some(("s-9".into(), 900)));
        let mut bad = item.clone();
        bad.insert("held".into(), AttributeValue::S("many".into()));
        bad.insert("segment_items".into(), n(-4));
        let m = Member::from_item(&bad).unwrap();
        assert_eq!((m.held, m.segment_items), (0, 0));
        bad.remove("owner_id");
        assert_eq!(Member::from_item(&bad), None);
        assert_eq!(table_for("websocket-leases"), "websocket-leases-members");
    }
}
