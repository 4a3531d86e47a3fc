//! `GET /config` (redacted) and `PUT /config {base, config}` (three-way save).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::Value;
use tuic_proto::events::Event;

use crate::config::SaveError;
use crate::error::{ApiError, JsonBody};
use crate::state::Node;

pub(super) async fn get_config(State(node): State<Arc<Node>>) -> Json<Value> {
    Json(node.config().redacted())
}

#[derive(Debug, Deserialize)]
pub(super) struct SaveBody {
    base: Value,
    config: Value,
}

pub(super) async fn put_config(
    State(node): State<Arc<Node>>,
    JsonBody(body): JsonBody<SaveBody>,
) -> Result<Json<Value>, ApiError> {
    if !body.base.is_object() || !body.config.is_object() {
        return Err(ApiError::bad_request(
            "base and config must be JSON objects",
        ));
    }
    let before = node.config();
    let file = node.config_file.clone();
    let saved = tokio::task::spawn_blocking(move || file.save_delta(&body.base, &body.config))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| match e {
            SaveError::SecretField(_) | SaveError::Invalid(_) => {
                ApiError::bad_request(e.to_string())
            }
            SaveError::Io(_) => ApiError::internal(e.to_string()),
        })?;
    if saved.remote_access_enabled != before.remote_access_enabled {
        // An explicit change of the setting replaces this run's `--remote-access` override.
        node.overrides
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remote_access = None;
    }
    let remote = saved.remote_access_enabled;
    node.set_config(saved);
    crate::server::apply_remote_access(&node).await;
    node.bus.publish(Event::ConfigChanged {
        remote_access_enabled: remote,
    });
    Ok(Json(node.config().redacted()))
}
