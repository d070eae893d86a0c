//! One in-process TCP proxy between one worker and one server (DynamoDB, the upstream or the
//! sink), through which link faults happen on real sockets: latency and jitter, bandwidth,
//! partitions (bytes held, new connections hang), resets (RST), half-open connections (silent
//! for good, no FIN, no RST) and, on the DynamoDB link, request-level faults ([`super::ddb_http`]).
//!
//! A proxy exists only for a link the scenario faults; with no fault active it copies bytes.
//! Faults are a list of active entries (by fault index) folded into one effective state, so
//! overlapping faults compose and each heal removes exactly its own.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use super::ddb_http;
use crate::scenario::menu::{DdbFault, DdbFaultKind, Direction, LinkFault};

/// Chunks in flight per direction of one connection (a held direction backs up to this).
const QUEUE: usize = 64;
/// After a DynamoDB client closes, its server side stays open this long so a request still
/// held (late_apply, partition) is applied and answered, as DynamoDB would.
const HTTP_LINGER: Duration = Duration::from_secs(5);

/// A fault as the proxy applies it.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    Link(LinkFault),
    Ddb(DdbFault),
}

/// What the proxy has done, for the fault's `heal` line and the tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProxyStats {
    pub connections: u64,
    /// DynamoDB requests seen (DynamoDB link only).
    pub requests: u64,
    /// Requests a DynamoDB fault picked.
    pub picked: u64,
    /// Connections closed with RST.
    pub reset: u64,
    /// Connections made silent (half-open).
    pub silenced: u64,
}

/// The folded state of every active fault.
#[derive(Debug, Clone, Default)]
struct Effective {
    /// Per direction (0 outbound, 1 inbound): latency, jitter, bandwidth, held.
    latency: [(u64, u64); 2],
    bandwidth: [Option<u64>; 2],
    held: [bool; 2],
    hold_new: bool,
    refuse_new: bool,
    ddb: Option<DdbFault>,
}

impl Effective {
    fn fold(active: &[(usize, Applied)]) -> Effective {
        let mut e = Effective::default();
        for (_, applied) in active {
            match applied {
                Applied::Ddb(f) => e.ddb = Some(f.clone()),
                Applied::Link(f) => {
                    for (d, outbound) in [(0, true), (1, false)] {
                        let covers = |dir: &Direction| dir.covers(outbound);
                        match f {
                            LinkFault::Latency {
                                latency_ms,
                                jitter_ms,
                                direction,
                            } if covers(direction) => {
                                e.latency[d].0 = e.latency[d].0.max(*latency_ms);
                                e.latency[d].1 = e.latency[d].1.max(*jitter_ms);
                            }
                            LinkFault::Bandwidth {
                                bytes_per_second,
                                direction,
                            } if covers(direction) => {
                                let b = e.bandwidth[d]
                                    .map_or(*bytes_per_second, |b| b.min(*bytes_per_second));
                                e.bandwidth[d] = Some(b);
                            }
                            LinkFault::Partition { direction } if covers(direction) => {
                                e.held[d] = true;
                            }
                            _ => {}
                        }
                    }
                    match f {
                        LinkFault::Partition { .. } | LinkFault::HalfOpen => e.hold_new = true,
                        LinkFault::Reset => e.refuse_new = true,
                        _ => {}
                    }
                }
            }
        }
        e
    }
}

/// One proxied connection's switches.
#[derive(Default)]
struct Conn {
    /// Half-open: every byte dropped, no FIN or RST ever sent, for good.
    silenced: AtomicBool,
    /// A DynamoDB response is to be dropped (unanswered): the connection is dead to the client.
    discard_inbound: AtomicBool,
    reset: Notify,
    /// Set as a reset closes the connection: the write halves must not send a FIN first.
    rst: AtomicBool,
}

/// A write half that, once its connection is being reset, is dropped without the shutdown
/// (FIN) tokio's write half sends on drop, so that the close sends only the RST.
struct Writer {
    half: Option<OwnedWriteHalf>,
    conn: Arc<Conn>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.conn.rst.load(Ordering::Relaxed) {
            if let Some(half) = self.half.take() {
                half.forget();
            }
        }
    }
}

struct Shared {
    server: SocketAddr,
    http: bool,
    active: Mutex<Vec<(usize, Applied)>>,
    effective: watch::Sender<Effective>,
    conns: Mutex<Vec<Weak<Conn>>>,
    rng: Mutex<ChaCha8Rng>,
    closed: watch::Sender<bool>,
    connections: AtomicU64,
    requests: AtomicU64,
    picked: AtomicU64,
    reset: AtomicU64,
    silenced: AtomicU64,
}

/// A running proxy; dropping it closes its listener and every connection through it.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Proxy({} → {})", self.addr, self.shared.server)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.shared.closed.send_replace(true);
    }
}

