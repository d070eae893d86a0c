//! The four conditional lease writes of design §2 (acquire, renew, checkpoint, release), as the
//! source design's `lease_demo.py` writes them (so both programs can contend over one table),
//! plus conditions that keep the lease expiry and the checkpoint monotone under late-applied
//! writes; these only narrow what this side writes.
//!
//! Each function is one `UpdateItem` and reports a refused condition as [`Outcome::Refused`]
//! (with the item as it was, when DynamoDB returns it), never as an error. Timeouts, retries and
//! metrics belong to the caller; these functions never retry and never read a clock.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use crate::{attr, LeaseItem};

/// What a conditional write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T> {
    /// The condition held and the write was applied.
    Done(T),
    /// The condition failed; `current` is the item as DynamoDB saw it, when it said.
    Refused { current: Option<LeaseItem> },
}

/// Broad class of a failed call, for retry decisions and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Throttling or capacity errors: back off and retry.
    Throttled,
    /// Anything else (network, 5xx, validation): the caller decides.
    Other,
}

/// A lease write that failed for a reason other than its condition.
#[derive(Debug, Clone, thiserror::Error)]
#[error("DynamoDB {op} of stream {stream_id:?} failed: {message}")]
pub struct OpError {
    pub op: &'static str,
    pub stream_id: String,
    pub kind: ErrorKind,
    pub message: String,
}

/// Who writes, and the fencing token they hold.
#[derive(Debug, Clone, Copy)]
pub struct Holder<'a> {
    pub owner_id: &'a str,
    pub fence_token: u64,
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

/// Acquires `stream_id` for `owner_id` until `now_ms + lease_ms`, bumping the fence token.
///
/// Condition (design §2): the item exists, and it is free, or its lease expired before
/// `now_ms - skew_ms`, or it is already ours. Returns the item as written (new fence token,
/// checkpoint left by the previous owner).
pub async fn acquire(
    client: &Client,
    table: &str,
    stream_id: &str,
    owner_id: &str,
    lease_ms: i64,
    now_ms: i64,
    skew_ms: i64,
) -> Result<Outcome<LeaseItem>, OpError> {
    acquire_when(
        client,
        table,
        stream_id,
        owner_id,
        None,
        lease_ms,
        now_ms,
        Some(skew_ms),
        None,
    )
    .await
}

/// A held lease exactly as a worker observed it (owner, fence, expiry): [`acquire_observed`]
/// may take it while the item is still exactly so (a compare-and-swap on the observed state, as
/// the Kinesis Client Library does; a renewal in between changes the expiry and refuses it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub owner_id: String,
    pub fence_token: u64,
    pub lease_expires_at: i64,
}

/// Acquire on observation alone, never on a wall clock: allowed when the item is free, already
/// ours (`owner_id` = `owner_id` and, when the item names one, the same `instance`), or still
/// exactly as `seen`. Writes `owner_instance = instance`. Narrower than the design's condition
/// (every write it lets through, the design's would too, given the caller judged `seen` expired):
/// the expiry clause compares another worker's wall clock with this one's, so a worker whose
/// clock runs behind writes leases that look expired the moment they land and any worker may
/// take them — a zombie by skew. And "ours" by name alone would let a second live process under
/// the same `owner_id` take the first one's leases at once, and the first take them back.
/// `lease-worker` acquires this way; it judges expiry itself, skew-tolerantly (an item unchanged
/// for long enough on its own monotonic clock), and the compare-and-swap on `seen` makes that
/// judgement safe.
#[allow(clippy::too_many_arguments)]
pub async fn acquire_observed(
    client: &Client,
    table: &str,
    stream_id: &str,
    owner_id: &str,
    instance: &str,
    lease_ms: i64,
    now_ms: i64,
    seen: Option<&Seen>,
) -> Result<Outcome<LeaseItem>, OpError> {
    acquire_when(
        client,
        table,
        stream_id,
        owner_id,
        Some(instance),
        lease_ms,
        now_ms,
        None,
        seen,
    )
    .await
}

