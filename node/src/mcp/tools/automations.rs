//! `automations`: the definition-only contract over `crate::automations` (list, get, create,
//! update, pause, resume, delete). The creator is the MCP-bound identity, never the input.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::automations::{TOOL_ACTIONS, parse_action};
use crate::mcp::registry::{CallCtx, Exec, ToolDef, ToolError, action, schema};
use crate::state::Node;

pub(super) static TOOL: ToolDef = ToolDef {
    name: "automations",
    summary: "Scheduled automations: cron definitions that spawn an agent",
    description: "Automation definitions. Pass action at the top level. list returns an array; get (id) one definition; create (definition) and update (id, definition) take a complete definition with the stored snake_case fields {name, schedule (cron: 5 fields, or 6 with leading seconds), tz? (zone Europe/Berlin or offset +02:00; UTC when omitted), enabled?, prompt?, agent?: {command, args?, cwd?}}; pause / resume (id) edit only enabled; delete (id) removes the definition, not its run ledger. Mutations return {\"ok\": true}. Creation requires a bound agent session (it becomes created_by_session). A firing spawns agent with prompt as its task, or is only recorded when agent is absent. These actions manage definitions; they do not launch runs.",
    actions: TOOL_ACTIONS,
    schema: || {
        schema(
            TOOL_ACTIONS,
            json!({"id": {"type": "string"}, "definition": {"type": "object", "properties": {
                "name": {"type": "string"}, "schedule": {"type": "string"}, "tz": {"type": "string"}, "enabled": {"type": "boolean"},
                "prompt": {"type": "string"},
                "agent": {"type": "object", "properties": {"command": {"type": "string"}, "args": {"type": "array", "items": {"type": "string"}}, "cwd": {"type": "string"}}, "required": ["command"]}
            }, "required": ["name", "schedule"]}}),
        )
    },
    handler,
    exec: &[
        ("create", Exec::Blocking),
        ("update", Exec::Blocking),
        ("pause", Exec::Blocking),
        ("resume", Exec::Blocking),
        ("delete", Exec::Blocking),
    ],
    passthrough: false,
};

fn handler(node: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    action("automations", TOOL_ACTIONS, args)?;
    let act = parse_action(&Value::Object(args.clone()))
        .map_err(|e| ToolError::new(e.code(), e.to_string()))?;
    node.automations
        .execute(
            act,
            ctx.tuic_session.as_deref(),
            true,
            crate::logs::now_ms(),
        )
        .map_err(|e| ToolError::new(e.code(), e.to_string()))
}
