//! `plugin_dev_guide`: the plugin author's guide, served as text.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::mcp::registry::{CallCtx, ToolDef, ToolError};
use crate::state::Node;

const GUIDE: &str = "# Writing a tuic plugin\n\n\
A plugin is a directory with a `plugin.json` manifest ({id, name, version, entry, permissions}) and an \
ES module entry loaded by the UI. Plugins run in the browser UI, never in the node: they reach the node \
only through the documented HTTP routes (GET /sessions, GET /events, POST /sessions/{id}/write, ...) \
with the UI's credentials.\n\n\
1. Pick a stable id (reverse-DNS style) and declare only the permissions you use.\n\
2. Export `activate(ctx)`; subscribe to events with `ctx.events.on(name, fn)` and unsubscribe in `deactivate()`.\n\
3. Keep state in `ctx.storage` (per plugin, JSON); never write config.json.\n\
4. Never log tokens or terminal output that may hold secrets.\n\
5. Test against a node started with a temporary --config-dir.\n";

pub(super) static TOOL: ToolDef = ToolDef {
    name: "plugin_dev_guide",
    summary: "The guide for writing tuic UI plugins",
    description: "Returns the plugin author's guide (manifest, lifecycle, permissions, testing). No arguments.",
    actions: &[],
    schema: || json!({"type": "object", "properties": {}}),
    handler,
    exec: &[],
    passthrough: false,
};

fn handler(_: &Arc<Node>, _: &CallCtx, _: &Map<String, Value>) -> Result<Value, ToolError> {
    Ok(json!({"guide": GUIDE}))
}
