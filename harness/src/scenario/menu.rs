//! The fault menu beyond signals (design §10): link faults through a per-worker proxy, DynamoDB
//! HTTP faults, clock faults, upstream and sink faults. Each is a plain data value with a TOML
//! form (one `[[faults]]` table), so a campaign can generate them as easily as a user writes
//! them. This module only checks and resolves them; `crate::faults` injects them.

use std::fmt;

use super::raw::{RawAction, RawFault};
use super::{parse_worker, RunTimes, ScenarioError, Target};

/// One of a worker's three network links (design §10 `link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Link {
    Dynamodb,
    Upstream,
    Sink,
}

impl Link {
    /// Every link, in a fixed order.
    pub const ALL: [Link; 3] = [Link::Dynamodb, Link::Upstream, Link::Sink];

    /// The name scenario files and `history.jsonl` use.
    pub fn name(self) -> &'static str {
        match self {
            Link::Dynamodb => "dynamodb",
            Link::Upstream => "upstream",
            Link::Sink => "sink",
        }
    }

    fn parse(s: &str) -> Option<Link> {
        Link::ALL.into_iter().find(|l| l.name() == s)
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which way of a link a fault hits, seen from the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Both ways.
    #[default]
    Both,
    /// Worker → server (requests, acks).
    Outbound,
    /// Server → worker (responses, frames).
    Inbound,
}

impl Direction {
    /// The name scenario files use.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Both => "both",
            Direction::Outbound => "outbound",
            Direction::Inbound => "inbound",
        }
    }

    /// True when the fault applies to bytes going `outbound` (else inbound).
    pub fn covers(self, outbound: bool) -> bool {
        match self {
            Direction::Both => true,
            Direction::Outbound => outbound,
            Direction::Inbound => !outbound,
        }
    }
}

/// A fault on the bytes of one link.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkFault {
    /// Every chunk held `latency_ms` plus a uniform draw in `0..=jitter_ms`.
    Latency {
        latency_ms: u64,
        jitter_ms: u64,
        direction: Direction,
    },
    /// At most `bytes_per_second` pass.
    Bandwidth {
        bytes_per_second: u64,
        direction: Direction,
    },
    /// Nothing passes (held, delivered after the heal as TCP would); new connections hang.
    Partition { direction: Direction },
    /// Every open connection closed with RST; new ones reset at once.
    Reset,
    /// Open connections go silent for good (no FIN, no RST, bytes dropped both ways); new ones
    /// hang until the heal and work after it.
    HalfOpen,
}

/// The DynamoDB errors a throttle answers with, with their real status and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdbError {
    Throttling,
    ProvisionedThroughputExceeded,
    InternalServerError,
}

impl DdbError {
    /// The error code as DynamoDB names it (and scenario files write it).
    pub fn code(self) -> &'static str {
        match self {
            DdbError::Throttling => "ThrottlingException",
            DdbError::ProvisionedThroughputExceeded => "ProvisionedThroughputExceededException",
            DdbError::InternalServerError => "InternalServerError",
        }
    }

    fn parse(s: &str) -> Option<DdbError> {
        [
            DdbError::Throttling,
            DdbError::ProvisionedThroughputExceeded,
            DdbError::InternalServerError,
        ]
        .into_iter()
        .find(|e| e.code() == s)
    }
}

/// A fault on DynamoDB requests (HTTP level, on the DynamoDB link), applied to `fraction` of
/// the requests of `operation` (every operation when `None`).
#[derive(Debug, Clone, PartialEq)]
pub struct DdbFault {
    pub kind: DdbFaultKind,
    pub fraction: f64,
    /// `UpdateItem`, `Scan`, … as in `X-Amz-Target`.
    pub operation: Option<String>,
}

