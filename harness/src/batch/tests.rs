use super::*;
use crate::report_json::{ExpectationResult, Percentiles};

fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(name)
}

#[test]
fn a_folder_expands_to_its_own_toml_files_sorted_and_not_its_subfolders() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["b.toml", "a.toml", "notes.md"] {
        std::fs::write(dir.path().join(name), "").unwrap();
    }
    std::fs::create_dir(dir.path().join("pending")).unwrap();
    std::fs::write(dir.path().join("pending/c.toml"), "").unwrap();
    let files = expand(&[dir.path().to_path_buf()]).unwrap();
    let names: Vec<_> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["a.toml", "b.toml"]);
    assert!(is_batch(&[dir.path().to_path_buf()]));
    assert!(!is_batch(&[dir.path().join("a.toml")]));
    assert!(is_batch(&[
        dir.path().join("a.toml"),
        dir.path().join("b.toml")
    ]));
}

#[test]
fn a_missing_input_or_an_empty_folder_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = expand(&[dir.path().to_path_buf()]).unwrap_err();
    assert!(
        err.contains(&dir.path().display().to_string()) && err.contains("no *.toml"),
        "{err}"
    );
    let missing = dir.path().join("nope.toml");
    let err = expand(&[missing]).unwrap_err();
    assert!(err.contains("nope.toml"), "{err}");
}

#[test]
fn plan_gives_each_scenario_its_own_directory_even_when_stems_repeat() {
    let out = Path::new("/tmp/out");
    let kill = shipped("task-kill.toml");
    let planned = plan(&[kill.clone(), shipped("baseline.toml"), kill], out).unwrap();
    let dirs: Vec<_> = planned.iter().map(|p| p.dir.clone()).collect();
    assert_eq!(
        dirs,
        [
            out.join("task-kill"),
            out.join("baseline"),
            out.join("task-kill-2")
        ]
    );
    assert_eq!(planned[0].scenario, "task-kill");
}

#[test]
fn plan_stops_at_an_invalid_scenario_with_its_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "name = \"bad\"\n[lease]\nrenew_seconds = \"x\"\n").unwrap();
    let err = plan(&[shipped("baseline.toml"), bad], dir.path()).unwrap_err();
    assert!(err.contains("bad.toml:"), "{err}");
}

fn outcome(name: &str, exit_code: u8, report: Option<Report>) -> Outcome {
    Outcome {
        planned: Planned {
            file: PathBuf::from(format!("scenarios/{name}.toml")),
            scenario: name.to_string(),
            dir: PathBuf::from(format!("out/{name}")),
        },
        exit_code,
        error: report
            .is_none()
            .then(|| "DynamoDB (moto): python3 not found".to_string()),
        report,
    }
}

fn report(name: &str, passed: bool) -> Report {
    let mut r = Report {
        scenario: name.into(),
        passed,
        ..Report::default()
    };
    r.versions.dynamodb = Some("moto 5.2.5 (Apache-2.0)".into());
    r.harness.wall_ms = 12_345;
    r.totals.takeover_ms = Percentiles {
        p50: Some(900),
        p99: Some(1500),
        max: Some(1500),
        count: 2,
    };
    r.expectations.push(ExpectationResult {
        name: "no stale writes".into(),
        metric: "totals.stale_accepted".into(),
        op: "<=".into(),
        threshold: 0.0,
        threshold_expr: "0".into(),
        actual: Some(if passed { 0.0 } else { 3.0 }),
        passed,
    });
    r.totals.stale_accepted = if passed { 0 } else { 3 };
    r
}

fn batch() -> Vec<Outcome> {
    vec![
        outcome("task-kill", 0, Some(report("task-kill", true))),
        outcome("zombie", 1, Some(report("zombie", false))),
        outcome("broken", 1, None),
    ]
}

#[test]
fn the_summary_line_carries_the_verdict_and_what_failed() {
    let outcomes = batch();
    let ok = serde_json::to_value(summary_line(&outcomes[0])).unwrap();
    assert_eq!(ok["passed"], true);
    assert_eq!(ok["exit_code"], 0);
    assert_eq!(ok["takeover_ms_p99"], 1500);
    assert_eq!(ok["dynamodb"], "moto 5.2.5 (Apache-2.0)");
    assert_eq!(ok["dir"], "out/task-kill");
    assert_eq!(ok["failed_expectations"], serde_json::json!([]));
    let failed = serde_json::to_value(summary_line(&outcomes[1])).unwrap();
    assert_eq!(failed["passed"], false);
    assert_eq!(
        failed["failed_expectations"][0]["metric"],
        "totals.stale_accepted"
    );
    assert_eq!(failed["failed_expectations"][0]["actual"], 3.0);
    let broken = serde_json::to_value(summary_line(&outcomes[2])).unwrap();
    assert!(broken["wall_ms"].is_null());
    assert_eq!(broken["errors"][0], "DynamoDB (moto): python3 not found");
    // One line each: nothing in it may break the line.
    assert!(!serde_json::to_string(&summary_line(&outcomes[2]))
        .unwrap()
        .contains('\n'));
}

#[test]
fn the_exit_code_is_the_worst_verdict() {
    let mut outcomes = batch();
    assert_eq!(worst(&outcomes), 1);
    outcomes[0].exit_code = 2;
    assert_eq!(worst(&outcomes), 2);
    assert_eq!(worst(&outcomes[..0]), 0);
}

#[test]
fn summary_markdown_has_a_row_and_a_link_per_scenario_and_the_reasons_of_failures() {
    let md = summary_markdown(&batch(), Path::new("out"));
    assert!(
        md.starts_with("# Harness runs: ❌ FAILED (1 of 3 scenarios passed)"),
        "{md}"
    );
    assert!(
        md.contains("DynamoDB backend: moto 5.2.5 (Apache-2.0)"),
        "{md}"
    );
    assert!(
        md.contains(
            "| task-kill | passed | 1500 | 0 | 0 | 12.3 | [task-kill](task-kill/report.md) |"
        ),
        "{md}"
    );
    assert!(md.contains("| broken | **FAILED** | – |"), "{md}");
    assert!(md.contains("## zombie failed"), "{md}");
    assert!(md.contains("actual 3, expected <= 0"), "{md}");
    assert!(
        md.contains("- error: DynamoDB (moto): python3 not found"),
        "{md}"
    );
}

#[test]
fn summary_junit_has_one_suite_per_scenario_and_fails_a_run_without_report() {
    let xml = summary_junit(&batch()).unwrap();
    assert_eq!(xml.matches("<testsuite ").count(), 3, "{xml}");
    for name in ["task-kill", "zombie", "broken"] {
        assert!(
            xml.contains(&format!("<testsuite name=\"{name}\"")),
            "{xml}"
        );
    }
    assert!(
        xml.contains("the run did not complete: DynamoDB (moto): python3 not found"),
        "{xml}"
    );
    // zombie's expectation and broken's run: two failures in all.
    assert!(xml.contains("failures=\"2\""), "{xml}");
}

#[test]
fn write_summary_writes_the_three_files() {
    let dir = tempfile::tempdir().unwrap();
    write_summary(&batch(), dir.path()).unwrap();
    for name in [SUMMARY_MARKDOWN, SUMMARY_JUNIT, SUMMARY_JSON] {
        assert!(dir.path().join(name).is_file(), "{name}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(SUMMARY_JSON)).unwrap())
            .unwrap();
    assert_eq!(json.as_array().unwrap().len(), 3);
}
