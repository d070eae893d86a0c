//! The fault menu's parsing: every action resolves, and every malformed one is refused with
//! file:line:field.

use std::path::Path;

use super::*;
use crate::scenario::{FaultAction, Scenario, ScenarioError, Target};

const HEAD: &str = r#"name = "t"
description = "a test"

[lease]
seconds = 3
renew_seconds = 1

[fleet]
workers = 3

[upstream]
streams = 10
rate = 20

[run]
warmup_seconds = 10
duration_seconds = 20
settle_timeout_seconds = 10
"#;

fn parse(faults: &str) -> Result<Scenario, ScenarioError> {
    Scenario::parse(&format!("{HEAD}\n{faults}"), Path::new("scenarios/x.toml"))
}

fn one(fault: &str) -> MenuAction {
    let s = parse(fault).unwrap_or_else(|e| panic!("{e}"));
    match &s.faults[0].action {
        FaultAction::Menu(m) => m.clone(),
        other => panic!("not a menu action: {other:?}"),
    }
}

#[track_caller]
fn refused(fault: &str, field: &str, message_part: &str) {
    let err = parse(fault).expect_err("should be refused");
    assert_eq!(err.field, field, "field of {err}");
    assert!(err.message.contains(message_part), "message of {err}");
    let key = field.rsplit('.').next().unwrap();
    let head_lines = format!("{HEAD}\n").lines().count();
    let line = fault
        .lines()
        .position(|l| l.starts_with(&format!("{key} =")))
        .map(|i| head_lines + i + 1);
    if let Some(line) = line {
        assert_eq!(err.line, line, "line of {err}");
    }
    assert!(err.to_string().starts_with("scenarios/x.toml:"), "{err}");
}

#[test]
fn every_menu_action_resolves() {
    let partition = one(
        "[[faults]]\nat_seconds = 5\naction = \"partition\"\ntarget = \"all\"\nlink = \"dynamodb\"\ndirection = \"outbound\"\nduration_seconds = 6\n",
    );
    assert_eq!(
        partition,
        MenuAction::Link {
            target: Target::All,
            link: Link::Dynamodb,
            fault: LinkFault::Partition {
                direction: Direction::Outbound
            },
            duration_ms: Some(6000),
        }
    );
    assert_eq!(partition.name(), "partition");
    let latency = one("[[faults]]\nat_seconds = 1\naction = \"latency\"\ntarget = \"worker-2\"\nlink = \"sink\"\nlatency_ms = 200\njitter_ms = 50\n");
    assert!(matches!(
        latency,
        MenuAction::Link {
            fault: LinkFault::Latency {
                latency_ms: 200,
                jitter_ms: 50,
                direction: Direction::Both
            },
            duration_ms: None,
            ..
        }
    ));
    let throttle = one("[[faults]]\nat_seconds = 1\naction = \"throttle\"\ntarget = \"random\"\nfraction = 0.5\noperation = \"UpdateItem\"\nerror = \"InternalServerError\"\n");
    assert_eq!(
        throttle,
        MenuAction::Dynamodb {
            target: Target::Random,
            fault: DdbFault {
                kind: DdbFaultKind::Throttle {
                    error: DdbError::InternalServerError
                },
                fraction: 0.5,
                operation: Some("UpdateItem".into()),
            },
            duration_ms: None,
        }
    );
    assert_eq!(throttle.proxied_link(), Some(Link::Dynamodb));
    let late = one("[[faults]]\nat_seconds = 1\naction = \"late_apply\"\ntarget = \"busiest\"\nhold_seconds = 4\n");
    assert!(matches!(
        late,
        MenuAction::Dynamodb {
            fault: DdbFault {
                kind: DdbFaultKind::LateApply { hold_ms: 4000 },
                ..
            },
            ..
        }
    ));
    let clock = one("[[faults]]\nat_seconds = 0\naction = \"clock\"\ntarget = \"worker-1\"\noffset_ms = -4000\n");
    assert_eq!(
        clock,
        MenuAction::Clock {
            target: Target::Worker(1),
            offset_ms: -4000
        }
    );
    assert!(clock.is_clock());
    let gap = one(
        "[[faults]]\nat_seconds = 3\naction = \"upstream_gap\"\nstream = \"s-0003\"\ncount = 50\n",
    );
    assert_eq!(
        gap,
        MenuAction::Upstream(UpstreamFault::Gap {
            stream: "s-0003".into(),
            count: 50
        })
    );
    let poison = one("[[faults]]\nat_seconds = 3\naction = \"sink_poison\"\nstream = \"s-0001\"\nseq = 9\nstatus = 413\n");
    assert_eq!(poison.name(), "sink_poison");
    let error = one("[[faults]]\nat_seconds = 3\naction = \"sink_error\"\nduration_seconds = 2\n");
    assert_eq!(
        error,
        MenuAction::Sink {
            fault: SinkFault::Error {
                status: 503,
                fraction: 1.0
            },
            duration_ms: Some(2000)
        }
    );
    for action in ["reset", "half_open"] {
        let m = one(&format!("[[faults]]\nat_seconds = 1\naction = \"{action}\"\ntarget = \"worker-1\"\nlink = \"upstream\"\n"));
        assert_eq!(m.name(), action);
    }
    let heal = one("[[faults]]\nat_seconds = 9\naction = \"heal\"\ntarget = \"all\"\n");
    assert_eq!(
        heal,
        MenuAction::Heal {
            target: Target::All,
            link: None
        }
    );
    for (action, extra) in [
        ("upstream_drop", ""),
        ("upstream_pause", "duration_seconds = 2\n"),
        ("upstream_skip", "stream = \"s-0001\"\n"),
        ("sink_slow", "latency_ms = 300\n"),
        ("unanswered", "target = \"worker-3\"\n"),
        ("clock_step", "target = \"busiest\"\nstep_ms = 5000\n"),
        (
            "bandwidth",
            "target = \"worker-1\"\nlink = \"upstream\"\nbytes_per_second = 1000\n",
        ),
    ] {
        let m = one(&format!(
            "[[faults]]\nat_seconds = 1\naction = \"{action}\"\n{extra}"
        ));
        assert_eq!(m.name(), action);
    }
}

