//! The `repo` tool's worktree, branch and orphan-cleanup actions: argument parsing and error
//! mapping over the git service (`crate::git`), which owns the behaviour and is shared with
//! `POST /worktrees` and the `/repo/*` routes. Only two things are MCP's own: the creator
//! identity comes from the protocol binding (never from the arguments), and Claude Code
//! callers get `cc_agent_hint`.

use std::sync::Arc;

use serde_json::{Map, Value, json};

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

fn str_arg<'a>(args: &'a Map<String, Value>, k: &str) -> Result<Option<&'a str>, ToolError> {
    match args.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ToolError::invalid(format!("{k} must be a string"))),
    }
}

fn bool_arg(args: &Map<String, Value>, k: &str) -> Result<Option<bool>, ToolError> {
    match args.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ToolError::invalid(format!("{k} must be a boolean"))),
    }
}

fn branch_arg<'a>(args: &'a Map<String, Value>, a: &str) -> Result<&'a str, ToolError> {
    str_arg(args, "branch")?
        .filter(|b| !b.is_empty())
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
    let (host, remote_path) = node.ext.repo_target(path)?;
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
    match a {
        "worktree_create" => {
            let req = CreateRequest {
                repo: path.to_owned(),
                branch: str_arg(args, "branch")?
                    .filter(|b| !b.is_empty())
                    .map(str::to_owned),
                base: str_arg(args, "base")?.map(str::to_owned),
                spawn_session: bool_arg(args, "spawn_session")?.unwrap_or(false),
                creator_session: ctx.tuic_session.clone(),
            };
            let mut v = node.git.create(&req).map_err(tool_error)?;
            if ctx.claude_code() {
                v["cc_agent_hint"] = cc_agent_hint(&v);
            }
            Ok(v)
        }
        "worktree_list" => {
            let v = node.git.list(path).map_err(tool_error)?;
            // Listing is where orphaned worktrees are noticed: it opens the cleanup dialog.
            let _ = node.git.orphan_scan(path);
            Ok(v)
        }
        "worktree_lifecycle" => node
            .git
            .lifecycle(path, branch_arg(args, a)?)
            .map_err(tool_error),
        "worktree_remove" => {
            let req = RemoveRequest {
                repo: path.to_owned(),
                branch: branch_arg(args, a)?.to_owned(),
                force: bool_arg(args, "force")?.unwrap_or(false),
                expected_fingerprint: str_arg(args, "expected_fingerprint")?.map(str::to_owned),
                delete_branch: bool_arg(args, "delete_branch")?,
                override_lock: bool_arg(args, "override_lock")?.unwrap_or(false),
            };
            node.git.remove(&req).map_err(tool_error)
        }
        "branch_integrations" => node.git.integrations(path, None).map_err(tool_error),
        "branch_integration" => node
            .git
            .integrations(path, Some(branch_arg(args, a)?))
            .map_err(tool_error),
        "branch_delete" => node
            .git
            .delete_branch(
                path,
                branch_arg(args, a)?,
                bool_arg(args, "archive")?.unwrap_or(false),
            )
            .map_err(tool_error),
        "orphan_cleanup_answer" => {
            let d = str_arg(args, "decision")?
                .ok_or_else(|| ToolError::invalid("decision is required (remove or keep)"))?;
            node.git.orphan_answer(path, d).map_err(tool_error)
        }
        _ => Err(ToolError::invalid(format!("unknown repo action {a}"))),
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
