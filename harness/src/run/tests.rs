use std::os::unix::fs::PermissionsExt;

use super::*;

const SCENARIO: &str = r#"# a comment, kept as written
name = "seeded"
description = "Two random kills."

[lease]
seconds = 3
renew_seconds = 1

[fleet]
workers = 4

[upstream]
streams = 8
rate = 10

[run]
warmup_seconds = 10
duration_seconds = 10
settle_timeout_seconds = 5
seed = 3

[[faults]]
at_seconds = 2
action = "kill"
target = "random"

[[faults]]
at_seconds = 5
action = "kill"
target = "random"
"#;

fn options(dir: &Path, seed: Option<u64>) -> RunOptions {
    let scenario = dir.join("seeded.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    RunOptions {
        scenario,
        out: dir.join("out"),
        seed,
        dynamodb: dynamodb_local::Mode::Auto,
        worker_bin: None,
        table: None,
        quiet: false,
    }
}

/// The targets the schedule's `random` faults resolve to among `running`.
fn random_targets(scenario: &Scenario, running: &[String]) -> Vec<String> {
    crate::faults::draws(scenario.run.seed, scenario.faults.len())
        .into_iter()
        .map(|d| crate::faults::pick_random(running, d).unwrap())
        .collect()
}

#[test]
fn the_command_line_seed_overrides_the_scenarios_and_decides_the_random_targets() {
    let dir = tempfile::tempdir().unwrap();
    let running: Vec<String> = (1..=4).map(crate::scenario::worker_name).collect();

    let own = prepare(&options(dir.path(), None)).unwrap();
    assert_eq!(own.run.seed, 3, "without --seed the scenario's seed holds");
    assert_eq!(own.source, SCENARIO, "the scenario text is kept exactly");

    let overridden = prepare(&options(dir.path(), Some(11))).unwrap();
    assert_eq!(overridden.run.seed, 11);
    assert_eq!(
        overridden.source, SCENARIO,
        "the text stays as written; the seed used is recorded apart"
    );
    assert_eq!(
        random_targets(&overridden, &running),
        random_targets(&prepare(&options(dir.path(), Some(11))).unwrap(), &running),
        "the same seed resolves the same targets"
    );
    // Seeds 3 and 11 happen to resolve these two faults differently over four workers, so the
    // comparison shows which seed was used.
    assert_ne!(
        random_targets(&overridden, &running),
        random_targets(&own, &running)
    );
}

/// An executable shell script in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn the_worker_version_is_the_first_line_it_prints() {
    let dir = tempfile::tempdir().unwrap();
    let bin = script(
        dir.path(),
        "worker",
        r#"[ "$1" = --version ] || exit 9
echo
echo "lease-worker 9.8.7"
echo "more detail""#,
    );
    let v = versions(&bin).await;
    assert_eq!(v.harness, env!("CARGO_PKG_VERSION"));
    assert_eq!(v.worker.as_deref(), Some("lease-worker 9.8.7"));
    assert_eq!(v.worker_error, None);
}

#[tokio::test]
async fn a_worker_that_cannot_say_its_version_is_recorded_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let bin = script(
        dir.path(),
        "old-worker",
        "echo \"error: unexpected argument '--version'\" >&2; exit 2",
    );
    let v = versions(&bin).await;
    assert_eq!(v.worker, None);
    let error = v.worker_error.unwrap();
    assert!(error.contains("old-worker --version"), "{error}");
    assert!(error.contains("exit status: 2"), "{error}");
    assert!(error.contains("unexpected argument '--version'"), "{error}");

    let v = versions(&dir.path().join("missing")).await;
    assert_eq!(v.worker, None);
    assert!(
        v.worker_error
            .as_deref()
            .unwrap()
            .contains("could not be run"),
        "{v:?}"
    );
    assert_eq!(v.harness, HARNESS_VERSION);
}
