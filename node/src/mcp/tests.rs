//! Service tests: the full router (boundary, limits, MCP routes) called in-process.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::guard::Transport;
use crate::logs::LogRing;
use crate::paths::{LocationEnv, Paths};
use crate::state::{Node, RunOverrides};

mod surface;

struct Fixture {
    _dir: tempfile::TempDir,
    node: Arc<Node>,
}

fn fixture(extra_config: Value) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = json!({"secret_store": "file"});
    if let (Some(c), Some(e)) = (cfg.as_object_mut(), extra_config.as_object()) {
        c.extend(e.clone());
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
    Fixture { _dir: dir, node }
}

struct Answer {
    status: StatusCode,
    session: Option<String>,
    body: Value,
}

async fn send(node: &Arc<Node>, req: Request<Body>) -> Answer {
    let r = crate::routes::router(node.clone())
        .oneshot(req)
        .await
        .unwrap();
    let status = r.status();
    let session = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer {
        status,
        session,
        body,
    }
}

fn ipc_post(body: impl Into<Body>, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let mut r = b.body(body.into()).unwrap();
    r.extensions_mut().insert(Transport::Ipc);
    r
}

async fn rpc(node: &Arc<Node>, msg: Value, headers: &[(&str, &str)]) -> Answer {
    send(node, ipc_post(msg.to_string(), headers)).await
}

