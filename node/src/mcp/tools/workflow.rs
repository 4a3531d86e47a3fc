//! `workflow_run` (graph starts, operator commands and execution history over
//! `crate::stories::workflow`) and `workflow_report` (a worker's durable attempt report).

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::mcp::registry::{CallCtx, Exec, ToolDef, ToolError, action, schema};
use crate::state::Node;
use crate::stories::workflow::RUN_ACTIONS;

pub(super) static RUN_TOOL: ToolDef = ToolDef {
    name: "workflow_run",
    summary: "Start story workflow graphs and read their execution history",
    description: "Workflow runs of your project. start_graph (target: {type: story, id}, expected_revision?, definition_id, definition_revision, request_id, limits?: {max_repairs, attempt_timeout_secs}) pins the published definition revision and the story's current revision; the story must be ready (approved). get (run_id), list (limit?), events (run_id, cursor?, limit?: a gapless page of the run's events by sequence). pause / resume / cancel (run_id, expected_sequence: the run's last sequence you saw). resume_graph (execution_id, activation_id, resolution) answers a worker's pending input (a human decision). Starting, pausing and cancelling need the local operator (not an agent session). Plan targets are unavailable in this build.",
    actions: RUN_ACTIONS,
    schema: || {
        schema(
            RUN_ACTIONS,
            json!({
                "target": {"type": "object", "properties": {"type": {"type": "string", "enum": ["story", "plan"]}, "id": {"type": "string"}}, "required": ["type", "id"]},
                "expected_revision": {"type": "integer"}, "definition_id": {"type": "string"},
                "definition_revision": {"type": "integer"}, "request_id": {"type": "string"},
                "limits": {"type": "object", "properties": {"max_repairs": {"type": "integer"}, "attempt_timeout_secs": {"type": "integer"}}},
                "run_id": {"type": "string"}, "cursor": {"type": "integer"}, "limit": {"type": "integer"},
                "expected_sequence": {"type": "integer"}, "execution_id": {"type": "string"},
                "activation_id": {"type": "string"}, "resolution": {"type": "string"},
                "project_path": {"type": "string", "description": "unbound local callers only"}
            }),
        )
    },
    handler: run_handler,
    exec: &[
        ("start_graph", Exec::Blocking),
        ("pause", Exec::Blocking),
        ("resume", Exec::Blocking),
        ("cancel", Exec::Blocking),
        ("resume_graph", Exec::Blocking),
        ("events", Exec::Blocking),
    ],
    passthrough: false,
};

/// The `input` object of a workflow tool: the stories service reads it into its own typed
/// request, so its refusals keep their codes.
fn input<'a>(tool: &str, args: &'a Map<String, Value>) -> Result<&'a Value, ToolError> {
    args.get("input")
        .ok_or_else(|| ToolError::invalid(format!("{tool}: input is required")))
}

fn run_handler(
    node: &Arc<Node>,
    ctx: &CallCtx,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    action("workflow_run", RUN_ACTIONS, args)?;
    let mut input = args.clone();
    let project_path = match input.remove("project_path") {
        None => None,
        Some(v) => crate::args::from_value::<Option<String>>(v)
            .map_err(|_| ToolError::invalid("project_path must be a string"))?,
    };
    let (project, actor) = crate::stories::resolve_caller(
        &node.planning,
        ctx.tuic_session.as_deref(),
        ctx.loopback,
        project_path.as_deref(),
        None,
    )
    .map_err(ToolError::from)?;
    crate::stories::workflow::run_action(&node.planning, &project, &actor, &Value::Object(input))
        .map_err(ToolError::from)
}

