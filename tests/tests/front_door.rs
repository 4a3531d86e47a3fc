//! End-to-end tests of the node's front door against the real `tuic-node` binary:
//! listeners, request boundary, auth, config saves, SSE, instance exclusivity, shutdown.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use tuic_tests::{
    NodeProc, config_dir, ipc, ipc_stream, listening_tcp_ports, remote_node, run_with_stdin,
    set_password,
};

const PASSWORD: &str = "hunter2 with spaces";

fn dir_arg(d: &tempfile::TempDir) -> String {
    d.path().to_str().unwrap().to_owned()
}

#[tokio::test]
async fn defaults_serve_health_on_ipc_and_open_no_tcp_port() {
    let d = config_dir(json!({}));
    let node = NodeProc::start("tuic-node", &["--config-dir", &dir_arg(&d)], &[]).unwrap();
    assert_eq!(node.socket, d.path().join("mcp.sock"));
    assert!(node.tcp.is_none());
    let r = ipc(&node.socket, "GET", "/health", None).await.unwrap();
    assert_eq!(r.status, 200);
    let h = r.json();
    assert_eq!(h["ok"], json!(true));
    assert!(h["uptime_secs"].is_u64() && h["protocol_version"].is_u64());
    assert!(
        listening_tcp_ports(node.pid()).is_empty(),
        "a TCP port is open: {:?}",
        listening_tcp_ports(node.pid())
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&node.socket)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}

