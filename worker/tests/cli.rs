//! The binary's edges: refused configurations exit 2 with one clear line, `--help` documents
//! every variable, and `health` reflects `/readyz`.

use std::collections::BTreeSet;
use std::process::{Command, Output};

use clap::CommandFactory;
use lease_protocol::settings;

fn worker(envs: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lease-worker"));
    cmd.env_clear()
        .env("UPSTREAM_URL", "ws://127.0.0.1:9")
        .env("SINK_URL", "http://127.0.0.1:9")
        .env("METRICS_ADDR", "127.0.0.1:0");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.args(args).output().expect("lease-worker runs")
}

#[test]
fn refused_configurations_exit_2_with_one_line_naming_the_variable() {
    let cases: &[(&str, &str)] = &[
        ("RENEW_SECONDS", "30"),
        ("LEASE_SECONDS", "0"),
        ("LEASE_SECONDS", "-1"),
        ("LEASE_SECONDS", "soon"),
        ("DRAIN_SECONDS", "0"),
        ("SCAN_SECONDS", "x"),
        ("MAX_STREAMS", "0"),
        ("UPSTREAM_URL", "not a url"),
        ("SINK_URL", "ftp://host"),
        ("METRICS_ADDR", "nowhere"),
        ("ACQUIRE_MODE", "grab-all"),
        ("SKEW_MARGIN_MS", "-5"),
        ("BATCH_MAX_EVENTS", "0"),
        ("CHAOS_SKIP_DEADLINE_CHECK", "maybe"),
    ];
    for (name, value) in cases {
        let out = worker(&[(name, value)], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}={value}: {stderr}");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{name}={value}: {stderr}"
        );
        assert!(stderr.contains(name), "{name}={value}: {stderr}");
    }
}

#[test]
fn missing_upstream_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_lease-worker"))
        .env_clear()
        .env("SINK_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("UPSTREAM_URL is required"));
}

#[test]
fn help_documents_every_variable() {
    let out = worker(&[], &["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for name in settings::FLAGS {
        assert!(
            help.contains(&format!("env: {name}")),
            "--help lacks {name}:\n{help}"
        );
    }
}

/// The setting names have one definition (`lease_protocol::settings`): a flag reading a variable
/// that is not listed there would be missed by the harness's managed list and the deploy checks.
#[test]
fn every_flag_reads_a_listed_setting() {
    fn envs(command: &clap::Command, into: &mut BTreeSet<String>) {
        for arg in command.get_arguments() {
            if let Some(env) = arg.get_env() {
                into.insert(env.to_string_lossy().into_owned());
            }
        }
        for sub in command.get_subcommands() {
            envs(sub, into);
        }
    }
    let mut read = BTreeSet::new();
    envs(&lease_worker::Cli::command(), &mut read);
    let listed: BTreeSet<String> = settings::FLAGS.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        read, listed,
        "the worker's flags and lease_protocol::settings::FLAGS must name the same variables"
    );
}

#[test]
fn health_fails_when_nothing_listens() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let out = worker(&[], &["health", "--addr", &addr]);
    assert_eq!(out.status.code(), Some(1), "{:?}", out);
}
