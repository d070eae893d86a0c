//! The lease timeline (design §9): every change to the lease table, as the table itself decided
//! it, recorded as `lease` lines of `history.jsonl`. Independent of the workers and the sink.
//!
//! Two sources, chosen by [`LeaseSource`]: the table's DynamoDB stream (`NEW_AND_OLD_IMAGES`:
//! every write, in the order the table applied it) where the backend has one, else consistent
//! polling (a strongly consistent scan every interval; writes between two scans fold into one
//! change). `run_start` says which ran and at what resolution. This module owns the pure part —
//! turning an item's old and new image into a [`LeaseChange`] — and the consistent scan;
//! [`streams`] and [`poll`] are the readers. Apart from enabling the stream on the table the
//! harness created, it never writes to the table.

pub mod poll;
pub mod stable;
pub mod streams;

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use lease_table::LeaseItem;

use crate::history::{LeaseChange, LeaseOp, LeaseSourceInfo, Recorder};

/// Extra attributes a starved worker writes on a held stream (its bid to be handed one). The
/// worker crate defines them; the harness reads them only to know when the fleet has settled.
pub const BID_OWNER: &str = "bid_owner";
/// Unix ms of the bid.
pub const BID_AT: &str = "bid_at";

/// Default interval of the polling source.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Where the lease timeline is read from. A backend picks the one it supports; [`choose`]
/// picks for an endpoint by trying to enable the table's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseSource {
    /// The table's DynamoDB stream (`NEW_AND_OLD_IMAGES`) at `endpoint`, read every `interval`.
    Streams {
        endpoint: String,
        arn: String,
        interval: Duration,
    },
    /// A strongly consistent scan every `interval` (or twice as long as a scan takes).
    Poll { interval: Duration },
}

/// Default interval of the streams source.
pub const DEFAULT_STREAMS_INTERVAL: Duration = Duration::from_millis(100);

impl Default for LeaseSource {
    fn default() -> Self {
        LeaseSource::Poll {
            interval: DEFAULT_POLL_INTERVAL,
        }
    }
}

/// The table's stream when the backend at `endpoint` gives one (enabling it on `table`), else
/// consistent polling; the reason for polling is logged.
pub async fn choose(client: &Client, endpoint: &str, table: &str) -> LeaseSource {
    match streams::enable(client, table).await {
        Ok(arn) => LeaseSource::Streams {
            endpoint: endpoint.to_string(),
            arn,
            interval: DEFAULT_STREAMS_INTERVAL,
        },
        Err(e) => {
            tracing::info!(error = %e, "no table stream: the lease timeline polls the table");
            LeaseSource::default()
        }
    }
}

impl LeaseSource {
    /// The `run_start` description of this source.
    pub fn info(&self) -> LeaseSourceInfo {
        let (source, interval) = match self {
            LeaseSource::Streams { interval, .. } => ("dynamodb_streams", interval),
            LeaseSource::Poll { interval } => ("poll", interval),
        };
        LeaseSourceInfo {
            source: source.to_string(),
            resolution_ms: interval.as_millis() as u64,
        }
    }

    /// Starts recording `lease` lines from this source until the returned task is aborted.
    pub fn spawn(
        &self,
        client: Client,
        table: String,
        recorder: Recorder,
    ) -> tokio::task::JoinHandle<()> {
        match self {
            LeaseSource::Poll { interval } => {
                tokio::spawn(poll::run(client, table, recorder, *interval))
            }
            LeaseSource::Streams {
                endpoint,
                arn,
                interval,
            } => tokio::spawn(streams::run(
                streams_client(endpoint),
                arn.clone(),
                recorder,
                *interval,
            )),
        }
    }
}

/// A DynamoDB Streams client for a local or test endpoint (dummy credentials, as
/// [`lease_table::local_client`]).
fn streams_client(endpoint: &str) -> aws_sdk_dynamodbstreams::Client {
    use aws_sdk_dynamodbstreams::config;
    let creds = config::Credentials::new("local", "local", None, None, "static");
    let conf = aws_sdk_dynamodbstreams::Config::builder()
        .behavior_version(config::BehaviorVersion::latest())
        .region(config::Region::new("us-east-1"))
        .credentials_provider(creds)
        .endpoint_url(endpoint)
        .build();
    aws_sdk_dynamodbstreams::Client::from_conf(conf)
}

/// One lease item with the bid written on it, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub item: LeaseItem,
    /// `(bidder, bid_at)`.
    pub bid: Option<(String, i64)>,
}

