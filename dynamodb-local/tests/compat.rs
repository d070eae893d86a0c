//! What the worker and the harness ask of a DynamoDB-compatible server, checked against the real
//! servers this crate provisions (DynamoDB Local's jar and moto), so that a backend is chosen on
//! evidence and keeps earning its place. `COMPAT_ENDPOINT=http://127.0.0.1:PORT cargo test -p
//! dynamodb-local --test compat -- --ignored --nocapture any_endpoint` prints the same matrix for
//! a server you started yourself (that is how dynalite was judged: see the README).
//!
//! Also here: the negative control for `serve.py`'s lock — stock moto, unlocked, grants one
//! lease to two racing acquirers, which the same race test then catches.

use std::collections::HashSet;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, StreamSpecification, StreamViewType,
};
use aws_sdk_dynamodb::Client;
use dynamodb_local::{DynamoLocal, Mode, Options};
use lease_table::ops::{self, Holder, Outcome};

const TABLE: &str = "compat";

type Check = Result<String, String>;

fn fail(what: impl std::fmt::Display) -> String {
    what.to_string()
}

/// Runs every check in order (later ones build on earlier ones' items); returns one line each.
async fn matrix(client: &Client, endpoint: &str) -> Vec<(&'static str, Check)> {
    let mut out = vec![("CreateTable with a stream, ACTIVE", create(client).await)];
    out.push(("PutItem if absent (seed)", seed(client).await));
    out.push((
        "acquire: if_not_exists + ReturnValues ALL_NEW",
        acquire_new(client).await,
    ));
    out.push((
        "acquire refused: ReturnValuesOnConditionCheckFailure ALL_OLD",
        acquire_refused(client).await,
    ));
    out.push((
        "acquire of a missing item refused",
        acquire_missing(client).await,
    ));
    out.push((
        "renew with checkpoint; wrong token refused",
        renew(client).await,
    ));
    out.push((
        "release (REMOVE) + consistent GetItem",
        release(client).await,
    ));
    out.push((
        "fleet item: ADD / DELETE on a string set",
        fleet(client).await,
    ));
    out.push((
        "consistent Scan, Limit + ExclusiveStartKey",
        scan_pages(client).await,
    ));
    out.push((
        "parallel Scan: 3 segments partition the table",
        segments(client).await,
    ));
    out.push((
        "membership: heartbeat (reserved words), scan, conditional delete",
        membership(client).await,
    ));
    out.push((
        "DynamoDB Streams: DescribeStream, GetShardIterator, GetRecords",
        streams(client, endpoint).await,
    ));
    out.push((
        "racing acquires: exactly one winner per round",
        race(client, 40).await.map(|r| r.to_string()),
    ));
    out
}

fn print(backend: &str, rows: &[(&str, Check)]) {
    println!("compat matrix for {backend}:");
    for (name, result) in rows {
        match result {
            Ok(detail) => println!("  ok    {name:62} {detail}"),
            Err(why) => println!("  FAIL  {name:62} {why}"),
        }
    }
}

