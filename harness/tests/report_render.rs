//! The rendered reports (report.md, report.html, junit.xml) from a synthetic run: reproducible
//! byte for byte from history.jsonl + report.json, a failed expectation as a failed JUnit case
//! with its numbers, the markdown tables, a self-contained HTML page, and a timeline sampled
//! down when there are thousands of streams.

mod report_common;

use std::path::Path;
use std::process::Command;

use harness::report::{self, MAX_TIMELINE_ROWS};
use report_common::attr_of;

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn harness_report_dir_reproduces_the_files_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let records = report_common::history(30, 100);
    let report = report_common::write_run(dir.path(), &records, true);
    // report.json carries what run_start recorded about the run itself.
    assert_eq!(report.scenario_text, report_common::SCENARIO_TEXT);
    assert_eq!(report.versions, report_common::versions());
    let json: serde_json::Value = serde_json::from_slice(&read(dir.path(), "report.json")).unwrap();
    assert_eq!(json["scenario_text"], report_common::SCENARIO_TEXT);
    assert_eq!(json["versions"]["harness"], "0.1.0-test");
    assert_eq!(json["versions"]["worker"], "lease-worker 0.1.0-test");
    assert!(json["versions"]["worker_error"].is_null());

    let first = report::render_all(dir.path()).unwrap();
    let files = ["report.md", "report.html", "junit.xml"];
    let before: Vec<Vec<u8>> = files.iter().map(|f| read(dir.path(), f)).collect();
    assert!(before.iter().all(|b| b.len() > 500));
    assert_eq!(first.html, dir.path().join("report.html"));

    // The versions under the verdict; the scenario text, escaped, in a collapsed block.
    let md = String::from_utf8(before[0].clone()).unwrap();
    assert_eq!(
        md.lines().nth(2),
        Some("<sub>harness 0.1.0-test · worker lease-worker 0.1.0-test</sub>"),
        "{md}"
    );
    let html = String::from_utf8(before[1].clone()).unwrap();
    assert!(html
        .contains("<p class=\"versions\">harness 0.1.0-test · worker lease-worker 0.1.0-test</p>"));
    let details = &html[html.find("<details").expect("a <details> block")..];
    let details = &details[..details.find("</details>").unwrap()];
    assert!(
        !details.contains(" open"),
        "collapsed by default: {details}"
    );
    assert!(
        details.contains(
            "# synthetic &lt;kill&gt; &amp; &quot;pause&quot;\nname = &quot;synthetic-kill-and-pause&quot;"
        ),
        "{details}"
    );
    assert!(details.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(
        !html.contains("<script>alert"),
        "the scenario text is escaped"
    );

    // The library, again, into a second directory holding copies of the two sources.
    let copy = tempfile::tempdir().unwrap();
    for source in ["history.jsonl", "report.json"] {
        std::fs::copy(dir.path().join(source), copy.path().join(source)).unwrap();
    }
    report::render_all(copy.path()).unwrap();
    for (name, bytes) in files.iter().zip(&before) {
        assert!(
            read(copy.path(), name) == *bytes,
            "{name} differs when rendered again"
        );
    }

    // The command line: `harness report DIR` overwrites the files with identical bytes.
    for name in files {
        std::fs::remove_file(dir.path().join(name)).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("report")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.code() == Some(1),
        "a failing report exits 1; got {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for (name, bytes) in files.iter().zip(&before) {
        assert!(
            read(dir.path(), name) == *bytes,
            "`harness report` wrote a different {name}"
        );
    }
}

#[test]
fn harness_report_names_a_missing_file_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("report")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("report.json"), "{stderr}");
}

