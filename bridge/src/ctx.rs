//! The CLI's context and failure: [`Ctx`] (socket, deadline, identity, and the IPC and MCP
//! round trips every command makes) and [`Failure`] (why a command failed, which decides the
//! exit code). The command modules (`cli`, `termcmd`, `trust`, `acpcmd`, `notifycmd`,
//! `mcpcmd`) all build on it; it knows none of them.

use std::time::Duration;

use serde_json::{Value, json};
use tuic_proto::ipc_http::{Request, Response};

use crate::ipc::{IpcError, request_sync};
use crate::locate::Target;
use crate::mcp::{self, DEFAULT_PROTOCOL_VERSION, McpHeaders};

/// Exit code: the command failed (the node refused it, or answered badly).
pub const EXIT_FAILED: u8 = 1;
/// Exit code: bad usage (clap's own code).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: no node is listening on the selected socket.
pub const EXIT_NOT_RUNNING: u8 = 3;
/// Exit code: the node runs but lacks what the command needs (route or MCP endpoint/tool).
pub const EXIT_UNAVAILABLE: u8 = 4;

/// Why a command failed, which decides the exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    NotRunning(String),
    Unavailable(String),
    Failed(String),
    Usage(String),
}

impl Failure {
    pub(crate) fn code(&self) -> u8 {
        match self {
            Self::Failed(_) => EXIT_FAILED,
            Self::Usage(_) => EXIT_USAGE,
            Self::NotRunning(_) => EXIT_NOT_RUNNING,
            Self::Unavailable(_) => EXIT_UNAVAILABLE,
        }
    }
    pub(crate) fn message(&self) -> &str {
        match self {
            Self::NotRunning(m) | Self::Unavailable(m) | Self::Failed(m) | Self::Usage(m) => m,
        }
    }
}

/// What every command talks through: the selected socket, the answer deadline and this
/// terminal's identity (`TUIC_SESSION`), with the IPC and MCP round trips over them.
pub(crate) struct Ctx {
    pub(crate) target: Target,
    pub(crate) timeout: Duration,
    pub(crate) tuic_session: Option<String>,
}

impl Ctx {
    fn ipc_failure(&self, e: IpcError) -> Failure {
        match &e {
            IpcError::NotRunning { .. } => Failure::NotRunning(format!(
                "tuic node not running ({}): nothing listens on {}{}",
                self.target.instance_label(),
                self.target.socket.display(),
                if self.target.from_env {
                    " (from TUIC_SOCKET)"
                } else {
                    ""
                }
            )),
            _ => Failure::Failed(e.to_string()),
        }
    }

    pub(crate) fn send(&self, req: &Request) -> Result<Response, Failure> {
        request_sync(&self.target.socket, req, self.timeout).map_err(|e| self.ipc_failure(e))
    }

    /// GET a JSON route; a 404 means the node does not serve it.
    pub(crate) fn get_json(&self, path: &str, needs: &str) -> Result<Value, Failure> {
        let resp = self.send(&Request::new("GET", path))?;
        if resp.status() == 404 {
            return Err(Failure::Unavailable(format!(
                "the node does not serve GET {path} (404: {}); it needs {needs}",
                mcp::error_text(&resp)
            )));
        }
        if !(200..300).contains(&resp.status()) {
            return Err(Failure::Failed(format!(
                "GET {path} failed: {} {}",
                resp.status(),
                mcp::error_text(&resp)
            )));
        }
        resp.json()
            .map_err(|e| Failure::Failed(format!("GET {path}: the node sent invalid JSON: {e}")))
    }

    /// One POST /mcp round trip; returns the JSON-RPC response for `msg` (if it has an id).
    fn mcp_post(
        &self,
        session_id: Option<&str>,
        msg: &Value,
    ) -> Result<(Response, Option<Value>), Failure> {
        let headers = McpHeaders {
            session_id,
            tuic_session: self.tuic_session.as_deref(),
            protocol_version: DEFAULT_PROTOCOL_VERSION,
        };
        let resp = self.send(&headers.post(msg))?;
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("?");
        match resp.status() {
            200..=299 => {}
            404 => {
                return Err(Failure::Unavailable(format!(
                    "the node's MCP endpoint is unavailable: POST /mcp answered 404 ({})",
                    mcp::error_text(&resp)
                )));
            }
            s => {
                return Err(Failure::Failed(format!(
                    "POST /mcp ({method}) failed: {s} {}",
                    mcp::error_text(&resp)
                )));
            }
        }
        let Some(id) = msg.get("id") else {
            return Ok((resp, None));
        };
        let msgs = mcp::rpc_messages(&resp)
            .map_err(|e| Failure::Failed(format!("POST /mcp ({method}): {e}")))?;
        let found = mcp::find_response(&msgs, id).cloned().ok_or_else(|| {
            Failure::Failed(format!("POST /mcp ({method}): no response in the answer"))
        })?;
        Ok((resp, Some(found)))
    }