fn tool_json(a: &Answer) -> Value {
    serde_json::from_str(a.body["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

fn call(name: &str, args: Value) -> Value {
    json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":name,"arguments":args}})
}

#[tokio::test]
async fn initialize_negotiates_and_mints_a_visible_ascii_session() {
    let f = fixture(json!({}));
    for (asked, want) in [
        (json!("2026-07-28"), "2026-07-28"),
        (json!("2025-11-25"), "2025-11-25"),
        (json!("2025-03-26"), "2025-03-26"),
        (json!("2024-11-05"), "2025-11-25"),
        (Value::Null, "2025-11-25"),
    ] {
        let a = rpc(
            &f.node,
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":asked,"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
            &[],
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.body["result"]["protocolVersion"], want);
        assert_eq!(
            a.body["result"]["capabilities"]["tools"]["listChanged"],
            true
        );
        assert!(a.body["result"]["capabilities"]["experimental"]["claude/channel"].is_object());
        assert_eq!(a.body["result"]["serverInfo"]["name"], "tuicommander");
        let sid = a.session.unwrap();
        assert!(sid.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        // Legacy results carry no cache envelope.
        assert!(a.body["result"].get("resultType").is_none());
    }
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        &[],
    )
    .await;
    assert_eq!(a.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn malformed_json_rpc_gets_proper_errors() {
    let f = fixture(json!({}));
    let a = send(&f.node, ipc_post("{not json", &[])).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.body["error"]["code"], -32700);
    assert_eq!(a.body["id"], Value::Null);
    let a = rpc(&f.node, json!({"id":1,"method":"ping"}), &[]).await;
    assert_eq!(
        (a.status, a.body["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32600))
    );
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":2,"method":"nope/nope"}),
        &[],
    )
    .await;
    assert_eq!(a.body["error"]["code"], -32601);
    assert_eq!(a.body["id"], 2);
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}}),
        &[],
    )
    .await;
    assert_eq!(a.body["error"]["code"], -32602);
    let a = rpc(&f.node, call("no_such_tool", json!({})), &[]).await;
    assert_eq!(a.body["error"]["code"], -32602);
    let a = rpc(&f.node, json!([]), &[]).await;
    assert_eq!(
        (a.status, a.body["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32600))
    );
    // A batch: each member answered, notifications silently accepted.
    let a = rpc(
        &f.node,
        json!([{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":2,"method":"x"}]),
        &[],
    )
    .await;
    let arr = a.body.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[0]["result"], json!({}));
    assert_eq!(arr[1]["error"]["code"], -32601);
}

#[tokio::test]
async fn accept_excluding_json_is_406_and_huge_body_is_413() {
    let f = fixture(json!({}));
    let mut r = Request::post("/mcp")
        .header("accept", "text/html")
        .body(Body::from("{}"))
        .unwrap();
    r.extensions_mut().insert(Transport::Ipc);
    assert_eq!(send(&f.node, r).await.status, StatusCode::NOT_ACCEPTABLE);
    let huge = vec![b' '; crate::routes::MAX_BODY_BYTES + 1];
    let a = send(&f.node, ipc_post(huge, &[])).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn tools_call_needs_no_session_and_stale_header_recovers_but_deleted_is_404() {
    let f = fixture(json!({}));
    let a = rpc(&f.node, call("session", json!({"action":"list"})), &[]).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(
        a.body["result"].get("isError").is_none_or(|e| e == false),
        "{}",
        a.body
    );
    assert_eq!(tool_json(&a)["count"], 0);
    // A stale id (never seen: restart, reap) is recreated.
    let a = rpc(
        &f.node,
        call("plugin_dev_guide", json!({})),
        &[("mcp-session-id", "stale-1")],
    )
    .await;
    assert_eq!(a.body["result"]["isError"], false);
    assert!(tool_json(&a)["guide"].as_str().unwrap().contains("plugin"));
    assert_eq!(f.node.mcp.sessions.len(), 1);
    // DELETE ends it; afterwards the id answers 404, and a second DELETE too.
    let mut d = Request::delete("/mcp")
        .header("mcp-session-id", "stale-1")
        .body(Body::empty())
        .unwrap();
    d.extensions_mut().insert(Transport::Ipc);
    assert_eq!(send(&f.node, d).await.status, StatusCode::OK);
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
        &[("mcp-session-id", "stale-1")],
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let mut d = Request::delete("/mcp")
        .header("mcp-session-id", "stale-1")
        .body(Body::empty())
        .unwrap();
    d.extensions_mut().insert(Transport::Ipc);
    assert_eq!(send(&f.node, d).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn get_stream_requires_the_header_and_superseded_stream_keeps_replacement() {
    let f = fixture(json!({}));
    let mut r = Request::get("/mcp")
        .header("accept", "text/event-stream")
        .body(Body::empty())
        .unwrap();
    r.extensions_mut().insert(Transport::Ipc);
    assert_eq!(send(&f.node, r).await.status, StatusCode::UNAUTHORIZED);
    let open = || {
        let mut r = Request::get("/mcp")
            .header("accept", "text/event-stream")
            .header("mcp-session-id", "s1")
            .body(Body::empty())
            .unwrap();
        r.extensions_mut().insert(Transport::Ipc);
        crate::routes::router(f.node.clone()).oneshot(r)
    };
    let first = open().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let g1 = f.node.mcp.sessions.stream_generation("s1").unwrap();
    let second = open().await.unwrap();
    let g2 = f.node.mcp.sessions.stream_generation("s1").unwrap();
    assert!(g2 > g1);
    drop(first);
    assert_eq!(f.node.mcp.sessions.stream_generation("s1"), Some(g2));
    // A surface change reaches the live stream as list_changed.
    assert_eq!(f.node.mcp.notify_list_changed(), 1);
    let mut body = second.into_body();
    let frame = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let text = String::from_utf8_lossy(&frame);
    assert!(text.contains("notifications/tools/list_changed"), "{text}");
    drop(body);
    assert_eq!(f.node.mcp.sessions.stream_generation("s1"), None);
}

#[tokio::test]
async fn modern_era_is_stateless_with_cache_envelope_and_header_checks() {
    let f = fixture(json!({}));
    let meta = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientInfo":{"name":"ego","version":"0.1"},
        "io.modelcontextprotocol/clientCapabilities":{}});
    let h = |m: &'static str| vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", m)];
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":meta}}),
        &h("server/discover"),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    let r = &a.body["result"];
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["ttlMs"], 0);
    assert_eq!(r["cacheScope"], "private");
    assert_eq!(r["supportedVersions"][0], "2026-07-28");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "tuicommander"
    );
    assert!(
        r["instructions"]
            .as_str()
            .unwrap()
            .contains("Lazy discovery"),
        "ego gets the collapsed surface"
    );
    assert!(a.session.is_none());
    // tools/list for ego: collapsed, with the cache envelope.
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":meta}}),
        &h("tools/list"),
    )
    .await;
    let names: Vec<_> = a.body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        ["search_tools", "get_tool_schema", "call_tool", "progress"]
    );
    assert_eq!(a.body["result"]["cacheScope"], "private");
    // Missing _meta → -32602 / 400; header mismatch → -32020 / 400; removed method → 404.
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":3,"method":"server/discover","params":{}}),
        &h("server/discover"),
    )
    .await;
    assert_eq!(
        (
            a.status,
            a.body["error"]["code"].clone(),
            a.body["id"].clone()
        ),
        (StatusCode::BAD_REQUEST, json!(-32602), json!(3))
    );
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta":meta}}),
        &h("prompts/list"),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32020))
    );
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":5,"method":"ping","params":{"_meta":meta}}),
        &h("ping"),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error"]["code"].clone()),
        (StatusCode::NOT_FOUND, json!(-32601))
    );
    // tools/call needs a matching Mcp-Name and answers resultType.
    let mut hh = h("tools/call");
    hh.push(("mcp-name", " call_tool "));
    let a = rpc(&f.node, json!({"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"call_tool","arguments":{"name":"voice","arguments":{"action":"status"}},"_meta":meta}}), &hh).await;
    assert_eq!(a.body["result"]["resultType"], "complete");
    assert!(a.body["result"].get("ttlMs").is_none());
    assert_eq!(tool_json(&a)["code"], "not_bound");
    // Unsupported revision header: 400 with the supported list.
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":8,"method":"tools/list"}),
        &[("mcp-protocol-version", "v999")],
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.body["error"]["data"]["requested"], "v999");
}

#[tokio::test]
async fn disabled_endpoint_answers_a_clear_error_and_foreign_origin_is_403() {
    let f = fixture(json!({"mcp_server_enabled": false}));
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":1,"method":"ping"}),
        &[],
    )
    .await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(a.body["code"], "mcp_disabled");
    let f = fixture(json!({}));
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":1,"method":"ping"}),
        &[("origin", "http://evil.example")],
    )
    .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":1,"method":"ping"}),
        &[("origin", "http://localhost:3000")],
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
}

