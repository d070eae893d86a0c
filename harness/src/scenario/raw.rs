//! The scenario file exactly as written (serde, `deny_unknown_fields`), before validation turns
//! it into a [`super::Scenario`]. Times are in seconds here, as users write them.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    pub name: String,
    pub description: String,
    pub lease: RawLease,
    pub fleet: RawFleet,
    pub upstream: RawUpstream,
    #[serde(default)]
    pub sink: RawSink,
    pub run: RawRun,
    #[serde(default)]
    pub faults: Vec<RawFault>,
    #[serde(default)]
    pub expect: Vec<RawExpectation>,
    /// `true` lets a scenario have no `[[expect]]` (a demonstration run that judges nothing but
    /// the harness's own checks); without it, such a scenario is refused.
    #[serde(default)]
    pub no_expectations: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLease {
    pub seconds: f64,
    pub renew_seconds: f64,
    #[serde(default)]
    pub skew_margin_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFleet {
    pub workers: usize,
    #[serde(default)]
    pub max_streams: Option<usize>,
    #[serde(default)]
    pub drain_seconds: Option<f64>,
    /// `SCAN_SECONDS` for every worker.
    #[serde(default)]
    pub scan_seconds: Option<f64>,
    /// `ACQUIRE_MODE` for every worker.
    #[serde(default)]
    pub acquire_mode: Option<String>,
    /// Extra environment for every worker.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Extra environment for one worker, keyed by its name (`worker-1`).
    #[serde(default)]
    pub worker_env: BTreeMap<String, BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub streams: usize,
    /// Events per second per stream.
    pub rate: f64,
    #[serde(default)]
    pub payload_bytes: Option<usize>,
    /// Events kept per stream for replay.
    #[serde(default)]
    pub retention: Option<usize>,
    #[serde(default)]
    pub stream_prefix: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSink {
    #[serde(default)]
    pub fencing: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRun {
    /// Upper bound on the warm-up (every stream owned and flowing).
    pub warmup_seconds: f64,
    pub duration_seconds: f64,
    pub settle_timeout_seconds: f64,
    #[serde(default)]
    pub seed: Option<u64>,
    /// A stream that goes longer than this without an accepted event (between the warm-up's
    /// end and production's stop) counts in `totals.stalled_streams`; default twice the lease.
    #[serde(default)]
    pub stall_threshold_seconds: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawAction {
    Kill,
    Pause,
    Terminate,
    Start,
    RollingDeploy,
    Latency,
    Bandwidth,
    Partition,
    Reset,
    HalfOpen,
    Heal,
    Throttle,
    Unanswered,
    LateApply,
    Clock,
    ClockStep,
    UpstreamDrop,
    UpstreamPause,
    UpstreamGap,
    UpstreamSkip,
    SinkError,
    SinkSlow,
    SinkPoison,
}

impl RawAction {
    pub fn name(self) -> &'static str {
        match self {
            RawAction::Kill => "kill",
            RawAction::Pause => "pause",
            RawAction::Terminate => "terminate",
            RawAction::Start => "start",
            RawAction::RollingDeploy => "rolling_deploy",
            RawAction::Latency => "latency",
            RawAction::Bandwidth => "bandwidth",
            RawAction::Partition => "partition",
            RawAction::Reset => "reset",
            RawAction::HalfOpen => "half_open",
            RawAction::Heal => "heal",
            RawAction::Throttle => "throttle",
            RawAction::Unanswered => "unanswered",
            RawAction::LateApply => "late_apply",
            RawAction::Clock => "clock",
            RawAction::ClockStep => "clock_step",
            RawAction::UpstreamDrop => "upstream_drop",
            RawAction::UpstreamPause => "upstream_pause",
            RawAction::UpstreamGap => "upstream_gap",
            RawAction::UpstreamSkip => "upstream_skip",
            RawAction::SinkError => "sink_error",
            RawAction::SinkSlow => "sink_slow",
            RawAction::SinkPoison => "sink_poison",
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFault {
    pub at_seconds: f64,
    pub action: RawAction,
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub duration_seconds: Option<f64>,
    #[serde(default)]
    pub stop_timeout_seconds: Option<f64>,
    #[serde(default)]
    pub count: Option<usize>,
    #[serde(default)]
    pub minimum_healthy_percent: Option<u32>,
    #[serde(default)]
    pub maximum_percent: Option<u32>,
    /// The fault menu's fields (`harness/README.md` says which action takes which).
    #[serde(default)]
    pub link: Option<String>,
    #[serde(default)]
    pub direction: Option<String>,
    #[serde(default)]
    pub latency_ms: Option<u64>,
    #[serde(default)]
    pub jitter_ms: Option<u64>,
    #[serde(default)]
    pub bytes_per_second: Option<u64>,
    #[serde(default)]
    pub fraction: Option<f64>,
    #[serde(default)]
    pub operation: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub hold_seconds: Option<f64>,
    #[serde(default)]
    pub offset_ms: Option<i64>,
    #[serde(default)]
    pub step_ms: Option<i64>,
    #[serde(default)]
    pub stream: Option<String>,
    #[serde(default)]
    pub seq: Option<u64>,
    /// `sink_poison`: the poisoned seq is this many past the stream's last produced seq at
    /// injection (instead of an absolute `seq`, which a variable warm-up cannot time).
    #[serde(default)]
    pub seq_ahead: Option<u64>,
    #[serde(default)]
    pub status: Option<u16>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawThreshold {
    Number(f64),
    Expr(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExpectation {
    #[serde(default)]
    pub name: Option<String>,
    pub metric: String,
    pub op: String,
    pub threshold: RawThreshold,
}
