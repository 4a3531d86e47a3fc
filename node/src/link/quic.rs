//! The peer link over QUIC: the node's UDP listener and the [`QuicIo`] frame transport both ends
//! use.
//!
//! While remote access is on, the node listens for QUIC (quinn, rustls with the ring provider,
//! ALPN [`super::tls::ALPN`]) beside its TCP listener, on the same port number by default
//! (`services.server.quic_port`, `services.server.quic_enabled`). It presents its self-signed
//! certificate ([`super::tls`]); the hub pins its fingerprint.
//!
//! A link is one bidirectional stream of length-delimited frames (a 4-byte big-endian length,
//! then that many bytes of UTF-8: one JSON peer frame each, as WebSocket text frames carry them).
//! The hub opens it; its first frame is `{"token": "<node token>"}` — the token never travels
//! in a URL — and the node answers `{"ok": true}` before the link's own frames start. A wrong
//! token closes the connection with [`CLOSE_WRONG_TOKEN`] and the reason `wrong token`, and is
//! logged (and counted against the address like a failed login). The stream then is a
//! [`QuicIo`] handed to the host's [`LinkHost::serve_link`] (the node's end of the link,
//! `crate::mail::endpoint`), exactly as a WebSocket is.
//!
//! Every further bidirectional stream the hub opens on an authenticated connection carries one
//! relayed session stream ([`super::quic_stream`]); a stream whose first frame is not a
//! session-stream request is refused with [`STOP_BAD_STREAM`] and logged (the first one per
//! connection, then the count when it ends).
//!
//! Limits: [`MAX_BIDI_STREAMS`] concurrent bidirectional streams per connection (a peer that
//! opens more waits for credit), no unidirectional streams, an idle timeout of [`IDLE_TIMEOUT`], and a
//! deadline of [`AUTH_TIMEOUT`] for the first frame. Packets that are not QUIC are dropped by
//! quinn without disturbing anything else, and counted and logged by the socket's watcher
//! ([`super::quic_udp`]). Stateless-reset tokens come from a key derived from
//! the node's private key, so after a restart (a `kill -9` sends nothing) the hub's next packet
//! on the old connection is answered with a valid reset and its link ends at once.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;

use futures::future::BoxFuture;
use tokio_util::task::TaskTracker;

use super::driver::FrameIo;
use super::quic_stream::StreamHook;
use super::tls::NodeCert;

/// Most concurrent bidirectional streams a peer may have open on one connection: the link's
/// own and relayed session streams (a hub relaying more waits for credit, then falls back to
/// a WebSocket for that stream).
pub const MAX_BIDI_STREAMS: u32 = 64;
/// A connection with no packets for this long is closed (the link pings every 5 s).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for the hub's first stream and its token frame.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// QUIC keep-alive from the dialing side (well inside [`IDLE_TIMEOUT`]).
pub const KEEP_ALIVE: Duration = Duration::from_secs(5);
/// Largest frame (16 MiB; mail bodies are far smaller).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Application close code: the token frame did not carry the node's token.
pub const CLOSE_WRONG_TOKEN: u32 = 0x10;
/// Application close code: the first frame was not a token frame, or did not come in time.
pub const CLOSE_BAD_HELLO: u32 = 0x11;
/// Application close code: the address failed too often; try later.
pub const CLOSE_THROTTLED: u32 = 0x12;
/// Application close code: the link ended normally.
pub const CLOSE_DONE: u32 = 0;
/// Stream stop code for a stream after the link's own that is not a session-stream request.
pub const STOP_BAD_STREAM: u32 = 0x20;

/// A length-delimited codec with the link's frame limit.
pub fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME)
        .new_codec()
}

/// The transport limits both ends use.
pub fn transport_config(keep_alive: Option<Duration>) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(MAX_BIDI_STREAMS))
        .max_concurrent_uni_streams(quinn::VarInt::from_u32(0))
        .max_idle_timeout(Some(
            quinn::IdleTimeout::try_from(IDLE_TIMEOUT).expect("idle timeout in range"),
        ))
        .keep_alive_interval(keep_alive);
    t
}

