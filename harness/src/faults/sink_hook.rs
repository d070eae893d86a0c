//! Sink faults (`sink_error`, `sink_slow`, `sink_poison`): what the in-process sink answers
//! instead of deciding a batch, and how long it waits first. The sink asks [`SinkFaults::before`]
//! once per batch; with no fault active that is one atomic load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::scenario::menu::{PoisonSeq, SinkFault};

/// The active sink faults.
#[derive(Debug)]
pub struct SinkFaults {
    any: AtomicBool,
    active: Mutex<Vec<(usize, SinkFault, u64)>>,
    rng: Mutex<ChaCha8Rng>,
    /// Batches answered by a fault instead of the sink, over the run.
    answered: AtomicU64,
}

impl Default for SinkFaults {
    fn default() -> Self {
        SinkFaults::new(0)
    }
}

/// A fault's answer to a batch: the status and the reason in the body.
pub type FaultAnswer = (u16, String);

impl SinkFaults {
    /// No fault active; `seed` seeds the `fraction` draws.
    pub fn new(seed: u64) -> SinkFaults {
        SinkFaults {
            any: AtomicBool::new(false),
            active: Mutex::new(Vec::new()),
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
            answered: AtomicU64::new(0),
        }
    }

    /// Starts fault `id`.
    pub fn apply(&self, id: usize, fault: SinkFault) {
        let mut active = self.active.lock().expect("sink faults lock");
        active.push((id, fault, 0));
        self.any.store(true, Ordering::Release);
    }

    /// Ends fault `id`; returns how many batches it answered.
    pub fn heal(&self, id: usize) -> u64 {
        let mut active = self.active.lock().expect("sink faults lock");
        let answered = active
            .iter()
            .filter(|(i, _, _)| *i == id)
            .map(|(_, _, n)| *n)
            .sum();
        active.retain(|(i, _, _)| *i != id);
        self.any.store(!active.is_empty(), Ordering::Release);
        answered
    }

    /// Batches answered by a fault so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// What to answer for a batch of `stream` holding `seqs`, after any slow-down; `None`
    /// lets the sink decide it as usual.
    pub async fn before(
        &self,
        stream: &str,
        seqs: impl Iterator<Item = u64>,
    ) -> Option<FaultAnswer> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let (delay, answer) = self.decide(stream, seqs);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if answer.is_some() {
            self.answered.fetch_add(1, Ordering::Relaxed);
        }
        answer
    }

    fn decide(
        &self,
        stream: &str,
        seqs: impl Iterator<Item = u64>,
    ) -> (Duration, Option<FaultAnswer>) {
        let seqs: Vec<u64> = seqs.collect();
        let mut active = self.active.lock().expect("sink faults lock");
        let mut delay = Duration::ZERO;
        let mut answer = None;
        for (_, fault, count) in active.iter_mut() {
            let hit = match fault {
                SinkFault::Slow { latency_ms } => {
                    delay = delay.max(Duration::from_millis(*latency_ms));
                    None
                }
                SinkFault::Error { status, fraction } => {
                    let draw: f64 = self.rng.lock().expect("sink rng lock").random();
                    (draw < *fraction)
                        .then(|| (*status, format!("sink_error fault: answering {status}")))
                }
                // A `seq_ahead` is resolved to an absolute seq when the fault is injected.
                SinkFault::Poison {
                    seq: PoisonSeq::Ahead(_),
                    ..
                } => None,
                SinkFault::Poison {
                    stream: s,
                    seq: PoisonSeq::At(seq),
                    status,
                } => (s == stream && seqs.contains(seq)).then(|| {
                    (
                        *status,
                        format!("sink_poison fault: a batch of {s} holding seq {seq} is refused with {status}"),
                    )
                }),
            };
            if let Some(hit) = hit {
                *count += 1;
                answer.get_or_insert(hit);
            }
        }
        (delay, answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn poison_hits_only_its_stream_and_seq_and_heals() {
        let faults = SinkFaults::new(1);
        assert_eq!(faults.before("s-0001", [1, 2].into_iter()).await, None);
        let poison = SinkFault::Poison {
            stream: "s-0001".into(),
            seq: PoisonSeq::At(5),
            status: 422,
        };
        faults.apply(3, poison);
        assert_eq!(faults.before("s-0001", 1..5).await, None);
        assert_eq!(faults.before("s-0002", 4..7).await, None);
        let (status, reason) = faults.before("s-0001", 4..7).await.unwrap();
        assert_eq!(status, 422);
        assert!(reason.contains("seq 5"), "{reason}");
        assert_eq!(faults.heal(3), 1);
        assert_eq!(faults.before("s-0001", 4..7).await, None);
        assert_eq!(faults.answered(), 1);
    }

    #[tokio::test]
    async fn errors_take_their_fraction() {
        let faults = SinkFaults::new(7);
        faults.apply(
            0,
            SinkFault::Error {
                status: 503,
                fraction: 0.5,
            },
        );
        let mut hits = 0;
        for _ in 0..1000 {
            if faults.before("s", std::iter::once(1)).await.is_some() {
                hits += 1;
            }
        }
        assert!((350..650).contains(&hits), "{hits} of 1000");
    }
}
