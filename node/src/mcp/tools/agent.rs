//! `agent`: peer identity and mail between agents. The mail system is its own issue; this file
//! owns the surface, the loopback-only rule, the identity-scoped refusals with their next step
//! and the removed-action routes.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::MAIL;
use crate::mcp::registry::{CallCtx, ToolDef, ToolError, action, schema};
use crate::state::Node;

const ACTIONS: &[&str] = &["register", "list_peers", "send", "inbox", "wait", "spawn"];
const LOOPBACK_ONLY: &[&str] = &["register", "list_peers", "send", "inbox", "spawn"];
/// Actions that act as the caller and so need a protocol session.
const IDENTITY_SCOPED: &[&str] = &["register", "send", "inbox", "wait"];

pub(super) static TOOL: ToolDef = ToolDef {
    name: "agent",
    summary: "Agent identity, peer discovery and mail between agents",
    description: "Agents talk through mail. Your identity is bound automatically when your terminal's TUIC_SESSION reaches the server; otherwise call register.\n\
- register (name?, path?): declare or rename this agent; returns tuic_session. Local clients only.\n\
- list_peers (path?): other registered agents with their addresses. Local clients only.\n\
- send (to, message): deliver mail; to accepts a peer id, alias or <connection>/<peer> address. Local clients only.\n\
- inbox (since?, limit?): read mail; {message_id, from, from_name?, message, timestamp_ms, kind?}. Local clients only.\n\
- wait (since?, timeout_ms up to 300000): block until mail arrives.\n\
- spawn (command, cwd, name?, keep_open?): start a child agent; returns session_id and a task_id to poll with task action=get.\n\
Orchestrators: children report results with send; read them with inbox or wait, not with session output.",
    actions: ACTIONS,
    schema: || {
        schema(
            ACTIONS,
            json!({
                "name": {"type": "string"},
                "path": {"type": "string", "description": "repository root"},
                "to": {"type": "string"},
                "message": {"type": "string", "maxLength": 65536},
                "since": {"type": "integer", "minimum": 0},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                "timeout_ms": {"type": "integer", "minimum": 0, "maximum": 300000},
                "command": {"type": "string"},
                "cwd": {"type": "string"},
                "keep_open": {"type": "boolean"},
                "pty_description": {"type": ["string", "null"]}
            }),
        )
    },
    handler,
    blocking: &["spawn", "send"],
    passthrough: false,
};

fn handler(
    _node: &Arc<Node>,
    ctx: &CallCtx,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    match args.get("action").and_then(Value::as_str) {
        Some("detect") => return Err(ToolError::removed("agent", "detect", "GET /agents")),
        Some("stats") => return Err(ToolError::removed("agent", "stats", "GET /stats")),
        Some("metrics") => return Err(ToolError::removed("agent", "metrics", "GET /metrics")),
        _ => {}
    }
    let a = action("agent", ACTIONS, args)?;
    if LOOPBACK_ONLY.contains(&a) && !ctx.loopback {
        return Err(ToolError::loopback_only("agent", a));
    }
    if IDENTITY_SCOPED.contains(&a) && ctx.mcp_session.is_none() {
        let next = if a == "register" {
            "send initialize first (POST /mcp method=initialize) and pass the Mcp-Session-Id it returns"
        } else {
            "send initialize first and pass its Mcp-Session-Id, then call agent action=register (or start from a TUIC terminal so TUIC_SESSION binds you)"
        };
        return Err(ToolError::new(
            "no_protocol_session",
            format!(
                "agent action={a} acts as the caller and needs an MCP protocol session; {next}"
            ),
        )
        .with("next_step", json!(next)));
    }
    Err(ToolError::not_available("agent", a, MAIL))
}
