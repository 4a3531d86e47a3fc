//! `/notifications*`: recent notifications, Web Push subscriptions and the VAPID key, a test,
//! answering from a notification (authenticated, or login-free with an ntfy action's
//! single-use answer token), watches, and the channel secrets (IPC only). See
//! `docs/http-api.md#notifications`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::header::USER_AGENT;
use axum::routing::{delete, get, post, put};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use super::audit::{actor, record};
use super::blocking;
use crate::audit::{Actor, Event as AuditEvent};
use crate::error::ApiError;
use crate::guard::Transport;
use crate::notify::core::{Answer, Record};
use crate::notify::{AnswerError, WatchOn, config, webpush};
use crate::routes::JsonBody;
use crate::state::Node;

/// The notification routes.
pub(crate) fn routes() -> axum::Router<Arc<Node>> {
    axum::Router::new()
        .route("/notifications", get(list))
        .route("/notifications/test", post(test))
        .route("/notifications/vapid", get(vapid))
        .route(
            "/notifications/subscriptions",
            get(subscriptions).post(subscribe),
        )
        .route("/notifications/subscriptions/{id}", delete(unsubscribe))
        .route("/notifications/{id}/answer", post(answer))
        // Login-free (`server::boundary::is_public`): the token is the credential.
        .route(
            "/notifications/answer/{token}/{choice}",
            post(answer_with_token),
        )
        .route("/notifications/watch", post(watch).get(watches))
        .route("/notifications/webhook-key", get(webhook_key))
        .route("/notifications/ntfy-token", put(ntfy_token))
}

async fn list(State(node): State<Arc<Node>>) -> Json<Value> {
    Json(json!({
        "notifications": node.notify.recent(),
        "hub_attached": node.notify.hub_attached(),
    }))
}

#[derive(Debug, Default, Deserialize)]
struct TestBody {
    #[serde(default)]
    text: Option<String>,
}

async fn test(
    State(node): State<Arc<Node>>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let text = if body.is_empty() {
        None
    } else {
        serde_json::from_slice::<TestBody>(&body)
            .map_err(|e| ApiError::bad_request(format!("the body is not {{text?}}: {e}")))?
            .text
    };
    let rec = node
        .notify
        .test(text)
        .ok_or_else(|| ApiError::internal("the test notification was not recorded"))?;
    Ok(Json(json!({"notification": rec})))
}

async fn vapid(State(node): State<Arc<Node>>) -> Result<Json<Value>, ApiError> {
    let n = node.clone();
    let v = blocking(move || n.notify.vapid().map_err(ApiError::from)).await?;
    Ok(Json(json!({"public_key": v.public_b64()})))
}

async fn subscriptions(State(node): State<Arc<Node>>) -> Json<Value> {
    let list: Vec<Value> = node
        .notify
        .subscriptions()
        .iter()
        .map(|s| {
            json!({"id": s.id, "origin": s.origin(), "created_ms": s.created_ms,
                   "device": s.device, "trusted": s.trusted})
        })
        .collect();
    Json(json!({"subscriptions": list}))
}

/// `PushSubscription.toJSON()`.
#[derive(Debug, Deserialize)]
struct SubscribeBody {
    endpoint: String,
    keys: SubscribeKeys,
}

#[derive(Debug, Deserialize)]
struct SubscribeKeys {
    p256dh: String,
    auth: String,
}

