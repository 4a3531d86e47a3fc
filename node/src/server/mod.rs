//! Listeners: the always-on IPC socket and the opt-in TCP listener, their accept loops,
//! runtime toggling of TCP, and graceful shutdown.
//!
//! Both listeners serve the same router; each connection's requests carry a
//! [`Transport`] extension, and the [`boundary`] middleware applies the guards that
//! transport needs. Toggling remote access starts or stops only TCP.

pub(crate) mod boundary;
mod conn;
pub mod fds;
pub(crate) mod share_relay;

use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use tracing::{debug, error, info, warn};

use crate::guard::Transport;
use crate::state::Node;

/// The running TCP listener, if any, and the router it serves.
#[derive(Debug, Default)]
pub struct TcpControl {
    /// The router shared with the IPC listener; set when serving starts.
    app: Option<Router>,
    running: Option<RunningTcp>,
}

#[derive(Debug)]
struct RunningTcp {
    /// Address actually bound.
    addr: SocketAddr,
    /// Requested bind address and port (what the config asked for).
    want: (String, u16),
    stop: CancellationToken,
    done: JoinHandle<()>,
    /// The QUIC peer-link listener beside it (`crate::link::quic`), when it runs.
    quic: Option<crate::link::quic::QuicListener>,
}

impl TcpControl {
    /// The bound TCP address, when remote access is serving.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.running.as_ref().map(|r| r.addr)
    }

    /// The port the TCP listener serves on and the port that was asked for (they differ when
    /// the asked-for port was taken and a fallback was bound), while remote access serves.
    pub fn ports(&self) -> Option<(u16, u16)> {
        self.running.as_ref().map(|r| (r.addr.port(), r.want.1))
    }

    /// The QUIC listener's UDP port and certificate fingerprint, when it runs.
    pub fn quic(&self) -> Option<(u16, String)> {
        let q = self.running.as_ref()?.quic.as_ref()?;
        Some((q.addr.port(), q.fingerprint.clone()))
    }
}

/// Serves the node until SIGINT/SIGTERM or `node.shutdown` fires.
pub(crate) async fn run(
    node: Arc<Node>,
    hook: Option<crate::routes::RouterHook>,
) -> anyhow::Result<()> {
    let ipc = bind_ipc(&node.paths.socket).await?;
    let app = crate::routes::router_with(node.clone(), hook);
    node.tcp.lock().await.app = Some(app.clone());
    let drain = Duration::from_millis(node.config().tuning.shutdown_drain_ms);
    let ipc_task = tokio::spawn(accept_loop(
        Listener::Unix(ipc),
        app,
        node.shutdown.clone(),
        drain,
        None,
    ));
    info!(listener = "ipc", socket = %node.paths.socket.display(), "IPC listener started");
    let tcp = apply_remote_access(&node).await;
    // Signal handlers are installed before the ready line: a supervisor (or a test) may send
    // SIGTERM the moment it reads it, and the default action would skip the drain.
    let signals = Signals::install();
    println!(
        "{} ready ipc={} tcp={}",
        node.name,
        node.paths.socket.display(),
        tcp.map(|a| a.to_string()).unwrap_or_else(|| "off".into())
    );
    spawn_background(&node);

    signals.wait(&node.shutdown).await;
    info!("shutting down: draining connections");
    node.shutdown.cancel();
    if let Some(r) = node.tcp.lock().await.running.take() {
        if let Some(q) = &r.quic {
            q.stop();
        }
        r.stop.cancel();
        let _ = r.done.await;
    }
    let _ = ipc_task.await;
    if let Err(e) = std::fs::remove_file(&node.paths.socket) {
        warn!(error = %e, "removing the IPC socket");
    }
    // Sessions end with a node that stops (held ones: their holders end them); a restart
    // onto an updated executable keeps them for the new process to re-adopt.
    let keep = crate::ops::update::restart_requested();
    let n = node.clone();
    let _ = tokio::task::spawn_blocking(move || n.sessions.end_with_node(keep)).await;
    node.tasks.close();
    let _ = tokio::time::timeout(drain, node.tasks.wait()).await;
    // The ACP journal's writer thread is never joined: what it still holds is committed now,
    // or a restart would lose the newest frames (an agent's exit, a turn's end).
    let n = node.clone();
    if !tokio::task::spawn_blocking(move || n.acp.flush(drain))
        .await
        .unwrap_or(false)
    {
        warn!("the acp journal was not flushed before the stop");
    }
    info!("stopped");
    Ok(())
}

