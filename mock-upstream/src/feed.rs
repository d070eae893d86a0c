//! The sequenced feed: per-stream ring buffers of compact event slots (the production instant
//! and timestamp; the sequence is the position, and the payload — `{stream}/{seq}.` and a shared
//! filler — is derived from both), rendered to wire text when read, and the single producer
//! task that appends to all of them on a fixed tick.
//!
//! Subscribers never get events pushed at them: each reads the ring by its own cursor and waits on
//! the stream's `head` watch when it has caught up. Replay and live delivery are the same read, so
//! the replay/live seam cannot have a hole or a repeat. This module never touches a socket.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::ws::Utf8Bytes;
use tokio::sync::watch;
use tokio::time::{Duration, Instant};

/// One event read from a ring: its production instant (for the delay fault) and its wire text.
#[derive(Clone)]
pub(crate) struct Entry {
    pub produced: Instant,
    pub text: Utf8Bytes,
    /// A sequence the skip fault withholds: never sent, and no gap notice says so.
    pub skipped: bool,
}

/// `ts_ms` of a slot the skip fault withholds.
const SKIPPED: i64 = i64::MIN;

/// One retained event: 24 bytes. The frame text is rendered on read, so a scale run's retention
/// (2,000 streams × 600 events) costs 29 MB instead of the ~230 MB of pre-rendered frames.
#[derive(Clone, Copy)]
struct Slot {
    produced: Instant,
    ts_ms: i64,
}

/// The retained window of one stream: `slots` hold seqs `head - len + 1 ..= head`.
struct Ring {
    slots: VecDeque<Slot>,
    head: u64,
}

/// What a read at a cursor found.
pub(crate) enum Read {
    /// `n` entries (seqs `cursor .. cursor + n`) were appended to the output.
    Entries(usize),
    /// The cursor is older than the oldest retained sequence, which is given.
    Behind { oldest: u64 },
}

/// One stream: its ring buffer, its head watch, and its connection bookkeeping.
pub(crate) struct Stream {
    pub id: Arc<str>,
    /// The id as a JSON string literal (quotes included), spliced into every frame.
    json_id: String,
    /// The payload as a JSON string literal, shared by every event of the feed.
    json_payload: Arc<str>,
    retention: usize,
    ring: Mutex<Ring>,
    /// The last produced seq; subscribers wait on it.
    head: watch::Sender<u64>,
    /// Bumped to close every connection of this stream (admin drop, drop fault, shutdown).
    drops: watch::Sender<u64>,
    /// Open WebSocket connections on this stream.
    pub connections: AtomicUsize,
    /// Ranges lost by the gap fault (first ..= last), oldest first.
    lost: Mutex<Vec<(u64, u64)>>,
}

impl Stream {
    fn new(id: &str, json_payload: Arc<str>, retention: usize) -> Self {
        Stream {
            id: Arc::from(id),
            json_id: serde_json::to_string(id).expect("strings serialise"),
            json_payload,
            retention,
            ring: Mutex::new(Ring {
                slots: VecDeque::with_capacity(retention.min(1024)),
                head: 0,
            }),
            head: watch::Sender::new(0),
            drops: watch::Sender::new(0),
            connections: AtomicUsize::new(0),
            lost: Mutex::new(Vec::new()),
        }
    }

    /// The ranges the gap fault lost (first ..= last), oldest first: events no consumer could
    /// ever read, so a checker does not owe them.
    pub fn lost_ranges(&self) -> Vec<(u64, u64)> {
        self.lost.lock().expect("lost lock").clone()
    }

    /// The last produced sequence number (0 before the first event).
    pub fn last_seq(&self) -> u64 {
        *self.head.borrow()
    }

    /// Watches the head; a subscriber waits on it when it has caught up.
    pub fn subscribe_head(&self) -> watch::Receiver<u64> {
        self.head.subscribe()
    }

    /// Watches the drop generation; a change means "close now".
    pub fn subscribe_drops(&self) -> watch::Receiver<u64> {
        self.drops.subscribe()
    }

    /// Closes every connection of this stream; returns how many were open.
    pub fn drop_connections(&self) -> usize {
        self.drops.send_modify(|g| *g += 1);
        self.connections.load(Ordering::Relaxed)
    }

    /// The oldest retained sequence (head + 1 when nothing is retained yet).
    pub fn oldest(&self) -> u64 {
        let ring = self.ring.lock().expect("ring lock");
        ring.head + 1 - ring.slots.len() as u64
    }

    /// Heap bytes held by the ring's slots.
    pub fn retained_bytes(&self) -> usize {
        let ring = self.ring.lock().expect("ring lock");
        ring.slots.capacity() * std::mem::size_of::<Slot>()
    }

