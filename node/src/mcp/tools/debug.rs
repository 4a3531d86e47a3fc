//! `debug`: diagnostics for agents working on tuic itself. Disabled by default.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::args;
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

/// The typed arguments of `debug`'s actions (`crate::args`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Call {
    Help {},
    McpSessions {},
    Logs(LogsArgs),
}

#[derive(Debug, Deserialize)]
struct LogsArgs {
    #[serde(default, deserialize_with = "args::string")]
    source: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    level: Option<String>,
    #[serde(default, deserialize_with = "args::uint")]
    limit: Option<u64>,
}

fn handler(node: &Arc<Node>, _: &CallCtx, a: &Map<String, Value>) -> Result<Value, ToolError> {
    match args::action(action("debug", ACTIONS, a)?, a)? {
        Call::Help {} => Ok(json!({"help": HELP})),
        Call::McpSessions {} => Ok(node.mcp.sessions.stats()),
        Call::Logs(l) => {
            let limit = l
                .limit
                .map_or(50, |l| usize::try_from(l).unwrap_or(usize::MAX))
                .min(crate::logs::RING_CAPACITY);
            let records = node
                .logs
                .query(l.source.as_deref(), l.level.as_deref(), limit);
            Ok(json!({"records": records}))
        }
    }
}
