//! `repo action=diff_summary|diff_file`: the git service's change views (`crate::git::diff`),
//! the same core as `GET /repo/diff-summary` and `GET /repo/diff-file`. `path` is a worktree
//! or repository root; a `<connection>:/path` of another host is routed to its owner before
//! this runs (`repo_git::route`).

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::git::diff::{self, DiffEnv, FileOpts, Target};
use crate::mcp::registry::ToolError;
use crate::state::Node;

fn opt_str(args: &Map<String, Value>, k: &str) -> Option<String> {
    args.get(k)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn opt_usize(args: &Map<String, Value>, k: &str) -> Result<Option<usize>, ToolError> {
    match args.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| ToolError::invalid(format!("{k} must be a non-negative integer"))),
    }
}

/// Serves `diff_summary` and `diff_file`.
pub(super) fn handle(
    node: &Arc<Node>,
    a: &str,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    let path = super::repo::path_arg(args)?;
    let t = Target {
        path: path.to_owned(),
        branch: opt_str(args, "branch"),
        base: opt_str(args, "base"),
    };
    let roots = node.repos.roots();
    let env = DiffEnv {
        git: &node.git,
        roots: &roots,
    };
    let offset = opt_usize(args, "offset")?.unwrap_or(0);
    let limit = opt_usize(args, "limit")?;
    let v = match a {
        "diff_summary" => serde_json::to_value(
            diff::summary(env, &t, offset, limit).map_err(super::repo_git::tool_error)?,
        ),
        _ => {
            let file = opt_str(args, "file")
                .ok_or_else(|| ToolError::invalid("file is required (repository-relative)"))?;
            let o = FileOpts {
                uncommitted: args
                    .get("uncommitted")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                offset,
                limit,
            };
            serde_json::to_value(
                diff::file(env, &t, &file, o).map_err(super::repo_git::tool_error)?,
            )
        }
    };
    v.map_err(|e| ToolError::new("internal", e.to_string()))
}
