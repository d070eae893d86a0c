//! When the supervisor acts next: the scan timer's rounds (a scan or a round on the last view),
//! hurried rescans, the round after a watched expiry, and how often the fleet signal is read.
//! Part of [`Supervision`]; pure like the rest of the core.

use std::time::Duration;

use super::owners::{Supervision, FAST_RESCAN, FLEET_POLL_DRAINING, MIN_RESCAN, VIEW_ROUNDS};
use super::round::Scheduled;

impl Supervision {
    /// What the scan timer's round should be.
    pub fn scheduled(&self) -> Scheduled {
        if self.view_rounds > 0 && self.view_rounds <= VIEW_ROUNDS {
            Scheduled::View
        } else {
            Scheduled::Scan {
                consistent: self.raced,
            }
        }
    }

    /// After a round on the last view: the time until the next scheduled round.
    pub fn after_view_round(&mut self, hurry: bool) -> Duration {
        if hurry && !self.raced && self.view_rounds < VIEW_ROUNDS {
            self.view_rounds += 1;
            return FAST_RESCAN.min(self.settings.scan);
        }
        self.view_rounds = 0;
        self.rescan_delay(hurry)
    }

    /// After a scan round (or a failed scan, `hurry = false`): when hurrying only because the
    /// round's cap left candidates (no race lost) and the scan saw other owners (so the share it
    /// planned with is the fleet's, not a lone worker's), the next rounds reuse its view; after a
    /// lost race, a fresh scan.
    pub fn after_scan(&mut self, hurry: bool) -> Duration {
        if hurry && !self.raced && self.live_owners > 1 {
            self.view_rounds = 1;
            return FAST_RESCAN.min(self.settings.scan);
        }
        self.view_rounds = 0;
        self.rescan_delay(hurry)
    }

    /// After a round woken by a watched expiry: how soon the next scheduled round should come
    /// (`None`: keep the schedule).
    pub fn after_watch_round(&mut self, hurry: bool) -> Option<Duration> {
        if !hurry {
            return None;
        }
        if self.raced {
            self.view_rounds = 0;
            return Some(self.rescan_delay(true));
        }
        Some(FAST_RESCAN.min(self.settings.scan))
    }

    /// Until the next scan: the scan interval, or when hurrying, live owners × 2 × the last
    /// scan's time (at least [`MIN_RESCAN`]): each worker's scans then take at most a
    /// 1 / (2 × owners) share of the table's time, so all of them together at most half of it,
    /// whatever the table's size. 120 streams: ~40 ms; 2,000 streams and 20 workers: ~2.5 s.
    pub fn rescan_delay(&self, hurry: bool) -> Duration {
        if !hurry {
            return self.settings.scan;
        }
        MIN_RESCAN
            .max(self.last_scan_took * self.live_owners.min(1000) as u32 * 2)
            .min(self.settings.scan)
    }

    /// Until the next fleet signal read: faster while some owner is draining, slower in a fleet
    /// so large that its reads would make the signal a hot key ([`fleet_poll_for`]).
    pub fn fleet_every(&self) -> Duration {
        let base = if self.draining_owners.is_empty() {
            self.settings.fleet_poll
        } else {
            self.settings.fleet_poll.min(FLEET_POLL_DRAINING)
        };
        // Segmented discovery's scans read the signal's item only in its segment's reads,
        // about three an interval for the whole fleet (its owner's, its standby's and a
        // rotating reader's): as if the fleet's scans came owners / 3 times further apart.
        let owners = self.contenders.len() + 1;
        let scan = if self.segmented() {
            let readers = lease_table::members::SEGMENT_READS_PER_SCAN as f64;
            self.settings.scan.mul_f64(owners as f64 / readers)
        } else {
            self.settings.scan
        };
        fleet_poll_for(base, owners, scan)
    }
}

/// The poll interval of one of `live_owners` workers scanning every `scan`: `base`, or longer
/// when the item would be read more than [`FLEET_READS_PER_SECOND`] times a second, polls and
/// scans together ([`lease_table::fleet_poll_budget`]). 50 ms up to 49 workers, about 101 ms at
/// 100, 1.11 s at 1,000 (scan 10 s): a handoff is noticed that much later in a large fleet.
pub fn fleet_poll_for(base: Duration, live_owners: usize, scan: Duration) -> Duration {
    let owners = live_owners.max(1) as f64;
    let polls = lease_table::fleet_poll_budget(owners, scan.as_secs_f64());
    base.max(Duration::from_secs_f64(owners / polls))
}

/// `base` ± 10 % (`unit` in `[0, 1)`), so that workers started together do not act in lockstep.
pub fn jittered(base: Duration, unit: f64) -> Duration {
    base.mul_f64(0.9 + 0.2 * unit.clamp(0.0, 1.0))
}
