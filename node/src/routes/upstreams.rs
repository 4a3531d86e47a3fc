//! `GET /mcp/upstreams` (the file, redacted) and `PUT /mcp/upstreams {base, config}` (the
//! delta save of spec "Upstream configuration save contract"), and the OAuth consent routes
//! `POST /mcp/upstreams/{name}/oauth/start`, `POST …/oauth/cancel`, `GET …/oauth`. A thin
//! adapter over [`crate::upstream::Upstreams`].

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::routes::JsonBody;
use crate::state::Node;
use crate::upstream::config::UpstreamSaveError;
use crate::upstream::oauth::OAuthError;

/// The routes, merged into the node router.
pub(crate) fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/mcp/upstreams", get(get_upstreams).put(put_upstreams))
        .route("/mcp/upstreams/{name}/oauth", get(oauth_status))
        .route("/mcp/upstreams/{name}/oauth/start", post(oauth_start))
        .route("/mcp/upstreams/{name}/oauth/cancel", post(oauth_cancel))
}

fn oauth_error(e: OAuthError) -> ApiError {
    match e {
        OAuthError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, "not_found", m),
        OAuthError::Invalid(m) => ApiError::bad_request(m),
        OAuthError::Server(m) => ApiError::new(StatusCode::BAD_GATEWAY, "oauth_failed", m),
    }
}

async fn oauth_start(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let up = node.upstreams.clone();
    let (started, server) = up.start_oauth(&name).await.map_err(oauth_error)?;
    super::oauth_callback::spawn(&node, server);
    Ok(Json(serde_json::to_value(started).unwrap_or_default()))
}

async fn oauth_cancel(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let n = node.upstreams.cancel_oauth(&name).map_err(oauth_error)?;
    let status = node.upstreams.oauth_status(&name);
    Ok(Json(serde_json::json!({"cancelled": n, "status": status})))
}

async fn oauth_status(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    node.upstreams.oauth_status(&name).map(Json).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no upstream named {name}"),
        )
    })
}

async fn get_upstreams(State(node): State<Arc<Node>>) -> Json<Value> {
    Json(node.upstreams.current())
}

#[derive(Debug, Deserialize)]
struct SaveBody {
    base: Value,
    config: Value,
}

async fn put_upstreams(
    State(node): State<Arc<Node>>,
    JsonBody(body): JsonBody<SaveBody>,
) -> Result<Json<Value>, ApiError> {
    let up = node.upstreams.clone();
    up.save(body.base, body.config)
        .await
        .map(Json)
        .map_err(|e| match e {
            UpstreamSaveError::Invalid(_) => ApiError::bad_request(e.to_string()),
            UpstreamSaveError::Conflict(_) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
            UpstreamSaveError::Io(_) => ApiError::internal(e.to_string()),
        })
}
