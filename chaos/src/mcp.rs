//! A minimal MCP client over a node's IPC socket, for the mail workload: `initialize`, then
//! `tools/call` of the `agent` tool. Each call opens its own connection, so a restarted node is
//! reached again without any state in the client but the protocol session id.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

/// What a tool call came back with.
#[derive(Debug, Clone)]
pub enum Call {
    /// The tool answered; `is_error` is the MCP `isError` flag, `value` the JSON it returned.
    Answer {
        /// Whether the tool refused.
        is_error: bool,
        /// The tool's JSON result or error object.
        value: Value,
    },
    /// No answer (connection refused or reset, timeout): the outcome is unknown.
    Uncertain(String),
}

/// One MCP protocol session on one node.
#[derive(Debug, Clone)]
pub struct Mcp {
    socket: PathBuf,
    session: String,
    /// Shared by every clone (a sender and a reader use one protocol session), so request ids
    /// stay unique within the session.
    next_id: Arc<AtomicU64>,
}

async fn post(
    socket: &Path,
    session: Option<&str>,
    body: &Value,
) -> anyhow::Result<(u16, Option<String>, Value)> {
    let mut b = hyper::Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        b = b.header("mcp-session-id", s);
    }
    let reply =
        tuic_tests::ipc_request(socket, b.body(Full::new(Bytes::from(body.to_string())))?).await?;
    let sid = reply
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let is_sse = reply
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let value = if is_sse {
        // The response is the last `data:` line that parses as JSON-RPC.
        String::from_utf8_lossy(&reply.body)
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .next_back()
            .unwrap_or(Value::Null)
    } else {
        serde_json::from_slice(&reply.body).unwrap_or(Value::Null)
    };
    Ok((reply.status, sid, value))
}

impl Mcp {
    /// Initializes a protocol session on the node behind `socket`.
    pub async fn connect(socket: &Path) -> anyhow::Result<Self> {
        let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},
            "clientInfo":{"name":"tuic-chaos","version":"1"}}});
        let (status, sid, v) =
            tokio::time::timeout(Duration::from_secs(10), post(socket, None, &init))
                .await
                .context("initialize timed out")??;
        if status != 200 {
            bail!("initialize answered {status}: {v}");
        }
        let session = sid.context("initialize returned no mcp-session-id")?;
        let note = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
        post(socket, Some(&session), &note).await?;
        Ok(Self {
            socket: socket.to_path_buf(),
            session,
            next_id: Arc::new(AtomicU64::new(2)),
        })
    }

    /// Calls a tool with a bound on the whole exchange.
    pub async fn call(&mut self, tool: &str, args: Value, limit: Duration) -> Call {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let msg = json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
            "params":{"name":tool,"arguments":args}});
        let r = tokio::time::timeout(limit, post(&self.socket, Some(&self.session), &msg)).await;
        let (status, _, v) = match r {
            Err(_) => return Call::Uncertain(format!("{tool} timed out after {limit:?}")),
            Ok(Err(e)) => return Call::Uncertain(format!("{e:#}")),
            Ok(Ok(x)) => x,
        };
        if status != 200 {
            return Call::Uncertain(format!("HTTP {status}: {v}"));
        }
        let Some(text) = v["result"]["content"][0]["text"].as_str() else {
            return Call::Uncertain(format!("no tool result: {v}"));
        };
        Call::Answer {
            is_error: v["result"]["isError"] == true,
            value: serde_json::from_str(text).unwrap_or_else(|_| json!({"text": text})),
        }
    }
}
