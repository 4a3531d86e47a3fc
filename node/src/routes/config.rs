//! `GET /config` (redacted) and `PUT /config {base, config}` (three-way save).

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::Value;
use tuic_proto::events::Event;

use crate::config::SaveError;
use crate::error::ApiError;
use crate::routes::JsonBody;
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
    who: Option<Extension<crate::audit::Actor>>,
    JsonBody(body): JsonBody<SaveBody>,
) -> Result<Json<Value>, ApiError> {
    if !body.base.is_object() || !body.config.is_object() {
        return Err(ApiError::bad_request(
            "base and config must be JSON objects",
        ));
    }
    let before = node.config();
    let mut keys = Vec::new();
    changed_keys("", &body.base, &body.config, &mut keys);
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
    super::audit::record(
        &node,
        crate::audit::Event::new("config_changed", &super::audit::actor(who)).with("keys", keys),
    )
    .await;
    crate::server::apply_remote_access(&node).await;
    node.bus.publish(Event::ConfigChanged {
        remote_access_enabled: remote,
    });
    Ok(Json(node.config().redacted()))
}

/// The dotted paths whose values differ between `base` and `config` (names only, never
/// values: a key's value may be a secret). Objects are compared member by member.
fn changed_keys(prefix: &str, base: &Value, config: &Value, out: &mut Vec<String>) {
    match (base, config) {
        (Value::Object(a), Value::Object(b)) => {
            let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
            names.sort();
            names.dedup();
            for k in names {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                let null = Value::Null;
                changed_keys(
                    &path,
                    a.get(k).unwrap_or(&null),
                    b.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(prefix.to_owned()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn changed_keys_names_paths_not_values() {
        let mut out = Vec::new();
        super::changed_keys(
            "",
            &serde_json::json!({"a": 1, "t": {"x": 1, "y": 2}}),
            &serde_json::json!({"a": 1, "t": {"x": 3, "y": 2}, "n": true}),
            &mut out,
        );
        assert_eq!(out, ["n", "t.x"]);
    }
}