#[test]
fn a_failing_expectation_is_a_failed_junit_case_with_its_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let records = report_common::history(30, 100);
    let report = report_common::write_run(dir.path(), &records, true);
    assert!(!report.passed);
    let failed = report.expectations.iter().find(|e| !e.passed).unwrap();
    let actual = failed.actual.unwrap();
    assert!(actual > 1000.0, "the fixture's p99 exceeds 1 s: {actual}");

    report::render_all(dir.path()).unwrap();
    let xml = String::from_utf8(read(dir.path(), "junit.xml")).unwrap();
    let junit = quick_junit::Report::deserialize_from_str(&xml).unwrap();
    assert_eq!(junit.test_suites.len(), 1, "one suite per scenario");
    let suite = &junit.test_suites[0];
    assert_eq!(suite.name.as_str(), "synthetic-kill-and-pause");
    // One case per expectation, plus "run completed".
    assert_eq!(suite.test_cases.len(), report.expectations.len() + 1);
    assert_eq!(suite.failures, 1, "{xml}");
    for case in &suite.test_cases {
        let name = case.name.as_str();
        let should_fail = name == "every takeover within 1 s";
        match &case.status {
            quick_junit::TestCaseStatus::Success { .. } => assert!(!should_fail, "{name} passed"),
            quick_junit::TestCaseStatus::NonSuccess { message, .. } => {
                assert!(should_fail, "{name} failed unexpectedly");
                let message = message.as_ref().unwrap().as_str();
                let actual = format!("actual {}", actual as u64);
                assert!(message.contains(&actual), "{message}");
                assert!(message.contains("<= 1000"), "{message}");
                assert!(message.contains("totals.takeover_ms.p99"), "{message}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    assert!(
        !xml.contains("timestamp="),
        "no wall-clock time in junit.xml"
    );
}

#[test]
fn markdown_has_the_verdict_the_tables_and_the_counts_around_each_fault() {
    let dir = tempfile::tempdir().unwrap();
    let records = report_common::history(30, 100);
    let report = report_common::write_run(dir.path(), &records, false);
    assert!(report.passed, "{:?}", report.expectations);
    report::render_all(dir.path()).unwrap();
    let md = String::from_utf8(read(dir.path(), "report.md")).unwrap();
    let first = md.lines().next().unwrap();
    assert_eq!(
        first,
        "# ✅ synthetic-kill-and-pause: PASSED: 5 of 5 expectations held"
    );
    for heading in [
        "## Expectations",
        "## Totals",
        "## Injected actions",
        "## Takeovers (",
        "## Streams per worker around each fault",
        "## Stale writes rejected, by the owner that sent them",
    ] {
        assert!(md.contains(heading), "missing {heading}\n{md}");
    }
    assert!(md.contains("| every takeover within the lease plus 1.5 s | `totals.takeover_ms.max` | <= 4500 (= lease_ms + 1500) |"), "{md}");
    // A takeover row: stream, owners, fences, at, takeover ms, lease remaining, cause.
    let t = &report.takeovers[0];
    let row = format!(
        "| `{}` | {} → {} | {} → {} |",
        t.stream_id, t.from_owner, t.to_owner, t.from_fence, t.to_fence
    );
    assert!(md.contains(&row), "{row}\n{md}");
    // Ten streams each before the kill; worker-2 holds none after it.
    assert!(md.contains("| worker-2 | 10 | 0 |"), "{md}");
    assert!(md.contains("| worker-1 | 10 | 15 | 15 | 0 |"), "{md}");
}

#[test]
fn html_is_self_contained_with_four_charts_and_the_same_tables() {
    let dir = tempfile::tempdir().unwrap();
    let records = report_common::history(30, 100);
    report_common::write_run(dir.path(), &records, true);
    report::render_all(dir.path()).unwrap();
    let html = String::from_utf8(read(dir.path(), "report.html")).unwrap();
    for forbidden in ["<link", "src=", "@import", "url(", "https://", "fetch("] {
        assert!(
            !html.contains(forbidden),
            "report.html references {forbidden}"
        );
    }
    for chart in ["timeline", "throughput", "takeover-latency", "ownership"] {
        let marker = format!("data-chart=\"{chart}\"");
        let at = html
            .find(&marker)
            .unwrap_or_else(|| panic!("no {chart} chart"));
        let figure = &html[at..at + html[at..].find("</figure>").unwrap()];
        let drawn = figure.matches("<rect").count()
            + figure.matches("<polyline").count()
            + figure.matches("<line").count()
            + figure.matches("<circle").count();
        assert!(drawn > 10, "{chart}: only {drawn} shapes");
    }
    assert_eq!(
        attr_of(&html, "data-chart=\"timeline\"", "data-rows").as_deref(),
        Some("30")
    );
    let md = String::from_utf8(read(dir.path(), "report.md")).unwrap();
    for heading in md.lines().filter_map(|l| l.strip_prefix("## ")) {
        let heading = heading.replace('\\', "");
        assert!(
            html.contains(&format!("<h2>{heading}</h2>")),
            "report.md's table {heading:?} is missing from report.html"
        );
    }
    assert!(html.contains("<td class=\"fail\">✗ FAIL</td>"));
}

#[test]
fn thousands_of_streams_sample_the_timeline_every_fault_represented() {
    let dir = tempfile::tempdir().unwrap();
    let records = report_common::history(2000, 1000);
    let report = report_common::write_run(dir.path(), &records, false);
    assert!(report.takeovers.len() > MAX_TIMELINE_ROWS);
    let rendered = report::render_dir(dir.path()).unwrap();
    let html = &rendered.html;
    let rows = attr_of(html, "data-chart=\"timeline\"", "data-rows").unwrap();
    assert_eq!(rows, MAX_TIMELINE_ROWS.to_string());
    let streams = attr_of(html, "data-chart=\"timeline\"", "data-streams").unwrap();
    let shown: Vec<&str> = streams.split(' ').collect();
    assert_eq!(shown.len(), MAX_TIMELINE_ROWS);
    let mut sorted = shown.clone();
    sorted.sort();
    assert_eq!(shown, sorted, "rows are shown by stream id");
    let caused_by = |cause: &str| -> std::collections::BTreeSet<&str> {
        report
            .takeovers
            .iter()
            .filter(|t| t.cause.as_deref() == Some(cause))
            .map(|t| t.stream_id.as_str())
            .collect()
    };
    let (killed, paused) = (caused_by("kill"), caused_by("pause"));
    let count =
        |set: &std::collections::BTreeSet<&str>| shown.iter().filter(|s| set.contains(*s)).count();
    let untouched = shown
        .iter()
        .filter(|s| !killed.contains(*s) && !paused.contains(*s))
        .count();
    // Both faults are represented about equally; a few untouched streams for contrast.
    assert!(count(&killed) >= 20, "kill: {}", count(&killed));
    assert!(count(&paused) >= 20, "pause: {}", count(&paused));
    assert!((1..=10).contains(&untouched), "untouched: {untouched}");
    assert!(html.contains(&format!("Showing {MAX_TIMELINE_ROWS} of 2000 streams")));
    // A page people can open: well under a few megabytes.
    assert!(html.len() < 3 << 20, "report.html is {} bytes", html.len());
}

/// Not a check: writes the synthetic run and its rendered files into `$DUMP_DIR` to look at
/// (`DUMP_DIR=/tmp/r cargo test -p harness --test report_render dump_fixture -- --ignored`).
#[test]
#[ignore]
fn dump_fixture() {
    let dir = std::path::PathBuf::from(std::env::var("DUMP_DIR").unwrap());
    let n: usize = std::env::var("DUMP_STREAMS").map_or(30, |v| v.parse().unwrap());
    let period = std::env::var("DUMP_PERIOD_MS").map_or(100, |v| v.parse().unwrap());
    let records = report_common::history(n, period);
    report_common::write_run(&dir, &records, true);
    report::render_all(&dir).unwrap();
}

#[test]
fn a_run_that_did_not_complete_still_renders_with_its_reason() {
    use harness::history::{Record, RunEnd, RunStart};
    let dir = tempfile::tempdir().unwrap();
    let reason = "warm-up did not complete within 15 s: 3 of 20 streams had no owner";
    let records = vec![
        Record::RunStart(RunStart {
            scenario: "early-failure".into(),
            lease_ms: 3000,
            streams: 20,
            workers: 3,
            ..RunStart::default()
        }),
        Record::RunEnd(RunEnd {
            t_ms: 15_200,
            errors: vec![reason.into()],
            ..RunEnd::default()
        }),
    ];
    let report = report_common::write_run(dir.path(), &records, false);
    assert!(!report.passed);
    report::render_all(dir.path()).unwrap();
    let md = String::from_utf8(read(dir.path(), "report.md")).unwrap();
    assert!(md.starts_with("# ❌ early-failure: FAILED"), "{md}");
    assert!(
        md.contains("the run did not complete") && md.contains(reason),
        "{md}"
    );
    let xml = String::from_utf8(read(dir.path(), "junit.xml")).unwrap();
    let junit = quick_junit::Report::deserialize_from_str(&xml).unwrap();
    let completed = &junit.test_suites[0].test_cases[0];
    assert_eq!(completed.name.as_str(), "run completed");
    match &completed.status {
        quick_junit::TestCaseStatus::NonSuccess { message, .. } => {
            assert!(message.as_ref().unwrap().as_str().contains(reason))
        }
        other => panic!("run completed: {other:?}"),
    }
    let html = String::from_utf8(read(dir.path(), "report.html")).unwrap();
    assert_eq!(
        html.matches("<svg").count(),
        4,
        "four charts, even empty ones"
    );
    assert!(html.contains("no takeover followed an injected fault"));
}
