//! How many lease writes one worker keeps in flight: a congestion window, adapted to the table's
//! answers the way TCP adapts to a network's (additive increase, multiplicative decrease).
//!
//! A fixed cap cannot be right for every table: DynamoDB answers a write in milliseconds, a
//! DynamoDB Local shared by twenty workers on two cores in seconds. With a cap of 16 per worker
//! and 20 workers, a cold start of 2,000 streams queued 320 writes at once at the server; they
//! timed out after 5 s, the timed-out writes still executed, their retries doubled the load,
//! and the fleet never settled (issue #20: 7,097 acquires and 5,698 renewals timed out, 1,457
//! leases lost). Here every answer in time opens the window a little (one more write per window
//! of answers), and a sign of congestion — an answer slower than [`SLOW_ANSWER`] (or half its
//! call's timeout, if that is less), a timeout, throttling, a server error — halves it, at most
//! once per [`DECREASE_EVERY`] (about one round trip of the queue that caused it). Writes that
//! keep a lease go before writes that grow the worker, and are never held below
//! [`KEEP_FLOOR`] in flight ([`admit`]). Tried both ways on the
//! 2,000-stream cold start (2026-12-03, one run each): judging "slow" by half the call's timeout
//! alone (2.5 s for a renewal) kept the windows wide and lost 265 leases; the 1 s bound lost 19.
//! Plain data with the clock passed in.

use std::time::Duration;

use tokio::time::Instant;

/// The window's bounds and its start.
pub const WINDOW_MIN: f64 = 1.0;
pub const WINDOW_MAX: f64 = 64.0;
pub const WINDOW_START: f64 = 8.0;
/// At most one halving this often: the writes already queued when congestion began end slow
/// too.
pub const DECREASE_EVERY: Duration = Duration::from_millis(1_000);
/// An answer slower than this (or than half its call's timeout, if less) is a sign of
/// congestion.
pub const SLOW_ANSWER: Duration = Duration::from_millis(1_000);

/// How a write ended, as far as congestion goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Answered (done or refused by its condition) after `latency`, by a call allowed `timeout`.
    Answered {
        latency: Duration,
        timeout: Duration,
    },
    /// Timed out, throttled, or failed on the server's side.
    Congested,
}

/// The congestion window of a worker's lease writes.
#[derive(Debug, Clone)]
pub struct WriteWindow {
    window: f64,
    last_decrease: Option<Instant>,
}

impl Default for WriteWindow {
    fn default() -> Self {
        WriteWindow::new(WINDOW_START)
    }
}

impl WriteWindow {
    /// A window starting at `start` writes.
    pub fn new(start: f64) -> Self {
        WriteWindow {
            window: start.clamp(WINDOW_MIN, WINDOW_MAX),
            last_decrease: None,
        }
    }

    /// Writes allowed in flight now (at least one).
    pub fn limit(&self) -> usize {
        self.window.floor() as usize
    }

    /// A write ended at `now`.
    pub fn on_write(&mut self, outcome: WriteOutcome, now: Instant) {
        match outcome {
            WriteOutcome::Answered { latency, timeout }
                if latency <= SLOW_ANSWER.min(timeout / 2) =>
            {
                self.window = (self.window + 1.0 / self.window).min(WINDOW_MAX);
            }
            _ => self.decrease(now),
        }
    }

    fn decrease(&mut self, now: Instant) {
        // The writes already in flight when congestion began end congested too: one halving
        // per round trip of the queue, not one per write.
        if self
            .last_decrease
            .is_some_and(|at| now.saturating_duration_since(at) < DECREASE_EVERY)
        {
            return;
        }
        self.window = (self.window / 2.0).max(WINDOW_MIN);
        self.last_decrease = Some(now);
    }
}

/// Which writes wait for which: a write that keeps a lease (renew, checkpoint, release) is
/// admitted whenever the window has room; one that grows the worker (acquire, bid) only when
/// the window has room and no keeping write is waiting, so that under congestion a worker
/// keeps what it holds before it takes more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteClass {
    Keep,
    Grow,
}

