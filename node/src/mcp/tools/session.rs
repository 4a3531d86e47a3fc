//! `session`: the PTY sessions of this node. The terminal core owns the sessions; this file
//! owns the MCP surface, the loopback-only rule and the removed-action routes. Until the
//! terminal core is merged every action that needs a PTY answers a structured
//! `not_available` error (never a fake success).

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::TERMINAL_CORE;
use crate::mcp::registry::{CallCtx, ToolDef, ToolError, action, schema};
use crate::state::Node;

const ACTIONS: &[&str] = &[
    "list",
    "create",
    "input",
    "submit",
    "output",
    "status",
    "wait",
    "resize",
    "rename",
    "close",
    "kill",
    "suspend",
    "keep_open",
    "declare_worktree",
    "pause",
    "resume",
];

/// Actions a non-loopback caller may not use.
const LOOPBACK_ONLY: &[&str] = &[
    "create", "submit", "input", "kill", "close", "pause", "resume",
];

pub(super) static TOOL: ToolDef = ToolDef {
    name: "session",
    summary: "List, create, drive and read this node's terminal sessions",
    description: "Terminal sessions (PTYs) on this node. session_id accepts the PTY id, the tuic_session or the alias (tu-1).\n\
- list: every session with alias, tuic_session, shell_state, agent_state, is_caller.\n\
- create: start a shell (rows, cols, cwd, shell, name). Local clients only.\n\
- input: raw write (input text and/or special_key); proves the write only, never a submission. Local clients only.\n\
- submit: one-call submission of input to a confirmed-idle agent with an empty composer; returns {ok, retry_safe, ack, ack_ms?, turn_epoch}; busy or half-typed sessions are refused before the first byte. timeout_ms 250-10000 (3000). Local clients only.\n\
- output: clean text by default (format=raw keeps escapes); pages with from_line/from_byte/next_cursor, deltas with since_cursor.\n\
- status: one session's state. wait: until=idle|exited, timeout_ms up to 300000.\n\
- resize (rows, cols), rename (name), close, kill (local clients only), pause/resume (local clients only).\n\
- suspend: ask the UI to end the PTY and keep the tab restorable; errors when no UI is attached.\n\
- keep_open (enabled): automatic idle closure of a managed child. declare_worktree (worktree_path): place the caller's own tab.",
    actions: ACTIONS,
    schema: || {
        schema(
            ACTIONS,
            json!({
                "session_id": {"type": "string", "description": "PTY id, tuic_session or alias"},
                "input": {"type": "string"},
                "special_key": {"type": "string", "enum": ["enter", "tab", "escape", "ctrl-c", "ctrl-d", "ctrl-u", "up", "down", "left", "right", "backspace"]},
                "pty_description": {"type": ["string", "null"]},
                "timeout_ms": {"type": "integer", "minimum": 0},
                "format": {"type": "string", "enum": ["text", "raw"]},
                "limit": {"type": "integer", "minimum": 1},
                "from_line": {"type": "integer", "minimum": 0},
                "from_byte": {"type": "integer", "minimum": 0},
                "since_cursor": {"type": "integer", "minimum": 0},
                "until": {"type": "string", "enum": ["idle", "exited"]},
                "rows": {"type": "integer", "minimum": 1},
                "cols": {"type": "integer", "minimum": 1},
                "cwd": {"type": "string"},
                "shell": {"type": "string"},
                "name": {"type": "string", "maxLength": 256},
                "enabled": {"type": "boolean"},
                "worktree_path": {"type": "string"}
            }),
        )
    },
    handler,
    blocking: &["create", "input", "close", "kill", "resize"],
    passthrough: false,
};

fn handler(
    _node: &Arc<Node>,
    ctx: &CallCtx,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    if args.get("action").and_then(Value::as_str) == Some("process_stats") {
        return Err(ToolError::removed(
            "session",
            "process_stats",
            "GET /process/stats",
        ));
    }
    let a = action("session", ACTIONS, args)?;
    if LOOPBACK_ONLY.contains(&a) && !ctx.loopback {
        return Err(ToolError::loopback_only("session", a));
    }
    Err(ToolError::not_available("session", a, TERMINAL_CORE))
}
