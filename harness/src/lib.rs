//! The lease-failover harness: runs a scenario against real `lease-worker` processes, DynamoDB
//! Local, an in-process upstream and a fencing sink, and judges the recorded history.
//!
//! Data flows one way: upstream → worker → [`sink`] → [`history`] → [`analysis`] →
//! [`report_json`]. The analysis reads only the recorded history, never live state.

pub mod analysis;
pub mod batch;
pub mod bench;
pub mod campaign;
pub mod chart_kit;
pub mod cli;
pub mod cost;
pub mod expect;
pub mod faults;
pub mod fleet;
pub mod history;
pub mod lease_log;
pub mod report;
pub mod report_json;
pub mod run;
pub mod scenario;
pub mod sink;
pub mod usage;
pub mod worker_id;
