//! `remote`: the sessions of connected nodes (hub federation). Not in a plain node build.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::mcp::registry::{CallCtx, ToolDef, ToolError, action, schema};
use crate::state::Node;

const ACTIONS: &[&str] = &["list", "status"];

pub(super) static TOOL: ToolDef = ToolDef {
    name: "remote",
    summary: "Connected remote nodes and their sessions (hub)",
    description: "Remote nodes connected to this hub.\n- list: connections with state and session counts.\n- status (connection_id): one connection's link state.",
    actions: ACTIONS,
    schema: || schema(ACTIONS, json!({"connection_id": {"type": "string"}})),
    handler,
    blocking: &[],
    passthrough: false,
};

fn handler(_: &Arc<Node>, _: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let a = action("remote", ACTIONS, args)?;
    Err(ToolError::not_available(
        "remote",
        a,
        "hub federation (peer links), not built yet",
    ))
}
