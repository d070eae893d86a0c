use std::path::Path;

use proptest::prelude::*;

use super::kinds::{self, KINDS};
use super::schedule::{check_targets, generate};
use super::tests_support::config_with as config;
use crate::scenario::Scenario;

fn kinds_strategy() -> impl Strategy<Value = Vec<&'static kinds::FaultKind>> {
    proptest::sample::subsequence((0..KINDS.len()).collect::<Vec<_>>(), 1..=KINDS.len())
        .prop_map(|idx| idx.into_iter().map(|i| &KINDS[i]).collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_same_inputs_give_the_same_schedule(seed in any::<u64>(), run in 0u32..1000, kinds in kinds_strategy()) {
        let c = config(seed, kinds);
        prop_assert_eq!(generate(&c, run), generate(&c, run));
        prop_assert_eq!(generate(&c, run).to_toml(), generate(&c, run).to_toml());
    }

    #[test]
    fn every_generated_schedule_validates(
        seed in any::<u64>(),
        run in 0u32..1000,
        kinds in kinds_strategy(),
        max_faults in 0usize..6,
        overlap in 1usize..4,
        workers in 2usize..6,
        window in (100u64..4_000, 0u64..6_000),
        duration_s in 5u64..40,
    ) {
        let mut c = config(seed, kinds);
        c.faults = (max_faults / 2, max_faults);
        c.max_overlap = overlap;
        c.workers = workers;
        c.bounds.window_ms = (window.0, window.0 + window.1);
        c.duration_ms = duration_s * 1000;
        let schedule = generate(&c, run);
        prop_assert!(schedule.faults.len() <= max_faults);
        prop_assert!(check_targets(workers, &schedule.faults));
        for f in &schedule.faults {
            prop_assert!(f.at_ms + f.window_ms <= c.duration_ms, "{f:?} outlives the run");
        }
        let text = schedule.to_toml();
        let parsed = Scenario::parse(&text, Path::new("generated.toml"));
        prop_assert!(parsed.is_ok(), "{}\n{}", parsed.unwrap_err(), text);
        let parsed = parsed.unwrap();
        prop_assert_eq!(parsed.faults.len(), schedule.faults.len());
        prop_assert_eq!(parsed.run.seed, schedule.seed);
        for (p, g) in parsed.faults.iter().zip(&schedule.faults) {
            prop_assert_eq!(p.at_ms, g.at_ms);
            prop_assert_eq!(p.action.name(), g.kind);
        }
    }

    #[test]
    fn runs_differ_from_one_another(seed in any::<u64>()) {
        let c = config(seed, KINDS.iter().collect());
        let distinct: std::collections::BTreeSet<String> =
            (0..20).map(|run| generate(&c, run).to_toml()).collect();
        prop_assert!(distinct.len() > 10, "only {} distinct schedules in 20 runs", distinct.len());
    }
}

#[test]
fn a_run_does_not_depend_on_the_runs_before_it() {
    // Run 17 alone is run 17 of a whole campaign: each run draws from its own stream.
    let c = config(42, KINDS.iter().collect());
    let alone = generate(&c, 17);
    let _earlier: Vec<_> = (0..17).map(|run| generate(&c, run)).collect();
    assert_eq!(generate(&c, 17), alone);
}

#[test]
fn no_worker_is_targeted_after_it_was_killed() {
    let c = config(7, vec![kinds::kind("kill").unwrap()]);
    for run in 0..200 {
        let s = generate(&c, run);
        let targets: Vec<&String> = s.faults.iter().filter_map(|f| f.target.as_ref()).collect();
        let unique: std::collections::BTreeSet<_> = targets.iter().collect();
        assert_eq!(unique.len(), targets.len(), "{:?}", s.faults);
        // Three workers: at most two die, one is left to take over.
        assert!(targets.len() <= 2, "{:?}", s.faults);
    }
}

#[test]
fn unknown_fault_kinds_are_refused_with_the_known_ones() {
    let err = kinds::parse_list("kill,explode").unwrap_err();
    assert!(
        err.contains("\"explode\"") && err.contains("rolling_deploy"),
        "{err}"
    );
    assert_eq!(kinds::parse_list("kill, pause,kill").unwrap().len(), 2);
    assert!(kinds::parse_list(" , ").is_err());
}

#[test]
fn long_windows_move_earlier_rather_than_vanish() {
    // Pauses of 4–5 s in a 12 s run: a late draw starts earlier instead of being dropped.
    let mut c = config(3, vec![kinds::kind("pause").unwrap()]);
    c.faults = (2, 2);
    c.bounds.window_ms = (4_000, 5_000);
    c.duration_ms = 12_000;
    let placed: usize = (0..50).map(|run| generate(&c, run).faults.len()).sum();
    assert!(placed >= 90, "only {placed} of 100 pauses placed");
    assert_eq!(
        generate(&c, 0).faults.len(),
        2,
        "{:?}",
        generate(&c, 0).faults
    );
}
