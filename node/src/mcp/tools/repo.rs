//! `repo`: registered repositories and their worktrees. The repository registry is its own
//! issue; this file owns the surface and the removed-action routes.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::mcp::registry::{CallCtx, ToolDef, ToolError, action, schema};
use crate::state::Node;

const ACTIONS: &[&str] = &[
    "add",
    "list",
    "active",
    "status",
    "worktree_create",
    "worktree_list",
    "worktree_remove",
    "worktree_lifecycle",
    "branch_list",
    "branch_create",
    "progress_list",
    "orphan_cleanup_answer",
];

const REMOVED: &[(&str, &str)] = &[
    ("prs", "GET /repo/prs"),
    ("issues", "GET /repo/issues"),
    ("close_issue", "POST /repo/issues/close"),
    ("reopen_issue", "POST /repo/issues/reopen"),
    ("ci_logs", "GET /repo/ci-failure-logs"),
];

pub(super) static TOOL: ToolDef = ToolDef {
    name: "repo",
    summary: "Repositories, worktrees and branches known to this node",
    description: "Repositories (path = repository root) and linked worktrees (branch).\n\
- add (path), list, active, status (path).\n\
- worktree_create (path, branch, spawn_session?), worktree_list (path), worktree_remove (path, branch), worktree_lifecycle (path, branch).\n\
- branch_list (path), branch_create (path, branch).\n\
- progress_list (path): recent progress records.\n\
- orphan_cleanup_answer (path, decision=remove|keep): answer the open orphan cleanup dialog.",
    actions: ACTIONS,
    schema: || {
        schema(
            ACTIONS,
            json!({"path": {"type": "string"}, "branch": {"type": "string"},
                   "spawn_session": {"type": "boolean"},
                   "decision": {"type": "string", "enum": ["remove", "keep"]}}),
        )
    },
    handler,
    blocking: &["add", "worktree_create", "worktree_remove", "branch_create"],
    passthrough: false,
};

fn handler(_: &Arc<Node>, _: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let raw = args.get("action").and_then(Value::as_str).unwrap_or("");
    if let Some((a, r)) = REMOVED.iter().find(|(a, _)| *a == raw) {
        return Err(ToolError::removed("repo", a, r));
    }
    let a = action("repo", ACTIONS, args)?;
    Err(ToolError::not_available(
        "repo",
        a,
        "the repository registry, not built yet",
    ))
}
