//! The hub's dials of peer links (its side of the carrier room; the node's listening side is
//! `tuic_node::link`): QUIC when the node offers it, the WebSocket otherwise.
//!
//! Each dial reads the node's `GET /health`. When it advertises `quic: {port, fingerprint}`
//! (and the connection's transport is not forced to `websocket`), the hub dials QUIC on that
//! UDP port, checks that the certificate the node presents has the fingerprint pinned for this
//! connection, opens one bidirectional stream, sends `{"token": …}` as its first frame and waits
//! for `{"ok": true}` (see `tuic_node::link::quic`). The first fingerprint seen is pinned (trust
//! on first use: `tuic-hub connect` records it when the node answers then, else the first dial
//! does) and saved in the connection's `quic_fingerprint` in `config.json`; a different one later
//! refuses the link — no WebSocket fallback either — with an error naming both fingerprints,
//! until the operator runs `tuic-hub connect` again.
//!
//! When the QUIC dial fails for any other reason (UDP blocked, no answer in
//! [`QUIC_DIAL_TIMEOUT`]) the WebSocket is dialed instead, unless the transport is forced to
//! `quic`. `GET /hub/connections` shows the link's `transport`.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, header};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tuic_node::link::FrameIo;
use tuic_node::link::driver;
use tuic_node::link::quic::{KEEP_ALIVE, QuicIo, describe_close, transport_config};

use crate::connections::{Conn, TransportPref, describe};

/// Longest wait for a node to accept the WebSocket upgrade.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest a QUIC dial (handshake, token, answer) may take before the WebSocket is tried.
pub const QUIC_DIAL_TIMEOUT: Duration = Duration::from_secs(3);
/// After QUIC failed where the WebSocket worked, how long `auto` dials the WebSocket directly.
pub const QUIC_RETRY_AFTER: Duration = Duration::from_secs(300);

/// tokio-tungstenite's WebSocket messages, for the peer driver's one adapter
/// ([`driver::WsIo`]).
pub struct Tung;

impl driver::MessageKind<Message> for Tung {
    fn text(text: String) -> Message {
        Message::Text(text.into())
    }

    fn close() -> Message {
        Message::Close(None)
    }

    fn read(message: Message) -> driver::Incoming {
        match message {
            Message::Text(t) => driver::Incoming::Text(t.as_str().to_owned()),
            Message::Close(_) => driver::Incoming::Close,
            _ => driver::Incoming::Other,
        }
    }
}

/// The hub's WebSocket link transport.
pub type TungIo = driver::WsIo<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    Tung,
>;

/// Opens the WebSocket to `conn`'s `/mcp/peer`. Errors name what failed, never the URL or the token.
pub(crate) async fn dial_ws(conn: &Conn) -> Result<TungIo, String> {
    let url = format!("{}/mcp/peer", conn.url).replacen("http", "ws", 1);
    let mut req = url
        .into_client_request()
        .map_err(|_| "the connection url is not a valid WebSocket url".to_owned())?;
    let cookie = HeaderValue::from_str(&conn.cookie())
        .map_err(|_| "the connection token is not a valid header value".to_owned())?;
    req.headers_mut().insert(header::COOKIE, cookie);
    use tokio_tungstenite::tungstenite::Error as E;
    match tokio::time::timeout(DIAL_TIMEOUT, tokio_tungstenite::connect_async(req)).await {
        Err(_) => Err("peer link handshake timed out".into()),
        Ok(Err(E::Http(r))) => Err(format!("node answered {} to the peer link", r.status())),
        Ok(Err(E::Io(_))) => Err("peer link: connection refused or unreachable".into()),
        Ok(Err(_)) => Err("peer link handshake failed".into()),
        Ok(Ok((ws, _))) => {
            if let tokio_tungstenite::MaybeTlsStream::Plain(s) = ws.get_ref() {
                let _ = s.set_nodelay(true);
            }
            Ok(TungIo::new(ws))
        }
    }
}

/// Why a QUIC dial did not give a link.
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
pub async fn connect_quic(
    addr: SocketAddr,
    pin: &str,
    token: &str,
    limit: Duration,
) -> Result<(QuicIo, quinn::Endpoint), DialError> {
    use DialError::{Refused, Unreachable};
    let (tls, verifier) = tuic_node::link::tls::client_config(pin)
        .map_err(|e| Unreachable(format!("TLS config: {e:#}")))?;
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

/// A dialed link: either carrier.
pub enum LinkIo {
    /// QUIC (the endpoint is kept for the connection's life).
    Quic(QuicIo, quinn::Endpoint),
    /// The WebSocket.
    Ws(TungIo),
}

impl LinkIo {
    /// `"quic"` or `"websocket"`, as `GET /hub/connections` shows it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Quic(..) => "quic",
            Self::Ws(_) => "websocket",
        }
    }
}

impl FrameIo for LinkIo {
    async fn recv(&mut self) -> Option<String> {
        match self {
            Self::Quic(q, _) => q.recv().await,
            Self::Ws(w) => w.recv().await,
        }
    }

    async fn send(&mut self, text: String) -> bool {
        match self {
            Self::Quic(q, _) => q.send(text).await,
            Self::Ws(w) => w.send(text).await,
        }
    }

    async fn send_all(&mut self, texts: Vec<String>) -> bool {
        match self {
            Self::Quic(q, _) => q.send_all(texts).await,
            Self::Ws(w) => w.send_all(texts).await,
        }
    }

