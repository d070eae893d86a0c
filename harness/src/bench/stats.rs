//! The benchmark's arithmetic, pure: takeover samples with their floors, summaries per
//! (lease, mode, kind), and the DynamoDB cost formula. No I/O, no clock.

use serde::Serialize;

use crate::analysis::percentiles;
use crate::report_json::{Percentiles, Takeover};

/// Which fault produced a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// SIGKILL: the lease must run out.
    Crash,
    /// SIGTERM: the owner drains and releases.
    Handoff,
}

impl Kind {
    /// The `action` the history records for it.
    pub fn action(self) -> &'static str {
        match self {
            Kind::Crash => "kill",
            Kind::Handoff => "terminate",
        }
    }

    /// The name in `bench.json`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Crash => "crash",
            Kind::Handoff => "handoff",
        }
    }
}

/// One stream's takeover after one fault.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    pub kind: Kind,
    pub stream_id: String,
    /// The new owner and its fence (to find its acquisition in the worker's log).
    pub to_owner: String,
    pub to_fence: u64,
    /// Run time of the fault (ms since the history's t0).
    pub fault_t_ms: u64,
    pub takeover_ms: u64,
    /// What physics allows: crash = lease remaining at the kill + skew margin; handoff = 0.
    pub floor_ms: u64,
    /// From the fault to the new owner's "stream acquired" log line, when it was found.
    pub acquired_ms: Option<u64>,
    /// The new owner's phase line, when it was found.
    #[serde(skip)]
    pub phases: Option<Phases>,
}

/// Where one takeover's time went (ms). `detect` is from the fault to the acquire request,
/// less the floor: for a crash, how late after the lease (+ skew) ran out the new owner tried;
/// for a handoff, the drain's flush and release plus the fleet signal's notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phases {
    pub detect: i64,
    pub acquire: u64,
    pub connect: u64,
    pub replay: u64,
    pub first_accept: u64,
}

impl Sample {
    /// takeover_ms − floor (negative when the takeover beat the floor estimate).
    pub fn overhead_ms(&self) -> i64 {
        self.takeover_ms as i64 - self.floor_ms as i64
    }
}

/// The samples of one history: every takeover the analysis attributed to a `kill` or a
/// `terminate` action, with its floor.
pub fn samples(takeovers: &[Takeover], skew_margin_ms: u64) -> Vec<Sample> {
    takeovers
        .iter()
        .filter_map(|t| {
            let kind = match t.cause.as_deref()? {
                "kill" => Kind::Crash,
                "terminate" => Kind::Handoff,
                _ => return None,
            };
            let takeover_ms = t.takeover_ms?;
            let floor_ms = match kind {
                Kind::Crash => t.lease_remaining_ms.unwrap_or(0).max(0) as u64 + skew_margin_ms,
                Kind::Handoff => 0,
            };
            Some(Sample {
                kind,
                stream_id: t.stream_id.clone(),
                to_owner: t.to_owner.clone(),
                to_fence: t.to_fence,
                fault_t_ms: t.at_ms.saturating_sub(takeover_ms),
                takeover_ms,
                floor_ms,
                acquired_ms: None,
                phases: None,
            })
        })
        .collect()
}

/// p50 / p99 / max of a distribution (hdrhistogram), plus the minimum.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Dist {
    pub p50: Option<u64>,
    pub p99: Option<u64>,
    pub max: Option<u64>,
    pub min: Option<i64>,
}

impl Dist {
    /// Summarises signed values; negatives count as 0 in the histogram, `min` keeps the truth.
    pub fn of(values: &[i64]) -> Dist {
        let clamped: Vec<u64> = values.iter().map(|v| (*v).max(0) as u64).collect();
        let Percentiles { p50, p99, max, .. } = percentiles(&clamped);
        Dist {
            p50,
            p99,
            max,
            min: values.iter().copied().min(),
        }
    }
}

/// One `takeover` entry of `bench.json` (design §8).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TakeoverRow {
    pub lease_ms: u64,
    pub renew_ms: u64,
    pub mode: String,
    pub kind: Kind,
    pub samples: usize,
    /// Streams a fault left that no other worker took over before the bench moved on.
    pub missing: usize,
    pub faults: usize,
    pub takeover_ms: Dist,
    pub floor_ms: Dist,
    pub overhead_ms: Dist,
    /// Phase split: fault → new owner logged the acquisition (detection + acquire round trip).
    pub to_acquired_ms: Dist,
    /// Phase split: acquisition → first accepted event (connect + replay + first batch).
    pub acquired_to_accepted_ms: Dist,
    /// Finer phases from the worker's "first batch accepted" line: fault → acquire request
    /// less the floor (detection), the acquire's round trip, the upstream connect, socket open →
    /// first replayed frame, first frame → first accepted batch.
    pub detect_ms: Dist,
    pub acquire_ms: Dist,
    pub connect_ms: Dist,
    pub replay_ms: Dist,
    pub first_accept_ms: Dist,
    /// Acquires the other workers had refused (lost conditional writes) between the faults'
    /// signals and every stream held again, over these faults.
    pub conflicts: u64,
    /// `conflicts` per stream taken over (issue #17: ≤ 2).
    pub conflicts_per_takeover: Option<f64>,
}

