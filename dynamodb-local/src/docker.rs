//! DynamoDB Local in a container via `testcontainers`, and the check for a reachable Docker engine.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use testcontainers::core::IntoContainerPort;
use testcontainers::runners::AsyncRunner;
use testcontainers::ContainerAsync;
use testcontainers_modules::dynamodb_local::DynamoDb;

use crate::ProvisionError;

/// `Ok` when a Docker engine answers `GET /_ping` on `DOCKER_HOST` (unix sockets only) or the
/// default socket; `Err` says why not. TCP `DOCKER_HOST`s are trusted to testcontainers.
pub(crate) fn engine_reachable() -> Result<(), String> {
    let host = std::env::var("DOCKER_HOST").unwrap_or_default();
    if host.starts_with("tcp://") {
        return Ok(());
    }
    let path = host
        .strip_prefix("unix://")
        .map(str::to_string)
        .unwrap_or_else(|| "/var/run/docker.sock".to_string());
    let mut sock = UnixStream::connect(&path).map_err(|e| format!("{path}: {e}"))?;
    let timeout = Some(Duration::from_secs(2));
    sock.set_read_timeout(timeout).ok();
    sock.set_write_timeout(timeout).ok();
    sock.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
        .map_err(|e| format!("{path}: {e}"))?;
    let mut answer = String::new();
    sock.read_to_string(&mut answer)
        .map_err(|e| format!("{path}: {e}"))?;
    if answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        Err(format!(
            "{path} answered {:?}",
            answer.lines().next().unwrap_or("")
        ))
    }
}

/// A running DynamoDB Local container; testcontainers removes it when this drops.
pub(crate) struct Container {
    _container: ContainerAsync<DynamoDb>,
    endpoint: String,
}

impl Container {
    pub(crate) async fn start() -> Result<Self, ProvisionError> {
        let container = DynamoDb::default()
            .start()
            .await
            .map_err(|e| ProvisionError::Container(e.to_string()))?;
        let host = container
            .get_host()
            .await
            .map_err(|e| ProvisionError::Container(e.to_string()))?;
        let port = container
            .get_host_port_ipv4(8000.tcp())
            .await
            .map_err(|e| ProvisionError::Container(e.to_string()))?;
        Ok(Container {
            _container: container,
            endpoint: format!("http://{host}:{port}"),
        })
    }

    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }
}