#[tokio::test]
async fn remote_access_boundary_end_to_end() {
    let d = config_dir(json!({}));
    set_password(d.path(), PASSWORD);
    let node = remote_node(d.path());
    let addr = node.tcp.expect("tcp listener");
    let base = format!("http://{addr}");
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // No credentials: 401 JSON. Basic: 200. Public health: 200.
    let r = http.get(format!("{base}/config")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "unauthorized");
    let r = http
        .get(format!("{base}/config"))
        .basic_auth("admin", Some(PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        http.get(format!("{base}/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    // Foreign Host and Origin: 403 even with valid credentials.
    let r = http
        .get(format!("{base}/config"))
        .header("host", "evil.example")
        .basic_auth("admin", Some(PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = http
        .get(format!("{base}/config"))
        .header("origin", "http://evil.example")
        .basic_auth("admin", Some(PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    // Login cookie.
    let r = http
        .post(format!("{base}/auth/login"))
        .json(&json!({"username": "admin", "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("tui-session="));
    let r = http
        .get(format!("{base}/config"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // ?token= only where browsers cannot set headers.
    let (code, token, _) =
        run_with_stdin("tuic-node", &["token", "--config-dir", &dir_arg(&d)], "").unwrap();
    assert_eq!(code, 0);
    let token = token.trim();
    let r = http
        .get(format!("{base}/events?token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    drop(r);
    let r = http
        .post(format!("{base}/fs/upload-copy?token={token}"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // Repeated wrong passwords are throttled.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let r = http
            .get(format!("{base}/config"))
            .basic_auth("admin", Some("wrong"))
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses, vec![401, 401, 401, 401, 401, 429]);
}

#[tokio::test]
async fn remote_access_without_password_does_not_start_tcp() {
    let d = config_dir(json!({}));
    let node = remote_node(d.path());
    assert!(node.tcp.is_none());
    assert!(node.log_text().contains("no password is set"));
    let r = ipc(&node.socket, "GET", "/health", None).await.unwrap();
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn busy_port_falls_through_to_the_next_and_tuic_port_overrides() {
    let d = config_dir(
        json!({"remote_access_enabled": true, "services": {"server": {"bind": "127.0.0.1", "port": 1}}}),
    );
    set_password(d.path(), PASSWORD);
    // Hold a port so the node must take the next one.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = holder.local_addr().unwrap().port();
    let node = NodeProc::start(
        "tuic-node",
        &["--config-dir", &dir_arg(&d)],
        &[("TUIC_PORT", &busy.to_string())],
    )
    .unwrap();
    let bound = node.tcp.expect("tcp").port();
    assert!(
        bound == busy + 1 || bound == busy + 2,
        "bound {bound}, busy {busy}"
    );
    assert!(node.log_text().contains("configured port busy"));
    // TUIC_PORT is not persisted.
    let file: Value =
        serde_json::from_slice(&std::fs::read(d.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(file["services"]["server"]["port"], json!(1));
}

#[tokio::test]
async fn toggling_remote_access_starts_and_stops_only_tcp() {
    let d = config_dir(json!({"services": {"server": {"bind": "127.0.0.1", "port": 0}}}));
    set_password(d.path(), PASSWORD);
    let node = NodeProc::start("tuic-node", &["--config-dir", &dir_arg(&d)], &[]).unwrap();
    assert!(listening_tcp_ports(node.pid()).is_empty());
    let base = ipc(&node.socket, "GET", "/config", None)
        .await
        .unwrap()
        .json();
    let mut on = base.clone();
    on["remote_access_enabled"] = json!(true);
    let r = ipc(
        &node.socket,
        "PUT",
        "/config",
        Some(json!({"base": base, "config": on})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let ports = listening_tcp_ports(node.pid());
    assert_eq!(ports.len(), 1, "{ports:?}");
    let health = reqwest::get(format!("http://127.0.0.1:{}/health", ports[0]))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let r = ipc(
        &node.socket,
        "PUT",
        "/config",
        Some(json!({"base": on, "config": base})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    assert!(listening_tcp_ports(node.pid()).is_empty());
    assert!(
        reqwest::get(format!("http://127.0.0.1:{}/health", ports[0]))
            .await
            .is_err()
    );
    // The IPC listener never moved.
    assert_eq!(
        ipc(&node.socket, "GET", "/health", None)
            .await
            .unwrap()
            .status,
        200
    );
    let log = node.log_text();
    assert!(
        log.contains("TCP listener started; the IPC listener is unaffected"),
        "{log}"
    );
    assert!(
        log.contains("TCP listener stopped; the IPC listener is unaffected"),
        "{log}"
    );
}

#[tokio::test]
async fn concurrent_config_saves_keep_both_changes() {
    let d = config_dir(json!({}));
    let node = NodeProc::start("tuic-node", &["--config-dir", &dir_arg(&d)], &[]).unwrap();
    let base = ipc(&node.socket, "GET", "/config", None)
        .await
        .unwrap()
        .json();
    let mut a = base.clone();
    a["collapse_tools"] = json!(true);
    let mut b = base.clone();
    b["allowed_origins"] = json!(["http://tauri.localhost"]);
    let (ra, rb) = tokio::join!(
        ipc(
            &node.socket,
            "PUT",
            "/config",
            Some(json!({"base": base, "config": a}))
        ),
        ipc(
            &node.socket,
            "PUT",
            "/config",
            Some(json!({"base": base, "config": b}))
        ),
    );
    assert_eq!(ra.unwrap().status, 200);
    assert_eq!(rb.unwrap().status, 200);
    let file: Value =
        serde_json::from_slice(&std::fs::read(d.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(file["collapse_tools"], json!(true));
    assert_eq!(file["allowed_origins"], json!(["http://tauri.localhost"]));
    let now = ipc(&node.socket, "GET", "/config", None)
        .await
        .unwrap()
        .json();
    assert_eq!(now["collapse_tools"], json!(true));
    assert_eq!(now["allowed_origins"], json!(["http://tauri.localhost"]));
}

#[tokio::test]
async fn sse_outlives_a_shortened_request_timeout_and_filters_types() {
    let d = config_dir(json!({"tuning": {"request_timeout_ms": 1500, "sse_keepalive_ms": 100}}));
    let node = NodeProc::start("tuic-node", &["--config-dir", &dir_arg(&d)], &[]).unwrap();
    let resp = ipc_stream(&node.socket, "/events?types=config-changed")
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = http_body_util::BodyStream::new(resp.into_body());
    let opened = Instant::now();
    // Read keep-alives well past the 1.5 s request deadline (long enough for the PUT below
    // to finish on a loaded machine): the stream must still be open.
    while opened.elapsed() < Duration::from_millis(3500) {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.next())
            .await
            .expect("keep-alive")
            .expect("stream open");
        frame.unwrap();
    }
    let base = ipc(&node.socket, "GET", "/config", None)
        .await
        .unwrap()
        .json();
    let mut edited = base.clone();
    edited["collapse_tools"] = json!(true);
    let put = ipc(
        &node.socket,
        "PUT",
        "/config",
        Some(json!({"base": base, "config": edited})),
    )
    .await
    .unwrap();
    assert_eq!(put.status, 200, "{}", String::from_utf8_lossy(&put.body));
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !seen.contains("event: config-changed") {
        assert!(
            Instant::now() < deadline,
            "no config-changed event; got {seen}"
        );
        let frame = tokio::time::timeout(Duration::from_secs(5), body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Some(d) = frame.data_ref() {
            seen.push_str(&String::from_utf8_lossy(d));
        }
    }
    assert!(seen.contains("id: "), "{seen}");
}

#[tokio::test]
async fn second_node_refuses_and_stale_socket_is_replaced_after_kill_9() {
    let d = config_dir(json!({}));
    let mut first = NodeProc::start("tuic-node", &["--config-dir", &dir_arg(&d)], &[]).unwrap();
    let out = std::process::Command::new(tuic_tests::bin("tuic-node"))
        .args(["--config-dir", &dir_arg(&d)])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("already listening on") && err.contains("mcp.sock"),
        "{err}"
    );
    first.child.kill().unwrap(); // SIGKILL: the socket file stays behind.
    first.child.wait().unwrap();
    assert!(first.socket.exists());
    let second = NodeProc::start("tuic-node", &["--config-dir", &dir_arg(&d)], &[]).unwrap();
    assert!(second.log_text().contains("replacing stale IPC socket"));
    assert_eq!(
        ipc(&second.socket, "GET", "/health", None)
            .await
            .unwrap()
            .status,
        200
    );
}

#[tokio::test]
async fn sigterm_drains_and_removes_the_socket() {
    let d = config_dir(json!({}));
    let mut node = NodeProc::start("tuic-node", &["--config-dir", &dir_arg(&d)], &[]).unwrap();
    // An open SSE stream must not hold shutdown past its drain deadline.
    let resp = ipc_stream(&node.socket, "/events").await.unwrap();
    let status = node.terminate().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!node.socket.exists());
    let mut body = http_body_util::BodyStream::new(resp.into_body());
    // The stream ends (cleanly or by reset) rather than hanging.
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = body.next().await {}
    })
    .await;
    assert!(end.is_ok());
}

#[tokio::test]
async fn named_instances_get_their_own_dir_and_socket() {
    let home = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let envs = [
        ("HOME", home.path().to_str().unwrap()),
        ("XDG_CONFIG_HOME", ""),
        ("TUIC_CONFIG_DIR", ""),
        ("TMPDIR", tmp.path().to_str().unwrap()),
    ];
    let a = NodeProc::start("tuic-node", &["--instance", "alpha"], &envs).unwrap();
    let b = NodeProc::start("tuic-node", &["--instance", "beta"], &envs).unwrap();
    assert_ne!(a.socket, b.socket);
    assert!(a.socket.starts_with(tmp.path()));
    assert!(
        home.path()
            .join(".config/tuicommander/instances/alpha/state.redb")
            .exists()
    );
    assert_eq!(
        ipc(&a.socket, "GET", "/health", None).await.unwrap().status,
        200
    );
    assert_eq!(
        ipc(&b.socket, "GET", "/health", None).await.unwrap().status,
        200
    );
}

/// A remote client's MCP call through `POST /mcp`: `(isError, the tool's JSON answer)`.
async fn remote_tool(
    http: &reqwest::Client,
    base: &str,
    proxied: bool,
    name: &str,
    args: Value,
) -> (bool, Value) {
    let mut r = http
        .post(format!("{base}/mcp"))
        .basic_auth("admin", Some(PASSWORD))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": args}}));
    if proxied {
        r = r.header("x-forwarded-for", "203.0.113.9");
    }
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let text = v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"));
    (
        v["result"]["isError"] == true,
        serde_json::from_str(text).unwrap(),
    )
}

/// Spec "Loopback-only session actions" and issue 40 finding 3: an authenticated client from
/// another address (a LAN address of this machine, and loopback relayed by a proxy such as
/// `tailscale serve`) may list and read sessions but not resize or rename them, and may not
/// register a repository root — by MCP or by `POST /repos` — so the file routes' root gate
/// cannot be widened to the node's own secrets. The same calls over IPC work.
#[tokio::test]
async fn remote_clients_read_sessions_but_cannot_change_them_or_register_roots() {
    let d = config_dir(json!({}));
    set_password(d.path(), PASSWORD);
    let node = NodeProc::start(
        "tuic-node",
        &[
            "--config-dir",
            &dir_arg(&d),
            "--remote-access",
            "--port",
            "0",
            "--bind",
            "0.0.0.0",
        ],
        &[],
    )
    .unwrap();
    let port = node.tcp.expect("tcp listener").port();
    let r = ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    let sid = r.json()["session_id"].as_str().unwrap().to_owned();
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let root_path = root_path.to_str().unwrap();
    let secrets = d.path().join("secrets.json");

    // Loopback behind a proxy header, and this machine's LAN address when it has one.
    let mut clients = vec![(format!("http://127.0.0.1:{port}"), true)];
    if let Some(ip) = tuic_node::guard::interface_ips()
        .into_iter()
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
    {
        clients.push((format!("http://{ip}:{port}"), false));
    }
    let http = reqwest::Client::new();
    for (base, proxied) in &clients {
        let (base, proxied) = (base.as_str(), *proxied);
        for (name, args, rule) in [
            ("repo", json!({"action": "add", "path": root_path}), "roots"),
            (
                "session",
                json!({"action": "resize", "session_id": sid, "rows": 30, "cols": 100}),
                "session-control",
            ),
            (
                "session",
                json!({"action": "rename", "session_id": sid, "name": "taken"}),
                "session-control",
            ),
        ] {
            let (is_error, v) = remote_tool(&http, base, proxied, name, args).await;
            assert!(is_error, "{base} {name}: {v}");
            assert_eq!(v["code"], "loopback_only", "{base}: {v}");
            assert!(
                v["error"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("loopback-only: {rule} (")),
                "{base}: {v}"
            );
        }
        let (is_error, v) =
            remote_tool(&http, base, proxied, "session", json!({"action": "list"})).await;
        assert!(!is_error && v["count"] == 1, "{base}: {v}");
        for action in ["output", "status"] {
            let (is_error, v) = remote_tool(
                &http,
                base,
                proxied,
                "session",
                json!({"action": action, "session_id": sid}),
            )
            .await;
            assert!(!is_error, "{base} {action}: {v}");
        }
        // The REST twin of `repo add` follows the same rule.
        let mut r = http
            .post(format!("{base}/repos"))
            .basic_auth("admin", Some(PASSWORD))
            .json(&json!({"path": root_path}));
        if proxied {
            r = r.header("x-forwarded-for", "203.0.113.9");
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), 403, "{base}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["code"], "loopback_only", "{base}: {v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .starts_with("loopback-only: roots (")
        );
        // So the node's own secrets stay out of the file routes' reach.
        let r = http
            .get(format!("{base}/fs/read-external"))
            .query(&[("path", secrets.to_str().unwrap())])
            .basic_auth("admin", Some(PASSWORD))
            .send()
            .await
            .unwrap();
        assert_ne!(r.status(), 200, "{base} read the node's secrets");
    }
    // Nothing changed: the name, the size and the root registry are as before.
    let row = ipc(&node.socket, "GET", &format!("/sessions/{sid}"), None)
        .await
        .unwrap()
        .json();
    assert_ne!(row["display_name"], "taken", "{row}");
    let info = ipc(
        &node.socket,
        "GET",
        &format!("/sessions/{sid}/terminal/scroll-info"),
        None,
    )
    .await
    .unwrap()
    .json();
    assert_eq!(info["screen_lines"], 24);
    let repos = ipc(&node.socket, "GET", "/repos", None)
        .await
        .unwrap()
        .json();
    assert_eq!(repos["repos"].as_array().unwrap().len(), 0, "{repos}");
    // A local client may do all of it.
    let r = ipc(
        &node.socket,
        "POST",
        "/repos",
        Some(json!({"path": root_path})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// A taken port: the node keeps the spec's retry of the next two ports, and says so — a
/// warning on stderr naming both ports, `tcp: {port, requested_port}` in `/health` (public, so
/// the login page can show it), `tuic status` — and `/health` names the node (host name and
/// instance) so a page can tell one node from another.
#[tokio::test]
async fn a_taken_port_is_said_on_stderr_in_health_and_in_status() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let asked = taken.local_addr().unwrap().port();
    let d = config_dir(json!({}));
    set_password(d.path(), PASSWORD);
    let node = NodeProc::start(
        "tuic-node",
        &[
            "--config-dir",
            &dir_arg(&d),
            "--instance",
            "portcheck",
            "--remote-access",
            "--port",
            &asked.to_string(),
            "--bind",
            "127.0.0.1",
        ],
        &[],
    )
    .unwrap();
    let served = node.tcp.expect("tcp serves").port();
    assert_ne!(served, asked);
    assert!(served > asked && served <= asked + 2, "{asked} → {served}");
    let log = node.log_text();
    assert!(
        log.lines().any(|l| l.contains("warning")
            && l.contains(&format!("port {asked}"))
            && l.contains(&format!("port {served}"))),
        "stderr: {log}"
    );
    // Public over TCP (the login page's own request) and on IPC alike.
    let h: Value = reqwest::get(format!("http://127.0.0.1:{served}/health"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        h["tcp"],
        json!({"port": served, "requested_port": asked}),
        "{h}"
    );
    assert_eq!(h["instance"], "portcheck", "{h}");
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    assert_eq!(h["host_name"], json!(host), "{h}");
    let out = std::process::Command::new(tuic_tests::bin("tuic"))
        .args(["status"])
        .env("TUIC_SOCKET", &node.socket)
        .output()
        .unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{se}");
    assert!(
        so.contains(&format!(
            "port {served} (port {asked} was asked for and is taken)"
        )) && so.contains(&host)
            && so.contains("portcheck"),
        "{so}"
    );
    assert!(
        se.contains("warning") && se.contains(&asked.to_string()),
        "{se}"
    );
    drop(taken);
}