#[test]
fn malformed_menu_actions_name_file_line_and_field() {
    let f = "[[faults]]\nat_seconds = 5\n";
    refused(
        &format!("{f}action = \"partition\"\ntarget = \"all\"\nlink = \"dynamo\"\n"),
        "faults[0].link",
        "unknown link \"dynamo\"",
    );
    refused(
        &format!("{f}action = \"partition\"\ntarget = \"all\"\n"),
        "faults[0].link",
        "needs link",
    );
    refused(
        &format!(
            "{f}action = \"partition\"\ntarget = \"all\"\nlink = \"sink\"\ndirection = \"up\"\n"
        ),
        "faults[0].direction",
        "outbound",
    );
    refused(
        &format!("{f}action = \"reset\"\ntarget = \"worker-9\"\nlink = \"sink\"\n"),
        "faults[0].target",
        "does not exist",
    );
    refused(
        &format!("{f}action = \"reset\"\ntarget = \"everyone\"\nlink = \"sink\"\n"),
        "faults[0].target",
        "worker-N, random, busiest or all",
    );
    refused(
        &format!("{f}action = \"kill\"\ntarget = \"all\"\n"),
        "faults[0].target",
        "unknown target",
    );
    refused(
        &format!("{f}action = \"throttle\"\ntarget = \"all\"\nfraction = 1.5\n"),
        "faults[0].fraction",
        "not in (0, 1]",
    );
    refused(
        &format!("{f}action = \"throttle\"\ntarget = \"all\"\noperation = \"Update\"\n"),
        "faults[0].operation",
        "UpdateItem",
    );
    refused(
        &format!("{f}action = \"throttle\"\ntarget = \"all\"\nerror = \"Throttled\"\n"),
        "faults[0].error",
        "ThrottlingException",
    );
    refused(
        &format!("{f}action = \"throttle\"\ntarget = \"all\"\nlink = \"sink\"\n"),
        "faults[0].link",
        "not used by action \"throttle\"",
    );
    refused(
        &format!("{f}action = \"late_apply\"\ntarget = \"all\"\n"),
        "faults[0].hold_seconds",
        "needs hold_seconds",
    );
    refused(
        &format!("{f}action = \"latency\"\ntarget = \"all\"\nlink = \"sink\"\nlatency_ms = 0\n"),
        "faults[0].latency_ms",
        "both 0",
    );
    refused(
        &format!(
            "{f}action = \"bandwidth\"\ntarget = \"all\"\nlink = \"sink\"\nbytes_per_second = 0\n"
        ),
        "faults[0].bytes_per_second",
        "above 0",
    );
    refused(
        &format!(
            "{f}action = \"partition\"\ntarget = \"all\"\nlink = \"sink\"\nduration_seconds = 30\n"
        ),
        "faults[0].duration_seconds",
        "after the run's end",
    );
    refused(
        &format!("{f}action = \"clock\"\ntarget = \"worker-1\"\noffset_ms = 10\n"),
        "faults[0].at_seconds",
        "must be 0",
    );
    refused(
        "[[faults]]\nat_seconds = 0\naction = \"clock\"\ntarget = \"random\"\noffset_ms = 10\n",
        "faults[0].target",
        "name it",
    );
    refused(
        &format!("{f}action = \"clock_step\"\ntarget = \"all\"\nstep_ms = 0\n"),
        "faults[0].step_ms",
        "changes nothing",
    );
    refused(
        &format!("{f}action = \"upstream_gap\"\nstream = \"s-0099\"\ncount = 3\n"),
        "faults[0].stream",
        "no stream \"s-0099\"",
    );
    refused(
        &format!("{f}action = \"upstream_gap\"\nstream = \"s-0001\"\ncount = 0\n"),
        "faults[0].count",
        "at least one",
    );
    refused(
        &format!("{f}action = \"upstream_pause\"\n"),
        "faults[0].duration_seconds",
        "needs duration_seconds",
    );
    refused(
        &format!("{f}action = \"sink_error\"\nstatus = 404\n"),
        "faults[0].status",
        "5xx",
    );
    refused(
        &format!("{f}action = \"sink_poison\"\nstream = \"s-0001\"\nseq = 3\nstatus = 409\n"),
        "faults[0].status",
        "fencing",
    );
    refused(
        &format!("{f}action = \"sink_poison\"\nstream = \"s-0001\"\nstatus = 422\n"),
        "faults[0].seq",
        "needs seq",
    );
}