/// SIGTERM and SIGINT streams, registered up front.
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Self {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
        }
    }

    async fn wait(mut self, shutdown: &CancellationToken) {
        async fn recv(s: Option<&mut tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = recv(self.int.as_mut()) => {}
            _ = recv(self.term.as_mut()) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}

/// Refuses to start when another node answers on `socket`, then takes the config dir's node
/// lock, held for the process's life so two nodes never share a store. Call before opening
/// the store, so the message names the socket rather than a database lock.
pub(crate) fn claim_instance(lock_path: &Path, socket: &Path) -> anyhow::Result<std::fs::File> {
    if std::os::unix::net::UnixStream::connect(socket).is_ok() {
        bail!(
            "another tuic node is already listening on {}",
            socket.display()
        );
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    // A node that just exited may still hold its lock for a few milliseconds while the kernel
    // drops its last file references (seen in /proc/locks after the process was reaped), so
    // a held lock with nobody answering on the socket is retried briefly before refusing.
    let deadline = std::time::Instant::now() + LOCK_RETRY;
    loop {
        match fs4::fs_std::FileExt::try_lock_exclusive(&f) {
            Ok(true) => return Ok(f),
            Ok(false)
                if std::time::Instant::now() < deadline
                    && std::os::unix::net::UnixStream::connect(socket).is_err() =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(false) => bail!(
                "another tuic node is already running with config dir {} (socket {})",
                lock_path.parent().unwrap_or(lock_path).display(),
                socket.display()
            ),
            Err(e) => return Err(e).context("locking the config dir"),
        }
    }
}

/// How long a held node lock is retried when no node answers on the socket.
const LOCK_RETRY: Duration = Duration::from_secs(2);

/// Binds the IPC socket (mode 0600), replacing a stale socket file and refusing a live one.
pub(crate) async fn bind_ipc(path: &Path) -> anyhow::Result<UnixListener> {
    if std::fs::symlink_metadata(path).is_ok() {
        match UnixStream::connect(path).await {
            Ok(_) => bail!(
                "another tuic node is already listening on {}",
                path.display()
            ),
            Err(e) => {
                info!(socket = %path.display(), error = %e, "replacing stale IPC socket");
                std::fs::remove_file(path)
                    .with_context(|| format!("removing stale socket {}", path.display()))?;
            }
        }
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // The socket is created with no group/other access at all, not chmod-ed afterwards.
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = UnixListener::bind(path);
    rustix::process::umask(old);
    bound.with_context(|| format!("binding the IPC socket {}", path.display()))
}

/// Reconciles the TCP listener with config and overrides; returns the bound address.
pub(crate) async fn apply_remote_access(node: &Arc<Node>) -> Option<SocketAddr> {
    let cfg = node.config();
    let ov = node
        .overrides
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let enabled = ov.remote_access.unwrap_or(cfg.remote_access_enabled);
    let want_port = ov.port.unwrap_or(cfg.services.server.port);
    let want_bind = ov
        .bind
        .clone()
        .unwrap_or_else(|| cfg.services.server.bind.clone());
    let has_password = cfg
        .services
        .auth
        .password_hash
        .as_deref()
        .is_some_and(|h| !h.is_empty());
    if enabled && !has_password {
        warn!(
            listener = "tcp",
            "remote access is enabled but no password is set: TCP listener not started (run `set-password`)"
        );
    }
    let want = (enabled && has_password).then_some((want_bind, want_port));
    let mut tcp = node.tcp.lock().await;
    if tcp.running.as_ref().map(|r| &r.want) == want.as_ref() {
        return tcp.addr();
    }
    if let Some(r) = tcp.running.take() {
        if let Some(q) = &r.quic {
            q.stop();
        }
        r.stop.cancel();
        let _ = r.done.await;
        info!(listener = "tcp", addr = %r.addr, "TCP listener stopped; the IPC listener is unaffected");
    }
    let (bind, port) = want?;
    let app = tcp.app.clone()?;
    match bind_tcp(&bind, port).await {
        Ok(listener) => {
            let addr = listener.local_addr().ok()?;
            if addr.port() != port && port != 0 {
                warn!(
                    listener = "tcp",
                    requested = port,
                    bound = addr.port(),
                    "configured port busy; bound a fallback port"
                );
                // Said on stderr too, not only in the log: a bookmark of the asked-for port now
                // reaches whatever holds it (perhaps another node's identical login page).
                eprintln!(
                    "{}: warning: port {port} is in use; serving on port {} instead ({bind}:{})",
                    node.name,
                    addr.port(),
                    addr.port()
                );
            }
            info!(listener = "tcp", addr = %addr, "TCP listener started; the IPC listener is unaffected");
            let stop = node.shutdown.child_token();
            let drain = Duration::from_millis(cfg.tuning.shutdown_drain_ms);
            warn_if_plain_http(&addr);
            let done = tokio::spawn(accept_loop(
                Listener::Tcp(listener),
                app,
                stop.clone(),
                drain,
                Some(conn::ConnLimits::from_tuning(&cfg.tuning)),
            ));
            let quic = start_quic(node, &cfg.services.server, addr);
            tcp.running = Some(RunningTcp {
                addr,
                want: (bind, port),
                stop,
                done,
                quic,
            });
            Some(addr)
        }
        Err(e) => {
            error!(listener = "tcp", error = %format!("{e:#}"), "TCP listener not started");
            None
        }
    }
}

/// Starts the QUIC peer-link listener beside the TCP one (same address and port number unless
/// `services.server.quic_port` says otherwise). A failure is logged; the TCP listener and the
/// WebSocket link are unaffected.
fn start_quic(
    node: &Arc<Node>,
    server: &crate::config::Server,
    tcp: SocketAddr,
) -> Option<crate::link::quic::QuicListener> {
    if !server.quic_enabled {
        info!(
            listener = "quic",
            "QUIC peer-link listener disabled by config"
        );
        return None;
    }
    let addr = SocketAddr::new(tcp.ip(), server.quic_port.unwrap_or(tcp.port()));
    let started = crate::link::tls::load_or_create(&node.paths.config_dir)
        .and_then(|cert| crate::link::quic::listen(node.link_env(), &cert, addr));
    match started {
        Ok(q) => Some(q),
        Err(e) => {
            error!(listener = "quic", error = %format!("{e:#}"), "QUIC listener not started; hubs use the WebSocket");
            None
        }
    }
}

/// Binds `bind:port`, trying the next two ports when it is busy.
async fn bind_tcp(bind: &str, port: u16) -> anyhow::Result<TcpListener> {
    let tries = if port == 0 { 1 } else { 3 };
    let mut last = None;
    for p in (0..tries).map(|i| port.saturating_add(i)) {
        match TcpListener::bind((bind, p)).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                warn!(listener = "tcp", port = p, "port in use");
                last = Some(e);
            }
            Err(e) => return Err(e).with_context(|| format!("binding {bind}:{p}")),
        }
    }
    Err(last.expect("at least one try"))
        .with_context(|| format!("binding {bind}:{port}..={}", port.saturating_add(2)))
}

enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// Accepts until `stop`, then lets open connections finish for up to `drain` before closing them.
/// `limits` (TCP only) bounds each connection's header and idle time and the connections per
/// client address. A failed accept (out of descriptors, most often) never ends the loop: it
/// backs off, doubling from 10 ms to 1 s, logs once per run of failures, and accepts again.
async fn accept_loop(
    listener: Listener,
    app: Router,
    stop: CancellationToken,
    drain: Duration,
    limits: Option<conn::ConnLimits>,
) {
    let conns = TaskTracker::new();
    let hard = CancellationToken::new();
    let slots = Arc::new(conn::AddressSlots::default());
    let mut failures: u64 = 0;
    // A run of refusals for want of descriptors is logged once, at its start.
    let mut short_of_fds = false;
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            a = accept(&listener) => a,
        };
        if failures > 0 && accepted.is_ok() {
            info!(failed = failures, "accepting again after failed accepts");
            failures = 0;
        }
        match accepted {
            Ok(Accepted::Unix(s)) => {
                serve_conn(s, Transport::Ipc, &app, &stop, &hard, &conns, None)
            }
            Ok(Accepted::Tcp(s, peer)) => {
                // Near the descriptor limit a new TCP client is closed at once, so the IPC
                // socket and the open connections keep the last descriptors.
                match fds::admit("TCP connection") {
                    Ok(()) => short_of_fds = false,
                    Err(why) => {
                        if !short_of_fds {
                            warn!(listener = "tcp", ip = %peer.ip(), "{why}");
                        }
                        short_of_fds = true;
                        drop(s);
                        continue;
                    }
                }
                let limits =
                    limits.unwrap_or_else(|| conn::ConnLimits::from_tuning(&Default::default()));
                let slot = match slots.claim(peer.ip(), limits.per_address) {
                    Ok(slot) => slot,
                    Err(over) => {
                        if over.first {
                            warn!(listener = "tcp", ip = %peer.ip(), limit = limits.per_address, "connection cap per address reached; closing new connections from it");
                        }
                        drop(s);
                        continue;
                    }
                };
                // Terminal frames are small: without NODELAY an echo waits on a delayed ACK.
                let _ = s.set_nodelay(true);
                let activity = conn::Activity::new(std::time::Instant::now());
                let io = conn::Watched::new(s, activity.clone(), Some(slot));
                serve_conn(
                    io,
                    Transport::Tcp { peer },
                    &app,
                    &stop,
                    &hard,
                    &conns,
                    Some((activity, limits)),
                )
            }
            Err(e) => {
                // Out of descriptors and similar: back off instead of spinning, and say so
                // once per run of failures rather than per attempt.
                if failures == 0 {
                    warn!(error = %e, "accept failed; backing off and retrying");
                }
                failures += 1;
                let pause =
                    Duration::from_millis(10u64 << failures.min(7)).min(Duration::from_secs(1));
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
    drop(listener);
    conns.close();
    if tokio::time::timeout(drain, conns.wait()).await.is_err() {
        debug!("drain deadline passed; closing remaining connections");
        hard.cancel();
        conns.wait().await;
    }
}

enum Accepted {
    Unix(UnixStream),
    Tcp(tokio::net::TcpStream, SocketAddr),
}

async fn accept(l: &Listener) -> std::io::Result<Accepted> {
    match l {
        Listener::Unix(u) => u.accept().await.map(|(s, _)| Accepted::Unix(s)),
        Listener::Tcp(t) => t.accept().await.map(|(s, a)| Accepted::Tcp(s, a)),
    }
}

/// Logs once at start when the TCP listener serves passwords and cookies in plain HTTP to
/// addresses that are neither loopback nor Tailscale (whose tunnel is encrypted).
fn warn_if_plain_http(addr: &SocketAddr) {
    let ip = addr.ip();
    if !ip.is_loopback() && !crate::guard::is_tailscale_ip(ip) {
        warn!(
            listener = "tcp",
            %addr,
            "remote access serves Basic credentials and login cookies over plain HTTP on a non-loopback, non-Tailscale address: anyone on the path can read them; put it behind HTTPS (e.g. `tailscale serve`) or bind it to loopback or the Tailscale address"
        );
    }
}

fn serve_conn<I>(
    io: I,
    transport: Transport,
    app: &Router,
    stop: &CancellationToken,
    hard: &CancellationToken,
    conns: &TaskTracker,
    watch: Option<(Arc<conn::Activity>, conn::ConnLimits)>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (started, answered) = (
        watch.as_ref().map(|(a, _)| a.clone()),
        watch.as_ref().map(|(a, _)| a.clone()),
    );
    let svc = app
        .clone()
        .map_request(move |mut r: Request<Incoming>| {
            r.extensions_mut().insert(transport);
            if let Some(a) = &started {
                a.request_started();
            }
            r
        })
        .map_response(move |r| {
            if let Some(a) = &answered {
                a.request_answered();
            }
            r
        });
    let svc = TowerToHyperService::new(svc);
    let (stop, hard) = (stop.clone(), hard.clone());
    conns.spawn(async move {
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        if let Some((_, limits)) = &watch {
            // hyper's own deadline for the heads of later requests on a kept-alive HTTP/1
            // connection (a slow trickle of header bytes is traffic, so the idle deadline
            // would not catch it).
            builder
                .http1()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_read);
        }
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
        tokio::pin!(conn);
        let watchdog = async {
            let Some((activity, limits)) = &watch else {
                return std::future::pending().await;
            };
            loop {
                match activity.verdict(limits, std::time::Instant::now()) {
                    conn::Verdict::Recheck(at) => {
                        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
                    }
                    v => return v,
                }
            }
        };
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    debug!(error = %e, "connection ended with an error");
                }
            }
            v = watchdog => {
                // Dropping the connection closes the socket: nothing is in flight.
                debug!(verdict = ?v, "closing a TCP connection");
            }
            _ = stop.cancelled() => {
                conn.as_mut().graceful_shutdown();
                tokio::select! {
                    _ = conn.as_mut() => {}
                    _ = hard.cancelled() => {}
                }
            }
        }
    });
}