impl Proxy {
    /// Listens on 127.0.0.1 (port 0) and forwards to `server`; `http` parses DynamoDB
    /// requests on the way out. Must be called inside a tokio runtime.
    pub fn start(server: SocketAddr, http: bool, seed: u64) -> std::io::Result<Proxy> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            server,
            http,
            active: Mutex::new(Vec::new()),
            effective: watch::Sender::new(Effective::default()),
            conns: Mutex::new(Vec::new()),
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
            closed: watch::Sender::new(false),
            connections: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            picked: AtomicU64::new(0),
            reset: AtomicU64::new(0),
            silenced: AtomicU64::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(Proxy {
            addr,
            shared,
            accept,
        })
    }

    /// Where workers connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Starts fault `id`. A reset closes every open connection with RST now; a half-open
    /// fault silences every open connection for good.
    pub fn apply(&self, id: usize, fault: Applied) {
        let conns = self.live_conns();
        match &fault {
            Applied::Link(LinkFault::Reset) => {
                for c in &conns {
                    c.reset.notify_one();
                }
                self.shared
                    .reset
                    .fetch_add(conns.len() as u64, Ordering::Relaxed);
            }
            Applied::Link(LinkFault::HalfOpen) => {
                for c in &conns {
                    c.silenced.store(true, Ordering::Relaxed);
                }
                self.shared
                    .silenced
                    .fetch_add(conns.len() as u64, Ordering::Relaxed);
            }
            _ => {}
        }
        let mut active = self.shared.active.lock().expect("proxy lock");
        active.push((id, fault));
        self.shared.effective.send_replace(Effective::fold(&active));
    }

    /// Ends fault `id` (connections a half-open fault silenced stay silent).
    pub fn heal(&self, id: usize) {
        let mut active = self.shared.active.lock().expect("proxy lock");
        active.retain(|(i, _)| *i != id);
        self.shared.effective.send_replace(Effective::fold(&active));
    }

    /// Ends every fault.
    pub fn heal_all(&self) {
        let mut active = self.shared.active.lock().expect("proxy lock");
        active.clear();
        self.shared.effective.send_replace(Effective::default());
    }

    /// True while some fault is active.
    pub fn is_faulted(&self) -> bool {
        !self.shared.active.lock().expect("proxy lock").is_empty()
    }

    /// Counters so far.
    pub fn stats(&self) -> ProxyStats {
        let s = &self.shared;
        ProxyStats {
            connections: s.connections.load(Ordering::Relaxed),
            requests: s.requests.load(Ordering::Relaxed),
            picked: s.picked.load(Ordering::Relaxed),
            reset: s.reset.load(Ordering::Relaxed),
            silenced: s.silenced.load(Ordering::Relaxed),
        }
    }

    fn live_conns(&self) -> Vec<Arc<Conn>> {
        let mut conns = self.shared.conns.lock().expect("proxy lock");
        conns.retain(|w| w.strong_count() > 0);
        conns.iter().filter_map(Weak::upgrade).collect()
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        shared.connections.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(serve(client, shared.clone()));
    }
}

/// Closes a socket with RST rather than FIN: SO_LINGER on, timeout 0, then the caller drops it.
fn set_rst_on_close(fd: i32) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket fd the caller still owns, with a correctly sized struct.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

