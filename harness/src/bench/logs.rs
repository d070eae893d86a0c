//! The phase split from the workers' JSON logs: when each new owner logged "stream acquired;
//! consuming" (after its acquire `UpdateItem` returned, before it connected upstream), and the
//! "first batch accepted" line with the acquisition's phases (acquire round trip, connect, first
//! replayed frame, first accepted batch).

use std::collections::HashMap;
use std::path::Path;

/// The worker's log message for a fresh acquisition.
pub const ACQUIRED_MESSAGE: &str = "stream acquired; consuming";
/// The worker's log message when an acquisition's first batch is accepted, with its phases.
pub const FIRST_BATCH_MESSAGE: &str = "first batch accepted";

/// The phase split the worker logs with [`FIRST_BATCH_MESSAGE`] (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PhaseLine {
    /// Wall clock (Unix ms) when the acquiring `UpdateItem` was sent.
    pub acquire_started_unix_ms: i64,
    /// The acquire's round trip.
    pub acquire_ms: u64,
    /// Acquire answered → upstream WebSocket open.
    pub connect_ms: u64,
    /// Socket open → first frame (the replay from the checkpoint starts).
    pub first_event_ms: u64,
    /// First frame → the sink's 2xx for the first batch.
    pub first_accept_ms: u64,
}

/// (owner, stream, fence) → the phase line of that acquisition, from every `*.log` in `dir`.
pub fn phases(dir: &Path) -> HashMap<(String, String, u64), PhaseLine> {
    by_acquisition(dir, FIRST_BATCH_MESSAGE, parse_phases)
}

/// One JSON "first batch accepted" line → (stream_id, fence_token, phases).
pub fn parse_phases(line: &str) -> Option<(String, u64, PhaseLine)> {
    let v = log_line(line, FIRST_BATCH_MESSAGE)?;
    let get = |k: &str| field(&v, k);
    let ms = |k: &str| get(k).and_then(serde_json::Value::as_u64);
    let phase = PhaseLine {
        acquire_started_unix_ms: get("acquire_started_unix_ms")?.as_i64()?,
        acquire_ms: ms("acquire_ms")?,
        connect_ms: ms("connect_ms")?,
        first_event_ms: ms("first_event_ms")?,
        first_accept_ms: ms("first_accept_ms")?,
    };
    let (stream, fence) = stream_and_fence(&v)?;
    Some((stream, fence, phase))
}

/// The JSON log line `line`, when its message is `message`.
fn log_line(line: &str, message: &str) -> Option<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    (field(&v, "message")?.as_str()? == message).then_some(v)
}

/// A field of a JSON log line, at the top level or under `fields` (tracing writes either).
fn field<'a>(v: &'a serde_json::Value, k: &str) -> Option<&'a serde_json::Value> {
    v.get(k).or_else(|| v.get("fields").and_then(|f| f.get(k)))
}

fn stream_and_fence(v: &serde_json::Value) -> Option<(String, u64)> {
    let stream = field(v, "stream_id")?.as_str()?.to_string();
    Some((stream, field(v, "fence_token")?.as_u64()?))
}

/// (owner, stream, fence) → what `parse` makes of each line carrying `message`, from every
/// `*.log` in `dir`.
fn by_acquisition<T>(
    dir: &Path,
    message: &str,
    parse: fn(&str) -> Option<(String, u64, T)>,
) -> HashMap<(String, String, u64), T> {
    let mut out = HashMap::new();
    for (owner, text) in logs(dir) {
        for line in text.lines().filter(|l| l.contains(message)) {
            if let Some((stream, fence, value)) = parse(line) {
                out.insert((owner.clone(), stream, fence), value);
            }
        }
    }
    out
}

/// (worker name, log text) of every `*.log` in `dir` (the worker's name is the file stem).
fn logs(dir: &Path) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .filter_map(|path| {
            let owner = path.file_stem()?.to_string_lossy().to_string();
            Some((owner, std::fs::read_to_string(&path).ok()?))
        })
        .collect()
}

/// (owner, stream, fence) → Unix ms of the acquisition log line, from every `*.log` in `dir`
/// (the worker's name is the file stem).
pub fn acquisitions(dir: &Path) -> HashMap<(String, String, u64), i64> {
    by_acquisition(dir, ACQUIRED_MESSAGE, parse_acquired)
}

/// One JSON log line → (stream_id, fence_token, Unix ms).
pub fn parse_acquired(line: &str) -> Option<(String, u64, i64)> {
    let v = log_line(line, ACQUIRED_MESSAGE)?;
    let (stream, fence) = stream_and_fence(&v)?;
    let at = rfc3339_ms(v.get("timestamp")?.as_str()?)?;
    Some((stream, fence, at))
}

/// `2026-12-02T17:10:29.123456Z` → Unix milliseconds (UTC only, as the worker writes it).
pub fn rfc3339_ms(ts: &str) -> Option<i64> {
    let ts = ts.strip_suffix('Z')?;
    let (date, time) = ts.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>());
    let (h, min, s) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    let frac3: String = frac.chars().chain("000".chars()).take(3).collect();
    let ms: i64 = frac3.parse().ok()?;
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + min) * 60_000 + s * 1000 + ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_timestamps_and_acquisitions() {
        assert_eq!(rfc3339_ms("1970-01-01T00:00:01.5Z"), Some(1_500));
        assert_eq!(
            rfc3339_ms("2024-02-29T12:00:00.123456Z"),
            Some(1_709_208_000_123)
        );
        assert_eq!(rfc3339_ms("2024-02-29T12:00:00"), None);
        let line = r#"{"timestamp":"1970-01-01T00:00:02.25Z","level":"INFO","message":"stream acquired; consuming","stream_id":"s-0003","fence_token":4,"from":10}"#;
        assert_eq!(parse_acquired(line), Some(("s-0003".into(), 4, 2_250)));
        assert_eq!(parse_acquired(r#"{"message":"other"}"#), None);
        let line = r#"{"timestamp":"1970-01-01T00:00:02.25Z","level":"INFO","fields":{"message":"first batch accepted","stream_id":"s-0003","fence_token":4,"acquire_started_unix_ms":2100,"acquire_ms":12,"connect_ms":3,"first_event_ms":1,"first_accept_ms":9,"total_ms":25,"first_batch_events":40}}"#;
        assert_eq!(
            parse_phases(line),
            Some((
                "s-0003".into(),
                4,
                PhaseLine {
                    acquire_started_unix_ms: 2100,
                    acquire_ms: 12,
                    connect_ms: 3,
                    first_event_ms: 1,
                    first_accept_ms: 9,
                }
            ))
        );
        assert_eq!(
            parse_phases(r#"{"fields":{"message":"first batch accepted"}}"#),
            None
        );
    }
}
