//! `GET /mcp/upstreams` (the file, redacted) and `PUT /mcp/upstreams {base, config}` (the
//! delta save of spec "Upstream configuration save contract"). A thin adapter over
//! [`super::Upstreams`].

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde::Deserialize;
use serde_json::Value;

use super::config::UpstreamSaveError;
use crate::error::{ApiError, JsonBody};
use crate::state::Node;

/// The routes, merged into the node router.
pub fn routes() -> Router<Arc<Node>> {
    Router::new().route("/mcp/upstreams", get(get_upstreams).put(put_upstreams))
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
    up.save(&node, body.base, body.config)
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
