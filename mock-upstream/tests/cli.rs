//! The `mock-upstream` binary: help, refused values, and a real serve-then-SIGTERM run.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use lease_protocol::UpstreamFrame;
use tokio_tungstenite::tungstenite::Message;

const BIN: &str = env!("CARGO_BIN_EXE_mock-upstream");

/// Kills the child on drop, so a failing test leaves no process behind.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run mock-upstream");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn help_lists_the_flags() {
    let (code, text) = run(&["--help"]);
    assert_eq!(code, 0, "{text}");
    for flag in [
        "--listen",
        "--streams",
        "--stream-count",
        "--stream-prefix",
        "--rate",
        "--payload-bytes",
        "--retention",
    ] {
        assert!(
            text.contains(flag),
            "--help does not mention {flag}:\n{text}"
        );
    }
}

#[test]
fn bad_values_are_refused_by_name() {
    let cases: &[(&[&str], &str)] = &[
        (&["--streams", "a", "--rate=-1"], "rate -1"),
        (&["--streams", "a", "--rate", "fast"], "fast"),
        (&["--streams", "a", "--retention", "0"], "retention 0"),
        (&["--streams", "a,a"], "\"a\" is listed twice"),
        (&["--streams", "a/b"], "\"a/b\""),
        (&["--stream-count", "0"], "--stream-count 0"),
        (&[], "no streams"),
        (&["--streams", "a", "--listen", "nowhere"], "nowhere"),
    ];
    for (args, expected) in cases {
        let (code, text) = run(args);
        assert_eq!(code, 2, "{args:?} exited {code}: {text}");
        assert!(
            text.contains(expected),
            "{args:?}: {text:?} does not mention {expected:?}"
        );
    }
}

#[tokio::test]
async fn serves_named_streams_and_stops_on_sigterm() {
    let child = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--stream-count",
            "3",
            "--stream-prefix",
            "t-",
            "--rate",
            "100",
        ])
        .env("RUST_LOG", "debug")
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mock-upstream");
    let mut guard = Guard(child);
    let stdout = guard.0.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .unwrap()
    .unwrap();
    let addr = line
        .split_whitespace()
        .find(|w| w.starts_with("127.0.0.1:"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();

    let (mut ws, _) =
        tokio_tungstenite::connect_async(format!("ws://{addr}/streams/t-0003?from=1"))
            .await
            .expect("connect");
    let first = tokio::time::timeout(Duration::from_secs(20), ws.next())
        .await
        .unwrap();
    match first {
        Some(Ok(Message::Text(text))) => match UpstreamFrame::parse(&text).unwrap() {
            UpstreamFrame::Event(ev) => assert_eq!((ev.stream_id.as_str(), ev.seq), ("t-0003", 1)),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }

    let pid = guard.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = guard.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "mock-upstream ignored SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}");
    // Logs go to a pipe here, as in CI and files: plain text, no ANSI colour codes.
    let mut logs = String::new();
    std::io::Read::read_to_string(&mut guard.0.stderr.take().unwrap(), &mut logs).unwrap();
    assert!(!logs.is_empty(), "debug logging wrote nothing");
    assert!(
        !logs.contains('\x1b'),
        "colour codes in piped logs:\n{logs}"
    );
}
