//! The lease table (design §2): its schema, how an item reads, and the set-up operations the
//! worker, the harness and the tests share (create, seed, scan, get, a client for an endpoint).
//!
//! The six attributes keep the meanings the source design's `lease_demo.py` gives them, so a table
//! written by either program is valid input for the other. The conditional lease writes are in
//! [`ops`]; when to make them (ownership decisions) lives with the worker.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TableStatus,
};
use aws_sdk_dynamodb::Client;

pub mod members;
pub mod ops;

/// Default table name (`LEASE_TABLE`).
pub const DEFAULT_TABLE: &str = "websocket-leases";

/// Reserved item: the fleet's release signal (`generation` N, `draining` SS), not a stream.
/// Reserved items ([`RESERVED_IDS`]) are ignored by stream logic: [`scan_all`] skips them, and
/// so does the worker's discovery. Each is written with `owner_id` = [`RESERVED_OWNER`] and a
/// `lease_expires_at` that never comes ([`RESERVED_EXPIRES_AT`]), so a tool that reads the table
/// the source design's way (`lease_demo.py`: free when no owner, expired, or its own) never
/// finds it free.
pub const FLEET_ITEM: &str = "__fleet__";
/// The whole fleet reads [`FLEET_ITEM`] at most this often (reads per second; each worker's
/// poll interval grows with the fleet to keep it so). One item lives in one partition, which
/// serves about 3,000 read units a second (6,000 eventually consistent reads): at a 50 ms poll,
/// 300 workers would saturate it and throttle the scans and lease writes that share it
/// (issue #20). 1,000 leaves most of the partition to them.
pub const FLEET_READS_PER_SECOND: u32 = 1_000;

/// How many times a second `workers` workers, each scanning the whole table every
/// `scan_seconds` (0: not at all), may poll [`FLEET_ITEM`] between them: what the scans leave
/// of [`FLEET_READS_PER_SECOND`] (every scan reads the item once), but at least half of it —
/// past that the scans themselves are the hot part, and slower polls would not fix it.
pub fn fleet_poll_budget(workers: f64, scan_seconds: f64) -> f64 {
    let budget = f64::from(FLEET_READS_PER_SECOND);
    let scans = if scan_seconds > 0.0 {
        workers.max(1.0) / scan_seconds
    } else {
        0.0
    };
    (budget - scans).max(budget / 2.0)
}

/// Every reserved (non-stream) item id. Exact ids, not a prefix: a real stream may be named
/// `__anything` else and is owned like any other (a `__` prefix once hid such streams).
pub const RESERVED_IDS: &[&str] = &[FLEET_ITEM];
/// The `owner_id` of every reserved item.
pub const RESERVED_OWNER: &str = "__reserved__";
/// The `lease_expires_at` of every reserved item (Unix ms, `i64::MAX`: never expired).
pub const RESERVED_EXPIRES_AT: i64 = i64::MAX;

/// True for a reserved item id (such as [`FLEET_ITEM`]) that is not a stream.
pub fn is_reserved(stream_id: &str) -> bool {
    RESERVED_IDS.contains(&stream_id)
}

/// Attribute names, fixed by design §2.
pub mod attr {
    pub const STREAM_ID: &str = "stream_id";
    pub const OWNER_ID: &str = "owner_id";
    pub const LEASE_EXPIRES_AT: &str = "lease_expires_at";
    pub const FENCE_TOKEN: &str = "fence_token";
    pub const CHECKPOINT: &str = "checkpoint";
    pub const UPDATED_AT: &str = "updated_at";
    /// Which process of `owner_id` acquired the lease (`lease-worker` writes a random id per
    /// process; other writers leave it absent). Two live processes under one `owner_id` show
    /// two instances.
    pub const OWNER_INSTANCE: &str = "owner_instance";
}

