//! The caller's shell cannot change a run: every worker setting and AWS credential in the
//! harness's own environment is removed before a worker starts; only what the run sets reaches
//! it. One test in its own binary, because it sets the process's environment.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use harness::fleet::{managed_env, Fleet, FleetConfig};
use harness::history::HistoryWriter;

#[tokio::test]
async fn no_worker_setting_leaks_from_the_callers_shell() {
    const LEAKED: &str = "from-the-callers-shell";
    for name in managed_env() {
        // SAFETY (edition 2024 wording): the only test in this binary, set before any thread
        // that reads the environment starts.
        std::env::set_var(name, LEAKED);
    }
    let dir = tempfile::tempdir().unwrap();
    let dumped = dir.path().join("env.txt");
    let writer = HistoryWriter::create(&dir.path().join("history.jsonl")).unwrap();
    // `sh` stands in for the worker and writes the environment it was given.
    let fleet = Fleet::new(
        FleetConfig {
            bin: PathBuf::from("/bin/sh"),
            dir: dir.path().to_path_buf(),
            env: BTreeMap::from([("LEASE_TABLE".to_string(), "set-by-the-run".to_string())]),
            worker_env: BTreeMap::new(),
            args: vec!["-c".into(), format!("env > {}", dumped.display())],
            hooks: Vec::new(),
        },
        writer.recorder(),
    );
    let name = fleet.spawn().unwrap();
    assert!(fleet.wait_exit(&name, Duration::from_secs(10)).await);
    let env: BTreeMap<String, String> = std::fs::read_to_string(&dumped)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let leaked: Vec<&String> = env
        .iter()
        .filter(|(_, v)| *v == LEAKED)
        .map(|(k, _)| k)
        .collect();
    assert!(
        leaked.is_empty(),
        "these reached the worker from the shell: {leaked:?}"
    );
    assert!(!env.contains_key("FLEET_POLL_MS"), "{env:?}");
    assert_eq!(env["LEASE_TABLE"], "set-by-the-run");
    assert_eq!(env["OWNER_ID"], name);
}
