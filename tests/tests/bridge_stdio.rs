//! End-to-end tests of `tuic-bridge` over stdio: against a scripted MCP endpoint (identity,
//! replayed initialize, restarts, EOF handling, in-flight calls) and against the real node
//! (not running vs `/mcp` unavailable, restart, instances).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::bridge::{BridgeProc, NodeProc, poll};
use tuic_tests::fake::{FakeMcp, Hostile, HostileServer};

const SESSION: &str = "0f8c1d52-7a43-4e29-9a3c-5b6f1e2d7c90";

fn init(id: i64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},
        "clientInfo":{"name":"test-client","version":"1"}}})
}

fn call(id: i64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}})
}

fn text_of(resp: &Value) -> String {
    resp.pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            resp.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

fn is_error(resp: &Value) -> bool {
    resp.get("error").is_some() || resp.pointer("/result/isError") == Some(&json!(true))
}

fn start_bridge(sandbox: &Path, sock: &Path) -> BridgeProc {
    let sock = sock.display().to_string();
    BridgeProc::start(
        sandbox,
        &[],
        &[("TUIC_SOCKET", &sock), ("TUIC_SESSION", SESSION)],
    )
    .unwrap()
}

fn handshake(b: &mut BridgeProc) -> Value {
    let r = b.call(&init(1), Duration::from_secs(5)).unwrap();
    b.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    r
}

#[test]
fn offline_answers_are_immediate_and_name_the_missing_node() {
    let sandbox = tempfile::tempdir().unwrap();
    let sock = sandbox.path().join("nobody.sock");
    let mut b = start_bridge(sandbox.path(), &sock);
    let r = handshake(&mut b);
    assert_eq!(r["result"]["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25");

    let started = Instant::now();
    let legacy = b
        .call(
            &json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
            Duration::from_secs(1),
        )
        .unwrap();
    assert_eq!(legacy["result"], json!({"tools": []}));
    let modern = b
        .call(
            &json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{
                "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}),
            Duration::from_secs(1),
        )
        .unwrap();
    assert_eq!(
        modern["result"],
        json!({"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"})
    );
    let c = b
        .call(
            &call(4, "session", json!({"action":"list"})),
            Duration::from_secs(1),
        )
        .unwrap();
    assert!(is_error(&c), "{c}");
    assert!(text_of(&c).contains("not running"), "{c}");
    assert!(started.elapsed() < Duration::from_secs(2));

    let (_, status) = b.finish(Duration::from_secs(5)).unwrap();
    assert!(status.success());
}

#[test]
fn identity_survives_a_restart_with_one_initialize_response() {
    let sandbox = tempfile::tempdir().unwrap();
    let sock = sandbox.path().join("mcp.sock");
    let first = FakeMcp::start(&sock, 1);
    let mut b = start_bridge(sandbox.path(), &sock);

    let r = handshake(&mut b);
    assert_eq!(r["result"]["serverInfo"]["name"], "fake-mcp", "{r}");
    let tools = b
        .call(
            &json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(tools["result"]["tools"][0]["name"], "echo");
    // The GET /mcp stream's channel notification reaches the client.
    let note = b
        .notification("notifications/claude/channel", Duration::from_secs(5))
        .unwrap();
    assert_eq!(note["params"]["content"], "hello from fake");
    let c = b
        .call(&call(3, "echo", json!({"n": 1})), Duration::from_secs(5))
        .unwrap();
    let seen: Value = serde_json::from_str(&text_of(&c)).unwrap();
    assert_eq!(seen["x_tuic_session"], SESSION);
    assert_eq!(seen["epoch"], 1);
    let log1 = first.log();
    assert!(
        log1.iter()
            .filter(|r| r.method == "POST")
            .all(|r| r.header("x-tuic-session") == Some(SESSION)),
        "every POST carries the identity"
    );
    assert!(log1.iter().any(|r| r.method == "GET" && r.path == "/mcp"));

    // The node dies and comes back with no memory of the protocol session.
    first.stop();
    let second = FakeMcp::start(&sock, 2);
    let mut id = 100;
    let ok = poll(Duration::from_secs(10), Duration::from_millis(200), || {
        id += 1;
        let c = b
            .call(&call(id, "echo", json!({"n": 2})), Duration::from_secs(5))
            .ok()?;
        let seen: Value = serde_json::from_str(&text_of(&c)).ok()?;
        (seen["epoch"] == 2).then_some(seen)
    })
    .expect("a call succeeds within 10 s of the restart");
    assert_eq!(ok["x_tuic_session"], SESSION);

    // The bridge replayed the client's own initialize, with the same identity...
    let log2 = second.log();
    let replay = log2
        .iter()
        .find(|r| r.rpc_method() == Some("initialize"))
        .expect("initialize replayed");
    assert_eq!(replay.body["params"]["clientInfo"]["name"], "test-client");
    assert_eq!(replay.header("x-tuic-session"), Some(SESSION));
    // ...told the client the tools may have changed...
    b.notification("notifications/tools/list_changed", Duration::from_secs(5))
        .unwrap();

    // ...and on EOF ended the new protocol session. No second initialize response ever
    // reached the client.
    let (rest, status) = b.finish(Duration::from_secs(10)).unwrap();
    assert!(status.success());
    assert!(
        rest.iter().all(|m| m.get("id") != Some(&json!(1))),
        "a second initialize response leaked: {rest:?}"
    );
    let delete = second
        .log()
        .into_iter()
        .find(|r| r.method == "DELETE")
        .expect("DELETE /mcp on EOF");
    assert!(
        delete
            .header("mcp-session-id")
            .is_some_and(|s| s.starts_with("fake2-")),
        "{:?}",
        delete.headers
    );
}

#[test]
fn stdin_eof_settles_in_flight_calls_before_delete() {
    let sandbox = tempfile::tempdir().unwrap();
    let sock = sandbox.path().join("mcp.sock");
    let fake = FakeMcp::start(&sock, 1);
    let mut b = start_bridge(sandbox.path(), &sock);
    handshake(&mut b);
    b.send(&call(5, "slow", json!({})));
    let (rest, status) = b.finish(Duration::from_secs(10)).unwrap();
    assert!(status.success());
    let answer = rest
        .iter()
        .find(|m| m.get("id") == Some(&json!(5)))
        .expect("the in-flight call was answered before exit");
    assert!(!is_error(answer), "{answer}");
    let log = fake.log();
    let slow = log
        .iter()
        .find(|r| r.body.pointer("/params/name") == Some(&json!("slow")))
        .expect("slow call reached the node");
    let delete = log
        .iter()
        .find(|r| r.method == "DELETE")
        .expect("DELETE /mcp");
    assert!(
        delete.at.duration_since(slow.at) >= Duration::from_millis(450),
        "DELETE came before the call settled"
    );
}

#[test]
fn a_call_in_flight_when_the_node_dies_returns_an_error() {
    let sandbox = tempfile::tempdir().unwrap();
    let sock = sandbox.path().join("mcp.sock");
    let fake = FakeMcp::start(&sock, 1);
    let mut b = start_bridge(sandbox.path(), &sock);
    handshake(&mut b);
    b.send(&call(
        9,
        "hang",
        json!({"action": "wait", "timeout_ms": 120_000}),
    ));
    poll(Duration::from_secs(5), Duration::from_millis(20), || {
        fake.log()
            .iter()
            .any(|r| r.body.pointer("/params/name") == Some(&json!("hang")))
            .then_some(())
    })
    .expect("the call reached the node");
    let died = Instant::now();
    fake.stop();
    let r = b.response(&json!(9), Duration::from_secs(5)).unwrap();
    assert!(is_error(&r), "{r}");
    assert!(died.elapsed() < Duration::from_secs(3));
}

#[test]
fn real_node_distinguishes_not_running_from_mcp_unavailable_across_a_restart() {
    let sandbox = tempfile::tempdir().unwrap();
    let cfg = sandbox.path().join("cfg");
    let node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    let cfg_s = cfg.display().to_string();
    let mut b = BridgeProc::start(
        sandbox.path(),
        &[],
        &[("TUIC_CONFIG_DIR", &cfg_s), ("TUIC_SESSION", SESSION)],
    )
    .unwrap();
    handshake(&mut b);
    let mut id = 10;
    let mut list = |b: &mut BridgeProc| {
        id += 1;
        b.call(
            &call(id, "session", json!({"action":"list"})),
            Duration::from_secs(15),
        )
        .unwrap()
    };
    // The node serves /mcp and session list works on its real registry.
    let r = list(&mut b);
    assert!(!is_error(&r), "{r}");
    let rows: Value = serde_json::from_str(&text_of(&r)).unwrap();
    assert_eq!(rows["count"], 0, "{r}");

    node.kill();
    poll(Duration::from_secs(10), Duration::from_millis(100), || {
        text_of(&list(&mut b)).contains("not running").then_some(())
    })
    .expect("the bridge notices the node is gone");

    let node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    poll(Duration::from_secs(10), Duration::from_millis(200), || {
        (!is_error(&list(&mut b))).then_some(())
    })
    .expect("the bridge reaches the restarted node within 10 s");

    // A node running with the MCP server switched off: reachable over IPC, so the bridge says
    // the endpoint is unavailable, never that the node is not running.
    node.kill();
    let file = cfg.join("config.json");
    let mut config: Value = std::fs::read_to_string(&file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({}));
    config["mcp_server_enabled"] = json!(false);
    std::fs::write(&file, config.to_string()).unwrap();
    let _node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    let r = poll(Duration::from_secs(10), Duration::from_millis(200), || {
        let r = list(&mut b);
        text_of(&r)
            .contains("MCP endpoint is unavailable")
            .then_some(r)
    })
    .expect("the bridge reports the disabled endpoint within 10 s");
    assert!(is_error(&r), "{r}");
    assert!(!text_of(&r).contains("not running"), "{r}");
    let (_, status) = b.finish(Duration::from_secs(10)).unwrap();
    assert!(status.success());
}

#[test]
fn a_bridge_bound_to_one_instance_never_reaches_another() {
    let sandbox = tempfile::tempdir().unwrap();
    let _a = NodeProc::start(sandbox.path(), &sandbox.path().join("a"), Some("a")).unwrap();
    let mut b = BridgeProc::start(sandbox.path(), &["--instance", "b"], &[]).unwrap();
    handshake(&mut b);
    let r = b
        .call(
            &call(2, "session", json!({"action":"list"})),
            Duration::from_secs(5),
        )
        .unwrap();
    assert!(text_of(&r).contains("not running"), "{r}");
    assert!(text_of(&r).contains("instance \"b\""), "{r}");

    let mut a = BridgeProc::start(sandbox.path(), &[], &[("TUIC_APP_INSTANCE", "a")]).unwrap();
    handshake(&mut a);
    let r = a
        .call(
            &call(2, "session", json!({"action":"list"})),
            Duration::from_secs(15),
        )
        .unwrap();
    assert!(!text_of(&r).contains("not running"), "{r}");
}

#[test]
fn a_hostile_peer_gets_an_invalid_data_error_within_a_second() {
    let sandbox = tempfile::tempdir().unwrap();
    let sock = sandbox.path().join("hostile.sock");
    let _server = HostileServer::start(
        &sock,
        Hostile::Once(b"HTTP/1.1 100 Continue\r\n\r\n".repeat(40)),
    );
    let mut b = start_bridge(sandbox.path(), &sock);
    let started = Instant::now();
    let r = handshake(&mut b);
    assert_eq!(r["result"]["serverInfo"]["name"], "tuic-bridge", "{r}");
    let c = b
        .call(
            &call(2, "session", json!({"action":"list"})),
            Duration::from_secs(1),
        )
        .unwrap();
    assert!(is_error(&c), "{c}");
    assert!(text_of(&c).contains("more than 32 interim"), "{c}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}
