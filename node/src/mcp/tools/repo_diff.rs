//! `repo action=diff_summary|diff_file`: the git service's change views (`crate::git::diff`),
//! the same core as `GET /repo/diff-summary` and `GET /repo/diff-file`. `path` is a worktree
//! or repository root; a `<connection>:/path` of another host is routed to its owner before
//! this runs (`repo_git::route`).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::args;
use crate::git::diff::{self, DiffEnv, FileOpts, Target};
use crate::mcp::registry::ToolError;
use crate::state::Node;

/// What both change views read (`crate::args`): the branch and base compared, and the page.
#[derive(Debug, Deserialize)]
struct View {
    #[serde(default, deserialize_with = "args::string")]
    branch: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    base: Option<String>,
    #[serde(default, deserialize_with = "args::uint")]
    offset: Option<u64>,
    #[serde(default, deserialize_with = "args::uint")]
    limit: Option<u64>,
}

/// The view's own arguments.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Call {
    DiffSummary {},
    DiffFile(FileArgs),
}

#[derive(Debug, Deserialize)]
struct FileArgs {
    #[serde(default, deserialize_with = "args::string")]
    file: Option<String>,
    #[serde(default, deserialize_with = "args::boolean")]
    uncommitted: Option<bool>,
}

/// An empty string is an absent one.
fn given(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// Serves `diff_summary` and `diff_file`.
pub(super) fn handle(
    node: &Arc<Node>,
    a: &str,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    let path = super::repo::path_arg(args)?;
    let view: View = args::parse(args)?;
    let call: Call = args::action(a, args)?;
    let t = Target {
        path,
        branch: given(view.branch),
        base: given(view.base),
    };
    let roots = node.repos.roots();
    let env = DiffEnv {
        git: &node.git,
        roots: &roots,
    };
    let offset = view.offset.unwrap_or(0) as usize;
    let limit = view.limit.map(|n| n as usize);
    let v = match call {
        Call::DiffSummary {} => serde_json::to_value(
            diff::summary(env, &t, offset, limit).map_err(super::repo_git::tool_error)?,
        ),
        Call::DiffFile(f) => {
            let file = given(f.file)
                .ok_or_else(|| ToolError::invalid("file is required (repository-relative)"))?;
            let o = FileOpts {
                uncommitted: f.uncommitted.unwrap_or(false),
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
