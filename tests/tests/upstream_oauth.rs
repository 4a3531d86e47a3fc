//! OAuth 2.1 for HTTP upstreams, end to end against a real authorization server: the
//! official Python MCP SDK's `mcp.server.auth` (RFC 8414 metadata, RFC 7591 registration,
//! PKCE-checked code and refresh grants) in one process, and a protected MCP server on the same
//! SDK (RFC 9728 metadata, bearer checks by introspection) in another. The test plays the user:
//! it opens the authorize URL tuic hands out and follows the redirect to tuic's loopback
//! callback. Then tokens expire, are refreshed, are revoked and recovered from — and the bad
//! cases (a wrong state, a callback after cancel, an expired flow, a down authorization server)
//! are refused clearly without disturbing anything else.

mod mcp_support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use mcp_support::{NodeProc, call, text};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tuic_tests::bed::free_port;

fn clients() -> std::path::PathBuf {
    tuic_tests::clients_dir()
}

async fn listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "{what} did not listen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The authorization server on `port`, access tokens living `ttl` seconds.
async fn auth_server(python: &str, port: u16, ttl: u64) -> tokio::process::Child {
    let c = tokio::process::Command::new(python)
        .arg(clients().join("oauth_upstream.py"))
        .args(["as", &port.to_string(), &ttl.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    listening(port, "the authorization server").await;
    c
}

/// The protected MCP server on `port`, trusting the authorization server at `as_port`.
async fn protected(python: &str, port: u16, as_port: u16) -> tokio::process::Child {
    let c = tokio::process::Command::new(python)
        .arg(clients().join("oauth_upstream.py"))
        .args([
            "rs",
            &port.to_string(),
            &format!("http://127.0.0.1:{as_port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    listening(port, "the protected MCP server").await;
    c
}

/// A node whose stderr (at debug level) goes to `log`, so the test can read everything it
/// logged.
async fn start_node(tuning: Value, upstreams: Value, log: &Path) -> NodeProc {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mcp-upstreams.json"),
        serde_json::to_vec_pretty(&upstreams).unwrap(),
    )
    .unwrap();
    let cfg = json!({"secret_store": "file", "tuning": tuning});
    std::fs::write(dir.path().join("config.json"), cfg.to_string()).unwrap();
    spawn_node(dir, log).await
}

/// Starts a node on an existing config dir, appending its stderr to `log`.
async fn spawn_node(dir: tempfile::TempDir, log: &Path) -> NodeProc {
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = tokio::process::Command::new(mcp_support::node_bin())
        .arg("--config-dir")
        .arg(dir.path())
        .env("TUIC_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let socket = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("node exited");
            if let Some(rest) = line.strip_prefix("tuic-node ready ipc=") {
                return std::path::PathBuf::from(rest.split(" tcp=").next().unwrap());
            }
        }
    })
    .await
    .expect("ready line");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    NodeProc { child, dir, socket }
}

async fn req(node: &NodeProc, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let h: &[(&str, &str)] = if body.is_some() {
        &[("content-type", "application/json")]
    } else {
        &[]
    };
    let r = node
        .connect()
        .await
        .send(
            method,
            path,
            h,
            body.map(|b| b.to_string()).unwrap_or_default(),
        )
        .await;
    (r.status, r.json())
}

async fn raw(node: &NodeProc, path: &str) -> String {
    let r = node.connect().await.send("GET", path, &[], "").await;
    String::from_utf8_lossy(&r.body).into_owned()
}

fn row<'a>(status: &'a Value, name: &str) -> Option<&'a Value> {
    status["upstreams"]
        .as_array()
        .and_then(|a| a.iter().find(|u| u["name"] == name))
}