/// The acquire write: allowed when free, ours (with `instance`: and, if the item names an
/// instance, that one), exactly as `seen` (when given) or, with `skew_ms`, expired before
/// `now_ms - skew_ms` on the caller's clock.
#[allow(clippy::too_many_arguments)]
async fn acquire_when(
    client: &Client,
    table: &str,
    stream_id: &str,
    owner_id: &str,
    instance: Option<&str>,
    lease_ms: i64,
    now_ms: i64,
    skew_ms: Option<i64>,
    seen: Option<&Seen>,
) -> Result<Outcome<LeaseItem>, OpError> {
    let mut condition =
        String::from("attribute_exists(stream_id) AND (attribute_not_exists(owner_id)");
    condition.push_str(match instance {
        Some(_) => {
            " OR (owner_id = :me AND (attribute_not_exists(owner_instance) OR owner_instance = :inst))"
        }
        None => " OR owner_id = :me",
    });
    if skew_ms.is_some() {
        condition.push_str(" OR lease_expires_at < :cutoff");
    }
    if seen.is_some() {
        condition.push_str(
            " OR (owner_id = :seen_owner AND fence_token = :seen_fence \
             AND lease_expires_at = :seen_expires)",
        );
    }
    condition.push(')');
    let mut request = client
        .update_item()
        .table_name(table)
        .key(attr::STREAM_ID, s(stream_id))
        .update_expression(match instance {
            Some(_) => {
                "SET owner_id = :me, owner_instance = :inst, lease_expires_at = :expires, \
                 fence_token = if_not_exists(fence_token, :zero) + :one, updated_at = :now"
            }
            // Another client: any instance a lease-worker left is no longer the holder's.
            None => {
                "SET owner_id = :me, lease_expires_at = :expires, \
                 fence_token = if_not_exists(fence_token, :zero) + :one, updated_at = :now \
                 REMOVE owner_instance"
            }
        })
        .condition_expression(condition)
        .expression_attribute_values(":me", s(owner_id))
        .expression_attribute_values(":expires", n(now_ms + lease_ms))
        .expression_attribute_values(":zero", n(0))
        .expression_attribute_values(":one", n(1))
        .expression_attribute_values(":now", n(now_ms))
        .return_values(ReturnValue::AllNew)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    if let Some(skew_ms) = skew_ms {
        request = request.expression_attribute_values(":cutoff", n(now_ms - skew_ms));
    }
    if let Some(instance) = instance {
        request = request.expression_attribute_values(":inst", s(instance));
    }
    if let Some(seen) = seen {
        request = request
            .expression_attribute_values(":seen_owner", s(&seen.owner_id))
            .expression_attribute_values(":seen_fence", n(seen.fence_token))
            .expression_attribute_values(":seen_expires", n(seen.lease_expires_at));
    }
    let result = request.send().await;
    match result {
        Ok(out) => {
            let item = out.attributes().ok_or_else(|| OpError {
                op: "acquire",
                stream_id: stream_id.to_string(),
                kind: ErrorKind::Other,
                message: "UpdateItem returned no attributes".into(),
            })?;
            let item = LeaseItem::from_item(item).map_err(|e| OpError {
                op: "acquire",
                stream_id: stream_id.to_string(),
                kind: ErrorKind::Other,
                message: e.to_string(),
            })?;
            Ok(Outcome::Done(item))
        }
        Err(err) => refused_or_error("acquire", stream_id, err),
    }
}

/// Extends the lease to `now_ms + lease_ms`, and persists `checkpoint` in the same write when
/// given (the coalesced renewal). Condition: ours, same token, not yet expired at `now_ms`, and
/// monotone: the new expiry is not before the stored one, the new checkpoint not below the
/// stored one. A renewal that timed out at the client and is applied after its successor is
/// therefore refused instead of moving the lease (or the checkpoint) back, which would let the
/// table grant the stream to another worker while this one's local deadline (computed from the
/// successor) still lets it publish. `lease_demo.py` never reads these extra conditions; they
/// only narrow what this worker writes.
pub async fn renew(
    client: &Client,
    table: &str,
    stream_id: &str,
    holder: Holder<'_>,
    lease_ms: i64,
    now_ms: i64,
    checkpoint: Option<u64>,
) -> Result<Outcome<()>, OpError> {
    renew_until(
        client,
        table,
        stream_id,
        holder,
        now_ms,
        now_ms + lease_ms,
        checkpoint,
    )
    .await
}

/// [`renew`] with the expiry given: `lease_expires_at = expires_ms` under the same conditions
/// (ours, same token, not expired at `now_ms`, never moved back). The worker carries its expiry
/// forward on its monotonic clock, so a wall clock that steps back still renews.
pub async fn renew_until(
    client: &Client,
    table: &str,
    stream_id: &str,
    holder: Holder<'_>,
    now_ms: i64,
    expires_ms: i64,
    checkpoint: Option<u64>,
) -> Result<Outcome<()>, OpError> {
    let mut update = String::from("SET lease_expires_at = :expires, updated_at = :now");
    let mut condition = String::from(
        "owner_id = :me AND fence_token = :token AND lease_expires_at >= :now \
         AND lease_expires_at <= :expires",
    );
    if checkpoint.is_some() {
        update.push_str(", checkpoint = :cp");
        condition.push_str(CHECKPOINT_NOT_BACK);
    }
    let mut request = held_write(client, table, stream_id, holder, update, condition, now_ms)
        .expression_attribute_values(":expires", n(expires_ms));
    if let Some(cp) = checkpoint {
        request = request.expression_attribute_values(":cp", n(cp));
    }
    let result = request.send().await;
    done_or_refused("renew", stream_id, result)
}

