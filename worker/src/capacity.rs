//! What the worker's DynamoDB requests cost, in capacity units, counted as DynamoDB reports it:
//! an SDK interceptor asks every `UpdateItem`, `Scan` and `GetItem` for its consumed capacity
//! (`ReturnConsumedCapacity = TOTAL`, a few bytes more per answer) and adds the answer to
//! `lease_worker_dynamodb_capacity_units_total{api, kind, table}` (`table`: `leases`, or
//! `members` for the membership table of segmented discovery, whose reads grow with the fleet
//! rather than with the streams — the scale bench prices the two apart).
//!
//! A refused conditional write is charged by DynamoDB (1 write unit for an item under 1 KB, as
//! every lease item is) but its error does not say so: it is counted as 1 unit. Requests that
//! time out or fail are not counted (their cost, if any, is unknown).
//!
//! One place for every call, present and future: the lease writes in `lease_table::ops` stay
//! free of metrics.

use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextMut,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::get_item::{GetItemInput, GetItemOutput};
use aws_sdk_dynamodb::operation::scan::{ScanInput, ScanOutput};
use aws_sdk_dynamodb::operation::update_item::{
    UpdateItemError, UpdateItemInput, UpdateItemOutput,
};
use aws_sdk_dynamodb::types::{ConsumedCapacity, ReturnConsumedCapacity};

use crate::metrics::Metrics;

/// Units charged for a refused conditional write of an item under 1 KB (DynamoDB bills the
/// write it did not make; its error does not carry `ConsumedCapacity`).
pub const REFUSED_WRITE_UNITS: f64 = 1.0;

/// Read or write units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}

impl Kind {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
        }
    }
}

/// The units one answer reports: its API, whether reads or writes, how many.
pub fn units(
    api: &'static str,
    consumed: Option<&ConsumedCapacity>,
) -> Option<(&'static str, Kind, f64)> {
    let kind = match api {
        "UpdateItem" => Kind::Write,
        "Scan" | "GetItem" => Kind::Read,
        _ => return None,
    };
    let c = consumed?;
    let n = c.capacity_units().or(match kind {
        Kind::Read => c.read_capacity_units(),
        Kind::Write => c.write_capacity_units(),
    })?;
    Some((api, kind, n))
}

/// The `table` label of an answer's units: `members` when it names `members_table`.
pub fn table_label(
    consumed: Option<&ConsumedCapacity>,
    members_table: Option<&str>,
) -> &'static str {
    match (consumed.and_then(|c| c.table_name()), members_table) {
        (Some(table), Some(members)) if table == members => "members",
        _ => "leases",
    }
}

/// The interceptor: asks for consumed capacity and counts it.
#[derive(Clone)]
pub struct CapacityMeter {
    metrics: Arc<Metrics>,
    /// Segmented discovery's membership table (its units are labelled apart).
    members_table: Option<String>,
}

impl std::fmt::Debug for CapacityMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapacityMeter")
    }
}

impl CapacityMeter {
    pub fn new(metrics: Arc<Metrics>, members_table: Option<String>) -> Self {
        CapacityMeter {
            metrics,
            members_table,
        }
    }
}

impl Intercept for CapacityMeter {
    fn name(&self) -> &'static str {
        "CapacityMeter"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input_mut();
        let total = Some(ReturnConsumedCapacity::Total);
        if let Some(i) = input.downcast_mut::<UpdateItemInput>() {
            i.return_consumed_capacity = total;
        } else if let Some(i) = input.downcast_mut::<ScanInput>() {
            i.return_consumed_capacity = total;
        } else if let Some(i) = input.downcast_mut::<GetItemInput>() {
            i.return_consumed_capacity = total;
        }
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let members = self.members_table.as_deref();
        let counted = match context.output_or_error() {
            Ok(out) => {
                let (api, consumed) = if let Some(o) = out.downcast_ref::<UpdateItemOutput>() {
                    ("UpdateItem", o.consumed_capacity())
                } else if let Some(o) = out.downcast_ref::<ScanOutput>() {
                    ("Scan", o.consumed_capacity())
                } else if let Some(o) = out.downcast_ref::<GetItemOutput>() {
                    ("GetItem", o.consumed_capacity())
                } else {
                    ("", None)
                };
                units(api, consumed).map(|u| (u, table_label(consumed, members)))
            }
            // Only lease writes are conditional.
            Err(e) => e
                .as_operation_error()
                .and_then(|e| e.downcast_ref::<UpdateItemError>())
                .filter(|e| e.is_conditional_check_failed_exception())
                .map(|_| (("UpdateItem", Kind::Write, REFUSED_WRITE_UNITS), "leases")),
        };
        if let Some(((api, kind, n), table)) = counted {
            self.metrics.capacity(api, kind.label(), table, n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_the_total_or_the_kind_and_nothing_else() {
        let total = ConsumedCapacity::builder().capacity_units(2.5).build();
        assert_eq!(units("Scan", Some(&total)), Some(("Scan", Kind::Read, 2.5)));
        let split = ConsumedCapacity::builder()
            .write_capacity_units(1.0)
            .build();
        assert_eq!(
            units("UpdateItem", Some(&split)),
            Some(("UpdateItem", Kind::Write, 1.0))
        );
        assert_eq!(units("GetItem", None), None);
        assert_eq!(units("PutItem", Some(&total)), None);
        assert_eq!(
            units("GetItem", Some(&ConsumedCapacity::builder().build())),
            None
        );
    }

    #[test]
    fn the_membership_tables_units_are_labelled_apart() {
        let on = |t: &str| {
            ConsumedCapacity::builder()
                .table_name(t)
                .capacity_units(1.0)
                .build()
        };
        let members = Some("leases-members");
        assert_eq!(table_label(Some(&on("leases-members")), members), "members");
        assert_eq!(table_label(Some(&on("leases")), members), "leases");
        assert_eq!(table_label(Some(&on("leases-members")), None), "leases");
        assert_eq!(table_label(None, members), "leases");
    }
}
