//! DynamoDB access for the worker: the conditional lease writes of design §2 (from
//! `lease_table::ops`) and the paginated discovery scan, each under a caller-given timeout and
//! counted in `lease_worker_dynamodb_requests_total{op,outcome}`.
//!
//! This module makes exactly one request per call and never retries or decides what a result
//! means for ownership; the stream runner and the discovery loop do that.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use lease_table::members::Member;
use lease_table::ops::{self, ErrorKind, FleetSignal, Holder, OpError, Outcome};
use lease_table::LeaseItem;

use crate::decide::{Bid, WriteClass};
use crate::metrics::Metrics;
use crate::write_gate::WriteGate;

/// Longest any single DynamoDB call may take (less when the lease has less time left), except
/// renewals, which may wait up to [`crate::stream::renew_timeout`].
pub const AWS_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// The IAM actions of every DynamoDB operation this worker calls.
pub const DYNAMODB_ACTIONS: &[&str] = &["dynamodb:GetItem", "dynamodb:Scan", "dynamodb:UpdateItem"];
/// The IAM actions segmented discovery (`DISCOVERY=segmented`) calls on its membership table.
pub const MEMBERS_DYNAMODB_ACTIONS: &[&str] = &[
    "dynamodb:Scan",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
];

/// Extra attribute (design §2 allows more): a starved worker's id, written on a held stream so
/// that its owner counts the bidder as a live owner and sheds down to the fair share. The source
/// design's `lease_demo.py` ignores it.
pub const BID_OWNER: &str = "bid_owner";
/// Extra attribute: Unix ms of the bid; bids older than one lease are ignored.
pub const BID_AT: &str = "bid_at";

/// Extra attribute: the last range of sequences a sink rejected permanently and this worker
/// dead-lettered (`"FIRST-THROUGH"`), so a reader of the table sees the skip.
pub const DEAD_LETTER_RANGE: &str = "dead_letter_range";
/// Extra attribute: how many events of this stream were dead-lettered in all.
pub const DEAD_LETTER_EVENTS: &str = "dead_letter_events";

/// A failed scan page is retried this many times (from its own start key) before the scan fails.
pub const SCAN_PAGE_RETRIES: u32 = 4;
/// Backoff between retries of a scan page (up to about 0.1 + 0.2 + 0.4 + 0.8 s).
const SCAN_RETRY_BACKOFF: crate::decide::Backoff = crate::decide::Backoff {
    base: Duration::from_millis(100),
    cap: Duration::from_secs(1),
};

/// One discovery scan: the lease items and the bids seen on them.
#[derive(Debug, Clone, Default)]
pub struct ScanView {
    pub items: Vec<LeaseItem>,
    pub bids: Vec<Bid>,
}