async fn create(client: &Client) -> Check {
    let key = |k: KeyType| {
        KeySchemaElement::builder()
            .attribute_name("stream_id")
            .key_type(k)
    };
    client
        .create_table()
        .table_name(TABLE)
        .key_schema(key(KeyType::Hash).build().map_err(fail)?)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("stream_id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(fail)?,
        )
        .billing_mode(BillingMode::PayPerRequest)
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .map_err(fail)?,
        )
        .send()
        .await
        .map_err(|e| lease_table::error_text(&e))?;
    for _ in 0..50 {
        let table = client
            .describe_table()
            .table_name(TABLE)
            .send()
            .await
            .map_err(|e| lease_table::error_text(&e))?;
        let table = table.table().cloned().unwrap_or_else(|| unreachable!());
        if table.table_status().map(|s| s.as_str()) == Some("ACTIVE") {
            return match table.latest_stream_arn() {
                Some(arn) => Ok(arn.to_string()),
                None => Err("ACTIVE, but no LatestStreamArn".into()),
            };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("not ACTIVE after 5 s".into())
}

async fn seed(client: &Client) -> Check {
    let ids: Vec<String> = (0..25).map(|i| format!("s-{i:04}")).collect();
    let first = lease_table::seed_streams(client, TABLE, &ids)
        .await
        .map_err(fail)?;
    let again = lease_table::seed_streams(client, TABLE, &ids)
        .await
        .map_err(fail)?;
    if (first, again) == (25, 0) {
        Ok("25 new, then 0".into())
    } else {
        Err(format!("{first} new, then {again} (want 25, 0)"))
    }
}

const T0: i64 = 1_000_000;

async fn acquire_new(client: &Client) -> Check {
    match ops::acquire(client, TABLE, "s-0001", "w1", 3000, T0, 0).await {
        Ok(Outcome::Done(item))
            if item.fence_token == Some(1) && item.owner_id.as_deref() == Some("w1") =>
        {
            Ok("fence 1".into())
        }
        other => Err(format!("{other:?}")),
    }
}

async fn acquire_refused(client: &Client) -> Check {
    match ops::acquire(client, TABLE, "s-0001", "w2", 3000, T0 + 10, 0).await {
        Ok(Outcome::Refused {
            current: Some(item),
        }) if item.owner_id.as_deref() == Some("w1") => Ok("item returned with the refusal".into()),
        Ok(Outcome::Refused { current: None }) => {
            Err("refused, but no item returned with the refusal".into())
        }
        other => Err(format!("{other:?}")),
    }
}

async fn acquire_missing(client: &Client) -> Check {
    let result = ops::acquire(client, TABLE, "no-such-stream", "w1", 3000, T0, 0).await;
    let created = lease_table::get(client, TABLE, "no-such-stream")
        .await
        .map_err(fail)?;
    match (result, created) {
        (Ok(Outcome::Refused { .. }), None) => Ok("refused, nothing created".into()),
        (other, created) => Err(format!("{other:?}; item now {created:?}")),
    }
}

async fn renew(client: &Client) -> Check {
    // w2 takes the expired lease (fence 2), renews with a checkpoint; w2 with fence 1 is refused.
    let taken = ops::acquire(client, TABLE, "s-0001", "w2", 3000, T0 + 5000, 0).await;
    if !matches!(&taken, Ok(Outcome::Done(i)) if i.fence_token == Some(2)) {
        return Err(format!("takeover after expiry: {taken:?}"));
    }
    let me = |fence_token| Holder {
        owner_id: "w2",
        fence_token,
    };
    let ok = ops::renew(client, TABLE, "s-0001", me(2), 3000, T0 + 6000, Some(42)).await;
    let stale = ops::renew(client, TABLE, "s-0001", me(1), 3000, T0 + 6000, Some(43)).await;
    let item = lease_table::get(client, TABLE, "s-0001")
        .await
        .map_err(fail)?;
    match (ok, stale, item) {
        (Ok(Outcome::Done(())), Ok(Outcome::Refused { .. }), Some(i))
            if i.checkpoint == Some(42) =>
        {
            Ok("checkpoint 42 kept".into())
        }
        other => Err(format!("{other:?}")),
    }
}

async fn release(client: &Client) -> Check {
    let me = Holder {
        owner_id: "w2",
        fence_token: 2,
    };
    let released = ops::release(client, TABLE, "s-0001", me, Some(44), T0 + 7000).await;
    let item = lease_table::get(client, TABLE, "s-0001")
        .await
        .map_err(fail)?;
    match (released, item) {
        (Ok(Outcome::Done(())), Some(i))
            if i.owner_id.is_none() && i.fence_token == Some(2) && i.checkpoint == Some(44) =>
        {
            Ok("free, fence 2 and checkpoint 44 kept".into())
        }
        other => Err(format!("{other:?}")),
    }
}

async fn fleet(client: &Client) -> Check {
    ops::fleet_bump(client, TABLE, "w1", Some(true), T0)
        .await
        .map_err(fail)?;
    let draining = ops::fleet_read(client, TABLE).await.map_err(fail)?;
    ops::fleet_bump(client, TABLE, "w1", Some(false), T0)
        .await
        .map_err(fail)?;
    let done = ops::fleet_read(client, TABLE).await.map_err(fail)?;
    if draining.draining == ["w1"] && done.generation == 2 && done.draining.is_empty() {
        Ok("generation 2, set emptied".into())
    } else {
        Err(format!("{draining:?} then {done:?}"))
    }
}

async fn scan_pages(client: &Client) -> Check {
    let mut ids = HashSet::new();
    let mut pages = 0;
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(TABLE)
            .consistent_read(true)
            .limit(7)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| lease_table::error_text(&e))?;
        pages += 1;
        for item in page.items() {
            if let Some(AttributeValue::S(id)) = item.get("stream_id") {
                ids.insert(id.clone());
            }
        }
        match page.last_evaluated_key() {
            Some(key) if !key.is_empty() => start = Some(key.clone()),
            _ => break,
        }
        if pages > 20 {
            return Err("more than 20 pages for 26 items".into());
        }
    }
    // 25 streams and the fleet item.
    if ids.len() == 26 && pages >= 4 {
        Ok(format!("26 items in {pages} pages"))
    } else {
        Err(format!("{} items in {pages} pages", ids.len()))
    }
}