/// Appended to a write's condition when it carries a checkpoint: the stored checkpoint never
/// moves back (a late-applied write under the same token carries an older one).
const CHECKPOINT_NOT_BACK: &str = " AND (attribute_not_exists(checkpoint) OR checkpoint <= :cp)";

/// Persists `checkpoint` (last sequence accepted downstream). Condition: ours, same token, and
/// not below the stored checkpoint.
pub async fn checkpoint(
    client: &Client,
    table: &str,
    stream_id: &str,
    holder: Holder<'_>,
    checkpoint: u64,
    now_ms: i64,
) -> Result<Outcome<()>, OpError> {
    let result = held_write(
        client,
        table,
        stream_id,
        holder,
        "SET checkpoint = :cp, updated_at = :now",
        format!("owner_id = :me AND fence_token = :token{CHECKPOINT_NOT_BACK}"),
        now_ms,
    )
    .expression_attribute_values(":cp", n(checkpoint))
    .send()
    .await;
    done_or_refused("checkpoint", stream_id, result)
}

/// Frees the stream for immediate takeover: removes `owner_id` and `lease_expires_at`, keeps
/// `fence_token`, and writes a final `checkpoint` when given. Condition: ours, same token.
pub async fn release(
    client: &Client,
    table: &str,
    stream_id: &str,
    holder: Holder<'_>,
    checkpoint: Option<u64>,
    now_ms: i64,
) -> Result<Outcome<()>, OpError> {
    let update = if checkpoint.is_some() {
        "SET updated_at = :now, checkpoint = :cp REMOVE owner_id, lease_expires_at, owner_instance"
    } else {
        "SET updated_at = :now REMOVE owner_id, lease_expires_at, owner_instance"
    };
    let mut request = held_write(
        client,
        table,
        stream_id,
        holder,
        update,
        "owner_id = :me AND fence_token = :token",
        now_ms,
    );
    if let Some(cp) = checkpoint {
        request = request.expression_attribute_values(":cp", n(cp));
    }
    let result = request.send().await;
    done_or_refused("release", stream_id, result)
}

/// The `UpdateItem` of a lease `holder` writes to `stream_id` at `now_ms`: `:me`, `:token` and
/// `:now` bound for `update` and `condition`, and the item asked back when the condition refuses.
fn held_write(
    client: &Client,
    table: &str,
    stream_id: &str,
    holder: Holder<'_>,
    update: impl Into<String>,
    condition: impl Into<String>,
    now_ms: i64,
) -> UpdateItemFluentBuilder {
    client
        .update_item()
        .table_name(table)
        .key(attr::STREAM_ID, s(stream_id))
        .update_expression(update)
        .condition_expression(condition)
        .expression_attribute_values(":me", s(holder.owner_id))
        .expression_attribute_values(":token", n(holder.fence_token))
        .expression_attribute_values(":now", n(now_ms))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
}

/// The fleet signal as read from [`crate::FLEET_ITEM`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetSignal {
    /// Bumped after releases; a change means "free streams may be waiting: scan now".
    pub generation: u64,
    /// Owners that are draining or drained: they still hold leases but will release them all
    /// shortly, or are gone (their last bids may still look fresh). Not live owners. A drained
    /// owner is removed by any worker that sees it hold nothing and bid nothing any more.
    pub draining: Vec<String>,
}

/// Attribute names of the fleet item.
pub mod fleet_attr {
    pub const GENERATION: &str = "generation";
    pub const DRAINING: &str = "draining";
}

/// Bumps the fleet generation by one (creating the item if needed) and optionally adds
/// `owner_id` to the draining set (`Some(true)`) or removes it (`Some(false)`). One
/// unconditional `UpdateItem`.
pub async fn fleet_bump(
    client: &Client,
    table: &str,
    owner_id: &str,
    draining: Option<bool>,
    now_ms: i64,
) -> Result<(), OpError> {
    let update = match draining {
        None => "ADD #g :one SET updated_at = :now",
        Some(true) => "ADD #g :one, #d :owners SET updated_at = :now",
        Some(false) => "ADD #g :one DELETE #d :owners SET updated_at = :now",
    };
    fleet_update(
        client,
        table,
        update,
        (draining.is_some()).then_some(&[owner_id.to_string()][..]),
        now_ms,
    )
    .await
}

