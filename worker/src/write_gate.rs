//! The gate every lease request of one worker passes: its congestion window
//! ([`crate::decide::WriteWindow`], the pure part) with the waiting and counting around it.

use std::time::Duration;

use tokio::time::Instant;

use crate::decide::{admit, WriteClass, WriteOutcome, WriteWindow};

/// The lease table's requests of one worker (writes and the small reads beside them) pass
/// through one congestion window ([`crate::decide::WriteWindow`]): additive increase on timely
/// answers, halved on a slow answer, a timeout, throttling or a server error. Writes that keep
/// a lease (renew, checkpoint, release) go before writes that grow the worker (acquire, bid)
/// and may always have [`crate::decide::KEEP_FLOOR`] in flight ([`crate::decide::admit`]).
/// A worker with hundreds of streams acquired together renews them together: without a bound,
/// that burst queues at the server instead, every call in it times out at once, and every retry
/// (the timed-out writes still execute) doubles the load.
#[derive(Debug, Default)]
pub struct WriteGate {
    state: std::sync::Mutex<GateState>,
    changed: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct GateState {
    window: WriteWindow,
    in_flight: usize,
    waiting_keep: usize,
}

/// A write admitted by the gate; [`WriteGate::done`] ends it.
pub struct Admitted<'a> {
    gate: &'a WriteGate,
    started: Instant,
    ended: bool,
}

impl WriteGate {
    pub async fn admit(&self, class: WriteClass) -> Admitted<'_> {
        let mut counted = false;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.state.lock().expect("write gate lock");
                if counted {
                    st.waiting_keep -= 1;
                    counted = false;
                }
                let limit = st.window.limit();
                if admit(class, st.in_flight, st.waiting_keep, limit) {
                    st.in_flight += 1;
                    return Admitted {
                        gate: self,
                        started: Instant::now(),
                        ended: false,
                    };
                }
                if class == WriteClass::Keep {
                    st.waiting_keep += 1;
                    counted = true;
                }
            }
            // Keep the waiting count right if this future is dropped (its call timed out).
            let guard = WaitingGuard {
                gate: self,
                armed: counted,
            };
            notified.await;
            std::mem::forget(guard);
        }
    }

    /// Writes allowed in flight now.
    pub fn limit(&self) -> usize {
        self.state.lock().expect("write gate lock").window.limit()
    }
}

/// Takes a waiting keeping write off the count when its wait is abandoned.
struct WaitingGuard<'a> {
    gate: &'a WriteGate,
    armed: bool,
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut st = self.gate.state.lock().expect("write gate lock");
            st.waiting_keep = st.waiting_keep.saturating_sub(1);
            drop(st);
            self.gate.changed.notify_waiters();
        }
    }
}

impl Admitted<'_> {
    /// The write ended: `congested` when it failed (throttled, a server or network error);
    /// `timeout` is what its call allowed.
    pub fn done(mut self, congested: bool, timeout: Duration) {
        let outcome = if congested {
            WriteOutcome::Congested
        } else {
            WriteOutcome::Answered {
                latency: self.started.elapsed(),
                timeout,
            }
        };
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: WriteOutcome) {
        if self.ended {
            return;
        }
        self.ended = true;
        let mut st = self.gate.state.lock().expect("write gate lock");
        st.in_flight -= 1;
        st.window.on_write(outcome, Instant::now());
        drop(st);
        self.gate.changed.notify_waiters();
    }
}

/// Abandoned by its caller (its call timed out outside): congestion.
impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.finish(WriteOutcome::Congested);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::KEEP_FLOOR;
    use std::sync::{Arc, Mutex};

    const TIMEOUT: Duration = Duration::from_secs(2);

    /// Waits on `gate` for a `class` write, notes `name` once admitted, then holds its place.
    fn waiter(
        gate: &Arc<WriteGate>,
        class: WriteClass,
        name: &'static str,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> tokio::task::JoinHandle<()> {
        let (gate, order) = (gate.clone(), order.clone());
        tokio::spawn(async move {
            let _admitted = gate.admit(class).await;
            order.lock().unwrap().push(name);
            std::future::pending::<()>().await;
        })
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    /// The gate with [`KEEP_FLOOR`] keeping writes in flight (more than the window's start).
    async fn full(gate: &WriteGate) -> Vec<Admitted<'_>> {
        let mut running = Vec::new();
        for _ in 0..KEEP_FLOOR {
            running.push(gate.admit(WriteClass::Keep).await);
        }
        assert!(gate.limit() < KEEP_FLOOR);
        running
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_keeping_write_goes_before_a_growing_one_that_waited_longer() {
        let gate = Arc::new(WriteGate::default());
        let mut running = full(&gate).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let grow = waiter(&gate, WriteClass::Grow, "grow", &order);
        settle().await;
        let keep = waiter(&gate, WriteClass::Keep, "keep", &order);
        settle().await;
        assert!(order.lock().unwrap().is_empty(), "the gate is full");

        running.pop().unwrap().done(false, TIMEOUT);
        settle().await;
        assert_eq!(*order.lock().unwrap(), ["keep"], "upkeep up to the floor");
        for admitted in running {
            admitted.done(false, TIMEOUT);
        }
        settle().await;
        assert_eq!(
            *order.lock().unwrap(),
            ["keep", "grow"],
            "growth once inside the window"
        );
        grow.abort();
        keep.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_keeping_write_no_longer_holds_growing_ones_back() {
        let gate = Arc::new(WriteGate::default());
        let running = full(&gate).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let keep = waiter(&gate, WriteClass::Keep, "keep", &order);
        settle().await;
        // Its call timed out while it waited: the future is dropped.
        keep.abort();
        settle().await;
        let grow = waiter(&gate, WriteClass::Grow, "grow", &order);
        for admitted in running {
            admitted.done(false, TIMEOUT);
        }
        settle().await;
        assert_eq!(*order.lock().unwrap(), ["grow"]);
        grow.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_abandoned_in_flight_counts_as_congestion() {
        let gate = WriteGate::default();
        let before = gate.limit();
        drop(gate.admit(WriteClass::Keep).await);
        assert_eq!(gate.limit(), before / 2);
        gate.admit(WriteClass::Keep).await.done(false, TIMEOUT);
        assert_eq!(
            gate.limit(),
            before / 2,
            "a timely answer opens it by a fraction"
        );
    }
}
