//! Service-level tests of the request boundary: every guard rule, in-process through the
//! real router (`oneshot`), with the transport a listener would attach.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use base64::Engine;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use tuic_node::guard::Transport;
use tuic_node::logs::LogRing;
use tuic_node::paths::{LocationEnv, Paths};
use tuic_node::state::{Node, RunOverrides};

const PASSWORD: &str = "correct horse";

struct Fixture {
    _dir: tempfile::TempDir,
    node: Arc<Node>,
    app: axum::Router,
}

fn fixture_with(extra: Value) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    // Cost 4 keeps the suite fast; production hashes use the default cost.
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let mut cfg = json!({
        "secret_store": "file",
        "services": {"auth": {"password_hash": hash}},
    });
    if let (Some(c), Some(e)) = (cfg.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            c.insert(k.clone(), v.clone());
        }
    }
    std::fs::write(dir.path().join("config.json"), cfg.to_string()).unwrap();
    let paths = Paths::resolve(Some(dir.path()), None, &LocationEnv::default()).unwrap();
    let node = Node::open(
        "tuic-node",
        paths,
        RunOverrides::default(),
        LogRing::default(),
    )
    .unwrap();
    let app = tuic_node::routes::router(node.clone());
    Fixture {
        _dir: dir,
        node,
        app,
    }
}

fn fixture() -> Fixture {
    fixture_with(json!({}))
}

fn tcp(peer: &str) -> Transport {
    Transport::Tcp {
        peer: peer.parse::<SocketAddr>().unwrap(),
    }
}

fn req(method: &str, uri: &str) -> axum::http::request::Builder {
    Request::builder().method(method).uri(uri)
}

fn basic(user: &str, pass: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
    )
}

async fn send(
    app: &axum::Router,
    transport: Transport,
    r: Request<Body>,
) -> axum::response::Response {
    let mut r = r;
    r.extensions_mut().insert(transport);
    app.clone().oneshot(r).await.unwrap()
}

async fn body_json(resp: axum::response::Response) -> Value {
    let b = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&b).unwrap_or(Value::Null)
}

fn lan() -> Transport {
    tcp("192.168.1.20:50000")
}

