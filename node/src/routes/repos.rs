//! `GET /repos` and `POST /repos {path}`: the registry service behind MCP `repo action=add|list`,
//! also reachable over HTTP so scripts and the web UI share one implementation; and the git
//! service's routes (`POST /worktrees`, `GET /worktrees`, `/worktrees/lifecycle`,
//! `/worktrees/remove`, `GET /repo/info`, `/repo/branch-integrations`, `/repo/branch-delete`,
//! `/repo/orphan-cleanup`), thin adapters over `crate::git` like the MCP `repo` actions.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::repos::AddError;
use crate::routes::JsonBody;
use crate::state::Node;

pub(super) async fn list(State(node): State<Arc<Node>>) -> Result<Json<Value>, ApiError> {
    let n = node.clone();
    let repos = tokio::task::spawn_blocking(move || n.repos.list())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(Json(json!({ "repos": repos })))
}

#[derive(Debug, Deserialize)]
pub(super) struct AddBody {
    path: String,
}

/// `POST /repos`: MCP `repo add`, with its remote right (`mcp::rights`): registering a root
/// widens the file routes' gate, so only a local caller may.
pub(super) async fn add(
    State(node): State<Arc<Node>>,
    transport: Option<axum::Extension<crate::guard::Transport>>,
    headers: axum::http::HeaderMap,
    JsonBody(b): JsonBody<AddBody>,
) -> Result<Json<Value>, ApiError> {
    crate::mcp::rights::check_http(transport.map(|e| e.0), &headers, "repo", "add")?;
    let n = node.clone();
    let outcome =
        tokio::task::spawn_blocking(move || n.repos.add(&b.path, &n.bus, crate::logs::now_ms()))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| match e {
                AddError::InvalidPath(_) => ApiError::bad_request(e.to_string()),
                AddError::Persist(_) => ApiError::internal(e.to_string()),
            })?;
    Ok(Json(
        serde_json::to_value(outcome).map_err(|e| ApiError::internal(e.to_string()))?,
    ))
}

/// A git service error as the HTTP edge's error: same code and message, a fitting status.
fn git_error(e: crate::git::GitError) -> ApiError {
    let status = axum::http::StatusCode::from_u16(e.http_status())
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    ApiError::new(status, e.code(), e.to_string())
}

/// Runs a git service call on the blocking pool (git is never run on an async worker).
async fn blocking(
    node: &Arc<Node>,
    f: impl FnOnce(&Arc<Node>) -> Result<Value, crate::git::GitError> + Send + 'static,
) -> Result<Json<Value>, ApiError> {
    let n = node.clone();
    tokio::task::spawn_blocking(move || f(&n))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map(Json)
        .map_err(git_error)
}

/// A repository of another host (`<host>:/path`, `ext::HostRouter`): served by its owner,
/// awaited on the network (no thread waits for it).
async fn routed(
    node: &Node,
    host: &str,
    path: &str,
    action: &str,
    args: &serde_json::Map<String, Value>,
) -> Result<Json<Value>, ApiError> {
    let call = crate::ext::RepoCall {
        host,
        path,
        action,
        args,
    };
    node.ext.route_repo(call).await.map(Json).map_err(git_error)
}

#[derive(Debug, Deserialize)]
pub(super) struct CreateBody {
    base_repo: String,
    #[serde(default)]
    branch: Option<String>,
    #[serde(default)]
    base: Option<String>,
    #[serde(default)]
    spawn_session: bool,
}

/// `POST /worktrees`: the same creation core as MCP `repo action=worktree_create` (an HTTP
/// caller has no MCP binding, so no creator session moves).
pub(super) async fn create_worktree(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<CreateBody>,
) -> Result<Json<Value>, ApiError> {
    if let Some((host, path)) = node.ext.repo_target(&b.base_repo) {
        let mut args = serde_json::Map::new();
        if let Some(br) = b.branch.as_ref().filter(|s| !s.is_empty()) {
            args.insert("branch".into(), json!(br));
        }
        if let Some(base) = &b.base {
            args.insert("base".into(), json!(base));
        }
        args.insert("spawn_session".into(), json!(b.spawn_session));
        return routed(&node, host, path, "worktree_create", &args).await;
    }
    blocking(&node, move |n| {
        n.git.create(&crate::git::worktree::CreateRequest {
            repo: b.base_repo,
            branch: b.branch.filter(|s| !s.is_empty()),
            base: b.base,
            spawn_session: b.spawn_session,
            creator_session: None,
        })
    })
    .await
}

