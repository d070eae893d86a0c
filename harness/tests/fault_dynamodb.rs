//! DynamoDB faults on a real link: DynamoDB Local behind the link proxy, called by the AWS SDK
//! and by a real `lease-worker` process routed through the fleet's proxy. A throttled call
//! fails with DynamoDB's own error code, a partitioned call times out, an unanswered write is
//! applied though its caller never hears so, and a late write lands after its caller gave up.

mod e2e_common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use harness::faults::links::{self, Links};
use harness::faults::proxy::{Applied, Proxy};
use harness::fleet::{Fleet, FleetConfig};
use harness::history::HistoryWriter;
use harness::scenario::menu::{DdbError, DdbFault, DdbFaultKind, Direction, Link, LinkFault};

const TABLE: &str = "websocket-leases";
/// How long a faulted call waits before it gives up.
const SHORT: Duration = Duration::from_millis(1500);
/// How long a late write is held: well past SHORT.
const HOLD: Duration = Duration::from_secs(4);

/// A client through `endpoint` that gives up after `timeout` and never retries (as the worker).
fn client(endpoint: &str, timeout: Duration) -> Client {
    let base = lease_table::local_client(endpoint);
    let config = base
        .config()
        .to_builder()
        .retry_config(RetryConfig::disabled())
        .timeout_config(TimeoutConfig::builder().operation_timeout(timeout).build())
        .build();
    Client::from_conf(config)
}

fn ddb(kind: DdbFaultKind, operation: Option<&str>) -> Applied {
    Applied::Ddb(DdbFault {
        kind,
        fraction: 1.0,
        operation: operation.map(String::from),
    })
}

async fn set_x(c: &Client, x: i64) -> Result<(), String> {
    c.update_item()
        .table_name(TABLE)
        .key("stream_id", AttributeValue::S("probe".into()))
        .update_expression("SET x = :x")
        .expression_attribute_values(":x", AttributeValue::N(x.to_string()))
        .send()
        .await
        .map(|_| ())
        .map_err(|e| format!("{}: {e:?}", e.code().unwrap_or("no code")))
}

