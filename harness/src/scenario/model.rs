//! The scenario model: the validated plan a run follows — lease timing, fleet, upstream, run
//! phases, the fault schedule and the expectations — in milliseconds and typed values.

use std::collections::BTreeMap;
use std::fmt;

use crate::worker_id::worker_name;

/// A validated scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub lease: Lease,
    pub fleet: Fleet,
    pub upstream: Upstream,
    /// False runs the sink without fencing (to show what fencing prevents).
    pub fencing: bool,
    pub run: RunTimes,
    pub faults: Vec<Fault>,
    pub expectations: Vec<Expectation>,
    /// The TOML text it was parsed from, exactly (recorded with the run).
    pub source: String,
}

/// Lease timing handed to every worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub lease_ms: u64,
    pub renew_ms: u64,
    pub skew_margin_ms: u64,
}

/// The fleet of worker processes.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub workers: usize,
    pub max_streams: Option<usize>,
    pub drain_ms: Option<u64>,
    pub scan_ms: Option<u64>,
    pub acquire_mode: Option<String>,
    pub env: BTreeMap<String, String>,
    pub worker_env: BTreeMap<String, BTreeMap<String, String>>,
}

/// The in-process upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Upstream {
    pub streams: usize,
    pub rate: f64,
    pub payload_bytes: usize,
    pub retention: usize,
    pub stream_prefix: String,
}

/// Phases of the run, in milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct RunTimes {
    pub warmup_ms: u64,
    pub duration_ms: u64,
    pub settle_timeout_ms: u64,
    pub seed: u64,
}

/// One scheduled fault, `at_ms` after the warm-up ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub at_ms: u64,
    pub action: FaultAction,
    /// Line of the fault in the file, for messages.
    pub line: usize,
}

/// What a fault does.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction {
    /// SIGKILL the target's process group.
    Kill { target: Target },
    /// SIGSTOP, then SIGCONT after `duration_ms`.
    Pause { target: Target, duration_ms: u64 },
    /// SIGTERM, then SIGKILL if still alive after `stop_timeout_ms`.
    Terminate {
        target: Target,
        stop_timeout_ms: u64,
    },
    /// Scale out by `count` new workers.
    Start { count: usize },
    /// Replace every running worker, ECS-style.
    RollingDeploy {
        minimum_healthy_percent: u32,
        maximum_percent: u32,
        stop_timeout_ms: u64,
    },
    /// A fault from the menu beyond signals: links, DynamoDB, clocks, upstream, sink.
    Menu(super::menu::MenuAction),
}

impl FaultAction {
    /// The action's name as written in the file.
    pub fn name(&self) -> &'static str {
        match self {
            FaultAction::Kill { .. } => "kill",
            FaultAction::Pause { .. } => "pause",
            FaultAction::Terminate { .. } => "terminate",
            FaultAction::Start { .. } => "start",
            FaultAction::RollingDeploy { .. } => "rolling_deploy",
            FaultAction::Menu(m) => m.name(),
        }
    }
}

/// Which worker a fault hits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `worker-N`.
    Worker(usize),
    /// A running worker drawn from the seeded generator.
    Random,
    /// The running worker owning most streams at that instant.
    Busiest,
    /// Every running worker (fault-menu actions only).
    All,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Worker(n) => write!(f, "{}", worker_name(*n)),
            Target::Random => f.write_str("random"),
            Target::Busiest => f.write_str("busiest"),
            Target::All => f.write_str("all"),
        }
    }
}

/// Comparison of an expectation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    pub(super) fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "==" | "=" => Op::Eq,
            "!=" => Op::Ne,
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            ">=" => Op::Ge,
            _ => return None,
        })
    }

    /// The operator as written in reports.
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }

    /// `actual OP threshold`.
    pub fn holds(self, actual: f64, threshold: f64) -> bool {
        match self {
            Op::Eq => actual == threshold,
            Op::Ne => actual != threshold,
            Op::Lt => actual < threshold,
            Op::Le => actual <= threshold,
            Op::Gt => actual > threshold,
            Op::Ge => actual >= threshold,
        }
    }
}

/// An expectation on a `report.json` metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    pub name: String,
    pub metric: String,
    pub op: Op,
    /// The threshold as written.
    pub threshold_expr: String,
    /// Its value, evaluated against the scenario when it loaded.
    pub threshold: f64,
}
