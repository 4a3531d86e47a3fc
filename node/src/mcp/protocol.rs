//! Pure JSON-RPC and MCP revision rules: message classification, error objects, the
//! per-request era, and `Accept` parsing. No IO, no state. The revisions, header names and
//! error codes themselves are the shared contract in `tuic_proto::mcp`.

use serde_json::{Map, Value, json};

pub(crate) use tuic_proto::mcp::{
    BATCHING, HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, LEGACY_DEFAULT,
    MAX_ANSWER_BYTES, MAX_BATCH, MAX_BATCH_ANSWER_BYTES, META_CLIENT_CAPS, META_CLIENT_INFO,
    META_SERVER_INFO, META_VERSION, METHOD_NOT_FOUND, MODERN, PARSE_ERROR, SUPPORTED, negotiate,
};

/// A JSON-RPC error object.
pub(crate) fn error(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// A JSON-RPC error object with `data`.
pub(crate) fn error_with(id: Value, code: i64, message: impl Into<String>, data: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id,
        "error": {"code": code, "message": message.into(), "data": data}})
}

/// A JSON-RPC result.
pub(crate) fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// One incoming message after structural validation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Message {
    /// A request: answered.
    Request {
        /// Its id (string or number).
        id: Value,
        /// The method.
        method: String,
        /// Params (an object, or `{}` when absent).
        params: Map<String, Value>,
    },
    /// A notification: accepted with 202, nothing to answer.
    Notification {
        /// The method.
        method: String,
    },
    /// A response to a server request: accepted with 202.
    Response,
}

/// Classifies one JSON value; `Err` is the JSON-RPC error to answer (invalid request or
/// invalid params), carrying the request id when one could be read.
pub(crate) fn classify(v: &Value) -> Result<Message, Value> {
    let Some(obj) = v.as_object() else {
        return Err(error(
            Value::Null,
            INVALID_REQUEST,
            "a JSON-RPC message must be an object",
        ));
    };
    let id = match obj.get("id") {
        None => None,
        Some(i @ (Value::String(_) | Value::Number(_))) => Some(i.clone()),
        Some(Value::Null) if !obj.contains_key("method") => Some(Value::Null),
        Some(_) => {
            return Err(error(
                Value::Null,
                INVALID_REQUEST,
                "id must be a string or a number",
            ));
        }
    };
    let echo = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(error(echo, INVALID_REQUEST, "jsonrpc must be \"2.0\""));
    }
    let method = match obj.get("method") {
        Some(Value::String(m)) => m.clone(),
        Some(_) => return Err(error(echo, INVALID_REQUEST, "method must be a string")),
        None if obj.contains_key("result") || obj.contains_key("error") => {
            return Ok(Message::Response);
        }
        None => {
            return Err(error(
                echo,
                INVALID_REQUEST,
                "a request needs a method (or a result/error for a response)",
            ));
        }
    };
    let params = match obj.get("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(error(echo, INVALID_PARAMS, "params must be an object")),
    };
    Ok(match id {
        Some(id) => Message::Request { id, method, params },
        None => Message::Notification { method },
    })
}

/// The `_meta` protocol version of a request, if it names one.
pub(crate) fn meta_version(params: &Map<String, Value>) -> Option<&str> {
    params
        .get("_meta")
        .and_then(|m| m.get(META_VERSION))
        .and_then(Value::as_str)
}

/// The client name a request names in `_meta`.
pub(crate) fn meta_client_name(params: &Map<String, Value>) -> Option<&str> {
    params
        .get("_meta")
        .and_then(|m| m.get(META_CLIENT_INFO))
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str)
}

/// Why a stateless request's `_meta` is unusable (answered -32602, HTTP 400).
pub(crate) fn check_stateless_meta(params: &Map<String, Value>) -> Result<(), &'static str> {
    let Some(meta) = params.get("_meta").and_then(Value::as_object) else {
        return Err("stateless requests must carry params._meta");
    };
    if !meta.get(META_VERSION).is_some_and(Value::is_string) {
        return Err("params._meta lacks io.modelcontextprotocol/protocolVersion");
    }
    if !meta.get(META_CLIENT_CAPS).is_some_and(Value::is_object) {
        return Err("params._meta lacks io.modelcontextprotocol/clientCapabilities");
    }
    Ok(())
}

