//! Logins: `POST /auth/login` (form or JSON credentials → a `tui-session` cookie backed by a
//! server-side session), `POST /auth/logout`, `GET /auth/sessions` and
//! `DELETE /auth/sessions[/{id}]` (list and revoke), and the IPC-only
//! `POST /auth/token/rotate`.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE, USER_AGENT};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use super::audit::{actor, record};
use crate::audit::{Actor, Event};
use crate::auth::{self, Admission};
use crate::error::ApiError;
use crate::guard::{self, Transport};
use crate::server::boundary::{check_password, throttled};
use crate::state::Node;

#[derive(Debug, Deserialize)]
struct LoginForm {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    next: Option<String>,
}

pub(super) async fn login(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    who: Option<Extension<Actor>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let is_json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let form: LoginForm = if is_json {
        match serde_json::from_slice(&body) {
            Ok(f) => f,
            Err(e) => {
                return ApiError::bad_request(format!("invalid login body: {e}")).into_response();
            }
        }
    } else {
        match serde_urlencoded::from_bytes(&body) {
            Ok(f) => f,
            Err(e) => {
                return ApiError::bad_request(format!("invalid login form: {e}")).into_response();
            }
        }
    };
    let transport = transport.map_or(Transport::Ipc, |Extension(t)| t);
    let ip = match transport {
        Transport::Tcp { peer } => peer.ip(),
        Transport::Ipc => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    let secure = guard::arrived_over_https(transport, &headers);
    let cfg = node.config();
    let now = Instant::now();
    if let Admission::Throttled { retry_after_secs } = node.auth.admit(
        ip,
        &form.username,
        now,
        cfg.tuning.login_failures_per_minute,
        cfg.tuning.login_failures_global_per_minute,
    ) {
        return throttled(retry_after_secs);
    }
    let next = auth::safe_next(form.next.as_deref()).to_owned();
    if !check_password(&cfg, &form.username, &form.password).await {
        node.auth.record_failure(ip, &form.username, now);
        tracing::info!(source = "auth", ip = %ip, "failed login");
        let mut a = actor(who);
        a.address = Some(ip.to_string());
        record(
            &node,
            Event::new("login_failed", &a).with("user", form.username.as_str()),
        )
        .await;
        if is_json {
            return ApiError::unauthorized().into_response();
        }
        let target = format!(
            "/mobile/login?error=1&next={}",
            percent_encoding::utf8_percent_encode(&next, percent_encoding::NON_ALPHANUMERIC)
        );
        return redirect(&target, None);
    }
    let token = crate::vault::random_token();
    let lifetime_ms = u64::from(cfg.tuning.login_session_days) * 86_400_000;
    let created = crate::logs::now_ms();
    let session = auth::LoginSession {
        created_ms: created,
        last_used_ms: created,
        expires_ms: created + lifetime_ms,
        address: ip.to_string(),
        user_agent: headers
            .get(USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .chars()
            .take(256)
            .collect(),
    };
    let (store, hash) = (node.store.clone(), auth::token_hash(&token));
    let persisted = tokio::task::spawn_blocking({
        let (hash, session) = (hash.clone(), session.clone());
        move || store.put_login_session(&hash, &session)
    })
    .await;
    if !matches!(persisted, Ok(Ok(()))) {
        return ApiError::internal("could not store the login session").into_response();
    }
    tracing::info!(source = "auth", ip = %ip, id = auth::login_id(&hash), "login");
    let mut a = actor(who);
    a.who = format!("login:{}", auth::login_id(&hash));
    a.address = Some(ip.to_string());
    record(
        &node,
        Event::new("login", &a).with("user", form.username.as_str()),
    )
    .await;
    node.auth.add_login_session(hash, session);
    let cookie = auth::session_cookie(&token, lifetime_ms / 1000, secure);
    if is_json {
        let mut r = Json(json!({"ok": true})).into_response();
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            r.headers_mut().insert(SET_COOKIE, v);
        }
        return r;
    }
    redirect(&next, Some(&cookie))
}

fn redirect(to: &str, cookie: Option<&str>) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(LOCATION, v);
    }
    if let Some(v) = cookie.and_then(|c| HeaderValue::from_str(c).ok()) {
        r.headers_mut().insert(SET_COOKIE, v);
    }
    r
}

