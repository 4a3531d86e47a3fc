//! Issue 47 through the real `tuic-node` over real HTTP (IPC and TCP): the audit log, scoped
//! share links and the secret tool, with their refusals; the share page and the secret form
//! in headless Chromium at phone size.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use http_body_util::Full;
use hyper::body::Bytes;
use serde_json::{Value, json};
use sha2::Digest;
use tuic_tests::agent::Agent;
use tuic_tests::bed::{ipc_ok, login_via};
use tuic_tests::webdriver::{Browser, artifacts_dir};
use tuic_tests::{NodeProc, Reply, config_dir, ipc_request, remote_node, set_password};

const PASSWORD: &str = "trust pass";

/// A node with a password and remote access on loopback.
fn node() -> (tempfile::TempDir, NodeProc) {
    let d = config_dir(json!({}));
    set_password(d.path(), PASSWORD);
    let n = remote_node(d.path());
    (d, n)
}

async fn ipc(socket: &Path, method: &str, path: &str, body: Option<Value>) -> Reply {
    let b = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", "application/json");
    let body = body.map(|v| v.to_string()).unwrap_or_default();
    ipc_request(socket, b.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap()
}

async fn login(base: &str, pw: &str) -> Option<String> {
    let r = reqwest::Client::new()
        .post(format!("{base}/auth/login"))
        .json(&json!({"username": "admin", "password": pw}))
        .send()
        .await
        .unwrap();
    (r.status() == 200).then(|| {
        r.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned()
    })
}

async fn audit(socket: &Path, query: &str) -> Vec<Value> {
    ipc_ok(socket, "GET", &format!("/audit?limit=1000{query}"), None).await["entries"]
        .as_array()
        .unwrap()
        .clone()
}

fn find<'a>(entries: &'a [Value], kind: &str) -> &'a Value {
    entries
        .iter()
        .find(|e| e["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} entry in {entries:#?}"))
}