#[tokio::test]
async fn initialize_storm_is_reaped_when_ttl_is_short() {
    let f = fixture(json!({"tuning": {"mcp_session_ttl_ms": 0}}));
    for i in 0..200 {
        rpc(
            &f.node,
            json!({"jsonrpc":"2.0","id":i,"method":"initialize","params":{}}),
            &[],
        )
        .await;
    }
    assert_eq!(f.node.mcp.sessions.len(), 200);
    let reaped = f.node.mcp.reap(&f.node.config(), std::time::Instant::now());
    assert_eq!(reaped, 200);
    assert!(f.node.mcp.sessions.is_empty());
}

#[tokio::test]
async fn confirm_is_answered_through_the_response_route_or_times_out() {
    let f = fixture(json!({"tuning": {"mcp_confirm_timeout_ms": 20_000}}));
    let mut rx = f.node.bus.subscribe();
    let node = f.node.clone();
    let call_task = tokio::spawn(async move {
        rpc(
            &node,
            call("ui", json!({"action":"confirm","message":"deploy?"})),
            &[],
        )
        .await
    });
    let request_id = loop {
        let ev = rx.recv().await.unwrap();
        if ev.event.name() == "mcp-confirm" {
            break ev.event.payload()["request_id"]
                .as_str()
                .unwrap()
                .to_owned();
        }
    };
    let mut r = Request::post("/mcp/confirm-response")
        .header("content-type", "application/json")
        .body(Body::from(
            json!({"request_id": request_id, "confirmed": true}).to_string(),
        ))
        .unwrap();
    r.extensions_mut().insert(Transport::Ipc);
    assert_eq!(send(&f.node, r).await.status, StatusCode::OK);
    let a = call_task.await.unwrap();
    assert_eq!(tool_json(&a)["confirmed"], true);
    // A second answer finds nothing open.
    let mut r = Request::post("/mcp/confirm-response")
        .header("content-type", "application/json")
        .body(Body::from(
            json!({"request_id": request_id, "confirmed": true}).to_string(),
        ))
        .unwrap();
    r.extensions_mut().insert(Transport::Ipc);
    assert_eq!(send(&f.node, r).await.status, StatusCode::NOT_FOUND);

    let f = fixture(json!({"tuning": {"mcp_confirm_timeout_ms": 50}}));
    let a = rpc(
        &f.node,
        call("ui", json!({"action":"confirm","message":"deploy?"})),
        &[],
    )
    .await;
    let v = tool_json(&a);
    assert_eq!(v["confirmed"], false);
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .starts_with("no answer within")
    );
    assert!(f.node.mcp.confirms.lock().unwrap().is_empty());
}

