//! The `repo` tool's worktree, branch and orphan-cleanup actions: argument parsing and error
//! mapping over the git service (`crate::git`), which owns the behaviour and is shared with
//! `POST /worktrees` and the `/repo/*` routes. Only two things are MCP's own: the creator
//! identity comes from the protocol binding (never from the arguments), and Claude Code
//! callers get `cc_agent_hint`.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::args;
use crate::git::GitError;
use crate::git::worktree::{CreateRequest, RemoveRequest};
use crate::mcp::registry::{CallCtx, ToolError};
use crate::state::Node;

/// A git service error as a tool error with the same stable code.
pub(crate) fn tool_error(e: GitError) -> ToolError {
    match &e {
        GitError::Remote {
            connection, status, ..
        } => ToolError::new(e.code(), e.to_string())
            .with("connection", json!(connection))
            .with("status", json!(status)),
        _ => ToolError::new(e.code(), e.to_string()),
    }
}

/// The typed arguments of the git-backed `repo` actions (`crate::args`); `path` is read by
/// `repo.rs` for every action.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum GitCall {
    WorktreeCreate(CreateArgs),
    WorktreeList {},
    WorktreeRemove(RemoveArgs),
    WorktreeLifecycle(BranchArgs),
    BranchIntegrations {},
    BranchIntegration(BranchArgs),
    BranchDelete(DeleteArgs),
    OrphanCleanupAnswer(AnswerArgs),
}

#[derive(Debug, Deserialize)]
struct CreateArgs {
    #[serde(default, deserialize_with = "args::string")]
    branch: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    base: Option<String>,
    #[serde(default, deserialize_with = "args::boolean")]
    spawn_session: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct BranchArgs {
    #[serde(default, deserialize_with = "args::string")]
    branch: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RemoveArgs {
    #[serde(default, deserialize_with = "args::string")]
    branch: Option<String>,
    #[serde(default, deserialize_with = "args::boolean")]
    force: Option<bool>,
    #[serde(default, deserialize_with = "args::string")]
    expected_fingerprint: Option<String>,
    #[serde(default, deserialize_with = "args::boolean")]
    delete_branch: Option<bool>,
    #[serde(default, deserialize_with = "args::boolean")]
    override_lock: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct DeleteArgs {
    #[serde(default, deserialize_with = "args::string")]
    branch: Option<String>,
    #[serde(default, deserialize_with = "args::boolean")]
    archive: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct AnswerArgs {
    #[serde(default, deserialize_with = "args::string")]
    decision: Option<String>,
}

/// The required, non-empty `branch` of action `a`.
fn branch(b: Option<String>, a: &str) -> Result<String, ToolError> {
    b.filter(|b| !b.is_empty())
        .ok_or_else(|| ToolError::invalid(format!("repo action={a} needs branch")))
}

/// Extension hook (`ext::HostRouter`): a git action on `<host>:/path` is a repository of
/// another host, served by its owner (awaited: the call waits on the network, not a thread).
/// `None` when the call is served here (a plain path, a registry action, or arguments the
/// handler refuses).
pub(super) async fn route(
    node: &Node,
    a: &str,
    args: &Map<String, Value>,
) -> Option<Result<Value, ToolError>> {
    if super::repo::REGISTRY_ACTIONS.contains(&a)
        || ["project", "workspace_id"]
            .iter()
            .any(|k| args.contains_key(*k))
    {
        return None;
    }
    let path = super::repo::path_arg(args).ok()?;
    let (host, remote_path) = node.ext.repo_target(&path)?;
    let call = crate::ext::RepoCall {
        host,
        path: remote_path,
        action: a,
        args,
    };
    Some(node.ext.route_repo(call).await.map_err(tool_error))
}

/// Dispatches one git-backed `repo` action.
pub(super) fn handle(
    node: &Arc<Node>,
    ctx: &CallCtx,
    a: &str,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    for old in ["project", "workspace_id"] {
        if args.contains_key(old) {
            return Err(ToolError::invalid(format!(
                "{old} is not an input of repo: pass path (the repository root) and branch"
            )));
        }
    }
    let path = super::repo::path_arg(args)?;
    let path = path.as_str();
    match args::action(a, args)? {
        GitCall::WorktreeCreate(c) => {
            let req = CreateRequest {
                repo: path.to_owned(),
                branch: c.branch.filter(|b| !b.is_empty()),
                base: c.base,
                spawn_session: c.spawn_session.unwrap_or(false),
                creator_session: ctx.tuic_session.clone(),
            };
            let mut v = node.git.create(&req).map_err(tool_error)?;
            if ctx.claude_code() {
                v["cc_agent_hint"] = cc_agent_hint(&v);
            }
            Ok(v)
        }
        GitCall::WorktreeList {} => {
            let v = node.git.list(path).map_err(tool_error)?;
            // Listing is where orphaned worktrees are noticed: it opens the cleanup dialog.
            let _ = node.git.orphan_scan(path);
            Ok(v)
        }
        GitCall::WorktreeLifecycle(b) => node
            .git
            .lifecycle(path, &branch(b.branch, a)?)
            .map_err(tool_error),
        GitCall::WorktreeRemove(r) => {
            let req = RemoveRequest {
                repo: path.to_owned(),
                branch: branch(r.branch, a)?,
                force: r.force.unwrap_or(false),
                expected_fingerprint: r.expected_fingerprint,
                delete_branch: r.delete_branch,
                override_lock: r.override_lock.unwrap_or(false),
            };
            node.git.remove(&req).map_err(tool_error)
        }
        GitCall::BranchIntegrations {} => node.git.integrations(path, None).map_err(tool_error),
        GitCall::BranchIntegration(b) => node
            .git
            .integrations(path, Some(&branch(b.branch, a)?))
            .map_err(tool_error),
        GitCall::BranchDelete(d) => {
            let b = branch(d.branch, a)?;
            let archive = d.archive.unwrap_or(false);
            let v = node
                .git
                .delete_branch(path, &b, archive)
                .map_err(tool_error)?;
            // Audited once done, before the answer (the HTTP route records the same).
            node.audit.record_or_warn(
                crate::audit::Event::new("branch_deleted", &super::secret::caller(ctx))
                    .with("path", path)
                    .with("branch", b.as_str())
                    .with("archive", archive),
            );
            Ok(v)
        }
        GitCall::OrphanCleanupAnswer(o) => {
            let d = o
                .decision
                .ok_or_else(|| ToolError::invalid("decision is required (remove or keep)"))?;
            node.git.orphan_answer(path, &d).map_err(tool_error)
        }
    }
}

/// The hint that lets Claude Code, which cannot change its working directory mid-session,
/// delegate the work to a subagent using absolute paths.
fn cc_agent_hint(created: &Value) -> Value {
    let p = created["worktree_path"].as_str().unwrap_or_default();
    json!({
        "worktree_path": p,
        "suggested_prompt": format!(
            "Work in the worktree at `{p}`. Use absolute paths for ALL file operations (Read, Edit, Write, Glob, Grep) under `{p}`, and run every shell command as `cd {p} && ...`. Do not touch files of the parent checkout."
        ),
    })
}

/// `session action=declare_worktree` for the caller's own live PTY.
pub(crate) fn declare(
    node: &Node,
    tuic_session: &str,
    session_id: &str,
    launch_dir: &str,
    worktree_path: &str,
) -> Result<Value, ToolError> {
    node.git
        .declare(tuic_session, session_id, launch_dir, worktree_path)
        .map_err(tool_error)
}
