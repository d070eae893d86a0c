//! What the worker's DynamoDB requests cost, in capacity units, counted as DynamoDB reports it:
//! an SDK interceptor asks every `UpdateItem`, `Scan` and `GetItem` for its consumed capacity
//! (`ReturnConsumedCapacity = TOTAL`, a few bytes more per answer) and adds the answer to
//! `lease_worker_dynamodb_capacity_units_total{api, kind}`.
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

/// The interceptor: asks for consumed capacity and counts it.
#[derive(Clone)]
pub struct CapacityMeter {
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for CapacityMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapacityMeter")
    }
}

impl CapacityMeter {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        CapacityMeter { metrics }
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
        let counted = match context.output_or_error() {
            Ok(out) => {
                if let Some(o) = out.downcast_ref::<UpdateItemOutput>() {
                    units("UpdateItem", o.consumed_capacity())
                } else if let Some(o) = out.downcast_ref::<ScanOutput>() {
                    units("Scan", o.consumed_capacity())
                } else if let Some(o) = out.downcast_ref::<GetItemOutput>() {
                    units("GetItem", o.consumed_capacity())
                } else {
                    None
                }
            }
            Err(e) => e
                .as_operation_error()
                .and_then(|e| e.downcast_ref::<UpdateItemError>())
                .filter(|e| e.is_conditional_check_failed_exception())
                .map(|_| ("UpdateItem", Kind::Write, REFUSED_WRITE_UNITS)),
        };
        if let Some((api, kind, n)) = counted {
            self.metrics.capacity(api, kind.label(), n);
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
}