/// Segmented discovery's reads: `Segment`/`TotalSegments` split the table into disjoint parts
/// that cover it (a backend that ignores them returns the whole table to each: still correct
/// for the worker, which only reads more; reported, not failed).
async fn segments(client: &Client) -> Check {
    let mut all = Vec::new();
    for segment in 0..3 {
        let page = client
            .scan()
            .table_name(TABLE)
            .segment(segment)
            .total_segments(3)
            .send()
            .await
            .map_err(|e| lease_table::error_text(&e))?;
        if page.last_evaluated_key().is_some_and(|k| !k.is_empty()) {
            return Err("a segment of 26 items did not fit one page".into());
        }
        for item in page.items() {
            if let Some(AttributeValue::S(id)) = item.get("stream_id") {
                all.push(id.clone());
            }
        }
    }
    let distinct: HashSet<&String> = all.iter().collect();
    match (distinct.len(), all.len()) {
        (26, 26) => Ok("26 items, each in one segment".into()),
        (26, 78) => Ok("segments ignored: every segment is the whole table".into()),
        (d, n) => Err(format!("{d} distinct items in {n} reads")),
    }
}

/// The membership table: a heartbeat (its attributes include reserved words), read back by a
/// scan, a bid and handoffs removed by the next heartbeat, and a delete conditioned on the expiry seen.
async fn membership(client: &Client) -> Check {
    use lease_table::members::{self, Member};
    let table = members::table_for(TABLE);
    members::create_table(client, &table).await.map_err(fail)?;
    let mut member = Member {
        owner_id: "w-1".into(),
        instance: "i".into(),
        held: 4,
        segment_items: 9,
        segments: 3,
        expires_at: 5_000,
        draining: false,
        bid: Some(("s-01".into(), 4_000)),
        handoff: vec![("s-02".into(), "w-2".into()), ("s-03".into(), "w-3".into())],
        handoff_at: 4_500,
    };
    members::heartbeat(client, &table, &member, 1_000)
        .await
        .map_err(|e| lease_table::error_text(&e))?;
    let read = members::scan(client, &table).await.map_err(fail)?;
    if read != [member.clone()] {
        return Err(format!("wrote {member:?}, read {read:?}"));
    }
    member.bid = None;
    member.handoff.clear();
    member.handoff_at = 0;
    member.expires_at = 6_000;
    members::heartbeat(client, &table, &member, 2_000)
        .await
        .map_err(|e| lease_table::error_text(&e))?;
    members::forget(client, &table, "w-1", 5_000)
        .await
        .map_err(|e| lease_table::error_text(&e))?;
    let read = members::scan(client, &table).await.map_err(fail)?;
    if read != [member.clone()] {
        return Err(format!(
            "bid or handoff not removed, or deleted despite a newer heartbeat: {read:?}"
        ));
    }
    members::forget(client, &table, "w-1", 6_000)
        .await
        .map_err(|e| lease_table::error_text(&e))?;
    let read = members::scan(client, &table).await.map_err(fail)?;
    if !read.is_empty() {
        return Err(format!("not deleted: {read:?}"));
    }
    Ok("written, read back, bid and handoffs removed, deleted only as seen".into())
}