#[tokio::test]
async fn ipc_needs_no_credentials() {
    let f = fixture();
    let r = send(
        &f.app,
        Transport::Ipc,
        req("GET", "/config").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn tcp_without_credentials_is_401_json() {
    let f = fixture();
    let r = send(
        &f.app,
        lan(),
        req("GET", "/config")
            .header("host", "localhost:9876")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(body_json(r).await["code"], "unauthorized");
}

#[tokio::test]
async fn tcp_basic_right_and_wrong() {
    let f = fixture();
    let ok = req("GET", "/config")
        .header("host", "localhost")
        .header("authorization", basic("admin", PASSWORD));
    assert_eq!(
        send(&f.app, lan(), ok.body(Body::empty()).unwrap())
            .await
            .status(),
        StatusCode::OK
    );
    let bad = req("GET", "/config")
        .header("host", "localhost")
        .header("authorization", basic("admin", "nope"));
    assert_eq!(
        send(&f.app, lan(), bad.body(Body::empty()).unwrap())
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
    let wrong_user = req("GET", "/config")
        .header("host", "localhost")
        .header("authorization", basic("root", PASSWORD));
    assert_eq!(
        send(&f.app, lan(), wrong_user.body(Body::empty()).unwrap())
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn repeated_wrong_passwords_are_throttled_per_address() {
    let f = fixture();
    let attempt = |pass: &'static str| {
        req("GET", "/config")
            .header("host", "localhost")
            .header("authorization", basic("admin", pass))
            .body(Body::empty())
            .unwrap()
    };
    for _ in 0..5 {
        assert_eq!(
            send(&f.app, lan(), attempt("wrong")).await.status(),
            StatusCode::UNAUTHORIZED
        );
    }
    let r = send(&f.app, lan(), attempt("wrong")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().get(header::RETRY_AFTER).is_some());
    // Even the right password waits out the window from that address...
    assert_eq!(
        send(&f.app, lan(), attempt(PASSWORD)).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // ...but another address is not affected.
    assert_eq!(
        send(&f.app, tcp("192.168.1.21:1"), attempt(PASSWORD))
            .await
            .status(),
        StatusCode::OK
    );
    // The login form shares the limit.
    let login = req("POST", "/auth/login")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Body::from(
            json!({"username": "admin", "password": PASSWORD}).to_string(),
        ))
        .unwrap();
    assert_eq!(
        send(&f.app, lan(), login).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn host_guard_runs_before_auth() {
    let f = fixture();
    for host in ["evil.example", "evil.example:9876", "8.8.8.8"] {
        let r = req("GET", "/config")
            .header("host", host)
            .header("authorization", basic("admin", PASSWORD));
        assert_eq!(
            send(&f.app, lan(), r.body(Body::empty()).unwrap())
                .await
                .status(),
            StatusCode::FORBIDDEN,
            "{host}"
        );
    }
    let missing = req("GET", "/health").body(Body::empty()).unwrap();
    assert_eq!(
        send(&f.app, lan(), missing).await.status(),
        StatusCode::FORBIDDEN
    );
    let dup = req("GET", "/health")
        .header("host", "localhost")
        .header("host", "localhost")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        send(&f.app, lan(), dup).await.status(),
        StatusCode::FORBIDDEN
    );
    // Public routes are still behind the Host guard.
    let health = req("GET", "/health")
        .header("host", "evil.example")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        send(&f.app, lan(), health).await.status(),
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn configured_tailscale_name_is_trusted() {
    let f = fixture_with(json!({"tailscale": {"hostname": "box.tail1.ts.net"}}));
    let r = req("GET", "/health")
        .header("host", "box.tail1.ts.net")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&f.app, lan(), r).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn origin_guard_and_cors() {
    let f = fixture_with(json!({"allowed_origins": ["http://tauri.localhost"]}));
    let with_origin = |o: &str| {
        req("GET", "/config")
            .header("host", "localhost:9876")
            .header("origin", o)
            .header("authorization", basic("admin", PASSWORD))
            .body(Body::empty())
            .unwrap()
    };
    for o in ["http://evil.example", "null", "http://localhost:9877"] {
        assert_eq!(
            send(&f.app, lan(), with_origin(o)).await.status(),
            StatusCode::FORBIDDEN,
            "{o}"
        );
    }
    for o in [
        "http://localhost:9876",
        "https://localhost:9876",
        "http://tauri.localhost",
    ] {
        let r = send(&f.app, lan(), with_origin(o)).await;
        assert_eq!(r.status(), StatusCode::OK, "{o}");
        assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], o);
        assert_eq!(
            r.headers()[header::ACCESS_CONTROL_ALLOW_CREDENTIALS],
            "true"
        );
    }
    // Preflight is public and never answers `*`.
    let pre = req("OPTIONS", "/config")
        .header("host", "localhost:9876")
        .header("origin", "http://localhost:9876")
        .header("access-control-request-method", "PUT")
        .body(Body::empty())
        .unwrap();
    let r = send(&f.app, lan(), pre).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "http://localhost:9876"
    );
    let pre_evil = req("OPTIONS", "/config")
        .header("host", "localhost:9876")
        .header("origin", "http://evil.example")
        .header("access-control-request-method", "PUT")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        send(&f.app, lan(), pre_evil).await.status(),
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn ipc_mcp_refuses_foreign_origin_only() {
    let f = fixture();
    let r = req("POST", "/mcp")
        .header("origin", "http://evil.example")
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(
        send(&f.app, Transport::Ipc, r).await.status(),
        StatusCode::FORBIDDEN
    );
    // Other IPC routes do not look at Origin.
    let r = req("GET", "/health")
        .header("origin", "http://evil.example")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        send(&f.app, Transport::Ipc, r).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn public_routes_answer_without_credentials() {
    let f = fixture();
    for path in ["/health", "/mobile/login"] {
        let r = req("GET", path)
            .header("host", "127.0.0.1:9876")
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            send(&f.app, lan(), r).await.status(),
            StatusCode::OK,
            "{path}"
        );
    }
}

#[tokio::test]
async fn html_navigation_redirects_to_login_and_api_gets_401() {
    let f = fixture();
    let nav = req("GET", "/mobile")
        .header("host", "localhost")
        .header("accept", "text/html,*/*")
        .body(Body::empty())
        .unwrap();
    let r = send(&f.app, lan(), nav).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        r.headers()[header::LOCATION],
        "/mobile/login?next=%2Fmobile"
    );
    let api = req("GET", "/mobile")
        .header("host", "localhost")
        .header("accept", "application/json")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        send(&f.app, lan(), api).await.status(),
        StatusCode::UNAUTHORIZED
    );
    let other = req("GET", "/config")
        .header("host", "localhost")
        .header("accept", "text/html")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        send(&f.app, lan(), other).await.status(),
        StatusCode::UNAUTHORIZED
    );
}

fn set_cookie_token(r: &axum::response::Response) -> String {
    let c = r.headers()[header::SET_COOKIE].to_str().unwrap().to_owned();
    assert!(
        c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Max-Age=2592000"),
        "{c}"
    );
    c.split(';')
        .next()
        .unwrap()
        .strip_prefix("tui-session=")
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn login_cookie_authenticates_and_form_redirects_safely() {
    let f = fixture();
    let json_login = req("POST", "/auth/login")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Body::from(
            json!({"username": "admin", "password": PASSWORD}).to_string(),
        ))
        .unwrap();
    let r = send(&f.app, lan(), json_login).await;
    assert_eq!(r.status(), StatusCode::OK);
    let token = set_cookie_token(&r);
    assert_eq!(body_json(r).await, json!({"ok": true}));
    let with_cookie = req("GET", "/config")
        .header("host", "localhost")
        .header("cookie", format!("a=b; tui-session={token}"));
    assert_eq!(
        send(&f.app, lan(), with_cookie.body(Body::empty()).unwrap())
            .await
            .status(),
        StatusCode::OK
    );
    let forged = req("GET", "/config")
        .header("host", "localhost")
        .header("cookie", "tui-session=forged");
    assert_eq!(
        send(&f.app, lan(), forged.body(Body::empty()).unwrap())
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );

    for (next, expect) in [
        ("/mobile/s/3", "/mobile/s/3"),
        ("/", "/"),
        ("https://evil.example/", "/mobile"),
        ("//evil", "/mobile"),
    ] {
        let form = req("POST", "/auth/login")
            .header("host", "localhost")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(
                serde_urlencoded::to_string([
                    ("username", "admin"),
                    ("password", PASSWORD),
                    ("next", next),
                ])
                .unwrap(),
            ))
            .unwrap();
        let r = send(&f.app, lan(), form).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(r.headers()[header::LOCATION], expect, "{next}");
        set_cookie_token(&r);
    }
    let bad_form = req("POST", "/auth/login")
        .header("host", "localhost")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("username=admin&password=no&next=%2Fmobile"))
        .unwrap();
    let r = send(&f.app, lan(), bad_form).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(
        r.headers()[header::LOCATION]
            .to_str()
            .unwrap()
            .starts_with("/mobile/login?error=1")
    );
    assert!(r.headers().get(header::SET_COOKIE).is_none());
}

