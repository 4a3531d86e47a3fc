//! End-to-end checks of contract fixes found by a spec read (issue 14), each through the real
//! binaries: default waits through the real `tuic-bridge`, the spawn parent and name flags on
//! `session-created` and session rows, a toast's origin, strict tool inputs.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::agent::{Agent, rpc};
use tuic_tests::bridge::{BridgeProc, NodeProc};
use tuic_tests::ipc;
use tuic_tests::term::Node;

const SESSION: &str = "7d1c0a52-4b43-4e29-9a3c-5b6f1e2d7c91";

fn init(id: i64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},
        "clientInfo":{"name":"contract-test","version":"1"}}})
}

fn call(id: i64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}})
}

/// The JSON a native tool answered (its text content), or the error text.
fn answer(resp: &Value) -> Value {
    let text = resp
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_default();
    serde_json::from_str(text).unwrap_or_else(|_| json!({"raw": resp}))
}

fn is_error(resp: &Value) -> bool {
    resp.get("error").is_some() || resp.pointer("/result/isError") == Some(&json!(true))
}

async fn create(socket: &Path, body: Value) -> Value {
    let r = ipc(socket, "POST", "/sessions", Some(body)).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.json());
    r.json()
}

/// Items 1 and 2: with no `timeout_ms`, `agent action=wait` and `session action=wait` run the
/// shared 60 s default and the bridge waits for them (its deadline is the clamped request plus
/// 5 s). Before the fix the bridge cut the agent wait off at 35 s ("TUIC node unreachable") and
/// the node ended a session wait at 30 s; here both answer after 40 s with what they waited for.
#[test]
fn default_waits_through_the_bridge_outlive_thirty_five_seconds() {
    let sandbox = tempfile::tempdir().unwrap();
    let cfg = sandbox.path().join("cfg");
    let node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    let sock = node.socket.display().to_string();
    let mut b = BridgeProc::start(
        sandbox.path(),
        &[],
        &[("TUIC_SOCKET", &sock), ("TUIC_SESSION", SESSION)],
    )
    .unwrap();
    b.call(&init(1), Duration::from_secs(10)).unwrap();
    b.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let rt = tokio::runtime::Runtime::new().unwrap();
    // A session that exits 40 s from now, and a sender that mails the bridge's agent then.
    let s = rt.block_on(create(
        &node.socket,
        json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "args": ["-c", "sleep 40; exit 3"]}),
    ));
    let sid = s["session_id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    b.send(&call(
        2,
        "session",
        json!({"action":"wait","session_id": sid, "until":"exited"}),
    ));
    b.send(&call(3, "agent", json!({"action":"wait"})));
    let socket = node.socket.clone();
    let sender = std::thread::spawn(move || {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let (mut a, _) = Agent::new(&socket, "late-sender").await;
            // The delay is the subject of the test, not a synchronisation.
            tokio::time::sleep(Duration::from_secs(40)).await;
            a.send(SESSION, "after forty seconds").await
        })
    });
    let mail = b
        .response(&json!(3), Duration::from_secs(70))
        .expect("the bridge answers the agent wait");
    let waited = started.elapsed();
    assert!(!is_error(&mail), "{mail}");
    let m = answer(&mail);
    assert_eq!(m["met"], true, "{m}");
    assert_eq!(
        m["new_messages"][0]["message"], "after forty seconds",
        "{m}"
    );
    assert!(waited >= Duration::from_secs(38), "{waited:?}");
    let exited = b
        .response(&json!(2), Duration::from_secs(70))
        .expect("the bridge answers the session wait");
    assert!(!is_error(&exited), "{exited}");
    let e = answer(&exited);
    assert_eq!(e["reached"], true, "{e}");
    assert_eq!(e["exit_code"], 3, "{e}");
    let sent = sender.join().unwrap();
    assert_eq!(sent["delivered"], true, "{sent}");
}