    /// Renders up to `max` entries starting at seq `cursor` into `out` (the ring lock is held
    /// only to copy the slots).
    pub fn read(&self, cursor: u64, max: usize, out: &mut Vec<Entry>) -> Read {
        let mut copied = [Slot {
            produced: Instant::now(),
            ts_ms: 0,
        }; 256];
        let n = {
            let ring = self.ring.lock().expect("ring lock");
            let oldest = ring.head + 1 - ring.slots.len() as u64;
            if cursor < oldest {
                return Read::Behind { oldest };
            }
            if cursor > ring.head {
                return Read::Entries(0);
            }
            let start = (cursor - oldest) as usize;
            let end = ring.slots.len().min(start + max.min(copied.len()));
            for (to, from) in copied.iter_mut().zip(ring.slots.range(start..end)) {
                *to = *from;
            }
            end - start
        };
        let mut scratch = String::new();
        out.extend(copied[..n].iter().zip(cursor..).map(|(slot, seq)| {
            if slot.ts_ms == SKIPPED {
                return Entry {
                    produced: slot.produced,
                    text: Utf8Bytes::default(),
                    skipped: true,
                };
            }
            event_text(
                &mut scratch,
                &self.json_id,
                seq,
                slot.ts_ms,
                &self.json_payload,
            );
            Entry {
                produced: slot.produced,
                // An exact-size allocation per event, as the socket wants it.
                text: Utf8Bytes::from(scratch.as_str()),
                skipped: false,
            }
        }));
        Read::Entries(n)
    }

    /// The gap fault: `count` events are produced and lost at once, together with everything
    /// retained, as when a consumer's outage outlasts retention. A reader behind the new head
    /// gets a gap notice on its next connection (a live reader is closed as a slow consumer
    /// and reconnects). Returns the lost range: the old oldest retained seq ..= the new head.
    pub fn lose(&self, count: u64) -> (u64, u64) {
        let (first, head) = {
            let mut ring = self.ring.lock().expect("ring lock");
            let first = ring.head + 1 - ring.slots.len() as u64;
            ring.head += count;
            ring.slots.clear();
            (first, ring.head)
        };
        self.head.send_replace(head);
        self.lost.lock().expect("lost lock").push((first, head));
        (first, head)
    }

    /// The skip fault: the next sequence is produced but never sent, with no gap notice (a
    /// broken upstream). Returns the withheld seq.
    pub fn skip_next(&self, now: Instant) -> u64 {
        self.produce(1, now, SKIPPED)
    }

    /// Appends `count` events, evicting past retention, then wakes subscribers once.
    fn produce(&self, count: u64, now: Instant, ts_ms: i64) -> u64 {
        if count == 0 {
            return self.last_seq();
        }
        let head = {
            let mut ring = self.ring.lock().expect("ring lock");
            for _ in 0..count {
                ring.head += 1;
                // Evict before appending so the deque never grows past `retention` slots.
                if ring.slots.len() == self.retention {
                    ring.slots.pop_front();
                }
                ring.slots.push_back(Slot {
                    produced: now,
                    ts_ms,
                });
            }
            ring.head
        };
        self.head.send_replace(head);
        head
    }
}

