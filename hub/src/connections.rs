//! Configured connections: `hub.connections` in `config.json` (id and base URL) and each
//! connection's token in the node's secret store (never in the config file) — and each
//! running connection ([`Conn`]: its mirrored state, pin, carrier preference and the signals
//! its two drivers share). A leaf: it imports no other module of the hub.

use std::sync::RwLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tuic_node::ext::host::{ConfigFile, SaveError, Vault};

/// One configured node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionConfig {
    /// The connection id: the first part of every address on this node.
    pub id: String,
    /// The node's base URL, `http://host:port`.
    pub url: String,
    /// The peer link's carrier (`auto`, `quic`, `websocket`); unset: `hub.transport`, else auto.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<TransportPref>,
    /// The pinned fingerprint of the node's QUIC certificate (`sha256:<hex>`); unset until the
    /// node first shows one (trust on first use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_fingerprint: Option<String>,
}

/// The hub-wide transport default, `hub.transport` in `config.json` (auto when unset or
/// unknown).
pub fn default_transport(extra: &serde_json::Map<String, Value>) -> TransportPref {
    extra
        .get("hub")
        .and_then(|h| h.get("transport"))
        .and_then(Value::as_str)
        .and_then(|s| {
            s.parse()
                .map_err(|e| tracing::warn!(error = %e, "hub.transport ignored"))
                .ok()
        })
        .unwrap_or_default()
}

/// Records `fingerprint` as connection `id`'s pin in a config document.
pub fn set_fingerprint(doc: &mut Value, id: &str, fingerprint: &str) {
    if let Ok(list) = connections_mut(doc) {
        for c in list.iter_mut() {
            if c.get("id").and_then(Value::as_str) == Some(id) {
                c["quic_fingerprint"] = json!(fingerprint);
            }
        }
    }
}

/// Vault entry holding a connection's token.
pub fn token_key(id: &str) -> String {
    format!("hub_conn_{id}")
}

/// Whether an id can appear in an address (`<id>/<session>`).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id != "local"
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Reads the configured connections from a config document.
/// An entry that does not parse (a hand-edited `"transport": "udp"`) is skipped with a warning
/// naming it and why; the others stay.
pub fn from_config(extra: &serde_json::Map<String, Value>) -> Vec<ConnectionConfig> {
    let Some(list) = extra
        .get("hub")
        .and_then(|h| h.get("connections"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|c| match serde_json::from_value(c.clone()) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(entry = %c, error = %e, "hub.connections: invalid entry ignored");
                None
            }
        })
        .collect()
}

