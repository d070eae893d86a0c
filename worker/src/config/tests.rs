//! Unit tests of the worker's configuration: flags, environment, refusals.

use super::*;

fn raw(args: &[&str]) -> RawConfig {
    let mut argv = vec!["lease-worker"];
    if !args.contains(&"--upstream-url") {
        argv.extend(["--upstream-url", "ws://127.0.0.1:1"]);
    }
    if !args.contains(&"--sink-url") {
        argv.extend(["--sink-url", "http://127.0.0.1:2"]);
    }
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv).expect("flags parse").run
}

#[test]
fn defaults_are_valid() {
    let config = raw(&[]).validate().unwrap();
    assert_eq!(config.lease, Duration::from_secs(30));
    assert_eq!(config.renew, Duration::from_secs(10));
    assert_eq!(config.scan, config.renew);
    assert_eq!(config.safety_margin, Duration::from_secs(1));
    assert_eq!(config.acquire_mode, AcquireMode::ExpiryAware);
    assert_eq!(config.discovery, Discovery::Full);
    assert!(!config.chaos_skip_deadline_check);
    let segmented = raw(&["--discovery", "segmented", "--lease-table", "t"])
        .validate()
        .unwrap();
    assert_eq!(
        segmented.discovery,
        Discovery::Segmented {
            members_table: "t-members".into()
        }
    );
}

#[test]
fn fractions_are_allowed() {
    let config = raw(&["--lease-seconds", "2.5", "--renew-seconds", "0.5"])
        .validate()
        .unwrap();
    assert_eq!(config.lease, Duration::from_millis(2500));
    assert_eq!(config.safety_margin, Duration::from_millis(250));
}

#[test]
fn impossible_settings_are_refused_with_the_name() {
    let cases: &[(&[&str], &str)] = &[
        (&["--renew-seconds", "30"], "RENEW_SECONDS"),
        (&["--renew-seconds", "29.5"], "safety margin"),
        (&["--lease-seconds", "0"], "LEASE_SECONDS"),
        (&["--lease-seconds=-3"], "LEASE_SECONDS"),
        (&["--lease-seconds", "abc"], "LEASE_SECONDS"),
        (&["--drain-seconds", "NaN"], "DRAIN_SECONDS"),
        (&["--max-streams", "0"], "MAX_STREAMS"),
        (&["--upstream-url", "not a url"], "UPSTREAM_URL"),
        (&["--sink-url", "ws://x:1"], "SINK_URL"),
        (&["--sink-url", "ftp://x:1"], "SINK_URL"),
        (&["--upstream-url", "http://x:1"], "UPSTREAM_URL"),
        (&["--upstream-url", "https://x:1"], "UPSTREAM_URL"),
        (&["--metrics-addr", "localhost"], "METRICS_ADDR"),
        (&["--acquire-mode", "greedy"], "ACQUIRE_MODE"),
        (&["--discovery", "leader"], "DISCOVERY"),
        (&["--log-format", "xml"], "LOG_FORMAT"),
        (&["--batch-max-events", "0"], "BATCH_MAX_EVENTS"),
        (&["--upstream-idle-ms", "50"], "UPSTREAM_IDLE_MS"),
        (&["--upstream-idle-ms", "soon"], "UPSTREAM_IDLE_MS"),
        (&["--sink-reject-policy", "skip"], "SINK_REJECT_POLICY"),
        (&["--sink-reject-policy", "dead-letter"], "DEAD_LETTER_DIR"),
        (
            &[
                "--sink-reject-policy",
                "dead-letter",
                "--dead-letter-dir",
                "/nonexistent/dl",
            ],
            "DEAD_LETTER_DIR",
        ),
    ];
    for (args, name) in cases {
        let err = raw(args).validate().unwrap_err();
        assert!(err.0.contains(name), "{args:?}: {err}");
        assert!(!err.0.contains('\n'), "{args:?}: {err}");
    }
}

#[test]
fn tls_schemes_are_accepted() {
    let config = raw(&[
        "--upstream-url",
        "wss://feed.example.com/",
        "--sink-url",
        "https://sink.example.com:8443",
    ])
    .validate()
    .unwrap();
    assert_eq!(config.upstream_url, "wss://feed.example.com");
    assert_eq!(config.sink_url, "https://sink.example.com:8443");
}

#[test]
fn a_refused_scheme_names_the_variable_the_value_and_the_allowed_schemes() {
    let err = raw(&["--upstream-url", "https://feed.example.com"])
        .validate()
        .unwrap_err();
    assert_eq!(
        err.0,
        "UPSTREAM_URL=\"https://feed.example.com\" must be a ws:// or wss:// URL with a host"
    );
}

#[test]
fn missing_urls_are_refused() {
    let raw = Cli::try_parse_from(["lease-worker"]).unwrap().run;
    let err = raw.validate().unwrap_err();
    assert!(err.0.contains("UPSTREAM_URL is required"), "{err}");
}