/// Writes the wire text of one event into `s` (the same bytes `UpstreamFrame::to_text` gives).
/// The payload is [`lease_protocol::payload_prefix`]`(stream, seq)` then the shared filler, so
/// a sink can check each event carries its own content; `json_id` and `json_payload` are JSON
/// string literals (quoted), spliced into one.
fn event_text(s: &mut String, json_id: &str, seq: u64, ts_ms: i64, json_payload: &str) {
    use std::fmt::Write;
    let inner = |literal: &str| -> usize { literal.len().saturating_sub(1) };
    s.clear();
    s.push_str(r#"{"type":"event","stream_id":"#);
    s.push_str(json_id);
    write!(s, r#","seq":{seq},"ts_ms":{ts_ms},"payload":"#).expect("write to String");
    s.push_str(&json_id[..inner(json_id)]); // the id's literal without its closing quote
    write!(s, "/{seq}.").expect("write to String");
    s.push_str(&json_payload[1.min(json_payload.len())..]); // the filler without its opening quote
    s.push('}');
}

/// Production state, shared by the admin API and the producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProductionState {
    /// Producing at the configured rate.
    Running,
    /// Paused by the admin API; resumes without a burst.
    Paused,
    /// Stopped for good; every stream's `last_seq` is final.
    Stopped,
}

/// All streams plus the production switches and counters.
pub(crate) struct Feed {
    pub streams: Vec<Arc<Stream>>,
    by_id: std::collections::HashMap<Arc<str>, Arc<Stream>>,
    rate: f64,
    state: AtomicU8,
    /// Wakes the producer when the state changes.
    state_changed: tokio::sync::Notify,
    /// Events produced over all streams.
    pub produced: AtomicU64,
    /// Event frames handed to sockets over all connections.
    pub sent: AtomicU64,
}

const RUNNING: u8 = 0;
const PAUSED: u8 = 1;
const STOPPED: u8 = 2;

impl Feed {
    pub fn new(ids: &[String], rate: f64, payload_bytes: usize, retention: usize) -> Self {
        let json_payload: Arc<str> = serde_json::to_string(&payload(payload_bytes))
            .expect("strings serialise")
            .into();
        let streams: Vec<Arc<Stream>> = ids
            .iter()
            .map(|id| Arc::new(Stream::new(id, json_payload.clone(), retention)))
            .collect();
        let by_id = streams.iter().map(|s| (s.id.clone(), s.clone())).collect();
        Feed {
            streams,
            by_id,
            rate,
            state: AtomicU8::new(RUNNING),
            state_changed: tokio::sync::Notify::new(),
            produced: AtomicU64::new(0),
            sent: AtomicU64::new(0),
        }
    }

    pub fn stream(&self, id: &str) -> Option<&Arc<Stream>> {
        self.by_id.get(id)
    }

    pub fn state(&self) -> ProductionState {
        match self.state.load(Ordering::Acquire) {
            RUNNING => ProductionState::Running,
            PAUSED => ProductionState::Paused,
            _ => ProductionState::Stopped,
        }
    }

    /// Pauses or resumes production; `Stopped` is final and cannot be left.
    pub fn set_state(&self, to: ProductionState) -> ProductionState {
        let want = match to {
            ProductionState::Running => RUNNING,
            ProductionState::Paused => PAUSED,
            ProductionState::Stopped => STOPPED,
        };
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                (cur != STOPPED).then_some(want)
            });
        self.state_changed.notify_one();
        self.state()
    }

    /// Produces `count` events now on one stream (for `rate = 0` runs); refused once stopped.
    pub fn produce_now(&self, stream: &Stream, count: u64) -> Option<u64> {
        if self.state() == ProductionState::Stopped {
            return None;
        }
        let head = stream.produce(count, Instant::now(), unix_ms());
        self.produced.fetch_add(count, Ordering::Relaxed);
        Some(head)
    }

    /// The gap fault on one stream ([`Stream::lose`]); refused once stopped.
    pub fn lose_now(&self, stream: &Stream, count: u64) -> Option<(u64, u64)> {
        if self.state() == ProductionState::Stopped {
            return None;
        }
        self.produced.fetch_add(count, Ordering::Relaxed);
        Some(stream.lose(count))
    }

    /// The skip fault on one stream ([`Stream::skip_next`]); refused once stopped.
    pub fn skip_now(&self, stream: &Stream) -> Option<u64> {
        if self.state() == ProductionState::Stopped {
            return None;
        }
        self.produced.fetch_add(1, Ordering::Relaxed);
        Some(stream.skip_next(Instant::now()))
    }

    /// The producer: one task advancing every stream by the events due since the last tick.
    ///
    /// The count due is computed from the time spent running (not from tick counts), so a late
    /// tick catches up and a pause leaves no burst behind it.
    pub async fn run_producer(self: Arc<Self>, tick: Duration) {
        if self.rate <= 0.0 {
            return;
        }
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pacer = Pacer::new(self.rate);
        loop {
            match self.state() {
                ProductionState::Stopped => return,
                ProductionState::Paused => {
                    pacer.pause(Instant::now());
                    self.state_changed.notified().await;
                    continue;
                }
                ProductionState::Running => {}
            }
            let now = Instant::now();
            let count = pacer.due(now);
            if count > 0 {
                let ts_ms = unix_ms();
                for stream in &self.streams {
                    stream.produce(count, now, ts_ms);
                }
                self.produced
                    .fetch_add(count * self.streams.len() as u64, Ordering::Relaxed);
            }
            tokio::select! {
                _ = ticker.tick() => {}
                _ = self.state_changed.notified() => {}
            }
        }
    }
}

/// How many events each stream owes at an instant: `rate` times the time spent running, minus
/// what was already produced. Counting from running time (not ticks) makes a late tick catch up
/// and leaves no burst after a pause.
struct Pacer {
    rate: f64,
    /// Running time before the current segment.
    banked: Duration,
    /// Start of the current running segment (`None` while paused).
    segment_start: Option<Instant>,
    done: u64,
}

impl Pacer {
    fn new(rate: f64) -> Self {
        Pacer {
            rate,
            banked: Duration::ZERO,
            segment_start: None,
            done: 0,
        }
    }

    /// Ends the running segment at `now`.
    fn pause(&mut self, now: Instant) {
        if let Some(start) = self.segment_start.take() {
            self.banked += now.saturating_duration_since(start);
        }
    }