#[derive(Debug, Deserialize)]
pub(super) struct PathQuery {
    path: String,
    #[serde(default)]
    branch: Option<String>,
}

/// `GET /worktrees?path=`: `repo action=worktree_list`.
pub(super) async fn list_worktrees(
    State(node): State<Arc<Node>>,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, ApiError> {
    if let Some((host, path)) = node.ext.repo_target(&q.path) {
        return routed(&node, host, path, "worktree_list", &Default::default()).await;
    }
    blocking(&node, move |n| {
        let v = n.git.list(&q.path)?;
        let _ = n.git.orphan_scan(&q.path);
        Ok(v)
    })
    .await
}

/// `GET /worktrees/lifecycle?path=&branch=`: `repo action=worktree_lifecycle`.
pub(super) async fn worktree_lifecycle(
    State(node): State<Arc<Node>>,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, ApiError> {
    let branch = q
        .branch
        .clone()
        .ok_or_else(|| ApiError::bad_request("branch is required"))?;
    blocking(&node, move |n| n.git.lifecycle(&q.path, &branch)).await
}

#[derive(Debug, Deserialize)]
pub(super) struct RemoveBody {
    path: String,
    branch: String,
    #[serde(default)]
    force: bool,
    #[serde(default)]
    expected_fingerprint: Option<String>,
    #[serde(default)]
    delete_branch: Option<bool>,
    #[serde(default)]
    override_lock: bool,
}

/// `POST /worktrees/remove`: `repo action=worktree_remove`.
pub(super) async fn remove_worktree(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<RemoveBody>,
) -> Result<Json<Value>, ApiError> {
    blocking(&node, move |n| {
        n.git.remove(&crate::git::worktree::RemoveRequest {
            repo: b.path,
            branch: b.branch,
            force: b.force,
            expected_fingerprint: b.expected_fingerprint,
            delete_branch: b.delete_branch,
            override_lock: b.override_lock,
        })
    })
    .await
}

/// `GET /repo/info?path=`: the repository's Git facts.
pub(super) async fn repo_info(
    State(node): State<Arc<Node>>,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, ApiError> {
    if let Some((host, path)) = node.ext.repo_target(&q.path) {
        return routed(&node, host, path, "info", &Default::default()).await;
    }
    blocking(&node, move |n| n.git.info(&q.path)).await
}

/// `GET /repo/branch-integrations?path=[&branch=]`: `repo action=branch_integrations`
/// (or `branch_integration` with `branch`).
pub(super) async fn branch_integrations(
    State(node): State<Arc<Node>>,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, ApiError> {
    blocking(&node, move |n| {
        n.git.integrations(&q.path, q.branch.as_deref())
    })
    .await
}

#[derive(Debug, Deserialize)]
pub(super) struct BranchDeleteBody {
    path: String,
    branch: String,
    #[serde(default)]
    archive: bool,
}

/// `POST /repo/branch-delete`: `repo action=branch_delete`.
pub(super) async fn branch_delete(
    State(node): State<Arc<Node>>,
    who: Option<axum::Extension<crate::audit::Actor>>,
    JsonBody(b): JsonBody<BranchDeleteBody>,
) -> Result<Json<Value>, ApiError> {
    let ev = crate::audit::Event::new("branch_deleted", &super::audit::actor(who))
        .with("path", b.path.as_str())
        .with("branch", b.branch.as_str())
        .with("archive", b.archive);
    let out = blocking(&node, move |n| {
        n.git.delete_branch(&b.path, &b.branch, b.archive)
    })
    .await?;
    super::audit::record(&node, ev).await;
    Ok(out)
}

#[derive(Debug, Deserialize)]
pub(super) struct OrphanBody {
    path: String,
    decision: String,
}

/// `POST /repo/orphan-cleanup`: `repo action=orphan_cleanup_answer`.
pub(super) async fn orphan_cleanup(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<OrphanBody>,
) -> Result<Json<Value>, ApiError> {
    blocking(&node, move |n| n.git.orphan_answer(&b.path, &b.decision)).await
}