/// One peer link's stream as a [`FrameIo`].
pub struct QuicIo {
    conn: quinn::Connection,
    /// The peer's address as last seen: a change is the peer's connection migrating (a hub
    /// whose address changed), logged once per move.
    remote: SocketAddr,
    recv: FramedRead<quinn::RecvStream, LengthDelimitedCodec>,
    send: FramedWrite<quinn::SendStream, LengthDelimitedCodec>,
}

impl QuicIo {
    /// Wraps a connection's link stream.
    pub fn new(conn: quinn::Connection, send: quinn::SendStream, recv: quinn::RecvStream) -> Self {
        Self {
            remote: conn.remote_address(),
            conn,
            recv: FramedRead::new(recv, codec()),
            send: FramedWrite::new(send, codec()),
        }
    }

    /// The connection under the stream.
    pub fn connection(&self) -> &quinn::Connection {
        &self.conn
    }

    /// Reads one frame as text; `Err` names what went wrong.
    pub async fn read_frame(&mut self) -> Result<String, String> {
        match self.recv.next().await {
            None => Err(match self.conn.close_reason() {
                Some(e) => describe_close(&e),
                None => "the stream ended".into(),
            }),
            Some(Err(e)) => Err(match self.conn.close_reason() {
                Some(e) => describe_close(&e),
                None => format!("reading the link stream: {e}"),
            }),
            Some(Ok(b)) => {
                String::from_utf8(b.to_vec()).map_err(|_| "a frame is not UTF-8".to_owned())
            }
        }
    }

    /// Writes one frame.
    pub async fn write_frame(&mut self, text: String) -> bool {
        self.send.send(Bytes::from(text)).await.is_ok()
    }
}

/// Names why a connection closed, for logs and the hub's `peer_last_error`.
pub fn describe_close(e: &quinn::ConnectionError) -> String {
    match e {
        quinn::ConnectionError::ApplicationClosed(c) => format!(
            "the node closed the link: {} (code {})",
            String::from_utf8_lossy(&c.reason),
            c.error_code
        ),
        quinn::ConnectionError::TimedOut => "the QUIC connection timed out".into(),
        other => format!("QUIC connection lost: {other}"),
    }
}

impl FrameIo for QuicIo {
    async fn recv(&mut self) -> Option<String> {
        let frame = self.recv.next().await;
        let now = self.conn.remote_address();
        if now != self.remote {
            tracing::info!(from = %self.remote, to = %now, "quic: the peer link's path moved (connection migration)");
            self.remote = now;
        }
        match frame? {
            Ok(b) => String::from_utf8(b.to_vec()).ok(),
            Err(_) => None,
        }
    }

    async fn send(&mut self, text: String) -> bool {
        self.write_frame(text).await
    }

    async fn send_all(&mut self, texts: Vec<String>) -> bool {
        super::driver::feed_all(&mut self.send, texts.into_iter().map(Bytes::from)).await
    }

    async fn close(&mut self) {
        let _ = self.send.get_mut().finish();
        self.conn
            .close(quinn::VarInt::from_u32(CLOSE_DONE), b"link closed");
    }
}

/// A running QUIC listener.
#[derive(Debug)]
pub struct QuicListener {
    /// The bound UDP address.
    pub addr: SocketAddr,
    /// The certificate's fingerprint.
    pub fingerprint: String,
    endpoint: quinn::Endpoint,
    stop: CancellationToken,
}

impl QuicListener {
    /// Stops accepting and closes every connection.
    pub fn stop(&self) {
        self.stop.cancel();
        self.endpoint
            .close(quinn::VarInt::from_u32(CLOSE_DONE), b"listener stopped");
    }
}

impl Drop for QuicListener {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the listener needs of the process it runs in, supplied by the composition root: the
/// token check's state and the service that runs on an authenticated link.
pub trait LinkHost: Send + Sync + 'static {
    /// Whether `ip` may try a token now (failed attempts are throttled like logins).
    fn admit(&self, ip: IpAddr, now: Instant) -> bool;
    /// Whether `token` is the node token (compared in constant time).
    fn token_matches(&self, token: &str) -> bool;
    /// Counts a wrong token against `ip`.
    fn record_failure(&self, ip: IpAddr, now: Instant);
    /// Runs the node's end of an authenticated link until it ends.
    fn serve_link(&self, io: QuicIo) -> BoxFuture<'static, ()>;
}