pub(super) static REPORT_TOOL: ToolDef = ToolDef {
    name: "workflow_report",
    summary: "Report a workflow attempt's outcome (workers only)",
    description: "A workflow worker's semantic report. Pass {input: AttemptReport} with contractVersion (1), runId, storyId, storyRevision, attemptId, generation (from your prompt or TUIC_RUN_ID / TUIC_ATTEMPT_ID / TUIC_ATTEMPT_GENERATION), outcome (completed | failed | needs_input), summary, criterionResults, evidence; needs_input requires inputRequest {question, options}; a reviewer adds review {decision, artifactDigest, findings}. Only the attempt's own worker session may report; the same report again returns the first result. Process exit is not a report.",
    actions: &[],
    schema: || {
        json!({"type": "object", "properties": {"input": {"type": "object", "properties": {
            "contractVersion": {"type": "integer"}, "runId": {"type": "string"}, "storyId": {"type": "string"},
            "storyRevision": {"type": "integer"}, "attemptId": {"type": "string"}, "generation": {"type": "integer"},
            "outcome": {"type": "string", "enum": ["completed", "failed", "needs_input"]}, "summary": {"type": "string"},
            "criterionResults": {"type": "array"}, "evidence": {"type": "array"},
            "inputRequest": {"type": "object"}, "review": {"type": "object"}
        }, "required": ["contractVersion", "runId", "storyId", "storyRevision", "attemptId", "generation", "outcome", "summary"]}},
        "required": ["input"], "additionalProperties": false})
    },
    handler: report_handler,
    exec: &[("", Exec::Blocking)], // it commits: the whole tool on the blocking pool
    passthrough: false,
};

fn report_handler(
    node: &Arc<Node>,
    ctx: &CallCtx,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    let input = input("workflow_report", args)?;
    crate::stories::runner::report(&node.planning, ctx.tuic_session.as_deref(), input)
        .map_err(ToolError::from)
}

pub(super) static LAUNCH_TOOL: ToolDef = ToolDef {
    name: "workflow_launch",
    summary: "Launch a workflow worker (the run's active coordinator only)",
    description: "The run's active coordinator launches a worker: {input: {runId, attemptId (your unique id), worktreePath (a linked worktree, not the main checkout), agentType (a launch your step pins), skills?, feedback?}}. Same input replays; a changed input under a used attemptId is refused. After its workflow_report you get a workflow_event mail; replay workflow_run events.",
    actions: &[],
    schema: || {
        json!({"type": "object", "properties": {"input": {"type": "object", "properties": {
            "runId": {"type": "string"}, "attemptId": {"type": "string"}, "worktreePath": {"type": "string"},
            "agentType": {"type": "string"}, "skills": {"type": "array", "items": {"type": "string"}},
            "feedback": {"type": "string"}
        }, "required": ["runId", "attemptId", "worktreePath", "agentType"]}},
        "required": ["input"], "additionalProperties": false})
    },
    handler: launch_handler,
    exec: &[("", Exec::Blocking)], // it spawns and commits
    passthrough: false,
};

fn launch_handler(
    node: &Arc<Node>,
    ctx: &CallCtx,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    let input = input("workflow_launch", args)?;
    crate::stories::coordinator::launch(
        &node.planning,
        ctx.tuic_session.as_deref(),
        ctx.loopback,
        input,
    )
    .map_err(ToolError::from)
}

pub(super) static STORY_CREATE_TOOL: ToolDef = ToolDef {
    name: "workflow_story_create",
    summary: "Propose a story into the run's plan (the active coordinator only)",
    description: "The run's active coordinator proposes a story into the run's plan (origin plan_step): {input: {runId, proposalKey, story: {title, description?, acceptance_criteria?, dependencies?}}}. The same key and story replays; a changed story is refused.",
    actions: &[],
    schema: || {
        json!({"type": "object", "properties": {"input": {"type": "object", "properties": {
            "runId": {"type": "string"}, "proposalKey": {"type": "string"},
            "story": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
        }, "required": ["runId", "proposalKey", "story"]}},
        "required": ["input"], "additionalProperties": false})
    },
    handler: story_create_handler,
    exec: &[("", Exec::Blocking)], // it commits
    passthrough: false,
};

fn story_create_handler(
    node: &Arc<Node>,
    ctx: &CallCtx,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    let input = input("workflow_story_create", args)?;
    crate::stories::coordinator::story_create(
        &node.planning,
        ctx.tuic_session.as_deref(),
        ctx.loopback,
        input,
    )
    .map_err(ToolError::from)
}
