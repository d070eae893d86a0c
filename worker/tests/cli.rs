//! The binary's edges: refused configurations exit 2 with one clear line, `--help` documents
//! every variable, and `health` reflects `/readyz`.

use std::process::{Command, Output};

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
    for name in lease_worker::ENV_VARS {
        if ["RUST_LOG", "ECS_CONTAINER_METADATA_URI_V4"].contains(name) {
            continue;
        }
        assert!(
            help.contains(&format!("env: {name}")),
            "--help lacks {name}:\n{help}"
        );
    }
}

#[test]
fn health_fails_when_nothing_listens() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let out = worker(&[], &["health", "--addr", &addr]);
    assert_eq!(out.status.code(), Some(1), "{:?}", out);
}
