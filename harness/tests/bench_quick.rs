//! The `--quick` benchmarks through the `harness` command line, against real DynamoDB Local and
//! real `lease-worker` processes: the files are written and the numbers are sane. Nothing here
//! asserts a timing target (the machine decides those); it asserts that what was measured is
//! self-consistent.
//!
//! Each takes one to three minutes, so they are ignored by default; CI runs them with
//! `cargo build -p lease-worker && cargo test -p harness --test bench_quick -- --ignored --test-threads 1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// `target/debug/lease-worker`, or a failure that says how to build it.
fn worker_bin() -> PathBuf {
    let harness = PathBuf::from(env!("CARGO_BIN_EXE_harness"));
    let bin = harness.with_file_name("lease-worker");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p lease-worker`",
        bin.display()
    );
    bin
}

fn bench(args: &[&str], out: &Path) -> Value {
    let status = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("bench")
        .args(args)
        .arg("--quick")
        .arg("--out")
        .arg(out)
        .arg("--worker-bin")
        .arg(worker_bin())
        .status()
        .expect("running harness");
    assert!(
        status.success(),
        "harness bench {args:?} exited with {status}"
    );
    let text = std::fs::read_to_string(out.join("bench.json")).expect("bench.json written");
    serde_json::from_str(&text).expect("bench.json is JSON")
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing or not a number in {v}"))
}

#[test]
#[ignore = "takes about two minutes; CI runs it with --ignored"]
fn quick_takeover_bench_writes_sane_files() {
    let dir = tempfile::tempdir().unwrap();
    let json = bench(&["takeover"], dir.path());
    for file in ["bench.md", "bench.html", "samples.csv"] {
        assert!(dir.path().join(file).is_file(), "{file} missing");
    }
    let html = std::fs::read_to_string(dir.path().join("bench.html")).unwrap();
    assert!(html.contains("<svg"), "bench.html has inline charts");
    assert!(
        !html.contains("<script src") && !html.contains("<link "),
        "self-contained"
    );

    let rows = json["takeover"].as_array().expect("takeover list");
    let mut keys = std::collections::BTreeSet::new();
    for row in rows {
        let (mode, kind) = (row["mode"].as_str().unwrap(), row["kind"].as_str().unwrap());
        assert!(["expiry-aware", "poll"].contains(&mode), "{row}");
        assert!(["crash", "handoff"].contains(&kind), "{row}");
        keys.insert((row["lease_ms"].as_u64().unwrap(), mode, kind));
        if row["samples"].as_u64().unwrap() == 0 {
            continue;
        }
        let (t, o) = (&row["takeover_ms"], &row["overhead_ms"]);
        assert!(
            num(t, "p50") <= num(t, "p99") && num(t, "p99") <= num(t, "max"),
            "{row}"
        );
        assert!(
            num(o, "p50") <= num(o, "p99") && num(o, "p99") <= num(o, "max"),
            "{row}"
        );
        // overhead = takeover − floor and floors are never negative.
        assert!(num(o, "max") <= num(t, "max"), "{row}");
        if kind == "handoff" {
            assert_eq!(
                num(o, "max"),
                num(t, "max"),
                "a handoff's floor is 0: {row}"
            );
        }
    }
    let with_samples = rows
        .iter()
        .filter(|r| r["samples"].as_u64().unwrap() > 0)
        .count();
    assert!(
        with_samples >= 4,
        "too few (lease, mode, kind) rows with samples: {rows:?}"
    );
    for cost in json["cost"].as_array().expect("cost list") {
        let renew = cost["renew_ms"].as_f64().unwrap();
        assert!(
            num(cost, "requests_per_stream_hour_measured") > 0.0,
            "{cost}"
        );
        assert!(
            num(cost, "requests_per_stream_hour_formula") >= 3_600_000.0 / renew - 1e-6,
            "{cost}"
        );
        assert!(keys.contains(&(cost["lease_ms"].as_u64().unwrap(), "poll", "crash")));
    }
}

#[test]
#[ignore = "takes about two minutes; CI runs it with --ignored"]
fn quick_throughput_bench_writes_sane_files() {
    let dir = tempfile::tempdir().unwrap();
    let json = bench(&["throughput"], dir.path());
    let t = &json["throughput"];
    for key in [
        "events_per_s",
        "events_per_s_per_worker_core",
        "streams",
        "workers",
        "worker_rss_bytes_per_stream",
        "harness_cpu_share",
    ] {
        assert!(
            t.get(key).is_some_and(Value::is_number),
            "{key} missing in {t}"
        );
    }
    assert!(num(t, "events_per_s") > 0.0, "{t}");
    assert!(num(t, "events_per_s_per_worker_core") > 0.0, "{t}");
    assert!(num(t, "streams") >= 1.0 && num(t, "workers") >= 1.0, "{t}");
    assert!(num(t, "worker_rss_bytes_per_stream") > 0.0, "{t}");
    let share = num(t, "harness_cpu_share");
    assert!(share > 0.0 && share <= 1.0, "{t}");
    for step in t["steps"].as_array().unwrap() {
        // The fleet's lease writes are counted: a step that warmed up acquired every stream.
        let writes = &step["lease_writes"];
        assert!(
            num(writes, "acquires") >= num(t, "streams").min(1.0),
            "{step}"
        );
        for key in [
            "acquire_timeouts",
            "renewal_timeouts",
            "throttled",
            "leases_lost",
        ] {
            assert!(writes[key].is_number(), "{key} missing in {step}");
        }
        if step["warm_up_ms"].is_number() {
            assert!(num(step, "warm_up_ms") > 0.0, "{step}");
        }
        if step["sustained"].as_bool().unwrap() {
            assert!(
                num(step, "accepted_per_s") >= 0.9 * num(step, "produced_per_s"),
                "{step}"
            );
        }
    }
}

#[test]
#[ignore = "takes about two minutes; CI runs it with --ignored"]
fn quick_scale_bench_writes_sane_files() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["scale", "--discovery", "full,segmented", "--workers", "3"];
    let json = bench(&args, dir.path());
    for file in ["scale.md", "scale.html"] {
        assert!(dir.path().join(file).is_file(), "{file} missing");
    }
    let rows = json["scale"].as_array().expect("scale list");
    assert_eq!(rows.len(), 2, "one row per discovery at 3 workers: {json}");
    let (full, segmented) = (&rows[0], &rows[1]);
    assert_eq!(full["discovery"], "full", "{json}");
    assert_eq!(segmented["discovery"], "segmented", "{json}");
    // The segmented fleet ran segmented: its membership table answered (heartbeats, scans).
    // (Its lease-table scans cost no less at 60 streams: a segment of 20 items costs the
    // 0.5-unit minimum of a request, as the whole table does; the full bench compares them.)
    let members = &segmented["member_units_per_stream_hour_by_api"];
    assert!(
        num(members, "UpdateItem") > 0.0 && num(members, "Scan") > 0.0,
        "{segmented}"
    );
    assert!(
        full["member_units_per_stream_hour_by_api"]
            .as_object()
            .unwrap()
            .is_empty(),
        "{full}"
    );
    let lease_ms = num(&json["scale_config"], "lease_ms");
    let renew_s = num(&json["scale_config"], "renew_ms") / 1000.0;
    for row in rows {
        // Capacity came from the workers' meters: renewals at one write unit each, give or take
        // the hurried renewals of a freshly acquired stream and the takeovers' writes.
        let writes = num(row, "write_units_per_stream_hour");
        let renewals = 3600.0 / renew_s;
        assert!(
            writes > 0.5 * renewals && writes < 3.0 * renewals,
            "{writes} write units per stream-hour against {renewals} renewals: {row}"
        );
        assert!(num(row, "read_units_per_stream_hour") > 0.0, "{row}");
        let by_api = &row["units_per_stream_hour_by_api"];
        assert!(
            num(by_api, "Scan") > 0.0 && num(by_api, "GetItem") > 0.0,
            "{row}"
        );
        for op in ["renew", "scan", "fleet_read"] {
            assert!(
                num(&row["requests_per_stream_hour"], op) > 0.0,
                "{op}: {row}"
            );
        }
        // The workers' scan counters fired: each worker scans every renew interval (the
        // worker's default SCAN_SECONDS), give or take a rescan after a lost race.
        let workers = num(row, "workers");
        let scans = num(row, "scans_per_s");
        assert!(
            scans > 0.5 * workers / renew_s && scans < 3.0 * workers / renew_s,
            "{scans} scans/s from {workers} workers scanning every {renew_s} s: {row}"
        );
        // Every scan reads every item, and the fleet signal is read on its own too.
        assert!(num(row, "hottest_item_reads_per_s") > scans, "{row}");
        assert!(num(row, "crash_samples") >= 1.0, "{row}");
        assert!(num(row, "handoff_samples") >= 1.0, "{row}");
        let crash = &row["crash_overhead_ms"];
        assert!(num(crash, "p50") <= num(crash, "max"), "{row}");
        // A handoff has no lease to wait out.
        assert!(num(&row["handoff_ms"], "max") < lease_ms, "{row}");
        assert!(num(row, "worker_rss_bytes_per_stream") > 0.0, "{row}");
        let share = num(row, "harness_cpu_share");
        assert!(share > 0.0 && share <= 1.0, "{row}");
    }
    let model = &json["cost_model"];
    assert!(!model["assumptions"].as_array().unwrap().is_empty());
    let priced = model["rows"].as_array().unwrap();
    // The measured size and the two default model sizes, for each design.
    assert_eq!(priced.len(), 6, "{model}");
    let large = priced.last().unwrap();
    assert_eq!(
        (num(large, "streams"), num(large, "workers")),
        (100_000.0, 1_000.0)
    );
    assert!(num(large, "usd_per_month") > 0.0, "{large}");
    assert!(
        num(large, "hottest_item_reads_per_s") > 0.0 && num(large, "write_units_per_s") > 0.0,
        "{large}"
    );
}

/// A small throughput ramp (2 workers, 20 streams, 3 s steps at `rates`) into `out`, with its
/// stderr piped for the test to read.
fn small_throughput_bench(out: &Path, rates: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["bench", "throughput", "--quick", "--workers", "2"])
        .args(["--streams", "20", "--rates", rates, "--step-seconds", "3"])
        .arg("--out")
        .arg(out)
        .arg("--worker-bin")
        .arg(worker_bin())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running harness")
}

/// Ctrl-C during a bench: the step in progress finishes, no further step starts, the files say
/// so and hold what was measured, and the exit code is 130.
#[test]
#[ignore = "takes about a minute; CI runs it with --ignored"]
fn an_interrupted_bench_writes_what_it_measured_and_exits_130() {
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let mut child = small_throughput_bench(dir.path(), "5,10");
    // stderr is read on its own thread so that a hung harness fails the test instead of hanging it.
    let (tx, rx) = mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut seen = Vec::new();
    let mut signalled = false;
    let status = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                if !signalled && line.contains("bench throughput: 20 streams × 5 events/s") {
                    // SAFETY: a plain kill(2) to our own child, which has not been reaped.
                    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
                    signalled = true;
                }
                seen.push(line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break child.wait().expect("waiting for harness");
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the harness did not finish within 300 s; stderr: {seen:#?}");
        }
    };
    assert!(signalled, "the first step never started: {seen:#?}");
    assert_eq!(status.code(), Some(130), "exit status; stderr: {seen:#?}");
    assert!(
        !seen.iter().any(|l| l.contains("× 10 events/s")),
        "a step started after the signal: {seen:#?}"
    );
    let text = std::fs::read_to_string(dir.path().join("bench.json")).expect("bench.json written");
    let json: Value = serde_json::from_str(&text).expect("bench.json is JSON");
    let t = &json["throughput"];
    assert_eq!(t["interrupted"], Value::Bool(true), "{t}");
    let steps = t["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 1, "only the step in progress: {t}");
    assert!(num(&steps[0], "produced_per_s") > 0.0, "{t}");
    let md = std::fs::read_to_string(dir.path().join("throughput.md")).unwrap();
    assert!(md.contains("Interrupted by a signal"), "{md}");
}

/// Ctrl-C before the first step: nothing was measured, so nothing is written and an earlier
/// run's files in the directory stay as they were; the exit code is still 130.
#[test]
#[ignore = "starts DynamoDB Local; CI runs it with --ignored"]
fn a_bench_interrupted_before_measuring_keeps_earlier_files() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let earlier = "{\"throughput\": \"an earlier run\"}\n";
    std::fs::write(dir.path().join("bench.json"), earlier).unwrap();
    let mut child = small_throughput_bench(dir.path(), "5");
    let mut seen = Vec::new();
    // The provisioning line comes after the handlers are installed and before the first step
    // checks for a signal; the step cannot start before DynamoDB Local answers.
    for line in BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        if seen.is_empty() && line.starts_with("dynamodb-local:") {
            // SAFETY: a plain kill(2) to our own child, which has not been reaped.
            assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
        }
        if line.starts_with("dynamodb-local:") || !seen.is_empty() {
            seen.push(line);
        }
    }
    let status = child.wait().expect("waiting for harness");
    assert!(!seen.is_empty(), "DynamoDB Local was never provisioned");
    assert_eq!(status.code(), Some(130), "exit status; stderr: {seen:#?}");
    assert!(
        seen.iter().any(|l| l.contains("nothing written")),
        "stderr says nothing was written: {seen:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("bench.json")).unwrap(),
        earlier,
        "the earlier bench.json was kept"
    );
    assert!(!dir.path().join("throughput.md").exists());
}
