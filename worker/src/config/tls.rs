//! TLS trust for `wss://` upstreams and `https://` sinks: rustls with the aws-lc-rs provider and
//! the system CA store (`/etc/ssl/certs`), or — when `SSL_CERT_FILE` / `SSL_CERT_DIR` are set —
//! only the certificates found there (`rustls-native-certs` rules, which reqwest's verifier on
//! Linux follows too, so both clients trust the same CAs).
//!
//! The upstream's CA certificates are loaded once per process, at the start check; plain `ws://`
//! and `http://` never load any. This module never opens a socket.

use std::sync::{Arc, OnceLock};

use lease_protocol::settings;
use rustls::crypto::aws_lc_rs;
use rustls::{ClientConfig, RootCertStore};
use tokio_tungstenite::Connector;

use super::{Config, ConfigError};

/// The environment variables that replace the system CA store when set.
pub const CA_ENV_VARS: [&str; 2] = [settings::SSL_CERT_FILE, settings::SSL_CERT_DIR];

/// Makes aws-lc-rs the process's rustls provider unless one is installed already.
///
/// The AWS SDK compiles both ring and aws-lc-rs into rustls, and rustls then refuses to guess
/// (a panic in `ClientConfig::builder()`); a second call, or another installer winning, is fine.
pub fn install_crypto_provider() {
    let _ = aws_lc_rs::default_provider().install_default();
}

/// Where the CA certificates come from, for messages: the variables that are set, else the system.
pub fn ca_source() -> String {
    let set: Vec<String> = CA_ENV_VARS
        .iter()
        .filter_map(|name| {
            std::env::var_os(name).map(|v| format!("{name}={:?}", v.to_string_lossy()))
        })
        .collect();
    if set.is_empty() {
        "the system CA store".to_string()
    } else {
        set.join(" and ")
    }
}

/// What the start check found: how many CA certificates `wss://`/`https://` will trust, from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trust {
    pub roots: usize,
    pub source: String,
    /// Files or certificates that could not be read (the rest still count).
    pub warnings: Vec<String>,
}

/// Loads the CA certificates once when a URL needs TLS; refuses, naming the variable and its
/// value, when none can be loaded. `Ok(None)`: no URL needs TLS.
pub fn check(config: &Config) -> Result<Option<Trust>, ConfigError> {
    let needs = [
        ("UPSTREAM_URL", &config.upstream_url, "wss://"),
        ("SINK_URL", &config.sink_url, "https://"),
    ]
    .into_iter()
    .find(|(_, url, scheme)| url.starts_with(scheme));
    let Some((name, url, _)) = needs else {
        return Ok(None);
    };
    match loaded() {
        Ok(roots) => Ok(Some(Trust {
            roots: roots.count,
            source: ca_source(),
            warnings: roots.warnings.clone(),
        })),
        Err(e) => Err(ConfigError(
            format!("{name}={url:?} needs CA certificates, but {e}; mount a CA bundle or set SSL_CERT_FILE to a PEM file")
                .replace('\n', " "),
        )),
    }
}

/// The connector for one upstream URL: plain for `ws://`, rustls with the loaded roots for `wss://`.
pub fn upstream_connector(url: &str) -> Result<Connector, String> {
    if !url.starts_with("wss://") {
        return Ok(Connector::Plain);
    }
    match loaded() {
        Ok(roots) => Ok(Connector::Rustls(roots.config.clone())),
        Err(e) => Err(e.clone()),
    }
}

struct Roots {
    config: Arc<ClientConfig>,
    count: usize,
    warnings: Vec<String>,
}

fn loaded() -> &'static Result<Roots, String> {
    static ROOTS: OnceLock<Result<Roots, String>> = OnceLock::new();
    ROOTS.get_or_init(load)
}

fn load() -> Result<Roots, String> {
    let found = rustls_native_certs::load_native_certs();
    let warnings: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
    let mut store = RootCertStore::empty();
    let (count, ignored) = store.add_parsable_certificates(found.certs);
    if count == 0 {
        let why = if warnings.is_empty() {
            "it holds none".to_string()
        } else {
            warnings.join("; ")
        };
        return Err(format!("none could be loaded from {} ({why})", ca_source()));
    }
    let mut warnings = warnings;
    if ignored > 0 {
        warnings.push(format!("{ignored} certificates could not be parsed"));
    }
    // An explicit provider: this config never depends on the process default.
    let config = ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("rustls refused its default protocol versions: {e}"))?
        .with_root_certificates(store)
        .with_no_client_auth();
    Ok(Roots {
        config: Arc::new(config),
        count,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_urls_need_no_certificates() {
        assert!(matches!(
            upstream_connector("ws://127.0.0.1:1"),
            Ok(Connector::Plain)
        ));
    }

    #[test]
    fn installing_the_provider_twice_is_harmless() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
