//! Schedule generation: a pure function of (campaign settings, run index) to a [`Schedule`], a
//! scenario value that serialises to a scenario file `harness validate` accepts. Every random
//! choice comes from a ChaCha8 generator seeded with the campaign seed on the run's own stream,
//! so run 17 of seed 42 is the same schedule on every machine, whatever runs before it.
//!
//! Targets are explicit (`worker-N`), chosen from a model of the fleet ([`check_targets`]): a
//! worker that was killed or terminated is never targeted again, a worker is hit by one fault at
//! a time, and at least one worker stays untouched at every instant (someone must take over).

use std::collections::BTreeMap;
use std::fmt::Write;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::kinds::{self, DrawBounds, Effect, FaultKind, Field};
use crate::scenario::worker_name;

/// Fault times start this long after the warm-up, so the first fault meets a settled fleet.
const FIRST_FAULT_MS: u64 = 1_000;
/// The run goes on at least this long after the last fault's window, so its effect is measured.
const TAIL_MS: u64 = 2_000;
/// A worker is targeted again only this long after its last fault's window ended: the heal (a
/// SIGCONT, a proxy restored) takes a moment, and a fault aimed at a worker still paused is
/// refused (campaign seed 1 run 6 drew a latency fault on worker-2 the instant its pause ended).
const TARGET_GAP_MS: u64 = 500;

/// What every run of a campaign shares: the fault kinds, the bounds and the lease settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GenConfig {
    pub seed: u64,
    pub kinds: Vec<&'static FaultKind>,
    /// Fewest and most faults per run.
    pub faults: (usize, usize),
    /// Most faults active at the same instant.
    pub max_overlap: usize,
    pub bounds: DrawBounds,
    pub lease_ms: u64,
    pub renew_ms: u64,
    pub workers: usize,
    pub streams: usize,
    /// Events per second per stream.
    pub rate: f64,
    pub warmup_ms: u64,
    pub duration_ms: u64,
    pub settle_ms: u64,
    pub drain_ms: u64,
    /// False runs the sink without fencing (a negative control).
    pub fencing: bool,
    /// Extra environment for every worker (e.g. a chaos switch, as a negative control).
    pub env: BTreeMap<String, String>,
    /// `[[expect]]` written into every run's scenario: (metric, op, threshold).
    pub expect: Vec<(String, String, String)>,
}

/// One generated fault.
#[derive(Debug, Clone, PartialEq)]
pub struct GenFault {
    pub kind: &'static str,
    pub at_ms: u64,
    /// `worker-N` for kinds that target a worker.
    pub target: Option<String>,
    /// How long it occupies its target (0: an instant).
    pub window_ms: u64,
    pub fields: Vec<(&'static str, Field)>,
}

impl GenFault {
    /// `kill worker-2 at 3.2 s`, for progress lines and file headers.
    pub fn describe(&self) -> String {
        let mut s = self.kind.to_string();
        if let Some(t) = &self.target {
            let _ = write!(s, " {t}");
        }
        let _ = write!(s, " at {} s", kinds::seconds(self.at_ms));
        if self.window_ms > 0 {
            let _ = write!(s, " for {} s", kinds::seconds(self.window_ms));
        }
        s
    }
}

/// A run's schedule: the campaign's settings with this run's faults and seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub name: String,
    /// Campaign seed and run index it was drawn from (written in the file's header).
    pub campaign_seed: u64,
    pub run: u32,
    /// The scenario's own `run.seed`.
    pub seed: u64,
    pub config: GenConfig,
    pub faults: Vec<GenFault>,
}