/// Removes `owners` (drained and gone) from the draining set without bumping the generation.
pub async fn fleet_forget(
    client: &Client,
    table: &str,
    owners: &[String],
    now_ms: i64,
) -> Result<(), OpError> {
    if owners.is_empty() {
        return Ok(());
    }
    fleet_update(
        client,
        table,
        "DELETE #d :owners SET updated_at = :now",
        Some(owners),
        now_ms,
    )
    .await
}

async fn fleet_update(
    client: &Client,
    table: &str,
    update: &str,
    owners: Option<&[String]>,
    now_ms: i64,
) -> Result<(), OpError> {
    // Every write re-marks the item as reserved (see `crate::RESERVED_OWNER`), so a table whose
    // fleet item predates the mark gets it with the next signal.
    let update = format!("{update}, #o = :reserved, #e = :forever");
    let mut request = client
        .update_item()
        .table_name(table)
        .key(attr::STREAM_ID, s(crate::FLEET_ITEM))
        .update_expression(update.as_str())
        .expression_attribute_values(":now", n(now_ms))
        .expression_attribute_names("#o", attr::OWNER_ID)
        .expression_attribute_names("#e", attr::LEASE_EXPIRES_AT)
        .expression_attribute_values(":reserved", s(crate::RESERVED_OWNER))
        .expression_attribute_values(":forever", n(crate::RESERVED_EXPIRES_AT));
    if update.contains("#g") {
        request = request
            .expression_attribute_names("#g", fleet_attr::GENERATION)
            .expression_attribute_values(":one", n(1));
    }
    if let Some(owners) = owners {
        request = request
            .expression_attribute_names("#d", fleet_attr::DRAINING)
            .expression_attribute_values(":owners", AttributeValue::Ss(owners.to_vec()));
    }
    match request.send().await {
        Ok(_) => Ok(()),
        Err(err) => refused_or_error::<()>("fleet_update", crate::FLEET_ITEM, err).map(|_| ()),
    }
}

/// Reads the fleet signal with one eventually consistent `GetItem` (absent item = generation 0).
pub async fn fleet_read(client: &Client, table: &str) -> Result<FleetSignal, OpError> {
    let out = client
        .get_item()
        .table_name(table)
        .key(attr::STREAM_ID, s(crate::FLEET_ITEM))
        .send()
        .await
        .map_err(|err| {
            let kind = error_kind(err.as_service_error().and_then(|e| e.code()));
            OpError {
                op: "fleet_read",
                stream_id: crate::FLEET_ITEM.to_string(),
                kind,
                message: DisplayErrorContext(err).to_string(),
            }
        })?;
    let mut signal = FleetSignal::default();
    if let Some(item) = out.item() {
        if let Some(AttributeValue::N(g)) = item.get(fleet_attr::GENERATION) {
            signal.generation = g.parse().unwrap_or(0);
        }
        if let Some(AttributeValue::Ss(set)) = item.get(fleet_attr::DRAINING) {
            signal.draining = set.clone();
        }
    }
    Ok(signal)
}

/// A conditional `UpdateItem`'s result as an [`Outcome`]: done, refused by its condition (with
/// the item when the request asked for it back), or an error naming `op` and the stream, its
/// kind classified (throttling, timeouts, other).
pub fn done_or_refused<O>(
    op: &'static str,
    stream_id: &str,
    result: Result<O, SdkError<UpdateItemError>>,
) -> Result<Outcome<()>, OpError> {
    match result {
        Ok(_) => Ok(Outcome::Done(())),
        Err(err) => refused_or_error(op, stream_id, err),
    }
}

fn refused_or_error<T>(
    op: &'static str,
    stream_id: &str,
    err: SdkError<UpdateItemError>,
) -> Result<Outcome<T>, OpError> {
    if let Some(UpdateItemError::ConditionalCheckFailedException(e)) = err.as_service_error() {
        let current = e.item().and_then(|item| LeaseItem::from_item(item).ok());
        return Ok(Outcome::Refused { current });
    }
    let kind = error_kind(err.as_service_error().and_then(|e| e.code()));
    Err(OpError {
        op,
        stream_id: stream_id.to_string(),
        kind,
        message: DisplayErrorContext(err).to_string(),
    })
}

/// The kind of a failed request from its error code: throttling (the table or the account
/// asked the caller to slow down) or anything else.
pub fn error_kind(code: Option<&str>) -> ErrorKind {
    match code {
        Some(c) if c.contains("Throttl") => ErrorKind::Throttled,
        Some(
            "ProvisionedThroughputExceededException"
            | "RequestLimitExceeded"
            | "LimitExceededException",
        ) => ErrorKind::Throttled,
        _ => ErrorKind::Other,
    }
}
