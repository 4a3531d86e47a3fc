//! `progress`: compact progress reporting into the journal. Gated by `progress_tracking` too.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::mcp::registry::{CallCtx, ToolDef, ToolError};
use crate::state::Node;

pub(super) static TOOL: ToolDef = ToolDef {
    name: "progress",
    summary: "Report what you are doing, briefly, to the progress journal",
    description: "Report progress: summary (one line), status (working|blocked|done), path (repository root, optional).",
    actions: &[],
    schema: || {
        json!({"type": "object", "properties": {
            "summary": {"type": "string", "maxLength": 500},
            "status": {"type": "string", "enum": ["working", "blocked", "done"]},
            "path": {"type": "string"}
        }, "required": ["summary"]})
    },
    handler,
    blocking: &[],
    passthrough: false,
};

fn handler(_: &Arc<Node>, _: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    if !args.get("summary").is_some_and(Value::is_string) {
        return Err(ToolError::invalid("progress: summary is required"));
    }
    Err(ToolError::not_available(
        "progress",
        "record",
        "the progress journal, not built yet",
    ))
}
