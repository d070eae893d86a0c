//! The DynamoDB Streams source of the lease timeline: the table's own change log, every write in
//! the order the table applied it, each with the item's old and new image
//! (`NEW_AND_OLD_IMAGES`). The harness enables the stream on the table it creates
//! ([`enable`]); where that is refused (a backend without streams) the run polls instead.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, StreamSpecification, StreamViewType};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodbstreams::types::{AttributeValue as StreamValue, ShardIteratorType};
use aws_sdk_dynamodbstreams::Client as StreamsClient;
use lease_table::LeaseItem;
use tokio::time::Instant;

use crate::history::{Record, Recorder};

/// How often the shard list is read again for new shards.
const DESCRIBE_EVERY: Duration = Duration::from_secs(2);
/// Records per `GetRecords` call (the service's maximum).
const PAGE: i32 = 1000;

/// Turns on `NEW_AND_OLD_IMAGES` on `table` (already on counts too) and returns the stream's
/// ARN; an error when the backend refuses or reports no stream.
pub async fn enable(client: &Client, table: &str) -> anyhow::Result<String> {
    let current = client.describe_table().table_name(table).send().await;
    let existing = current.ok().and_then(|d| {
        let t = d.table()?;
        let on = t.stream_specification()?.stream_enabled();
        on.then(|| t.latest_stream_arn().map(String::from))
            .flatten()
    });
    if let Some(arn) = existing {
        return Ok(arn);
    }
    let spec = StreamSpecification::builder()
        .stream_enabled(true)
        .stream_view_type(StreamViewType::NewAndOldImages)
        .build()?;
    let updated = client
        .update_table()
        .table_name(table)
        .stream_specification(spec)
        .send()
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "enabling the table's stream: {}",
                lease_table::error_text(&e)
            )
        })?;
    updated
        .table_description()
        .and_then(|t| t.latest_stream_arn())
        .map(String::from)
        .ok_or_else(|| anyhow::anyhow!("the backend reported no stream ARN for {table}"))
}

/// Reads the stream every `interval` until aborted, recording a `lease` line per change.
pub async fn run(streams: StreamsClient, arn: String, recorder: Recorder, interval: Duration) {
    let mut iterators: HashMap<String, String> = HashMap::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut described: Option<Instant> = None;
    loop {
        let started = Instant::now();
        if described.is_none_or(|t| t.elapsed() >= DESCRIBE_EVERY) {
            described = Some(started);
            if let Err(e) = discover(&streams, &arn, &mut iterators, &mut seen).await {
                tracing::warn!(error = %e, "lease timeline: reading the stream's shards failed");
            }
        }
        let shards: Vec<String> = iterators.keys().cloned().collect();
        for shard in shards {
            while let Some(iterator) = iterators.get(&shard).cloned() {
                let page = streams
                    .get_records()
                    .shard_iterator(iterator)
                    .limit(PAGE)
                    .send()
                    .await;
                let page = match page {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::warn!(error = %aws_sdk_dynamodbstreams::error::DisplayErrorContext(&e), %shard, "lease timeline: GetRecords failed; re-reading the shard list");
                        iterators.remove(&shard);
                        seen.remove(&shard);
                        described = None;
                        break;
                    }
                };
                let t_ms = recorder.now_ms();
                for record in page.records() {
                    let Some(change) = record.dynamodb() else {
                        continue;
                    };
                    let old = change.old_image().and_then(item);
                    let Some(new) = change.new_image().and_then(item) else {
                        continue;
                    };
                    if let Some(line) = super::change(t_ms, old.as_ref(), &new) {
                        recorder.record(Record::Lease(line));
                    }
                }
                let full = page.records().len() as i32 >= PAGE;
                match page.next_shard_iterator() {
                    Some(next) => {
                        iterators.insert(shard.clone(), next.to_string());
                    }
                    None => {
                        iterators.remove(&shard); // the shard is closed and read to its end
                    }
                }
                if !full {
                    break;
                }
            }
        }
        tokio::time::sleep_until(started + interval).await;
    }
}

/// Adds an iterator (from the shard's start) for every shard not read yet.
async fn discover(
    streams: &StreamsClient,
    arn: &str,
    iterators: &mut HashMap<String, String>,
    seen: &mut HashSet<String>,
) -> anyhow::Result<()> {
    let mut start: Option<String> = None;
    loop {
        let described = streams
            .describe_stream()
            .stream_arn(arn)
            .set_exclusive_start_shard_id(start.take())
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!("{}", aws_sdk_dynamodbstreams::error::DisplayErrorContext(e))
            })?;
        let Some(description) = described.stream_description() else {
            return Ok(());
        };
        for shard in description.shards() {
            let Some(id) = shard.shard_id() else { continue };
            if seen.contains(id) {
                continue;
            }
            let iterator = streams
                .get_shard_iterator()
                .stream_arn(arn)
                .shard_id(id)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .map_err(|e| {
                    anyhow::anyhow!("{}", aws_sdk_dynamodbstreams::error::DisplayErrorContext(e))
                })?;
            if let Some(it) = iterator.shard_iterator() {
                iterators.insert(id.to_string(), it.to_string());
            }
            seen.insert(id.to_string());
        }
        match description.last_evaluated_shard_id() {
            Some(last) => start = Some(last.to_string()),
            None => return Ok(()),
        }
    }
}

/// A stream image as a lease item; `None` for a reserved item or one that does not parse.
fn item(image: &HashMap<String, StreamValue>) -> Option<LeaseItem> {
    let converted: HashMap<String, AttributeValue> = image
        .iter()
        .filter_map(|(k, v)| {
            let v = match v {
                StreamValue::S(s) => AttributeValue::S(s.clone()),
                StreamValue::N(n) => AttributeValue::N(n.clone()),
                StreamValue::Null(b) => AttributeValue::Null(*b),
                _ => return None, // no attribute of the lease schema has another type
            };
            Some((k.clone(), v))
        })
        .collect();
    super::row(&converted).map(|r| r.item)
}
