//! The polling source of the lease timeline: a strongly consistent scan every interval, each
//! stream's item compared with the previous scan's. Writes between two scans fold into one
//! change (two renewals show as one; an acquire and a renew as the acquire), so this source is
//! coarser than the table's stream: `run_start` says so with its resolution.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use lease_table::LeaseItem;
use tokio::time::Instant;

use crate::history::{Record, Recorder};

/// Scans until aborted. Waits `interval` between scans, or twice as long as a scan takes when
/// that is longer, so a large table never keeps DynamoDB busy with the harness's reads.
pub async fn run(client: Client, table: String, recorder: Recorder, interval: Duration) {
    let mut seen: HashMap<String, LeaseItem> = HashMap::new();
    loop {
        let started = Instant::now();
        match super::scan_consistent(&client, &table).await {
            Ok(rows) => {
                let t_ms = recorder.now_ms();
                for row in rows {
                    let old = seen.get(&row.item.stream_id);
                    if let Some(line) = super::change(t_ms, old, &row.item) {
                        recorder.record(Record::Lease(line));
                    }
                    seen.insert(row.item.stream_id.clone(), row.item);
                }
            }
            Err(e) => tracing::warn!(error = %e, "lease timeline: scan failed; retrying"),
        }
        let pause = interval.max(started.elapsed() * 2);
        tokio::time::sleep_until(started + pause).await;
    }
}