fn sub_error(e: webpush::SubscriptionError) -> ApiError {
    let status = match e {
        webpush::SubscriptionError::PrivateEndpoint(_) => StatusCode::FORBIDDEN,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError::new(status, e.code(), e.to_string())
}

async fn subscribe(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    headers: axum::http::HeaderMap,
    JsonBody(b): JsonBody<SubscribeBody>,
) -> Result<Json<Value>, ApiError> {
    webpush::validate(&b.endpoint, &b.keys.p256dh, &b.keys.auth).map_err(sub_error)?;
    let trusted = matches!(
        transport.map_or(Transport::Ipc, |Extension(t)| t),
        Transport::Ipc
    );
    if !trusted && !node.config().notifications.web_push.allow_private_endpoints {
        webpush::check_endpoint(&b.endpoint)
            .await
            .map_err(sub_error)?;
    }
    let sub = webpush::Subscription {
        id: uuid::Uuid::new_v4().to_string(),
        endpoint: b.endpoint,
        p256dh: b.keys.p256dh,
        auth: b.keys.auth,
        created_ms: crate::notify::now_ms(),
        trusted,
        device: headers
            .get(USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(|s| webpush::truncate(s, 200)),
    };
    let n = node.clone();
    let kept = blocking(move || n.notify.subscribe(sub).map_err(ApiError::from)).await?;
    Ok(Json(json!({"id": kept.id, "origin": kept.origin()})))
}

async fn unsubscribe(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let n = node.clone();
    let removed = blocking(move || n.notify.unsubscribe(&id).map_err(ApiError::from)).await?;
    if !removed {
        return Err(ApiError::not_found("no such subscription"));
    }
    Ok(Json(json!({"removed": true})))
}

#[derive(Debug, Deserialize)]
struct AnswerBody {
    /// 1-based, as the notification's actions number them.
    choice: usize,
}

fn answer_error(e: AnswerError) -> ApiError {
    let (status, code) = match e {
        AnswerError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
        AnswerError::AlreadyAnswered(_) => (StatusCode::CONFLICT, "already_answered"),
        AnswerError::BadChoice { .. } => (StatusCode::BAD_REQUEST, "bad_choice"),
    };
    ApiError::new(status, code, e.to_string())
}

async fn answer(
    State(node): State<Arc<Node>>,
    Path(id): Path<u64>,
    JsonBody(b): JsonBody<AnswerBody>,
) -> Result<Json<Value>, ApiError> {
    let (rec, ans) = node.notify.answer_of(id, b.choice).map_err(answer_error)?;
    perform(&node, &rec, ans).await?;
    Ok(Json(json!({"ok": true, "id": id, "choice": b.choice})))
}

/// An ntfy action button: the token answers exactly its notification, once, and never
/// anything else; refusals say nothing about which notifications exist.
async fn answer_with_token(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
    Path((token, choice)): Path<(String, usize)>,
) -> Result<Json<Value>, ApiError> {
    let who = actor(who);
    let (rec, ans) = node
        .notify
        .answer_with_token(&token, choice)
        .map_err(|e| match e {
            AnswerError::BadChoice { .. } => answer_error(e),
            _ => ApiError::new(
                StatusCode::GONE,
                "answer_link_spent",
                "this answer link was used, expired with its question, or never existed",
            ),
        })?;
    let done = perform(&node, &rec, ans).await;
    let mut ev = AuditEvent::new("notification_answered", &who)
        .with("notification", rec.id)
        .with("choice", choice)
        .with("via", "answer_link")
        .with("ok", done.is_ok());
    if let Some(s) = &rec.context.session_id {
        ev = ev.session(s);
    }
    record(&node, ev).await;
    done?;
    Ok(Json(json!({"ok": true, "id": rec.id, "choice": choice})))
}

/// Performs a notification's answer: keys to the PTY, a confirm's verdict, an ACP option.
async fn perform(node: &Arc<Node>, rec: &Record, ans: Answer) -> Result<(), ApiError> {
    match ans {
        Answer::Keys(keys) => {
            let sid = rec
                .context
                .session_id
                .clone()
                .ok_or_else(|| ApiError::bad_request("this notification has no session"))?;
            let s = node.sessions.resolve(&sid).ok_or_else(|| {
                ApiError::new(
                    StatusCode::CONFLICT,
                    "already_answered",
                    "the session is gone",
                )
            })?;
            let cap = node.sessions.capture.clone();
            blocking(move || {
                s.write(keys.as_bytes(), &cap).map_err(|e| {
                    ApiError::new(StatusCode::CONFLICT, "session_exited", e.to_string())
                })
            })
            .await?;
        }
        Answer::Confirm(yes) => {
            let request_id = rec.key.trim_start_matches("confirm:").to_owned();
            let tx = node
                .mcp
                .confirms
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&request_id);
            let Some(tx) = tx else {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "already_answered",
                    "the confirmation was answered or timed out",
                ));
            };
            let _ = tx.try_send(yes);
        }
        Answer::Acp {
            connection,
            request,
            option,
        } => {
            let c = node.acp.get(&connection).map_err(|e| {
                ApiError::new(StatusCode::CONFLICT, "already_answered", e.to_string())
            })?;
            c.answer(&request, &option, "notification").map_err(|e| {
                ApiError::new(StatusCode::CONFLICT, "already_answered", e.to_string())
            })?;
        }
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
struct WatchBody {
    /// A session: id, alias or name.
    session: String,
    /// `exit` or `done`.
    #[serde(default = "default_on")]
    on: WatchOn,
}

fn default_on() -> WatchOn {
    WatchOn::Exit
}

async fn watch(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<WatchBody>,
) -> Result<Json<Value>, ApiError> {
    let s = node
        .sessions
        .resolve(&b.session)
        .ok_or_else(|| ApiError::not_found(format!("no live session {:?}", b.session)))?;
    node.notify.watch(&s.id, b.on);
    Ok(Json(
        json!({"ok": true, "session_id": s.id, "alias": s.alias, "on": b.on}),
    ))
}

async fn watches(State(node): State<Arc<Node>>) -> Json<Value> {
    let list: Vec<Value> = node
        .notify
        .watches()
        .into_iter()
        .map(|(s, on)| json!({"session_id": s, "on": on}))
        .collect();
    Json(json!({"watches": list}))
}

fn ipc_only(transport: Option<Extension<Transport>>) -> Result<(), ApiError> {
    match transport.map_or(Transport::Ipc, |Extension(t)| t) {
        Transport::Ipc => Ok(()),
        Transport::Tcp { .. } => Err(ApiError::forbidden(
            "channel secrets are read and set over the IPC socket only (tuic notify)",
        )),
    }
}

/// The webhook's HMAC key (created on first use), for the receiver to verify signatures.
async fn webhook_key(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
) -> Result<Json<Value>, ApiError> {
    ipc_only(transport)?;
    let n = node.clone();
    let key = blocking(move || {
        n.vault
            .get_or_create(config::WEBHOOK_SECRET, crate::vault::random_token)
            .map_err(ApiError::from)
    })
    .await?;
    Ok(Json(json!({"key": key})))
}

#[derive(Debug, Deserialize)]
struct TokenBody {
    token: String,
}

/// Stores the ntfy access token in the vault.
async fn ntfy_token(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    JsonBody(b): JsonBody<TokenBody>,
) -> Result<Json<Value>, ApiError> {
    ipc_only(transport)?;
    let n = node.clone();
    blocking(move || {
        n.vault
            .set(config::NTFY_TOKEN, &b.token)
            .map_err(ApiError::from)
    })
    .await?;
    Ok(Json(json!({"ok": true})))
}
