//! Calls addressed to another host, plugged into the node through `tuic_node::ext`: the
//! [`SessionSource`] (the mirrored rows that `GET /sessions` and MCP `session action=list`
//! list after the hub's own) and the [`HostRouter`] (the MCP `session` tool on
//! `<connection_id>/<session>`, repositories on `<connection_id>:/path` — see
//! [`crate::remote_git`] — and the `remote` tool's connection rows).
//!
//! A routed call goes over the owner's authenticated HTTP routes (the hub's proxy path, with
//! the node's token) — never over the peer link, which carries mail only. `output` forwards
//! `format=mcp`/`mcp_raw` to the node's own output route, so the node's cursor, paging,
//! redaction and exited-session contract holds unchanged; `input` and `submit` use the node's
//! `POST /sessions/{id}/input` and `/submit` (the same code as its MCP actions); `status`
//! reads the mirrored row. Other actions are refused with the list of routed ones. MCP
//! resources of remote sessions (`tuic://hosts/{connection}/…`) are read with a sessionless
//! `resources/read` on the owner's `/mcp` (`mcp_request`), so its redaction holds too.

use std::time::Duration;

use serde_json::{Map, Value, json};
use tuic_node::ext::GitError;
use tuic_node::ext::{
    HostRouter, RemoteRow, RepoCall, RouteFuture, Routed, SessionCall, SessionSource, ToolError,
};
use tuic_proto::peer::{Address, LOCAL, parse_address};

use crate::connections::describe;
use crate::federation::Federation;

/// Longest remote session call (a submit waits up to 10 s for its acknowledgement).
const REMOTE_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Actions a hub routes to a remote session's owner.
const ROUTED: &[&str] = &["output", "input", "submit", "status"];

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

impl Federation {
    /// Calls the owner's route `method path_and_query` with the connection's token.
    /// `Ok((status, body))`, or `Err` naming the connection when it is unknown or unreachable.
    pub(crate) async fn call_owner(
        &self,
        connection: &str,
        method: &str,
        path_and_query: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), ToolError> {
        let Some(conn) = self.get(connection) else {
            return Err(ToolError::new(
                "unknown_connection",
                format!("unknown connection {connection}"),
            )
            .with("connection", json!(connection)));
        };
        let unavailable = |why: &str| {
            ToolError::new(
                "owner_unavailable",
                format!("connection {connection} is unavailable: {why}"),
            )
            .with("connection", json!(connection))
        };
        if !conn.snapshot().up {
            return Err(unavailable("not connected"));
        }
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|_| ToolError::invalid("bad method"))?;
        // The node's own token, never the caller's credential.
        let mut req = self
            .http
            .request(method, format!("{}{path_and_query}", conn.url))
            .header(reqwest::header::COOKIE, conn.cookie())
            .timeout(REMOTE_CALL_TIMEOUT);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.map_err(|e| unavailable(&describe(&e)))?;
        let status = r.status().as_u16();
        let v = r.json::<Value>().await.unwrap_or(Value::Null);
        Ok((status, v))
    }
}

impl SessionSource for Federation {
    fn rows(&self) -> Vec<RemoteRow> {
        self.remote_rows()
    }

    fn revision(&self) -> u64 {
        self.feed().revision()
    }

    fn changes(&self, since: u64) -> Option<tuic_node::ext::Delta> {
        self.feed().since(since)
    }
}

impl HostRouter for Federation {
    fn session<'a>(&'a self, call: SessionCall<'a>) -> RouteFuture<'a, Result<Routed, ToolError>> {
        Box::pin(session_action(self, call))
    }

    fn repo<'a>(&'a self, call: RepoCall<'a>) -> RouteFuture<'a, Result<Value, GitError>> {
        Box::pin(crate::remote_git::action(self, call))
    }

    fn connections(&self) -> Vec<Value> {
        self.connection_rows()
    }

    fn mcp_request<'a>(
        &'a self,
        connection: &'a str,
        request: Value,
    ) -> RouteFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            // The owner's `/mcp`, sessionless, with the node's token (as every routed call).
            let (status, body) = self
                .call_owner(connection, "POST", "/mcp", Some(request))
                .await?;
            if status == 200 && body.is_object() {
                return Ok(body);
            }
            Err(ToolError::new(
                "remote_error",
                format!("{connection}: the owner's /mcp answered {status}"),
            )
            .with("connection", json!(connection))
            .with("status", json!(status)))
        })
    }
}

/// Routes one `session` call whose `session_id` is an address naming no session here.
async fn session_action(fed: &Federation, call: SessionCall<'_>) -> Result<Routed, ToolError> {
    let SessionCall {
        action,
        address: id,
        args,
    } = call;
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
            let row = fed
                .remote_rows()
                .into_iter()
                .find(|r| r.connection_id == conn && r.session_id() == sid)
                .ok_or_else(|| {
                    ToolError::new(
                        "unknown_session",
                        format!("unknown session {id}; session action=list shows the live ones"),
                    )
                    .with("connection", json!(conn))
                })?;
            return Ok(Routed::Answered(row.to_value()));
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
            fed.call_owner(
                conn,
                "GET",
                &format!("/sessions/{}/output?{q}", enc(sid)),
                None,
            )
            .await?
        }
        _ => {
            let mut body: Map<String, Value> = args.clone();
            body.remove("action");
            body.remove("session_id");
            fed.call_owner(
                conn,
                "POST",
                &format!("/sessions/{}/{action}", enc(sid)),
                Some(Value::Object(body)),
            )
            .await?
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
