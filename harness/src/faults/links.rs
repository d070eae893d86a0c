//! Routes each worker's faulted links through its own [`Proxy`]: as a worker is spawned, one
//! proxy per link the scenario faults is started and the worker's `AWS_ENDPOINT_URL`,
//! `UPSTREAM_URL` or `SINK_URL` points at it. Links no fault names are not proxied, and a
//! scenario without link faults starts no proxy at all.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::proxy::Proxy;
use crate::fleet::SpawnHook;
use crate::scenario::menu::Link;

/// The proxies of a run, by worker and link.
#[derive(Debug)]
pub struct Links {
    faulted: BTreeSet<Link>,
    servers: BTreeMap<Link, SocketAddr>,
    seed: u64,
    proxies: Mutex<BTreeMap<(String, Link), Arc<Proxy>>>,
}

impl Links {
    /// Proxies `faulted` links to `servers` (every faulted link needs its server); `seed`
    /// seeds each proxy's draws (jitter, request picks).
    pub fn new(
        faulted: BTreeSet<Link>,
        servers: BTreeMap<Link, SocketAddr>,
        seed: u64,
    ) -> anyhow::Result<Links> {
        if let Some(missing) = faulted.iter().find(|l| !servers.contains_key(l)) {
            anyhow::bail!("no server address for the {missing} link");
        }
        Ok(Links {
            faulted,
            servers,
            seed,
            proxies: Mutex::new(BTreeMap::new()),
        })
    }

    /// The links that are proxied.
    pub fn faulted(&self) -> &BTreeSet<Link> {
        &self.faulted
    }

    /// The proxy of `worker`'s `link`, when that link is proxied and the worker was started.
    pub fn proxy(&self, worker: &str, link: Link) -> Option<Arc<Proxy>> {
        let proxies = self.proxies.lock().expect("links lock");
        proxies.get(&(worker.to_string(), link)).cloned()
    }

    /// Every proxy, with its worker and link.
    pub fn all(&self) -> Vec<(String, Link, Arc<Proxy>)> {
        let proxies = self.proxies.lock().expect("links lock");
        proxies
            .iter()
            .map(|((w, l), p)| (w.clone(), *l, p.clone()))
            .collect()
    }
}

/// The environment variable that points a worker's `link` at `addr`.
pub fn link_env(link: Link, addr: SocketAddr) -> (String, String) {
    match link {
        Link::Dynamodb => ("AWS_ENDPOINT_URL".into(), format!("http://{addr}")),
        Link::Upstream => ("UPSTREAM_URL".into(), format!("ws://{addr}")),
        Link::Sink => ("SINK_URL".into(), format!("http://{addr}")),
    }
}

impl SpawnHook for Links {
    fn env(&self, worker: &str) -> anyhow::Result<Vec<(String, String)>> {
        let mut env = Vec::new();
        let n = crate::scenario::parse_worker(worker).unwrap_or(0) as u64;
        for &link in &self.faulted {
            let seed = self.seed ^ (n << 8) ^ link as u64;
            let proxy = Proxy::start(self.servers[&link], link == Link::Dynamodb, seed)
                .map_err(|e| anyhow::anyhow!("starting the {link} proxy of {worker}: {e}"))?;
            env.push(link_env(link, proxy.addr()));
            self.proxies
                .lock()
                .expect("links lock")
                .insert((worker.to_string(), link), Arc::new(proxy));
        }
        Ok(env)
    }
}

/// The real address of each link: DynamoDB's from its endpoint URL (`http://HOST:PORT`), the
/// upstream's and the sink's as bound.
pub fn servers(
    dynamodb_endpoint: &str,
    upstream: SocketAddr,
    sink: SocketAddr,
) -> anyhow::Result<BTreeMap<Link, SocketAddr>> {
    use std::net::ToSocketAddrs;
    let hostport = dynamodb_endpoint
        .split_once("://")
        .map_or(dynamodb_endpoint, |(_, rest)| rest)
        .trim_end_matches('/');
    let dynamodb = hostport
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            anyhow::anyhow!("cannot resolve the DynamoDB endpoint {dynamodb_endpoint:?}")
        })?;
    Ok(BTreeMap::from([
        (Link::Dynamodb, dynamodb),
        (Link::Upstream, upstream),
        (Link::Sink, sink),
    ]))
}
