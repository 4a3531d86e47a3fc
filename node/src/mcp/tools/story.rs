//! `story`: the story journal. Not built yet.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::mcp::registry::{CallCtx, ToolDef, ToolError, action, schema};
use crate::state::Node;

const ACTIONS: &[&str] = &["get", "list", "create", "update", "transition"];

pub(super) static TOOL: ToolDef = ToolDef {
    name: "story",
    summary: "Read and update the project's stories",
    description: "Project stories.\n- get (id), list (path?, status?), create (title, body?), update (id, fields), transition (id, status).",
    actions: ACTIONS,
    schema: || {
        schema(
            ACTIONS,
            json!({"id": {"type": "string"}, "path": {"type": "string"}, "status": {"type": "string"},
                   "title": {"type": "string"}, "body": {"type": "string"}, "fields": {"type": "object"}}),
        )
    },
    handler,
    blocking: &["create", "update", "transition"],
    passthrough: false,
};

fn handler(_: &Arc<Node>, _: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let a = action("story", ACTIONS, args)?;
    Err(ToolError::not_available(
        "story",
        a,
        "the story journal, not built yet",
    ))
}
