//! MCP resources of other hosts' sessions, on a process with a host router (a hub): every
//! mirrored remote row lists `tuic://hosts/{connection}/sessions/{alias}/screen` and
//! `…/output` (the host is the connection id, the first part of the row's address; the alias
//! is the owner's, else its session id). A read goes to the owner as a sessionless
//! `resources/read` of its own `tuic://sessions/{alias}/…` URI (`ext::HostRouter::
//! mcp_request`), so the owner's redaction and paging apply unchanged; the answer carries the
//! hub's URI.
//!
//! Subscriptions share the node's caps ([`super::resources::MAX_PER_SESSION`], `MAX_TOTAL`).
//! The owner sends no output events over the hub's link, so one watcher per remote session
//! (whatever the number of subscribers) re-reads its screen every [`POLL`] and sends
//! `notifications/resources/updated` for each subscribed URI when the screen changed; it ends
//! when the owner says the session is gone or nobody is subscribed. Deliberately absent: a
//! plain node has no router and answers these URIs "not found".

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::resources::{decode, encode};
use super::{RESOURCE_NOT_FOUND, RpcError, parse};
use crate::mcp::protocol as p;
use crate::mcp::registry::CallCtx;
use crate::state::Node;

/// URIs of other hosts' resources start so.
pub(crate) const PREFIX: &str = "tuic://hosts/";
/// How often a watcher re-reads a subscribed remote screen: the bound on `updated` latency
/// through a hub (plus one round trip), and on its cost (one read of the owner per interval
/// per watched remote session, whatever the number of subscribers).
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// A remote resource URI, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteUri {
    /// The connection the owner is reached through.
    pub(crate) host: String,
    /// The owner's alias (or session id), decoded.
    pub(crate) alias: String,
    /// The owner's own URI of the same resource (query kept).
    pub(crate) owner_uri: String,
}

impl RemoteUri {
    /// The watcher key of the remote session (one watcher per session, screen or output).
    fn key(&self) -> String {
        format!("{PREFIX}{}/{}", encode(&self.host), encode(&self.alias))
    }

    /// The owner's URI of the session's screen (the watcher's change signal).
    fn owner_screen(&self) -> String {
        format!("tuic://sessions/{}/screen", encode(&self.alias))
    }
}

fn not_found(uri: &str, why: &str) -> RpcError {
    RpcError {
        code: RESOURCE_NOT_FOUND,
        message: format!("no resource {uri}: {why}"),
    }
}

/// Parses a `tuic://hosts/…` URI; `None` when `uri` is not one.
pub(crate) fn parse_uri(uri: &str) -> Option<Result<RemoteUri, RpcError>> {
    let rest = uri.strip_prefix(PREFIX)?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let parts: Vec<&str> = path.split('/').collect();
    Some(match parts.as_slice() {
        [host, "sessions", alias, kind @ ("screen" | "output")]
            if !host.is_empty() && !alias.is_empty() && (*kind == "output" || query.is_empty()) =>
        {
            let alias = decode(alias);
            let mut owner_uri = format!("tuic://sessions/{}/{kind}", encode(&alias));
            if !query.is_empty() {
                owner_uri.push('?');
                owner_uri.push_str(query);
            }
            Ok(RemoteUri {
                host: decode(host),
                alias,
                owner_uri,
            })
        }
        _ => Err(not_found(
            uri,
            "remote resources are tuic://hosts/{host}/sessions/{alias}/screen and …/output",
        )),
    })
}

/// The `resources/list` rows of every mirrored remote session (none without a source).
pub(crate) fn list_rows(node: &Node) -> Vec<Value> {
    let mut out = Vec::new();
    for r in node.ext.remote_rows() {
        let alias = r
            .row
            .get("alias")
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| r.session_id());
        if alias.is_empty() {
            continue;
        }
        let (host, h) = (encode(&r.connection_id), encode(alias));
        let title = r
            .row
            .get("display_name")
            .and_then(Value::as_str)
            .unwrap_or(alias);
        out.push(json!({"uri": format!("{PREFIX}{host}/sessions/{h}/screen"),
            "name": format!("{}/{alias} screen", r.connection_id),
            "title": format!("{title} on {}: screen", r.connection_id), "mimeType": "text/plain",
            "description": "What the remote terminal shows now (redacted by its owner)"}));
        out.push(json!({"uri": format!("{PREFIX}{host}/sessions/{h}/output"),
            "name": format!("{}/{alias} output", r.connection_id),
            "title": format!("{title} on {}: output", r.connection_id),
            "mimeType": "application/json",
            "description": "Recent output of the remote session, paged like session action=output (redacted by its owner)"}));
    }
    out
}

/// The `resources/templates/list` rows of remote resources (only with a router).
pub(crate) fn templates(node: &Node) -> Vec<Value> {
    if node.ext.router().is_none() {
        return Vec::new();
    }
    vec![
        json!({"uriTemplate": "tuic://hosts/{host}/sessions/{alias}/screen",
            "name": "remote session screen", "mimeType": "text/plain",
            "description": "A session's screen on another host (redacted by its owner)"}),
        json!({"uriTemplate": "tuic://hosts/{host}/sessions/{alias}/output",
            "name": "remote session output", "mimeType": "application/json",
            "description": "A session's recent output on another host; query as for tuic://sessions/{alias}/output"}),
    ]
}

