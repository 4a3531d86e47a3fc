//! The peer link over QUIC: the node's UDP listener and the [`QuicIo`] frame transport both ends
//! use.
//!
//! While remote access is on, the node listens for QUIC (quinn, rustls with the ring provider,
//! ALPN [`crate::tls::ALPN`]) beside its TCP listener, on the same port number by default
//! (`services.server.quic_port`, `services.server.quic_enabled`). It presents its self-signed
//! certificate ([`crate::tls`]); the hub pins its fingerprint.
//!
//! A link is one bidirectional stream of length-delimited frames (a 4-byte big-endian length,
//! then that many bytes of UTF-8: one JSON peer frame each, as WebSocket text frames carry them).
//! The hub opens it; its first frame is `{"token": "<node token>"}` — the token never travels
//! in a URL — and the node answers `{"ok": true}` before the link's own frames start. A wrong
//! token closes the connection with [`CLOSE_WRONG_TOKEN`] and the reason `wrong token`, and is
//! logged (and counted against the address like a failed login). The stream then is a
//! [`QuicIo`] handed to [`super::endpoint::serve_on`], exactly as a WebSocket is.
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

use super::driver::FrameIo;
use crate::state::Node;
use crate::tls::NodeCert;

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

/// Why a dial did not give a link.
#[derive(Debug)]
pub enum DialError {
    /// The node refused it (token), or its certificate is not the pinned one: a fallback to
    /// another transport would bypass the check, so none is tried.
    Refused(String),
    /// No QUIC path (UDP blocked, no answer in time): another transport may be tried.
    Unreachable(String),
}

/// The error of a changed certificate, naming both fingerprints.
pub fn changed_error(pinned: &str, presented: &str) -> String {
    format!(
        "the node's QUIC certificate changed: pinned {pinned}, presented {presented}; link refused (run `tuic-hub connect` again to trust the new certificate)"
    )
}