    async fn close(&mut self) {
        match self {
            Self::Quic(q, _) => q.close().await,
            Self::Ws(w) => w.close().await,
        }
    }
}

/// What `/health` says about QUIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    /// The UDP port.
    pub port: u16,
    /// The certificate's fingerprint.
    pub fingerprint: String,
}

fn http() -> &'static reqwest::Client {
    static C: OnceLock<reqwest::Client> = OnceLock::new();
    C.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("HTTP client")
    })
}

/// Reads the node's QUIC offer from `GET {url}/health`; `Ok(None)` when it makes none.
pub async fn advertised(url: &str) -> Result<Option<Advertised>, String> {
    let v: Value = http()
        .get(format!("{url}/health"))
        .send()
        .await
        .map_err(|e| format!("reading the node's /health: {}", describe(&e)))?
        .json()
        .await
        .map_err(|_| "the node's /health is not JSON".to_owned())?;
    let Some(q) = v.get("quic") else {
        return Ok(None);
    };
    let port = q
        .get("port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok());
    let fp = q.get("fingerprint").and_then(Value::as_str);
    match (port, fp) {
        (Some(port), Some(fp)) if fp.starts_with("sha256:") => Ok(Some(Advertised {
            port,
            fingerprint: fp.to_owned(),
        })),
        _ => Err("the node's /health has a malformed quic field".into()),
    }
}

/// Opens one link to `conn`'s node over the transport its preference and the node's offer
/// allow. Errors name what failed, never the URL or the token.
///
/// `skip_quic_until` is the connection's memory of a path where QUIC failed and the WebSocket
/// then worked (UDP blocked): in `auto`, QUIC is not tried again before that instant, so each
/// redial does not pay [`QUIC_DIAL_TIMEOUT`] first. A dial where both fail (a partition) sets
/// nothing.
///
/// `pin` records a fingerprint seen first (trust on first use) where the process keeps its
/// configuration.
pub async fn dial(
    pin: &(dyn Fn(&Conn, &str) + Send + Sync),
    conn: &Conn,
    skip_quic_until: &std::sync::Mutex<Option<Instant>>,
) -> Result<LinkIo, String> {
    // Near the descriptor limit no new link is opened (`server::fds`).
    // The claim holds the link's descriptor (a WebSocket's; a QUIC link rides the shared
    // UDP socket) until the dial ends.
    let _claim = tuic_node::ext::fds::claim("peer link", 1)?;
    let pref = conn.transport;
    let skip = pref == TransportPref::Auto
        && skip_quic_until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| Instant::now() < t);
    let io = if pref == TransportPref::Websocket || skip {
        LinkIo::Ws(dial_ws(conn).await?)
    } else {
        match try_quic(pin, conn).await {
            Ok(io) => io,
            Err(DialError::Refused(e)) => {
                tracing::warn!(conn = %conn.id, error = %e, "QUIC peer link refused");
                return Err(e);
            }
            Err(DialError::Unreachable(e)) if pref == TransportPref::Quic => return Err(e),
            Err(DialError::Unreachable(e)) => {
                tracing::debug!(conn = %conn.id, error = %e, "QUIC unavailable; dialing the WebSocket");
                let ws = dial_ws(conn).await?;
                tracing::info!(conn = %conn.id, error = %e, "QUIC failed where the WebSocket works: using the WebSocket");
                *skip_quic_until.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(Instant::now() + QUIC_RETRY_AFTER);
                LinkIo::Ws(ws)
            }
        }
    };
    let name = io.name();
    conn.set(|s| s.transport = Some(name));
    *conn.quic.lock().unwrap_or_else(|p| p.into_inner()) = match &io {
        LinkIo::Quic(q, _) => Some(q.connection().clone()),
        LinkIo::Ws(_) => None,
    };
    Ok(io)
}

async fn try_quic(
    pin_first: &(dyn Fn(&Conn, &str) + Send + Sync),
    conn: &Conn,
) -> Result<LinkIo, DialError> {
    let offer = advertised(&conn.url)
        .await
        .map_err(DialError::Unreachable)?
        .ok_or_else(|| DialError::Unreachable("the node does not offer QUIC".into()))?;
    let pinned = conn.pin.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let pin = match &pinned {
        Some(p) if *p != offer.fingerprint => {
            return Err(DialError::Refused(changed_error(p, &offer.fingerprint)));
        }
        Some(p) => p.clone(),
        None => offer.fingerprint.clone(),
    };
    let url = reqwest::Url::parse(&conn.url)
        .map_err(|_| DialError::Unreachable("the connection url is invalid".into()))?;
    let host = url
        .host_str()
        .ok_or_else(|| DialError::Unreachable("the connection url has no host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let addr = tokio::net::lookup_host((host.as_str(), offer.port))
        .await
        .map_err(|e| DialError::Unreachable(format!("resolving the node: {e}")))?
        .next()
        .ok_or_else(|| DialError::Unreachable("the node's host has no address".into()))?;
    let (io, endpoint) = connect_quic(addr, &pin, &conn.token, QUIC_DIAL_TIMEOUT).await?;
    if pinned.is_none() {
        *conn.pin.lock().unwrap_or_else(|p| p.into_inner()) = Some(pin.clone());
        pin_first(conn, &pin);
    }
    Ok(LinkIo::Quic(io, endpoint))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_changed_error_names_both_fingerprints() {
        let e = changed_error("sha256:aa", "sha256:bb");
        assert!(e.contains("pinned sha256:aa") && e.contains("presented sha256:bb"));
    }
}
