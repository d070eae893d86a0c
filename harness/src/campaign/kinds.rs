//! The fault kinds a campaign draws from: one [`FaultKind`] per scenario action, each a plain
//! data value saying how the action's fields are drawn and what it does to the fleet (so the
//! generator can keep every target valid). Adding a kind the scenario format learned is one
//! entry in [`KINDS`].

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A field of a generated fault, as written in the scenario file.
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    Seconds(f64),
    /// A plain number that is not a time (a fraction).
    Float(f64),
    Int(i64),
    Str(String),
}

impl Field {
    /// The TOML form of the value.
    pub fn toml(&self) -> String {
        match self {
            Field::Seconds(s) => {
                let v = toml::Value::Float(*s);
                v.to_string()
            }
            Field::Float(f) => toml::Value::Float(*f).to_string(),
            Field::Int(i) => i.to_string(),
            Field::Str(s) => toml::Value::String(s.clone()).to_string(),
        }
    }
}

/// What a fault does to the worker it targets, for the generator's model of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// The target is gone for the rest of the run (kill, terminate).
    Removes,
    /// The target is impaired for the fault's window, then back (pause, a link fault).
    Holds,
    /// Starts new workers (`count` of them); no target.
    Adds,
    /// Replaces every running worker with a new set (rolling deploy); no target.
    Replaces,
    /// Acts on the environment for its window (upstream, sink); no target.
    Ambient,
}

impl Effect {
    /// True when the fault names a worker (`target = "worker-N"`).
    pub fn has_target(self) -> bool {
        matches!(self, Effect::Removes | Effect::Holds)
    }
}

/// The bounds a kind draws within.
#[derive(Debug, Clone, PartialEq)]
pub struct DrawBounds {
    /// Shortest and longest fault window (a pause's length), in ms.
    pub window_ms: (u64, u64),
    /// `stop_timeout_seconds` of terminate and rolling_deploy, in ms.
    pub stop_timeout_ms: u64,
    /// Streams of the run (`s-0001` …), for the faults that name one.
    pub streams: usize,
    /// The lease, ms: a late-applied write is held up to this long.
    pub lease_ms: u64,
}