    /// Events due since the last call (starts a running segment if none is open).
    fn due(&mut self, now: Instant) -> u64 {
        let start = *self.segment_start.get_or_insert(now);
        let running = self.banked + now.saturating_duration_since(start);
        let due = (running.as_secs_f64() * self.rate).floor() as u64;
        let count = due.saturating_sub(self.done);
        self.done = self.done.max(due);
        count
    }
}

/// A deterministic ASCII payload of `bytes` bytes.
fn payload(bytes: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..bytes)
        .map(|i| ALPHABET[i % ALPHABET.len()] as char)
        .collect()
}

/// Wall-clock Unix milliseconds for `ts_ms`.
fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_protocol::{UpstreamEvent, UpstreamFrame};

    #[test]
    fn event_text_is_the_protocol_frame() {
        let feed = Feed::new(&["s-\"1\"".into()], 1.0, 5, 10);
        let stream = &feed.streams[0];
        feed.produce_now(stream, 1).unwrap();
        let mut out = Vec::new();
        assert!(matches!(stream.read(1, 10, &mut out), Read::Entries(1)));
        let frame = UpstreamFrame::parse(&out[0].text).unwrap();
        let UpstreamFrame::Event(UpstreamEvent {
            stream_id,
            seq,
            payload,
            ..
        }) = &frame
        else {
            panic!("not an event: {frame:?}")
        };
        assert_eq!(
            (stream_id.as_str(), *seq, payload.as_str()),
            ("s-\"1\"", 1, "s-\"1\"/1.abcde")
        );
        assert!(lease_protocol::payload_matches(payload, stream_id, 1));
        assert_eq!(frame.to_text(), out[0].text.as_str());
    }

    #[test]
    fn ring_keeps_the_last_retention_events() {
        let feed = Feed::new(&["a".into()], 1.0, 0, 3);
        let stream = &feed.streams[0];
        let mut out = Vec::new();
        assert!(matches!(stream.read(1, 10, &mut out), Read::Entries(0)));
        feed.produce_now(stream, 5).unwrap();
        assert_eq!(stream.last_seq(), 5);
        assert_eq!(stream.oldest(), 3);
        assert!(matches!(
            stream.read(2, 10, &mut out),
            Read::Behind { oldest: 3 }
        ));
        assert!(matches!(stream.read(4, 10, &mut out), Read::Entries(2)));
        assert!(matches!(stream.read(3, 1, &mut out), Read::Entries(1)));
        assert!(matches!(stream.read(6, 10, &mut out), Read::Entries(0)));
        let seqs: Vec<u64> = out
            .iter()
            .map(|e| match UpstreamFrame::parse(&e.text).unwrap() {
                UpstreamFrame::Event(ev) => ev.seq,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(seqs, [4, 5, 3]);
    }

    #[test]
    fn stopped_is_final() {
        let feed = Feed::new(&["a".into()], 1.0, 0, 3);
        assert_eq!(
            feed.set_state(ProductionState::Paused),
            ProductionState::Paused
        );
        assert_eq!(
            feed.set_state(ProductionState::Stopped),
            ProductionState::Stopped
        );
        assert_eq!(
            feed.set_state(ProductionState::Running),
            ProductionState::Stopped
        );
        assert!(feed.produce_now(&feed.streams[0], 1).is_none());
    }

    #[test]
    fn pacer_follows_the_rate_and_pauses_without_a_burst() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut pacer = Pacer::new(100.0);
        assert_eq!(pacer.due(at(0)), 0);
        assert_eq!(pacer.due(at(5)), 0);
        assert_eq!(pacer.due(at(10)), 1);
        assert_eq!(pacer.due(at(1000)), 99, "a late tick catches up");
        pacer.pause(at(1000));
        // Paused for 10 s: on resume nothing is owed for the pause.
        assert_eq!(pacer.due(at(11_000)), 0);
        assert_eq!(pacer.due(at(11_500)), 50);
        let mut fractional = Pacer::new(0.5);
        assert_eq!(fractional.due(at(0)), 0);
        assert_eq!(fractional.due(at(1999)), 0);
        assert_eq!(fractional.due(at(2000)), 1);
    }

    #[tokio::test]
    async fn producer_produces_the_same_sequence_on_every_stream_and_stops_for_good() {
        let feed = Arc::new(Feed::new(&["a".into(), "b".into()], 1000.0, 0, 100_000));
        let task = tokio::spawn(feed.clone().run_producer(Duration::from_millis(5)));
        while feed.streams[1].last_seq() < 20 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        feed.set_state(ProductionState::Stopped);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("producer stops")
            .unwrap();
        let last = feed.streams[0].last_seq();
        assert_eq!(feed.streams[1].last_seq(), last);
        assert_eq!(feed.produced.load(Ordering::Relaxed), 2 * last);
    }
}
