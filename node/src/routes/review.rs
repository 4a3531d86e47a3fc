//! Review routes (issue 43), thin adapters over `crate::git::diff` and `crate::review`:
//!
//! - by checkout path: `GET /repo/diff-summary`, `GET /repo/diff-file`, `GET|POST /repo/merge`
//!   (a `<connection>:/path` of another host goes to its owner like the other `/repo/*` routes);
//! - by session (a PTY session or an ACP connection; a hub forwards `/sessions/<conn>/<id>/…`
//!   to the owner as it does every session route): `GET /sessions/{id}/changes`,
//!   `GET /sessions/{id}/changes/file`, `GET|POST /sessions/{id}/merge`,
//!   `GET|POST /sessions/{id}/reviews`, `POST /sessions/{id}/reviews/{rid}/comments`,
//!   `POST /sessions/{id}/reviews/{rid}/send`.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::audit::Actor;
use crate::error::ApiError;
use crate::git::GitError;
use crate::git::diff::{self, DiffEnv, FileOpts, Target};
use crate::review::land::{self, LandRequest, Method};
use crate::review::{Comment, ReviewError};
use crate::routes::JsonBody;
use crate::state::Node;

pub(super) fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/repo/diff-summary", get(repo_summary))
        .route("/repo/diff-file", get(repo_file))
        .route("/repo/merge", get(repo_merge_state).post(repo_merge))
        .route("/sessions/{id}/changes", get(session_summary))
        .route("/sessions/{id}/changes/file", get(session_file))
        .route(
            "/sessions/{id}/merge",
            get(session_merge_state).post(session_merge),
        )
        .route(
            "/sessions/{id}/reviews",
            get(list_reviews).post(create_review),
        )
        .route("/sessions/{id}/reviews/{rid}/comments", post(add_comment))
        .route("/sessions/{id}/reviews/{rid}/send", post(send_review))
}

fn git_error(e: GitError) -> ApiError {
    let status = axum::http::StatusCode::from_u16(e.http_status())
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    ApiError::new(status, e.code(), e.to_string())
}

fn review_error(e: ReviewError) -> ApiError {
    let status = axum::http::StatusCode::from_u16(e.http_status())
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    ApiError::new(status, e.code(), e.to_string())
}

async fn on_pool<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    super::blocking(f).await
}

