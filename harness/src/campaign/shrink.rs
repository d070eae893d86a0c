//! Shrinking a failing schedule, as proptest shrinks values: try it with one fault removed, then
//! with one fault's window halved, and keep the first smaller schedule that still fails the same
//! way; repeat until no candidate fails. [`candidates`] is the pure part (what to try next); the
//! runner runs them.

use super::kinds::{self, Field};
use super::schedule::{check_targets, Schedule};

/// A window is not halved below this (shorter faults stop meaning anything at lease scale).
pub const MIN_WINDOW_MS: u64 = 200;

/// The schedules one step smaller than `s`, most promising first: each fault removed (the
/// last one first: later faults more often only pile on), then each window halved. Every
/// candidate keeps its targets valid ([`check_targets`]).
pub fn candidates(s: &Schedule) -> Vec<Schedule> {
    let mut out = Vec::new();
    for i in (0..s.faults.len()).rev() {
        let mut c = s.clone();
        c.faults.remove(i);
        if check_targets(c.config.workers, &c.faults) {
            out.push(c);
        }
    }
    for i in 0..s.faults.len() {
        let f = &s.faults[i];
        let Some(field) = kinds::kind(f.kind).and_then(|k| k.duration_field) else {
            continue;
        };
        let half = f.window_ms / 2 / 100 * 100;
        if half < MIN_WINDOW_MS {
            continue;
        }
        let mut c = s.clone();
        c.faults[i].window_ms = half;
        for (name, value) in &mut c.faults[i].fields {
            if *name == field {
                *value = Field::Seconds(kinds::seconds(half));
            }
        }
        if check_targets(c.config.workers, &c.faults) {
            out.push(c);
        }
    }
    out
}

/// A failure `keys` still reproduces one of the `original` keys.
pub fn same_failure(original: &[String], keys: &[String]) -> bool {
    keys.iter().any(|k| original.contains(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::schedule::generate;
    use crate::campaign::tests_support::config;

    #[test]
    fn every_candidate_is_smaller_and_still_valid() {
        let c = config(3);
        for run in 0..100 {
            let s = generate(&c, run);
            for cand in candidates(&s) {
                let removed = cand.faults.len() + 1 == s.faults.len();
                let shorter = cand.faults.len() == s.faults.len()
                    && cand.faults.iter().map(|f| f.window_ms).sum::<u64>()
                        < s.faults.iter().map(|f| f.window_ms).sum::<u64>();
                assert!(removed || shorter, "{cand:?}");
                assert!(check_targets(cand.config.workers, &cand.faults));
                let text = cand.to_toml();
                crate::scenario::Scenario::parse(&text, std::path::Path::new("c.toml"))
                    .unwrap_or_else(|e| panic!("{e}\n{text}"));
            }
        }
    }

    #[test]
    fn shrinking_ends() {
        // Always taking the first candidate reaches a schedule with none, in bounded steps.
        let c = config(11);
        for run in 0..50 {
            let mut s = generate(&c, run);
            let mut steps = 0;
            while let Some(next) = candidates(&s).into_iter().next() {
                s = next;
                steps += 1;
                assert!(steps < 100);
            }
            assert!(s.faults.is_empty(), "{:?}", s.faults);
        }
    }

    #[test]
    fn same_failure_needs_a_shared_reason() {
        let original = vec!["totals.stale_accepted".to_string()];
        assert!(same_failure(&original, &["totals.stale_accepted".into()]));
        assert!(!same_failure(&original, &["run_error".into()]));
        assert!(!same_failure(&original, &[]));
    }
}
