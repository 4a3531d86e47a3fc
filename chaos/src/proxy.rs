//! A userspace TCP proxy that delays (and optionally reorders) traffic between the hub and a
//! node: this kernel has no `tc netem`, so delay lives here. The hub's connection URL points at
//! the proxy, which listens on the hub namespace's loopback and dials the node.
//!
//! The proxy runs on its own thread, moved into the hub's network namespace (`setns` affects
//! only the calling thread), with a current-thread runtime, so every socket it opens belongs to
//! that namespace. Bytes of one TCP connection are never reordered (that would corrupt the
//! stream, not reorder it): each chunk is due at `max(previous due, now + delay + jitter)`.
//! Jitter therefore reorders traffic *across* connections (the event stream, pooled request
//! connections, the WebSocket), which is the reordering a TCP peer can see. It does not touch
//! payloads and holds no credentials.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Runtime-adjustable knobs, shared with the harness.
#[derive(Debug, Default)]
pub struct Knobs {
    /// Base one-way delay per chunk, in milliseconds.
    pub delay_ms: AtomicU64,
    /// Extra random delay per chunk, `0..jitter_ms`, in milliseconds.
    pub jitter_ms: AtomicU64,
    /// Connections accepted so far.
    pub accepted: AtomicU64,
    /// Bytes forwarded (both directions).
    pub bytes: AtomicU64,
}

/// A running proxy; stops (and closes every relayed connection) on drop.
#[derive(Debug)]
pub struct DelayProxy {
    /// The listening address inside the hub's namespace.
    pub addr: SocketAddr,
    /// The knobs the harness turns while it runs.
    pub knobs: Arc<Knobs>,
    stop_tx: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DelayProxy {
    /// Starts a proxy inside network namespace `netns` (by name, `/run/netns/<name>`),
    /// listening on `127.0.0.1:0` there and forwarding to `target`.
    pub fn start(netns: &str, target: SocketAddr) -> anyhow::Result<Self> {
        let ns = std::fs::File::open(format!("/run/netns/{netns}"))
            .with_context(|| format!("opening namespace {netns}"))?;
        let knobs = Arc::new(Knobs::default());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel::<anyhow::Result<SocketAddr>>();
        let k = knobs.clone();
        let thread = std::thread::Builder::new()
            .name("chaos-proxy".into())
            .spawn(move || {
                let setup =
                    || -> anyhow::Result<(tokio::runtime::Runtime, std::net::TcpListener)> {
                        rustix::thread::move_into_link_name_space(
                            ns.as_fd(),
                            Some(rustix::thread::LinkNameSpaceType::Network),
                        )
                        .context("entering the hub namespace")?;
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()?;
                        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
                        l.set_nonblocking(true)?;
                        Ok((rt, l))
                    };
                let (rt, l) = match setup() {
                    Ok(v) => v,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e));
                        return;
                    }
                };
                let _ = addr_tx.send(l.local_addr().map_err(Into::into));
                rt.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(l) else {
                        return;
                    };
                    tokio::select! {
                        _ = stop_rx => {}
                        _ = accept_loop(listener, target, k) => {}
                    }
                });
                // Dropping the runtime here cancels every relay task, closing its sockets.
            })?;
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(5))
            .context("proxy thread did not start")??;
        Ok(Self {
            addr,
            knobs,
            stop_tx: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Sets the base delay and jitter for chunks read from now on.
    pub fn set_delay(&self, delay: Duration, jitter: Duration) {
        self.knobs
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
        self.knobs
            .jitter_ms
            .store(jitter.as_millis() as u64, Ordering::Relaxed);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, knobs: Arc<Knobs>) {
    while let Ok((down, _)) = listener.accept().await {
        knobs.accepted.fetch_add(1, Ordering::Relaxed);
        let knobs = knobs.clone();
        tokio::spawn(async move {
            // A refused or unreachable node closes the hub's side at once, as a direct dial
            // would fail.
            let Ok(Ok(up)) =
                tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(target)).await
            else {
                return;
            };
            let _ = down.set_nodelay(true);
            let _ = up.set_nodelay(true);
            relay(down, up, knobs).await;
        });
    }
}

/// Relays both directions until either side fails; a clean EOF is forwarded (after the
/// queued chunks) as a half-close.
async fn relay(down: TcpStream, up: TcpStream, knobs: Arc<Knobs>) {
    let (dr, dw) = down.into_split();
    let (ur, uw) = up.into_split();
    let a = pipe(dr, uw, knobs.clone());
    let b = pipe(ur, dw, knobs);
    tokio::pin!(a, b);
    // An error in one direction (a reset) ends both: dropping the halves closes the sockets.
    tokio::select! {
        r = &mut a => if r.is_ok() { let _ = b.await; },
        r = &mut b => if r.is_ok() { let _ = a.await; },
    }
}

async fn pipe(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    knobs: Arc<Knobs>,
) -> std::io::Result<()> {
    // Bounded: a reader far ahead of a slow writer waits instead of buffering without limit.
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(256);
    let reader = async move {
        let mut last_due = Instant::now();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match r.read(&mut buf).await? {
                0 => return Ok(()),
                n => n,
            };
            let delay = knobs.delay_ms.load(Ordering::Relaxed);
            let jitter = knobs.jitter_ms.load(Ordering::Relaxed);
            let extra = if jitter > 0 {
                rand::rng().random_range(0..jitter)
            } else {
                0
            };
            let due = (Instant::now() + Duration::from_millis(delay + extra)).max(last_due);
            last_due = due;
            knobs.bytes.fetch_add(n as u64, Ordering::Relaxed);
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                return Ok(());
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            w.write_all(&chunk).await?;
        }
        w.shutdown().await
    };
    let (r, w) = tokio::join!(reader, writer);
    r.and(w)
}