/// Reads `owner_uri` on `host`'s owner: `(mimeType, text)`. The owner's JSON-RPC error keeps
/// its code (a gone session is `-32002`); an unknown connection is "not found", an
/// unreachable owner an internal error naming it.
async fn owner_read(node: &Node, host: &str, owner_uri: &str) -> Result<(Value, Value), RpcError> {
    let router = node
        .ext
        .router()
        .ok_or_else(|| not_found(owner_uri, "this process has no other hosts"))?;
    let answer = router
        .mcp_request(
            host,
            json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read",
                "params": {"uri": owner_uri}}),
        )
        .await
        .map_err(|e| RpcError {
            code: if e.code == "unknown_connection" {
                RESOURCE_NOT_FOUND
            } else {
                p::INTERNAL_ERROR
            },
            message: e.message,
        })?;
    if let Some(err) = answer.get("error") {
        return Err(RpcError {
            code: err["code"].as_i64().unwrap_or(p::INTERNAL_ERROR),
            message: format!(
                "{host}: {}",
                err["message"]
                    .as_str()
                    .unwrap_or("the owner refused the read")
            ),
        });
    }
    let c = &answer["result"]["contents"][0];
    Ok((c["mimeType"].clone(), c["text"].clone()))
}

/// `resources/read` of a remote URI.
pub(crate) async fn read(node: &Arc<Node>, uri: &str, r: &RemoteUri) -> Result<Value, RpcError> {
    let (mime, text) = owner_read(node, &r.host, &r.owner_uri).await?;
    Ok(json!({"contents": [{"uri": uri, "mimeType": mime, "text": text}]}))
}

fn digest(v: &Value) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.as_str().unwrap_or_default().hash(&mut h);
    h.finish()
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct UriParams {
    uri: String,
}

/// `resources/subscribe` (`on`) or `unsubscribe` of a remote URI. A subscribe reads the
/// owner's screen first: a session the owner does not know is refused, and the watcher's
/// first comparison is against what the screen showed when the subscription was taken.
pub(crate) async fn subscribe(
    node: &Arc<Node>,
    ctx: &CallCtx,
    params: &Map<String, Value>,
    on: bool,
) -> Result<Value, RpcError> {
    let method = if on {
        "resources/subscribe"
    } else {
        "resources/unsubscribe"
    };
    let UriParams { uri } = parse(method, params)?;
    let r = match parse_uri(&uri) {
        Some(r) => r?,
        None => return Err(not_found(&uri, "not a remote resource")),
    };
    let sid = ctx.mcp_session.clone().ok_or_else(|| {
        RpcError::invalid(format!(
            "{method} needs a protocol session (initialize, then open GET /mcp for the updates)"
        ))
    })?;
    let subs = &node.mcp.features.subs;
    if !on {
        subs.remove(&r.key(), &uri, &sid);
        return Ok(json!({}));
    }
    let (_, screen) = owner_read(node, &r.host, &r.owner_screen()).await?;
    if subs.add(&r.key(), &uri, &sid)? {
        watch(node, r, digest(&screen));
    }
    Ok(json!({}))
}

/// The watcher of one remote session (see the module header).
fn watch(node: &Arc<Node>, r: RemoteUri, mut last: u64) {
    let n = node.clone();
    node.tasks.spawn(async move {
        let (key, screen) = (r.key(), r.owner_screen());
        loop {
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                _ = tokio::time::sleep(POLL) => {}
            }
            if n.mcp.features.subs.targets(&key).is_none() {
                return;
            }
            let now = match owner_read(&n, &r.host, &screen).await {
                Ok((_, text)) => digest(&text),
                Err(e) if e.code == RESOURCE_NOT_FOUND => break,
                // Unreachable for now: the next interval tries again.
                Err(_) => continue,
            };
            if now == last {
                continue;
            }
            last = now;
            let Some(targets) = n.mcp.features.subs.targets(&key) else {
                return;
            };
            for (uri, sids) in targets {
                let note = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                    "params": {"uri": uri}});
                for sid in sids {
                    if n.mcp.sessions.with(&sid, |_| ()).is_none() {
                        n.mcp.features.subs.remove(&key, &uri, &sid);
                        continue;
                    }
                    n.mcp.sessions.push_to_session(&sid, &note);
                }
            }
        }
        n.mcp.features.subs.forget_pty(&key);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_uris_name_the_host_and_map_to_the_owners_uri() {
        let r = parse_uri("tuic://hosts/nodeb/sessions/dev-1/screen")
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.host.as_str(), r.alias.as_str(), r.owner_uri.as_str()),
            ("nodeb", "dev-1", "tuic://sessions/dev-1/screen")
        );
        let r = parse_uri("tuic://hosts/node%20b/sessions/a%20b/output?limit=5")
            .unwrap()
            .unwrap();
        assert_eq!(r.host, "node b");
        assert_eq!(r.owner_uri, "tuic://sessions/a%20b/output?limit=5");
        assert!(parse_uri("tuic://sessions/x/screen").is_none());
        for bad in [
            "tuic://hosts/nodeb/sessions/x/screen?limit=1",
            "tuic://hosts//sessions/x/screen",
            "tuic://hosts/nodeb/repos",
        ] {
            assert_eq!(
                parse_uri(bad).unwrap().unwrap_err().code,
                RESOURCE_NOT_FOUND,
                "{bad}"
            );
        }
    }
}