/// Whether an `Accept` header list admits a JSON answer. Parsed as a comma-separated list
/// with parameters (`q=0` refuses); absent means anything.
pub(crate) fn accepts_json<'a>(values: impl Iterator<Item = &'a str>) -> bool {
    accepts(values, &["application/json", "application/*", "*/*"])
}

/// Whether an `Accept` header list admits an event stream.
pub(crate) fn accepts_sse<'a>(values: impl Iterator<Item = &'a str>) -> bool {
    accepts(values, &["text/event-stream", "text/*", "*/*"])
}

fn accepts<'a>(values: impl Iterator<Item = &'a str>, wanted: &[&str]) -> bool {
    let mut seen = false;
    for v in values {
        for item in v.split(',') {
            let mut parts = item.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            if media.is_empty() {
                continue;
            }
            seen = true;
            let q_zero = parts.any(|p| {
                let p = p.trim();
                p.strip_prefix("q=")
                    .or_else(|| p.strip_prefix("Q="))
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            if !q_zero && wanted.contains(&media.as_str()) {
                return true;
            }
        }
    }
    !seen
}

/// The name a `tools/call` addresses, for the `Mcp-Name` header check.
pub(crate) fn call_name(method: &str, params: &Map<String, Value>) -> Option<String> {
    match method {
        "tools/call" | "prompts/get" => params.get("name").and_then(Value::as_str).map(Into::into),
        "resources/read" => params.get("uri").and_then(Value::as_str).map(Into::into),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_table() {
        for (req, want) in [
            (Some("2026-07-28"), "2026-07-28"),
            (Some("2025-11-25"), "2025-11-25"),
            (Some("2025-03-26"), "2025-03-26"),
            (Some("2025-06-18"), "2025-11-25"),
            (Some("1999-01-01"), "2025-11-25"),
            (None, "2025-11-25"),
        ] {
            assert_eq!(negotiate(req), want, "{req:?}");
        }
    }

    #[test]
    fn accept_is_a_list() {
        let yes = [
            "application/json, text/event-stream",
            "text/event-stream, application/json;q=0.5",
            "*/*",
            "application/*",
            "TEXT/EVENT-STREAM,APPLICATION/JSON",
        ];
        for a in yes {
            assert!(accepts_json([a].into_iter()), "{a}");
        }
        assert!(accepts_json(std::iter::empty()));
        assert!(!accepts_json(["text/html"].into_iter()));
        assert!(!accepts_json(["application/json;q=0"].into_iter()));
        assert!(accepts_sse(
            ["application/json", "text/event-stream"].into_iter()
        ));
        assert!(!accepts_sse(["application/json"].into_iter()));
    }

    #[test]
    fn classification() {
        let req = json!({"jsonrpc":"2.0","id":1,"method":"ping"});
        assert!(matches!(classify(&req), Ok(Message::Request { .. })));
        let n = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
        assert!(matches!(classify(&n), Ok(Message::Notification { .. })));
        let r = json!({"jsonrpc":"2.0","id":1,"result":{}});
        assert_eq!(classify(&r), Ok(Message::Response));
        let bad = [
            (json!(5), Value::Null, INVALID_REQUEST),
            (json!({"id":1,"method":"x"}), json!(1), INVALID_REQUEST),
            (
                json!({"jsonrpc":"2.0","id":2,"method":7}),
                json!(2),
                INVALID_REQUEST,
            ),
            (
                json!({"jsonrpc":"2.0","id":{},"method":"x"}),
                Value::Null,
                INVALID_REQUEST,
            ),
            (json!({"jsonrpc":"2.0","id":3}), json!(3), INVALID_REQUEST),
            (
                json!({"jsonrpc":"2.0","id":4,"method":"x","params":[1]}),
                json!(4),
                INVALID_PARAMS,
            ),
        ];
        for (msg, id, code) in bad {
            let e = classify(&msg).unwrap_err();
            assert_eq!(e["error"]["code"], code, "{msg}");
            assert_eq!(e["id"], id, "{msg}");
        }
    }
}