/// A shell session over IPC; its PTY id.
async fn shell(socket: &Path) -> String {
    ipc_ok(
        socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 24, "cols": 80, "shell": "/bin/sh"})),
    )
    .await["session_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Subscribes to `GET /events?types=kind` (subscribed once the answer's head arrives).
async fn subscribe(socket: &Path, kind: &str) -> hyper::body::Incoming {
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get(format!("/events?types={kind}"))
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    send.send_request(req).await.unwrap().into_body()
}

/// Waits (bounded) for an event on `body` whose data contains `needle`.
async fn await_event(mut body: hyper::body::Incoming, needle: &str) {
    use http_body_util::BodyExt;
    let mut seen = String::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(Ok(f)) = body.frame().await {
            if let Some(d) = f.data_ref() {
                seen.push_str(&String::from_utf8_lossy(d));
                if seen.contains(needle) {
                    return;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no event with {needle:?}; saw {seen:?}"));
}

#[tokio::test]
async fn each_act_writes_its_audit_entry_and_never_the_bytes_even_across_kill_9() {
    let (d, mut n) = node();
    let base = format!("http://{}", n.tcp.unwrap());
    let http = reqwest::Client::new();
    assert!(login(&base, "wrong").await.is_none());
    let cookie = login(&base, PASSWORD).await.unwrap();
    let id = shell(&n.socket).await;
    // Remote input: who, session, byte count — never the bytes.
    let typed = "echo audit-marker-3141\n";
    let r = http
        .post(format!("{base}/sessions/{id}/write"))
        .header("cookie", &cookie)
        .json(&json!({"data": typed}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Attach over TCP (read-write), type, detach.
    let url = format!("ws://{}/sessions/{id}/stream", n.tcp.unwrap());
    let mut req = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        url.as_str(),
    )
    .unwrap();
    req.headers_mut().insert("cookie", cookie.parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        "ws-typed-2718\n".into(),
    ))
    .await
    .unwrap();
    tuic_tests::bed::await_output(&n.socket, &id, "ws-typed-2718").await;
    ws.close(None).await.unwrap();
    drop(ws);
    // Config change (key names only), token rotation, logout.
    let cfg = ipc_ok(&n.socket, "GET", "/config", None).await;
    let mut next = cfg.clone();
    next["progress_tracking"] = json!(false);
    ipc_ok(
        &n.socket,
        "PUT",
        "/config",
        Some(json!({"base": cfg, "config": next})),
    )
    .await;
    ipc_ok(&n.socket, "POST", "/auth/token/rotate", None).await;
    let r = http
        .post(format!("{base}/auth/logout"))
        .header("cookie", &cookie)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // The detach is written when the stream's task ends: follow the log until it is there.
    let deadline = Instant::now() + Duration::from_secs(10);
    let entries = loop {
        let e = audit(&n.socket, "").await;
        if e.iter().any(|x| x["kind"] == "detach" && x["via"] == "tcp") || Instant::now() > deadline
        {
            break e;
        }
        tokio::task::yield_now().await;
    };
    let failed = find(&entries, "login_failed");
    assert_eq!(failed["user"].as_str(), None);
    assert_eq!(failed["detail"]["user"], "admin");
    assert_eq!(failed["via"], "tcp");
    assert_eq!(failed["address"], "127.0.0.1");
    let ok = find(&entries, "login");
    assert!(ok["who"].as_str().unwrap().starts_with("login:"), "{ok}");
    let login_who = ok["who"].clone();
    let input = find(&entries, "input");
    assert_eq!(input["who"], login_who);
    assert_eq!(input["session"], id.as_str());
    assert_eq!(input["detail"]["bytes"], typed.len());
    let over_tcp = |kind: &str| {
        entries
            .iter()
            .find(|e| e["kind"] == kind && e["via"] == "tcp")
            .unwrap_or_else(|| panic!("no {kind} over tcp in {entries:#?}"))
    };
    let attach = over_tcp("attach");
    assert_eq!(
        (&attach["who"], &attach["via"], &attach["detail"]["mode"]),
        (&login_who, &json!("tcp"), &json!("read_write"))
    );
    let detach = over_tcp("detach");
    assert_eq!(detach["detail"]["bytes_in"], "ws-typed-2718\n".len());
    let config = find(&entries, "config_changed");
    assert_eq!(config["detail"]["keys"], json!(["progress_tracking"]));
    assert_eq!(find(&entries, "token_rotated")["via"], "ipc");
    assert_eq!(find(&entries, "logout")["who"], login_who);
    // Typed bytes and passwords never reach the audit.
    let text = serde_json::to_string(&entries).unwrap();
    for secret in ["audit-marker-3141", "ws-typed-2718", PASSWORD, "wrong"] {
        assert!(!text.contains(secret), "{secret} leaked into the audit");
    }
    // Filters: kind and session.
    let only = audit(&n.socket, &format!("&kind=input&session={id}")).await;
    assert!(only.iter().all(|e| e["kind"] == "input"));
    assert_eq!(only.len(), 1);

    // kill -9 right after an act returned: its entry is there after a restart.
    let r = ipc(
        &n.socket,
        "POST",
        "/shares",
        Some(json!({"session": id, "ttl": "1h"})),
    )
    .await;
    assert_eq!(r.status, 200);
    let link = r.json()["id"].as_str().unwrap().to_owned();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(n.pid() as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    n.wait_exit(Duration::from_secs(10)).unwrap();
    drop(n);
    let again = remote_node(d.path());
    let after = audit(&again.socket, "&kind=share_created").await;
    assert_eq!(after.len(), 1, "{after:#?}");
    assert_eq!(after[0]["detail"]["link"], link.as_str());
    // The page reports its bound and what it dropped.
    let page = ipc_ok(&again.socket, "GET", "/audit?limit=1", None).await;
    assert_eq!(page["max_entries"], 50_000);
    assert_eq!(page["dropped"], 0);
    assert_eq!(
        ipc(&again.socket, "GET", "/audit?limit=x", None)
            .await
            .status,
        400
    );
}

/// Every route a share token may not open, with one allowed for contrast.
#[tokio::test]
async fn a_share_token_opens_only_its_sessions_view_and_each_refusal_has_its_code() {
    let (_d, n) = node();
    let tcp = n.tcp.unwrap();
    let base = format!("http://{tcp}");
    let id = shell(&n.socket).await;
    let other = shell(&n.socket).await;
    let made = ipc_ok(
        &n.socket,
        "POST",
        "/shares",
        Some(json!({"session": id, "scope": "read_only", "ttl": "1h"})),
    )
    .await;
    let token = made["token"].as_str().unwrap().to_owned();
    assert!(made["url"].as_str().unwrap().starts_with(&base));
    let http = reqwest::Client::new();
    let call = |method: &str, path: &str, tok: &str| {
        let sep = if path.contains('?') { '&' } else { '?' };
        http.request(
            method.parse().unwrap(),
            format!("{base}{path}{sep}share={tok}"),
        )
        .header("content-type", "application/json")
        .body("{}")
        .send()
    };
    for (method, path, status) in [
        ("GET", format!("/sessions/{id}/output?format=text"), 200),
        ("GET", format!("/sessions/{id}/terminal/scroll-info"), 200),
        ("GET", "/share/info".to_owned(), 200),
        ("POST", format!("/sessions/{id}/write"), 403),
        ("POST", format!("/sessions/{id}/input"), 403),
        ("POST", format!("/sessions/{id}/resize"), 403),
        ("POST", format!("/sessions/{id}/answer"), 403),
        ("DELETE", format!("/sessions/{id}"), 403),
        ("GET", format!("/sessions/{other}/output"), 403),
        ("GET", "/sessions".to_owned(), 403),
        ("POST", "/sessions".to_owned(), 403),
        ("POST", "/mcp".to_owned(), 403),
        ("GET", "/config".to_owned(), 403),
        ("PUT", "/config".to_owned(), 403),
        ("GET", "/fs/read-external?path=/etc/passwd".to_owned(), 403),
        ("POST", "/fs/write-external".to_owned(), 403),
        ("POST", "/fs/upload-copy".to_owned(), 403),
        ("GET", "/events".to_owned(), 403),
        ("GET", "/logs".to_owned(), 403),
        ("GET", "/audit".to_owned(), 403),
        ("GET", "/shares".to_owned(), 403),
        ("POST", "/shares".to_owned(), 403),
        ("GET", "/secrets".to_owned(), 403),
        ("POST", "/secrets/form".to_owned(), 403),
        ("GET", "/auth/sessions".to_owned(), 403),
        ("GET", "/repos".to_owned(), 403),
    ] {
        let r = call(method, &path, &token).await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{method} {path}");
        if status == 403 {
            assert_eq!(
                r.json::<Value>().await.unwrap()["code"],
                "share_scope",
                "{method} {path}"
            );
        }
    }
    // The token is not a login anywhere else: as a cookie, as ?token=, as Basic.
    let r = http
        .get(format!("{base}/config"))
        .header("cookie", format!("tui-session={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .get(format!("{base}/sessions/{id}/stream?token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // A wrong token.
    let r = call("GET", &format!("/sessions/{id}/output"), "shr_0000")
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "share_invalid");
    // Refusals are audited, without the token.
    let refused = audit(&n.socket, "&kind=share_refused").await;
    assert!(refused.len() >= 20, "{}", refused.len());
    assert!(!serde_json::to_string(&refused).unwrap().contains(&token));

    // Revocation cuts an open viewer within 1 s, and the token stops working.
    let url = format!("ws://{tcp}/sessions/{id}/stream?share={token}");
    let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    let hello = ws.next().await.unwrap().unwrap();
    assert!(hello.to_text().unwrap().contains("hello"));
    // A read-only viewer's typing never reaches the PTY.
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        "echo viewer-typed-1618\n".into(),
    ))
    .await
    .unwrap();
    ipc_ok(
        &n.socket,
        "POST",
        &format!("/sessions/{id}/write"),
        Some(json!({"data": "echo owner-typed-1414\n"})),
    )
    .await;
    tuic_tests::bed::await_output(&n.socket, &id, "owner-typed-1414").await;
    let text = ipc_ok(
        &n.socket,
        "GET",
        &format!("/sessions/{id}/output?format=text"),
        None,
    )
    .await["data"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!text.contains("viewer-typed-1618"), "{text}");
    let listed = ipc_ok(&n.socket, "GET", &format!("/shares?session={id}"), None).await;
    assert_eq!(listed["shares"][0]["viewers"].as_array().unwrap().len(), 1);
    let t0 = Instant::now();
    ipc_ok(
        &n.socket,
        "DELETE",
        &format!("/shares/{}", made["id"].as_str().unwrap()),
        None,
    )
    .await;
    let closed = tokio::time::timeout(Duration::from_secs(1), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    assert!(closed.is_ok(), "the viewer was not cut within 1 s");
    eprintln!("revocation cut the viewer in {:?}", t0.elapsed());
    let r = call("GET", &format!("/sessions/{id}/output"), &token)
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "share_revoked");
    let used = audit(&n.socket, &format!("&session={id}")).await;
    assert!(
        used.iter().any(|e| e["kind"] == "attach"
            && e["who"].as_str().unwrap().starts_with("share:")
            && e["detail"]["mode"] == "read_only"),
        "{used:#?}"
    );
    find(&used, "share_revoked");

    // Expiry: a 1 s link's open viewer is cut at expiry, then the token answers share_expired.
    let short = ipc_ok(
        &n.socket,
        "POST",
        "/shares",
        Some(json!({"session": id, "ttl": "1s"})),
    )
    .await;
    let tok = short["token"].as_str().unwrap();
    let (mut ws, _) =
        tokio_tungstenite::connect_async(format!("ws://{tcp}/sessions/{id}/stream?share={tok}"))
            .await
            .unwrap();
    tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await
    .expect("the viewer is cut at expiry");
    let r = call("GET", &format!("/sessions/{id}/output"), tok)
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "share_expired");
    // Bad input when creating: an unknown session, a bad ttl, a ttl past 7 days.
    for (body, status) in [
        (json!({"session": "nope"}), 404),
        (json!({"session": id, "ttl": "soon"}), 400),
        (json!({"session": id, "ttl": "8d"}), 400),
        (json!({"session": id, "scope": "admin"}), 422),
    ] {
        assert_eq!(
            ipc(&n.socket, "POST", "/shares", Some(body.clone()))
                .await
                .status,
            status,
            "{body}"
        );
    }
}

#[tokio::test]
async fn an_answer_only_link_answers_the_question_and_nothing_else() {
    let (_d, n) = node();
    let base = format!("http://{}", n.tcp.unwrap());
    let parsed = subscribe(&n.socket, "pty-parsed").await;
    let id = ipc_ok(
        &n.socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 24, "cols": 80, "shell": "/bin/sh",
            "args": ["-c", "printf 'Deploy now? (y/n) '; read a; echo \"answered:$a\"; sleep 30"]})),
    )
    .await["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    tuic_tests::bed::await_output(&n.socket, &id, "Deploy now?").await;
    // The session's monitor detects the question: its `pty-parsed` event says so.
    await_event(parsed, "Deploy now?").await;
    let tok = ipc_ok(
        &n.socket,
        "POST",
        "/shares",
        Some(json!({"session": id, "scope": "answer", "ttl": "10m"})),
    )
    .await["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let http = reqwest::Client::new();
    let post = |path: String, body: Value| {
        http.post(format!("{base}{path}?share={tok}"))
            .json(&body)
            .send()
    };
    let r = post(
        format!("/sessions/{id}/write"),
        json!({"data": "rm -rf /\n"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 403);
    let r = post(
        format!("/sessions/{id}/answer"),
        json!({"answer": "rm -rf /"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "invalid_answer");
    let r = post(format!("/sessions/{id}/answer"), json!({"answer": "y"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    tuic_tests::bed::await_output(&n.socket, &id, "answered:y").await;
    // The answer route reads the screen, which may trail the output ring: wait until the
    // screen shows the answer too.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !tuic_tests::bed::screen_lines(&n.socket, &id)
        .await
        .iter()
        .any(|l| l.contains("answered:y"))
    {
        assert!(
            Instant::now() < deadline,
            "the screen never showed the answer"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = post(format!("/sessions/{id}/answer"), json!({"answer": "y"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 409, "no question is showing any more");
    let answered = audit(&n.socket, "&kind=answer").await;
    assert_eq!(answered.len(), 1);
    assert!(answered[0]["who"].as_str().unwrap().starts_with("share:"));
}

#[tokio::test]
async fn a_read_only_link_in_a_phone_browser_shows_the_live_screen_and_refuses_the_rest() {
    let (_d, n) = node();
    let id = shell(&n.socket).await;
    let made = ipc_ok(
        &n.socket,
        "POST",
        "/shares",
        Some(json!({"session": id, "ttl": "10m"})),
    )
    .await;
    let url = made["url"].as_str().unwrap().to_owned();
    let b = Browser::launch(390, 844).await.unwrap();
    b.goto(&url).await.unwrap();
    b.wait_for(
        "document.getElementById('state').textContent === 'live'",
        15_000,
    )
    .await
    .unwrap();
    ipc_ok(
        &n.socket,
        "POST",
        &format!("/sessions/{id}/write"),
        Some(json!({"data": "echo live-on-the-phone-577\n"})),
    )
    .await;
    b.wait_for(
        "document.getElementById('screen').textContent.includes('live-on-the-phone-577')",
        15_000,
    )
    .await
    .unwrap();
    b.screenshot(&artifacts_dir().join("share-read-only-phone.png"))
        .await
        .unwrap();
    // From the page, with the page's own token: typing and every other route are refused.
    let codes = b
        .eval_async(
            "const [sid, done] = arguments; const tok = location.hash.slice(1);
             const tries = [['POST', `/sessions/${sid}/write`], ['POST', `/sessions/${sid}/input`],
               ['GET', '/sessions'], ['GET', '/config'], ['POST', '/mcp'], ['GET', '/fs/read-external?path=/etc/passwd']];
             Promise.all(tries.map(([m, p]) => fetch(`${p}${p.includes('?') ? '&' : '?'}share=${tok}`,
               {method: m, headers: {'content-type': 'application/json'}, body: m === 'GET' ? undefined : '{\"data\":\"x\"}'})
               .then(r => r.status))).then(done);",
            json!([id]),
        )
        .await
        .unwrap();
    assert_eq!(codes, json!([403, 403, 403, 403, 403, 403]));
    // Revoking ends the page's stream within a second.
    ipc_ok(
        &n.socket,
        "DELETE",
        &format!("/shares/{}", made["id"].as_str().unwrap()),
        None,
    )
    .await;
    b.wait_for(
        "document.getElementById('state').dataset.ended === '1'",
        1_500,
    )
    .await
    .unwrap();
    let overflow = b
        .eval(
            "return document.documentElement.scrollWidth > window.innerWidth",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(overflow, json!(false));
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(b))
}

#[tokio::test]
async fn a_secret_typed_into_the_phone_form_is_used_by_the_agent_and_appears_nowhere() {
    let (d, n) = node();
    let base = format!("http://{}", n.tcp.unwrap());
    let value = "tok-9f8e7d6c5b4a-SECRET";
    // An agent's terminal, so screen frames exist to search.
    let term = shell(&n.socket).await;
    let (mut agent, _me) = Agent::new(&n.socket, "deployer").await;
    let (err, v) = agent
        .tool(
            "secret",
            json!({"action": "request", "name": "TOKEN", "reason": "deploy to staging"}),
        )
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "pending");
    assert!(
        v.get("nonce").is_none(),
        "the agent never gets the form's capability"
    );
    // Bad names are refused before anything opens.
    let (err, v) = agent
        .tool(
            "secret",
            json!({"action": "request", "name": "../etc/passwd", "reason": "x"}),
        )
        .await;
    assert!(err);
    assert_eq!(v["code"], "invalid_name");
    // While the form is open, the pre-call gate pauses ui (directly and through call_tool).
    let (err, v) = agent
        .tool("ui", json!({"action": "toast", "message": "peek"}))
        .await;
    assert!(err);
    assert_eq!(v["code"], "secret_form_open");
    // The person's UI lists the open form with its nonce URL.
    let listed = ipc_ok(&n.socket, "GET", "/secrets", None).await;
    let path = listed["forms"][0]["path"].as_str().unwrap().to_owned();
    assert!(
        path.starts_with("/index.html#/secret-form?nonce="),
        "{path}"
    );
    let nonce = path.rsplit('=').next().unwrap().to_owned();

    let b = Browser::launch(390, 844).await.unwrap();
    login_via(
        &b,
        &format!("{base}/mobile/login"),
        PASSWORD,
        "location.pathname === '/mobile'",
    )
    .await;
    // A forged nonce: the form says so and cannot be sent.
    b.goto(&format!("{base}/index.html#/secret-form?nonce=forged"))
        .await
        .unwrap();
    b.wait_for(
        "document.getElementById('secret-error') && document.getElementById('secret-error').textContent.includes('nonce')",
        10_000,
    )
    .await
    .unwrap();
    // The real form: only the form mounts (no session list), the value is typed hidden.
    b.goto(&format!("{base}{path}")).await.unwrap();
    b.wait_for(
        "document.getElementById('secret-title') && document.getElementById('secret-title').textContent.includes('TOKEN')",
        10_000,
    )
    .await
    .unwrap();
    assert_eq!(
        b.eval("return [document.getElementById('sessions') === null, document.getElementById('secret-value').type]", json!([]))
            .await
            .unwrap(),
        json!([true, "password"])
    );
    let input = b.find("#secret-value").await.unwrap();
    b.type_text(&input, value).await.unwrap();
    b.click(&b.find("#secret-submit").await.unwrap())
        .await
        .unwrap();
    b.wait_for("!document.getElementById('secret-done').hidden", 10_000)
        .await
        .unwrap();
    b.screenshot(&artifacts_dir().join("secret-form-phone.png"))
        .await
        .unwrap();
    // The nonce answered once.
    let again = ipc(
        &n.socket,
        "POST",
        "/secrets/form",
        Some(json!({"nonce": nonce, "value": "other"})),
    )
    .await;
    assert_eq!(again.status, 403);
    assert_eq!(again.json()["code"], "bad_nonce");

    // The spec's consent templates: the first run waits for the person's approval of this
    // exact argv and directory, on the phone.
    let run = json!({"action": "run", "name": "TOKEN", "cwd": "/tmp",
                     "command": ["sh", "-c", "echo $TOKEN | sha256sum; echo \"leak:$TOKEN\""]});
    let (err, v) = agent.tool("secret", run.clone()).await;
    assert!(err, "{v}");
    assert_eq!(v["code"], "consent_required", "{v}");
    assert!(
        !v.to_string().contains("nonce"),
        "the agent never gets the consent's capability"
    );
    let listed = ipc_ok(&n.socket, "GET", "/secrets", None).await;
    let consent = listed["consents"][0]["path"].as_str().unwrap().to_owned();
    assert!(
        consent.starts_with("/index.html#/secret-consent?nonce="),
        "{consent}"
    );
    b.goto(&format!("{base}{consent}")).await.unwrap();
    b.wait_for(
        "document.getElementById('consent-command') && document.getElementById('consent-command').textContent.includes('sha256sum')",
        10_000,
    )
    .await
    .unwrap();
    assert_eq!(
        b.eval(
            "return document.getElementById('consent-cwd').textContent",
            json!([])
        )
        .await
        .unwrap(),
        json!("in /tmp")
    );
    b.click(&b.find("#consent-allow").await.unwrap())
        .await
        .unwrap();
    b.wait_for("!document.getElementById('consent-done').hidden", 10_000)
        .await
        .unwrap();
    b.screenshot(&artifacts_dir().join("secret-consent-phone.png"))
        .await
        .unwrap();
    // The template matches only the exact run: another directory, another argv, another
    // name each need their own consent.
    for (k, other) in [
        ("cwd", json!("/")),
        ("command", json!(["sh", "-c", "echo $TOKEN | sha256sum"])),
    ] {
        let mut r = run.clone();
        r[k] = other;
        let (err, v) = agent.tool("secret", r).await;
        assert!(err && v["code"] == "consent_required", "{k}: {v}");
    }
    // The agent runs with it: the hash proves it was there; the value never comes back.
    let (err, out) = agent.tool("secret", run.clone()).await;
    assert!(!err, "{out}");
    let want = sha256_hex(format!("{value}\n").as_bytes());
    assert!(out["stdout"].as_str().unwrap().contains(&want), "{out}");
    assert_eq!(out["masked"], 1);
    assert!(out["stdout"].as_str().unwrap().contains("leak:[REDACTED]"));
    // The gate is open again.
    let (err, _) = agent
        .tool("ui", json!({"action": "toast", "message": "done"}))
        .await;
    assert!(!err);
    // Oversized and bad input.
    let big = "x".repeat(1 << 20);
    let r = ipc(
        &n.socket,
        "PUT",
        "/secrets/BIG",
        Some(json!({"value": big})),
    )
    .await;
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["code"], "secret_too_large");
    assert!(r.json()["error"].as_str().unwrap().contains("65536"));
    let r = ipc(
        &n.socket,
        "PUT",
        "/secrets/a.b",
        Some(json!({"value": "v"})),
    )
    .await;
    assert_eq!(r.json()["code"], "invalid_name");

    // Nowhere: the log ring, the audit, the agent terminal's output pages and screen, the
    // store file, the node's stderr.
    let mut places = vec![
        (
            "logs",
            ipc(&n.socket, "GET", "/logs", None).await.body.to_vec(),
        ),
        (
            "audit",
            ipc(&n.socket, "GET", "/audit?limit=1000", None)
                .await
                .body
                .to_vec(),
        ),
    ];
    for fmt in ["raw", "text", "log", "mcp"] {
        places.push((
            "output",
            ipc(
                &n.socket,
                "GET",
                &format!("/sessions/{term}/output?format={fmt}"),
                None,
            )
            .await
            .body
            .to_vec(),
        ));
    }
    places.push((
        "screen",
        ipc(
            &n.socket,
            "GET",
            &format!("/sessions/{term}/terminal/snapshot"),
            None,
        )
        .await
        .body
        .to_vec(),
    ));
    places.push(("store", std::fs::read(d.path().join("state.redb")).unwrap()));
    places.push(("stderr", n.log_text().into_bytes()));
    for (what, bytes) in &places {
        let hits = bytes
            .windows(value.len())
            .filter(|w| *w == value.as_bytes())
            .count();
        assert_eq!(hits, 0, "the secret appears in the {what}");
    }
    let templates = ipc_ok(&n.socket, "GET", "/secrets", None).await["templates"].clone();
    assert_eq!(templates.as_array().unwrap().len(), 1, "{templates}");
    assert_eq!(templates[0]["cwd"], "/tmp");
    assert_eq!(templates[0]["argv"][0], "sh");
    find(&audit(&n.socket, "").await, "secret_consent_requested");
    let granted = audit(&n.socket, "&kind=secret_consent_granted").await;
    assert_eq!(granted[0]["detail"]["name"], "TOKEN");
    assert_eq!(granted[0]["detail"]["program"], "sh");
    // A forged consent nonce is refused; a deleted template stops the run again.
    let r = ipc(
        &n.socket,
        "POST",
        "/secrets/consent",
        Some(json!({"nonce": "forged", "allow": true})),
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["code"], "bad_nonce");
    let id = templates[0]["id"].as_str().unwrap();
    ipc_ok(
        &n.socket,
        "DELETE",
        &format!("/secrets/templates/{id}"),
        None,
    )
    .await;
    let (err, v) = agent.tool("secret", run.clone()).await;
    assert!(err && v["code"] == "consent_required", "{v}");
    let used = audit(&n.socket, "&kind=secret_used").await;
    assert_eq!(used[0]["detail"]["name"], "TOKEN");
    find(&audit(&n.socket, "").await, "secret_requested");
    find(&audit(&n.socket, "").await, "secret_stored");
    // Remove.
    let (err, v) = agent
        .tool("secret", json!({"action": "remove", "name": "TOKEN"}))
        .await;
    assert!(!err && v["removed"] == true, "{v}");
    assert!(
        ipc_ok(&n.socket, "GET", "/secrets", None).await["secrets"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

/// The phone's trust page: the audit log, a share link revoked with a tap, a secret deleted.
#[tokio::test]
async fn the_phone_trust_page_shows_the_audit_and_revokes_links_and_deletes_secrets() {
    let (_d, n) = node();
    let base = format!("http://{}", n.tcp.unwrap());
    let id = shell(&n.socket).await;
    let link = ipc_ok(
        &n.socket,
        "POST",
        "/shares",
        Some(json!({"session": id, "ttl": "1h"})),
    )
    .await;
    ipc_ok(
        &n.socket,
        "PUT",
        "/secrets/API_KEY",
        Some(json!({"value": "v-123456789"})),
    )
    .await;
    let b = Browser::launch(390, 844).await.unwrap();
    login_via(
        &b,
        &format!("{base}/mobile/login"),
        PASSWORD,
        "location.pathname === '/mobile'",
    )
    .await;
    b.goto(&format!("{base}/mobile#/trust")).await.unwrap();
    b.wait_for(
        "document.querySelector('#audit li[data-kind=share_created]') && document.querySelector('#secrets li[data-name=API_KEY]')",
        10_000,
    )
    .await
    .unwrap();
    b.screenshot(&artifacts_dir().join("trust-page-phone.png"))
        .await
        .unwrap();
    let lid = link["id"].as_str().unwrap();
    b.click(
        &b.find(&format!("#shares li[data-id='{lid}'] button.revoke"))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    b.wait_for(
        "document.querySelector('#audit li[data-kind=share_revoked]') !== null",
        10_000,
    )
    .await
    .unwrap();
    b.click(
        &b.find("#secrets li[data-name=API_KEY] button.delete")
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    b.wait_for(
        "document.querySelector('#secrets li[data-name=API_KEY]') === null",
        10_000,
    )
    .await
    .unwrap();
    let shares = ipc_ok(&n.socket, "GET", "/shares", None).await;
    assert_eq!(shares["shares"][0]["state"], "revoked");
    assert!(
        ipc_ok(&n.socket, "GET", "/secrets", None).await["secrets"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let removed = audit(&n.socket, "&kind=secret_removed").await;
    assert!(removed[0]["who"].as_str().unwrap().starts_with("login:"));
}
