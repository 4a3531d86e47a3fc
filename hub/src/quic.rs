//! The hub's dialer of peer links: QUIC when the node offers it, the WebSocket otherwise.
//!
//! Each dial reads the node's `GET /health`. When it advertises `quic: {port, fingerprint}`
//! (and the connection's transport is not forced to `websocket`), the hub dials QUIC on that
//! UDP port, checks that the certificate the node presents has the fingerprint pinned for this
//! connection, opens one bidirectional stream, sends `{"token": …}` as its first frame and waits
//! for `{"ok": true}` (see `tuic_node::peer::quic`). The first fingerprint seen is pinned (trust
//! on first use: `tuic-hub connect` records it when the node answers then, else the first dial
//! does) and saved in the connection's `quic_fingerprint` in `config.json`; a different one later
//! refuses the link — no WebSocket fallback either — with an error naming both fingerprints,
//! until the operator runs `tuic-hub connect` again.
//!
//! When the QUIC dial fails for any other reason (UDP blocked, no answer in
//! [`QUIC_DIAL_TIMEOUT`]) the WebSocket is dialed instead, unless the transport is forced to
//! `quic`. `GET /hub/connections` shows the link's `transport`.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tuic_node::peer::driver::FrameIo;
use tuic_node::peer::quic::{DialError as QuicFail, QuicIo, changed_error, connect as dial_quic};

use crate::federation::Conn;
use crate::peerlink::{PeerHub, TungIo};

/// Longest a QUIC dial (handshake, token, answer) may take before the WebSocket is tried.
pub const QUIC_DIAL_TIMEOUT: Duration = Duration::from_secs(3);
/// After QUIC failed where the WebSocket worked, how long `auto` dials the WebSocket directly.
pub const QUIC_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Which carrier a connection's link uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportPref {
    /// QUIC when the node advertises it and it answers, else the WebSocket.
    #[default]
    Auto,
    /// QUIC only (a failed dial is an error, never a fallback).
    Quic,
    /// The WebSocket only.
    Websocket,
}

impl std::str::FromStr for TransportPref {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "quic" => Ok(Self::Quic),
            "websocket" => Ok(Self::Websocket),
            other => Err(format!(
                "unknown transport {other:?} (auto, quic or websocket)"
            )),
        }
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
        .map_err(|e| {
            format!(
                "reading the node's /health: {}",
                crate::federation::describe(&e)
            )
        })?
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

/// Records a fingerprint as this connection's pin (trust on first use) in memory and in
/// `config.json`.
fn pin_first(hub: &PeerHub, conn: &Conn, fingerprint: &str) {
    *conn.pin.lock().unwrap_or_else(|p| p.into_inner()) = Some(fingerprint.to_owned());
    let saved = hub.node.config_file.update(|doc| {
        crate::connections::set_fingerprint(doc, &conn.id, fingerprint);
        Ok(())
    });
    match saved {
        Ok(cfg) => hub.node.set_config(cfg),
        Err(e) => {
            tracing::error!(conn = %conn.id, error = %e, "saving the pinned QUIC fingerprint")
        }
    }
    tracing::info!(conn = %conn.id, fingerprint, "pinned the node's QUIC certificate (trust on first use)");
}

/// Opens one link to `conn`'s node over the transport its preference and the node's offer
/// allow. Errors name what failed, never the URL or the token.
///
/// `skip_quic_until` is the connection's memory of a path where QUIC failed and the WebSocket
/// then worked (UDP blocked): in `auto`, QUIC is not tried again before that instant, so each
/// redial does not pay [`QUIC_DIAL_TIMEOUT`] first. A dial where both fail (a partition) sets
/// nothing.
pub async fn dial(
    hub: &PeerHub,
    conn: &Conn,
    skip_quic_until: &std::sync::Mutex<Option<Instant>>,
) -> Result<LinkIo, String> {
    // Near the descriptor limit no new link is opened (`server::fds`).
    tuic_node::ext::fds::admit("peer link")?;
    let pref = conn.transport;
    let skip = pref == TransportPref::Auto
        && skip_quic_until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| Instant::now() < t);
    let io = if pref == TransportPref::Websocket || skip {
        LinkIo::Ws(crate::peerlink::dial(conn).await?)
    } else {
        match try_quic(hub, conn).await {
            Ok(io) => io,
            Err(QuicFail::Refused(e)) => {
                tracing::warn!(conn = %conn.id, error = %e, "QUIC peer link refused");
                return Err(e);
            }
            Err(QuicFail::Unreachable(e)) if pref == TransportPref::Quic => return Err(e),
            Err(QuicFail::Unreachable(e)) => {
                tracing::debug!(conn = %conn.id, error = %e, "QUIC unavailable; dialing the WebSocket");
                let ws = crate::peerlink::dial(conn).await?;
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

async fn try_quic(hub: &PeerHub, conn: &Conn) -> Result<LinkIo, QuicFail> {
    let offer = advertised(&conn.url)
        .await
        .map_err(QuicFail::Unreachable)?
        .ok_or_else(|| QuicFail::Unreachable("the node does not offer QUIC".into()))?;
    let pinned = conn.pin.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let pin = match &pinned {
        Some(p) if *p != offer.fingerprint => {
            return Err(QuicFail::Refused(changed_error(p, &offer.fingerprint)));
        }
        Some(p) => p.clone(),
        None => offer.fingerprint.clone(),
    };
    let url = reqwest::Url::parse(&conn.url)
        .map_err(|_| QuicFail::Unreachable("the connection url is invalid".into()))?;
    let host = url
        .host_str()
        .ok_or_else(|| QuicFail::Unreachable("the connection url has no host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let addr = tokio::net::lookup_host((host.as_str(), offer.port))
        .await
        .map_err(|e| QuicFail::Unreachable(format!("resolving the node: {e}")))?
        .next()
        .ok_or_else(|| QuicFail::Unreachable("the node's host has no address".into()))?;
    let (io, endpoint) = dial_quic(addr, &pin, &conn.token, QUIC_DIAL_TIMEOUT).await?;
    if pinned.is_none() {
        pin_first(hub, conn, &pin);
    }
    Ok(LinkIo::Quic(io, endpoint))
}

/// One connection's link task: [`crate::peerlink::drive_over`] with [`dial`].
pub async fn drive(hub: Arc<PeerHub>, conn: Arc<Conn>) {
    let h = hub.clone();
    let skip = Arc::new(std::sync::Mutex::new(None));
    crate::peerlink::drive_over(hub, conn, move |c: Arc<Conn>| {
        let (h, skip) = (h.clone(), skip.clone());
        async move { dial(&h, &c, &skip).await }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_names_parse_and_bad_ones_are_clear() {
        assert_eq!("quic".parse::<TransportPref>(), Ok(TransportPref::Quic));
        assert_eq!(
            "websocket".parse::<TransportPref>(),
            Ok(TransportPref::Websocket)
        );
        assert_eq!("auto".parse::<TransportPref>(), Ok(TransportPref::Auto));
        let e = "udp".parse::<TransportPref>().unwrap_err();
        assert!(e.contains("auto, quic or websocket"), "{e}");
    }

    #[test]
    fn the_changed_error_names_both_fingerprints() {
        let e = changed_error("sha256:aa", "sha256:bb");
        assert!(e.contains("pinned sha256:aa") && e.contains("presented sha256:bb"));
    }
}
