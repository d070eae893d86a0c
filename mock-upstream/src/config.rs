//! The server's configuration: one struct, its defaults as named constants, and the checks that
//! refuse an impossible configuration before anything binds.

use std::net::SocketAddr;
use std::time::Duration;

use crate::Error;

/// Default events per second per stream.
pub const DEFAULT_RATE: f64 = 10.0;
/// Default payload size of each event, in bytes.
pub const DEFAULT_PAYLOAD_BYTES: usize = 64;
/// Default number of events kept per stream for replay.
pub const DEFAULT_RETENTION: usize = 10_000;
/// Default period of the producer's tick (all streams are advanced together on each tick).
pub const DEFAULT_TICK: Duration = Duration::from_millis(5);
/// Default interval between server pings on an idle connection.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(10);
/// Default cap on the bytes a connection may have queued in its write buffer.
pub const DEFAULT_MAX_CONNECTION_BUFFER: usize = 4 * 1024 * 1024;
/// Largest payload accepted; larger is almost certainly a typo.
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024 * 1024;

/// Everything [`crate::start`] needs.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// Address to bind; port 0 picks a free port (the bound address is returned by `start`).
    pub listen: SocketAddr,
    /// The stream ids served, in order. Must be non-empty and unique.
    pub streams: Vec<String>,
    /// Events per second per stream; fractions allowed; 0 = only when asked through the admin API.
    pub rate: f64,
    /// Size of each event's payload string, in bytes.
    pub payload_bytes: usize,
    /// Events kept per stream (a ring buffer) for `?from=` replay.
    pub retention: usize,
    /// Period of the producer tick; events due within one tick are produced together.
    pub tick: Duration,
    /// Interval between pings the server sends on a quiet connection.
    pub ping_interval: Duration,
    /// Bytes a connection may have buffered unsent before it is closed as a slow consumer.
    pub max_connection_buffer: usize,
}

impl UpstreamConfig {
    /// A configuration with the defaults for `streams`, listening on `127.0.0.1:0`.
    pub fn new(streams: Vec<String>) -> Self {
        UpstreamConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            streams,
            rate: DEFAULT_RATE,
            payload_bytes: DEFAULT_PAYLOAD_BYTES,
            retention: DEFAULT_RETENTION,
            tick: DEFAULT_TICK,
            ping_interval: DEFAULT_PING_INTERVAL,
            max_connection_buffer: DEFAULT_MAX_CONNECTION_BUFFER,
        }
    }

    /// Refuses a configuration the server cannot honour, naming the field and the value.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |msg: String| Err(Error::Config(msg));
        if self.streams.is_empty() {
            return bad("no streams configured: give --streams a,b or --stream-count N".into());
        }
        let mut seen = std::collections::HashSet::new();
        for id in &self.streams {
            if let Err(why) = check_stream_id(id) {
                return bad(format!("stream id {id:?} is invalid: {why}"));
            }
            if !seen.insert(id.as_str()) {
                return bad(format!("stream id {id:?} is listed twice"));
            }
        }
        if !self.rate.is_finite() || self.rate < 0.0 {
            return bad(format!(
                "rate {} is invalid: events per second must be a finite number >= 0",
                self.rate
            ));
        }
        if self.payload_bytes > MAX_PAYLOAD_BYTES {
            return bad(format!(
                "payload_bytes {} is larger than the limit {MAX_PAYLOAD_BYTES}",
                self.payload_bytes
            ));
        }
        if self.retention == 0 {
            return bad("retention 0 is invalid: keep at least 1 event per stream".into());
        }
        if self.tick.is_zero() {
            return bad("tick 0 is invalid: the producer needs a period > 0".into());
        }
        if self.ping_interval.is_zero() {
            return bad("ping_interval 0 is invalid".into());
        }
        if self.max_connection_buffer == 0 {
            return bad("max_connection_buffer 0 is invalid".into());
        }
        Ok(())
    }
}

/// A stream id must be usable as one URL path segment without escaping.
pub fn check_stream_id(id: &str) -> Result<(), &'static str> {
    if id.is_empty() {
        return Err("it is empty");
    }
    if id.len() > 256 {
        return Err("it is longer than 256 bytes");
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'~'))
    {
        return Err("only ASCII letters, digits and - _ . : ~ are allowed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> UpstreamConfig {
        UpstreamConfig::new(vec!["s-0001".into(), "s-0002".into()])
    }

    #[test]
    fn defaults_are_valid() {
        config().validate().unwrap();
    }

    #[test]
    fn impossible_configurations_are_refused_by_name() {
        type Mutation = Box<dyn Fn(&mut UpstreamConfig)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|c| c.streams.clear()), "no streams"),
            (Box::new(|c| c.streams.push("s-0001".into())), "twice"),
            (Box::new(|c| c.streams.push("a/b".into())), "\"a/b\""),
            (Box::new(|c| c.streams.push(String::new())), "empty"),
            (Box::new(|c| c.rate = -1.0), "rate -1"),
            (Box::new(|c| c.rate = f64::NAN), "rate NaN"),
            (Box::new(|c| c.retention = 0), "retention 0"),
            (Box::new(|c| c.payload_bytes = usize::MAX), "payload_bytes"),
            (Box::new(|c| c.tick = Duration::ZERO), "tick 0"),
        ];
        for (mutate, expected) in cases {
            let mut c = config();
            mutate(&mut c);
            let err = c.validate().unwrap_err().to_string();
            assert!(
                err.contains(expected),
                "{err:?} does not mention {expected:?}"
            );
        }
    }
}
