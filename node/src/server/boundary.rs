//! The request boundary middleware: Host guard, Origin guard and CORS, then authentication.
//!
//! IPC requests are trusted (the socket is 0600) except that `/mcp` refuses a foreign
//! Origin. TCP requests pass the guards in order; public routes skip only authentication.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::header::{
    ACCEPT, ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS,
    ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS,
    ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_METHOD, AUTHORIZATION, COOKIE, LOCATION,
    RETRY_AFTER, SET_COOKIE, VARY,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::audit::Actor;
use crate::auth::{self, Admission, COOKIE_NAME};
use crate::error::ApiError;
use crate::guard::{self, Transport};
use crate::state::Node;

/// Routes that answer without credentials (still behind the Host and Origin guards). Logout
/// acts only on the cookie it is sent, so an expired one can still be cleared. An ntfy action's
/// answer link (`POST /notifications/answer/{token}/{choice}`) carries its own single-use
/// token, scoped to one notification (`notify::tokens`).
fn is_public(method: &Method, path: &str) -> bool {
    matches!(
        path,
        "/health" | "/mobile/login" | "/auth/login" | "/auth/logout" | "/favicon.ico"
    ) || (method == Method::POST && path.starts_with("/notifications/answer/"))
        || (method == Method::GET
            && (path.starts_with("/assets/login")
                || path == "/share.html"
                || path == "/assets/share.js"
                || path == "/assets/app.css"))
}

/// The peer link: only the node token opens it. A person's login (cookie or Basic) is not a
/// peer credential.
fn peer_only(path: &str) -> bool {
    path == "/mcp/peer"
}

/// Routes about people's logins: the node token (a machine's credential) does not open them.
fn person_only(path: &str) -> bool {
    path == "/auth/sessions"
        || path.starts_with("/auth/sessions/")
        || path.starts_with("/auth/token")
}

/// Routes only the session cookie authorizes (the spec: Basic Auth alone does not authorize
/// executable replacement).
fn cookie_only(method: &Method, path: &str) -> bool {
    method == Method::POST && path == "/remote/update"
}

/// Routes where browsers cannot set headers, so `?token=` is accepted. Nowhere else.
fn accepts_query_token(method: &Method, path: &str) -> bool {
    method == Method::GET
        && (path == "/events"
            || (path.starts_with("/sessions/") && path.ends_with("/stream"))
            || (path.starts_with("/acp/connections/") && path.ends_with("/stream")))
}

/// The middleware. Apply with `middleware::from_fn_with_state(node, boundary)`.
pub(crate) async fn boundary(
    State(node): State<Arc<Node>>,
    mut req: Request,
    next: Next,
) -> Response {
    // A request without a transport did not come through a listener: treat it as remote.
    let transport = req
        .extensions()
        .get::<Transport>()
        .copied()
        .unwrap_or(Transport::Tcp {
            peer: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        });
    let cfg = node.config();
    let peer = match transport {
        Transport::Ipc => {
            let path = req.uri().path();
            if (path == "/mcp" || path.starts_with("/mcp/"))
                && let Err(e) = guard::check_ipc_origin(req.headers(), &cfg.allowed_origins)
            {
                return ApiError::forbidden(e.to_string()).into_response();
            }
            req.extensions_mut().insert(Actor::local());
            return next.run(req).await;
        }
        Transport::Tcp { peer } => peer,
    };

    let trust = node.host_trust();
    let host = match guard::check_host(req.headers(), &trust) {
        Ok(h) => h.to_owned(),
        Err(e) => return ApiError::forbidden(e.to_string()).into_response(),
    };
    let origin = match guard::check_origin(req.headers(), &host, &cfg.allowed_origins) {
        Ok(o) => o.map(str::to_owned),
        Err(e) => return ApiError::forbidden(e.to_string()).into_response(),
    };
    if req.method() == Method::OPTIONS
        && let Some(o) = &origin
        && req.headers().contains_key(ACCESS_CONTROL_REQUEST_METHOD)
    {
        return preflight(o);
    }

    let mut refresh_cookie = None;
    let mut actor = Actor {
        who: "anonymous".into(),
        via: "tcp".into(),
        address: Some(peer.ip().to_string()),
    };
    // A share token opens its session's view routes and nothing else (`crate::share`).
    if let Some(tok) = query_param(req.uri().query(), "share") {
        // Another host's token (`<connection>/<token>`): its owner checks it; the relay
        // carries the request there, and no route of this node sees it.
        if let Some((relay, _, _)) = node.ext.share_target(&tok) {
            let relay = relay.clone();
            req.extensions_mut().insert(actor);
            return with_cors(relay.serve(req).await, origin.as_deref());
        }
        return match admit_share(&node, &tok, req.method(), req.uri().path()) {
            Ok(grant) => {
                actor.who = format!("share:{}", grant.link);
                req.extensions_mut().insert(grant);
                req.extensions_mut().insert(actor);
                with_cors(next.run(req).await, origin.as_deref())
            }
            Err(refusal) => {
                let status = match refusal {
                    crate::share::Refusal::Scope(_) => StatusCode::FORBIDDEN,
                    _ => StatusCode::UNAUTHORIZED,
                };
                let ev = crate::audit::Event::new("share_refused", &actor)
                    .with("code", refusal.code())
                    .with("route", req.uri().path());
                let audit = node.audit.clone();
                let _ = tokio::task::spawn_blocking(move || audit.record_or_warn(ev)).await;
                with_cors(
                    ApiError::new(status, refusal.code(), refusal.to_string()).into_response(),
                    origin.as_deref(),
                )
            }
        };
    }
    if !is_public(req.method(), req.uri().path()) {
        let secure = guard::arrived_over_https(transport, req.headers());
        match authenticate(
            &node,
            req.method(),
            req.uri(),
            req.headers(),
            peer.ip(),
            secure,
        )
        .await
        {
            Ok((r, who)) => {
                refresh_cookie = r;
                // A hub relaying its user's call: believed only from the node token.
                let relayed = req
                    .headers()
                    .get(crate::audit::FORWARDED_USER_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .filter(|_| who == "node-token");
                actor.who = match relayed {
                    Some(user) => {
                        actor.via = "hub".into();
                        format!("hub:{user}")
                    }
                    None => who,
                };
            }
            Err(resp) => return with_cors(resp, origin.as_deref()),
        }
    }
    req.extensions_mut().insert(actor);
    let mut resp = next.run(req).await;
    if let Some(c) = refresh_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        resp.headers_mut().append(SET_COOKIE, c);
    }
    with_cors(resp, origin.as_deref())
}

