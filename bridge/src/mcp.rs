//! MCP Streamable HTTP client pieces shared by the bridge and the CLI: request headers, and
//! reading JSON-RPC messages out of a `POST /mcp` answer (plain JSON or an SSE body).

use serde_json::{Value, json};
use tuic_proto::ipc_http::{Request, Response};
use tuic_proto::sse::SseDecoder;

/// The revision a request falls back to when it names none (spec: "falls back to 2025-11-25"),
/// the modern revision whose results carry the cache/complete envelope, and the revisions
/// `initialize` echoes: the node's own list in `tuic_proto::mcp`.
pub use tuic_proto::mcp::{
    ECHOED as KNOWN_PROTOCOL_VERSIONS, LEGACY_DEFAULT as DEFAULT_PROTOCOL_VERSION,
    MODERN as MODERN_PROTOCOL_VERSION,
};
use tuic_proto::mcp::{SESSION_HEADER, TUIC_SESSION_HEADER, VERSION_HEADER};
/// Largest single SSE event accepted from the node.
pub const MAX_SSE_EVENT: usize = 16 * 1024 * 1024;

/// Identity and session headers that go on every `/mcp` request.
#[derive(Debug, Clone, Default)]
pub struct McpHeaders<'a> {
    /// `mcp-session-id`, once the node minted one.
    pub session_id: Option<&'a str>,
    /// `x-tuic-session`, from `$TUIC_SESSION`.
    pub tuic_session: Option<&'a str>,
    /// `mcp-protocol-version`.
    pub protocol_version: &'a str,
}

impl McpHeaders<'_> {
    fn apply(&self, mut req: Request) -> Request {
        req = req.header(VERSION_HEADER, self.protocol_version);
        if let Some(s) = self.session_id {
            req = req.header(SESSION_HEADER, s);
        }
        if let Some(t) = self.tuic_session {
            req = req.header(TUIC_SESSION_HEADER, t);
        }
        req
    }

    /// `POST /mcp` carrying one JSON-RPC message.
    pub fn post(&self, msg: &Value) -> Request {
        self.apply(
            Request::new("POST", "/mcp")
                .header("accept", "application/json, text/event-stream")
                .json(msg),
        )
    }

    /// `GET /mcp`: the server-to-client notification stream.
    pub fn get_stream(&self) -> Request {
        self.apply(Request::new("GET", "/mcp").header("accept", "text/event-stream"))
    }

    /// `DELETE /mcp`: ends the protocol session.
    pub fn delete(&self) -> Request {
        self.apply(Request::new("DELETE", "/mcp"))
    }
}

/// The JSON-RPC messages in a `POST /mcp` answer: a JSON object or batch, or the `data` of
/// each SSE event. An empty body (202 for a notification) gives none.
pub fn rpc_messages(resp: &Response) -> Result<Vec<Value>, String> {
    let ct = resp.head.header("content-type").unwrap_or("");
    if ct.starts_with("text/event-stream") {
        let mut d = SseDecoder::new(MAX_SSE_EVENT);
        d.feed(&resp.body).map_err(|e| e.to_string())?;
        // A final event without its blank line still counts once the body ended.
        d.feed(b"\n\n").map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while let Some(ev) = d.poll_event() {
            if ev.data.trim().is_empty() {
                continue;
            }
            out.push(serde_json::from_str(&ev.data).map_err(|e| format!("SSE data: {e}"))?);
        }
        return Ok(out);
    }
    if resp.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    match serde_json::from_slice::<Value>(&resp.body).map_err(|e| format!("JSON body: {e}"))? {
        Value::Array(items) => Ok(items),
        v => Ok(vec![v]),
    }
}

/// The response to request `id` among `msgs`.
pub fn find_response<'a>(msgs: &'a [Value], id: &Value) -> Option<&'a Value> {
    msgs.iter()
        .find(|m| m.get("id") == Some(id) && m.get("method").is_none())
}

/// The `{error}` message of a node's JSON error body, or the body's start.
pub fn error_text(resp: &Response) -> String {
    resp.json()
        .ok()
        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| {
            let t = resp.text();
            t.chars().take(200).collect()
        })
}

/// A JSON-RPC request.
pub fn rpc_request(id: Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A JSON-RPC notification.
pub fn rpc_notification(method: &str, params: Option<Value>) -> Value {
    match params {
        Some(p) => json!({"jsonrpc": "2.0", "method": method, "params": p}),
        None => json!({"jsonrpc": "2.0", "method": method}),
    }
}

/// The client info tuic's own clients announce.
pub fn client_info(name: &str) -> Value {
    json!({"name": name, "version": env!("CARGO_PKG_VERSION")})
}
