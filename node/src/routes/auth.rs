//! `POST /auth/login`: form or JSON credentials → a `tui-session` cookie.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::{CONTENT_TYPE, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use crate::auth::{self, Admission};
use crate::error::ApiError;
use crate::guard::Transport;
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
    let ip = match transport.map(|Extension(t)| t) {
        Some(Transport::Tcp { peer }) => peer.ip(),
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    let cfg = node.config();
    let now = Instant::now();
    if let Admission::Throttled { retry_after_secs } =
        node.auth
            .admit(ip, now, cfg.tuning.login_failures_per_minute)
    {
        return throttled(retry_after_secs);
    }
    let next = auth::safe_next(form.next.as_deref()).to_owned();
    if !check_password(&cfg, &form.username, &form.password).await {
        node.auth.record_failure(ip, now);
        tracing::info!(source = "auth", ip = %ip, "failed login");
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
    let expires = crate::logs::now_ms() + lifetime_ms;
    let (store, hash) = (node.store.clone(), auth::token_hash(&token));
    let persisted = tokio::task::spawn_blocking({
        let hash = hash.clone();
        move || store.put_login_session(&hash, expires)
    })
    .await;
    if !matches!(persisted, Ok(Ok(()))) {
        return ApiError::internal("could not store the login session").into_response();
    }
    node.auth.add_login_session(hash, expires);
    tracing::info!(source = "auth", ip = %ip, "login");
    let cookie = auth::session_cookie(&token, lifetime_ms / 1000);
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