/// Item 3: `agent action=spawn` by a registered identity publishes `parent_session` on
/// `session-created`, and rows carry `parent_session`, `display_name_is_custom` and
/// `display_name_from_spawn`; an unregistered spawner's placeholder is never published.
#[tokio::test]
async fn spawned_sessions_name_their_parent_and_where_their_name_came_from() {
    let node = Node::start(None).await.unwrap();
    let sock = node.socket.clone();
    let mut events = node.events("session-created").await.unwrap();
    let (mut parent, parent_id) = Agent::new(&sock, "orchestrator").await;
    let spawned = parent
        .ok(json!({"action":"spawn","command":"/bin/sh","args":["-c","sleep 30"],"name":"worker-1"}))
        .await;
    assert_eq!(
        spawned["parent_session_id"],
        parent_id.as_str(),
        "{spawned}"
    );
    let child = spawned["session_id"].as_str().unwrap().to_owned();
    let ev = events.next(Duration::from_secs(10)).await.unwrap().1;
    assert_eq!(ev["session_id"], child.as_str(), "{ev}");
    assert_eq!(ev["parent_session"], parent_id.as_str(), "{ev}");
    assert_eq!(ev["display_name"], "worker-1", "{ev}");

    // An unregistered spawner: no placeholder on the event.
    let r = rpc(&sock, None, init(1)).await;
    let anon = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let r = rpc(
        &sock,
        Some(&anon),
        call(
            2,
            "agent",
            json!({"action":"spawn","command":"/bin/sh","args":["-c","sleep 30"]}),
        ),
    )
    .await;
    let orphan = answer(&r.json())["session_id"].as_str().unwrap().to_owned();
    let ev = events.next(Duration::from_secs(10)).await.unwrap().1;
    assert_eq!(ev["session_id"], orphan.as_str(), "{ev}");
    assert!(ev.get("parent_session").is_none(), "{ev}");

    // A user-created session with a name, then renamed.
    let user = create(&sock, json!({"rows":24,"cols":80,"name":"mine"})).await;
    let user_id = user["session_id"].as_str().unwrap().to_owned();
    let rows = ipc(&sock, "GET", "/sessions", None).await.unwrap().json();
    let row = |id: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["session_id"] == id)
            .cloned()
            .unwrap()
    };
    let c = row(&child);
    assert_eq!(c["parent_session"], parent_id.as_str(), "{c}");
    assert_eq!(c["display_name_from_spawn"], true, "{c}");
    assert_eq!(c["display_name_is_custom"], false, "{c}");
    let o = row(&orphan);
    assert!(o.get("parent_session").is_none(), "{o}");
    assert_eq!(o["display_name_from_spawn"], false, "{o}");
    let u = row(&user_id);
    assert_eq!(u["display_name_is_custom"], true, "{u}");
    assert_eq!(u["display_name_from_spawn"], false, "{u}");
    // A rename makes the spawned name a person's choice; MCP list carries the same fields.
    let r = ipc(
        &sock,
        "PUT",
        &format!("/sessions/{child}/name"),
        Some(json!({"name":"renamed"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.json());
    let (err, list) = parent.tool("session", json!({"action":"list"})).await;
    assert!(!err, "{list}");
    let c = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["session_id"] == child.as_str())
        .cloned()
        .unwrap();
    assert_eq!(c["display_name"], "renamed", "{c}");
    assert_eq!(c["display_name_is_custom"], true, "{c}");
    assert_eq!(c["display_name_from_spawn"], false, "{c}");
    assert_eq!(c["parent_session"], parent_id.as_str(), "{c}");
}

/// Item 4: a toast from an agent in a PTY carries `origin_repo_path` (its registered project,
/// else its PTY's working directory) and `origin_session_id`.
#[tokio::test]
async fn a_toast_names_the_callers_project_and_terminal() {
    let node = Node::start(None).await.unwrap();
    let sock = node.socket.clone();
    let work = tempfile::tempdir().unwrap();
    let cwd = work.path().canonicalize().unwrap().display().to_string();
    let s = create(
        &sock,
        json!({"rows":24,"cols":80,"cwd": cwd, "shell":"/bin/sh","args":["-c","sleep 30"]}),
    )
    .await;
    let tuic = s["tuic_session"].as_str().unwrap().to_owned();
    let mut events = node.events("mcp-toast").await.unwrap();
    // The caller asserts the PTY's identity, as tuic-bridge does from $TUIC_SESSION.
    let r = tuic_tests::agent::rpc_with(&sock, None, &[("x-tuic-session", &tuic)], init(1)).await;
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let toast = |id| call(id, "ui", json!({"action":"toast","message":"built"}));
    let r = rpc(&sock, Some(&sid), toast(2)).await;
    assert!(!is_error(&r.json()), "{}", r.json());
    let ev = events.next(Duration::from_secs(10)).await.unwrap().1;
    assert_eq!(ev["origin_repo_path"], cwd.as_str(), "{ev}");
    assert_eq!(ev["origin_session_id"], tuic.as_str(), "{ev}");
    // A registered project wins over the cwd.
    let r = rpc(
        &sock,
        Some(&sid),
        call(
            3,
            "agent",
            json!({"action":"register","path":"/srv/project"}),
        ),
    )
    .await;
    assert!(!is_error(&r.json()), "{}", r.json());
    rpc(&sock, Some(&sid), toast(4)).await;
    let ev = events.next(Duration::from_secs(10)).await.unwrap().1;
    assert_eq!(ev["origin_repo_path"], "/srv/project", "{ev}");
}

/// Item 5: inputs a tool does not declare are refused with an error naming the property, the
/// old names `project`/`workspace_id` with the name that replaced them; nothing runs.
#[tokio::test]
async fn undeclared_and_retired_inputs_are_refused_by_name() {
    let node = Node::start(None).await.unwrap();
    let sock = node.socket.clone();
    let (mut a, _) = Agent::new(&sock, "strict").await;
    let (err, v) = a
        .tool("session", json!({"action":"list","sesion_id":"x"}))
        .await;
    assert!(err, "{v}");
    assert_eq!(v["code"], "unknown_property", "{v}");
    assert_eq!(v["property"], "sesion_id", "{v}");
    assert!(v["error"].as_str().unwrap().contains("sesion_id"), "{v}");
    let (err, v) = a
        .tool("agent", json!({"action":"list_peers","project":"/repo"}))
        .await;
    assert!(err, "{v}");
    assert_eq!(v["code"], "retired_input", "{v}");
    assert!(v["error"].as_str().unwrap().contains("path"), "{v}");
    let (err, v) = a
        .tool("repo", json!({"action":"list","workspace_id":"w1"}))
        .await;
    assert!(err, "{v}");
    assert_eq!(v["property"], "workspace_id", "{v}");
    // Through the collapsed surface too, and a spawn with an unknown input starts nothing.
    let (err, v) = a
        .tool(
            "call_tool",
            json!({"name":"agent","arguments":{"action":"spawn","command":"/bin/sh","sandbox":true}}),
        )
        .await;
    assert!(err, "{v}");
    assert_eq!(v["property"], "sandbox", "{v}");
    let rows = ipc(&sock, "GET", "/sessions", None).await.unwrap().json();
    assert_eq!(rows, json!([]), "nothing was spawned");
    // The schema says so, for clients that validate before sending.
    let r = rpc(
        &sock,
        Some(&a.sid),
        json!({"jsonrpc":"2.0","id":9,"method":"tools/list"}),
    )
    .await;
    let tools = r.json()["result"]["tools"].clone();
    let session = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "session")
        .unwrap();
    assert_eq!(session["inputSchema"]["additionalProperties"], false);
}

