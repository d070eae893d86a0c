//! Settings the campaign's unit tests share.

use std::collections::BTreeMap;

use super::kinds::{self, DrawBounds, KINDS};
use super::schedule::GenConfig;

/// Every kind, three workers, a 15 s run at lease 2 s.
pub fn config(seed: u64) -> GenConfig {
    config_with(seed, KINDS.iter().collect())
}

/// The same with only `kinds`.
pub fn config_with(seed: u64, kinds: Vec<&'static kinds::FaultKind>) -> GenConfig {
    GenConfig {
        seed,
        kinds,
        faults: (1, 3),
        max_overlap: 2,
        bounds: DrawBounds {
            window_ms: (1_000, 5_000),
            stop_timeout_ms: 4_000,
            streams: 6,
            lease_ms: 2_000,
        },
        lease_ms: 2_000,
        renew_ms: 500,
        workers: 3,
        streams: 10,
        rate: 20.0,
        warmup_ms: 15_000,
        duration_ms: 15_000,
        settle_ms: 10_000,
        drain_ms: 2_000,
        fencing: true,
        env: BTreeMap::new(),
        expect: super::default_expect(),
    }
}