fn spawn_background(node: &Arc<Node>) {
    crate::mcp::spawn_background(node);
    crate::upstream::spawn(&node.upstreams);
    crate::mcp::upstreams::announce_changes(node);
    crate::mail::spawn_background(&node.mail);
    node.tailscale.spawn();
    node.scheduler.spawn();
    crate::stories::runner::spawn(&node.planning);
    node.notify.start();
    // Hand edits and `set-password` change config.json under a running node: reload it.
    let n = node.clone();
    node.tasks.spawn(async move {
        let path = n.config_file.path().to_path_buf();
        let stamp = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.modified().ok(), m.len()));
        let mut last = stamp(&path);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let now = stamp(&path);
            if now == last {
                continue;
            }
            last = now;
            let file = n.config_file.clone();
            match tokio::task::spawn_blocking(move || file.load()).await {
                Ok(Ok(c)) if c != *n.config() => {
                    info!(source = "config", "config.json changed on disk; reloaded");
                    n.set_config(c);
                    apply_remote_access(&n).await;
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => warn!(error = %format!("{e:#}"), "config.json is invalid; keeping the previous settings"),
                Err(_) => {}
            }
        }
    });
    // Interface addresses change (DHCP, VPN up/down); the Host guard reads the latest list.
    let n = node.clone();
    node.tasks.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(30));
        loop {
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            if let Ok(ips) = tokio::task::spawn_blocking(crate::guard::interface_ips).await {
                n.host_trust
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .interface_ips = ips;
            }
        }
    });
}