/// Errors from the lease table's shared operations.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// A DynamoDB call failed; `op` names it, the source says why.
    #[error("DynamoDB {op} on table {table:?} failed: {message}")]
    Dynamo {
        op: &'static str,
        table: String,
        message: String,
    },
    /// An item had an attribute of the wrong type or an unparsable number.
    #[error("lease item {stream_id:?}: attribute {attribute} is malformed: {detail}")]
    Malformed {
        stream_id: String,
        attribute: &'static str,
        detail: String,
    },
    /// The table did not become ACTIVE in time.
    #[error("table {table:?} did not become ACTIVE within {waited:?}")]
    NotActive { table: String, waited: Duration },
}

impl TableError {
    fn dynamo<E, R>(op: &'static str, table: &str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        TableError::Dynamo {
            op,
            table: table.to_string(),
            message: error_text(&err),
        }
    }
}

/// A one-line description of an SDK error: `Code: message` for a service error, the chain of
/// causes for a dispatch, timeout or response error (`DisplayErrorContext` would dump the
/// whole raw response).
pub fn error_text<E, R>(err: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            format!(
                "{}: {}",
                e.code().unwrap_or("unknown error"),
                e.message().unwrap_or("(no message)")
            )
        }
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}

/// One stream's lease item as read from the table. Absent attributes are `None`
/// (an item holding only `stream_id` is a free stream that was never owned).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseItem {
    pub stream_id: String,
    pub owner_id: Option<String>,
    /// Unix milliseconds.
    pub lease_expires_at: Option<i64>,
    pub fence_token: Option<u64>,
    pub checkpoint: Option<u64>,
    pub updated_at: Option<i64>,
    /// The acquiring process's instance id ([`attr::OWNER_INSTANCE`]), when it wrote one.
    pub owner_instance: Option<String>,
}

impl LeaseItem {
    /// Reads an item; unknown attributes (from other tools) are ignored.
    pub fn from_item(item: &HashMap<String, AttributeValue>) -> Result<Self, TableError> {
        let stream_id = match item.get(attr::STREAM_ID) {
            Some(AttributeValue::S(s)) => s.clone(),
            other => {
                return Err(TableError::Malformed {
                    stream_id: String::new(),
                    attribute: attr::STREAM_ID,
                    detail: format!("expected a string, found {other:?}"),
                })
            }
        };
        let owner_id = match item.get(attr::OWNER_ID) {
            None | Some(AttributeValue::Null(_)) => None,
            Some(AttributeValue::S(s)) => Some(s.clone()),
            Some(other) => {
                return Err(TableError::Malformed {
                    stream_id,
                    attribute: attr::OWNER_ID,
                    detail: format!("expected a string, found {other:?}"),
                })
            }
        };
        // Written only by lease-worker; anything but a string is ignored, not an error.
        let owner_instance = match item.get(attr::OWNER_INSTANCE) {
            Some(AttributeValue::S(s)) => Some(s.clone()),
            _ => None,
        };
        Ok(LeaseItem {
            owner_id,
            owner_instance,
            lease_expires_at: number(item, &stream_id, attr::LEASE_EXPIRES_AT)?,
            fence_token: number(item, &stream_id, attr::FENCE_TOKEN)?,
            checkpoint: number(item, &stream_id, attr::CHECKPOINT)?,
            updated_at: number(item, &stream_id, attr::UPDATED_AT)?,
            stream_id,
        })
    }

    /// True when someone holds the lease and it has not expired at `now_ms`.
    pub fn is_held_at(&self, now_ms: i64) -> bool {
        self.owner_id.is_some() && self.lease_expires_at.is_some_and(|t| t >= now_ms)
    }

    /// Milliseconds left on the lease at `now_ms` (0 when free or expired).
    pub fn remaining_ms(&self, now_ms: i64) -> i64 {
        match (&self.owner_id, self.lease_expires_at) {
            (Some(_), Some(t)) => (t - now_ms).max(0),
            _ => 0,
        }
    }
}