async fn serve(client: TcpStream, shared: Arc<Shared>) {
    let mut effective = shared.effective.subscribe();
    let mut closed = shared.closed.subscribe();
    // A new connection: refused (RST) during a reset, left hanging during a partition or a
    // half-open fault (the client sees a timeout, not an error), else connected through.
    loop {
        let e = effective.borrow_and_update().clone();
        if e.refuse_new {
            set_rst_on_close(client.as_raw_fd());
            shared.reset.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !e.hold_new {
            break;
        }
        tokio::select! {
            changed = effective.changed() => if changed.is_err() { return },
            _ = closed.changed() => return,
        }
    }
    let Ok(server) = TcpStream::connect(shared.server).await else {
        set_rst_on_close(client.as_raw_fd());
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let fds = (client.as_raw_fd(), server.as_raw_fd());
    let conn = Arc::new(Conn::default());
    shared
        .conns
        .lock()
        .expect("proxy lock")
        .push(Arc::downgrade(&conn));
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let (out_tx, out_rx) = mpsc::channel(QUEUE);
    let (in_tx, in_rx) = mpsc::channel(QUEUE);
    let side = |outbound| Side {
        shared: shared.clone(),
        conn: conn.clone(),
        outbound,
    };
    let io = async {
        tokio::join!(
            side(true).read(cr, out_tx, Some(in_tx.clone())),
            side(true).write(out_rx, sw),
            side(false).read(sr, in_tx, None),
            side(false).write(in_rx, cw),
        )
    };
    tokio::pin!(io);
    tokio::select! {
        _ = &mut io => {}
        _ = conn.reset.notified() => {
            conn.rst.store(true, Ordering::Relaxed);
            set_rst_on_close(fds.0);
            set_rst_on_close(fds.1);
        }
        _ = closed.changed() => {}
    }
}

/// A chunk of bytes and the instant it may be delivered.
struct Chunk {
    at: Instant,
    bytes: Vec<u8>,
}

/// One direction of one connection.
struct Side {
    shared: Arc<Shared>,
    conn: Arc<Conn>,
    outbound: bool,
}

impl Side {
    fn dir(&self) -> usize {
        usize::from(!self.outbound)
    }

    /// When bytes read now may be delivered (never before the previous chunk).
    fn deliver_at(&self, extra: Duration, last: &mut Instant) -> Instant {
        let (latency, jitter) = self.shared.effective.borrow().latency[self.dir()];
        let jitter = if jitter > 0 {
            self.shared
                .rng
                .lock()
                .expect("proxy lock")
                .random_range(0..=jitter)
        } else {
            0
        };
        let at = Instant::now() + Duration::from_millis(latency + jitter) + extra;
        *last = at.max(*last);
        *last
    }

    /// Reads from one socket into the queue. On the DynamoDB link's way out it cuts the bytes
    /// into requests and lets the active DynamoDB fault decide each (`answer` carries a
    /// throttle's error response to the client).
    async fn read(
        self,
        mut from: OwnedReadHalf,
        to: mpsc::Sender<Chunk>,
        answer: Option<mpsc::Sender<Chunk>>,
    ) {
        let mut buf = vec![0u8; 16 * 1024];
        let mut pending: Vec<u8> = Vec::new();
        let mut parse = self.shared.http && self.outbound;
        let mut last = Instant::now();
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if !parse {
                let at = self.deliver_at(Duration::ZERO, &mut last);
                let chunk = Chunk {
                    at,
                    bytes: buf[..n].to_vec(),
                };
                if to.send(chunk).await.is_err() {
                    return;
                }
                continue;
            }
            pending.extend_from_slice(&buf[..n]);
            loop {
                let head = match ddb_http::frame(&pending) {
                    Ok(Some(head)) => head,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "link proxy: not a DynamoDB request stream; passing bytes through");
                        parse = false;
                        let at = self.deliver_at(Duration::ZERO, &mut last);
                        let bytes = std::mem::take(&mut pending);
                        if to.send(Chunk { at, bytes }).await.is_err() {
                            return;
                        }
                        break;
                    }
                };
                let bytes: Vec<u8> = pending.drain(..head.len).collect();
                let mut extra = Duration::ZERO;
                match self.pick(head.operation.as_deref()) {
                    Some(DdbFaultKind::Throttle { error }) => {
                        let id = self.shared.requests.load(Ordering::Relaxed);
                        let response = Chunk {
                            at: Instant::now(),
                            bytes: ddb_http::error_response(error, id),
                        };
                        if let Some(answer) = &answer {
                            if answer.send(response).await.is_err() {
                                return;
                            }
                        }
                        continue;
                    }
                    Some(DdbFaultKind::Unanswered) => {
                        self.conn.discard_inbound.store(true, Ordering::Relaxed);
                    }
                    Some(DdbFaultKind::LateApply { hold_ms }) => {
                        extra = Duration::from_millis(hold_ms);
                    }
                    None => {}
                }
                let at = self.deliver_at(extra, &mut last);
                if to.send(Chunk { at, bytes }).await.is_err() {
                    return;
                }
            }
        }
    }

    /// What the active DynamoDB fault does to a request of `operation`, if it picks it.
    fn pick(&self, operation: Option<&str>) -> Option<DdbFaultKind> {
        self.shared.requests.fetch_add(1, Ordering::Relaxed);
        let fault = self.shared.effective.borrow().ddb.clone()?;
        let draw: f64 = self.shared.rng.lock().expect("proxy lock").random();
        if !ddb_http::picks(&fault, operation, draw) {
            return None;
        }
        self.shared.picked.fetch_add(1, Ordering::Relaxed);
        Some(fault.kind)
    }

    /// Writes the queue to the other socket, honouring delivery times, holds and bandwidth.
    async fn write(self, mut from: mpsc::Receiver<Chunk>, to: OwnedWriteHalf) {
        let mut writer = Writer {
            half: Some(to),
            conn: self.conn.clone(),
        };
        let Some(to) = writer.half.as_mut() else {
            return;
        };
        let mut effective = self.shared.effective.subscribe();
        while let Some(chunk) = from.recv().await {
            tokio::time::sleep_until(chunk.at).await;
            // A partition holds the bytes (TCP would retransmit them after the heal).
            while !self.silenced() && effective.borrow_and_update().held[self.dir()] {
                if effective.changed().await.is_err() {
                    return;
                }
            }
            let dropped = self.silenced()
                || (!self.outbound && self.conn.discard_inbound.load(Ordering::Relaxed));
            if dropped {
                continue;
            }
            // Paced before the write, so the last byte arrives no sooner than the rate allows.
            let bandwidth = effective.borrow().bandwidth[self.dir()];
            if let Some(bytes_per_second) = bandwidth {
                let secs = chunk.bytes.len() as f64 / bytes_per_second as f64;
                tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            }
            if to.write_all(&chunk.bytes).await.is_err() {
                return;
            }
        }
        // The reading side ended (EOF): pass the FIN on, unless the connection went silent.
        if self.silenced() {
            std::future::pending::<()>().await;
        }
        if self.shared.http && self.outbound {
            tokio::time::sleep(HTTP_LINGER).await;
        }
        let _ = to.shutdown().await;
    }

    fn silenced(&self) -> bool {
        self.conn.silenced.load(Ordering::Relaxed)
    }
}
