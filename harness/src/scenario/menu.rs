//! The fault menu beyond signals (design §10): link faults through a per-worker proxy, DynamoDB
//! HTTP faults, clock faults, upstream and sink faults. Each is a plain data value with a TOML
//! form (one `[[faults]]` table), so a campaign can generate them as easily as a user writes
//! them. This module only checks and resolves them; `crate::faults` injects them.

use std::fmt;

use super::raw::{RawAction, RawFault};
use super::validate::Validator;
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

/// The DynamoDB operations the worker calls (what `operation` may name).
const OPERATIONS: &[&str] = &[
    "GetItem",
    "Scan",
    "UpdateItem",
    "PutItem",
    "Query",
    "DeleteItem",
];

impl Validator<'_> {
    /// Checks and resolves the menu action of `faults[i]` (at `at_ms`, `existing` workers then).
    pub(super) fn menu(
        &self,
        i: usize,
        f: &RawFault,
        at_ms: u64,
        existing: usize,
        streams: &[String],
        run: &RunTimes,
    ) -> Result<MenuAction, ScenarioError> {
        let at = |name: &str| format!("faults[{i}].{name}");
        let name = f.action.name();
        let need = |field: &str| self.err(&at(field), format!("action {name:?} needs {field}"));
        let target = || self.menu_target(&at("target"), f.target.as_deref(), existing);
        let duration = || -> Result<Option<u64>, ScenarioError> {
            let Some(seconds) = f.duration_seconds else {
                return Ok(None);
            };
            let ms = self.positive_ms(&at("duration_seconds"), seconds)?;
            if at_ms + ms > run.duration_ms {
                return Err(self.err(
                    &at("duration_seconds"),
                    format!(
                        "the fault ends at {}s, after the run's end ({}s); omit duration_seconds to keep it until the end",
                        (at_ms + ms) as f64 / 1000.0,
                        run.duration_ms as f64 / 1000.0
                    ),
                ));
            }
            Ok(Some(ms))
        };
        let link = || -> Result<Link, ScenarioError> {
            let text = f.link.as_deref().ok_or_else(|| need("link"))?;
            Link::parse(text).ok_or_else(|| {
                self.err(
                    &at("link"),
                    format!("unknown link {text:?}: use dynamodb, upstream or sink"),
                )
            })
        };
        let direction = || -> Result<Direction, ScenarioError> {
            match f.direction.as_deref() {
                None | Some("both") => Ok(Direction::Both),
                Some("outbound") => Ok(Direction::Outbound),
                Some("inbound") => Ok(Direction::Inbound),
                Some(other) => Err(self.err(
                    &at("direction"),
                    format!("unknown direction {other:?}: use both, outbound (worker → server) or inbound (server → worker)"),
                )),
            }
        };
        let fraction = || -> Result<f64, ScenarioError> {
            let x = f.fraction.unwrap_or(1.0);
            if x.is_finite() && x > 0.0 && x <= 1.0 {
                Ok(x)
            } else {
                Err(self.err(&at("fraction"), format!("{x} is not in (0, 1]")))
            }
        };
        let operation = || -> Result<Option<String>, ScenarioError> {
            match f.operation.as_deref() {
                None => Ok(None),
                Some(op) if OPERATIONS.contains(&op) => Ok(Some(op.to_string())),
                Some(op) => Err(self.err(
                    &at("operation"),
                    format!(
                        "unknown DynamoDB operation {op:?}: use one of {}",
                        OPERATIONS.join(", ")
                    ),
                )),
            }
        };
        let stream = || -> Result<String, ScenarioError> {
            let id = f.stream.as_deref().ok_or_else(|| need("stream"))?;
            if streams.iter().any(|s| s == id) {
                Ok(id.to_string())
            } else {
                Err(self.err(
                    &at("stream"),
                    format!(
                        "no stream {id:?} in this run: streams are {} … {}",
                        streams.first().map(String::as_str).unwrap_or("?"),
                        streams.last().map(String::as_str).unwrap_or("?")
                    ),
                ))
            }
        };
        let status = |range: std::ops::RangeInclusive<u16>,
                      default: Option<u16>,
                      what: &str|
         -> Result<u16, ScenarioError> {
            let code = f.status.or(default).ok_or_else(|| need("status"))?;
            if range.contains(&code) {
                Ok(code)
            } else {
                Err(self.err(&at("status"), format!("{code} is not {what} ({range:?})")))
            }
        };
        let link_fault = |fault: LinkFault| -> Result<MenuAction, ScenarioError> {
            Ok(MenuAction::Link {
                target: target()?,
                link: link()?,
                fault,
                duration_ms: duration()?,
            })
        };
        let ddb = |kind: DdbFaultKind| -> Result<MenuAction, ScenarioError> {
            Ok(MenuAction::Dynamodb {
                target: target()?,
                fault: DdbFault {
                    kind,
                    fraction: fraction()?,
                    operation: operation()?,
                },
                duration_ms: duration()?,
            })
        };
        Ok(match f.action {
            RawAction::Latency => {
                let latency_ms = f.latency_ms.ok_or_else(|| need("latency_ms"))?;
                let jitter_ms = f.jitter_ms.unwrap_or(0);
                if latency_ms + jitter_ms == 0 {
                    return Err(self.err(&at("latency_ms"), "latency and jitter are both 0"));
                }
                link_fault(LinkFault::Latency {
                    latency_ms,
                    jitter_ms,
                    direction: direction()?,
                })?
            }
            RawAction::Bandwidth => {
                let bytes_per_second =
                    f.bytes_per_second.ok_or_else(|| need("bytes_per_second"))?;
                if bytes_per_second == 0 {
                    return Err(self.err(
                        &at("bytes_per_second"),
                        "must be above 0 (a link passing nothing is a `partition`)",
                    ));
                }
                link_fault(LinkFault::Bandwidth {
                    bytes_per_second,
                    direction: direction()?,
                })?
            }
            RawAction::Partition => link_fault(LinkFault::Partition {
                direction: direction()?,
            })?,
            RawAction::Reset => link_fault(LinkFault::Reset)?,
            RawAction::HalfOpen => link_fault(LinkFault::HalfOpen)?,
            RawAction::Heal => MenuAction::Heal {
                target: target()?,
                link: f.link.as_ref().map(|_| link()).transpose()?,
            },
            RawAction::Throttle => {
                let error = match f.error.as_deref() {
                    None => DdbError::Throttling,
                    Some(code) => DdbError::parse(code).ok_or_else(|| {
                        self.err(
                            &at("error"),
                            format!("unknown error {code:?}: use ThrottlingException, ProvisionedThroughputExceededException or InternalServerError"),
                        )
                    })?,
                };
                ddb(DdbFaultKind::Throttle { error })?
            }
            RawAction::Unanswered => ddb(DdbFaultKind::Unanswered)?,
            RawAction::LateApply => {
                let seconds = f.hold_seconds.ok_or_else(|| need("hold_seconds"))?;
                let hold_ms = self.positive_ms(&at("hold_seconds"), seconds)?;
                ddb(DdbFaultKind::LateApply { hold_ms })?
            }
            RawAction::Clock => {
                if at_ms != 0 {
                    return Err(self.err(
                        &at("at_seconds"),
                        "a `clock` offset holds from the worker's start: at_seconds must be 0 (use `clock_step` for a jump mid-run)",
                    ));
                }
                let offset_ms = f.offset_ms.ok_or_else(|| need("offset_ms"))?;
                let target = target()?;
                if matches!(target, Target::Random | Target::Busiest) {
                    return Err(self.err(
                        &at("target"),
                        "a `clock` offset is set when the worker starts: name it (worker-N) or use all",
                    ));
                }
                MenuAction::Clock { target, offset_ms }
            }
            RawAction::ClockStep => {
                let step_ms = f.step_ms.ok_or_else(|| need("step_ms"))?;
                if step_ms == 0 {
                    return Err(self.err(&at("step_ms"), "a step of 0 ms changes nothing"));
                }
                MenuAction::ClockStep {
                    target: target()?,
                    step_ms,
                }
            }
            RawAction::UpstreamDrop => MenuAction::Upstream(UpstreamFault::Drop {
                stream: f.stream.as_ref().map(|_| stream()).transpose()?,
            }),
            RawAction::UpstreamPause => {
                let duration_ms = duration()?.ok_or_else(|| need("duration_seconds"))?;
                MenuAction::Upstream(UpstreamFault::Pause { duration_ms })
            }
            RawAction::UpstreamGap => {
                let count = f.count.ok_or_else(|| need("count"))? as u64;
                if count == 0 {
                    return Err(self.err(&at("count"), "must lose at least one event"));
                }
                MenuAction::Upstream(UpstreamFault::Gap {
                    stream: stream()?,
                    count,
                })
            }
            RawAction::UpstreamSkip => {
                MenuAction::Upstream(UpstreamFault::Skip { stream: stream()? })
            }
            RawAction::SinkError => MenuAction::Sink {
                fault: SinkFault::Error {
                    status: status(500..=599, Some(503), "a 5xx status")?,
                    fraction: fraction()?,
                },
                duration_ms: duration()?,
            },
            RawAction::SinkSlow => {
                let latency_ms = f.latency_ms.ok_or_else(|| need("latency_ms"))?;
                MenuAction::Sink {
                    fault: SinkFault::Slow { latency_ms },
                    duration_ms: duration()?,
                }
            }
            RawAction::SinkPoison => {
                let status = status(400..=499, None, "a 4xx status")?;
                if status == 409 {
                    return Err(self.err(
                        &at("status"),
                        "409 is the sink's fencing answer (the worker stops the stream); poison with another 4xx, e.g. 413 or 422",
                    ));
                }
                let seq = match (f.seq, f.seq_ahead) {
                    (Some(seq), None) => PoisonSeq::At(seq),
                    (None, Some(0)) => {
                        return Err(self.err(
                            &at("seq_ahead"),
                            "must be at least 1 (the next event the upstream produces)",
                        ))
                    }
                    (None, Some(n)) => PoisonSeq::Ahead(n),
                    (Some(_), Some(_)) => {
                        return Err(self.err(
                            &at("seq_ahead"),
                            "give `seq` (absolute) or `seq_ahead` (past the head at injection), not both",
                        ))
                    }
                    (None, None) => {
                        return Err(self.err(
                            &at("seq"),
                            "action \"sink_poison\" needs seq (absolute) or seq_ahead (past the stream's head at injection)",
                        ))
                    }
                };
                MenuAction::Sink {
                    fault: SinkFault::Poison {
                        stream: stream()?,
                        seq,
                        status,
                    },
                    duration_ms: duration()?,
                }
            }
            RawAction::Kill
            | RawAction::Pause
            | RawAction::Terminate
            | RawAction::Start
            | RawAction::RollingDeploy => {
                return Err(self.err(&at("action"), "a signal action, not a fault-menu one"))
            }
        })
    }

    /// A menu action's target: `worker-N`, `random`, `busiest` or `all`.
    fn menu_target(
        &self,
        field: &str,
        target: Option<&str>,
        existing: usize,
    ) -> Result<Target, ScenarioError> {
        match target {
            Some("all") => Ok(Target::All),
            None => Err(self.err(
                field,
                "this action needs a target: worker-N, random, busiest or all",
            )),
            Some(name) if parse_worker(name).is_none() && name != "random" && name != "busiest" => {
                Err(self.err(
                    field,
                    format!("unknown target {name:?}: use worker-N, random, busiest or all"),
                ))
            }
            other => self.target(field, other, existing),
        }
    }
}

#[cfg(test)]
#[path = "menu_tests.rs"]
mod tests;
