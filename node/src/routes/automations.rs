//! `POST /automations/action` with `{input: {action, ...}}`: the shared entry point over HTTP
//! (definition actions plus the ledger read `firings`). Error messages match the tool's.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::Value;

use crate::automations::AutomationError;
use crate::error::ApiError;
use crate::state::Node;

/// The automation routes.
pub(crate) fn routes() -> axum::Router<Arc<Node>> {
    axum::Router::new().route("/automations/action", post(action))
}

fn api(e: AutomationError) -> ApiError {
    let status = match &e {
        AutomationError::Invalid(_) | AutomationError::NotBound => StatusCode::BAD_REQUEST,
        AutomationError::NotFound(_) => StatusCode::NOT_FOUND,
        AutomationError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, e.code(), e.to_string())
}

async fn action(State(node): State<Arc<Node>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let v: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))?;
    let input = v
        .get("input")
        .ok_or_else(|| ApiError::bad_request("input is required: {input: {action, ...}}"))?;
    let act = crate::automations::parse_action(input).map_err(api)?;
    let session = v
        .get("sessionId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        node.automations
            .execute(act, session.as_deref(), false, crate::logs::now_ms())
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map(Json)
    .map_err(api)
}
