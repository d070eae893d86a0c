//! What the benchmark reads from outside its own process: the workers' Prometheus `/metrics`
//! (DynamoDB request counters, events published) and `/proc` (CPU time, RSS of a pid).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// The counter the worker increments on every DynamoDB request (labels `op`, `outcome`).
pub const DYNAMODB_REQUESTS: &str = "lease_worker_dynamodb_requests_total";
/// Capacity units DynamoDB reported consumed (labels `api`, `kind`).
pub const DYNAMODB_CAPACITY: &str = "lease_worker_dynamodb_capacity_units_total";
/// Discovery scans completed.
pub const SCANS: &str = "lease_worker_scans_total";
/// Leases a worker lost without releasing them (label `reason`).
pub const LEASES_LOST: &str = "lease_worker_leases_lost_total";
/// Events in batches the sink accepted.
pub const EVENTS_PUBLISHED: &str = "lease_worker_events_published_total";

/// Sums of one counter family by one label's value, from Prometheus text.
pub fn sum_by_label(text: &str, metric: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(metric) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once('}') {
                Some((l, v)) => (l, v),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue, // another metric sharing the prefix
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let key = labels
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| k.trim() == label)
            .map(|(_, v)| v.trim().trim_matches('"').to_string())
            .unwrap_or_default();
        *out.entry(key).or_default() += value;
    }
    out
}

/// The sum of one counter family over the series whose labels include every `(label, value)`
/// of `filter`, from Prometheus text.
pub fn sum_where(text: &str, metric: &str, filter: &[(&str, &str)]) -> f64 {
    let mut total = 0.0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(metric).and_then(|r| r.strip_prefix('{')) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once('}') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let pairs: Vec<(&str, &str)> = labels
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim().trim_matches('"')))
            .collect();
        if filter.iter().all(|f| pairs.contains(f)) {
            total += value;
        }
    }
    total
}

/// Fetches `http://ADDR/metrics`.
pub async fn scrape(client: &reqwest::Client, addr: SocketAddr) -> anyhow::Result<String> {
    let response = client
        .get(format!("http://{addr}/metrics"))
        .timeout(Duration::from_secs(3))
        .send()
        .await?;
    Ok(response.error_for_status()?.text().await?)
}

/// CPU time (user + system) of `pid` in clock ticks converted to milliseconds, and its RSS in
/// bytes, from `/proc/PID/stat`; `None` when the process is gone.
pub fn proc_usage(pid: i32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// Parses `/proc/PID/stat`: fields 14 (utime), 15 (stime), 24 (rss pages).
pub fn parse_stat(stat: &str) -> Option<(u64, u64)> {
    // The command name (field 2) may contain spaces: split after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field n is fields[n - 3].
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let rss_pages: u64 = fields.get(21)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let (tick, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK).max(1) as u64,
            libc::sysconf(libc::_SC_PAGESIZE).max(1) as u64,
        )
    };
    Some(((utime + stime) * 1000 / tick, rss_pages * page))
}

/// Total CPU time of the machine (all cores, every state but idle and iowait) in ms, and the
/// number of cores, from `/proc/stat`.
pub fn machine_busy_ms() -> Option<(u64, usize)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = cpu
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    let busy: u64 = v
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, x)| *x)
        .sum();
    let cores = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count();
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK).max(1) as u64 };
    Some((busy * 1000 / tick, cores.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_a_counter_by_label() {
        let text = "# HELP x\n\
            lease_worker_dynamodb_requests_total{op=\"renew\",outcome=\"ok\"} 10\n\
            lease_worker_dynamodb_requests_total{op=\"renew\",outcome=\"timeout\"} 2\n\
            lease_worker_dynamodb_requests_total{outcome=\"ok\",op=\"scan\"} 3\n\
            lease_worker_dynamodb_requests_total_other{op=\"renew\"} 99\n\
            lease_worker_events_published_total 42\n";
        let by_op = sum_by_label(text, DYNAMODB_REQUESTS, "op");
        assert_eq!(by_op["renew"], 12.0);
        assert_eq!(by_op["scan"], 3.0);
        assert_eq!(by_op.len(), 2);
        assert_eq!(sum_by_label(text, EVENTS_PUBLISHED, "x")[""], 42.0);
        assert_eq!(sum_where(text, DYNAMODB_REQUESTS, &[("op", "renew")]), 12.0);
        assert_eq!(
            sum_where(
                text,
                DYNAMODB_REQUESTS,
                &[("outcome", "ok"), ("op", "scan")]
            ),
            3.0
        );
        assert_eq!(sum_where(text, DYNAMODB_REQUESTS, &[("op", "bid")]), 0.0);
    }

    #[test]
    fn parses_proc_stat_with_spaces_in_the_name() {
        let stat = "123 (lease worker) S 1 123 123 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 100 1000000 300 18446744073709551615";
        let (cpu_ms, rss) = parse_stat(stat).unwrap();
        // SAFETY: sysconf has no preconditions.
        let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        assert_eq!(cpu_ms, 300 * 1000 / tick);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
        assert_eq!(rss, 300 * page);
        assert!(proc_usage(std::process::id() as i32).is_some());
    }
}