/// Adds or replaces a connection in the config file and stores its token.
pub fn connect(
    file: &ConfigFile,
    vault: &Vault,
    conn: ConnectionConfig,
    token: &str,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        valid_id(&conn.id),
        "invalid connection id {:?} (letters, digits, - and _; not \"local\")",
        conn.id
    );
    let url = reqwest::Url::parse(&conn.url).map_err(|e| anyhow::anyhow!("invalid url: {e}"))?;
    anyhow::ensure!(
        matches!(url.scheme(), "http" | "https"),
        "the url must be http(s)://host:port"
    );
    anyhow::ensure!(
        url.username().is_empty() && url.password().is_none(),
        "put credentials in --token-stdin, not the url"
    );
    anyhow::ensure!(!token.is_empty(), "the token is empty");
    vault.set(&token_key(&conn.id), token)?;
    file.update(|doc| {
        let list = connections_mut(doc)?;
        list.retain(|c| c.get("id").and_then(Value::as_str) != Some(conn.id.as_str()));
        let mut row = json!({"id": conn.id, "url": conn.url.trim_end_matches('/')});
        if let Some(t) = conn.transport {
            row["transport"] = json!(t);
        }
        if let Some(f) = &conn.quic_fingerprint {
            row["quic_fingerprint"] = json!(f);
        }
        list.push(row);
        Ok(())
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

/// Removes a connection from the config file. Returns whether it existed.
pub fn disconnect(file: &ConfigFile, id: &str) -> anyhow::Result<bool> {
    let mut existed = false;
    file.update(|doc| {
        let list = connections_mut(doc)?;
        let before = list.len();
        list.retain(|c| c.get("id").and_then(Value::as_str) != Some(id));
        existed = list.len() != before;
        Ok(())
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(existed)
}

fn connections_mut(doc: &mut Value) -> Result<&mut Vec<Value>, SaveError> {
    let obj = doc
        .as_object_mut()
        .ok_or_else(|| SaveError::Invalid("config is not an object".into()))?;
    let hub = obj.entry("hub").or_insert_with(|| json!({}));
    if !hub.is_object() {
        *hub = json!({});
    }
    let conns = hub
        .as_object_mut()
        .expect("object")
        .entry("connections")
        .or_insert_with(|| json!([]));
    if !conns.is_array() {
        *conns = json!([]);
    }
    Ok(conns.as_array_mut().expect("array"))
}

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

/// Live state of one connection.
#[derive(Debug, Default, Clone)]
pub struct ConnState {
    /// Whether the node answers.
    pub up: bool,
    /// The node's session rows (as the node reports them).
    pub sessions: Vec<Value>,
    /// The last failure, without URL or token.
    pub last_error: Option<String>,
    /// Whether the peer link (`/mcp/peer`, cross-host mail) is up.
    pub peer_up: bool,
    /// The peer link's last failure, without URL or token.
    pub peer_error: Option<String>,
    /// Whole `GET /sessions` reads (connect, reconnect, `lagged`).
    pub full_refreshes: u64,
    /// Single-row reads (`GET /sessions/{id}`) for events that lack the row's fields.
    pub row_fetches: u64,
    /// The carrier of the last peer link dialed: `"quic"` or `"websocket"`.
    pub transport: Option<&'static str>,
    /// Times the peer link came up: a link that survives a change of path (QUIC migration)
    /// does not count again.
    pub peer_link_ups: u64,
    /// Relayed session streams opened on their own QUIC stream of the link.
    pub quic_session_streams: u64,
}

/// One connection and its driver.
#[derive(Debug)]
pub struct Conn {
    /// Connection id.
    pub id: String,
    /// Base URL.
    pub url: String,
    /// The node's connection token, sent as the `tui-session` cookie.
    pub(crate) token: String,
    /// Mirrored state.
    pub state: RwLock<ConnState>,
    /// Stops the drivers (mirror and peer link).
    pub(crate) stop: CancellationToken,
    /// Counts the times the node was found down: relayed streams end on a change, so a silent
    /// partition (no reset reaches the hub) does not leave them hanging with the screen they
    /// follow unstored.
    pub(crate) downs: tokio::sync::watch::Sender<u64>,
    /// Counts the times the session link came up: the mail link's driver waits on it during
    /// its backoff, so both carriers come back together (one liveness per host).
    pub(crate) ups: tokio::sync::watch::Sender<u64>,
    /// When the drivers first dial: spread over `federation::spread_window` after a (re)start, so a hub
    /// with many nodes does not dial them all at the same instant.
    pub(crate) first_dial: tokio::time::Instant,
    /// The pinned fingerprint of the node's QUIC certificate (trust on first use).
    pub(crate) pin: std::sync::Mutex<Option<String>>,
    /// Which carrier the peer link may use.
    pub(crate) transport: TransportPref,
    /// The QUIC connection of the current link, when it is QUIC: relayed session streams open
    /// their own streams on it.
    pub(crate) quic: std::sync::Mutex<Option<quinn::Connection>>,
    /// The host's flap damping (fed by the session link, the host's liveness): a host whose
    /// links come up and end at once is dialled after a growing hold, never in a tight loop.
    pub(crate) flaps: std::sync::Mutex<tuic_proto::peer::Flaps>,
}

impl Conn {
    /// A connection to `config`'s node authenticated with `token`, its drivers stopped by
    /// `stop` and dialing first at `first_dial`; its pin is the configured fingerprint.
    pub fn new(
        config: &ConnectionConfig,
        token: String,
        transport: TransportPref,
        stop: CancellationToken,
        first_dial: tokio::time::Instant,
    ) -> Self {
        Self {
            id: config.id.clone(),
            url: config.url.clone(),
            token,
            state: RwLock::new(ConnState::default()),
            stop,
            downs: tokio::sync::watch::Sender::new(0),
            ups: tokio::sync::watch::Sender::new(0),
            first_dial,
            pin: std::sync::Mutex::new(config.quic_fingerprint.clone()),
            transport,
            quic: std::sync::Mutex::new(None),
            flaps: Default::default(),
        }
    }

    /// A snapshot of the state.
    pub fn snapshot(&self) -> ConnState {
        self.state.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set(&self, f: impl FnOnce(&mut ConnState)) {
        f(&mut self.state.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// The link's QUIC connection while it lives.
    pub(crate) fn quic_link(&self) -> Option<quinn::Connection> {
        self.quic
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|c| c.close_reason().is_none())
    }

    /// The host's flap damping.
    pub(crate) fn flaps(&self) -> std::sync::MutexGuard<'_, tuic_proto::peer::Flaps> {
        self.flaps.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cookie header value that authenticates the hub to this node.
    pub(crate) fn cookie(&self) -> String {
        format!("tui-session={}", self.token)
    }
}

/// A client error without the URL (which may carry a query) or any credential.
pub(crate) fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection refused or unreachable"
    } else if e.is_decode() {
        "unreadable answer"
    } else {
        "request failed"
    };
    match e.status() {
        Some(s) => format!("{kind} ({s})"),
        None => kind.to_owned(),
    }
}

/// The pauses between reconnect attempts to a node: the workspace's one backoff
/// ([`tuic_proto::peer::Backoff`]), 1 s doubling up to `max_ms` (`tuning.peer_reconnect_max_ms`), each with
/// a random jitter of up to a quarter of its length, without end. Both of a connection's tasks
/// (sessions and mail) start a fresh one after a link that was up ends.
pub(crate) fn reconnect_backoff(max_ms: u64) -> impl Iterator<Item = Duration> + use<> {
    let max = Duration::from_millis(max_ms.max(1_000));
    let mut delays = tuic_proto::peer::Backoff::with_limits(Duration::from_secs(1), max);
    std::iter::from_fn(move || Some(delays.next(rand::random())))
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
    fn connect_disconnect_roundtrip_keeps_token_out_of_config() {
        let d = tempfile::tempdir().unwrap();
        let file = ConfigFile::new(d.path().join("config.json"));
        let vault = Vault::open(d.path(), d.path().join("secrets.json"), false);
        let c = ConnectionConfig {
            id: "boxb".into(),
            url: "http://10.0.0.2:9876/".into(),
            transport: None,
            quic_fingerprint: None,
        };
        connect(&file, &vault, c, "tok123").unwrap();
        let cfg = file.load().unwrap();
        assert_eq!(
            from_config(&cfg.extra),
            vec![ConnectionConfig {
                id: "boxb".into(),
                url: "http://10.0.0.2:9876".into(),
                transport: None,
                quic_fingerprint: None,
            }]
        );
        assert!(
            !std::fs::read_to_string(d.path().join("config.json"))
                .unwrap()
                .contains("tok123")
        );
        assert_eq!(
            vault.get(&token_key("boxb")).unwrap().as_deref(),
            Some("tok123")
        );
        assert!(disconnect(&file, "boxb").unwrap());
        assert!(!disconnect(&file, "boxb").unwrap());
        assert!(from_config(&file.load().unwrap().extra).is_empty());
    }

    #[test]
    fn a_bad_entry_is_skipped_and_the_others_stay() {
        let extra: serde_json::Map<String, Value> = serde_json::from_value(json!({"hub": {
            "transport": "udp",
            "connections": [
                {"id": "a", "url": "http://a:1", "transport": "udp"},
                {"id": "b", "url": "http://b:1", "transport": "quic", "quic_fingerprint": "sha256:ab"}
            ]
        }}))
        .unwrap();
        let got = from_config(&extra);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, "b");
        assert_eq!(got[0].transport, Some(TransportPref::Quic));
        assert_eq!(got[0].quic_fingerprint.as_deref(), Some("sha256:ab"));
        assert_eq!(default_transport(&extra), TransportPref::Auto);
        let mut doc = json!({"hub": {"connections": [{"id": "b", "url": "http://b:1"}]}});
        set_fingerprint(&mut doc, "b", "sha256:cd");
        assert_eq!(
            doc["hub"]["connections"][0]["quic_fingerprint"],
            "sha256:cd"
        );
    }

    #[test]
    fn ids_and_urls_are_validated() {
        let d = tempfile::tempdir().unwrap();
        let file = ConfigFile::new(d.path().join("config.json"));
        let vault = Vault::open(d.path(), d.path().join("secrets.json"), false);
        for (id, url) in [
            ("local", "http://a:1"),
            ("a/b", "http://a:1"),
            ("ok", "ftp://a"),
            ("ok", "http://u:p@a:1"),
        ] {
            let c = ConnectionConfig {
                id: id.into(),
                url: url.into(),
                transport: None,
                quic_fingerprint: None,
            };
            assert!(connect(&file, &vault, c, "t").is_err(), "{id} {url}");
        }
    }
}
