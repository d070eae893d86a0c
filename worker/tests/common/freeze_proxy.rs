//! A TCP proxy whose connections can be frozen: every byte is forwarded both ways until
//! [`FreezeProxy::freeze_open`], after which the connections open at that moment forward nothing
//! more and stay open (no FIN, no RST) — a half-open path, as a NAT drop or a vanished host
//! leaves it. Connections opened later forward normally.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct FreezeProxy {
    pub addr: SocketAddr,
    /// Connections accepted so far.
    accepted: Arc<AtomicUsize>,
    /// Connections numbered below this forward nothing.
    frozen_below: Arc<AtomicUsize>,
}

impl FreezeProxy {
    /// Listens on 127.0.0.1:0 and forwards every connection to `target`.
    pub async fn start(target: SocketAddr) -> FreezeProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let frozen_below = Arc::new(AtomicUsize::new(0));
        let (count, frozen) = (accepted.clone(), frozen_below.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let id = count.fetch_add(1, Ordering::SeqCst);
                let frozen = frozen.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up = pump(cr, sw, id, frozen.clone());
                    let down = pump(sr, cw, id, frozen);
                    let _ = tokio::join!(up, down);
                });
            }
        });
        FreezeProxy {
            addr,
            accepted,
            frozen_below,
        }
    }

    /// Freezes every connection open now; returns how many there were.
    pub fn freeze_open(&self) -> usize {
        let open = self.accepted.load(Ordering::SeqCst);
        self.frozen_below.store(open, Ordering::SeqCst);
        open
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    id: usize,
    frozen_below: Arc<AtomicUsize>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if id < frozen_below.load(Ordering::SeqCst) {
            // Half-open: keep both sockets, move nothing, never close. The test's end drops us.
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
        let n = match tokio::time::timeout(Duration::from_millis(50), from.read(&mut buf)).await {
            Err(_) => continue,
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => n,
        };
        if id < frozen_below.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
