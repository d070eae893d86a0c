//! Checking and resolving one `[[faults]]` table of the menu (link, DynamoDB, clock, upstream
//! and sink faults) into a [`MenuAction`], with file:line:field errors.

use super::*;
use crate::scenario::raw::RawFault;
use crate::scenario::validate::Validator;

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
    pub(in crate::scenario) fn menu(
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
            let ms = self.ends_in_run(
                &at("duration_seconds"),
                seconds,
                at_ms,
                run,
                "the fault",
                "; omit duration_seconds to keep it until the end",
            )?;
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