/// Why a call produced no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// No answer within the timeout (which never exceeds the time left on the lease).
    #[error("DynamoDB {op} timed out after {after:?}")]
    Timeout { op: &'static str, after: Duration },
    /// Never sent: the call waited its whole timeout for room in the congestion window. Its
    /// outcome is known (nothing was written).
    #[error("DynamoDB {op} not sent: no room in the congestion window for {after:?}")]
    Queued { op: &'static str, after: Duration },
    /// DynamoDB or the network answered with an error.
    #[error(transparent)]
    Failed(#[from] OpError),
}

impl CallError {
    /// Metric label of the failure.
    pub fn outcome(&self) -> &'static str {
        match self {
            CallError::Timeout { .. } => "timeout",
            CallError::Queued { .. } => "queued",
            CallError::Failed(e) if e.kind == ErrorKind::Throttled => "throttled",
            CallError::Failed(_) => "error",
        }
    }
}

/// The lease table as this worker uses it.
#[derive(Clone)]
pub struct LeaseTable {
    client: Client,
    table: Arc<str>,
    owner_id: Arc<str>,
    /// This process's instance id, written with every acquire (`owner_instance`): another live
    /// process under the same `owner_id` shows another one.
    instance: Arc<str>,
    metrics: Arc<Metrics>,
    gate: Arc<WriteGate>,
    /// Segmented discovery's membership table, when used.
    members: Option<Arc<str>>,
}

impl LeaseTable {
    /// Wraps a client for `table`, writing as `owner_id`.
    pub fn new(client: Client, table: &str, owner_id: &str, metrics: Arc<Metrics>) -> Self {
        LeaseTable {
            client,
            table: table.into(),
            owner_id: owner_id.into(),
            instance: format!("{:016x}", rand::random::<u64>()).into(),
            metrics,
            gate: Arc::new(WriteGate::default()),
            members: None,
        }
    }

    /// The same table, with segmented discovery's membership table `members`.
    pub fn with_members(mut self, members: &str) -> Self {
        self.members = Some(members.into());
        self
    }

    /// Lease requests this worker may have in flight now (its congestion window).
    pub fn write_window(&self) -> usize {
        self.gate.limit()
    }

    /// This worker's owner id.
    pub fn owner_id(&self) -> &str {
        &self.owner_id
    }

    /// This process's instance id (random, 16 hex digits, new at every start).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    fn holder(&self, fence_token: u64) -> Holder<'_> {
        Holder {
            owner_id: &self.owner_id,
            fence_token,
        }
    }

    async fn timed<T>(
        &self,
        op: &'static str,
        timeout: Duration,
        call: impl std::future::Future<Output = Result<Outcome<T>, OpError>>,
    ) -> Result<Outcome<T>, CallError> {
        let class = match op {
            "acquire" | "bid" => WriteClass::Grow,
            _ => WriteClass::Keep,
        };
        let sent = std::sync::atomic::AtomicBool::new(false);
        let bounded = async {
            let admitted = self.gate.admit(class).await;
            sent.store(true, std::sync::atomic::Ordering::Relaxed);
            let result = call.await;
            // Any failure (throttling, a 5xx, a reset) is a sign of congestion; a refused
            // condition is an answer.
            let congested = result.is_err();
            admitted.done(congested, timeout);
            result
        };
        let result = match tokio::time::timeout(timeout, bounded).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(e)) => Err(CallError::Failed(e)),
            Err(_) if !sent.load(std::sync::atomic::Ordering::Relaxed) => {
                Err(CallError::Queued { op, after: timeout })
            }
            Err(_) => Err(CallError::Timeout { op, after: timeout }),
        };
        let outcome = match &result {
            Ok(Outcome::Done(_)) => "ok",
            Ok(Outcome::Refused { .. }) => "conditional_failed",
            Err(e) => e.outcome(),
        };
        self.metrics.dynamodb(op, outcome);
        result
    }

    /// Acquire with a lease of `lease` from now, on observation alone: the item free, ours, or
    /// still exactly as `seen` (the supervisor judged that lease dead, skew-tolerantly). Never
    /// on the design's wall-clock expiry clause, which lets a worker take a lease written by a
    /// clock running behind the moment it lands (see [`ops::acquire_observed`]).
    pub async fn acquire(
        &self,
        stream_id: &str,
        lease: Duration,
        seen: Option<&ops::Seen>,
        timeout: Duration,
    ) -> Result<Outcome<LeaseItem>, CallError> {
        let now = lease_table::now_ms();
        let call = ops::acquire_observed(
            &self.client,
            &self.table,
            stream_id,
            &self.owner_id,
            &self.instance,
            lease.as_millis() as i64,
            now,
            seen,
        );
        self.timed("acquire", timeout, call).await
    }

    /// Renew (design §2) until `expires`, judging expiry at `now` (Unix ms; see
    /// [`crate::decide::LeaseTimeline`]), carrying `checkpoint` when one is due.
    pub async fn renew(
        &self,
        stream_id: &str,
        fence: u64,
        now: i64,
        expires: i64,
        checkpoint: Option<u64>,
        timeout: Duration,
    ) -> Result<Outcome<()>, CallError> {
        let call = ops::renew_until(
            &self.client,
            &self.table,
            stream_id,
            self.holder(fence),
            now,
            expires,
            checkpoint,
        );
        self.timed("renew", timeout, call).await
    }

    /// Checkpoint alone (design §2).
    pub async fn checkpoint(
        &self,
        stream_id: &str,
        fence: u64,
        checkpoint: u64,
        timeout: Duration,
    ) -> Result<Outcome<()>, CallError> {
        let now = lease_table::now_ms();
        let call = ops::checkpoint(
            &self.client,
            &self.table,
            stream_id,
            self.holder(fence),
            checkpoint,
            now,
        );
        self.timed("checkpoint", timeout, call).await
    }

    /// Release (design §2) with a final checkpoint when one is due.
    pub async fn release(
        &self,
        stream_id: &str,
        fence: u64,
        checkpoint: Option<u64>,
        timeout: Duration,
    ) -> Result<Outcome<()>, CallError> {
        let now = lease_table::now_ms();
        let call = ops::release(
            &self.client,
            &self.table,
            stream_id,
            self.holder(fence),
            checkpoint,
            now,
        );
        self.timed("release", timeout, call).await
    }

    /// Reads `stream_id` consistently and releases it if the table names this worker (an
    /// acquire whose answer was abandoned). True when released.
    pub async fn release_if_mine(
        &self,
        stream_id: &str,
        timeout: Duration,
    ) -> Result<bool, CallError> {
        let get = async { self.get_item(stream_id).await.map(Outcome::Done) };
        let Outcome::Done(Some(item)) = self.timed("get", timeout, get).await? else {
            return Ok(false);
        };
        if item.owner_id.as_deref() != Some(&*self.owner_id) {
            return Ok(false);
        }
        let fence = item.fence_token.unwrap_or(0);
        let released = self.release(stream_id, fence, None, timeout).await?;
        Ok(matches!(released, Outcome::Done(())))
    }

    /// Reads the fleet signal ([`lease_table::FLEET_ITEM`]): one eventually consistent `GetItem`.
    pub async fn fleet_read(&self, timeout: Duration) -> Result<FleetSignal, CallError> {
        let call = async {
            ops::fleet_read(&self.client, &self.table)
                .await
                .map(Outcome::Done)
        };
        match self.timed("fleet_read", timeout, call).await? {
            Outcome::Done(signal) => Ok(signal),
            Outcome::Refused { .. } => Ok(FleetSignal::default()),
        }
    }

    /// Bumps the fleet generation (one `UpdateItem`), optionally marking this worker as draining
    /// (`Some(true)`) or not (`Some(false)`).
    pub async fn fleet_bump(
        &self,
        draining: Option<bool>,
        timeout: Duration,
    ) -> Result<(), CallError> {
        let now = lease_table::now_ms();
        let call = async {
            ops::fleet_bump(&self.client, &self.table, &self.owner_id, draining, now)
                .await
                .map(Outcome::Done)
        };
        self.timed("fleet_bump", timeout, call).await.map(|_| ())
    }

    /// Removes drained, gone owners from the fleet's draining set (one `UpdateItem`).
    pub async fn fleet_forget(
        &self,
        owners: &[String],
        timeout: Duration,
    ) -> Result<(), CallError> {
        let now = lease_table::now_ms();
        let call = async {
            ops::fleet_forget(&self.client, &self.table, owners, now)
                .await
                .map(Outcome::Done)
        };
        self.timed("fleet_bump", timeout, call).await.map(|_| ())
    }

    /// Reads the whole table, or with `segment = Some((n, total))` its segment `n` of a
    /// parallel scan of `total` (paginated; eventually consistent unless `consistent`: it only
    /// hints at candidates; conditional writes decide). Each page has its own `page_timeout`.
    /// A failed or timed-out page is retried from its own start key (`LastEvaluatedKey` of the
    /// page before) up to [`SCAN_PAGE_RETRIES`] times with backoff, keeping the pages already
    /// read: under throttling, discovery must not fail exactly when the table is busy.
    /// Malformed items are logged and skipped, reserved items ([`lease_table::is_reserved`])
    /// ignored.
    pub async fn scan(
        &self,
        page_timeout: Duration,
        consistent: bool,
        segment: Option<(usize, usize)>,
    ) -> Result<ScanView, CallError> {
        let mut view = ScanView::default();
        let table = self.table.clone();
        self.scan_pages("scan", &table, page_timeout, consistent, segment, |raw| {
            if matches!(raw.get(lease_table::attr::STREAM_ID), Some(AttributeValue::S(id)) if lease_table::is_reserved(id))
            {
                return;
            }
            let item = match LeaseItem::from_item(raw) {
                Ok(item) => item,
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a malformed lease item");
                    return;
                }
            };
            if let (Some(AttributeValue::S(bidder)), Some(AttributeValue::N(at))) =
                (raw.get(BID_OWNER), raw.get(BID_AT))
            {
                if let Ok(at) = at.parse::<i64>() {
                    view.bids.push(Bid {
                        stream_id: item.stream_id.clone(),
                        bidder: bidder.clone(),
                        at,
                    });
                }
            }
            view.items.push(item);
        })
        .await?;
        Ok(view)
    }

    /// Reads one stream's item (one consistent `GetItem`), outside the congestion window (it is
    /// a read); `None` when the stream has no item.
    pub async fn get(
        &self,
        stream_id: &str,
        timeout: Duration,
    ) -> Result<Option<LeaseItem>, CallError> {
        self.read("get", timeout, self.get_item(stream_id)).await
    }

    /// One consistent `GetItem` of `stream_id`, unbounded and uncounted (the caller times it).
    async fn get_item(&self, stream_id: &str) -> Result<Option<LeaseItem>, OpError> {
        lease_table::get(&self.client, &self.table, stream_id)
            .await
            .map_err(|e| OpError {
                op: "get",
                stream_id: stream_id.to_string(),
                kind: ErrorKind::Other,
                message: e.to_string(),
            })
    }

    /// A read (`op`) bounded by `timeout` and counted, outside the congestion window (which
    /// paces lease writes).
    async fn read<T>(
        &self,
        op: &'static str,
        timeout: Duration,
        call: impl std::future::Future<Output = Result<T, OpError>>,
    ) -> Result<T, CallError> {
        let result = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(CallError::Failed(e)),
            Err(_) => Err(CallError::Timeout { op, after: timeout }),
        };
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        self.metrics.dynamodb(op, outcome);
        result
    }

    /// Every page of a scan of `table` (see [`LeaseTable::scan`]), each item handed to `each`.
    async fn scan_pages(
        &self,
        op: &'static str,
        table: &str,
        page_timeout: Duration,
        consistent: bool,
        segment: Option<(usize, usize)>,
        mut each: impl FnMut(&std::collections::HashMap<String, AttributeValue>),
    ) -> Result<(), CallError> {
        let mut start_key = None;
        let mut retries = 0;
        let mut kept = 0;
        loop {
            let page = match self
                .scan_page(
                    op,
                    table,
                    page_timeout,
                    consistent,
                    segment,
                    start_key.clone(),
                )
                .await
            {
                Ok(page) => page,
                Err(e) if retries < SCAN_PAGE_RETRIES => {
                    let delay =
                        SCAN_RETRY_BACKOFF.delay(retries, 0.5 + 0.5 * rand::random::<f64>());
                    retries += 1;
                    tracing::debug!(error = %e, retry = retries, delay_ms = delay.as_millis() as u64, pages_kept = kept, "scan page failed; retrying it from its start key");
                    tokio::time::sleep(delay).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            kept += 1;
            page.items().iter().for_each(&mut each);
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start_key = Some(key.clone()),
                _ => return Ok(()),
            }
        }
    }

    /// One scan page of `table` from `start_key`, counted under `op`.
    async fn scan_page(
        &self,
        op: &'static str,
        table: &str,
        page_timeout: Duration,
        consistent: bool,
        segment: Option<(usize, usize)>,
        start_key: Option<std::collections::HashMap<String, AttributeValue>>,
    ) -> Result<aws_sdk_dynamodb::operation::scan::ScanOutput, CallError> {
        let mut request = self
            .client
            .scan()
            .table_name(table)
            .consistent_read(consistent)
            .set_exclusive_start_key(start_key);
        if let Some((n, total)) = segment.filter(|(_, total)| *total > 1) {
            request = request.segment(n as i32).total_segments(total as i32);
        }
        let call = async {
            request.send().await.map_err(|e| OpError {
                op,
                stream_id: String::new(),
                kind: ops::error_kind(e.as_service_error().and_then(|s| s.code())),
                message: aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string(),
            })
        };
        self.read(op, page_timeout, call).await
    }

    /// An `UpdateItem` of `stream_id`'s lease item.
    fn update(
        &self,
        stream_id: &str,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client.update_item().table_name(&*self.table).key(
            lease_table::attr::STREAM_ID,
            AttributeValue::S(stream_id.to_string()),
        )
    }

    /// Records a dead-lettered range on the stream's item, conditioned on holding it.
    pub async fn note_skipped(
        &self,
        stream_id: &str,
        fence: u64,
        (first, through): (u64, u64),
        count: u64,
    ) -> Result<Outcome<()>, CallError> {
        let now = lease_table::now_ms();
        let call = async {
            let result = self
                .update(stream_id)
                .update_expression("SET #r = :range, updated_at = :now ADD #n :count")
                .condition_expression("owner_id = :me AND fence_token = :token")
                .expression_attribute_names("#r", DEAD_LETTER_RANGE)
                .expression_attribute_names("#n", DEAD_LETTER_EVENTS)
                .expression_attribute_values(
                    ":range",
                    AttributeValue::S(format!("{first}-{through}")),
                )
                .expression_attribute_values(":count", AttributeValue::N(count.to_string()))
                .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
                .expression_attribute_values(":me", AttributeValue::S(self.owner_id.to_string()))
                .expression_attribute_values(":token", AttributeValue::N(fence.to_string()))
                .send()
                .await;
            ops::done_or_refused("note_skipped", stream_id, result)
        };
        self.timed("note_skipped", AWS_CALL_TIMEOUT, call).await
    }

    /// Records this worker's bid on a stream someone else holds (one conditional write).
    pub async fn bid(&self, stream_id: &str, timeout: Duration) -> Result<Outcome<()>, CallError> {
        let now = lease_table::now_ms();
        let call = async {
            let result = self
                .update(stream_id)
                .update_expression("SET #bo = :me, #ba = :now")
                .condition_expression("attribute_exists(owner_id) AND owner_id <> :me")
                .expression_attribute_names("#bo", BID_OWNER)
                .expression_attribute_names("#ba", BID_AT)
                .expression_attribute_values(":me", AttributeValue::S(self.owner_id.to_string()))
                .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
                .send()
                .await;
            ops::done_or_refused("bid", stream_id, result)
        };
        self.timed("bid", timeout, call).await
    }
}

mod members;