fn preflight(origin: &str) -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    h.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, DELETE, OPTIONS"),
    );
    h.insert(
        ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(
            "authorization, content-type, accept, last-event-id, mcp-session-id, mcp-protocol-version, x-tuic-session",
        ),
    );
    h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    with_cors(r, Some(origin))
}

/// Adds the CORS answer for an allowed origin (never `*`).
fn with_cors(mut resp: Response, origin: Option<&str>) -> Response {
    if let Some(v) = origin.and_then(|o| HeaderValue::from_str(o).ok()) {
        let h = resp.headers_mut();
        h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, v);
        h.insert(
            ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        h.insert(
            ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(tuic_proto::mcp::SESSION_HEADER),
        );
        h.append(VARY, HeaderValue::from_static("origin"));
    }
    resp
}

/// Checks the request's credentials: who the caller is (the audit's `who`) and, when
/// `Some(cookie)`, a request to refresh the sliding cookie (`secure`: the request arrived over
/// HTTPS, so the cookie gets `Secure`).
async fn authenticate(
    node: &Arc<Node>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    ip: IpAddr,
    secure: bool,
) -> Result<(Option<String>, String), Response> {
    let cfg = node.config();
    let lifetime_ms = u64::from(cfg.tuning.login_session_days) * 86_400_000;
    let path = uri.path();
    let cookies = headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok());
    let cookie = auth::find_cookie(cookies, COOKIE_NAME);
    let is_node_token = |t: &str| auth::secret_eq(t, &node.node_token());
    if peer_only(path) {
        return match cookie {
            Some(tok) if is_node_token(tok) => Ok((None, "node-token".into())),
            _ => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "peer_credential_required",
                "the peer link takes the node token (`tuic-node token`) as the tui-session cookie; a login or Basic credential is not a peer credential",
            )
            .into_response()),
        };
    }
    if let Some(tok) = cookie {
        if is_node_token(tok) {
            if person_only(path) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "person_credential_required",
                    "the node token is a machine's credential; logins are listed and revoked with a person's login or password",
                )
                .into_response());
            }
            return Ok((None, "node-token".into()));
        }
        if let Some(used) = check_login(node, tok, lifetime_ms) {
            let who = format!("login:{}", auth::login_id(&auth::token_hash(tok)));
            return Ok((
                used.refresh_cookie
                    .then(|| auth::session_cookie(tok, lifetime_ms / 1000, secure)),
                who,
            ));
        }
    }
    if cookie_only(method, path) {
        return Err(ApiError::new(
            axum::http::StatusCode::UNAUTHORIZED,
            "unauthorized",
            "executable replacement needs the tui-session login cookie; Basic Auth and ?token= do not authorize it",
        )
        .into_response());
    }
    if accepts_query_token(method, path)
        && let Some(tok) = query_token(uri.query())
    {
        if is_node_token(&tok) {
            return Ok((None, "node-token".into()));
        }
        if check_login(node, &tok, lifetime_ms).is_some() {
            return Ok((
                None,
                format!("login:{}", auth::login_id(&auth::token_hash(&tok))),
            ));
        }
    }
    if let Some((user, pass)) = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(auth::parse_basic)
    {
        let now = Instant::now();
        if node.auth.basic_cached(&user, &pass, now) {
            return Ok((None, format!("basic:{user}")));
        }
        if let Admission::Throttled { retry_after_secs } = node.auth.admit(
            ip,
            &user,
            now,
            cfg.tuning.login_failures_per_minute,
            cfg.tuning.login_failures_global_per_minute,
        ) {
            return Err(throttled(retry_after_secs));
        }
        if check_password(&cfg, &user, &pass).await {
            node.auth.remember_basic(
                &user,
                &pass,
                now,
                Duration::from_secs(cfg.tuning.basic_cache_secs),
            );
            return Ok((None, format!("basic:{user}")));
        }
        node.auth.record_failure(ip, &user, now);
        tracing::info!(source = "auth", ip = %ip, "rejected Basic credentials");
        return Err(ApiError::unauthorized().into_response());
    }
    Err(unauthenticated(method, path, uri.query(), headers))
}

