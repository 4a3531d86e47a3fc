//! `debug`: diagnostics for agents working on tuic itself. Disabled by default.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::mcp::registry::{CallCtx, ToolDef, ToolError, action, schema};
use crate::state::Node;

const ACTIONS: &[&str] = &["help", "logs", "mcp_sessions"];

const HELP: &str = "debug actions:\n\
- logs (source?, level?, limit? ≤ 2000): recent structured log records, newest last. Sources include mcp_initialize, mcp, auth, config.\n\
- mcp_sessions: counts of protocol sessions, streams, identities and retired ids.\n\
- help: this text.";

pub(super) static TOOL: ToolDef = ToolDef {
    name: "debug",
    summary: "Diagnostics: recent logs and MCP session counts",
    description: "Diagnostics for this node. Call action=help for the full usage guide.",
    actions: ACTIONS,
    schema: || {
        schema(
            ACTIONS,
            json!({"source": {"type": "string"}, "level": {"type": "string", "enum": ["error", "warn", "info", "debug", "trace"]},
                   "limit": {"type": "integer", "minimum": 1, "maximum": 2000}}),
        )
    },
    handler,
    exec: &[],
    passthrough: false,
};

fn handler(node: &Arc<Node>, _: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    match action("debug", ACTIONS, args)? {
        "help" => Ok(json!({"help": HELP})),
        "mcp_sessions" => Ok(node.mcp.sessions.stats()),
        _ => {
            let limit = args
                .get("limit")
                .and_then(Value::as_u64)
                .map(|l| l as usize)
                .unwrap_or(50)
                .min(crate::logs::RING_CAPACITY);
            let records = node.logs.query(
                args.get("source").and_then(Value::as_str),
                args.get("level").and_then(Value::as_str),
                limit,
            );
            Ok(json!({"records": records}))
        }
    }
}
