//! `repo`: registered repositories and their worktrees. `add`/`list` are the same service as
//! `POST /repos` / `GET /repos` (`crate::repos`, the path `tuic open DIR` takes); `status` and
//! `active` read that registry plus the live sessions. Worktree, branch-integration and
//! orphan-cleanup actions are thin adapters over the git service (`crate::git`, see
//! `repo_git.rs`), the same core as `POST /worktrees` and `/repo/*`. This file also owns the
//! removed-action routes.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::args;
use crate::mcp::registry::{CallCtx, Exec, ToolDef, ToolError, ToolFuture, action, schema};
use crate::repos::{AddError, Repo};
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
    "branch_integrations",
    "branch_integration",
    "branch_delete",
    "progress_list",
    "orphan_cleanup_answer",
    "diff_summary",
    "diff_file",
];

const REMOVED: &[(&str, &str)] = &[
    ("prs", "GET /repo/prs"),
    ("issues", "GET /repo/issues"),
    ("close_issue", "POST /repo/issues/close"),
    ("reopen_issue", "POST /repo/issues/reopen"),
    ("ci_logs", "GET /repo/ci-failure-logs"),
    ("branch_list", "repo action=branch_integrations"),
    ("branch_create", "repo action=worktree_create"),
];

pub(super) static TOOL: ToolDef = ToolDef {
    name: "repo",
    summary: "Repositories, worktrees and branches known to this node",
    description: "Repositories (path = repository root) and linked worktrees (branch).\n\
- add (path: absolute directory; idempotent, Git or shell workspace), list, active (the repository of the caller's terminal), status (path: record plus live sessions inside it).\n\
- worktree_create (path, branch?, base?, spawn_session?): a linked worktree in <repo>__wt/<branch> (= POST /worktrees), with setup_script and warm_artifacts results.\n\
- worktree_list (path): every worktree keyed by branch with lifecycle_status {dirty_files, missing_checkout, commit_status merged|unmerged|in_sync|unknown, removal_safety safe|requires_force|unknown, locked, fingerprint}.\n\
- worktree_lifecycle (path, branch): the fresh verdict and fingerprint of one worktree.\n\
- worktree_remove (path, branch, force?, expected_fingerprint?, delete_branch?, override_lock?): refuses dirty work unless force (which needs expected_fingerprint), locked worktrees unless override_lock; returns {ok, warnings}.\n\
- branch_integrations (path) / branch_integration (path, branch): proofs ancestry, integration_ancestry, patch_equivalence, squash_message, noop_merge, content_superset, github_pr (needs a token).\n\
- branch_delete (path, branch, archive?): deletes an integrated local branch not checked out anywhere, keeping its tip under refs/archive/<branch>; archive=true also deletes an unmerged one recoverably.\n\
- progress_list (path, input?: {blockedOnly?, ptyId?, limit? 1-100 default 8, cursor?}): the project's progress journal, newest first: {entries, total, nextCursor} (nextCursor null on the final page).\n\
- orphan_cleanup_answer (path, decision=remove|keep): answer the open orphan cleanup dialog.\n\
- diff_summary (path: worktree or root, branch?, base?, offset?, limit?): files changed since the merge-base (+/-), commits, uncommitted apart.\n\
- diff_file (path, file, uncommitted?, ...): one file's diff; binary and huge summarised.",
    actions: ACTIONS,
    schema: || {
        schema(
            ACTIONS,
            json!({"path": {"type": "string"}, "branch": {"type": "string"},
                   "base": {"type": "string"},
                   "spawn_session": {"type": "boolean"},
                   "force": {"type": "boolean"},
                   "expected_fingerprint": {"type": "string"},
                   "delete_branch": {"type": "boolean"},
                   "override_lock": {"type": "boolean"},
                   "archive": {"type": "boolean"},
                   "decision": {"type": "string", "enum": ["remove", "keep"]},
                   "file": {"type": "string"},
                   "uncommitted": {"type": "boolean"},
                   "offset": {"type": "integer"},
                   "limit": {"type": "integer"},
                   "input": crate::progress::list_input_schema()}),
        )
    },
    handler,
    exec: &[
        ("*", Exec::Async(serve_async)),
        ("add", Exec::Blocking),
        ("list", Exec::Blocking),
        ("status", Exec::Blocking),
        ("active", Exec::Blocking),
        ("worktree_create", Exec::Blocking),
        ("worktree_list", Exec::Blocking),
        ("worktree_remove", Exec::Blocking),
        ("worktree_lifecycle", Exec::Blocking),
        ("branch_integrations", Exec::Blocking),
        ("branch_integration", Exec::Blocking),
        ("branch_delete", Exec::Blocking),
        ("orphan_cleanup_answer", Exec::Blocking),
        ("diff_summary", Exec::Blocking),
        ("diff_file", Exec::Blocking),
    ],
    passthrough: false,
};

/// The `repo` actions served from this node's registry of repositories; every other action is
/// the git service's (`repo_git.rs`), and routable to another host.
pub(super) const REGISTRY_ACTIONS: &[&str] = &["add", "list", "status", "active", "progress_list"];

/// Every `repo` call (`Exec::Async` in `TOOL`): a git action on another host's repository is
/// awaited through the router (`repo_git::route`); the rest is served here by [`handler`]
/// (blocking actions on the blocking pool).
pub(super) fn serve_async(node: Arc<Node>, ctx: CallCtx, args: Map<String, Value>) -> ToolFuture {
    Box::pin(async move {
        if let Ok(a) = action("repo", ACTIONS, &args)
            && let Some(answer) = super::repo_git::route(&node, a, &args).await
        {
            return answer;
        }
        crate::mcp::registry::run_here(&node, &ctx, &TOOL, args).await
    })
}

