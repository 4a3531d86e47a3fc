//! Upstream recovery end to end: a real `tuic-node` proxies the npm registry's
//! `@modelcontextprotocol/server-everything` in `streamableHttp` mode (loopback) and over
//! stdio, and the servers are killed and restarted under it.
//!
//! - A restarted HTTP server forgets the node's `Mcp-Session-Id` and answers 400 (not the
//!   spec's 404): the node initializes again at once and the call succeeds.
//! - Calls that fail on a dead server count toward the breaker: `/mcp/status` says
//!   `degraded` with the failures and the error, then `circuit_open` / `failed` after the
//!   configured threshold.
//! - Once the server answers again a call succeeds within 2 s, whatever the breaker's backoff
//!   (here: out of retries, which used to wait for the one-minute health tick).
//! - A killed stdio server is back within 2 s (kept as it was).

mod mcp_support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use mcp_support::{NodeProc, call, get, text, wait_status};
use serde_json::{Value, json};
use tuic_tests::bed::{free_port, npm_everything};

/// server-everything over Streamable HTTP on `port` (loopback), killed on drop; returns once
/// it accepts connections, with the instant it did.
async fn everything_http(entry: &PathBuf, port: u16) -> (tokio::process::Child, Instant) {
    let child = tokio::process::Command::new("node")
        .arg("--require")
        .arg(tuic_tests::clients_dir().join("loopback_only.cjs"))
        .arg(entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "server-everything did not listen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (child, Instant::now())
}

async fn kill(mut child: tokio::process::Child, port: u16) {
    child.kill().await.unwrap();
    // The port is free again (nothing accepts), so the next server can bind it.
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_ok()
    {
        tokio::task::yield_now().await;
    }
}

fn row<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["upstreams"]
        .as_array()
        .and_then(|a| a.iter().find(|u| u["name"] == name))
        .unwrap_or(&Value::Null)
}

fn echoed(r: &Value, msg: &str) -> bool {
    r["result"]["isError"] != true && text(r).contains(msg)
}

#[tokio::test]
async fn a_restarted_http_upstream_is_reinitialized_counted_and_usable_within_two_seconds() {
    let entry = npm_everything();
    let port = free_port();
    let (http, _) = everything_http(&entry, port).await;
    let upstreams = json!({"servers": [
        {"id": "ev", "name": "ev", "timeout_secs": 10,
         "transport": {"type": "http", "url": format!("http://127.0.0.1:{port}/mcp"), "protocol": "legacy"}},
        {"id": "evs", "name": "evs", "timeout_secs": 10,
         "transport": {"type": "stdio", "command": "node", "args": [entry.display().to_string(), "stdio"]}},
    ]});
    // The health tick is the default minute: nothing below may wait for it. One retry after
    // the circuit opens, then `failed` (which used to mean: back only on the next tick).
    let tuning = json!({"tuning": {
        "upstream_failure_threshold": 3,
        "upstream_backoff_base_ms": 1000,
        "upstream_max_retries": 1,
        "upstream_connect_timeout_ms": 10_000,
    }});
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mcp-upstreams.json"),
        serde_json::to_vec_pretty(&upstreams).unwrap(),
    )
    .unwrap();
    let node = NodeProc::start_in(dir, tuning).await;
    let st = wait_status(&node, "both ready", Duration::from_secs(60), |s| {
        row(s, "ev")["status"] == "ready" && row(s, "evs")["status"] == "ready"
    })
    .await;
    assert_eq!(row(&st, "ev")["protocol"], "2025-11-25", "{st}");
    let r = call(&node, "ev__echo", json!({"message": "one"})).await;
    assert!(echoed(&r, "one"), "{r}");

    // 1. Restart: the new server answers the old session id with 400. The very next call
    //    re-initializes and succeeds; nothing counted as a failure.
    kill(http, port).await;
    let (http, _) = everything_http(&entry, port).await;
    let r = call(&node, "ev__echo", json!({"message": "two"})).await;
    assert!(echoed(&r, "two"), "a call after the restart: {r}");
    let st = get(&node, "/mcp/status").await;
    assert_eq!(row(&st, "ev")["status"], "ready", "{st}");
    assert_eq!(row(&st, "ev")["failures"], 0, "{st}");

    // 2. Dead: each failed call counts. One → degraded with the error; the threshold → the
    //    circuit opens; its one retry fails → failed.
    kill(http, port).await;
    let r = call(&node, "ev__echo", json!({"message": "x"})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text(&r).contains("upstream_unreachable"), "{r}");
    let st = get(&node, "/mcp/status").await;
    let ev = row(&st, "ev");
    assert_eq!(ev["status"], "degraded", "{st}");
    assert_eq!(ev["failures"], 1, "{st}");
    assert!(
        ev["last_error"]
            .as_str()
            .is_some_and(|e| e.contains(&port.to_string())),
        "{st}"
    );
    for _ in 0..2 {
        let r = call(&node, "ev__echo", json!({"message": "x"})).await;
        assert_eq!(r["result"]["isError"], true, "{r}");
    }
    let st = wait_status(&node, "ev's circuit open", Duration::from_secs(2), |s| {
        matches!(
            row(s, "ev")["status"].as_str(),
            Some("circuit_open" | "failed")
        )
    })
    .await;
    assert!(row(&st, "ev")["failures"].as_u64().unwrap() >= 3, "{st}");
    wait_status(&node, "ev out of retries", Duration::from_secs(10), |s| {
        row(s, "ev")["status"] == "failed"
    })
    .await;

    // 3. Back: a call made within 2 s of the server answering succeeds (no minute-long tick).
    let (_http, answering) = everything_http(&entry, port).await;
    let r = call(&node, "ev__echo", json!({"message": "three"})).await;
    assert!(echoed(&r, "three"), "a call after the server is back: {r}");
    assert!(
        answering.elapsed() < Duration::from_secs(2),
        "usable {:?} after answering",
        answering.elapsed()
    );
    let st = get(&node, "/mcp/status").await;
    assert_eq!(row(&st, "ev")["status"], "ready", "{st}");
    assert_eq!(row(&st, "ev")["failures"], 0, "{st}");

    // 4. stdio: the child is killed; a new one serves within 2 s.
    let pid = row(&st, "evs")["pid"].as_u64().expect("stdio pid");
    let killed = Instant::now();
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    wait_status(&node, "evs back", Duration::from_secs(2), |s| {
        row(s, "evs")["status"] == "ready"
            && row(s, "evs")["pid"].as_u64().is_some_and(|p| p != pid)
    })
    .await;
    let r = call(&node, "evs__echo", json!({"message": "four"})).await;
    assert!(echoed(&r, "four"), "{r}");
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "{:?}",
        killed.elapsed()
    );
}
