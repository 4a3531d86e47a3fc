//! Configured connections: `hub.connections` in `config.json` (id and base URL) and each
//! connection's token in the node's secret store (never in the config file).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tuic_node::config::{ConfigFile, SaveError};
use tuic_node::vault::Vault;

/// One configured node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionConfig {
    /// The connection id: the first part of every address on this node.
    pub id: String,
    /// The node's base URL, `http://host:port`.
    pub url: String,
    /// The peer link's carrier (`auto`, `quic`, `websocket`); unset: `hub.transport`, else auto.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<crate::quic::TransportPref>,
    /// The pinned fingerprint of the node's QUIC certificate (`sha256:<hex>`); unset until the
    /// node first shows one (trust on first use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_fingerprint: Option<String>,
}

/// The hub-wide transport default, `hub.transport` in `config.json` (auto when unset or
/// unknown).
pub fn default_transport(extra: &serde_json::Map<String, Value>) -> crate::quic::TransportPref {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(got[0].transport, Some(crate::quic::TransportPref::Quic));
        assert_eq!(got[0].quic_fingerprint.as_deref(), Some("sha256:ab"));
        assert_eq!(default_transport(&extra), crate::quic::TransportPref::Auto);
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