/// The `tuic_session_wait_checks_total` counter from `GET /metrics`.
async fn wait_checks(socket: &Path) -> u64 {
    let r = ipc(socket, "GET", "/metrics", None).await.unwrap();
    String::from_utf8_lossy(&r.body)
        .lines()
        .find_map(|l| l.strip_prefix("tuic_session_wait_checks_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("tuic_session_wait_checks_total in /metrics")
}

/// Item 2: `session action=wait` sleeps on the session's lifecycle events. A wait on a quiet
/// session that runs to its 3 s deadline evaluates its condition at the start and at the
/// deadline only; the 250 ms polling loop it replaced checked ~12 times. An event in between
/// (the exit) ends the wait at once.
#[tokio::test]
async fn session_wait_sleeps_on_lifecycle_events_instead_of_polling() {
    let node = Node::start(None).await.unwrap();
    let sock = node.socket.clone();
    let s = create(
        &sock,
        json!({"rows":24,"cols":80,"shell":"/bin/sh","args":["-c","sleep 30"],"cwd":"/tmp"}),
    )
    .await;
    let id = s["session_id"].as_str().unwrap().to_owned();
    let (mut a, _) = Agent::new(&sock, "waiter").await;
    let before = wait_checks(&sock).await;
    let t0 = Instant::now();
    let (err, v) = a
        .tool(
            "session",
            json!({"action":"wait","session_id": id,"until":"exited","timeout_ms":3000}),
        )
        .await;
    let took = t0.elapsed();
    assert!(!err, "{v}");
    assert!(took >= Duration::from_millis(2900), "{took:?} {v}");
    let checks = wait_checks(&sock).await - before;
    assert!(checks <= 3, "a quiet 3 s wait checked {checks} times: {v}");
    // The exit wakes a pending wait without waiting for any tick.
    let quick = create(
        &sock,
        json!({"rows":24,"cols":80,"shell":"/bin/sh","args":["-c","read x; exit 4"],"cwd":"/tmp"}),
    )
    .await;
    let qid = quick["session_id"].as_str().unwrap().to_owned();
    let sock2 = sock.clone();
    let q2 = qid.clone();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ipc(
            &sock2,
            "POST",
            &format!("/sessions/{q2}/write"),
            Some(json!({"data":"go\n"})),
        )
        .await
        .unwrap();
    });
    let before = wait_checks(&sock).await;
    let (err, v) = a
        .tool(
            "session",
            json!({"action":"wait","session_id": qid,"until":"exited","timeout_ms":20000}),
        )
        .await;
    writer.await.unwrap();
    assert!(!err, "{v}");
    let checks = wait_checks(&sock).await - before;
    assert!(checks <= 4, "{checks} checks for one exit: {v}");
}
