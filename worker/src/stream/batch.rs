//! The sink side of a stream runner: cutting the pending events into a fenced batch (design §4),
//! posting it, and acting on the sink's answer through the core (accepted: advance; 409: lost;
//! anything else: retry with backoff, never past the local deadline).

use std::time::Duration;

use bytes::Bytes;
use lease_protocol::SinkBatch;
use tokio::time::Instant;

use super::{unit, BoxFut, Exit, Runner};
use crate::config::RejectPolicy;
use crate::decide::{Backoff, LostReason};
use crate::sink::{dead_letter, Sink, SinkAnswer};

/// Longest a sink post may take (less when the lease has less time left).
pub const SINK_TIMEOUT: Duration = Duration::from_secs(5);
const SINK_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(50),
    cap: Duration::from_secs(2),
};

/// Retries of a batch the sink rejected permanently (`SINK_REJECT_POLICY=halt`): a fixed sink
/// may accept it later; until then one post per stream every half minute at most.
const HALT_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(500),
    cap: Duration::from_secs(30),
};

pub(super) struct Post {
    body: Bytes,
    first: u64,
    through: u64,
    count: usize,
    attempt: u32,
}

impl Runner {
    pub(super) fn take_batch(&mut self) -> Post {
        let mut events = std::mem::take(&mut self.spare);
        std::mem::swap(&mut events, &mut self.pending);
        self.pending_since = None;
        let through = events.last().map(|e| e.seq).unwrap_or(0);
        let first = events.first().map(|e| e.seq).unwrap_or(0);
        let count = events.len();
        let batch = SinkBatch {
            owner_id: self.shared.owner_id.to_string(),
            fence_token: self.core.fence(),
            events,
        };
        let body = Sink::encode(&batch);
        let mut events = batch.events;
        events.clear();
        self.spare = events;
        Post {
            body,
            first,
            through,
            count,
            attempt: 0,
        }
    }

    pub(super) fn start_post(&mut self, post: Post, now: Instant) -> Option<Exit> {
        if !self.core.may_publish(now) {
            return Some(self.lose(LostReason::Deadline));
        }
        let mut limit = SINK_TIMEOUT;
        if let Some((by, _)) = self.release {
            limit = limit.min(
                by.saturating_duration_since(now)
                    .max(Duration::from_millis(1)),
            );
        }
        let Some(timeout) = self.core.call_timeout(now, limit) else {
            return Some(self.lose(LostReason::Deadline));
        };
        let sink = self.shared.sink.clone();
        let url = self.url.clone();
        let body = post.body.clone();
        let not_after = self.core.enforces_deadline().then(|| self.core.deadline());
        let fut = Box::pin(async move { sink.post(&url, body, timeout, not_after).await });
        self.posting = Some((post, fut));
        None
    }

    pub(super) fn on_sink_answer(&mut self, answer: SinkAnswer) -> Option<Exit> {
        let (post, _) = self.posting.take().expect("a post was in flight");
        let now = Instant::now();
        match answer {
            SinkAnswer::Accepted(_) => {
                if let Some(status) = self.halted.take() {
                    self.shared.metrics.halted_streams.dec();
                    tracing::info!(stream_id = %self.id, fence_token = self.core.fence(), first_seq = post.first, last_seq = post.through, was_status = status, "the sink accepted the batch it had rejected; stream resumed");
                }
                self.core.on_sink_accepted(post.through);
                self.log_phases(now, post.count);
                self.shared
                    .metrics
                    .events_published
                    .inc_by(post.count as u64);
                self.shared.metrics.batches_published.inc();
                None
            }
            SinkAnswer::NotSent => Some(self.lose(LostReason::Deadline)),
            SinkAnswer::Fenced(detail) => {
                self.shared.metrics.sink_rejected("409");
                tracing::warn!(stream_id = %self.id, fence_token = self.core.fence(), %detail, "sink refused our fence token (409)");
                Some(self.lose(LostReason::SinkFenced))
            }
            SinkAnswer::Rejected { status, detail } => {
                self.shared.metrics.sink_rejected("4xx");
                self.on_rejected(post, status, &detail, now)
            }
            SinkAnswer::Transient { status, detail } => {
                self.shared.metrics.sink_rejected(status);
                let delay = self
                    .core
                    .retry_after(SINK_BACKOFF, post.attempt, unit(), now);
                tracing::warn!(stream_id = %self.id, fence_token = self.core.fence(), status, %detail, attempt = post.attempt, "sink post failed; will retry");
                match delay {
                    Some(d) => {
                        let post = Post {
                            attempt: post.attempt + 1,
                            ..post
                        };
                        self.retry = Some((post, now + d));
                        None
                    }
                    None => Some(self.lose(LostReason::Deadline)),
                }
            }
        }
    }
}

impl Runner {
    /// A permanent rejection (issue #17: before, it was retried for ever as if transient, with
    /// nothing said). Never skipped silently: halted and retried, or dead-lettered and recorded.
    fn on_rejected(&mut self, post: Post, status: u16, detail: &str, now: Instant) -> Option<Exit> {
        let range = (post.first, post.through);
        if let RejectPolicy::DeadLetter(dir) = &self.shared.sink_reject {
            match dead_letter(dir, &self.id, range, self.core.fence(), &post.body) {
                Ok(path) => {
                    tracing::error!(stream_id = %self.id, fence_token = self.core.fence(), first_seq = range.0, last_seq = range.1, status, answer = %detail, file = %path.display(), "sink rejected a batch permanently; written to the dead-letter directory and skipped (SINK_REJECT_POLICY=dead-letter)");
                    self.shared
                        .metrics
                        .dead_lettered_events
                        .inc_by(post.count as u64);
                    self.core.on_sink_accepted(post.through);
                    self.note_skipped(range, post.count as u64);
                    return None;
                }
                Err(e) => {
                    tracing::error!(stream_id = %self.id, dir = %dir.display(), error = %e, "cannot write the dead-letter file; halting the stream instead");
                }
            }
        }
        if self.halted.is_none() {
            self.shared.metrics.halted_streams.inc();
        }
        self.halted = Some(status);
        let delay = HALT_BACKOFF.delay(post.attempt, 0.5 + 0.5 * unit());
        tracing::error!(stream_id = %self.id, fence_token = self.core.fence(), first_seq = range.0, last_seq = range.1, status, answer = %detail, attempt = post.attempt, retry_in_ms = delay.as_millis() as u64, "sink rejected a batch permanently; stream halted at its last accepted event, lease kept, retrying the same batch (SINK_REJECT_POLICY=halt)");
        let post = Post {
            attempt: post.attempt + 1,
            ..post
        };
        self.retry = Some((post, now + delay));
        None
    }

    /// Records a dead-lettered range on the stream's item (in the background; a failure is
    /// logged, the file and the metric remain).
    fn note_skipped(&self, (first, through): (u64, u64), count: u64) {
        let table = self.shared.table.clone();
        let (id, fence) = (self.id.clone(), self.core.fence());
        tokio::spawn(async move {
            if let Err(e) = table
                .note_skipped(&id, fence, (first, through), count)
                .await
            {
                tracing::warn!(stream_id = %id, first, through, error = %e, "could not record the dead-lettered range on the lease item");
            }
        });
    }
}

pub(super) async fn maybe_post(posting: &mut Option<(Post, BoxFut<SinkAnswer>)>) -> SinkAnswer {
    match posting {
        Some((_, fut)) => fut.await,
        None => std::future::pending().await,
    }
}
