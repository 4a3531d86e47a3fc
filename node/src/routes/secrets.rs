//! The person's side of the secret tool (`crate::secrets`): `GET /secrets` (names and open
//! forms), `GET /secrets/form?nonce=` (what a form asks), `POST /secrets/form {nonce, value}`
//! (answer it), `PUT /secrets/{name} {value}` (store one directly: `tuic secret set`) and
//! `DELETE /secrets/{name}`. Values go in and never come out.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use zeroize::Zeroizing;

use super::audit::{actor, record};
use crate::audit::{Actor, Event};
use crate::error::ApiError;
use crate::routes::JsonBody;
use crate::secrets::SecretError;
use crate::state::Node;

pub(super) fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/secrets", get(list))
        .route("/secrets/form", get(form).post(submit))
        .route("/secrets/{name}", axum::routing::put(store).delete(remove))
}

fn api_error(e: SecretError) -> ApiError {
    let status = match e {
        SecretError::BadNonce => StatusCode::FORBIDDEN,
        SecretError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        SecretError::Missing(_) => StatusCode::NOT_FOUND,
        SecretError::TooManyForms => StatusCode::CONFLICT,
        SecretError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError::new(status, e.code(), e.to_string())
}

async fn list(State(node): State<Arc<Node>>) -> Result<Json<Value>, ApiError> {
    let secrets = node.secrets.clone();
    let names = super::blocking(move || secrets.list().map_err(api_error)).await?;
    let forms: Vec<Value> = node
        .secrets
        .open_forms(crate::logs::now_ms())
        .into_iter()
        .map(|f| {
            let path = f.path();
            let mut v = json!(f);
            v["path"] = json!(path);
            v
        })
        .collect();
    Ok(Json(json!({"secrets": names, "forms": forms})))
}

#[derive(Debug, Deserialize)]
struct NonceQuery {
    nonce: String,
}

async fn form(
    State(node): State<Arc<Node>>,
    Query(q): Query<NonceQuery>,
) -> Result<Json<Value>, ApiError> {
    let f = node
        .secrets
        .form(&q.nonce, crate::logs::now_ms())
        .map_err(api_error)?;
    Ok(Json(json!({
        "name": f.name,
        "reason": f.reason,
        "requested_by": f.requested_by,
        "expires_ms": f.expires_ms,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    nonce: String,
    value: String,
}

async fn submit(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
    JsonBody(b): JsonBody<SubmitBody>,
) -> Result<Json<Value>, ApiError> {
    let (nonce, value) = (b.nonce, Zeroizing::new(b.value));
    let secrets = node.secrets.clone();
    let name = super::blocking(move || {
        secrets
            .submit(&nonce, value, crate::logs::now_ms())
            .map_err(api_error)
    })
    .await?;
    record(
        &node,
        Event::new("secret_stored", &actor(who)).with("name", name.as_str()),
    )
    .await;
    Ok(Json(json!({"ok": true, "name": name})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreBody {
    value: String,
}

async fn store(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
    Path(name): Path<String>,
    JsonBody(b): JsonBody<StoreBody>,
) -> Result<Json<Value>, ApiError> {
    let value = Zeroizing::new(b.value);
    let secrets = node.secrets.clone();
    let n = name.clone();
    super::blocking(move || {
        secrets
            .store(&n, &value, crate::logs::now_ms())
            .map_err(api_error)
    })
    .await?;
    record(
        &node,
        Event::new("secret_stored", &actor(who)).with("name", name.as_str()),
    )
    .await;
    Ok(Json(json!({"ok": true, "name": name})))
}

async fn remove(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let secrets = node.secrets.clone();
    let n = name.clone();
    let removed = super::blocking(move || secrets.remove(&n).map_err(api_error)).await?;
    if !removed {
        return Err(ApiError::not_found(format!("no secret named {name}")));
    }
    record(
        &node,
        Event::new("secret_removed", &actor(who)).with("name", name.as_str()),
    )
    .await;
    Ok(Json(json!({"ok": true})))
}