fn number<T: std::str::FromStr>(
    item: &HashMap<String, AttributeValue>,
    stream_id: &str,
    attribute: &'static str,
) -> Result<Option<T>, TableError>
where
    T::Err: std::fmt::Display,
{
    match item.get(attribute) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        // DynamoDB numbers may come back as "5" or "5.0" from other writers: accept integral forms.
        Some(AttributeValue::N(n)) => {
            let text = n.strip_suffix(".0").unwrap_or(n);
            text.parse::<T>()
                .map(Some)
                .map_err(|e| TableError::Malformed {
                    stream_id: stream_id.to_string(),
                    attribute,
                    detail: format!("{n:?}: {e}"),
                })
        }
        Some(other) => Err(TableError::Malformed {
            stream_id: stream_id.to_string(),
            attribute,
            detail: format!("expected a number, found {other:?}"),
        }),
    }
}

/// Wall-clock Unix milliseconds: only for values stored in the table, never for local deadlines.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A DynamoDB client for a local or test endpoint, with static dummy credentials and a fixed region
/// (DynamoDB Local accepts any). Real AWS deployments use `aws_config::load_from_env` instead.
pub fn local_client(endpoint: &str) -> Client {
    let creds = aws_sdk_dynamodb::config::Credentials::new("local", "local", None, None, "static");
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(creds)
        .endpoint_url(endpoint)
        .build();
    Client::from_conf(config)
}

/// What [`create_table`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The table was created by this call.
    New,
    /// It existed already; nothing was changed.
    Existing,
}

/// Creates the lease table (`stream_id` S, on-demand) when it is missing and waits until it is
/// ACTIVE. Never deletes or alters an existing table.
pub async fn create_table(client: &Client, table: &str) -> Result<Created, TableError> {
    create_keyed_table(client, table, attr::STREAM_ID).await
}

/// Creates an on-demand table keyed by the string attribute `key` when it is missing, and waits
/// until it is ACTIVE.
async fn create_keyed_table(
    client: &Client,
    table: &str,
    key: &str,
) -> Result<Created, TableError> {
    let outcome = match client.describe_table().table_name(table).send().await {
        Ok(_) => Created::Existing,
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            let created = client
                .create_table()
                .table_name(table)
                .billing_mode(BillingMode::PayPerRequest)
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(key)
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .expect("attribute definition is complete"),
                )
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(key)
                        .key_type(KeyType::Hash)
                        .build()
                        .expect("key schema is complete"),
                )
                .send()
                .await;
            match created {
                Ok(_) => Created::New,
                // Someone else created it between our describe and create: that is fine.
                Err(err)
                    if err
                        .as_service_error()
                        .is_some_and(|e| e.is_resource_in_use_exception()) =>
                {
                    Created::Existing
                }
                Err(err) => return Err(TableError::dynamo("CreateTable", table, err)),
            }
        }
        Err(err) => return Err(TableError::dynamo("DescribeTable", table, err)),
    };
    wait_active(client, table, Duration::from_secs(60)).await?;
    Ok(outcome)
}