/// Draws run `run`'s schedule. Pure: the same config and index give the same schedule.
pub fn generate(config: &GenConfig, run: u32) -> Schedule {
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    rng.set_stream(u64::from(run));
    let seed = rng.random::<u64>() >> 12; // small enough to read, and exact in any JSON reader
    let (lo, hi) = config.faults;
    let count = rng.random_range(lo..=hi.max(lo));
    let last = config.duration_ms.saturating_sub(TAIL_MS);
    let mut times: Vec<u64> = (0..count)
        .map(|_| rng.random_range(FIRST_FAULT_MS..=last.max(FIRST_FAULT_MS)) / 100 * 100)
        .collect();
    times.sort_unstable();
    let mut fleet = FleetModel::new(config.workers);
    let mut faults = Vec::new();
    let mut cursor = 0;
    for at in times {
        if config.kinds.is_empty() {
            break;
        }
        let kind = config.kinds[rng.random_range(0..config.kinds.len())];
        let mut drawn = (kind.draw)(&mut rng, &config.bounds);
        let mut at = at.max(cursor);
        let end_limit = config.duration_ms.saturating_sub(TAIL_MS / 2);
        // A window that would outlive the run starts earlier, if that keeps the order.
        let latest = end_limit.saturating_sub(drawn.window_ms) / 100 * 100;
        if at > latest && latest >= cursor.max(FIRST_FAULT_MS) {
            at = latest;
        }
        // Too many at once: start when the earliest active one ends.
        if let Some(end) = fleet.overlap_slot(at, config.max_overlap) {
            at = end.div_ceil(100) * 100;
        }
        if at + drawn.window_ms > end_limit {
            // Shorten a window that would outlive the run; drop the fault if nothing is left.
            let room = end_limit.saturating_sub(at) / 100 * 100;
            match kind.duration_field {
                Some(field) if room >= config.bounds.window_ms.0.max(100) => {
                    drawn.window_ms = room;
                    set_field(
                        &mut drawn.fields,
                        field,
                        Field::Seconds(kinds::seconds(room)),
                    );
                }
                _ => continue,
            }
        }
        let target = if kind.effect.has_target() {
            let candidates = fleet.free_at(at);
            // One worker always stays untouched, to take the streams over.
            if candidates.len() < 2 {
                continue;
            }
            Some(candidates[rng.random_range(0..candidates.len())].clone())
        } else {
            None
        };
        let fault = GenFault {
            kind: kind.name,
            at_ms: at,
            target,
            window_ms: drawn.window_ms,
            fields: drawn.fields,
        };
        // The model above and `check_targets` must agree; a fault they do not is left out.
        let mut trial = faults.clone();
        trial.push(fault.clone());
        if !check_targets(config.workers, &trial) {
            continue;
        }
        fleet.apply(&fault, kind.effect);
        cursor = at;
        faults.push(fault);
    }
    Schedule {
        name: format!("campaign-{}-{run:03}", config.seed),
        campaign_seed: config.seed,
        run,
        seed,
        config: config.clone(),
        faults,
    }
}