async fn get_x(c: &Client) -> Option<i64> {
    let item = c
        .get_item()
        .table_name(TABLE)
        .key("stream_id", AttributeValue::S("probe".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item?;
    item.get("x")?.as_n().ok()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_calls_through_a_faulted_link_see_what_dynamodb_clients_see() {
    let local = dynamodb_local::DynamoLocal::start(&dynamodb_local::Options::default())
        .await
        .expect("DynamoDB Local (run `cargo run -p dynamodb-local --bin dynamodb-local -- fetch`)");
    let direct = local.client();
    lease_table::create_table(&direct, TABLE).await.unwrap();
    let server = links::servers(
        local.endpoint(),
        "127.0.0.1:1".parse().unwrap(),
        "127.0.0.1:1".parse().unwrap(),
    )
    .unwrap()[&Link::Dynamodb];
    let proxy = Proxy::start(server, true, 7).unwrap();
    let url = format!("http://{}", proxy.addr());
    // Unfaulted calls get a generous timeout (the machine may be loaded); faulted calls are
    // expected to time out after SHORT, well before a late write lands (HOLD).
    let via = client(&url, Duration::from_secs(15));
    let short = client(&url, SHORT);
    set_x(&direct, 0).await.unwrap();
    set_x(&via, 1).await.unwrap();

    // Throttled: the SDK parses DynamoDB's own error, code and status.
    for (error, code) in [
        (DdbError::Throttling, "ThrottlingException"),
        (
            DdbError::ProvisionedThroughputExceeded,
            "ProvisionedThroughputExceededException",
        ),
        (DdbError::InternalServerError, "InternalServerError"),
    ] {
        proxy.apply(0, ddb(DdbFaultKind::Throttle { error }, Some("UpdateItem")));
        let err = set_x(&via, 99).await.unwrap_err();
        assert!(err.starts_with(&format!("{code}:")), "{err}");
        // Only UpdateItem is picked: a GetItem passes.
        assert_eq!(get_x(&via).await, Some(1));
        proxy.heal(0);
    }
    assert_eq!(
        get_x(&direct).await,
        Some(1),
        "a throttled write reached DynamoDB"
    );

    // Unanswered: applied, but the caller only sees a timeout.
    proxy.apply(1, ddb(DdbFaultKind::Unanswered, None));
    let err = set_x(&short, 2).await.unwrap_err();
    assert!(err.contains("Timeout") || err.contains("timeout"), "{err}");
    proxy.heal(1);
    assert_eq!(
        get_x(&direct).await,
        Some(2),
        "an unanswered write must still be applied"
    );

    // Late apply: held HOLD, the caller gives up after SHORT, the write lands afterwards.
    let hold_ms = HOLD.as_millis() as u64;
    proxy.apply(2, ddb(DdbFaultKind::LateApply { hold_ms }, None));
    let err = set_x(&short, 3).await.unwrap_err();
    assert!(err.to_lowercase().contains("timeout"), "{err}");
    proxy.heal(2);
    assert_eq!(get_x(&direct).await, Some(2), "the late write landed early");
    tokio::time::sleep(HOLD + Duration::from_secs(1)).await;
    assert_eq!(get_x(&direct).await, Some(3), "the late write never landed");

    // Partition: a timeout, not an error; after the heal, calls work again.
    proxy.apply(
        3,
        Applied::Link(LinkFault::Partition {
            direction: Direction::Both,
        }),
    );
    let fresh = client(&url, SHORT);
    let err = set_x(&fresh, 4).await.unwrap_err();
    assert!(err.to_lowercase().contains("timeout"), "{err}");
    proxy.heal(3);
    let after = client(&url, Duration::from_secs(15));
    set_x(&after, 5).await.unwrap();
    let stats = proxy.stats();
    assert!(stats.picked >= 5, "{stats:?}");
}

/// The worker's `lease_worker_dynamodb_requests_total` for one outcome, summed over operations.
async fn outcome_count(metrics: std::net::SocketAddr, outcome: &str) -> u64 {
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("lease_worker_dynamodb_requests_total{"))
        .filter(|l| l.contains(&format!("outcome=\"{outcome}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_behind_its_proxy_sees_real_throttles_and_partition_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let local = dynamodb_local::DynamoLocal::start(&dynamodb_local::Options::default())
        .await
        .expect("DynamoDB Local");
    let direct = local.client();
    lease_table::create_table(&direct, TABLE).await.unwrap();
    let streams = vec!["s-0001".to_string(), "s-0002".to_string()];
    lease_table::seed_streams(&direct, TABLE, &streams)
        .await
        .unwrap();
    let mut up_config = mock_upstream::UpstreamConfig::new(streams);
    up_config.rate = 10.0;
    let (up_addr, _upstream) = mock_upstream::start(up_config).await.unwrap();
    let writer = HistoryWriter::create(&dir.path().join("history.jsonl")).unwrap();
    let sink = harness::sink::Sink::start(writer.recorder(), true)
        .await
        .unwrap();
    let servers = links::servers(local.endpoint(), up_addr, sink.addr()).unwrap();
    let links = Arc::new(Links::new(BTreeSet::from([Link::Dynamodb]), servers, 3).unwrap());
    let env = BTreeMap::from(
        [
            ("LEASE_TABLE", TABLE.to_string()),
            ("LEASE_SECONDS", "3".into()),
            ("RENEW_SECONDS", "1".into()),
            ("UPSTREAM_URL", format!("ws://{up_addr}")),
            ("SINK_URL", sink.url()),
            ("AWS_ENDPOINT_URL", local.endpoint().to_string()),
            ("AWS_ACCESS_KEY_ID", "local".into()),
            ("AWS_SECRET_ACCESS_KEY", "local".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let fleet = Fleet::new(
        FleetConfig {
            bin: e2e_common::worker_bin(),
            dir: dir.path().to_path_buf(),
            env,
            worker_env: BTreeMap::new(),
            args: Vec::new(),
            hooks: vec![links.clone()],
        },
        writer.recorder(),
    );
    let name = fleet.spawn().unwrap();
    let metrics = fleet
        .wait_ready(&name, Duration::from_secs(30))
        .await
        .unwrap();
    let proxy = links
        .proxy(&name, Link::Dynamodb)
        .expect("the worker's DynamoDB link is proxied");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        proxy.stats().requests > 0,
        "the worker's DynamoDB calls did not go through its proxy"
    );

    proxy.apply(
        0,
        ddb(
            DdbFaultKind::Throttle {
                error: DdbError::Throttling,
            },
            None,
        ),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.heal(0);
    let throttled = outcome_count(metrics, "throttled").await;
    assert!(
        throttled > 0,
        "the worker never classified a ThrottlingException as throttled"
    );

    let timeouts_before = outcome_count(metrics, "timeout").await;
    proxy.apply(
        1,
        Applied::Link(LinkFault::Partition {
            direction: Direction::Both,
        }),
    );
    // A worker that lost its leases under the throttle above has no renewal in flight: its next
    // DynamoDB call may be a scan or acquire up to a scan interval away, and those give up after
    // 5 s. Wait for the first timeout rather than a fixed time.
    let mut timeouts = timeouts_before;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        timeouts = outcome_count(metrics, "timeout").await;
        if timeouts > timeouts_before {
            break;
        }
    }
    proxy.heal(1);
    assert!(
        timeouts > timeouts_before,
        "a partitioned worker's DynamoDB calls must time out"
    );
    fleet.kill_all();
    fleet.wait_exit(&name, Duration::from_secs(5)).await;
}
