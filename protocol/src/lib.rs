//! Wire types shared by `mock-upstream`, `lease-worker` and the harness's fencing sink.
//!
//! One definition of each frame and batch (design §3 and §4), and of the worker's setting names
//! ([`settings`], design §6), so the three programs cannot drift apart. This crate holds data
//! and (de)serialisation only: no I/O, no clocks.

pub mod settings;

use serde::{Deserialize, Serialize};

/// One server → client text frame on an upstream WebSocket (design §3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum UpstreamFrame {
    /// A sequenced event; `seq` starts at 1 per stream and never repeats inside a connection.
    Event(UpstreamEvent),
    /// `from` was older than retention: the events in `requested..oldest_available` are gone.
    Gap(GapNotice),
}

/// A sequenced upstream event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamEvent {
    pub stream_id: String,
    pub seq: u64,
    /// Wall-clock production time, Unix milliseconds.
    pub ts_ms: i64,
    pub payload: String,
}

/// Sent once when a replay asked for data older than retention.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapNotice {
    pub stream_id: String,
    pub requested: u64,
    pub oldest_available: u64,
}

impl UpstreamFrame {
    /// Parses one text frame; the error says what was wrong, for logging with the stream id.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Serialises the frame as the JSON text sent on the wire.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("upstream frames always serialise")
    }
}

/// `POST {SINK_URL}/streams/{stream_id}/events` body (design §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkBatch {
    pub owner_id: String,
    pub fence_token: u64,
    pub events: Vec<SinkEvent>,
}

/// One event inside a sink batch; idempotent by `event_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkEvent {
    pub seq: u64,
    pub event_id: String,
    pub payload: String,
}

/// Body of a 2xx sink answer: how many events were new and how many were repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkAck {
    pub accepted: u64,
    pub duplicates: u64,
}

/// Body of a 409 sink answer: the batch's token was lower than the highest seen; nothing stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkRejection {
    pub reason: String,
    pub highest_fence: u64,
}

/// The idempotency key of an event: `"{stream_id}:{seq}"`.
pub fn event_id(stream_id: &str, seq: u64) -> String {
    format!("{stream_id}:{seq}")
}

/// The name of the `index`-th stream (1-based) for `--stream-count N --stream-prefix P`: `s-0001`.
pub fn stream_name(prefix: &str, index: usize) -> String {
    format!("{prefix}{index:04}")
}

/// Path of a stream's WebSocket on the upstream, relative to `UPSTREAM_URL`.
pub fn upstream_path(stream_id: &str, from: Option<u64>) -> String {
    match from {
        Some(seq) => format!("/streams/{stream_id}?from={seq}"),
        None => format!("/streams/{stream_id}"),
    }
}

/// Path a batch is posted to, relative to `SINK_URL`.
pub fn sink_path(stream_id: &str) -> String {
    format!("/streams/{stream_id}/events")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_frame_matches_design_example() {
        let text =
            r#"{"type":"event","stream_id":"s-0001","seq":42,"ts_ms":1764670000000,"payload":"x"}"#;
        let frame = UpstreamFrame::parse(text).unwrap();
        assert_eq!(
            frame,
            UpstreamFrame::Event(UpstreamEvent {
                stream_id: "s-0001".into(),
                seq: 42,
                ts_ms: 1_764_670_000_000,
                payload: "x".into(),
            })
        );
        assert_eq!(frame.to_text(), text);
    }

    #[test]
    fn gap_frame_matches_design_example() {
        let text = r#"{"type":"gap","stream_id":"s-0001","requested":5,"oldest_available":900}"#;
        let frame = UpstreamFrame::parse(text).unwrap();
        assert!(
            matches!(frame, UpstreamFrame::Gap(ref g) if g.requested == 5 && g.oldest_available == 900)
        );
        assert_eq!(frame.to_text(), text);
    }

    #[test]
    fn malformed_frames_are_errors() {
        for bad in [
            "",
            "{}",
            r#"{"type":"event"}"#,
            r#"{"type":"nope","seq":1}"#,
            "[1,2]",
        ] {
            assert!(UpstreamFrame::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn sink_batch_matches_design_example() {
        let text = r#"{"owner_id":"w","fence_token":7,"events":[{"seq":42,"event_id":"s-0001:42","payload":"p"}]}"#;
        let batch: SinkBatch = serde_json::from_str(text).unwrap();
        assert_eq!(batch.fence_token, 7);
        assert_eq!(batch.events[0].event_id, event_id("s-0001", 42));
        assert_eq!(serde_json::to_string(&batch).unwrap(), text);
    }

    #[test]
    fn names_and_paths() {
        assert_eq!(stream_name("s-", 1), "s-0001");
        assert_eq!(stream_name("s-", 12345), "s-12345");
        assert_eq!(upstream_path("a", Some(5)), "/streams/a?from=5");
        assert_eq!(upstream_path("a", None), "/streams/a");
        assert_eq!(sink_path("a"), "/streams/a/events");
    }
}