fn set_field(fields: &mut [(&'static str, Field)], name: &str, value: Field) {
    if let Some(f) = fields.iter_mut().find(|(n, _)| *n == name) {
        f.1 = value;
    }
}

/// True when every target of `faults` exists, is running and is free at its fault's time, and
/// one worker stays untouched throughout: what [`generate`] guarantees and a shrink keeps.
pub fn check_targets(workers: usize, faults: &[GenFault]) -> bool {
    let mut fleet = FleetModel::new(workers);
    for f in faults {
        let Some(kind) = kinds::kind(f.kind) else {
            return false;
        };
        if let Some(t) = &f.target {
            let free = fleet.free_at(f.at_ms);
            if free.len() < 2 || !free.contains(t) {
                return false;
            }
        }
        fleet.apply(f, kind.effect);
    }
    true
}

/// The generator's model of the fleet: who runs, who is impaired until when.
struct FleetModel {
    /// Running workers, in start order.
    alive: Vec<String>,
    /// Workers started so far (names are `worker-1` … in start order).
    started: usize,
    /// (worker or "", end of the window) of every fault still active.
    active: Vec<(String, u64)>,
}

impl FleetModel {
    fn new(workers: usize) -> FleetModel {
        FleetModel {
            alive: (1..=workers).map(worker_name).collect(),
            started: workers,
            active: Vec::new(),
        }
    }

    /// Running workers no active fault holds at `at_ms` (nor ended less than
    /// [`TARGET_GAP_MS`] before it).
    fn free_at(&mut self, at_ms: u64) -> Vec<String> {
        self.active
            .retain(|(_, end)| end.saturating_add(TARGET_GAP_MS) > at_ms);
        self.alive
            .iter()
            .filter(|w| !self.active.iter().any(|(t, _)| t == *w))
            .cloned()
            .collect()
    }

    /// When `max` faults are active at `at_ms`: the earliest time one of them ends.
    fn overlap_slot(&self, at_ms: u64, max: usize) -> Option<u64> {
        let mut ends: Vec<u64> = self
            .active
            .iter()
            .map(|(_, e)| *e)
            .filter(|e| *e > at_ms)
            .collect();
        if ends.len() < max.max(1) {
            return None;
        }
        ends.sort_unstable();
        Some(ends[ends.len() - max.max(1)])
    }

    fn apply(&mut self, f: &GenFault, effect: Effect) {
        let end = f.at_ms + f.window_ms.max(1);
        match effect {
            Effect::Removes => {
                let t = f.target.clone().unwrap_or_default();
                self.alive.retain(|w| *w != t);
                self.active.push((t, end));
            }
            Effect::Holds => self
                .active
                .push((f.target.clone().unwrap_or_default(), end)),
            Effect::Adds => {
                let count = f
                    .fields
                    .iter()
                    .find_map(|(n, v)| match (n, v) {
                        (&"count", Field::Int(c)) => Some(*c as usize),
                        _ => None,
                    })
                    .unwrap_or(1);
                self.spawn(count);
            }
            Effect::Replaces => {
                let old = std::mem::take(&mut self.alive);
                self.spawn(old.len());
                // The old set is stopping and the new one starting for the whole window.
                for w in old.into_iter().chain(self.alive.clone()) {
                    self.active.push((w, end));
                }
                self.active.push((String::new(), end));
            }
            Effect::Ambient => self.active.push((String::new(), end)),
        }
    }

    fn spawn(&mut self, count: usize) {
        for _ in 0..count {
            self.started += 1;
            self.alive.push(worker_name(self.started));
        }
    }
}

/// How long a worker takes to notice an upstream socket gone silent (`UPSTREAM_IDLE_MS`'s
/// default) and reopen it: part of any stall a link fault on the upstream can cause.
const UPSTREAM_IDLE_MS: u64 = 5_000;

impl Schedule {
    /// The longest stall this run's faults excuse: a takeover's worth (twice the lease), plus
    /// the longest fault window, plus the time to notice a silent upstream. A stream stuck for
    /// good (under a healthy lease, say) still stalls longer than that.
    pub fn stall_threshold_ms(&self) -> u64 {
        let window = self.faults.iter().map(|f| f.window_ms).max().unwrap_or(0);
        2 * self.config.lease_ms + window + UPSTREAM_IDLE_MS
    }

    /// The scenario file of this run: a header saying where it came from, the settings, the
    /// faults and the campaign's expectations.
    pub fn to_toml(&self) -> String {
        let c = &self.config;
        let s = kinds::seconds;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "# {} — run {} of the campaign with seed {}, generated by `harness campaign`.",
            self.name, self.run, self.campaign_seed
        );
        let _ = writeln!(
            t,
            "# Replay it with `harness run --replay RUN_DIR --out DIR`, or run this file as any scenario."
        );
        if self.faults.is_empty() {
            let _ = writeln!(t, "# No fault: the fleet runs undisturbed.");
        }
        for f in &self.faults {
            let _ = writeln!(t, "#   {}", f.describe());
        }
        let q = |v: &str| toml::Value::String(v.to_string()).to_string();
        let _ = writeln!(t, "\nname = {}", q(&self.name));
        let kinds: Vec<&str> = self.faults.iter().map(|f| f.kind).collect();
        let summary = if kinds.is_empty() {
            "none".to_string()
        } else {
            kinds.join(", ")
        };
        let description = format!(
            "Campaign seed {} run {}: faults {summary}.",
            self.campaign_seed, self.run
        );
        let _ = writeln!(t, "description = {}", q(&description));
        let _ = writeln!(t, "\n[lease]");
        let _ = writeln!(t, "seconds = {}", Field::Seconds(s(c.lease_ms)).toml());
        let _ = writeln!(
            t,
            "renew_seconds = {}",
            Field::Seconds(s(c.renew_ms)).toml()
        );
        let _ = writeln!(t, "\n[fleet]\nworkers = {}", c.workers);
        let _ = writeln!(
            t,
            "drain_seconds = {}",
            Field::Seconds(s(c.drain_ms)).toml()
        );
        if !c.env.is_empty() {
            let _ = writeln!(t, "\n[fleet.env]");
            for (k, v) in &c.env {
                let _ = writeln!(t, "{} = {}", q(k), q(v));
            }
        }
        let _ = writeln!(t, "\n[upstream]\nstreams = {}", c.streams);
        let _ = writeln!(t, "rate = {}", toml::Value::Float(c.rate));
        if !c.fencing {
            let _ = writeln!(t, "\n[sink]\nfencing = false");
        }
        let _ = writeln!(t, "\n[run]");
        let _ = writeln!(
            t,
            "warmup_seconds = {}",
            Field::Seconds(s(c.warmup_ms)).toml()
        );
        let _ = writeln!(
            t,
            "duration_seconds = {}",
            Field::Seconds(s(c.duration_ms)).toml()
        );
        let _ = writeln!(
            t,
            "settle_timeout_seconds = {}",
            Field::Seconds(s(c.settle_ms)).toml()
        );
        let _ = writeln!(t, "seed = {}", self.seed);
        let _ = writeln!(
            t,
            "stall_threshold_seconds = {}",
            Field::Seconds(s(self.stall_threshold_ms())).toml()
        );
        for f in &self.faults {
            let _ = writeln!(t, "\n[[faults]]");
            let _ = writeln!(t, "at_seconds = {}", Field::Seconds(s(f.at_ms)).toml());
            let _ = writeln!(t, "action = {}", q(f.kind));
            if let Some(target) = &f.target {
                let _ = writeln!(t, "target = {}", q(target));
            }
            for (name, value) in &f.fields {
                let _ = writeln!(t, "{name} = {}", value.toml());
            }
        }
        for (metric, op, threshold) in &c.expect {
            let _ = writeln!(t, "\n[[expect]]");
            let _ = writeln!(t, "metric = {}", q(metric));
            let _ = writeln!(t, "op = {}", q(op));
            let threshold = match threshold.parse::<f64>() {
                Ok(_) => threshold.clone(),
                Err(_) => q(threshold),
            };
            let _ = writeln!(t, "threshold = {threshold}");
        }
        t
    }
}
