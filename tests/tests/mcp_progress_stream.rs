//! End-to-end: progress on the request's own stream. The official Python SDK calls an
//! upstream tool that reports progress (the SDK's own `MCPServer` over stdio, proxied by a
//! real node) 200 times over Streamable HTTP and 200 times through `tuic-bridge`: every call
//! gets all its progress before its result (none dropped by the SDK for arriving late), and
//! the POST is answered as an event stream carrying progress then the result. The official
//! TypeScript SDK does the same 200 + 200 calls (`onprogress`); over stdio it drops a progress
//! notification that it reads in the same chunk as the call's result (notifications are
//! handled a microtask later, the result at once), which `tuic-bridge` avoids by writing a
//! result that follows progress only after a short gap (`stdio::PROGRESS_GAP`).

mod mcp_support;

use mcp_support::NodeProc;
use serde_json::{Value, json};

const CALLS: usize = 200;
const STEPS: u64 = 3;

async fn node_with_upstream(python: &str) -> NodeProc {
    let dir = tempfile::tempdir().unwrap();
    let script = tuic_tests::clients_dir().join("upstream_server.py");
    let upstreams = json!({"servers": [{"id": "py", "name": "py",
        "transport": {"type": "stdio", "command": python, "args": [script.display().to_string(), "stdio"]}}]});
    std::fs::write(
        dir.path().join("mcp-upstreams.json"),
        serde_json::to_vec_pretty(&upstreams).unwrap(),
    )
    .unwrap();
    let node = NodeProc::start_in(dir, json!({})).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let s = node
            .connect()
            .await
            .send("GET", "/mcp/status", &[], "")
            .await
            .json();
        if s["upstreams"][0]["status"] == "ready" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "upstream ready: {s}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    node
}

async fn run(cmd: &mut tokio::process::Command) -> Value {
    let out = tokio::time::timeout(std::time::Duration::from_secs(600), cmd.output())
        .await
        .expect("client within 600 s")
        .expect("client ran");
    assert!(
        out.status.success(),
        "client failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().rev().find(|l| l.starts_with('{')).unwrap()).unwrap()
}

fn check(what: &str, r: &Value) {
    assert_eq!(r["errors"], 0, "{what}: {r}");
    assert_eq!(r["lost"], 0, "{what}: {r}");
    assert_eq!(
        r["progress_per_call"],
        json!({STEPS.to_string(): CALLS}),
        "{what}: {r}"
    );
    eprintln!(
        "{what}: {CALLS} calls, 0 progress lost, {:.1} s",
        r["seconds"].as_f64().unwrap()
    );
}

#[tokio::test]
async fn progress_comes_on_the_post_stream_before_the_result_over_http_and_the_bridge() {
    let tuic_tests::SdkClients { python, .. } = tuic_tests::sdk_clients();
    let node = node_with_upstream(&python).await;
    let client = tuic_tests::clients_dir().join("mcp_python_progress_calls.py");

    // The wire: one POST answered as an event stream, progress first, the result last.
    let r = node
        .connect()
        .await
        .rpc(
            &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
                "name": "py__progress_steps", "arguments": {"steps": STEPS},
                "_meta": {"progressToken": "tok-1"}}}),
            &[],
        )
        .await;
    assert_eq!(
        r.headers.get("content-type").unwrap().to_str().unwrap(),
        "text/event-stream",
        "{:?}",
        r.headers
    );
    let body = String::from_utf8_lossy(&r.body).into_owned();
    let msgs: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(msgs.len(), STEPS as usize + 1, "{body}");
    for (i, m) in msgs[..STEPS as usize].iter().enumerate() {
        assert_eq!(m["method"], "notifications/progress", "{body}");
        assert_eq!(m["params"]["progressToken"], "tok-1", "{body}");
        assert_eq!(
            m["params"]["progress"].as_f64(),
            Some(i as f64 + 1.0),
            "{body}"
        );
    }
    assert_eq!(msgs[STEPS as usize]["id"], 5, "{body}");
    // Without a progress token, or without event-stream in Accept, the answer stays JSON.
    let r = node
        .connect()
        .await
        .send(
            "POST",
            "/mcp",
            &[
                ("content-type", "application/json"),
                ("accept", "application/json"),
            ],
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
                "name": "py__progress_steps", "arguments": {"steps": 1},
                "_meta": {"progressToken": "tok-2"}}})
            .to_string(),
        )
        .await;
    assert_eq!(r.json()["id"], 6);

    let url = node.tcp_forward().await;
    let http = run(tokio::process::Command::new(&python)
        .arg(&client)
        .args(["http", &url, "py__progress_steps"])
        .arg(STEPS.to_string())
        .arg(CALLS.to_string()))
    .await;
    check("HTTP", &http);

    let sandbox = tempfile::tempdir().unwrap();
    let bridge = tuic_tests::bridge::bin("tuic-bridge");
    let mut cmd: tokio::process::Command =
        tuic_tests::bridge::clean_command(std::path::Path::new(&python), sandbox.path()).into();
    let bridged = run(cmd
        .arg(&client)
        .arg("bridge")
        .arg(&bridge)
        .arg("py__progress_steps")
        .arg(STEPS.to_string())
        .arg(CALLS.to_string())
        .env("TUIC_SOCKET", &node.socket)
        .env("TUIC_SESSION", "0f8c1d52-7a43-4e29-9a3c-5b6f1e2d7c91"))
    .await;
    check("tuic-bridge", &bridged);
}

/// The same 200 + 200 calls from the official TypeScript SDK (`onprogress`): every progress
/// before its result, over Streamable HTTP and through `tuic-bridge` over stdio.
#[tokio::test]
async fn typescript_sdk_sees_every_progress_before_the_result_over_http_and_the_bridge() {
    let tuic_tests::SdkClients { python, ts_dir, .. } = tuic_tests::sdk_clients();
    let node = node_with_upstream(&python).await;
    // The ESM import resolves from the script's folder, so the script sits beside node_modules.
    let script = ts_dir.join("tuic_ts_progress_calls.mjs");
    std::fs::copy(
        tuic_tests::clients_dir().join("mcp_ts_progress_calls.mjs"),
        &script,
    )
    .unwrap();
    let url = node.tcp_forward().await;
    let http = run(tokio::process::Command::new("node")
        .arg(&script)
        .args(["http", &url, "py__progress_steps"])
        .arg(STEPS.to_string())
        .arg(CALLS.to_string()))
    .await;
    check("TS SDK, HTTP", &http);
    assert_eq!(http["late"], 0, "{http}");

    let sandbox = tempfile::tempdir().unwrap();
    let bridge = tuic_tests::bridge::bin("tuic-bridge");
    let mut cmd: tokio::process::Command =
        tuic_tests::bridge::clean_command(std::path::Path::new("node"), sandbox.path()).into();
    let bridged = run(cmd
        .arg(&script)
        .arg("bridge")
        .arg(&bridge)
        .arg("py__progress_steps")
        .arg(STEPS.to_string())
        .arg(CALLS.to_string())
        .env("TUIC_SOCKET", &node.socket)
        .env("TUIC_SESSION", "0f8c1d52-7a43-4e29-9a3c-5b6f1e2d7c91"))
    .await;
    check("TS SDK, tuic-bridge", &bridged);
    assert_eq!(bridged["late"], 0, "{bridged}");
}
