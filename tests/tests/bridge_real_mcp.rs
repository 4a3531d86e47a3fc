//! End-to-end: `tuic` and `tuic-bridge` against the node's real `/mcp` (session and repo tools
//! on the real registries): listing and calling through the bridge across a node restart, an
//! in-flight blocking call when the node dies, `tuic open` over MCP `repo action=add`, and
//! instance isolation.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_bridge::ipc::request_sync;
use tuic_proto::ipc_http::Request;
use tuic_tests::bridge::{BridgeProc, NodeProc, poll, tuic};

const SESSION: &str = "0f8c1d52-7a43-4e29-9a3c-5b6f1e2d7c90";

fn init(id: i64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},
        "clientInfo":{"name":"test-client","version":"1"}}})
}

fn call(id: i64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}})
}

fn is_error(r: &Value) -> bool {
    r.get("error").is_some() || r.pointer("/result/isError") == Some(&json!(true))
}

#[test]
fn bridge_lists_calls_and_survives_a_node_restart() {
    let sandbox = tempfile::tempdir().unwrap();
    let cfg = sandbox.path().join("cfg");
    let node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    let c = cfg.display().to_string();
    let mut b = BridgeProc::start(
        sandbox.path(),
        &[],
        &[("TUIC_CONFIG_DIR", &c), ("TUIC_SESSION", SESSION)],
    )
    .unwrap();
    let r = b.call(&init(1), Duration::from_secs(10)).unwrap();
    assert_ne!(r["result"]["serverInfo"]["name"], "tuic-bridge", "{r}");
    b.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let tools = b
        .call(
            &json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
            Duration::from_secs(10),
        )
        .unwrap();
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"session"), "{names:?}");
    let r = b
        .call(
            &call(3, "session", json!({"action":"list"})),
            Duration::from_secs(10),
        )
        .unwrap();
    assert!(!is_error(&r), "{r}");

    node.kill();
    // While the node is down, tools/list answers at once, from the last list (never empty).
    let started = Instant::now();
    let offline = b
        .call(
            &json!({"jsonrpc":"2.0","id":4,"method":"tools/list"}),
            Duration::from_secs(1),
        )
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(offline["result"]["tools"], tools["result"]["tools"]);

    let _node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    let mut id = 10;
    poll(Duration::from_secs(10), Duration::from_millis(200), || {
        id += 1;
        let r = b
            .call(
                &call(id, "session", json!({"action":"list"})),
                Duration::from_secs(10),
            )
            .ok()?;
        (!is_error(&r)).then_some(())
    })
    .expect("a call succeeds within 10 s of the restart");
    b.notification("notifications/tools/list_changed", Duration::from_secs(5))
        .unwrap();
    let (rest, status) = b.finish(Duration::from_secs(10)).unwrap();
    assert!(status.success());
    assert!(rest.iter().all(|m| m.get("id") != Some(&json!(1))));
}

#[test]
fn a_wait_in_flight_when_the_node_dies_returns_an_error() {
    let sandbox = tempfile::tempdir().unwrap();
    let cfg = sandbox.path().join("cfg");
    let node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    let c = cfg.display().to_string();
    let mut b = BridgeProc::start(
        sandbox.path(),
        &[],
        &[("TUIC_CONFIG_DIR", &c), ("TUIC_SESSION", SESSION)],
    )
    .unwrap();
    b.call(&init(1), Duration::from_secs(10)).unwrap();
    b.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let created = b
        .call(
            &call(
                2,
                "session",
                json!({"action":"create","shell":"/bin/sh","cwd":sandbox.path()}),
            ),
            Duration::from_secs(10),
        )
        .unwrap();
    assert!(!is_error(&created), "{created}");
    let inner: Value =
        serde_json::from_str(created["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    // A wait that parks on the node until the shell exits (it never does on its own).
    b.send(&call(
        3,
        "session",
        json!({"action":"wait","until":"exited","session_id":inner["session_id"],"timeout_ms":120_000}),
    ));
    // A later call's answer means the wait (sent first) has reached the node and parked.
    let r = b
        .call(
            &call(4, "session", json!({"action":"list"})),
            Duration::from_secs(10),
        )
        .unwrap();
    assert!(!is_error(&r), "{r}");
    let died = Instant::now();
    node.kill();
    let r = b.response(&json!(3), Duration::from_secs(5)).unwrap();
    assert!(is_error(&r), "{r}");
    // The bridge names the lost node; it never waits out the 120 s.
    let text = r.to_string();
    assert!(
        text.contains("unreachable") || text.contains("not running"),
        "{r}"
    );
    assert!(died.elapsed() < Duration::from_secs(3));
}

#[test]
fn cli_open_registers_a_repository_over_mcp() {
    let sandbox = tempfile::tempdir().unwrap();
    let cfg = sandbox.path().join("cfg");
    let _node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    let repo = tempfile::tempdir().unwrap();
    let c = cfg.display().to_string();
    let out = tuic(
        sandbox.path(),
        &["open", repo.path().to_str().unwrap()],
        &[("TUIC_CONFIG_DIR", &c)],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Repeat calls preserve the repository (spec: "Repeat calls preserve ...").
    let again = tuic(
        sandbox.path(),
        &["open", repo.path().to_str().unwrap()],
        &[("TUIC_CONFIG_DIR", &c)],
    );
    assert!(again.status.success());
    // The registration is visible through MCP repo action=list (same service).
    let mut b = BridgeProc::start(sandbox.path(), &[], &[("TUIC_CONFIG_DIR", &c)]).unwrap();
    b.call(&init(1), Duration::from_secs(10)).unwrap();
    b.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let r = b
        .call(
            &call(2, "repo", json!({"action":"list"})),
            Duration::from_secs(10),
        )
        .unwrap();
    assert!(!is_error(&r), "{r}");
    let canon = repo.path().canonicalize().unwrap();
    assert!(r.to_string().contains(canon.to_str().unwrap()), "{r}");
}

#[test]
fn bridges_bound_to_a_reach_a_and_never_b() {
    let sandbox = tempfile::tempdir().unwrap();
    let na = NodeProc::start(sandbox.path(), &sandbox.path().join("a"), Some("a")).unwrap();
    let nb = NodeProc::start(sandbox.path(), &sandbox.path().join("b"), Some("b")).unwrap();
    let mut bridge = BridgeProc::start(sandbox.path(), &["--instance", "a"], &[]).unwrap();
    bridge.call(&init(1), Duration::from_secs(10)).unwrap();
    bridge.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let r = bridge
        .call(
            &call(2, "session", json!({"action":"list"})),
            Duration::from_secs(10),
        )
        .unwrap();
    assert!(!is_error(&r), "{r}");
    // Instance b's node never saw an initialize (the spec logs each as source mcp_initialize).
    let logs = request_sync(
        &nb.socket,
        &Request::new("GET", "/logs?source=mcp_initialize"),
        Duration::from_secs(5),
    )
    .unwrap()
    .json()
    .unwrap();
    assert_eq!(logs["records"], json!([]), "{logs}");
    let logs = request_sync(
        &na.socket,
        &Request::new("GET", "/logs?source=mcp_initialize"),
        Duration::from_secs(5),
    )
    .unwrap()
    .json()
    .unwrap();
    assert_ne!(logs["records"], json!([]), "{logs}");
}