/// What happens to a request a [`DdbFault`] picks.
#[derive(Debug, Clone, PartialEq)]
pub enum DdbFaultKind {
    /// Answered by the proxy with `error`; never reaches DynamoDB.
    Throttle { error: DdbError },
    /// Forwarded and applied; the response is dropped (the connection goes silent).
    Unanswered,
    /// Held `hold_ms`, then forwarded (even if the worker gave up on it meanwhile).
    LateApply { hold_ms: u64 },
}

/// Upstream faults, through mock-upstream's admin knobs.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamFault {
    /// Close the connections of one stream (every stream when `None`).
    Drop { stream: Option<String> },
    /// Stop production for `duration_ms`.
    Pause { duration_ms: u64 },
    /// `count` events are produced and lost with everything retained: the next read of the
    /// stream gets a gap notice.
    Gap { stream: String, count: u64 },
    /// The next sequence of `stream` is never sent, and no gap notice says so.
    Skip { stream: String },
}

/// Sink faults, answered by the in-process sink before it decides a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum SinkFault {
    /// `fraction` of batches answered with `status` (a 5xx).
    Error { status: u16, fraction: f64 },
    /// Every answer held `latency_ms`.
    Slow { latency_ms: u64 },
    /// `status` (a 4xx) for every batch of `stream` that contains `seq`.
    Poison {
        stream: String,
        seq: PoisonSeq,
        status: u16,
    },
}

/// Which event a `sink_poison` refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoisonSeq {
    /// This sequence number (`seq`).
    At(u64),
    /// This many past the stream's last produced seq when the fault is injected (`seq_ahead`).
    Ahead(u64),
}

impl PoisonSeq {
    /// The absolute seq, given the stream's last produced seq at injection.
    pub fn resolve(self, last_produced: u64) -> u64 {
        match self {
            PoisonSeq::At(seq) => seq,
            PoisonSeq::Ahead(n) => last_produced.saturating_add(n.max(1)),
        }
    }
}

/// The fault-menu part of [`super::FaultAction`].
#[derive(Debug, Clone, PartialEq)]
pub enum MenuAction {
    /// A link fault on the target's proxy; `duration_ms` `None` = until a `heal` or the end.
    Link {
        target: Target,
        link: Link,
        fault: LinkFault,
        duration_ms: Option<u64>,
    },
    /// A DynamoDB HTTP fault on the target's DynamoDB link.
    Dynamodb {
        target: Target,
        fault: DdbFault,
        duration_ms: Option<u64>,
    },
    /// Ends the target's link and DynamoDB faults (on one link, or all).
    Heal {
        target: Target,
        link: Option<Link>,
    },
    /// The target's wall clock runs `offset_ms` off from its start (the fault's `at_seconds`
    /// must be 0).
    Clock {
        target: Target,
        offset_ms: i64,
    },
    /// The target's wall clock jumps by `step_ms` (forward or back) mid-run.
    ClockStep {
        target: Target,
        step_ms: i64,
    },
    Upstream(UpstreamFault),
    /// A sink fault; `duration_ms` `None` = until the end of the run.
    Sink {
        fault: SinkFault,
        duration_ms: Option<u64>,
    },
}

impl MenuAction {
    /// The action's name as written in the file.
    pub fn name(&self) -> &'static str {
        match self {
            MenuAction::Link { fault, .. } => match fault {
                LinkFault::Latency { .. } => "latency",
                LinkFault::Bandwidth { .. } => "bandwidth",
                LinkFault::Partition { .. } => "partition",
                LinkFault::Reset => "reset",
                LinkFault::HalfOpen => "half_open",
            },
            MenuAction::Dynamodb { fault, .. } => match fault.kind {
                DdbFaultKind::Throttle { .. } => "throttle",
                DdbFaultKind::Unanswered => "unanswered",
                DdbFaultKind::LateApply { .. } => "late_apply",
            },
            MenuAction::Heal { .. } => "heal",
            MenuAction::Clock { .. } => "clock",
            MenuAction::ClockStep { .. } => "clock_step",
            MenuAction::Upstream(u) => match u {
                UpstreamFault::Drop { .. } => "upstream_drop",
                UpstreamFault::Pause { .. } => "upstream_pause",
                UpstreamFault::Gap { .. } => "upstream_gap",
                UpstreamFault::Skip { .. } => "upstream_skip",
            },
            MenuAction::Sink { fault, .. } => match fault {
                SinkFault::Error { .. } => "sink_error",
                SinkFault::Slow { .. } => "sink_slow",
                SinkFault::Poison { .. } => "sink_poison",
            },
        }
    }

    /// The link this action routes through a proxy, if any.
    pub fn proxied_link(&self) -> Option<Link> {
        match self {
            MenuAction::Link { link, .. } => Some(*link),
            MenuAction::Dynamodb { .. } => Some(Link::Dynamodb),
            _ => None,
        }
    }

    /// True for `clock` and `clock_step` (their workers run under libfaketime).
    pub fn is_clock(&self) -> bool {
        matches!(
            self,
            MenuAction::Clock { .. } | MenuAction::ClockStep { .. }
        )
    }
}