/// The hub's UDP socket for every QUIC link it dials, one per address family: quinn
/// multiplexes connections on one endpoint, so a link costs no descriptor of its own. Made
/// on first use (inside the runtime); a failed bind is not kept, so the next dial tries again.
pub fn client_endpoint(v6: bool) -> Result<quinn::Endpoint, DialError> {
    static V4: std::sync::Mutex<Option<quinn::Endpoint>> = std::sync::Mutex::new(None);
    static V6: std::sync::Mutex<Option<quinn::Endpoint>> = std::sync::Mutex::new(None);
    let slot = if v6 { &V6 } else { &V4 };
    let mut g = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = g.as_ref() {
        return Ok(e.clone());
    }
    let bind: SocketAddr = if v6 {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let e = quinn::Endpoint::client(bind)
        .map_err(|e| DialError::Unreachable(format!("binding a UDP socket: {e}")))?;
    *g = Some(e.clone());
    Ok(e)
}

/// The hub's side: dials the node's QUIC listener at `addr` from the shared
/// [`client_endpoint`], accepts only the certificate with fingerprint `pin`, opens the link's
/// stream and authenticates with `token` (first frame), all within `limit`.
pub async fn connect(
    addr: SocketAddr,
    pin: &str,
    token: &str,
    limit: Duration,
) -> Result<(QuicIo, quinn::Endpoint), DialError> {
    use DialError::{Refused, Unreachable};
    let (tls, verifier) =
        crate::tls::client_config(pin).map_err(|e| Unreachable(format!("TLS config: {e:#}")))?;
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| Unreachable(format!("QUIC TLS config: {e}")))?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
    cfg.transport_config(Arc::new(transport_config(Some(KEEP_ALIVE))));
    let endpoint = client_endpoint(addr.is_ipv6())?;
    let attempt = async {
        let connecting = endpoint
            .connect_with(cfg, addr, "tuic-node")
            .map_err(|e| Unreachable(format!("QUIC connect: {e}")))?;
        let conn = match connecting.await {
            Ok(c) => c,
            Err(e) => {
                return Err(match verifier.presented() {
                    Some(s) if s != pin => Refused(changed_error(pin, &s)),
                    _ => Unreachable(format!("QUIC handshake: {e}")),
                });
            }
        };
        let (send, recv) = conn
            .open_bi()
            .await
            .map_err(|e| Unreachable(describe_close(&e)))?;
        let mut io = QuicIo::new(conn, send, recv);
        let hello = serde_json::json!({ "token": token }).to_string();
        if !io.write_frame(hello).await {
            return Err(Unreachable("writing the token frame failed".into()));
        }
        let answer = io.read_frame().await.map_err(Refused)?;
        let ok = serde_json::from_str::<serde_json::Value>(&answer)
            .ok()
            .and_then(|v| v.get("ok").and_then(serde_json::Value::as_bool));
        if ok == Some(true) {
            Ok(io)
        } else {
            Err(Refused(
                "the node answered the token frame with something else".into(),
            ))
        }
    };
    match tokio::time::timeout(limit, attempt).await {
        Err(_) => Err(Unreachable("QUIC dial timed out".into())),
        Ok(Err(e)) => Err(e),
        Ok(Ok(io)) => Ok((io, endpoint)),
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

/// Binds the QUIC listener on `addr` and serves peer links on it until stopped.
pub fn listen(node: &Arc<Node>, cert: &NodeCert, addr: SocketAddr) -> anyhow::Result<QuicListener> {
    let tls = crate::tls::server_config(cert)?;
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
    let interval = Duration::from_millis(node.config().tuning.quic_garbage_log_ms.max(1));
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
    let stop = node.shutdown.child_token();
    // A burst of garbage that stopped is still reported once its interval is over.
    let st = stop.clone();
    node.tasks.spawn(async move {
        let mut tick = tokio::time::interval(interval);
        loop {
            tokio::select! {
                _ = st.cancelled() => break,
                _ = tick.tick() => garbage.flush(),
            }
        }
    });
    let ep = endpoint.clone();
    let n = node.clone();
    let st = stop.clone();
    node.tasks.spawn(async move {
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
async fn serve_connection(node: Arc<Node>, incoming: quinn::Incoming) {
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
    if let Err((code, reason)) = check_token(&node, ip, &first) {
        tracing::warn!(listener = "quic", %remote, reason, "peer link refused");
        conn.close(quinn::VarInt::from_u32(code), reason.as_bytes());
        return;
    }
    if !io.write_frame(r#"{"ok":true}"#.to_owned()).await {
        return;
    }
    tracing::info!(listener = "quic", %remote, "peer link over QUIC authenticated");
    let streams = serve_streams(node.clone(), conn.clone(), remote);
    tokio::select! {
        _ = super::endpoint::serve_on(node, io) => {}
        _ = streams => {}
    }
    // The session streams live on the link's connection: they end with it.
    conn.close(quinn::VarInt::from_u32(CLOSE_DONE), b"link ended");
}

/// Checks the token frame; `Err` is the close code and reason.
fn check_token(node: &Node, ip: IpAddr, first: &str) -> Result<(), (u32, &'static str)> {
    let now = Instant::now();
    let tuning = node.config().tuning.clone();
    // A token has no user name: the peer link's failures are keyed by address alone.
    if let crate::auth::Admission::Throttled { .. } = node.auth.admit(
        ip,
        "",
        now,
        tuning.login_failures_per_minute,
        tuning.login_failures_global_per_minute,
    ) {
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
        Some(t) if crate::auth::secret_eq(&t, &node.node_token()) => Ok(()),
        Some(_) => {
            node.auth.record_failure(ip, "", now);
            Err((CLOSE_WRONG_TOKEN, "wrong token"))
        }
    }
}

/// Serves every further stream the peer opens as a session stream
/// ([`super::quic_stream::serve`]); one that is not a request is refused with
/// [`STOP_BAD_STREAM`], the first logged and the count when the connection ends. Never returns
/// while the connection lives.
async fn serve_streams(node: Arc<Node>, conn: quinn::Connection, remote: SocketAddr) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let refused = Arc::new(AtomicU64::new(0));
    while let Ok((send, recv)) = conn.accept_bi().await {
        let (n, refused) = (node.clone(), refused.clone());
        node.tasks.spawn(async move {
            if let Err(mut bad) = super::quic_stream::serve(n, send, recv).await {
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