    /// initialize → notifications/initialized → tools/call → DELETE; returns the call result.
    pub(crate) fn call_tool(&self, tool: &str, arguments: Value) -> Result<Value, Failure> {
        self.call_tool_after(None, tool, arguments)
    }

    /// Sends mail as this terminal's identity (`TUIC_SESSION`), or, from a shell outside any
    /// session, as the transient peer `tuic-cli` registered for this one call.
    pub(crate) fn send_mail(&self, to: &str, message: &str) -> Result<Value, Failure> {
        let send = json!({"action": "send", "to": to, "message": message});
        match self.tuic_session {
            Some(_) => self.call_tool("agent", send),
            None => self.call_tool_after(
                Some(("agent", json!({"action": "register", "name": "tuic-cli"}))),
                "agent",
                send,
            ),
        }
    }

    /// [`Ctx::call_tool`], with `first` called in the same protocol session beforehand.
    fn call_tool_after(
        &self,
        first: Option<(&str, Value)>,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, Failure> {
        let init = mcp::rpc_request(
            json!(1),
            "initialize",
            json!({
                "protocolVersion": DEFAULT_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": mcp::client_info("tuic-cli"),
            }),
        );
        let (resp, answer) = self.mcp_post(None, &init)?;
        let answer = answer.unwrap_or(Value::Null);
        if let Some(err) = answer.get("error") {
            return Err(Failure::Failed(format!(
                "the node refused initialize: {}",
                rpc_error_text(err)
            )));
        }
        let sid = resp
            .head
            .header(tuic_proto::mcp::SESSION_HEADER)
            .map(str::to_owned);
        let sid = sid.as_deref();
        self.mcp_post(
            sid,
            &mcp::rpc_notification("notifications/initialized", None),
        )?;
        let outcome = (|| {
            if let Some((t, args)) = &first {
                let pre = mcp::rpc_request(
                    json!(2),
                    "tools/call",
                    json!({"name": t, "arguments": args}),
                );
                let (_, answer) = self.mcp_post(sid, &pre)?;
                let answer = answer.unwrap_or(Value::Null);
                if let Some(err) = answer.get("error") {
                    return Err(Failure::Failed(format!("{t}: {}", rpc_error_text(err))));
                }
                if answer.pointer("/result/isError") == Some(&json!(true)) {
                    return Err(Failure::Failed(format!(
                        "{t}: {}",
                        content_text(&answer["result"])
                    )));
                }
            }
            let call = mcp::rpc_request(
                json!(3),
                "tools/call",
                json!({"name": tool, "arguments": arguments}),
            );
            self.mcp_post(sid, &call)
        })();
        if sid.is_some() {
            let headers = McpHeaders {
                session_id: sid,
                tuic_session: self.tuic_session.as_deref(),
                protocol_version: DEFAULT_PROTOCOL_VERSION,
            };
            // Releasing the protocol session is a courtesy; the node reaps it anyway.
            let _ = request_sync(
                &self.target.socket,
                &headers.delete(),
                Duration::from_secs(2),
            );
        }
        let answer = outcome?.1.unwrap_or(Value::Null);
        if let Some(err) = answer.get("error") {
            let code = err.get("code").and_then(Value::as_i64);
            let text = rpc_error_text(err);
            // Unknown tool / method: the node lacks the feature rather than refusing input.
            if code == Some(tuic_proto::mcp::METHOD_NOT_FOUND)
                || (code == Some(tuic_proto::mcp::INVALID_PARAMS) && text.contains("nknown tool"))
            {
                return Err(Failure::Unavailable(format!(
                    "the node does not offer MCP tool {tool:?}: {text}"
                )));
            }
            return Err(Failure::Failed(format!("{tool}: {text}")));
        }
        let result = answer.get("result").cloned().unwrap_or(Value::Null);
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            return Err(Failure::Failed(format!(
                "{tool}: {}",
                content_text(&result)
            )));
        }
        Ok(result)
    }
}

pub(crate) fn rpc_error_text(err: &Value) -> String {
    let msg = err
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("error");
    match err.get("code").and_then(Value::as_i64) {
        Some(c) => format!("{msg} (code {c})"),
        None => msg.to_owned(),
    }
}

/// The text items of a tool result's `content`, joined by newlines.
pub(crate) fn content_text(result: &Value) -> String {
    result
        .get("content")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_else(|| result.to_string())
}

pub(crate) fn print_result(result: &Value) {
    let text = content_text(result);
    if !text.is_empty() {
        outln!("{text}");
    }
}
