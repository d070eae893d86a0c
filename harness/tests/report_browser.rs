//! report.html in a real browser: headless Chromium loads the page from disk (no network), runs
//! its check script and dumps the DOM; every chart must have drawn shapes with a real size, and
//! the timeline one labelled row per sampled stream. A screenshot is left for people to look at.
//!
//! Skips with a message when Chromium is not installed, unless `REQUIRE_CHROMIUM=1` (as `.ci/run`
//! sets after installing it), where a missing browser fails the test. `CHROMIUM=/path` picks
//! the browser.

mod report_common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::report;
use report_common::attr_of;

const BROWSER_TIMEOUT: Duration = Duration::from_secs(120);

fn find_chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let names = [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ];
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

/// Kills the browser if the test ends first.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs headless Chromium on `page` with `extra` flags; returns its stdout.
fn chromium(browser: &Path, page: &Path, extra: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = tempfile::NamedTempFile::new().unwrap();
    let child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(out.reopen().unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", browser.display()));
    let mut guard = Guard(child);
    let deadline = Instant::now() + BROWSER_TIMEOUT;
    let status = loop {
        if let Some(status) = guard.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "{} did not finish within {BROWSER_TIMEOUT:?}",
            browser.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status.success(),
        "{} exited with {status}",
        browser.display()
    );
    std::fs::read_to_string(out.path()).unwrap()
}

fn number(dom: &str, chart: &str, attr: &str) -> u64 {
    let marker = format!("data-chart=\"{chart}\"");
    let value = attr_of(dom, &marker, attr).unwrap_or_else(|| {
        panic!("chart {chart}: no {attr} (the page's check script did not run?)")
    });
    value
        .parse()
        .unwrap_or_else(|_| panic!("chart {chart}: {attr}={value:?}"))
}

fn size(dom: &str, chart: &str) -> (u64, u64) {
    let marker = format!("data-chart=\"{chart}\"");
    let value = attr_of(dom, &marker, "data-box").unwrap_or_else(|| panic!("{chart}: no data-box"));
    let (w, h) = value.split_once('x').unwrap();
    (w.parse().unwrap(), h.parse().unwrap())
}

#[test]
fn report_html_renders_in_headless_chromium() {
    let Some(browser) = find_chromium() else {
        if std::env::var_os("REQUIRE_CHROMIUM").is_some_and(|v| v != "0") {
            panic!("REQUIRE_CHROMIUM is set but no chromium was found on PATH (or in $CHROMIUM)");
        }
        eprintln!(
            "SKIPPED report_html_renders_in_headless_chromium: no chromium on PATH \
             (apt-get install chromium, or set CHROMIUM=/path/to/browser)"
        );
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-browser");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let records = report_common::history(30, 100);
    let report = report_common::write_run(&dir, &records, true);
    let paths = report::render_all(&dir).unwrap();
    let page = paths.html.canonicalize().unwrap();

    let dom = chromium(&browser, &page, &["--dump-dom"]);
    assert!(dom.contains("<body"), "no DOM dumped:\n{dom}");
    let check = attr_of(&dom, "<body", "data-render-check");
    assert_eq!(check.as_deref(), Some("ok"), "the page's own check");

    // Every chart drew shapes and has a real size on screen.
    for (chart, min_drawn) in [
        ("timeline", 150),
        ("throughput", 40),
        ("takeover-latency", 60),
        ("ownership", 40),
    ] {
        let drawn = number(&dom, chart, "data-drawn");
        assert!(
            drawn >= min_drawn,
            "chart {chart}: {drawn} shapes drawn, expected ≥ {min_drawn}"
        );
        let (w, h) = size(&dom, chart);
        assert!(w >= 500 && h >= 150, "chart {chart} is {w}×{h}");
    }
    // Data marks (shapes in the data colours): a bar per publishing stretch in the timeline,
    // a point per second of traffic, a dot per fault-caused takeover, a step per table scan.
    let takeovers = report.totals.fault_takeovers;
    assert!(takeovers >= 20, "the fixture has takeovers: {takeovers}");
    let bars = number(&dom, "timeline", "data-marks");
    assert!(
        bars >= 30 + takeovers,
        "timeline: {bars} bars for 30 streams and {takeovers} takeovers"
    );
    let seconds = number(&dom, "throughput", "data-mark-points");
    assert!(seconds >= 29, "events/s: {seconds} points for a 30 s run");
    let dots = number(&dom, "takeover-latency", "data-marks");
    assert!(
        dots > takeovers,
        "latency: {dots} marks for {takeovers} takeovers"
    );
    let steps = number(&dom, "ownership", "data-mark-points");
    assert!(
        steps >= 3 * 30,
        "ownership: {steps} points for 3 workers over 30 scans"
    );
    // One labelled row per sampled stream; one point per fault-caused takeover.
    let rows = number(&dom, "timeline", "data-rows");
    assert_eq!(rows, 30);
    assert_eq!(number(&dom, "timeline", "data-rows-drawn"), rows);
    assert_eq!(
        number(&dom, "takeover-latency", "data-points"),
        report.totals.fault_takeovers
    );
    // The failed expectation is shown as failed.
    assert!(dom.contains("<td class=\"fail\">✗ FAIL</td>"));

    let shot = dir.join("screenshot.png");
    chromium(
        &browser,
        &page,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1200,4200",
        ],
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert_eq!(&png[1..4], b"PNG");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert_eq!(width, 1200);
    // A blank page compresses to a few kilobytes; charts and tables do not.
    assert!(
        png.len() > 100_000,
        "screenshot is only {} bytes",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
}