/// The listener's handles: where its tasks run, when it stops, how often garbage datagrams
/// are logged, the host and the session-stream hook.
#[derive(Clone)]
pub struct LinkEnv {
    /// Tasks of the process (drained at shutdown).
    pub tasks: TaskTracker,
    /// The process's shutdown.
    pub shutdown: CancellationToken,
    /// How often a burst of undecodable datagrams is logged (`tuning.quic_garbage_log_ms`).
    pub garbage_log: Duration,
    /// Token checks and the link's service.
    pub host: Arc<dyn LinkHost>,
    /// The session-stream service behind every further stream.
    pub streams: Arc<dyn StreamHook>,
}

impl std::fmt::Debug for LinkEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkEnv")
            .field("garbage_log", &self.garbage_log)
            .finish_non_exhaustive()
    }
}

/// Binds the QUIC listener on `addr` and serves peer links on it until stopped.
pub fn listen(env: LinkEnv, cert: &NodeCert, addr: SocketAddr) -> anyhow::Result<QuicListener> {
    let tls = super::tls::server_config(cert)?;
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(tls).context("the QUIC TLS config")?;
    let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    cfg.transport_config(Arc::new(transport_config(None)));
    // Stateless-reset tokens from a key that survives restarts (see `NodeCert::reset_secret`).
    let reset_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &cert.reset_secret());
    let mut endpoint_cfg = quinn::EndpointConfig::new(Arc::new(reset_key));
    // The connection ids are signed with a key that survives restarts too: a restarted node
    // drops packets whose id it could not have issued, and answers the others with the reset.
    let secret = cert.reset_secret();
    let cid_key = u64::from_le_bytes(secret[24..32].try_into().expect("8 bytes"));
    endpoint_cfg.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    // Peers never clear the fixed bit, so a datagram without it is garbage (`quic_udp`).
    endpoint_cfg.grease_quic_bit(false);
    let socket = std::net::UdpSocket::bind(addr)
        .with_context(|| format!("binding the QUIC listener on udp {addr}"))?;
    let runtime = quinn::default_runtime().context("no async runtime for QUIC")?;
    let interval = env.garbage_log.max(Duration::from_millis(1));
    let garbage = Arc::new(super::quic_udp::Garbage::new(cid_key, interval));
    let watched = super::quic_udp::WatchedSocket::new(
        runtime
            .wrap_udp_socket(socket)
            .with_context(|| format!("starting the QUIC listener on udp {addr}"))?,
        garbage.clone(),
    );
    let endpoint = quinn::Endpoint::new_with_abstract_socket(
        endpoint_cfg,
        Some(cfg),
        Arc::new(watched),
        runtime,
    )
    .with_context(|| format!("starting the QUIC listener on udp {addr}"))?;
    let bound = endpoint
        .local_addr()
        .context("the QUIC listener's address")?;
    let stop = env.shutdown.child_token();
    // A burst of garbage that stopped is still reported once its interval is over.
    let st = stop.clone();
    env.tasks.spawn(async move {
        let mut tick = tokio::time::interval(interval);
        loop {
            tokio::select! {
                _ = st.cancelled() => break,
                _ = tick.tick() => garbage.flush(),
            }
        }
    });
    let ep = endpoint.clone();
    let n = Arc::new(env);
    let st = stop.clone();
    n.clone().tasks.spawn(async move {
        loop {
            let incoming = tokio::select! {
                _ = st.cancelled() => break,
                i = ep.accept() => match i {
                    Some(i) => i,
                    None => break,
                },
            };
            let n = n.clone();
            let st = st.clone();
            n.clone().tasks.spawn(async move {
                tokio::select! {
                    _ = st.cancelled() => {}
                    _ = serve_connection(n, incoming) => {}
                }
            });
        }
    });
    tracing::info!(listener = "quic", addr = %bound, fingerprint = %cert.fingerprint, "QUIC peer-link listener started");
    Ok(QuicListener {
        addr: bound,
        fingerprint: cert.fingerprint.clone(),
        endpoint,
        stop,
    })
}

