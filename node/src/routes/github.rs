//! The GitHub/CI routes the removed `repo` actions point agents at: `GET /repo/prs`,
//! `GET /repo/issues`, `POST /repo/issues/close`, `POST /repo/issues/reopen`,
//! `GET /repo/ci-failure-logs`, and `PUT /repo/github-token` (IPC only) that stores the token.
//! Thin adapters over the GitHub service (`crate::github`). Without a token or a reachable
//! API each answers 503 `github_unavailable` with the reason — never 404, so an agent
//! following the pointer learns why instead of concluding the route is gone.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use super::JsonBody;
use crate::error::ApiError;
use crate::github::GithubError;
use crate::guard::Transport;
use crate::state::Node;

type Answer = Result<Json<Value>, (StatusCode, Json<Value>)>;

fn answer(r: Result<Value, GithubError>) -> Answer {
    r.map(Json).map_err(|e| {
        (
            StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_GATEWAY),
            Json(e.to_json()),
        )
    })
}

fn bad(message: &str) -> (StatusCode, Json<Value>) {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"code": "bad_request", "error": message})),
    )
}

/// `?path=` (or the spec's `repoPath=`), `state=`, `limit=`.
#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    #[serde(default, alias = "repoPath")]
    path: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    limit: usize,
}

/// `GET /repo/prs?path=[&state=open|closed|all][&limit=]`.
pub(super) async fn prs(State(node): State<Arc<Node>>, Query(q): Query<ListQuery>) -> Answer {
    answer(node.github.prs(&q.path, &q.state, q.limit).await)
}

/// `GET /repo/issues?path=[&state=open|closed|all][&limit=]`.
pub(super) async fn issues(State(node): State<Arc<Node>>, Query(q): Query<ListQuery>) -> Answer {
    answer(node.github.issues(&q.path, &q.state, q.limit).await)
}

/// `{path|repoPath, number, reason?}`.
#[derive(Debug, Deserialize)]
pub(super) struct IssueBody {
    #[serde(default, alias = "repoPath")]
    path: String,
    #[serde(default)]
    number: u64,
    reason: Option<String>,
}

/// `POST /repo/issues/close {path, number, reason?: completed|not_planned}`.
pub(super) async fn close(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<IssueBody>,
) -> Answer {
    answer(
        node.github
            .set_issue_state(&b.path, b.number, false, b.reason.as_deref())
            .await,
    )
}

/// `POST /repo/issues/reopen {path, number}`.
pub(super) async fn reopen(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<IssueBody>,
) -> Answer {
    answer(
        node.github
            .set_issue_state(&b.path, b.number, true, b.reason.as_deref())
            .await,
    )
}

/// `?path|repoPath=&branch=`, or `checkUrl=&headSha=`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct LogsQuery {
    #[serde(default, alias = "repoPath")]
    path: String,
    branch: Option<String>,
    #[serde(alias = "check_url")]
    check_url: Option<String>,
    #[serde(alias = "head_sha")]
    head_sha: Option<String>,
}

/// `GET /repo/ci-failure-logs?path=&branch=` (or `checkUrl=&headSha=`).
pub(super) async fn ci_failure_logs(
    State(node): State<Arc<Node>>,
    Query(q): Query<LogsQuery>,
) -> Answer {
    let check = match (&q.check_url, &q.head_sha) {
        (Some(u), Some(h)) => Some((u.as_str(), h.as_str())),
        (None, None) => None,
        _ => return Err(bad("checkUrl and headSha go together")),
    };
    answer(
        node.github
            .ci_failure_logs(&q.path, q.branch.as_deref(), check)
            .await,
    )
}

#[derive(Debug, Deserialize)]
pub(super) struct TokenBody {
    token: String,
}

/// `PUT /repo/github-token {token}` (IPC only): stores the token in the vault; an empty
/// token removes it. The token is never answered or logged.
pub(super) async fn set_token(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    JsonBody(b): JsonBody<TokenBody>,
) -> Result<Json<Value>, ApiError> {
    if let Some(Extension(Transport::Tcp { .. })) = transport {
        return Err(ApiError::forbidden(
            "the GitHub token is set over the IPC socket only",
        ));
    }
    let n = node.clone();
    let stored = !b.token.trim().is_empty();
    tokio::task::spawn_blocking(move || n.github.set_token(&b.token))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("storing the GitHub token: {e:#}")))?;
    Ok(Json(json!({"ok": true, "stored": stored})))
}