/// What a kind drew: its own fields and how long it occupies its target (or the fleet).
#[derive(Debug, Clone, PartialEq)]
pub struct Drawn {
    pub fields: Vec<(&'static str, Field)>,
    pub window_ms: u64,
}

/// One fault kind: its scenario action name, its effect and how its fields are drawn.
pub struct FaultKind {
    pub name: &'static str,
    pub effect: Effect,
    /// The field a shrink may halve (its window), if the kind has one.
    pub duration_field: Option<&'static str>,
    pub draw: fn(&mut ChaCha8Rng, &DrawBounds) -> Drawn,
}

/// Kinds are equal by name (each name is one entry of [`KINDS`]).
impl PartialEq for FaultKind {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl std::fmt::Debug for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// A rolling deploy's window: the new set's start and readiness, then the old set's stop.
const DEPLOY_READY_MS: u64 = 5_000;

/// Every kind the harness supports, in the order `--help` lists them.
pub static KINDS: &[FaultKind] = &[
    FaultKind {
        name: "kill",
        effect: Effect::Removes,
        duration_field: None,
        draw: |_, _| Drawn {
            fields: Vec::new(),
            window_ms: 0,
        },
    },
    FaultKind {
        name: "pause",
        effect: Effect::Holds,
        duration_field: Some("duration_seconds"),
        draw: |rng, b| {
            let ms = draw_window(rng, b);
            Drawn {
                fields: vec![("duration_seconds", Field::Seconds(seconds(ms)))],
                window_ms: ms,
            }
        },
    },
    FaultKind {
        name: "terminate",
        effect: Effect::Removes,
        duration_field: None,
        draw: |_, b| Drawn {
            fields: vec![(
                "stop_timeout_seconds",
                Field::Seconds(seconds(b.stop_timeout_ms)),
            )],
            window_ms: b.stop_timeout_ms,
        },
    },
    FaultKind {
        name: "start",
        effect: Effect::Adds,
        duration_field: None,
        draw: |rng, _| Drawn {
            fields: vec![("count", Field::Int(rng.random_range(1..=2)))],
            window_ms: 0,
        },
    },
    FaultKind {
        name: "rolling_deploy",
        effect: Effect::Replaces,
        duration_field: None,
        draw: |_, b| Drawn {
            fields: vec![
                ("minimum_healthy_percent", Field::Int(100)),
                ("maximum_percent", Field::Int(200)),
                (
                    "stop_timeout_seconds",
                    Field::Seconds(seconds(b.stop_timeout_ms)),
                ),
            ],
            window_ms: DEPLOY_READY_MS + b.stop_timeout_ms,
        },
    },
    // Link faults on one of the target's three links, for a window.
    FaultKind {
        name: "partition",
        effect: Effect::Holds,
        duration_field: Some("duration_seconds"),
        draw: |rng, b| link_fault(rng, b, Vec::new()),
    },
    FaultKind {
        name: "latency",
        effect: Effect::Holds,
        duration_field: Some("duration_seconds"),
        draw: |rng, b| {
            let extra = vec![
                ("latency_ms", Field::Int(rng.random_range(1..=10) * 100)),
                ("jitter_ms", Field::Int(rng.random_range(0..=4) * 50)),
            ];
            link_fault(rng, b, extra)
        },
    },
    FaultKind {
        name: "bandwidth",
        effect: Effect::Holds,
        duration_field: Some("duration_seconds"),
        draw: |rng, b| {
            let extra = vec![(
                "bytes_per_second",
                Field::Int(rng.random_range(1..=20) * 1_000),
            )];
            link_fault(rng, b, extra)
        },
    },
    FaultKind {
        name: "reset",
        effect: Effect::Holds,
        duration_field: Some("duration_seconds"),
        draw: |rng, b| link_fault(rng, b, Vec::new()),
    },
    FaultKind {
        name: "half_open",
        effect: Effect::Holds,
        duration_field: Some("duration_seconds"),
        draw: |rng, b| link_fault(rng, b, Vec::new()),
    },
    // DynamoDB answers on the target's DynamoDB link, for a window.
    FaultKind {
        name: "throttle",
        effect: Effect::Holds,
        duration_field: Some("duration_seconds"),
        draw: |rng, b| {
            let error = THROTTLE_ERRORS[rng.random_range(0..THROTTLE_ERRORS.len())];
            let extra = vec![
                ("fraction", Field::Float(fraction(rng))),
                ("error", Field::Str(error.to_string())),
            ];
            windowed(rng, b, extra)
        },
    },
    FaultKind {
        name: "unanswered",
        effect: Effect::Holds,
        duration_field: Some("duration_seconds"),
        draw: |rng, b| {
            let extra = vec![("fraction", Field::Float(fraction(rng)))];
            windowed(rng, b, extra)
        },
    },
    FaultKind {
        name: "late_apply",
        effect: Effect::Holds,
        duration_field: Some("duration_seconds"),
        draw: |rng, b| {
            let hold = rng.random_range(5..=(b.lease_ms / 100).max(5)) * 100;
            let extra = vec![
                ("operation", Field::Str("UpdateItem".to_string())),
                ("hold_seconds", Field::Seconds(seconds(hold))),
            ];
            windowed(rng, b, extra)
        },
    },
    // A jump of the target's wall clock (it stays off for the rest of the run).
    FaultKind {
        name: "clock_step",
        effect: Effect::Holds,
        duration_field: None,
        draw: |rng, _| {
            let step = rng.random_range(1..=8) * 1_000 * if rng.random_bool(0.5) { 1 } else { -1 };
            Drawn {
                fields: vec![("step_ms", Field::Int(step))],
                window_ms: 0,
            }
        },
    },
    // The sink and the upstream, for everyone.
    FaultKind {
        name: "sink_error",
        effect: Effect::Ambient,
        duration_field: Some("duration_seconds"),
        draw: |rng, b| {
            let status = [500, 502, 503][rng.random_range(0..3)];
            windowed(rng, b, vec![("status", Field::Int(status))])
        },
    },
    FaultKind {
        name: "sink_slow",
        effect: Effect::Ambient,
        duration_field: Some("duration_seconds"),
        draw: |rng, b| {
            let latency = rng.random_range(1..=10) * 100;
            windowed(rng, b, vec![("latency_ms", Field::Int(latency))])
        },
    },
    FaultKind {
        name: "upstream_drop",
        effect: Effect::Ambient,
        duration_field: None,
        draw: |rng, b| Drawn {
            fields: vec![("stream", Field::Str(stream(rng, b)))],
            window_ms: 0,
        },
    },
    FaultKind {
        name: "upstream_pause",
        effect: Effect::Ambient,
        duration_field: Some("duration_seconds"),
        draw: |rng, b| windowed(rng, b, Vec::new()),
    },
    FaultKind {
        name: "upstream_gap",
        effect: Effect::Ambient,
        duration_field: None,
        draw: |rng, b| Drawn {
            fields: vec![
                ("stream", Field::Str(stream(rng, b))),
                ("count", Field::Int(rng.random_range(1..=10) * 10)),
            ],
            window_ms: 0,
        },
    },
];

/// The errors a `throttle` draws from (DynamoDB's own codes).
const THROTTLE_ERRORS: &[&str] = &[
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "InternalServerError",
];

/// A link fault: a link drawn among the three, a window, and the kind's own fields.
fn link_fault(
    rng: &mut ChaCha8Rng,
    b: &DrawBounds,
    mut extra: Vec<(&'static str, Field)>,
) -> Drawn {
    let link = ["dynamodb", "upstream", "sink"][rng.random_range(0..3)];
    extra.insert(0, ("link", Field::Str(link.to_string())));
    windowed(rng, b, extra)
}

/// The kind's own fields plus a drawn `duration_seconds`.
fn windowed(rng: &mut ChaCha8Rng, b: &DrawBounds, mut fields: Vec<(&'static str, Field)>) -> Drawn {
    let ms = draw_window(rng, b);
    fields.push(("duration_seconds", Field::Seconds(seconds(ms))));
    Drawn {
        fields,
        window_ms: ms,
    }
}

/// A fraction of requests in 0.2 … 1.0, in tenths.
fn fraction(rng: &mut ChaCha8Rng) -> f64 {
    f64::from(rng.random_range(2..=10u32)) / 10.0
}

/// One of the run's streams.
fn stream(rng: &mut ChaCha8Rng, b: &DrawBounds) -> String {
    lease_protocol::stream_name("s-", rng.random_range(1..=b.streams.max(1)))
}

/// The kind named `name`.
pub fn kind(name: &str) -> Option<&'static FaultKind> {
    KINDS.iter().find(|k| k.name == name)
}

/// Every kind's name, comma-separated (for `--help` and messages).
pub fn names() -> String {
    KINDS.iter().map(|k| k.name).collect::<Vec<_>>().join(",")
}

/// Parses `--faults kill,pause,…`; an unknown name is an error that lists the known ones.
pub fn parse_list(list: &str) -> Result<Vec<&'static FaultKind>, String> {
    let mut kinds = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let k = kind(name).ok_or_else(|| {
            format!(
                "unknown fault kind {name:?}: the harness supports {}",
                names()
            )
        })?;
        if !kinds.iter().any(|have: &&FaultKind| have.name == k.name) {
            kinds.push(k);
        }
    }
    if kinds.is_empty() {
        return Err(format!("no fault kind given: choose among {}", names()));
    }
    Ok(kinds)
}

fn draw_window(rng: &mut ChaCha8Rng, b: &DrawBounds) -> u64 {
    let (lo, hi) = b.window_ms;
    // Whole tenths of a second, so the file reads as written and round-trips exactly.
    rng.random_range(lo / 100..=hi.max(lo) / 100).max(1) * 100
}

/// Milliseconds as the seconds a scenario file holds.
pub fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}