#[tokio::test]
async fn request_meta_decides_the_surface_and_the_session_flag_is_the_fallback() {
    let f = fixture(json!({}));
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"grok-shell-1","version":"1"}}});
    let a = rpc(&f.node, init, &[]).await;
    assert!(
        a.body["result"]["instructions"]
            .as_str()
            .unwrap()
            .contains("Lazy discovery")
    );
    let sid = a.session.unwrap();
    let names = |a: &Answer| a.body["result"]["tools"].as_array().unwrap().len();
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
        &[("mcp-session-id", &sid)],
    )
    .await;
    assert_eq!(names(&a), 4, "session flag: collapsed");
    // The same session, a request naming another client in _meta: that name decides.
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"claude-code"}}}}),
        &[("mcp-session-id", &sid)],
    )
    .await;
    // 16 native tools and the three meta-tools.
    assert_eq!(names(&a), 19, "request _meta wins over the session");
}

fn boom(
    _: &Arc<Node>,
    _: &crate::mcp::registry::CallCtx,
    args: &serde_json::Map<String, Value>,
) -> Result<Value, crate::mcp::registry::ToolError> {
    if args.get("action").and_then(Value::as_str) == Some("fine") {
        return Ok(json!({"ok": true}));
    }
    panic!("handler bug")
}

static BOOM: crate::mcp::registry::ToolDef = crate::mcp::registry::ToolDef {
    name: "boom",
    summary: "test tool",
    description: "panics unless action=fine",
    actions: &["inline", "blocking", "fine"],
    schema: || json!({"type": "object"}),
    handler: boom,
    exec: &[("blocking", crate::mcp::registry::Exec::Blocking)],
    passthrough: false,
};

#[tokio::test]
async fn run_time_tools_come_and_go_with_list_changed_and_panics_become_tool_errors() {
    let f = fixture(json!({}));
    let (_gen, mut rx) =
        f.node
            .mcp
            .sessions
            .subscribe("watcher", std::time::Instant::now(), "2025-11-25");
    let def = Arc::new(clone_boom());
    assert!(f.node.mcp.add_tool(def.clone()));
    assert!(!f.node.mcp.add_tool(def), "a name is registered once");
    let note = rx.recv().await.unwrap();
    assert_eq!(note["method"], "notifications/tools/list_changed");
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}),
        &[],
    )
    .await;
    assert!(a.body.to_string().contains("\"boom\""));
    for action in ["inline", "blocking"] {
        let a = rpc(&f.node, call("boom", json!({"action": action})), &[]).await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.body["result"]["isError"], true, "{action}");
        assert_eq!(tool_json(&a)["code"], "internal", "{action}");
    }
    let a = rpc(&f.node, call("boom", json!({"action": "fine"})), &[]).await;
    assert_eq!(tool_json(&a)["ok"], true);
    assert!(f.node.mcp.remove_tool("boom"));
    assert_eq!(
        rx.recv().await.unwrap()["method"],
        "notifications/tools/list_changed"
    );
    let a = rpc(&f.node, call("boom", json!({"action": "fine"})), &[]).await;
    assert_eq!(
        a.body["error"]["code"], -32602,
        "gone tools are unknown at dispatch"
    );
}

fn clone_boom() -> crate::mcp::registry::ToolDef {
    BOOM.clone()
}

#[tokio::test]
async fn conformance_fixtures_are_off_by_default_and_pass_call_tool_results_through() {
    let f = fixture(json!({}));
    let a = rpc(&f.node, call("test_simple_text", json!({})), &[]).await;
    assert_eq!(
        a.body["error"]["code"], -32602,
        "fixtures are off by default"
    );
    let f = fixture(json!({"mcp_conformance_fixtures": true}));
    let a = rpc(&f.node, call("test_image_content", json!({})), &[]).await;
    assert_eq!(a.body["result"]["content"][0]["type"], "image");
    let a = rpc(&f.node, call("test_error_handling", json!({})), &[]).await;
    assert_eq!(a.body["result"]["isError"], true);
    // The collapsed call_tool path passes the same result through.
    let a = rpc(
        &f.node,
        call("call_tool", json!({"name": "test_multiple_content_types"})),
        &[],
    )
    .await;
    assert_eq!(a.body["result"]["content"].as_array().unwrap().len(), 3);
    // Fixtures are not part of the native catalogue.
    let mut r = Request::get("/mcp/status").body(Body::empty()).unwrap();
    r.extensions_mut().insert(Transport::Ipc);
    assert_eq!(
        send(&f.node, r).await.body["native_tools"]
            .as_array()
            .unwrap()
            .len(),
        18
    );
}

