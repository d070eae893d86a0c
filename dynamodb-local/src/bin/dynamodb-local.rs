//! `dynamodb-local fetch [jar|moto]` puts DynamoDB Local's jar (default) or moto's venv into the
//! cache (for CI and offline set-up); `dynamodb-local serve [MODE]` runs one on a free port until
//! Ctrl-C.

use std::process::ExitCode;

use dynamodb_local::{DynamoLocal, Mode, Options};

const USAGE: &str = "usage: dynamodb-local fetch [jar|moto] | serve [MODE]\n  \
fetch        put DynamoDB Local's jar into the cache (or find it via DYNAMODB_LOCAL_DIR) and print its directory\n  \
fetch moto   install moto (Apache-2.0, pinned) into a cached venv (or find it via MOTO_VENV) and print its python\n  \
serve [MODE] run a server (MODE: auto, container, jar, moto or endpoint=URL; default DYNAMODB_MODE, else auto)\n               and print its endpoint until Ctrl-C";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let what = args.next();
    let mut options = Options::default();
    match command.as_str() {
        "fetch" => {
            let resolved = match what.as_deref() {
                None | Some("jar") => options.jar.resolve(),
                Some("moto") => options.moto.resolve(),
                Some(other) => {
                    eprintln!("error: fetch {other:?}: use jar or moto\n{USAGE}");
                    return ExitCode::from(2);
                }
            };
            match resolved {
                Ok(path) => {
                    println!("{}", path.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        "serve" => {
            if let Some(mode) = what {
                match mode.parse::<Mode>() {
                    Ok(mode) => options.mode = mode,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            match DynamoLocal::start(&options).await {
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
            }
        }
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