/// The Streams API by hand (JSON over HTTP), since the harness's SDK set has no streams client
/// of its own yet: DescribeStream, a TRIM_HORIZON iterator on the first shard, GetRecords.
async fn streams(client: &Client, endpoint: &str) -> Check {
    let table = client
        .describe_table()
        .table_name(TABLE)
        .send()
        .await
        .map_err(|e| lease_table::error_text(&e))?;
    let arn = table
        .table()
        .and_then(|t| t.latest_stream_arn())
        .ok_or("no LatestStreamArn")?
        .to_string();
    let http = reqwest::Client::new();
    let call = |op: &'static str, body: serde_json::Value| {
        let http = http.clone();
        async move {
            let answer = http
                .post(endpoint)
                .header("X-Amz-Target", format!("DynamoDBStreams_20120810.{op}"))
                .header("Content-Type", "application/x-amz-json-1.0")
                // Neither server checks signatures; both want to see the header's shape.
                .header(
                    "Authorization",
                    "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, \
                     SignedHeaders=host, Signature=00",
                )
                .body(body.to_string())
                .send()
                .await
                .map_err(|e| format!("{op}: {e}"))?;
            let status = answer.status();
            let text = answer.text().await.map_err(|e| format!("{op}: {e}"))?;
            if !status.is_success() {
                return Err(format!("{op}: HTTP {status}: {text}"));
            }
            serde_json::from_str::<serde_json::Value>(&text).map_err(|e| format!("{op}: {e}"))
        }
    };
    let described = call("DescribeStream", serde_json::json!({ "StreamArn": arn })).await?;
    let shard = described["StreamDescription"]["Shards"][0]["ShardId"]
        .as_str()
        .ok_or_else(|| format!("no shard in {described}"))?
        .to_string();
    let iterator = call(
        "GetShardIterator",
        serde_json::json!({ "StreamArn": arn, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON" }),
    )
    .await?;
    let iterator = iterator["ShardIterator"]
        .as_str()
        .ok_or("no ShardIterator")?
        .to_string();
    let records = call(
        "GetRecords",
        serde_json::json!({ "ShardIterator": iterator, "Limit": 1000 }),
    )
    .await?;
    let records = records["Records"].as_array().cloned().unwrap_or_default();
    let modified = records
        .iter()
        .filter(|r| {
            r["eventName"] == "MODIFY"
                && r["dynamodb"]["OldImage"].is_object()
                && r["dynamodb"]["NewImage"].is_object()
        })
        .count();
    if modified > 0 {
        Ok(format!(
            "{} records, {modified} MODIFY with both images",
            records.len()
        ))
    } else {
        Err(format!(
            "{} records, none a MODIFY with both images",
            records.len()
        ))
    }
}

/// Rounds `first..first + rounds`: a fresh item each, 16 concurrent acquires by 16 owners.
/// Returns the rounds in which more than one acquire succeeded — on a linearizable server, none.
async fn race_rounds(client: &Client, first: usize, rounds: usize) -> Result<usize, String> {
    let mut doubled = 0;
    for round in first..first + rounds {
        doubled += usize::from(race_round(client, round).await?);
    }
    Ok(doubled)
}

async fn race_round(client: &Client, round: usize) -> Result<bool, String> {
    let id = format!("race-{round}");
    lease_table::seed_streams(client, TABLE, &[&id])
        .await
        .map_err(fail)?;
    let now = lease_table::now_ms();
    let tries: Vec<_> = (0..16)
        .map(|w| {
            let (client, id) = (client.clone(), id.clone());
            tokio::spawn(async move {
                ops::acquire(&client, TABLE, &id, &format!("w{w}"), 60_000, now, 0).await
            })
        })
        .collect();
    let mut winners = 0;
    for t in tries {
        if let Ok(Ok(Outcome::Done(_))) = t.await {
            winners += 1;
        }
    }
    Ok(winners > 1)
}

async fn race(client: &Client, rounds: usize) -> Result<&'static str, String> {
    match race_rounds(client, 0, rounds).await? {
        0 => Ok("none doubled"),
        n => Err(format!("{n} of {rounds} rounds granted one lease twice")),
    }
}