/// The `tui-session` cookie of a request, if any.
fn request_cookie(headers: &HeaderMap) -> Option<&str> {
    auth::find_cookie(
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok()),
        auth::COOKIE_NAME,
    )
}

/// `POST /auth/logout`: revokes the login the request's cookie names (server-side: the token
/// stops working everywhere at once) and clears the cookie. A form post is sent back to the
/// login page; a JSON caller gets `{ok, revoked}`. The node token is never revoked here.
pub(super) async fn logout(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    who: Option<Extension<Actor>>,
    headers: HeaderMap,
) -> Response {
    let transport = transport.map_or(Transport::Ipc, |Extension(t)| t);
    let revoked = request_cookie(&headers).and_then(|tok| node.auth.revoke_token(tok));
    let was = revoked.is_some();
    if let Some(hash) = revoked {
        tracing::info!(source = "auth", id = auth::login_id(&hash), "logout");
        let mut a = actor(who);
        a.who = format!("login:{}", auth::login_id(&hash));
        record(&node, Event::new("logout", &a)).await;
        node.forget_logins(vec![hash]);
    }
    let clear = auth::clear_cookie(guard::arrived_over_https(transport, &headers));
    let wants_json = [CONTENT_TYPE, ACCEPT].iter().any(|h| {
        headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("application/json"))
    });
    if !wants_json {
        return redirect("/mobile/login", Some(&clear));
    }
    let mut r = Json(json!({"ok": true, "revoked": was})).into_response();
    if let Ok(v) = HeaderValue::from_str(&clear) {
        r.headers_mut().insert(SET_COOKIE, v);
    }
    r
}

/// `GET /auth/sessions`: every live login, oldest first; `current` marks the caller's own.
pub(super) async fn list_sessions(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
) -> Json<serde_json::Value> {
    let own = request_cookie(&headers).map(auth::token_hash);
    let rows: Vec<_> = node
        .auth
        .login_sessions()
        .into_iter()
        .map(|(hash, s)| {
            json!({
                "id": auth::login_id(&hash),
                "created_ms": s.created_ms,
                "last_used_ms": s.last_used_ms,
                "expires_ms": s.expires_ms,
                "address": s.address,
                "user_agent": s.user_agent,
                "current": own.as_deref() == Some(hash.as_str()),
            })
        })
        .collect();
    Json(json!(rows))
}

/// `DELETE /auth/sessions/{id}`: revokes one login.
pub(super) async fn revoke_session(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let hash = node
        .auth
        .revoke_id(&id)
        .ok_or_else(|| ApiError::not_found(format!("no login {id}")))?;
    tracing::info!(source = "auth", id = %id, "login revoked");
    record(
        &node,
        Event::new("login_revoked", &actor(who)).with("login", id.as_str()),
    )
    .await;
    node.forget_logins(vec![hash]);
    Ok(Json(json!({"ok": true, "revoked": 1})))
}

/// `DELETE /auth/sessions`: revokes every login (`tuic-node set-password` calls it too).
pub(super) async fn revoke_all_sessions(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
) -> Json<serde_json::Value> {
    let hashes = node.auth.revoke_all();
    let n = hashes.len();
    tracing::info!(source = "auth", revoked = n, "every login revoked");
    record(
        &node,
        Event::new("login_revoked", &actor(who)).with("count", n),
    )
    .await;
    node.forget_logins(hashes);
    Json(json!({"ok": true, "revoked": n}))
}

/// `POST /auth/token/rotate` (IPC only): replaces the node token and answers the new one.
/// Rotating is a local act, like reading the token with `tuic-node token`.
pub(super) async fn rotate_token(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    who: Option<Extension<Actor>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if !matches!(transport, Some(Extension(Transport::Ipc))) {
        return Err(ApiError::forbidden(
            "the node token is rotated on this machine only (`tuic-node token --rotate`)",
        ));
    }
    let rotating = node.clone();
    let token = tokio::task::spawn_blocking(move || rotating.rotate_node_token())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("{e:#}")))?;
    record(&node, Event::new("token_rotated", &actor(who))).await;
    Ok(Json(json!({"token": token})))
}
