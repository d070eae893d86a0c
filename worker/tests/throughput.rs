//! A measurement, not a pass/fail bound (ignored by default): one `lease-worker` process owning
//! many streams of the mock upstream, publishing to the in-process sink. Prints events/s and the
//! worker's CPU seconds per million events.
//!
//! `STREAMS=200 RATE=100 SECONDS=15 cargo test -p lease-worker --test throughput -- --ignored --nocapture`

mod common;

use std::time::Duration;

use common::*;
use tokio::time::Instant;

fn env_or(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// utime + stime of a process, in seconds (Linux /proc).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run with --ignored --nocapture"]
async fn throughput_of_one_worker() {
    let _serial = SERIAL.lock().await;
    let streams = env_or("STREAMS", 200.0) as usize;
    let rate = env_or("RATE", 100.0);
    let seconds = env_or("SECONDS", 15.0);
    let names: Vec<String> = (1..=streams).map(|i| format!("s-{i:04}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let rig = Rig::start(&refs, rate).await;
    let sink = &rig.sink;
    let fleet = Fleet {
        lease: "10",
        renew: "3",
        scan: "3",
        extra: vec![("RUST_LOG", "warn".to_string())],
        ..rig.fleet()
    };
    let w = fleet.spawn("worker-a");
    eventually(Duration::from_secs(60), || async {
        let owned = w.metric("lease_worker_owned_streams").await.unwrap_or(0.0);
        (owned as usize == streams).then_some(())
    })
    .await
    .expect("the worker owns every stream");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start = Instant::now();
    let cpu0 = cpu_seconds(w.pid());
    let n0 = sink.receipts().len();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let n1 = sink.receipts().len();
    let cpu1 = cpu_seconds(w.pid());
    let elapsed = start.elapsed().as_secs_f64();
    let events = (n1 - n0) as f64;
    let cpu = cpu1 - cpu0;
    let requests = w
        .metric(r#"lease_worker_dynamodb_requests_total{op="renew",outcome="ok"}"#)
        .await
        .unwrap_or(0.0);
    println!(
        "streams={streams} rate={rate}/s/stream: {:.0} events/s delivered, worker CPU {:.2} s over {:.1} s \
         ({:.0} events per CPU-second), RSS {:.1} MiB ({:.0} KiB/stream), renewals so far {requests}, produced {}",
        events / elapsed,
        cpu,
        elapsed,
        events / cpu.max(1e-9),
        rss_bytes(w.pid()) as f64 / 1048576.0,
        rss_bytes(w.pid()) as f64 / 1024.0 / streams as f64,
        rig.upstream.events_produced(),
    );
    assert!(events > 0.0);
}