/// Keeping writes may always have this many in flight, whatever the window: a worker's
/// renewals are a demand it cannot shed without losing leases (its streams ÷ the renew
/// interval), so the window throttles growth, not upkeep. At lease 3 s, a window shut to one or
/// two by a slow second left renewals unsent for their whole timeout and lost 158 leases in one
/// takeover bench (2026-12-04); 16 was the fixed cap before the window.
pub const KEEP_FLOOR: usize = 16;

/// Whether a write of `class` may start with `in_flight` writes running, `waiting_keep` keeping
/// writes waiting, under `limit`.
pub fn admit(class: WriteClass, in_flight: usize, waiting_keep: usize, limit: usize) -> bool {
    match class {
        WriteClass::Keep => in_flight < limit.max(KEEP_FLOOR),
        WriteClass::Grow => in_flight < limit.max(1) && waiting_keep == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn answers_open_the_window_by_about_one_per_window_and_congestion_halves_it() {
        let t0 = Instant::now();
        let answered = |ms: u64| WriteOutcome::Answered {
            latency: Duration::from_millis(ms),
            timeout: Duration::from_secs(2),
        };
        let mut w = WriteWindow::new(8.0);
        for _ in 0..8 {
            w.on_write(answered(10), t0);
        }
        assert_eq!(w.limit(), 8, "just under 9 after one window of answers");
        // Slow but well inside its timeout: not congestion.
        w.on_write(answered(900), t0);
        assert_eq!(w.limit(), 9);
        w.on_write(WriteOutcome::Congested, t0);
        assert_eq!(w.limit(), 4);
        // The rest of the same burst does not halve it again.
        w.on_write(WriteOutcome::Congested, t0 + Duration::from_millis(500));
        w.on_write(answered(1_500), t0);
        assert_eq!(w.limit(), 4);
        // A round trip later, it does.
        w.on_write(WriteOutcome::Congested, t0 + Duration::from_millis(1_001));
        assert_eq!(w.limit(), 2);
    }

    #[test]
    fn a_keeping_write_goes_first_and_is_never_held_below_the_floor() {
        assert!(admit(WriteClass::Keep, 3, 5, 4));
        assert!(!admit(WriteClass::Grow, 3, 1, 4));
        assert!(admit(WriteClass::Grow, 3, 0, 4));
        assert!(!admit(WriteClass::Grow, 4, 0, 4));
        // Upkeep is not throttled below the floor, growth is.
        assert!(admit(WriteClass::Keep, KEEP_FLOOR - 1, 0, 1));
        assert!(!admit(WriteClass::Keep, KEEP_FLOOR, 0, 1));
        assert!(admit(WriteClass::Keep, 40, 0, 64));
        // Never shut: one write at a time at the least.
        assert!(admit(WriteClass::Grow, 0, 0, 0));
    }

    proptest! {
        /// Whatever the table answers, the window stays within its bounds, never shuts, and
        /// after a long enough run of timely answers it is open wide again.
        #[test]
        fn the_window_stays_bounded_and_recovers(
            outcomes in prop::collection::vec((any::<bool>(), 0u64..3_000, 0u64..400), 0..300),
        ) {
            let t0 = Instant::now();
            let mut w = WriteWindow::default();
            let mut now = t0;
            for (congested, latency, gap) in outcomes {
                now += Duration::from_millis(gap);
                let outcome = if congested {
                    WriteOutcome::Congested
                } else {
                    WriteOutcome::Answered {
                        latency: Duration::from_millis(latency),
                        timeout: Duration::from_secs(2),
                    }
                };
                w.on_write(outcome, now);
                prop_assert!(w.limit() >= 1 && w.limit() <= WINDOW_MAX as usize);
            }
            for _ in 0..5_000 {
                let fast = WriteOutcome::Answered {
                    latency: Duration::from_millis(5),
                    timeout: Duration::from_secs(2),
                };
                w.on_write(fast, now);
            }
            prop_assert_eq!(w.limit(), WINDOW_MAX as usize);
        }
    }
}
