//! When a stream runner next has something to do: a pure function of its timers, so the rule
//! (the earliest of the deadline, the renewal, the batch, the reconnect and the release) is
//! tested without sockets.

use std::time::Duration;

use tokio::time::Instant;

/// With nothing scheduled, the runner still wakes this often (it is also woken by its sockets).
pub const IDLE_WAKE: Duration = Duration::from_secs(3600);

/// The timers of one runner at one moment. `None` = not armed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timers {
    /// The local lease deadline, when enforced.
    pub deadline: Option<Instant>,
    /// When the next renewal is due, while none is in flight.
    pub renew_at: Option<Instant>,
    /// When a failed sink post is retried, while no post is in flight.
    pub retry_at: Option<Instant>,
    /// When the oldest pending event has waited `BATCH_MAX_DELAY_MS`, while no post or retry is
    /// in flight.
    pub batch_due: Option<Instant>,
    /// When to reconnect upstream, while waiting to.
    pub connect_at: Option<Instant>,
    /// When a release must be done by.
    pub release_by: Option<Instant>,
    /// When the upstream has been silent too long (the liveness deadline).
    pub upstream_idle: Option<Instant>,
}

/// The earliest armed timer, or `now + IDLE_WAKE` when none is.
pub fn next_wake(timers: &Timers, now: Instant) -> Instant {
    [
        timers.deadline,
        timers.renew_at,
        timers.retry_at,
        timers.batch_due,
        timers.connect_at,
        timers.release_by,
        timers.upstream_idle,
    ]
    .into_iter()
    .flatten()
    .fold(now + IDLE_WAKE, Instant::min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nothing_armed_sleeps_long() {
        let now = Instant::now();
        assert_eq!(next_wake(&Timers::default(), now), now + IDLE_WAKE);
    }

    proptest! {
        #[test]
        fn the_earliest_armed_timer_wins(offsets in prop::collection::vec(prop::option::of(0u64..10_000), 7)) {
            let now = Instant::now();
            let at = |i: usize| offsets[i].map(|ms| now + Duration::from_millis(ms));
            let timers = Timers {
                deadline: at(0),
                renew_at: at(1),
                retry_at: at(2),
                batch_due: at(3),
                connect_at: at(4),
                release_by: at(5),
                upstream_idle: at(6),
            };
            let expected = offsets.iter().flatten().min().map_or(now + IDLE_WAKE, |ms| now + Duration::from_millis(*ms));
            prop_assert_eq!(next_wake(&timers, now), expected);
        }
    }
}