/// Waits (bounded) until `pred` holds for upstream `name`'s status row.
async fn wait_row(node: &NodeProc, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, s) = req(node, "GET", "/mcp/status", None).await;
        if let Some(r) = row(&s, name)
            && pred(r)
        {
            return r.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {:#}",
            row(&s, name).cloned().unwrap_or(Value::Null)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The user's part: opens the authorize URL and returns where the authorization server
/// redirects (the loopback callback with `code` and `state`).
async fn consent(authorize_url: &str) -> String {
    let r = browser().get(authorize_url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 302, "authorize: {:?}", r.text().await);
    r.headers()["location"].to_str().unwrap().to_owned()
}

async fn get_page(url: &str) -> (u16, String) {
    let r = browser().get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn as_stats(as_port: u16) -> Value {
    browser()
        .get(format!("http://127.0.0.1:{as_port}/admin/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn as_admin(as_port: u16, what: &str) {
    let r = browser()
        .post(format!("http://127.0.0.1:{as_port}/admin/{what}"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
}

fn query_param(url: &str, key: &str) -> String {
    url.split_once('?')
        .unwrap()
        .1
        .split('&')
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} missing in {url}"))
        .to_owned()
}

fn with_param(url: &str, key: &str, value: &str) -> String {
    let (base, q) = url.split_once('?').unwrap();
    let q: Vec<String> = q
        .split('&')
        .map(|kv| {
            if kv.starts_with(&format!("{key}=")) {
                format!("{key}={value}")
            } else {
                kv.to_owned()
            }
        })
        .collect();
    format!("{base}?{}", q.join("&"))
}

#[tokio::test]
async fn oauth_discovery_pkce_callback_refresh_and_401_recovery_against_a_real_server() {
    let tuic_tests::SdkClients { python, .. } = tuic_tests::sdk_clients();
    let (as_port, rs_port) = (free_port(), free_port());
    let _as = auth_server(&python, as_port, 6).await;
    let _rs = protected(&python, rs_port, as_port).await;
    let log = std::env::temp_dir().join(format!("tuic-oauth-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let upstreams = json!({"servers": [
        {"id": "prot-1", "name": "prot", "auth": {"type": "oauth2"},
         "transport": {"type": "http", "url": format!("http://127.0.0.1:{rs_port}/mcp")}},
        {"id": "py-1", "name": "py", "transport": {"type": "stdio", "command": python,
         "args": [clients().join("upstream_server.py").display().to_string(), "stdio"]}},
    ]});
    let tuning = json!({"upstream_oauth_refresh_margin_ms": 1000,
        "upstream_health_interval_ms": 600_000});
    let node = start_node(tuning, upstreams, &log).await;

    // The 401 with its resource_metadata challenge: needs_auth, diagnosable.
    let r = wait_row(&node, "prot", "prot needs auth", |r| {
        r["status"] == "needs_auth"
    })
    .await;
    assert_eq!(r["auth"]["state"], "needs_auth", "{r}");
    wait_row(&node, "py", "py ready", |r| r["status"] == "ready").await;

    // Two flows at once: neither waits for the other; each has its own state and port.
    let (a, b) = tokio::join!(
        req(
            &node,
            "POST",
            "/mcp/upstreams/prot/oauth/start",
            Some(json!({}))
        ),
        req(
            &node,
            "POST",
            "/mcp/upstreams/prot/oauth/start",
            Some(json!({}))
        ),
    );
    assert_eq!(a.0, 200, "{}", a.1);
    assert_eq!(b.0, 200, "{}", b.1);
    let (a, b) = (a.1, b.1);
    assert_eq!(
        a["authorization_server"],
        format!("http://127.0.0.1:{as_port}"),
        "{a}"
    );
    assert_eq!(a["cross_domain_as"], false);
    assert_eq!(a["registered"], true, "dynamic client registration: {a}");
    assert_ne!(a["redirect_uri"], b["redirect_uri"]);
    let url_a = a["authorize_url"].as_str().unwrap();
    let url_b = b["authorize_url"].as_str().unwrap();
    assert_eq!(
        query_param(url_a, "code_challenge_method"),
        "S256",
        "{url_a}"
    );
    assert!(
        query_param(url_a, "resource").contains(&rs_port.to_string()),
        "RFC 8707: {url_a}"
    );
    assert_ne!(query_param(url_a, "state"), query_param(url_b, "state"));
    let r = wait_row(&node, "prot", "authorizing", |r| {
        r["status"] == "authorizing"
    })
    .await;
    assert_eq!(r["auth"]["state"], "authorizing", "{r}");

    // A wrong state on the callback: refused with a page, the pending flow untouched.
    let back_a = consent(url_a).await;
    assert!(
        back_a.starts_with(a["redirect_uri"].as_str().unwrap()),
        "{back_a}"
    );
    let (code, page) = get_page(&with_param(&back_a, "state", "forged")).await;
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("does not match"), "{page}");
    let r = wait_row(&node, "prot", "still authorizing", |r| {
        r["auth"]["state"] == "authorizing"
    })
    .await;
    assert_eq!(r["status"], "authorizing");

    // Cancel: both flows go, the status returns to needs_auth, and a callback that arrives
    // after it gets a page naming the cancel; no code is exchanged.
    let (code, c) = req(
        &node,
        "POST",
        "/mcp/upstreams/prot/oauth/cancel",
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 200, "{c}");
    assert_eq!(c["cancelled"], 2, "{c}");
    assert_eq!(c["status"]["status"], "needs_auth", "{c}");
    let back_b = consent(url_b).await;
    let (code, page) = get_page(&back_b).await;
    assert_eq!(code, 410, "{page}");
    assert!(page.contains("cancelled"), "{page}");
    let (code, page) = get_page(&back_a).await;
    assert_eq!(code, 410, "{page}");
    assert_eq!(as_stats(as_port).await["code_exchanges"], 0);

    // The real consent, from the CLI: `tuic mcp auth prot` prints the URL and waits; the
    // user opens it and follows the redirect to the loopback callback; the CLI then exits 0.
    let mut cli = tokio::process::Command::new(tuic_tests::bin("tuic"))
        .args(["mcp", "auth", "prot", "--wait-secs", "60"])
        .env("TUIC_SOCKET", &node.socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(cli.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let l = out
                .next_line()
                .await
                .unwrap()
                .expect("the CLI printed no URL");
            printed.push(l.clone());
            if l.starts_with("http://") {
                return l;
            }
        }
    })
    .await
    .expect("the CLI prints the URL");
    assert!(
        printed[0].contains(&format!("at http://127.0.0.1:{as_port}")),
        "{printed:?}"
    );
    let consented = Instant::now();
    let back = consent(&url).await;
    let (code, page) = get_page(&back).await;
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("authorized"), "{page}");
    // The grant is audited (before the page answered) by upstream name, never a token.
    let (_, audited) = req(&node, "GET", "/audit?kind=oauth_granted", None).await;
    assert_eq!(
        audited["entries"][0]["detail"]["upstream"], "prot",
        "{audited}"
    );
    let status = tokio::time::timeout(Duration::from_secs(30), cli.wait())
        .await
        .expect("the CLI returns after the callback")
        .unwrap();
    let rest = out.next_line().await.unwrap().unwrap_or_default();
    assert!(status.success(), "tuic mcp auth: {status} {rest}");
    assert!(rest.contains("authorized"), "{rest}");
    let r = wait_row(&node, "prot", "prot ready", |r| r["status"] == "ready").await;
    let to_ready = consented.elapsed();
    let plain = Instant::now();
    assert_eq!(
        text(&call(&node, "prot__add", json!({"a": 0, "b": 0})).await),
        "0"
    );
    let plain = plain.elapsed();
    assert_eq!(r["auth"]["state"], "authorized", "{r}");
    assert_eq!(r["auth"]["refresh_token_exists"], true, "{r}");
    let st = as_stats(as_port).await;
    assert_eq!(st["code_exchanges"], 1, "{st}");
    assert_eq!(st["registered"], 3, "one client per flow: {st}");
    assert_eq!(
        text(&call(&node, "prot__whoami", json!({})).await),
        "authorized"
    );
    // A second callback with the same (now used) state is answered, not re-run.
    let (code, page) = get_page(&back).await;
    assert!(code == 410 || code == 0, "{code} {page}");

    // Expiry: once the access token is within the margin of its expiry, the next call
    // refreshes first (no 401 needed) and succeeds.
    let before = as_stats(as_port).await;
    let r = wait_row(&node, "prot", "authorized", |r| {
        r["auth"]["expires_at_ms"].is_u64()
    })
    .await;
    let expires = r["auth"]["expires_at_ms"].as_u64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // Time itself is the event here: the token's expiry instant minus the margin.
    tokio::time::sleep(Duration::from_millis(
        (expires - 1000).saturating_sub(now) + 50,
    ))
    .await;
    let t = Instant::now();
    let r = call(&node, "prot__add", json!({"a": 2, "b": 3})).await;
    let with_refresh = t.elapsed();
    assert_eq!(text(&r), "5", "{r}");
    let after = as_stats(as_port).await;
    assert!(
        after["refreshes"].as_u64() > before["refreshes"].as_u64(),
        "refreshed after expiry: {before} → {after}"
    );
    assert_eq!(
        after["inactive_introspections"], before["inactive_introspections"],
        "the refresh came before the token was sent"
    );
    let r = wait_row(&node, "prot", "counted", |r| {
        r["auth"]["refreshes"].as_u64() >= Some(1)
    })
    .await;
    assert!(r["auth"]["expires_at_ms"].as_u64() > Some(expires), "{r}");

    // Revoked at the server: the call gets a 401, tuic refreshes once and retries.
    as_admin(as_port, "revoke_access").await;
    let before = as_stats(as_port).await;
    let t = Instant::now();
    let r = call(&node, "prot__add", json!({"a": 40, "b": 2})).await;
    let with_recovery = t.elapsed();
    println!(
        "oauth figures: consent → upstream ready {to_ready:?}; proxied call {plain:?}; \
         call that refreshes an expiring token first {with_refresh:?}; \
         call that recovers from a 401 (refresh + retry) {with_recovery:?}"
    );
    assert_eq!(text(&r), "42", "{r}");
    let after = as_stats(as_port).await;
    assert!(
        after["inactive_introspections"].as_u64() > before["inactive_introspections"].as_u64(),
        "the revoked token was rejected: {after}"
    );
    assert!(
        after["refreshes"].as_u64() > before["refreshes"].as_u64(),
        "{after}"
    );
    assert_eq!(
        row(&req(&node, "GET", "/mcp/status", None).await.1, "prot").unwrap()["status"],
        "ready"
    );

    // The token set is in the vault: after a kill -9 and a restart the upstream is authorized
    // again without a new consent.
    let NodeProc { mut child, dir, .. } = node;
    child.kill().await.unwrap();
    let node = spawn_node(dir, &log).await;
    let r = wait_row(&node, "prot", "ready after a restart", |r| {
        r["status"] == "ready"
    })
    .await;
    assert_eq!(r["auth"]["state"], "authorized", "{r}");
    assert_eq!(as_stats(as_port).await["code_exchanges"], 1);
    assert_eq!(
        text(&call(&node, "prot__add", json!({"a": 1, "b": 2})).await),
        "3"
    );

    wait_row(&node, "py", "py ready after the restart", |r| {
        r["status"] == "ready"
    })
    .await;

    // Concurrent calls after a revocation share one refresh (the semaphore).
    as_admin(as_port, "revoke_access").await;
    let before = as_stats(as_port).await;
    let calls: Vec<_> = (0..4)
        .map(|i| call(&node, "prot__add", json!({"a": i, "b": 1})))
        .collect();
    let results = futures::future::join_all(calls).await;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(text(r), (i + 1).to_string(), "{r}");
    }
    let after = as_stats(as_port).await;
    assert_eq!(
        after["refreshes"].as_u64().unwrap() - before["refreshes"].as_u64().unwrap(),
        1,
        "one refresh for four rejected calls: {before} → {after}"
    );

    // Everything revoked: the refresh is refused, the call says so, the upstream needs a new
    // authorization; the stdio upstream is not disturbed.
    as_admin(as_port, "revoke_all").await;
    let r = call(&node, "prot__add", json!({"a": 1, "b": 1})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text(&r).contains("invalid_grant"), "{r}");
    let r = wait_row(&node, "prot", "needs auth again", |r| {
        r["status"] == "needs_auth"
    })
    .await;
    assert!(
        r["auth"]["last_error"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{r}"
    );
    assert_eq!(
        text(&call(&node, "py__echo", json!({"text": "still"})).await),
        "echo: still"
    );

    // No token, refresh token or client id in any answer, file or log; the vault holds the
    // token set, bound to the MCP origin.
    let st = as_stats(as_port).await;
    let mut secrets: Vec<String> = Vec::new();
    for k in ["issued_access", "issued_refresh"] {
        secrets.extend(
            st[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned()),
        );
    }
    assert!(secrets.len() >= 8, "{st}");
    let dir = node.dir.path();
    let mut surfaces = vec![
        ("GET /config", raw(&node, "/config").await),
        ("GET /mcp/upstreams", raw(&node, "/mcp/upstreams").await),
        ("GET /mcp/status", raw(&node, "/mcp/status").await),
        (
            "GET /mcp/upstreams/prot/oauth",
            raw(&node, "/mcp/upstreams/prot/oauth").await,
        ),
        ("GET /logs", raw(&node, "/logs?limit=2000").await),
        (
            "config.json",
            std::fs::read_to_string(dir.join("config.json")).unwrap(),
        ),
        (
            "mcp-upstreams.json",
            std::fs::read_to_string(dir.join("mcp-upstreams.json")).unwrap(),
        ),
    ];
    surfaces.push(("stderr log", std::fs::read_to_string(&log).unwrap()));
    assert!(
        surfaces
            .last()
            .unwrap()
            .1
            .contains("OAuth access token refreshed"),
        "the log is read"
    );
    for (name, body) in &surfaces {
        for s in &secrets {
            assert!(!body.contains(s.as_str()), "{name} leaks a token");
        }
    }
    // The file store is encrypted (`vault`): read the entry through it.
    let vault = tuic_node::vault::Vault::open(dir, dir.join("secrets.json"), false);
    let cred: Value =
        serde_json::from_str(&vault.get("mcp_upstream:prot-1").unwrap().unwrap()).unwrap();
    assert_eq!(cred["type"], "oauth2");
    assert_eq!(cred["origin"], format!("http://127.0.0.1:{rs_port}"));
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn a_down_authorization_server_an_expired_flow_and_bad_callbacks_are_refused_clearly() {
    let tuic_tests::SdkClients { python, .. } = tuic_tests::sdk_clients();
    let (as_port, rs_port) = (free_port(), free_port());
    // The protected server trusts an authorization server that is not running.
    let _rs = protected(&python, rs_port, as_port).await;
    let log = std::env::temp_dir().join(format!("tuic-oauth-down-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let upstreams = json!({"servers": [
        {"id": "prot-1", "name": "prot",
         "transport": {"type": "http", "url": format!("http://127.0.0.1:{rs_port}/mcp")}},
        {"id": "py-1", "name": "py", "transport": {"type": "stdio", "command": python,
         "args": [clients().join("upstream_server.py").display().to_string(), "stdio"]}},
    ]});
    let tuning = json!({"upstream_oauth_flow_timeout_ms": 1500,
        "upstream_oauth_callback_grace_ms": 60_000});
    let node = start_node(tuning, upstreams, &log).await;
    // Without any auth config, the 401 alone makes it needs_auth (auth offered).
    let r = wait_row(&node, "prot", "needs auth", |r| r["status"] == "needs_auth").await;
    assert_eq!(r["auth"]["state"], "needs_auth", "{r}");
    wait_row(&node, "py", "py ready", |r| r["status"] == "ready").await;

    // The authorization server is down: a clear error naming it; nothing else moves.
    let (code, e) = req(
        &node,
        "POST",
        "/mcp/upstreams/prot/oauth/start",
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 502, "{e}");
    let msg = e["error"].as_str().unwrap();
    assert!(msg.contains(&format!("127.0.0.1:{as_port}")), "{msg}");
    let r = wait_row(&node, "prot", "error shown", |r| {
        r["auth"]["last_error"].is_string()
    })
    .await;
    assert_eq!(r["status"], "needs_auth", "{r}");
    assert_eq!(
        text(&call(&node, "py__echo", json!({"text": "x"})).await),
        "echo: x"
    );

    // Unknown upstreams and stdio upstreams are refused by name.
    let (code, e) = req(
        &node,
        "POST",
        "/mcp/upstreams/nope/oauth/start",
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 404, "{e}");
    let (code, e) = req(
        &node,
        "POST",
        "/mcp/upstreams/py/oauth/start",
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 400, "{e}");
    assert!(e["error"].as_str().unwrap().contains("stdio"), "{e}");

    // The server comes up: the next start works without a restart.
    let _as = auth_server(&python, as_port, 60).await;
    let (code, s) = req(
        &node,
        "POST",
        "/mcp/upstreams/prot/oauth/start",
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 200, "{s}");
    let r = wait_row(&node, "prot", "authorizing", |r| {
        r["auth"]["state"] == "authorizing"
    })
    .await;
    assert_eq!(r["status"], "authorizing");
    let redirect = s["redirect_uri"].as_str().unwrap().to_owned();

    // A callback without state, and one from the authorization server's error path.
    let (code, page) = get_page(&format!("{redirect}?code=x")).await;
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("no state"), "{page}");

    // Nobody comes back: the sweep drops the flow and rolls the status back; the callback
    // server outlives it and answers a late redirect with the reason.
    let back = consent(s["authorize_url"].as_str().unwrap()).await;
    let r = wait_row(&node, "prot", "flow expired", |r| {
        r["auth"]["state"] == "needs_auth"
    })
    .await;
    assert_eq!(r["status"], "needs_auth", "{r}");
    assert!(
        r["auth"]["last_error"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{r}"
    );
    let (code, page) = get_page(&back).await;
    assert_eq!(code, 410, "{page}");
    assert!(page.contains("expired"), "{page}");
    assert_eq!(as_stats(as_port).await["code_exchanges"], 0);
    assert_eq!(
        text(&call(&node, "py__echo", json!({"text": "y"})).await),
        "echo: y"
    );
    let _ = std::fs::remove_file(&log);
}