fn to_json<T: serde::Serialize>(v: T) -> Result<Json<Value>, ApiError> {
    serde_json::to_value(v)
        .map(Json)
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// Runs a change view with the node's git runner and registered roots.
fn with_env<T>(
    node: &Node,
    f: impl FnOnce(DiffEnv<'_>) -> Result<T, GitError>,
) -> Result<T, ApiError> {
    let roots = node.repos.roots();
    f(DiffEnv {
        git: &node.git,
        roots: &roots,
    })
    .map_err(git_error)
}

/// A repository of another host: served by its owner through the hub's host router.
async fn routed(
    node: &Node,
    host: &str,
    path: &str,
    action: &str,
    args: serde_json::Map<String, Value>,
) -> Result<Json<Value>, ApiError> {
    let call = crate::ext::RepoCall {
        host,
        path,
        action,
        args: &args,
    };
    node.ext.route_repo(call).await.map(Json).map_err(git_error)
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct DiffQuery {
    #[serde(default)]
    path: String,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    branch: Option<String>,
    #[serde(default)]
    base: Option<String>,
    #[serde(default)]
    uncommitted: Option<bool>,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

impl DiffQuery {
    fn args(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        let mut put = |k: &str, v: Value| {
            if !v.is_null() {
                m.insert(k.into(), v);
            }
        };
        put("file", json!(self.file));
        put("branch", json!(self.branch));
        put("base", json!(self.base));
        put("uncommitted", json!(self.uncommitted));
        put("offset", json!(self.offset));
        put("limit", json!(self.limit));
        m
    }

    fn target(&self, path: String) -> Target {
        Target {
            path,
            branch: self.branch.clone(),
            base: self.base.clone(),
        }
    }
}

async fn repo_summary(
    State(node): State<Arc<Node>>,
    Query(q): Query<DiffQuery>,
) -> Result<Json<Value>, ApiError> {
    if let Some((host, path)) = node.ext.repo_target(&q.path) {
        return routed(&node, host, path, "diff_summary", q.args()).await;
    }
    on_pool(move || {
        let t = q.target(q.path.clone());
        let s = with_env(&node, |env| {
            diff::summary(env, &t, q.offset.unwrap_or(0), q.limit)
        })?;
        to_json(s)
    })
    .await
}

async fn repo_file(
    State(node): State<Arc<Node>>,
    Query(q): Query<DiffQuery>,
) -> Result<Json<Value>, ApiError> {
    if let Some((host, path)) = node.ext.repo_target(&q.path) {
        return routed(&node, host, path, "diff_file", q.args()).await;
    }
    on_pool(move || file_view(&node, &q, q.path.clone())).await
}

fn file_view(node: &Node, q: &DiffQuery, path: String) -> Result<Json<Value>, ApiError> {
    let file = q
        .file
        .clone()
        .filter(|f| !f.is_empty())
        .ok_or_else(|| ApiError::bad_request("file is required"))?;
    let t = q.target(path);
    let o = FileOpts {
        uncommitted: q.uncommitted.unwrap_or(false),
        offset: q.offset.unwrap_or(0),
        limit: q.limit,
    };
    let d = with_env(node, |env| diff::file(env, &t, &file, o))?;
    to_json(d)
}

#[derive(Debug, Deserialize)]
pub(super) struct PathQuery {
    path: String,
}

async fn repo_merge_state(
    State(node): State<Arc<Node>>,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, ApiError> {
    if let Some((host, path)) = node.ext.repo_target(&q.path) {
        return routed(&node, host, path, "merge_state", Default::default()).await;
    }
    on_pool(move || {
        let roots = node.repos.roots();
        land::state(&node.git, &roots, &q.path)
            .map(Json)
            .map_err(git_error)
    })
    .await
}

#[derive(Debug, Deserialize)]
pub(super) struct MergeBody {
    #[serde(default)]
    path: String,
    method: String,
    #[serde(default)]
    message: Option<String>,
}

async fn repo_merge(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
    JsonBody(b): JsonBody<MergeBody>,
) -> Result<Json<Value>, ApiError> {
    if let Some((host, path)) = node.ext.repo_target(&b.path) {
        let mut args = serde_json::Map::new();
        args.insert("method".into(), json!(b.method));
        if let Some(m) = &b.message {
            args.insert("message".into(), json!(m));
        }
        return routed(&node, host, path, "merge", args).await;
    }
    let actor = super::audit::actor(who);
    let path = b.path.clone();
    merge(node, actor, path, b).await
}

async fn merge(
    node: Arc<Node>,
    actor: Actor,
    path: String,
    b: MergeBody,
) -> Result<Json<Value>, ApiError> {
    on_pool(move || {
        let method = Method::parse(&b.method).map_err(git_error)?;
        let roots = node.repos.roots();
        land::land(
            &node.git,
            &roots,
            &node.audit,
            &actor,
            &LandRequest {
                path,
                method,
                message: b.message,
            },
        )
        .map(Json)
        .map_err(git_error)
    })
    .await
}

/// A session's (or ACP connection's) canonical id and the checkout it works in.
fn session_checkout(node: &Node, id: &str) -> Result<(String, String), ApiError> {
    let (sid, cwd) = if let Some(s) = node.sessions.resolve(id) {
        let row = s.row();
        (row.session_id, row.worktree_path.clone().unwrap_or(row.cwd))
    } else if let Ok(c) = node.acp.get(id) {
        let row = c.row();
        (row.id, row.cwd)
    } else {
        return Err(ApiError::not_found(format!("no session {id}")));
    };
    let top = node
        .git
        .out(
            std::path::Path::new(&cwd),
            &["rev-parse", "--show-toplevel"],
        )
        .map_err(|_| {
            ApiError::new(
                axum::http::StatusCode::BAD_REQUEST,
                "not_git",
                format!("session {id} works in {cwd}, which is not inside a Git checkout"),
            )
        })?;
    Ok((sid, top))
}

async fn session_summary(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    Query(q): Query<DiffQuery>,
) -> Result<Json<Value>, ApiError> {
    on_pool(move || {
        let (sid, path) = session_checkout(&node, &id)?;
        let t = q.target(path);
        let s = with_env(&node, |env| {
            diff::summary(env, &t, q.offset.unwrap_or(0), q.limit)
        })?;
        let mut v = to_json(s)?.0;
        v["session"] = json!(sid);
        v["delivery"] = json!(node.reviews.delivery_for(&sid));
        Ok(Json(v))
    })
    .await
}

async fn session_file(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    Query(q): Query<DiffQuery>,
) -> Result<Json<Value>, ApiError> {
    on_pool(move || {
        let (_, path) = session_checkout(&node, &id)?;
        file_view(&node, &q, path)
    })
    .await
}

async fn session_merge_state(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    on_pool(move || {
        let (_, path) = session_checkout(&node, &id)?;
        let roots = node.repos.roots();
        land::state(&node.git, &roots, &path)
            .map(Json)
            .map_err(git_error)
    })
    .await
}

async fn session_merge(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    who: Option<Extension<Actor>>,
    JsonBody(b): JsonBody<MergeBody>,
) -> Result<Json<Value>, ApiError> {
    let n = node.clone();
    let (_, path) = on_pool(move || session_checkout(&n, &id)).await?;
    merge(node, super::audit::actor(who), path, b).await
}

async fn list_reviews(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    on_pool(move || {
        let (sid, path) = session_checkout(&node, &id)?;
        let reviews = node.reviews.list(&sid).map_err(review_error)?;
        Ok(Json(json!({
            "session": sid,
            "path": path,
            "delivery": node.reviews.delivery_for(&sid),
            "reviews": reviews,
        })))
    })
    .await
}

#[derive(Debug, Deserialize)]
pub(super) struct CreateBody {
    #[serde(default)]
    summary: String,
    #[serde(default)]
    comments: Vec<Comment>,
    /// Send at once.
    #[serde(default)]
    send: bool,
}

async fn create_review(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<CreateBody>,
) -> Result<Json<Value>, ApiError> {
    on_pool(move || {
        let (sid, path) = session_checkout(&node, &id)?;
        let now = crate::logs::now_ms();
        let r = node
            .reviews
            .create(&sid, &path, b.summary, b.comments, now)
            .map_err(review_error)?;
        let r = if b.send {
            node.reviews.send(&r.id, now).map_err(review_error)?
        } else {
            r
        };
        to_json(r)
    })
    .await
}

fn owned_review(node: &Node, id: &str, rid: &str) -> Result<String, ApiError> {
    let (sid, _) = session_checkout(node, id)?;
    let r = node.reviews.get(rid).map_err(review_error)?;
    if r.session != sid {
        return Err(ApiError::not_found(format!(
            "no review {rid} for session {id}"
        )));
    }
    Ok(sid)
}

async fn add_comment(
    State(node): State<Arc<Node>>,
    Path((id, rid)): Path<(String, String)>,
    JsonBody(c): JsonBody<Comment>,
) -> Result<Json<Value>, ApiError> {
    on_pool(move || {
        owned_review(&node, &id, &rid)?;
        let r = node
            .reviews
            .comment(&rid, c, crate::logs::now_ms())
            .map_err(review_error)?;
        to_json(r)
    })
    .await
}

async fn send_review(
    State(node): State<Arc<Node>>,
    Path((id, rid)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    on_pool(move || {
        owned_review(&node, &id, &rid)?;
        let r = node
            .reviews
            .send(&rid, crate::logs::now_ms())
            .map_err(review_error)?;
        to_json(r)
    })
    .await
}
