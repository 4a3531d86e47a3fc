//! `story`: the native story service (`crate::stories`) over MCP. The input is
//! `{input: StoryAction}`; the project and the actor come from the bound caller (an unbound
//! local caller — the `tuic story` CLI — names them with `project_path` / `session_id`).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::args;
use crate::mcp::registry::{CallCtx, Exec, ToolDef, ToolError};
use crate::state::Node;
use crate::stories::StoryAction;
use crate::stories::service::{ACTION_NAMES, Ctx};

pub(super) static TOOL: ToolDef = ToolDef {
    name: "story",
    summary: "Read and change the project's revisioned stories",
    description: "Native stories of your project, revisioned. Pass {input: {action, ...}}. Reads: list (status?, plan_source?, limit?, cursor?), get (id), plan_view (plan_source?), events (cursor?, limit?: a gapless page of the story event log), list_plan_sources. Changes (each takes request_id?: the same id with the same payload returns the first result; another payload is refused): create (title, description?, acceptance_criteria?, dependencies?, plan_source?), update (id, expected_revision, title?, description?, acceptance_criteria?), transition (id, expected_revision, to: ready→in_progress claims it, in_progress→review, review→in_progress; other moves are administrative and need a human), add_dependency / remove_dependency (id, expected_revision, depends_on; cycles are refused; agents cannot remove), review (id, expected_revision, decision: approve|changes_requested, findings?: [{criterion, ok, note?}], note?), approve (= review with decision approve; backlog→ready, review→done; the author or claimer cannot approve), add_plan_source (path under plans/ or .claude/plans/), remove_plan_source (id). Every change needs expected_revision = the story's current revision.",
    actions: &[],
    schema: || {
        json!({"type": "object", "properties": {
            "input": {"type": "object", "description": "a StoryAction: {action, ...}", "properties": {
                "action": {"type": "string", "enum": ACTION_NAMES}
            }, "required": ["action"]},
            "project_path": {"type": "string", "description": "unbound local callers only (tuic story --project); ignored for a bound agent"},
            "session_id": {"type": "string", "description": "unbound local callers only (tuic story --session-id); ignored for a bound agent"}
        }, "required": ["input"], "additionalProperties": false})
    },
    handler,
    exec: &[("", Exec::Blocking)], // it commits: the whole tool on the blocking pool
    passthrough: false,
};

/// A story service error as a tool error with the same stable code (`story` and the
/// `workflow_*` tools).
impl From<crate::stories::StoryError> for ToolError {
    fn from(e: crate::stories::StoryError) -> Self {
        ToolError::new(e.code(), e.to_string())
    }
}

/// The typed arguments of `story` (`crate::args`): `input` is the story service's own typed
/// `StoryAction`, read by it so its refusals keep their codes.
#[derive(Debug, Deserialize)]
struct StoryArgs {
    #[serde(default)]
    input: Option<Value>,
    #[serde(default, deserialize_with = "args::string")]
    project_path: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    session_id: Option<String>,
}

fn handler(node: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let a: StoryArgs = args::parse(args)?;
    let input = a
        .input
        .ok_or_else(|| ToolError::invalid("story: input is required: {input: {action, ...}}"))?;
    let action = StoryAction::from_value(&input).map_err(ToolError::from)?;
    let (project, actor) = crate::stories::resolve_caller(
        &node.planning,
        ctx.tuic_session.as_deref(),
        ctx.loopback,
        a.project_path.as_deref(),
        a.session_id.as_deref(),
    )
    .map_err(ToolError::from)?;
    node.stories
        .execute(
            &Ctx {
                project,
                actor,
                now_ms: crate::logs::now_ms(),
            },
            action,
        )
        .map_err(ToolError::from)
}
