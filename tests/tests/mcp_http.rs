//! End-to-end: the real `tuic-node` binary's `/mcp` over its IPC socket.

mod mcp_support;

use std::time::Duration;

use http_body_util::BodyExt;
use mcp_support::{NodeProc, tool_value};
use serde_json::json;

fn init(version: &str) -> serde_json::Value {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":version,"capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}})
}

#[tokio::test]
async fn curl_without_session_header_can_call_session_list() {
    let node = NodeProc::start(json!({})).await;
    let mut c = node.connect().await;
    // Exactly what `curl -X POST .../mcp -d '{...}'` sends: no session, no Accept list.
    let r = c
        .send(
            "POST",
            "/mcp",
            &[("content-type", "application/json")],
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"session","arguments":{"action":"list"}}}).to_string(),
        )
        .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["id"], 1);
    // The real registry answers: an empty node lists no sessions.
    assert_eq!(v["result"]["isError"], false, "{v}");
    assert_eq!(tool_value(&r)["count"], 0, "{v}");
    assert_eq!(tool_value(&r)["sessions"], json!([]), "{v}");
}

#[tokio::test]
async fn malformed_unknown_huge_and_foreign_origin_requests_are_refused_properly() {
    let node = NodeProc::start(json!({})).await;
    let mut c = node.connect().await;
    let h = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let r = c.send("POST", "/mcp", &h, "{\"jsonrpc\":").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32700);
    let r = c
        .rpc(&json!({"jsonrpc":"1.0","id":9,"method":"ping"}), &[])
        .await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (400, json!(-32600))
    );
    let r = c
        .rpc(
            &json!({"jsonrpc":"2.0","id":10,"method":"does/not/exist"}),
            &[],
        )
        .await;
    assert_eq!(r.json()["error"]["code"], -32601);
    assert_eq!(r.json()["id"], 10);
    let r = c
        .rpc(
            &json!({"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":7}}),
            &[],
        )
        .await;
    assert_eq!(r.json()["error"]["code"], -32602);
    let huge = vec![b' '; 2 * 1024 * 1024 + 1];
    let mut c2 = node.connect().await;
    let r = c2.send("POST", "/mcp", &h, huge).await;
    assert_eq!(r.status, 413);
    let mut c3 = node.connect().await;
    let r = c3
        .rpc(
            &json!({"jsonrpc":"2.0","id":1,"method":"ping"}),
            &[("origin", "https://evil.example")],
        )
        .await;
    assert_eq!(r.status, 403);
}

#[tokio::test]
async fn stale_header_recovers_delete_then_404_and_initialize_is_logged() {
    let node = NodeProc::start(json!({})).await;
    let mut c = node.connect().await;
    let r = c.rpc(&init("2025-11-25"), &[]).await;
    let sid = r.session().expect("session id");
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25");
    let r = c
        .rpc(
            &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
            &[("mcp-session-id", &sid)],
        )
        .await;
    assert_eq!(r.status, 202);
    // A session id this process never issued (an app restart) is served, not refused.
    let r = c
        .rpc(
            &json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
            &[("mcp-session-id", "from-before-restart")],
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.json()["result"]["tools"].as_array().unwrap().len() >= 10);
    // Re-initialize with the stale id: logged as reconnected.
    let r = c
        .rpc(&init("2026-07-28"), &[("mcp-session-id", "lost-in-reap")])
        .await;
    assert_eq!(r.json()["result"]["protocolVersion"], "2026-07-28");
    let r = c
        .send("DELETE", "/mcp", &[("mcp-session-id", &sid)], "")
        .await;
    assert_eq!(r.status, 200);
    let r = c
        .rpc(
            &json!({"jsonrpc":"2.0","id":3,"method":"tools/list"}),
            &[("mcp-session-id", &sid)],
        )
        .await;
    assert_eq!(r.status, 404);
    let r = c
        .send("DELETE", "/mcp", &[("mcp-session-id", &sid)], "")
        .await;
    assert_eq!(r.status, 404);
    let logs = c
        .send("GET", "/logs?source=mcp_initialize", &[], "")
        .await
        .json();
    let events: Vec<String> = logs["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["fields"]["event"]
                .as_str()
                .unwrap_or_default()
                .trim_matches('"')
                .to_owned()
        })
        .collect();
    assert!(events.contains(&"fresh".to_string()), "{logs}");
    assert!(events.contains(&"reconnected".to_string()), "{logs}");
}

#[tokio::test]
async fn sse_generations_superseded_stream_keeps_replacement_and_list_changed_arrives() {
    let node = NodeProc::start(json!({"disabled_native_tools": []})).await;
    let mut c = node.connect().await;
    let r = c
        .send("GET", "/mcp", &[("accept", "text/event-stream")], "")
        .await;
    assert_eq!(r.status, 401, "GET without a session header");
    let sid = c.rpc(&init("2025-11-25"), &[]).await.session().unwrap();
    let sse = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", sid.as_str()),
    ];
    let mut a = node.connect().await;
    let first = a.send_head("GET", "/mcp", &sse, "").await;
    assert_eq!(first.status(), 200);
    let mut b = node.connect().await;
    let second = b.send_head("GET", "/mcp", &sse, "").await;
    assert_eq!(second.status(), 200);
    // The older stream goes away; its teardown must not remove the replacement's sender.
    drop(first);
    drop(a);
    // Change the tool surface through the config tool (a save fires list_changed at once).
    let base = tool_value(&c.rpc(&json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"config","arguments":{"action":"get"}}}), &[]).await);
    let mut edited = base.clone();
    edited["disabled_native_tools"] = json!(["config"]);
    let r = c.rpc(&json!({"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"config","arguments":{"action":"save","base":base,"config":edited}}}), &[]).await;
    assert_eq!(r.json()["result"]["isError"], false, "{}", r.json());
    let mut body = second.into_body();
    let text = tokio::time::timeout(Duration::from_secs(60), async {
        let mut acc = String::new();
        loop {
            let f = body.frame().await.expect("stream open").unwrap();
            if let Ok(d) = f.into_data() {
                acc.push_str(&String::from_utf8_lossy(&d));
                if acc.contains("list_changed") {
                    return acc;
                }
            }
        }
    })
    .await
    .expect("list_changed within 60 s");
    assert!(text.contains("notifications/tools/list_changed"));
    let r = c
        .rpc(
            &json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
            &[("mcp-session-id", &sid)],
        )
        .await;
    let names: Vec<_> = r.json()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        names.contains(&"debug".to_string()),
        "debug now enabled: {names:?}"
    );
    let st = c.send("GET", "/mcp/status", &[], "").await.json();
    assert_eq!(st["sessions"]["streams"], 1, "{st}");
}