/// One incoming connection: handshake, token, then the link and its session streams.
async fn serve_connection(env: Arc<LinkEnv>, incoming: quinn::Incoming) {
    let remote = incoming.remote_address();
    let ip = remote.ip();
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(listener = "quic", %remote, error = %e, "QUIC handshake failed");
            return;
        }
    };
    let hello = tokio::time::timeout(AUTH_TIMEOUT, async {
        let (send, recv) = conn.accept_bi().await.map_err(|e| describe_close(&e))?;
        let mut io = QuicIo::new(conn.clone(), send, recv);
        let first = io.read_frame().await?;
        Ok::<_, String>((io, first))
    })
    .await;
    let (mut io, first) = match hello {
        Err(_) => {
            tracing::warn!(listener = "quic", %remote, "peer link refused: no token frame in time");
            conn.close(
                quinn::VarInt::from_u32(CLOSE_BAD_HELLO),
                b"no token frame in time",
            );
            return;
        }
        Ok(Err(e)) => {
            tracing::info!(listener = "quic", %remote, error = %e, "QUIC connection ended before its token frame");
            return;
        }
        Ok(Ok(x)) => x,
    };
    if let Err((code, reason)) = check_token(&*env.host, ip, &first) {
        tracing::warn!(listener = "quic", %remote, reason, "peer link refused");
        conn.close(quinn::VarInt::from_u32(code), reason.as_bytes());
        return;
    }
    if !io.write_frame(r#"{"ok":true}"#.to_owned()).await {
        return;
    }
    tracing::info!(listener = "quic", %remote, "peer link over QUIC authenticated");
    let streams = serve_streams(env.clone(), conn.clone(), remote);
    tokio::select! {
        _ = env.host.serve_link(io) => {}
        _ = streams => {}
    }
    // The session streams live on the link's connection: they end with it.
    conn.close(quinn::VarInt::from_u32(CLOSE_DONE), b"link ended");
}

/// Checks the token frame; `Err` is the close code and reason.
fn check_token(host: &dyn LinkHost, ip: IpAddr, first: &str) -> Result<(), (u32, &'static str)> {
    let now = Instant::now();
    if !host.admit(ip, now) {
        return Err((CLOSE_THROTTLED, "too many failed attempts; try later"));
    }
    let token = serde_json::from_str::<serde_json::Value>(first)
        .ok()
        .and_then(|v| v.get("token").and_then(|t| t.as_str()).map(str::to_owned));
    match token {
        None => Err((
            CLOSE_BAD_HELLO,
            "the first frame must be {\"token\": \"<node token>\"}",
        )),
        Some(t) if host.token_matches(&t) => Ok(()),
        Some(_) => {
            host.record_failure(ip, now);
            Err((CLOSE_WRONG_TOKEN, "wrong token"))
        }
    }
}

/// Serves every further stream the peer opens as a session stream
/// ([`super::quic_stream::serve`]); one that is not a request is refused with
/// [`STOP_BAD_STREAM`], the first logged and the count when the connection ends. Never returns
/// while the connection lives.
async fn serve_streams(env: Arc<LinkEnv>, conn: quinn::Connection, remote: SocketAddr) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let refused = Arc::new(AtomicU64::new(0));
    while let Ok((send, recv)) = conn.accept_bi().await {
        let (hook, refused) = (env.streams.clone(), refused.clone());
        env.tasks.spawn(async move {
            if let Err(mut bad) = super::quic_stream::serve(&*hook, send, recv).await {
                if refused.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(listener = "quic", %remote, reason = %bad.why, "refused a stream on a peer link: not a session-stream request");
                }
                let _ = bad.recv.stop(quinn::VarInt::from_u32(STOP_BAD_STREAM));
                let _ = bad.send.reset(quinn::VarInt::from_u32(STOP_BAD_STREAM));
            }
        });
    }
    let refused = refused.load(Ordering::Relaxed);
    if refused > 1 {
        tracing::warn!(listener = "quic", %remote, refused, "streams refused on a peer link");
    }
    std::future::pending::<()>().await;
}