async fn check_backend(mode: Mode) {
    let ddb = DynamoLocal::start(&Options {
        mode,
        ..Options::default()
    })
    .await
    .expect("the backend starts");
    let rows = matrix(&ddb.client(), ddb.endpoint()).await;
    print(&ddb.describe(), &rows);
    let failed: Vec<_> = rows.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(failed.is_empty(), "{}: {failed:?}", ddb.describe());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamodb_local_jar_does_everything_the_lease_table_needs() {
    check_backend(Mode::Jar).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moto_does_everything_the_lease_table_needs() {
    check_backend(Mode::Moto).await;
}

/// `serve.py` started by hand: `unlocked` drops its lock, `window_ms` holds each conditional
/// write that long between its check and its write, so racing writes overlap every round.
struct Served {
    child: std::process::Child,
    client: Client,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn serve_moto(unlocked: bool, window_ms: u64) -> Served {
    use std::io::BufRead;
    let python = dynamodb_local::MotoSource::from_env()
        .resolve()
        .expect("moto installs");
    let mut command = std::process::Command::new(&python);
    command
        .arg("-c")
        .arg(dynamodb_local::moto::SERVE_PY)
        .arg("0")
        .env("MOTO_SERVE_RACE_WINDOW_MS", window_ms.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    if unlocked {
        command.env("MOTO_SERVE_UNLOCKED", "1");
    }
    let mut child = command.spawn().expect("python runs");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    let endpoint = format!("http://127.0.0.1:{}", line.trim());
    let served = Served {
        child,
        client: lease_table::local_client(&endpoint),
    };
    lease_table::create_table(&served.client, TABLE)
        .await
        .unwrap();
    served
}

/// Negative control for `serve.py`'s lock: the same server without it, with a 50 ms window
/// between each write's check and its write, lets racing acquires both win — every round
/// (3 of 3, five runs of five, 2026-12-06), not now and then: left to chance, CI once saw 300
/// rounds pass without a doubled grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unlocked_moto_grants_one_lease_twice_and_the_race_check_sees_it() {
    let served = serve_moto(true, 50).await;
    let doubled = race_rounds(&served.client, 0, 3).await.unwrap();
    println!("unlocked moto, 50 ms race window: {doubled} of 3 rounds granted one lease twice");
    assert!(
        doubled > 0,
        "unlocked moto with a 50 ms race window granted no lease twice in 3 rounds: the race check may be blind"
    );
}

/// The positive side of the control above: the same widened window, with the lock, never
/// grants a lease twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locked_moto_grants_each_lease_once_even_with_a_race_window() {
    let served = serve_moto(false, 10).await;
    let doubled = race_rounds(&served.client, 0, 3).await.unwrap();
    assert_eq!(doubled, 0, "locked moto granted a lease twice");
}

/// The matrix for an endpoint you started (`COMPAT_ENDPOINT`); prints, asserts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs COMPAT_ENDPOINT=http://127.0.0.1:PORT of a server you started"]
async fn any_endpoint() {
    let endpoint = std::env::var("COMPAT_ENDPOINT").expect("COMPAT_ENDPOINT is set");
    let client = lease_table::local_client(&endpoint);
    let rows = matrix(&client, &endpoint).await;
    print(&endpoint, &rows);
}
