//! Scenario parsing: every error names the file, the line and the field.

use super::*;

const VALID: &str = r#"name = "t"
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
seed = 7

[[faults]]
at_seconds = 5
action = "kill"
target = "busiest"

[[faults]]
at_seconds = 8
action = "pause"
target = "worker-2"
duration_seconds = 5

[[expect]]
metric = "totals.takeover_ms.max"
op = "<="
threshold = "lease_ms + 1500"
"#;

fn parse(text: &str) -> Result<Scenario, ScenarioError> {
    Scenario::parse(text, Path::new("scenarios/x.toml"))
}

/// Replaces the first occurrence of `from` in the valid scenario.
fn with(from: &str, to: &str) -> String {
    assert!(VALID.contains(from), "{from:?} not in the template");
    VALID.replacen(from, to, 1)
}

fn line_of(text: &str, needle: &str) -> usize {
    text[..text.find(needle).expect("needle present")]
        .lines()
        .count()
        + 1
}

#[track_caller]
fn assert_error(text: &str, line_needle: &str, field: &str, message_part: &str) {
    let err = parse(text).expect_err("should be refused");
    assert_eq!(err.line, line_of(text, line_needle), "line of {err}");
    assert_eq!(err.field, field, "field of {err}");
    assert!(err.message.contains(message_part), "message of {err}");
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("scenarios/x.toml:{}:", err.line)),
        "{shown}"
    );
}

#[test]
fn a_valid_scenario_resolves() {
    let s = parse(VALID).unwrap();
    assert_eq!(s.lease.lease_ms, 3000);
    assert_eq!(s.lease.renew_ms, 1000);
    assert_eq!(s.lease.skew_margin_ms, DEFAULT_SKEW_MARGIN_MS);
    assert_eq!(s.run.seed, 7);
    assert_eq!(s.faults.len(), 2);
    assert_eq!(
        s.faults[0].action,
        FaultAction::Kill {
            target: Target::Busiest
        }
    );
    assert_eq!(
        s.faults[1].action,
        FaultAction::Pause {
            target: Target::Worker(2),
            duration_ms: 5000
        }
    );
    assert_eq!(s.faults[1].line, line_of(VALID, "at_seconds = 8") - 1);
    assert_eq!(s.expectations[0].threshold, 4500.0);
    assert_eq!(
        s.expectations[0].name,
        "totals.takeover_ms.max <= lease_ms + 1500"
    );
    assert!(s.fencing);
    assert_eq!(s.stream_ids()[9], "s-0010");
}

#[test]
fn an_unknown_field_names_its_line() {
    let text = with("workers = 3", "workers = 3\nworkerz = 4");
    assert_error(&text, "workerz", "fleet.workerz", "unknown field `workerz`");
}

#[test]
fn a_wrong_type_names_its_line_and_field() {
    let text = with("rate = 20", "rate = \"fast\"");
    assert_error(&text, "rate = \"fast\"", "upstream.rate", "invalid type");
}

#[test]
fn a_missing_field_is_named() {
    let text = with("renew_seconds = 1\n", "");
    let err = parse(&text).unwrap_err();
    assert_eq!(err.field, "lease.renew_seconds", "{err}");
    assert_eq!(err.line, line_of(&text, "[lease]"), "{err}");
}

#[test]
fn renew_not_shorter_than_lease_is_refused() {
    let text = with("renew_seconds = 1", "renew_seconds = 3");
    assert_error(
        &text,
        "renew_seconds = 3",
        "lease.renew_seconds",
        "shorter than the lease",
    );
}

#[test]
fn a_fault_after_the_end_is_refused() {
    let text = with("at_seconds = 8", "at_seconds = 25");
    assert_error(
        &text,
        "at_seconds = 25",
        "faults[1].at_seconds",
        "after the run's end",
    );
}

#[test]
fn a_pause_that_outlives_the_run_is_refused() {
    let text = with("duration_seconds = 5", "duration_seconds = 15");
    assert_error(
        &text,
        "duration_seconds = 15",
        "faults[1].duration_seconds",
        "after the run's end",
    );
}

#[test]
fn a_target_that_does_not_exist_is_refused() {
    let text = with("target = \"worker-2\"", "target = \"worker-9\"");
    assert_error(
        &text,
        "target = \"worker-9\"",
        "faults[1].target",
        "does not exist",
    );
    let text = with("target = \"worker-2\"", "target = \"the-big-one\"");
    assert_error(
        &text,
        "target = \"the-big-one\"",
        "faults[1].target",
        "unknown target",
    );
}

