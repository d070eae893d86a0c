//! Delivered-throughput benchmark: N streams (default 1,000), one live WebSocket subscriber each
//! over loopback, every event checked for contiguity by its client.
//!
//! `cargo bench -p mock-upstream` (≈ 20 s). The server and the clients run in this one process on
//! separate runtimes with named threads, so the CPU of each side is read from
//! `/proc/self/task/*/stat`. Knobs (environment): `BENCH_STREAMS`, `BENCH_RATE` (events/s per
//! stream), `BENCH_PAYLOAD`, `BENCH_RETENTION`, `BENCH_SECONDS`, `BENCH_SERVER_THREADS`,
//! `BENCH_CLIENT_THREADS`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mock_upstream::UpstreamConfig;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

const SERVER_THREAD: &str = "upstream-srv";
const CLIENT_THREAD: &str = "bench-client";
/// Clock ticks per second of `/proc` CPU times (USER_HZ; 100 on Linux).
const CLK_TCK: f64 = 100.0;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
        Err(_) => default,
    }
}

#[derive(Default)]
struct Counters {
    received: AtomicU64,
    holes: AtomicU64,
    ended: AtomicU64,
}

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --all-targets` run a quick smoke check.
    let full = std::env::args().any(|a| a == "--bench");
    let streams: usize = env("BENCH_STREAMS", if full { 1_000 } else { 20 });
    let rate: f64 = env("BENCH_RATE", 250.0);
    let payload: usize = env("BENCH_PAYLOAD", 64);
    let retention: usize = env("BENCH_RETENTION", 1_000);
    let seconds: f64 = env("BENCH_SECONDS", if full { 10.0 } else { 1.0 });
    let server_threads: usize = env("BENCH_SERVER_THREADS", 2);
    let client_threads: usize = env("BENCH_CLIENT_THREADS", 2);
    let tick_ms: u64 = env(
        "BENCH_TICK_MS",
        mock_upstream::DEFAULT_TICK.as_millis() as u64,
    );

    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(server_threads)
        .thread_name(SERVER_THREAD)
        .enable_all()
        .build()
        .unwrap();
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(client_threads)
        .thread_name(CLIENT_THREAD)
        .enable_all()
        .build()
        .unwrap();

    let rss_before = rss_bytes();
    let ids: Vec<String> = (1..=streams)
        .map(|i| lease_protocol::stream_name("s-", i))
        .collect();
    let mut config = UpstreamConfig::new(ids.clone());
    config.rate = rate;
    config.payload_bytes = payload;
    config.retention = retention;
    config.tick = Duration::from_millis(tick_ms);
    let (addr, handle) = server_rt.block_on(mock_upstream::start(config)).unwrap();

    let counters = Arc::new(Counters::default());
    let connected = Arc::new(AtomicU64::new(0));
    for id in &ids {
        let url = format!("ws://{addr}{}", lease_protocol::upstream_path(id, None));
        let (counters, connected) = (counters.clone(), connected.clone());
        client_rt.spawn(async move {
            // Small client buffers, so the process's RSS is mostly the server's.
            let config = WebSocketConfig::default()
                .read_buffer_size(16 * 1024)
                .write_buffer_size(0);
            let (mut ws, _) =
                tokio_tungstenite::connect_async_with_config(url, Some(config), false)
                    .await
                    .expect("connect");
            connected.fetch_add(1, Ordering::Relaxed);
            let (mut last, mut unflushed) = (0u64, 0u64);
            while let Some(Ok(msg)) = ws.next().await {
                if let Message::Text(text) = msg {
                    let seq = seq_of(&text);
                    if last != 0 && seq != last + 1 {
                        counters.holes.fetch_add(1, Ordering::Relaxed);
                    }
                    last = seq;
                    unflushed += 1;
                    if unflushed == 16 {
                        counters.received.fetch_add(unflushed, Ordering::Relaxed);
                        unflushed = 0;
                    }
                }
            }
            counters.received.fetch_add(unflushed, Ordering::Relaxed);
            counters.ended.fetch_add(1, Ordering::Relaxed);
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while connected.load(Ordering::Relaxed) < streams as u64 {
        assert!(
            Instant::now() < deadline,
            "clients did not connect within 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // Warm up long enough for every ring to fill (memory is then at its bound).
    let fill = retention as f64 / rate.max(1.0);
    let warmup = Duration::from_secs_f64(if full { fill.clamp(2.0, 10.0) } else { 0.5 });
    std::thread::sleep(warmup);

    let cpu0 = cpu_ticks();
    let (recv0, prod0, t0) = (
        counters.received.load(Ordering::Relaxed),
        handle.events_produced(),
        Instant::now(),
    );
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let (recv1, prod1, wall) = (
        counters.received.load(Ordering::Relaxed),
        handle.events_produced(),
        t0.elapsed().as_secs_f64(),
    );
    let cpu1 = cpu_ticks();
    let rss_full = rss_bytes();
    let retained = handle.status().retained_bytes;

    handle.stop_production();
    server_rt.block_on(handle.shutdown());
    let deadline = Instant::now() + Duration::from_secs(10);
    while counters.ended.load(Ordering::Relaxed) < streams as u64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }

    let delivered = (recv1 - recv0) as f64 / wall;
    let produced = (prod1 - prod0) as f64 / wall;
    let pct = |ticks: u64| ticks as f64 / CLK_TCK / wall * 100.0;
    let server_cpu = pct(cpu1.server - cpu0.server);
    let client_cpu = pct(cpu1.client - cpu0.client);
    let total_cpu = pct(cpu1.total - cpu0.total);
    println!("mock-upstream throughput benchmark");
    println!(
        "  streams {streams}, rate {rate}/s per stream, payload {payload} B, retention {retention}, \
         tick {tick_ms} ms, {seconds} s measured after {:.1} s warm-up",
        warmup.as_secs_f64()
    );
    println!("  produced           {produced:>12.0} events/s");
    println!("  delivered          {delivered:>12.0} events/s (received and checked by clients)");
    println!(
        "  holes/repeats      {:>12}",
        counters.holes.load(Ordering::Relaxed)
    );
    println!("  server CPU         {server_cpu:>11.0}% of one core ({server_threads} threads)");
    println!("  client CPU         {client_cpu:>11.0}% of one core ({client_threads} threads)");
    println!("  process CPU        {total_cpu:>11.0}% of one core");
    println!(
        "  server µs/event    {:>12.2}",
        server_cpu / 100.0 / delivered.max(1.0) * 1e6
    );
    println!(
        "  ring memory        {:>12.1} KiB per stream (full retention; {:.0} B per event)",
        retained as f64 / 1024.0 / streams as f64,
        retained as f64 / (streams * retention) as f64
    );
    println!(
        "  RSS growth         {:>12.1} MiB ({:.0} KiB per stream, clients and sockets included)",
        (rss_full.saturating_sub(rss_before)) as f64 / 1048576.0,
        (rss_full.saturating_sub(rss_before)) as f64 / 1024.0 / streams as f64,
    );
    drop(client_rt);
    assert_eq!(
        counters.holes.load(Ordering::Relaxed),
        0,
        "a client saw a hole or repeat"
    );
}

/// The `seq` of an event frame, found without a JSON parse (the bench measures the server).
fn seq_of(text: &str) -> u64 {
    let at = text.find("\"seq\":").expect("event frame has a seq") + 6;
    text[at..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0, |n, d| n * 10 + u64::from(d - b'0'))
}

struct Cpu {
    server: u64,
    client: u64,
    total: u64,
}

/// CPU ticks (user + system) of this process and of its server and client threads.
fn cpu_ticks() -> Cpu {
    let mut cpu = Cpu {
        server: 0,
        client: 0,
        total: stat_ticks(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default()).1,
    };
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let (name, ticks) = stat_ticks(&stat);
        if name.starts_with(SERVER_THREAD) {
            cpu.server += ticks;
        } else if name.starts_with(CLIENT_THREAD) {
            cpu.client += ticks;
        }
    }
    cpu
}

/// `(comm, utime + stime)` from a `/proc/.../stat` line.
fn stat_ticks(stat: &str) -> (String, u64) {
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
        return (String::new(), 0);
    };
    let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    // After the comm: field 3 is index 0, so utime (14) is index 11 and stime (15) index 12.
    let ticks = fields
        .get(11)
        .and_then(|u| u.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
    (stat[open + 1..close].to_string(), ticks)
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