/// Verifies user and password against the configured bcrypt hash, off the async workers.
pub(crate) async fn check_password(cfg: &crate::config::Config, user: &str, pass: &str) -> bool {
    let Some(hash) = cfg.services.auth.password_hash.clone() else {
        return false;
    };
    let user_ok = auth::secret_eq(user, &cfg.services.auth.username);
    let pass = pass.to_owned();
    // Hash even for a wrong user name, so timing does not reveal which part was wrong.
    let pass_ok = tokio::task::spawn_blocking(move || auth::verify_password(&pass, &hash))
        .await
        .unwrap_or(false);
    user_ok && pass_ok
}

fn check_login(node: &Arc<Node>, tok: &str, lifetime_ms: u64) -> Option<auth::LoginUse> {
    let r = node
        .auth
        .check_login_token(tok, crate::logs::now_ms(), lifetime_ms)?;
    if let Some(rec) = r.persist.clone() {
        let (store, hash) = (node.store.clone(), auth::token_hash(tok));
        let auth_node = node.clone();
        node.tasks.spawn_blocking(move || {
            // A login revoked between the check and this write stays revoked.
            if !auth_node.auth.is_login(&hash) {
                return;
            }
            if let Err(e) = store.put_login_session(&hash, &rec) {
                tracing::warn!(error = %format!("{e:#}"), "persisting a login session's use");
            }
        });
    }
    Some(r)
}

/// 429 with `Retry-After`.
pub(crate) fn throttled(retry_after_secs: u64) -> Response {
    let mut r = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        "too many failed attempts; retry later",
    )
    .into_response();
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(retry_after_secs));
    r
}

fn query_token(query: Option<&str>) -> Option<String> {
    query_param(query, "token")
}

fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    serde_urlencoded::from_str::<Vec<(String, String)>>(query?)
        .ok()?
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// Checks a share token and its scope for `method path`.
fn admit_share(
    node: &Node,
    token: &str,
    method: &Method,
    path: &str,
) -> Result<crate::share::Grant, crate::share::Refusal> {
    let grant = node.shares.check(token, crate::logs::now_ms())?;
    crate::share::scope_allows(grant.scope, method, path, |id| {
        node.shares.names_session(&grant.link, id)
    })?;
    Ok(grant)
}

/// HTML navigation to the apps goes to the login form; everything else gets 401 JSON.
fn unauthenticated(
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Response {
    let wants_html = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/html"));
    let app_page =
        path == "/" || path == "/index.html" || path == "/mobile" || path.starts_with("/mobile/");
    if method == Method::GET && wants_html && app_page {
        let next = match query {
            Some(q) => format!("{path}?{q}"),
            None => path.to_owned(),
        };
        let target = format!(
            "/mobile/login?next={}",
            percent_encoding::utf8_percent_encode(&next, percent_encoding::NON_ALPHANUMERIC)
        );
        let mut r = StatusCode::SEE_OTHER.into_response();
        if let Ok(v) = HeaderValue::from_str(&target) {
            r.headers_mut().insert(LOCATION, v);
        }
        return r;
    }
    ApiError::unauthorized().into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_token_only_on_stream_routes() {
        assert!(accepts_query_token(&Method::GET, "/events"));
        assert!(accepts_query_token(&Method::GET, "/sessions/abc/stream"));
        assert!(!accepts_query_token(&Method::POST, "/events"));
        assert!(!accepts_query_token(&Method::POST, "/fs/upload-copy"));
        assert!(!accepts_query_token(&Method::POST, "/remote/update"));
        assert!(!accepts_query_token(&Method::GET, "/mcp/peer"));
        assert!(!accepts_query_token(&Method::GET, "/sessions"));
    }

    #[test]
    fn credential_scopes() {
        assert!(peer_only("/mcp/peer"));
        assert!(!peer_only("/mcp"));
        assert!(person_only("/auth/sessions"));
        assert!(person_only("/auth/sessions/abc"));
        assert!(person_only("/auth/token/rotate"));
        assert!(!person_only("/auth/login"));
        assert!(is_public(&Method::POST, "/auth/logout"));
        assert!(is_public(&Method::POST, "/notifications/answer/t/1"));
        assert!(!is_public(&Method::GET, "/notifications/answer/t/1"));
        assert!(!is_public(&Method::POST, "/notifications/1/answer"));
    }

    #[test]
    fn query_token_parsing() {
        assert_eq!(query_token(Some("a=1&token=x%2By")), Some("x+y".into()));
        assert_eq!(query_token(Some("a=1")), None);
        assert_eq!(query_token(None), None);
    }
}
