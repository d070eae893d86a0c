//! What the end-to-end tests share: the `harness` and `lease-worker` binaries, running a
//! scenario through the command line, reading a run's history, and checking that no worker
//! process is left behind.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `target/debug/lease-worker`, or a failure that says how to build it.
pub fn worker_bin() -> PathBuf {
    let harness = PathBuf::from(env!("CARGO_BIN_EXE_harness"));
    let bin = harness.with_file_name("lease-worker");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p lease-worker` (cargo test --workspace builds it too)",
        bin.display()
    );
    bin
}

/// The `harness` command, quiet.
pub fn harness() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_harness"));
    cmd.env("RUST_LOG", "warn");
    cmd
}

/// Writes `text` as `DIR/NAME.toml` and runs it with the real worker into `DIR/out`, with
/// `extra` arguments; returns the output and the out directory.
pub fn run_scenario(dir: &Path, name: &str, text: &str, extra: &[&str]) -> (Output, PathBuf) {
    let scenario = dir.join(format!("{name}.toml"));
    std::fs::write(&scenario, text).unwrap();
    let out = dir.join("out");
    let output = harness()
        .arg("run")
        .arg(&scenario)
        .arg("--out")
        .arg(&out)
        .arg("--worker-bin")
        .arg(worker_bin())
        .args(extra)
        .output()
        .unwrap();
    (output, out)
}

/// Panics with the run's output unless it exited with `code`.
pub fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The lines of a run's `history.jsonl`.
pub fn history(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("history.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A run's `report.json`.
pub fn report(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

pub fn is_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Zombies (exited, not reaped) count as gone.
pub fn is_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Pids of the worker processes a history recorded.
pub fn worker_pids(history: &Path) -> Vec<i32> {
    std::fs::read_to_string(history)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["kind"] == "worker_start")
        .filter_map(|v| v["pid"].as_i64().map(|p| p as i32))
        .collect()
}

/// Waits until none of `pids` runs; returns those still running after `limit`.
pub fn wait_gone(pids: &[i32], limit: Duration) -> Vec<i32> {
    let start = Instant::now();
    loop {
        let alive: Vec<i32> = pids.iter().copied().filter(|p| is_running(*p)).collect();
        if alive.is_empty() || start.elapsed() > limit {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