fn handler(node: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let raw = args.get("action").and_then(Value::as_str).unwrap_or("");
    if let Some((a, r)) = REMOVED.iter().find(|(a, _)| *a == raw) {
        return Err(ToolError::removed("repo", a, r));
    }
    let a = action("repo", ACTIONS, args)?;
    match a {
        "add" => add(node, args),
        "list" => Ok(json!({"repos": repos(node)?})),
        "status" => {
            let path = path_arg(args)?;
            let canon = std::fs::canonicalize(&path)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| path.clone());
            let repo = repos(node)?
                .into_iter()
                .find(|r| r.path == canon)
                .ok_or_else(|| {
                    ToolError::new(
                        "unknown_repository",
                        format!("{path} is not a registered repository; register it with repo action=add"),
                    )
                })?;
            Ok(status(node, &repo))
        }
        "active" => active(node, ctx),
        "progress_list" => progress_list(node, args),
        "diff_summary" | "diff_file" => super::repo_diff::handle(node, a, args),
        _ => super::repo_git::handle(node, ctx, a, args),
    }
}

/// `progress_list`: the same service and shapes as `POST /progress/list`.
fn progress_list(node: &Node, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let path = path_arg(args)?;
    let err = |e: crate::progress::ListError| match e {
        crate::progress::ListError::Invalid(m) => ToolError::invalid(m),
        e => ToolError::new("store_error", e.to_string()),
    };
    let input = crate::progress::ListInput::from_value(args.get("input")).map_err(err)?;
    node.progress.list(&path, &input).map_err(err)
}

/// The `path` every `repo` action reads (`crate::args`): a repository root, or a worktree.
#[derive(Debug, Deserialize)]
struct PathArg {
    #[serde(default, deserialize_with = "args::string")]
    path: Option<String>,
}

/// The required, non-empty `path` of a `repo` call.
pub(super) fn path_arg(args: &Map<String, Value>) -> Result<String, ToolError> {
    args::parse::<PathArg>(args)?
        .path
        .filter(|p| !p.is_empty())
        .ok_or_else(|| ToolError::invalid("path is required (an absolute directory)"))
}

fn repos(node: &Node) -> Result<Vec<Repo>, ToolError> {
    node.repos
        .list()
        .map_err(|e| ToolError::new("store_error", format!("reading the repositories: {e:#}")))
}

fn add(node: &Arc<Node>, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let path = path_arg(args)?;
    let outcome = node
        .repos
        .add(&path, &node.bus, crate::logs::now_ms())
        .map_err(|e| match e {
            AddError::InvalidPath(_) => ToolError::new("invalid_path", e.to_string()),
            AddError::Persist(_) => ToolError::new("persist_failed", e.to_string()),
        })?;
    serde_json::to_value(outcome).map_err(|e| ToolError::new("internal", e.to_string()))
}

/// The record plus the live sessions whose start directory lies inside it.
fn status(node: &Node, repo: &Repo) -> Value {
    let root = Path::new(&repo.path);
    // Its linked worktrees live beside it (`<repo>__wt/`); a session there, or placed there,
    // works in this repository too.
    let wt = crate::git::worktree::worktrees_dir(root);
    let sessions: Vec<Value> = node
        .sessions
        .rows()
        .into_iter()
        .filter(|r| {
            let cwd = Path::new(&r.cwd);
            cwd.starts_with(root)
                || cwd.starts_with(&wt)
                || r.worktree_path
                    .as_deref()
                    .is_some_and(|p| Path::new(p).starts_with(&wt))
        })
        .map(|r| {
            let mut v = json!({"session_id": r.session_id, "alias": r.alias, "tuic_session": r.tuic_session});
            if let Some(p) = &r.worktree_path {
                v["worktree_path"] = json!(p);
            }
            v
        })
        .collect();
    json!({"repo": repo, "sessions": sessions})
}

/// The repository of the caller's own terminal (the innermost registered root holding its
/// start directory).
fn active(node: &Node, ctx: &CallCtx) -> Result<Value, ToolError> {
    let Some(own) = ctx
        .tuic_session
        .as_deref()
        .and_then(|t| node.sessions.live(t))
    else {
        return Err(ToolError::new(
            "not_bound",
            "repo action=active names the repository of the calling terminal: call from a tuic PTY (x-tuic-session), or use repo action=list",
        ));
    };
    let cwd = Path::new(&own.cwd);
    let all = repos(node)?;
    let mut repo = all
        .iter()
        .filter(|r| cwd.starts_with(&r.path))
        .max_by_key(|r| r.path.len())
        .cloned();
    // A terminal started in a linked worktree (`<repo>__wt/<branch>`) belongs to the
    // repository whose main checkout owns that worktree.
    if repo.is_none()
        && let Some(main) = crate::git::main_checkout_of_worktree(cwd)
    {
        repo = all.into_iter().find(|r| Path::new(&r.path) == main);
    }
    match repo {
        Some(r) => Ok(status(node, &r)),
        None => Err(ToolError::new(
            "no_active_repository",
            format!(
                "the caller's terminal ({}) is not inside a registered repository; register one with repo action=add",
                own.cwd
            ),
        )),
    }
}