/// The fields each menu action takes (beyond `at_seconds` and `action`); `None` for the signal
/// actions `super` handles itself.
pub(super) fn fields(action: RawAction) -> Option<&'static [&'static str]> {
    let fields: &'static [&'static str] = match action {
        RawAction::Latency => &[
            "target",
            "link",
            "latency_ms",
            "jitter_ms",
            "direction",
            "duration_seconds",
        ],
        RawAction::Bandwidth => &[
            "target",
            "link",
            "bytes_per_second",
            "direction",
            "duration_seconds",
        ],
        RawAction::Partition => &["target", "link", "direction", "duration_seconds"],
        RawAction::Reset | RawAction::HalfOpen => &["target", "link", "duration_seconds"],
        RawAction::Heal => &["target", "link"],
        RawAction::Throttle => &[
            "target",
            "fraction",
            "operation",
            "error",
            "duration_seconds",
        ],
        RawAction::Unanswered => &["target", "fraction", "operation", "duration_seconds"],
        RawAction::LateApply => &[
            "target",
            "fraction",
            "operation",
            "hold_seconds",
            "duration_seconds",
        ],
        RawAction::Clock => &["target", "offset_ms"],
        RawAction::ClockStep => &["target", "step_ms"],
        RawAction::UpstreamDrop => &["stream"],
        RawAction::UpstreamPause => &["duration_seconds"],
        RawAction::UpstreamGap => &["stream", "count"],
        RawAction::UpstreamSkip => &["stream"],
        RawAction::SinkError => &["status", "fraction", "duration_seconds"],
        RawAction::SinkSlow => &["latency_ms", "duration_seconds"],
        RawAction::SinkPoison => &["stream", "seq", "seq_ahead", "status", "duration_seconds"],
        RawAction::Kill
        | RawAction::Pause
        | RawAction::Terminate
        | RawAction::Start
        | RawAction::RollingDeploy => return None,
    };
    Some(fields)
}

/// Which menu fields a fault table sets, for the "not used by action" check.
pub(super) fn given(f: &RawFault) -> [(&'static str, bool); 15] {
    [
        ("link", f.link.is_some()),
        ("direction", f.direction.is_some()),
        ("latency_ms", f.latency_ms.is_some()),
        ("jitter_ms", f.jitter_ms.is_some()),
        ("bytes_per_second", f.bytes_per_second.is_some()),
        ("fraction", f.fraction.is_some()),
        ("operation", f.operation.is_some()),
        ("error", f.error.is_some()),
        ("hold_seconds", f.hold_seconds.is_some()),
        ("offset_ms", f.offset_ms.is_some()),
        ("step_ms", f.step_ms.is_some()),
        ("stream", f.stream.is_some()),
        ("seq", f.seq.is_some()),
        ("seq_ahead", f.seq_ahead.is_some()),
        ("status", f.status.is_some()),
    ]
}

#[path = "menu_validate.rs"]
mod validate;

#[cfg(test)]
#[path = "menu_tests.rs"]
mod tests;