#[tokio::test]
async fn query_token_only_on_stream_routes() {
    let f = fixture();
    let token = f.node.node_token();
    let events = req("GET", &format!("/events?token={token}"))
        .header("host", "localhost")
        .body(Body::empty())
        .unwrap();
    let r = send(&f.app, lan(), events).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[header::CONTENT_TYPE], "text/event-stream");
    for (m, path) in [
        ("GET", "/config"),
        ("POST", "/fs/upload-copy"),
        ("POST", "/remote/update"),
        ("GET", "/mcp/peer"),
    ] {
        let r = req(m, &format!("{path}?token={token}"))
            .header("host", "localhost")
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            send(&f.app, lan(), r).await.status(),
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
    }
    let wrong = req("GET", "/events?token=nope")
        .header("host", "localhost")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        send(&f.app, lan(), wrong).await.status(),
        StatusCode::UNAUTHORIZED
    );
    // The node token works as the cookie (that is how a hub authenticates).
    let hub = req("GET", "/config")
        .header("host", "localhost")
        .header("cookie", format!("tui-session={token}"));
    assert_eq!(
        send(&f.app, lan(), hub.body(Body::empty()).unwrap())
            .await
            .status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn body_limit_is_axum_default_2_mib() {
    assert_eq!(tuic_node::routes::MAX_BODY_BYTES, 2 * 1024 * 1024);
    let f = fixture();
    let too_big = vec![b' '; tuic_node::routes::MAX_BODY_BYTES + 1];
    let r = req("PUT", "/config")
        .header("content-type", "application/json")
        .body(Body::from(too_big))
        .unwrap();
    assert_eq!(
        send(&f.app, Transport::Ipc, r).await.status(),
        StatusCode::PAYLOAD_TOO_LARGE
    );
    // At the limit the body is read (and then refused as JSON, not as too large).
    let at_limit = vec![b' '; tuic_node::routes::MAX_BODY_BYTES];
    let r = req("PUT", "/config")
        .header("content-type", "application/json")
        .body(Body::from(at_limit))
        .unwrap();
    assert_eq!(
        send(&f.app, Transport::Ipc, r).await.status(),
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn large_responses_are_compressed_small_ones_and_sse_are_not() {
    let f = fixture();
    for i in 0..100 {
        tracing::subscriber::with_default(tracing_subscriber_for(&f.node), || {
            tracing::info!(i, "a log line long enough to make the response large")
        });
    }
    let big = req("GET", "/logs?limit=100")
        .header("accept-encoding", "gzip")
        .body(Body::empty())
        .unwrap();
    let r = send(&f.app, Transport::Ipc, big).await;
    assert_eq!(r.headers()[header::CONTENT_ENCODING], "gzip");
    let small = req("GET", "/health")
        .header("accept-encoding", "gzip, br")
        .body(Body::empty())
        .unwrap();
    assert!(
        send(&f.app, Transport::Ipc, small)
            .await
            .headers()
            .get(header::CONTENT_ENCODING)
            .is_none()
    );
    let sse = req("GET", "/events")
        .header("accept-encoding", "gzip, br")
        .body(Body::empty())
        .unwrap();
    assert!(
        send(&f.app, Transport::Ipc, sse)
            .await
            .headers()
            .get(header::CONTENT_ENCODING)
            .is_none()
    );
}

fn tracing_subscriber_for(node: &Node) -> impl tracing::Subscriber + Send + Sync {
    use tracing_subscriber::layer::SubscriberExt;
    tracing_subscriber::registry().with(node.logs.layer())
}

#[tokio::test]
async fn get_config_never_returns_secrets() {
    let f = fixture();
    let r = send(
        &f.app,
        Transport::Ipc,
        req("GET", "/config").body(Body::empty()).unwrap(),
    )
    .await;
    let text =
        String::from_utf8(r.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(!text.contains("$2"), "bcrypt hash leaked: {text}");
    assert!(!text.contains(&f.node.node_token()));
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["services"]["auth"]["password_hash_exists"], json!(true));
}

// ---- Logins, peer credentials, throttle and transport (issue 40, findings 6 and 8) ----

/// Logs in over `transport` with JSON; the whole response.
async fn login_as(
    app: &axum::Router,
    transport: Transport,
    user: &str,
    pass: &str,
    extra: &[(&str, &str)],
) -> axum::response::Response {
    let mut r = req("POST", "/auth/login")
        .header("host", "localhost")
        .header("content-type", "application/json");
    for (k, v) in extra {
        r = r.header(*k, *v);
    }
    let body = json!({"username": user, "password": pass}).to_string();
    send(app, transport, r.body(Body::from(body)).unwrap()).await
}

/// `GET path` over the LAN with `cookie` as the `tui-session` cookie: the status.
async fn with_cookie(app: &axum::Router, path: &str, cookie: &str) -> StatusCode {
    let r = req("GET", path)
        .header("host", "localhost")
        .header("cookie", format!("tui-session={cookie}"))
        .body(Body::empty())
        .unwrap();
    send(app, lan(), r).await.status()
}

/// The node token as the file vault holds it (the fixture uses `secret_store: file`; the file
/// is encrypted, so it is read through the vault).
fn file_token(f: &Fixture) -> String {
    let dir = f._dir.path();
    tuic_node::vault::Vault::open(dir, dir.join("secrets.json"), false)
        .get("session_token")
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn a_login_is_not_a_peer_credential() {
    let f = fixture();
    let r = login_as(&f.app, lan(), "admin", PASSWORD, &[]).await;
    let cookie = set_cookie_token(&r);
    let peer = |auth: Option<(&'static str, String)>| {
        let mut r = req("GET", "/mcp/peer")
            .header("host", "localhost")
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
        if let Some((k, v)) = auth {
            r = r.header(k, v);
        }
        r.body(Body::empty()).unwrap()
    };
    let r = send(
        &f.app,
        lan(),
        peer(Some(("cookie", format!("tui-session={cookie}")))),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(body_json(r).await["code"], "peer_credential_required");
    let r = send(
        &f.app,
        lan(),
        peer(Some(("authorization", basic("admin", PASSWORD)))),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // The node token still opens it (the hub's credential): past authentication, the
    // upgrade is answered by the route.
    let token = file_token(&f);
    let r = send(
        &f.app,
        lan(),
        peer(Some(("cookie", format!("tui-session={token}")))),
    )
    .await;
    assert_ne!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn logout_revokes_the_cookie_server_side() {
    let f = fixture();
    let r = login_as(&f.app, lan(), "admin", PASSWORD, &[]).await;
    let cookie = set_cookie_token(&r);
    assert_eq!(
        with_cookie(&f.app, "/config", &cookie).await,
        StatusCode::OK
    );
    let out = req("POST", "/auth/logout")
        .header("host", "localhost")
        .header("accept", "application/json")
        .header("cookie", format!("tui-session={cookie}"))
        .body(Body::empty())
        .unwrap();
    let r = send(&f.app, lan(), out).await;
    assert_eq!(r.status(), StatusCode::OK);
    let clear = r.headers()[header::SET_COOKIE].to_str().unwrap().to_owned();
    assert!(
        clear.starts_with("tui-session=;") && clear.contains("Max-Age=0"),
        "{clear}"
    );
    assert_eq!(body_json(r).await, json!({"ok": true, "revoked": true}));
    // Replaying the cookie (a copy the browser did not clear) is refused.
    assert_eq!(
        with_cookie(&f.app, "/config", &cookie).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn logins_are_listed_and_revoked_and_the_node_token_cannot_manage_them() {
    let f = fixture();
    let ua = [("user-agent", "phone/1.0")];
    let a = set_cookie_token(&login_as(&f.app, lan(), "admin", PASSWORD, &ua).await);
    let b =
        set_cookie_token(&login_as(&f.app, tcp("192.168.1.33:4000"), "admin", PASSWORD, &[]).await);
    let list = req("GET", "/auth/sessions")
        .header("host", "localhost")
        .header("cookie", format!("tui-session={a}"))
        .body(Body::empty())
        .unwrap();
    let r = send(&f.app, lan(), list).await;
    assert_eq!(r.status(), StatusCode::OK);
    let rows = body_json(r).await;
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let mine = rows.iter().find(|r| r["current"] == json!(true)).unwrap();
    assert_eq!(mine["address"], "192.168.1.20");
    assert_eq!(mine["user_agent"], "phone/1.0");
    assert!(mine["created_ms"].as_u64().unwrap() > 0);
    let other = rows.iter().find(|r| r["current"] == json!(false)).unwrap();
    assert_eq!(other["address"], "192.168.1.33");
    // Revoke b by its id: b is refused, a still works.
    let id = other["id"].as_str().unwrap();
    let del = req("DELETE", &format!("/auth/sessions/{id}"))
        .header("host", "localhost")
        .header("cookie", format!("tui-session={a}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&f.app, lan(), del).await.status(), StatusCode::OK);
    assert_eq!(
        with_cookie(&f.app, "/config", &b).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(with_cookie(&f.app, "/config", &a).await, StatusCode::OK);
    // The node token is a machine's credential: it works where the hub needs it, but does
    // not list or revoke people's logins.
    let token = file_token(&f);
    assert_eq!(with_cookie(&f.app, "/config", &token).await, StatusCode::OK);
    let r = req("GET", "/auth/sessions")
        .header("host", "localhost")
        .header("cookie", format!("tui-session={token}"))
        .body(Body::empty())
        .unwrap();
    let r = send(&f.app, lan(), r).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(body_json(r).await["code"], "person_credential_required");
    // Nor is the token rotated from the network.
    let r = req("POST", "/auth/token/rotate")
        .header("host", "localhost")
        .header("authorization", basic("admin", PASSWORD))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&f.app, lan(), r).await.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_changed_password_revokes_every_login() {
    let f = fixture();
    let cookie = set_cookie_token(&login_as(&f.app, lan(), "admin", PASSWORD, &[]).await);
    assert_eq!(
        with_cookie(&f.app, "/config", &cookie).await,
        StatusCode::OK
    );
    // As the config watcher does when `set-password` rewrote config.json.
    let mut cfg = (*f.node.config()).clone();
    cfg.services.auth.password_hash = Some(bcrypt::hash("new password", 4).unwrap());
    f.node.set_config(cfg);
    assert_eq!(
        with_cookie(&f.app, "/config", &cookie).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_rotated_node_token_works_and_the_old_one_does_not() {
    let f = fixture();
    let old = file_token(&f);
    assert_eq!(with_cookie(&f.app, "/config", &old).await, StatusCode::OK);
    let r = send(
        &f.app,
        Transport::Ipc,
        req("POST", "/auth/token/rotate")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let new = body_json(r).await["token"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert_eq!(file_token(&f), new, "the vault holds the new token");
    assert_eq!(with_cookie(&f.app, "/config", &new).await, StatusCode::OK);
    assert_eq!(
        with_cookie(&f.app, "/config", &old).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn one_users_wrong_passwords_never_lock_out_anothers_right_password() {
    let f = fixture();
    // Everyone behind one address (a NAT, or loopback behind `tailscale serve`).
    for _ in 0..8 {
        let r = login_as(&f.app, lan(), "mallory", "guess", &[]).await;
        assert!(
            [StatusCode::UNAUTHORIZED, StatusCode::TOO_MANY_REQUESTS].contains(&r.status()),
            "{}",
            r.status()
        );
    }
    assert_eq!(
        login_as(&f.app, lan(), "mallory", "guess", &[])
            .await
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        login_as(&f.app, lan(), "admin", PASSWORD, &[])
            .await
            .status(),
        StatusCode::OK
    );
    let ok = req("GET", "/config")
        .header("host", "localhost")
        .header("authorization", basic("admin", PASSWORD))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&f.app, lan(), ok).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn the_global_ceiling_throttles_guessing_from_many_addresses() {
    let f = fixture_with(json!({"tuning": {"login_failures_global_per_minute": 6}}));
    for i in 0..6 {
        let r = login_as(&f.app, tcp(&format!("10.1.0.{i}:1")), "admin", "x", &[]).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    }
    let r = login_as(&f.app, tcp("10.1.0.99:1"), "admin", PASSWORD, &[]).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().get(header::RETRY_AFTER).is_some());
}

#[tokio::test]
async fn cookies_are_secure_when_a_local_proxy_says_https() {
    let f = fixture();
    let set_cookie =
        |r: &axum::response::Response| r.headers()[header::SET_COOKIE].to_str().unwrap().to_owned();
    // `tailscale serve` relays HTTPS from 127.0.0.1 with X-Forwarded-Proto.
    let proxied = login_as(
        &f.app,
        tcp("127.0.0.1:40000"),
        "admin",
        PASSWORD,
        &[("x-forwarded-proto", "https")],
    )
    .await;
    assert!(
        set_cookie(&proxied).contains("; Secure"),
        "{}",
        set_cookie(&proxied)
    );
    // Plain HTTP: no Secure (the browser would never send it back).
    let plain = login_as(&f.app, lan(), "admin", PASSWORD, &[]).await;
    assert!(!set_cookie(&plain).contains("Secure"));
    // Only a proxy on this machine is trusted to say https.
    let spoofed = login_as(
        &f.app,
        lan(),
        "admin",
        PASSWORD,
        &[("x-forwarded-proto", "https")],
    )
    .await;
    assert!(!set_cookie(&spoofed).contains("Secure"));
}

#[tokio::test]
async fn the_login_page_warns_when_the_password_would_cross_the_network_in_clear() {
    let f = fixture();
    let page = |t: Transport, proto: Option<&'static str>| {
        let app = f.app.clone();
        async move {
            let mut r = req("GET", "/mobile/login").header("host", "localhost");
            if let Some(p) = proto {
                r = r.header("x-forwarded-proto", p);
            }
            let resp = send(&app, t, r.body(Body::empty()).unwrap()).await;
            assert_eq!(resp.status(), StatusCode::OK);
            let b = resp.into_body().collect().await.unwrap().to_bytes();
            String::from_utf8(b.to_vec()).unwrap()
        }
    };
    let notice = "id=\"plain-http\"";
    assert!(page(lan(), None).await.contains(notice));
    assert!(!page(tcp("127.0.0.1:1"), None).await.contains(notice));
    assert!(
        !page(tcp("100.100.1.2:1"), None).await.contains(notice),
        "Tailscale"
    );
    assert!(
        !page(tcp("127.0.0.1:1"), Some("https"))
            .await
            .contains(notice),
        "behind a local HTTPS proxy"
    );
    assert!(!page(Transport::Ipc, None).await.contains(notice));
}
