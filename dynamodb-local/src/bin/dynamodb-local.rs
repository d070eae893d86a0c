//! `dynamodb-local fetch` puts the DynamoDB Local jar into the cache (for CI and offline set-up);
//! `dynamodb-local serve` runs one on a free port until Ctrl-C.

use std::process::ExitCode;

use dynamodb_local::{DynamoLocal, Options};

const USAGE: &str = "usage: dynamodb-local fetch | serve\n  \
fetch  put DynamoDB Local into the cache (or find it via DYNAMODB_LOCAL_DIR) and print its directory\n  \
serve  run DynamoDB Local (mode from DYNAMODB_MODE, default auto) and print its endpoint until Ctrl-C";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let command = std::env::args().nth(1).unwrap_or_default();
    let options = Options::default();
    match command.as_str() {
        "fetch" => match options.jar.resolve() {
            Ok(dir) => {
                println!("{}", dir.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        "serve" => match DynamoLocal::start(&options).await {
            Ok(ddb) => {
                println!("{}", ddb.endpoint());
                let _ = tokio::signal::ctrl_c().await;
                drop(ddb);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        "-h" | "--help" => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("error: unknown command {other:?}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
