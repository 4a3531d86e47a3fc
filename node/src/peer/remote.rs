//! The MCP `session` tool on a hub, for remote sessions: `<connection_id>/<session>` addresses
//! resolve to their owner, and the call goes over the owner's authenticated HTTP routes (the
//! hub's proxy path, with the node's token) — never over the peer link, which carries mail only.
//!
//! `output` forwards `format=mcp`/`mcp_raw` to the node's own output route, so the node's
//! cursor, paging, redaction and exited-session contract holds unchanged; `input` and `submit`
//! use the node's `POST /sessions/{id}/input` and `/submit` (the same code as its MCP actions);
//! `status` reads the mirrored row. Other actions are refused with the list of routed ones.
//! On a plain node (no hub installed) nothing here applies.

use serde_json::{Map, Value, json};
use tuic_proto::peer::{Address, LOCAL, parse_address};

use crate::mcp::registry::ToolError;
use crate::state::Node;

/// What a hub provides for remote sessions.
pub trait RemoteSessions: Send + Sync + std::fmt::Debug {
    /// Remote rows as `GET /sessions` on the hub merges them (`is_remote`, `connection_id`,
    /// `address`).
    fn rows(&self) -> Vec<Value>;
    /// The connections as `GET /hub/connections` lists them (no token, no credentials).
    fn connections(&self) -> Vec<Value>;
    /// Calls the owner's route `method path_and_query` (`/sessions/<id>/...`) with the
    /// connection's token; blocking. `Ok((status, body))`, or `Err` naming the connection when
    /// it is unknown or unreachable.
    fn call(
        &self,
        connection: &str,
        method: &str,
        path_and_query: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), ToolError>;
}

/// How a `session` call is served.
#[derive(Debug)]
pub enum Routed {
    /// Not an address: serve it here with the original arguments.
    Here,
    /// `local/<session>`: serve it here with `session_id` rewritten.
    Local(Map<String, Value>),
    /// The owner answered.
    Answered(Value),
}

/// Actions a hub routes to a remote session's owner.
const ROUTED: &[&str] = &["output", "input", "submit", "status"];

/// Remote rows for `session action=list` (empty on a plain node).
pub fn rows(node: &Node) -> Vec<Value> {
    node.peer
        .remote_sessions()
        .map(|r| r.rows())
        .unwrap_or_default()
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Routes one `session` call whose `session_id` may be an address.
pub fn session_action(
    node: &Node,
    action: &str,
    args: &Map<String, Value>,
) -> Result<Routed, ToolError> {
    let Some(remote) = node.peer.remote_sessions() else {
        return Ok(Routed::Here);
    };
    let Some(id) = args.get("session_id").and_then(Value::as_str) else {
        return Ok(Routed::Here);
    };
    if !id.contains('/') || node.sessions.resolve(id).is_some() {
        return Ok(Routed::Here);
    }
    let (conn, sid) = match parse_address(id) {
        Err(e) => return Err(ToolError::new("invalid_address", e.to_string())),
        Ok(Address::Local(sid)) => {
            let mut a = args.clone();
            a.insert("session_id".into(), json!(sid));
            return Ok(Routed::Local(a));
        }
        Ok(Address::Remote { connection, peer }) => (connection, peer),
    };
    debug_assert_ne!(conn, LOCAL);
    if !ROUTED.contains(&action) {
        return Err(ToolError::new(
            "not_routed",
            format!(
                "session action={action} is not routed to remote sessions; on {id} use one of {}",
                ROUTED.join(", ")
            ),
        )
        .with("connection", json!(conn)));
    }
    let (status, body) = match action {
        "status" => {
            let row = remote
                .rows()
                .into_iter()
                .find(|r| r["address"] == id)
                .ok_or_else(|| {
                    ToolError::new(
                        "unknown_session",
                        format!("unknown session {id}; session action=list shows the live ones"),
                    )
                    .with("connection", json!(conn))
                })?;
            return Ok(Routed::Answered(row));
        }
        "output" => {
            let format = match args.get("format").and_then(Value::as_str) {
                None | Some("text" | "mcp") => "mcp",
                Some("raw" | "mcp_raw") => "mcp_raw",
                Some(f) => {
                    return Err(ToolError::invalid(format!(
                        "unknown format {f}; text (default) or raw"
                    )));
                }
            };
            let mut q = format!("format={format}");
            for k in ["limit", "from_line", "from_byte", "since_cursor"] {
                match args.get(k) {
                    None | Some(Value::Null) => {}
                    Some(v) => {
                        let n = v.as_u64().ok_or_else(|| {
                            ToolError::invalid(format!("{k} must be a non-negative integer"))
                        })?;
                        q.push_str(&format!("&{k}={n}"));
                    }
                }
            }
            remote.call(
                conn,
                "GET",
                &format!("/sessions/{}/output?{q}", enc(sid)),
                None,
            )?
        }
        _ => {
            let mut body = args.clone();
            body.remove("action");
            body.remove("session_id");
            remote.call(
                conn,
                "POST",
                &format!("/sessions/{}/{action}", enc(sid)),
                Some(Value::Object(body)),
            )?
        }
    };
    if (200..300).contains(&status) {
        let mut body = body;
        // A continuation names the session the way this caller must: by its address.
        if let Some(c) = body.get_mut("continuation").and_then(Value::as_object_mut)
            && let Some(local) = c.get("session_id").and_then(Value::as_str)
        {
            let address = format!("{conn}/{local}");
            c.insert("session_id".into(), json!(address));
        }
        return Ok(Routed::Answered(body));
    }
    // The owner's refusal, kept whole (code, retry_safe, ...), with the connection named.
    let message = body
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("the owner refused the call")
        .to_owned();
    let code = match body.get("code").and_then(Value::as_str) {
        Some("unknown_session" | "not_found") => "unknown_session",
        Some("session_exited") => "session_exited",
        Some("busy") => "busy",
        Some("invalid_arguments" | "bad_request") => "invalid_arguments",
        Some("owner_unavailable") => "owner_unavailable",
        _ => "remote_error",
    };
    let mut e = ToolError::new(code, format!("{conn}: {message}"))
        .with("connection", json!(conn))
        .with("status", json!(status));
    if let Value::Object(m) = body {
        for (k, v) in m {
            if !matches!(k.as_str(), "error" | "code") {
                e = e.with(&k, v);
            }
        }
    }
    Err(e)
}