async fn wait_active(client: &Client, table: &str, limit: Duration) -> Result<(), TableError> {
    let start = tokio::time::Instant::now();
    loop {
        let described = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| TableError::dynamo("DescribeTable", table, e))?;
        let status = described.table().and_then(|t| t.table_status().cloned());
        if status == Some(TableStatus::Active) {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(TableError::NotActive {
                table: table.to_string(),
                waited: limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Makes sure an item exists for each stream, writing `{stream_id}` only where none exists
/// (an existing lease, owner or checkpoint is never overwritten). Returns how many were new.
pub async fn seed_streams<S: AsRef<str>>(
    client: &Client,
    table: &str,
    streams: &[S],
) -> Result<usize, TableError> {
    let mut created = 0;
    for stream in streams {
        let put = client
            .put_item()
            .table_name(table)
            .item(
                attr::STREAM_ID,
                AttributeValue::S(stream.as_ref().to_string()),
            )
            .condition_expression("attribute_not_exists(stream_id)")
            .send()
            .await;
        match put {
            Ok(_) => created += 1,
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) => {}
            Err(err) => return Err(TableError::dynamo("PutItem", table, err)),
        }
    }
    Ok(created)
}

/// Reads every stream item of the table (paginated scan, consistent reads), sorted by
/// `stream_id`. Reserved items ([`is_reserved`], e.g. [`FLEET_ITEM`]) are skipped.
pub async fn scan_all(client: &Client, table: &str) -> Result<Vec<LeaseItem>, TableError> {
    let mut items = Vec::new();
    scan_items(client, table, |item| {
        let reserved =
            matches!(item.get(attr::STREAM_ID), Some(AttributeValue::S(id)) if is_reserved(id));
        if !reserved {
            items.push(LeaseItem::from_item(item)?);
        }
        Ok(())
    })
    .await?;
    items.sort_by(|a, b| a.stream_id.cmp(&b.stream_id));
    Ok(items)
}

/// Every item of `table`, page by page (consistent reads), each handed to `each`.
pub(crate) async fn scan_items(
    client: &Client,
    table: &str,
    mut each: impl FnMut(&HashMap<String, AttributeValue>) -> Result<(), TableError>,
) -> Result<(), TableError> {
    let mut start_key = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start_key)
            .send()
            .await
            .map_err(|e| TableError::dynamo("Scan", table, e))?;
        for item in page.items() {
            each(item)?;
        }
        match page.last_evaluated_key() {
            Some(key) if !key.is_empty() => start_key = Some(key.clone()),
            _ => return Ok(()),
        }
    }
}

/// Reads one stream's item (consistent read); `None` when the stream has no item.
pub async fn get(
    client: &Client,
    table: &str,
    stream_id: &str,
) -> Result<Option<LeaseItem>, TableError> {
    let out = client
        .get_item()
        .table_name(table)
        .key(attr::STREAM_ID, AttributeValue::S(stream_id.to_string()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| TableError::dynamo("GetItem", table, e))?;
    out.item().map(LeaseItem::from_item).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn item_with_only_stream_id_is_free() {
        let lease =
            LeaseItem::from_item(&item(&[("stream_id", AttributeValue::S("a".into()))])).unwrap();
        assert_eq!(lease.stream_id, "a");
        assert_eq!(lease.owner_id, None);
        assert!(!lease.is_held_at(0));
        assert_eq!(lease.remaining_ms(0), 0);
    }

    #[test]
    fn item_written_by_lease_demo_reads_back() {
        let lease = LeaseItem::from_item(&item(&[
            ("stream_id", AttributeValue::S("orders-us-east".into())),
            ("owner_id", AttributeValue::S("worker-a".into())),
            (
                "lease_expires_at",
                AttributeValue::N("1764670030000".into()),
            ),
            ("fence_token", AttributeValue::N("3".into())),
            ("updated_at", AttributeValue::N("1764670000000".into())),
            ("extra", AttributeValue::Bool(true)),
        ]))
        .unwrap();
        assert_eq!(lease.fence_token, Some(3));
        assert_eq!(lease.checkpoint, None);
        assert!(lease.is_held_at(1_764_670_030_000));
        assert!(!lease.is_held_at(1_764_670_030_001));
        assert_eq!(lease.remaining_ms(1_764_670_029_000), 1000);
    }

    #[test]
    fn malformed_attributes_are_named() {
        let err = LeaseItem::from_item(&item(&[
            ("stream_id", AttributeValue::S("a".into())),
            ("fence_token", AttributeValue::S("three".into())),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("fence_token"), "{err}");
        let err = LeaseItem::from_item(&item(&[
            ("stream_id", AttributeValue::S("a".into())),
            ("checkpoint", AttributeValue::N("-4".into())),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("checkpoint"), "{err}");
    }
}