#[tokio::test]
async fn subscriptions_listen_acknowledges_first_then_tags_list_changed() {
    let f = fixture(json!({}));
    let meta = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{}});
    let listen = |filter: Value| {
        let mut r = ipc_post(
            json!({"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"_meta":meta,"notifications":filter}}).to_string(),
            &[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "subscriptions/listen")],
        );
        r.extensions_mut().insert(Transport::Ipc);
        crate::routes::router(f.node.clone()).oneshot(r)
    };
    let wanted = listen(json!({"toolsListChanged": true})).await.unwrap();
    let other = listen(json!({"promptsListChanged": true})).await.unwrap();
    assert_eq!(wanted.status(), StatusCode::OK);
    let mut body = wanted.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let first = String::from_utf8_lossy(&first).into_owned();
    assert!(
        first.contains("notifications/subscriptions/acknowledged"),
        "{first}"
    );
    f.node.mcp.notify_list_changed();
    let next = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let next = String::from_utf8_lossy(&next).into_owned();
    assert!(next.contains("notifications/tools/list_changed"), "{next}");
    assert!(
        next.contains("io.modelcontextprotocol/subscriptionId"),
        "{next}"
    );
    // A stream that asked only for prompt changes gets its ack and nothing for tools.
    let mut other = other.into_body();
    let ack = other.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(String::from_utf8_lossy(&ack).contains("acknowledged"));
    f.node.mcp.notify_list_changed();
    let pending = tokio::time::timeout(std::time::Duration::from_millis(200), other.frame()).await;
    assert!(
        pending.is_err(),
        "no tools notification on a prompts-only subscription"
    );
}

/// `POST /sessions/{id}/input|submit` and `session action=input|submit` adapt one drive
/// service: each refusal has the same code and the same JSON object on both, REST adding
/// its status.
#[tokio::test]
async fn rest_and_mcp_refuse_input_and_submit_with_the_same_error_objects() {
    let f = fixture(json!({}));
    let s = f
        .node
        .sessions
        .create(crate::session::CreateRequest {
            shell: Some("/bin/sh".into()),
            cwd: Some(f._dir.path().display().to_string()),
            ..Default::default()
        })
        .unwrap();
    let rest = |action: &str, id: &str, body: Value| {
        let mut r = Request::post(format!("/sessions/{id}/{action}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        r.extensions_mut().insert(Transport::Ipc);
        r
    };
    // Half-typed: `input` without Enter leaves the composer dirty, so `submit` is busy.
    let a = send(&f.node, rest("input", &s.id, json!({"input": "abc"}))).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body, json!({"ok": true, "session_id": s.id}));
    let cases = [
        (
            "submit",
            "nosuch",
            json!({"input": "ls"}),
            StatusCode::NOT_FOUND,
            "unknown_session",
        ),
        (
            "input",
            s.id.as_str(),
            json!({}),
            StatusCode::BAD_REQUEST,
            "invalid_arguments",
        ),
        (
            "input",
            s.id.as_str(),
            json!({"special_key": "f13"}),
            StatusCode::BAD_REQUEST,
            "invalid_arguments",
        ),
        (
            "submit",
            s.id.as_str(),
            json!({"input": ""}),
            StatusCode::BAD_REQUEST,
            "invalid_arguments",
        ),
        (
            "submit",
            s.id.as_str(),
            json!({"input": "ls"}),
            StatusCode::CONFLICT,
            "busy",
        ),
    ];
    for (action, id, body, status, code) in cases {
        let r = send(&f.node, rest(action, id, body.clone())).await;
        assert_eq!(r.status, status, "{action} {body}: {}", r.body);
        assert_eq!(r.body["code"], code, "{action} {body}: {}", r.body);
        let mut args = body.as_object().unwrap().clone();
        args.insert("action".into(), json!(action));
        args.insert("session_id".into(), json!(id));
        let m = rpc(&f.node, call("session", Value::Object(args)), &[]).await;
        assert_eq!(m.body["result"]["isError"], true, "{}", m.body);
        assert_eq!(tool_json(&m), r.body, "{action} {body}");
    }
    // An exited session: 409 `session_exited` with its id on both.
    s.kill();
    let mut life = s.lifecycle();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while s.exit().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the killed shell never exited"
        );
        let _ = tokio::time::timeout_at(deadline, life.changed()).await;
    }
    for action in ["input", "submit"] {
        let r = send(&f.node, rest(action, &s.id, json!({"input": "ls"}))).await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
        assert_eq!(r.body["code"], "session_exited");
        assert_eq!(r.body["session_id"], s.id.as_str());
        let m = rpc(
            &f.node,
            call(
                "session",
                json!({"action": action, "session_id": s.id, "input": "ls"}),
            ),
            &[],
        )
        .await;
        assert_eq!(tool_json(&m), r.body, "{action}");
    }
}
