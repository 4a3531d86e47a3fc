//! The MCP server beyond tools: resources (sessions' screens and output, repositories, the
//! caller's inbox; on a hub, other hosts' sessions — [`remote`]) with subscriptions, prompts,
//! `logging/setLevel` with `notifications/message` (the node's own log lines of the session's
//! calls), and `completion/complete` for prompt arguments and resource templates.
//!
//! The transport hands every method it does not serve itself to [`dispatch`]; params are typed
//! (`#[derive(Deserialize)]`), bad ones answer `-32602` with a message that says what is wrong.
//! Notifications go to the protocol session's `GET /mcp` stream (they are not tied to a
//! request). State is bounded: subscriptions per protocol session, one update watcher per
//! terminal session whatever the number of subscribers, a token bucket per session for log
//! messages.

pub(crate) mod completion;
pub(crate) mod logging;
pub(crate) mod prompts;
pub(crate) mod remote;
pub(crate) mod resources;
pub(crate) mod streams;

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::protocol as p;
use super::registry::CallCtx;
use crate::state::Node;

/// MCP's "resource not found" error code.
pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;

/// A JSON-RPC error: code and message (and optional data).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self {
            code: p::INVALID_PARAMS,
            message: message.into(),
        }
    }
}

/// What the features keep between requests (a field of `McpState`).
#[derive(Debug, Default)]
pub struct Features {
    /// Resource subscriptions and their update watchers.
    pub(crate) subs: resources::Subscriptions,
    /// `logging/setLevel` per protocol session.
    pub(crate) logging: logging::Levels,
    /// Event streams of running `tools/call` requests that asked for progress.
    pub(crate) routes: streams::Routes,
}

/// The capabilities these features add to `initialize` (legacy sessions) and
/// `server/discover` (`stateless`: 2026-07-28 removed `resources/subscribe` and
/// `logging/setLevel`, and tuic's `subscriptions/listen` carries no resource updates).
pub(crate) fn capabilities(caps: &mut Value, stateless: bool) {
    // `list_changed` goes to `GET /mcp` streams, which only legacy sessions have.
    caps["resources"] = json!({"subscribe": !stateless, "listChanged": !stateless});
    caps["prompts"] = json!({"listChanged": false});
    if !stateless {
        caps["logging"] = json!({});
    }
    caps["completions"] = json!({});
}

/// Methods whose 2026-07-28 results carry the cache envelope (`resultType`, `ttlMs`,
/// `cacheScope`).
pub(crate) fn cacheable(method: &str) -> bool {
    matches!(
        method,
        "resources/list" | "resources/templates/list" | "resources/read" | "prompts/list"
    )
}

/// Parses `params` into `T`, or the `-32602` that says why not.
pub(crate) fn parse<T: DeserializeOwned>(
    method: &str,
    params: &Map<String, Value>,
) -> Result<T, RpcError> {
    let mut m = params.clone();
    m.remove("_meta");
    serde_json::from_value(Value::Object(m))
        .map_err(|e| RpcError::invalid(format!("{method}: invalid params: {e}")))
}

/// Serves `method` when it is one of these features'; `None` when it is not.
pub(crate) async fn dispatch(
    node: &Arc<Node>,
    ctx: &CallCtx,
    method: &str,
    params: &Map<String, Value>,
) -> Option<Result<Value, RpcError>> {
    // Other hosts' resources (`tuic://hosts/…`) are read from their owners (async).
    let remote_uri = params
        .get("uri")
        .and_then(Value::as_str)
        .and_then(remote::parse_uri);
    Some(match (method, remote_uri) {
        ("resources/read", Some(r)) => match r {
            Ok(r) => {
                let uri = params["uri"].as_str().unwrap_or_default();
                remote::read(node, uri, &r).await
            }
            Err(e) => Err(e),
        },
        ("resources/subscribe", Some(_)) => remote::subscribe(node, ctx, params, true).await,
        ("resources/unsubscribe", Some(_)) => remote::subscribe(node, ctx, params, false).await,
        (method, _) => return local(node, ctx, method, params),
    })
}

/// The methods served from this node's own state (no remote URI).
fn local(
    node: &Arc<Node>,
    ctx: &CallCtx,
    method: &str,
    params: &Map<String, Value>,
) -> Option<Result<Value, RpcError>> {
    Some(match method {
        "resources/list" => resources::list(node, ctx, params),
        "resources/templates/list" => {
            let mut t = resources::templates();
            if let Some(a) = t["resourceTemplates"].as_array_mut() {
                a.extend(remote::templates(node));
            }
            Ok(t)
        }
        "resources/read" => resources::read(node, ctx, params),
        "resources/subscribe" => resources::subscribe(node, ctx, params),
        "resources/unsubscribe" => resources::unsubscribe(node, ctx, params),
        "prompts/list" => Ok(prompts::list()),
        "prompts/get" => prompts::get(node, params),
        "completion/complete" => completion::complete(node, params),
        "logging/setLevel" => logging::set_level(node, ctx, params),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    /// Every `type` in a schema, with its JSON pointer.
    fn types<'a>(v: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    // A property that is named `type` holds a schema (an object).
                    if k == "type" && !x.is_object() {
                        out.push((at.clone(), x));
                    }
                    types(x, format!("{at}/{k}"), out);
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    types(x, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }

    /// The strict-schema lint (what Inspector `--strict` and Gemini/OpenAPI-style clients
    /// reject): no native tool's input schema uses a type array; nullable values are `anyOf`.
    #[test]
    fn native_input_schemas_have_no_type_arrays() {
        let reg = crate::mcp::registry::Registry::default();
        let mut all = crate::config::Config::default();
        all.disabled_native_tools.clear();
        let listed = reg.list(&all, false);
        assert!(listed.len() >= 12, "{} tools", listed.len());
        for t in &listed {
            let mut found = Vec::new();
            types(&t["inputSchema"], String::new(), &mut found);
            for (at, ty) in found {
                assert!(
                    ty.is_string(),
                    "{}: inputSchema{at}/type is {ty}, not a single type name",
                    t["name"]
                );
            }
        }
    }
}
