//! Measures what one DynamoDB Local answers on this machine: full scans of a table of N leases,
//! and conditional lease writes at a given concurrency. Sizes a scale scenario.
//!
//!   cargo run --release -p dynamodb-local --example probe -- 2000 32

use std::time::Instant;

use dynamodb_local::{DynamoLocal, Options};
use lease_table::ops::{self, Holder};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let streams: usize = args.next().map_or(Ok(2000), |a| a.parse())?;
    let concurrency: usize = args.next().map_or(Ok(32), |a| a.parse())?;
    let ddb = DynamoLocal::start(&Options::default()).await?;
    let client = ddb.client();
    let table = "probe";
    lease_table::create_table(&client, table).await?;
    let ids: Vec<String> = (0..streams).map(|i| format!("s-{i:04}")).collect();
    lease_table::seed_streams(&client, table, &ids).await?;

    let t = Instant::now();
    let n = 5;
    for _ in 0..n {
        lease_table::scan_all(&client, table).await?;
    }
    println!("scan of {streams} items: {:?} each", t.elapsed() / n as u32);

    let now = lease_table::now_ms();
    burst("acquires", &ids, concurrency, |id| {
        let client = client.clone();
        async move {
            ops::acquire(&client, table, &id, "probe", 60_000, now, 200)
                .await
                .unwrap();
        }
    })
    .await;
    burst("renews", &ids, concurrency, |id| {
        let client = client.clone();
        async move {
            let holder = Holder {
                owner_id: "probe",
                fence_token: 1,
            };
            ops::renew(
                &client,
                table,
                &id,
                holder,
                60_000,
                lease_table::now_ms(),
                Some(5),
            )
            .await
            .unwrap();
        }
    })
    .await;
    Ok(())
}

/// Runs `op` once per id, `concurrency` ids at a time, and prints the rate.
async fn burst<F, Fut>(what: &str, ids: &[String], concurrency: usize, op: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in ids.chunks(ids.len().div_ceil(concurrency).max(1)) {
        let calls: Vec<Fut> = chunk.iter().map(|id| op(id.clone())).collect();
        tasks.spawn(async move {
            for call in calls {
                call.await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let took = t.elapsed();
    println!(
        "{} {what} at concurrency {concurrency}: {took:?} ({:.0}/s)",
        ids.len(),
        ids.len() as f64 / took.as_secs_f64()
    );
}
