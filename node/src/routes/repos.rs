//! `GET /repos` and `POST /repos {path}`: the registry service behind MCP `repo action=add|list`,
//! also reachable over HTTP so scripts and the web UI share one implementation.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{ApiError, JsonBody};
use crate::repos::AddError;
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

pub(super) async fn add(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<AddBody>,
) -> Result<Json<Value>, ApiError> {
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
