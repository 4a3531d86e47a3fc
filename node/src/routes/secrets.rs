//! The person's side of the secret tool (`crate::secrets`): `GET /secrets` (names and open
//! forms), `GET /secrets/form?nonce=` (what a form asks), `POST /secrets/form {nonce, value}`
//! (answer it), `PUT /secrets/{name} {value}` (store one directly: `tuic secret set`) and
//! `DELETE /secrets/{name}`. Values go in and never come out. Consent templates
//! (`crate::secrets::consent`): `GET /secrets/consent?nonce=` (what a run asks),
//! `POST /secrets/consent {nonce, allow}` (answer it), `POST /secrets/templates {name, argv,
//! cwd?}` (approve a run ahead: `tuic secret allow`) and `DELETE /secrets/templates/{id}`.

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
        .route("/secrets/consent", get(consent).post(answer_consent))
        .route("/secrets/templates", axum::routing::post(allow))
        .route("/secrets/templates/{id}", axum::routing::delete(forget))
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
    let consents: Vec<Value> = node
        .secrets
        .consent_requests(crate::logs::now_ms())
        .into_iter()
        .map(|r| {
            let path = r.path();
            let mut v = json!(r);
            v["path"] = json!(path);
            v
        })
        .collect();
    let secrets = node.secrets.clone();
    let templates = super::blocking(move || secrets.templates().map_err(api_error)).await?;
    Ok(Json(json!({
        "secrets": names,
        "forms": forms,
        "consents": consents,
        "templates": templates,
    })))
}

async fn consent(
    State(node): State<Arc<Node>>,
    Query(q): Query<NonceQuery>,
) -> Result<Json<Value>, ApiError> {
    let r = node
        .secrets
        .consent_request(&q.nonce, crate::logs::now_ms())
        .map_err(api_error)?;
    Ok(Json(json!({
        "name": r.name,
        "argv": r.argv,
        "command": crate::secrets::consent::shown(&r.argv),
        "cwd": r.cwd,
        "requested_by": r.requested_by,
        "expires_ms": r.expires_ms,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsentBody {
    nonce: String,
    allow: bool,
}

async fn answer_consent(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
    JsonBody(b): JsonBody<ConsentBody>,
) -> Result<Json<Value>, ApiError> {
    let who = actor(who);
    let secrets = node.secrets.clone();
    let by = who.who.clone();
    let (req, t) = super::blocking(move || {
        secrets
            .answer_consent(&b.nonce, b.allow, &by, crate::logs::now_ms())
            .map_err(api_error)
    })
    .await?;
    let kind = if t.is_some() {
        "secret_consent_granted"
    } else {
        "secret_consent_refused"
    };
    let mut ev = Event::new(kind, &who)
        .with("name", req.name.as_str())
        .with("program", req.argv[0].as_str())
        .with("args", req.argv.len());
    if let Some(t) = &t {
        ev = ev.with("template", t.id.as_str());
    }
    record(&node, ev).await;
    Ok(Json(json!({"ok": true, "name": req.name, "template": t})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowBody {
    name: String,
    argv: Vec<String>,
    #[serde(default)]
    cwd: Option<String>,
}

async fn allow(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
    JsonBody(b): JsonBody<AllowBody>,
) -> Result<Json<Value>, ApiError> {
    let who = actor(who);
    let secrets = node.secrets.clone();
    let by = who.who.clone();
    let t = super::blocking(move || {
        secrets
            .allow(
                &b.name,
                &b.argv,
                b.cwd.as_deref(),
                &by,
                crate::logs::now_ms(),
            )
            .map_err(api_error)
    })
    .await?;
    record(
        &node,
        Event::new("secret_consent_granted", &who)
            .with("name", t.name.as_str())
            .with("program", t.argv[0].as_str())
            .with("args", t.argv.len())
            .with("template", t.id.as_str()),
    )
    .await;
    Ok(Json(json!({"ok": true, "template": t})))
}

async fn forget(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let secrets = node.secrets.clone();
    let i = id.clone();
    let had = super::blocking(move || secrets.forget(&i).map_err(api_error)).await?;
    if !had {
        return Err(ApiError::not_found(format!("no consent template {id}")));
    }
    record(
        &node,
        Event::new("secret_template_removed", &actor(who)).with("template", id.as_str()),
    )
    .await;
    Ok(Json(json!({"ok": true})))
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