/// Reads an item image; `None` for a reserved (non-stream) item or one that does not parse.
pub fn row(image: &HashMap<String, AttributeValue>) -> Option<Row> {
    if let Some(AttributeValue::S(id)) = image.get(lease_table::attr::STREAM_ID) {
        if lease_table::is_reserved(id) {
            return None;
        }
    }
    let item = LeaseItem::from_item(image).ok()?;
    let bid = match (image.get(BID_OWNER), image.get(BID_AT)) {
        (Some(AttributeValue::S(bidder)), Some(AttributeValue::N(at))) => {
            at.parse().ok().map(|at| (bidder.clone(), at))
        }
        _ => None,
    };
    Some(Row { item, bid })
}

/// Every stream's row, from one strongly consistent scan (all pages).
pub async fn scan_consistent(client: &Client, table: &str) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut start: Option<HashMap<String, AttributeValue>> = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "consistent scan of {table}: {}",
                    lease_table::error_text(&e)
                )
            })?;
        rows.extend(page.items().iter().filter_map(row));
        match page.last_evaluated_key() {
            Some(key) if !key.is_empty() => start = Some(key.clone()),
            _ => return Ok(rows),
        }
    }
}

/// What a write did to a stream's item, from its images before (`None`: it did not exist) and
/// after. Fence up: an acquire; owner gone: a release; same owner and fence with a later expiry:
/// a renew (a renewal that also checkpoints is a renew); only the checkpoint moved: a checkpoint.
pub fn classify(old: Option<&LeaseItem>, new: &LeaseItem) -> LeaseOp {
    let Some(old) = old else {
        return if new.owner_id.is_some() && new.fence_token.is_some() {
            LeaseOp::Acquire
        } else {
            LeaseOp::Other
        };
    };
    if new.fence_token > old.fence_token && new.owner_id.is_some() {
        return LeaseOp::Acquire;
    }
    if old.owner_id.is_some() && new.owner_id.is_none() {
        return LeaseOp::Release;
    }
    if new.owner_id.is_some() && new.owner_id == old.owner_id && new.fence_token == old.fence_token
    {
        if new.lease_expires_at > old.lease_expires_at {
            return LeaseOp::Renew;
        }
        if new.checkpoint != old.checkpoint {
            return LeaseOp::Checkpoint;
        }
    }
    LeaseOp::Other
}

/// The `lease` line for a write that turned `old` into `new` at `t_ms`; `None` when none of the
/// design's fields changed (a bid, or a write that set the same values).
pub fn change(t_ms: u64, old: Option<&LeaseItem>, new: &LeaseItem) -> Option<LeaseChange> {
    let same = old.is_some_and(|o| {
        o.owner_id == new.owner_id
            && o.fence_token == new.fence_token
            && o.lease_expires_at == new.lease_expires_at
            && o.checkpoint == new.checkpoint
    });
    if same {
        return None;
    }
    Some(LeaseChange {
        t_ms,
        stream_id: new.stream_id.clone(),
        op: classify(old, new),
        owner_id: new.owner_id.clone(),
        fence_token: new.fence_token,
        lease_expires_at: new.lease_expires_at,
        checkpoint: new.checkpoint,
        updated_at: new.updated_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(owner: Option<&str>, fence: u64, expires: i64, checkpoint: Option<u64>) -> LeaseItem {
        LeaseItem {
            stream_id: "s-0001".into(),
            owner_id: owner.map(String::from),
            fence_token: Some(fence),
            lease_expires_at: Some(expires),
            checkpoint,
            updated_at: Some(expires - 3000),
            owner_instance: None,
        }
    }

    #[test]
    fn writes_are_classified_by_what_they_changed() {
        let held = item(Some("w1"), 3, 10_000, Some(5));
        let seeded = LeaseItem {
            stream_id: "s-0001".into(),
            ..LeaseItem::default()
        };
        assert_eq!(classify(None, &seeded), LeaseOp::Other);
        assert_eq!(classify(Some(&seeded), &held), LeaseOp::Acquire);
        assert_eq!(
            classify(Some(&held), &item(Some("w2"), 4, 11_000, Some(5))),
            LeaseOp::Acquire
        );
        assert_eq!(
            classify(Some(&held), &item(Some("w1"), 4, 11_000, Some(5))),
            LeaseOp::Acquire,
            "a re-acquire by the same owner is a new grant"
        );
        assert_eq!(
            classify(Some(&held), &item(Some("w1"), 3, 11_000, Some(9))),
            LeaseOp::Renew
        );
        assert_eq!(
            classify(Some(&held), &item(Some("w1"), 3, 10_000, Some(9))),
            LeaseOp::Checkpoint
        );
        assert_eq!(
            classify(Some(&held), &item(None, 3, 10_000, Some(9))),
            LeaseOp::Release
        );
        assert_eq!(change(7, Some(&held), &held.clone()), None);
        let line = change(7, Some(&held), &item(Some("w1"), 3, 11_000, Some(5))).unwrap();
        assert_eq!((line.t_ms, line.op), (7, LeaseOp::Renew));
        assert_eq!(line.lease_expires_at, Some(11_000));
    }
}