#[test]
fn a_started_worker_exists_for_later_faults() {
    let text = with(
        "[[faults]]\nat_seconds = 8",
        "[[faults]]\nat_seconds = 1\naction = \"start\"\ncount = 6\n\n[[faults]]\nat_seconds = 8",
    )
    .replace("worker-2", "worker-9");
    assert!(parse(&text).is_ok());
}

#[test]
fn an_unknown_action_names_its_line() {
    let text = with("action = \"kill\"", "action = \"explode\"");
    assert_error(&text, "action = \"explode\"", "faults[0].action", "explode");
}

#[test]
fn a_field_the_action_does_not_use_is_refused() {
    let text = with("target = \"busiest\"", "target = \"busiest\"\ncount = 2");
    assert_error(
        &text,
        "count = 2",
        "faults[0].count",
        "not used by action \"kill\"",
    );
}

#[test]
fn an_unknown_metric_or_threshold_name_is_refused() {
    let text = with("totals.takeover_ms.max", "totals.takeover_time");
    assert_error(
        &text,
        "metric =",
        "expect[0].metric",
        "not a numeric metric",
    );
    let text = with("lease_ms + 1500", "lease + 1500");
    assert_error(
        &text,
        "threshold =",
        "expect[0].threshold",
        "unknown name \"lease\"",
    );
    let text = with("op = \"<=\"", "op = \"=<\"");
    assert_error(&text, "op =", "expect[0].op", "unknown operator");
}

#[test]
fn worker_env_must_name_a_worker() {
    let text = with(
        "workers = 3",
        "workers = 3\n[fleet.worker_env.worker-7]\nCHAOS_SKIP_DEADLINE_CHECK = \"true\"",
    );
    assert_error(
        &text,
        "[fleet.worker_env.worker-7]",
        "fleet.worker_env.worker-7",
        "no worker named",
    );
    let text = with(
        "workers = 3",
        "workers = 3\n[fleet.worker_env.worker-1]\nCHAOS_SKIP_DEADLINE_CHECK = \"true\"",
    );
    let s = parse(&text).unwrap();
    assert_eq!(
        s.fleet.worker_env["worker-1"]["CHAOS_SKIP_DEADLINE_CHECK"],
        "true"
    );
}

#[test]
fn a_rolling_deploy_with_no_room_is_refused() {
    let text = with(
        "action = \"kill\"\ntarget = \"busiest\"",
        "action = \"rolling_deploy\"\nminimum_healthy_percent = 100\nmaximum_percent = 100",
    );
    assert_error(
        &text,
        "maximum_percent = 100",
        "faults[0].maximum_percent",
        "no room",
    );
}

#[test]
fn broken_toml_names_its_line() {
    let text = with("seed = 7", "seed = = 7");
    let err = parse(&text).unwrap_err();
    assert_eq!(err.line, line_of(&text, "seed = = 7"), "{err}");
}

#[test]
fn the_shipped_scenarios_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut seen = 0;
    for sub in ["", "negative", "scale"] {
        for entry in std::fs::read_dir(dir.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
                seen += 1;
            }
        }
    }
    assert!(
        seen >= 7,
        "expected the shipped and negative scenarios in {}",
        dir.display()
    );
}

#[test]
fn a_missing_top_level_table_is_named() {
    let text = "name = \"x\"\ndescription = \"d\"\n[lease]\nseconds = 3\nrenew_seconds = 1\n";
    let err = parse(text).unwrap_err();
    assert_eq!(err.field, "fleet", "{err}");
    assert!(err.message.contains("missing field `fleet`"), "{err}");
}

#[test]
fn a_scenario_without_expectations_is_refused_unless_it_says_so() {
    let cut = VALID.find("[[expect]]").unwrap();
    let bare = &VALID[..cut];
    let err = parse(bare).expect_err("no [[expect]] must be refused");
    assert_eq!(err.field, "expect");
    assert!(err.message.contains("no_expectations = true"), "{err}");
    assert!(err.to_string().starts_with("scenarios/x.toml:1:"), "{err}");

    let said = format!("no_expectations = true\n{bare}");
    assert!(parse(&said).unwrap().expectations.is_empty());

    let both = format!("no_expectations = true\n{VALID}");
    assert_error(
        &both,
        "no_expectations",
        "no_expectations",
        "remove one or the other",
    );
}
