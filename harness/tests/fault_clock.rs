//! Clock faults on a real process: a child started the way the fleet starts a skewed worker
//! (libfaketime preloaded, its offset in a timestamp file) reads a wall clock off by the offset,
//! sees a step written mid-run at its next read, and keeps a real monotonic clock (Rust's
//! `Instant`, which tokio's timers use) all along. Needs libfaketime (`apt-get install faketime`;
//! `.ci/run` installs it).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use harness::faults::clock::{find_libfaketime, Clocks};
use harness::fleet::SpawnHook;

const PROBE_ENV: &str = "FAULT_CLOCK_PROBE";
const PROBE_SLEEP: Duration = Duration::from_millis(1500);

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Run as a child by the test below: prints its wall clock, sleeps on the monotonic clock,
/// prints its wall clock and the monotonic time that passed.
#[test]
#[ignore = "a child process of clock_faults_move_the_wall_clock_only"]
fn clock_probe() {
    if std::env::var_os(PROBE_ENV).is_none() {
        return;
    }
    println!("probe wall {}", unix_ms());
    let start = Instant::now();
    std::thread::sleep(PROBE_SLEEP);
    println!("probe after {} {}", unix_ms(), start.elapsed().as_millis());
}

#[test]
fn clock_faults_move_the_wall_clock_only() {
    let lib = find_libfaketime().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let clocks = Clocks::new(
        lib,
        dir.path(),
        BTreeMap::from([("probe".to_string(), 4000)]),
    );
    let env = clocks.env("probe").unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "clock_probe",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PROBE_ENV, "1")
        .envs(env)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        // The test harness may print `test clock_probe ... ` on the same line first.
        .filter_map(|l| l.find("probe ").map(|i| l[i..].to_string()));
    let first = lines.next().expect("the probe printed nothing");
    let real = unix_ms();
    let wall: i64 = first.rsplit(' ').next().unwrap().parse().unwrap();
    let skew = wall - real;
    assert!(
        (3000..=5000).contains(&skew),
        "offset +4000 ms, the child's clock is {skew} ms off"
    );

    // A step of −5 s while the child sleeps: its next wall-clock read is back by 5 s, its
    // monotonic clock is not.
    assert_eq!(clocks.step("probe", -5000).unwrap(), -1000);
    let second = lines.next().expect("the probe stopped");
    let fields: Vec<i64> = second
        .split(' ')
        .skip(2)
        .map(|f| f.parse().unwrap())
        .collect();
    let (wall_after, mono_ms) = (fields[0], fields[1]);
    let wall_delta = wall_after - wall;
    assert!(
        (PROBE_SLEEP.as_millis() as i64..3000).contains(&mono_ms),
        "monotonic time moved {mono_ms} ms over a {PROBE_SLEEP:?} sleep: it must stay real"
    );
    assert!(
        (-4500..=-2500).contains(&wall_delta),
        "after a −5 s step over a 1.5 s sleep the wall clock moved {wall_delta} ms"
    );
    assert!(child.wait().unwrap().success());
    assert_eq!(clocks.offset("probe"), Some(-1000));
}
