//! `remote`: this node's connections to other nodes (`list`, `status`), as the installed
//! `ext::HostRouter` lists them (a hub: the same state as `GET /hub/connections`). With no
//! router installed, a plain node, it answers `not_a_hub`.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::args;
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
    exec: &[],
    passthrough: false,
};

/// The typed arguments of `remote`'s actions (`crate::args`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Call {
    List {},
    Status {
        #[serde(default, deserialize_with = "args::string")]
        connection_id: Option<String>,
    },
}

fn handler(node: &Arc<Node>, _: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let a = action("remote", ACTIONS, args)?;
    let call: Call = args::action(a, args)?;
    let Some(remote) = node.ext.router() else {
        return Err(ToolError::new(
            "not_a_hub",
            format!("remote action={a} needs a hub (tuic-hub): this node has no connections"),
        ));
    };
    let connections = remote.connections();
    let id = match call {
        Call::List {} => return Ok(json!({"connections": connections})),
        Call::Status { connection_id } => connection_id
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ToolError::invalid("connection_id is required"))?,
    };
    connections
        .into_iter()
        .find(|c| c["id"] == id)
        .ok_or_else(|| {
            ToolError::new("unknown_connection", format!("unknown connection {id}"))
                .with("connection", json!(id))
        })
}