/// Summarises the samples of one kind.
pub fn row(
    lease_ms: u64,
    renew_ms: u64,
    mode: &str,
    kind: Kind,
    samples: &[Sample],
    faults: usize,
    missing: usize,
) -> TakeoverRow {
    let of = |f: &dyn Fn(&Sample) -> Option<i64>| {
        Dist::of(
            &samples
                .iter()
                .filter(|s| s.kind == kind)
                .filter_map(f)
                .collect::<Vec<_>>(),
        )
    };
    TakeoverRow {
        lease_ms,
        renew_ms,
        mode: mode.to_string(),
        kind,
        samples: samples.iter().filter(|s| s.kind == kind).count(),
        missing,
        faults,
        takeover_ms: of(&|s| Some(s.takeover_ms as i64)),
        floor_ms: of(&|s| Some(s.floor_ms as i64)),
        overhead_ms: of(&|s| Some(s.overhead_ms())),
        to_acquired_ms: of(&|s| s.acquired_ms.map(|a| a as i64)),
        acquired_to_accepted_ms: of(&|s| s.acquired_ms.map(|a| s.takeover_ms as i64 - a as i64)),
        detect_ms: of(&|s| s.phases.map(|p| p.detect)),
        acquire_ms: of(&|s| s.phases.map(|p| p.acquire as i64)),
        connect_ms: of(&|s| s.phases.map(|p| p.connect as i64)),
        replay_ms: of(&|s| s.phases.map(|p| p.replay as i64)),
        first_accept_ms: of(&|s| s.phases.map(|p| p.first_accept as i64)),
        conflicts: 0,
        conflicts_per_takeover: None,
    }
}

/// Design §7: writes per stream per hour = 3600 / renew seconds (renewals, which carry the
/// checkpoint) + standalone checkpoints per stream hour.
pub fn cost_formula(renew_ms: u64, checkpoints_per_stream_hour: f64) -> f64 {
    3_600_000.0 / renew_ms as f64 + checkpoints_per_stream_hour
}

/// Requests per stream per hour from a counter delta over `window_ms`.
pub fn per_stream_hour(requests: f64, streams: usize, window_ms: u64) -> f64 {
    if streams == 0 || window_ms == 0 {
        return 0.0;
    }
    requests / streams as f64 * 3_600_000.0 / window_ms as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn takeover(cause: &str, ms: u64, remaining: i64) -> Takeover {
        Takeover {
            stream_id: "s-0001".into(),
            cause: Some(cause.into()),
            takeover_ms: Some(ms),
            lease_remaining_ms: Some(remaining),
            ..Takeover::default()
        }
    }

    #[test]
    fn floors_follow_the_kind() {
        let s = samples(
            &[
                takeover("kill", 2_500, 2_000),
                takeover("terminate", 40, 2_900),
                takeover("pause", 9, 1),
                Takeover::default(),
            ],
            200,
        );
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].kind, s[0].floor_ms, s[0].overhead_ms()),
            (Kind::Crash, 2_200, 300)
        );
        assert_eq!(
            (s[1].kind, s[1].floor_ms, s[1].overhead_ms()),
            (Kind::Handoff, 0, 40)
        );
    }

    #[test]
    fn a_row_keeps_negative_overheads_visible() {
        let mut s = samples(&[takeover("kill", 100, 50), takeover("kill", 500, 0)], 200);
        s[1].acquired_ms = Some(450);
        let r = row(1_000, 333, "poll", Kind::Crash, &s, 1, 0);
        assert_eq!(r.samples, 2);
        assert_eq!(r.overhead_ms.min, Some(-150));
        assert_eq!(r.overhead_ms.max, Some(300));
        assert_eq!(r.to_acquired_ms.max, Some(450));
        assert_eq!(r.acquired_to_accepted_ms.max, Some(50));
        let none = row(1_000, 333, "poll", Kind::Handoff, &s, 0, 0);
        assert_eq!((none.samples, none.takeover_ms.p99), (0, None));
    }

    #[test]
    fn cost_arithmetic() {
        assert_eq!(cost_formula(10_000, 0.0), 360.0);
        assert_eq!(cost_formula(1_000, 12.0), 3_612.0);
        assert_eq!(per_stream_hour(720.0, 2, 3_600_000), 360.0);
        assert_eq!(per_stream_hour(10.0, 0, 1), 0.0);
    }
}
