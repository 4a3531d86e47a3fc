//! Issue 17 item 7 end to end: an upstream MCP server (the official Python SDK's `MCPServer`
//! over stdio) configured on the hub only is offered to agents on a node — hub and node in
//! their own network namespaces — as `hub.{name}__{tool}`: an official Python SDK client on the
//! node lists and calls it, and the result equals calling the upstream on the hub; the hub's
//! deny filter hides a tool at listing and refuses it at dispatch; a `PUT /mcp/upstreams` on the
//! hub reaches the node's list with `notifications/tools/list_changed`; killing the hub makes a
//! call answer a clear error at once, the hub's return makes calls work again, and a
//! `disconnect` withdraws the tools after the grace period, again with `list_changed`.
//!
//! Progress: a call with a `progressToken` gets the hub's upstream's `notifications/progress`
//! on the agent's `GET /mcp` stream on the node, under the agent's own token, in order, and
//! none after the call answered; a progress flood is bounded (coalesced on the hub, counted)
//! and other calls over the same link go on meanwhile; the deadline holds (progress does not
//! extend it) and the hub cancels the call upstream at it.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use serde_json::{Value, json};
use tuic_tests::fed::FedBed;
use tuic_tests::{NodeProc, ipc, ipc_request};

/// How long the node keeps the hub's tools after the link drops (tuning key, shortened).
const GRACE_MS: u64 = 6_000;

async fn mcp(socket: &Path, body: Value, sid: Option<&str>) -> tuic_tests::Reply {
    let mut b = Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = sid {
        b = b.header("mcp-session-id", s);
    }
    ipc_request(
        socket,
        b.body(Full::new(Bytes::from(body.to_string()))).unwrap(),
    )
    .await
    .unwrap()
}

async fn call(socket: &Path, name: &str, args: Value) -> Value {
    let r = mcp(
        socket,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": args}}),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()["result"].clone()
}

async fn tool_names(socket: &Path) -> Vec<String> {
    let r = mcp(
        socket,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        None,
    )
    .await
    .json();
    r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits (bounded) until the node's `tools/list` satisfies `pred`.
async fn wait_tools(socket: &Path, what: &str, pred: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let names = tool_names(socket).await;
        if pred(&names) {
            return names;
        }
        assert!(Instant::now() < deadline, "{what}: {names:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A protocol session's `GET /mcp` stream on the node, read for `list_changed` and progress.
struct Listener {
    body: hyper::body::Incoming,
    seen: String,
    /// The protocol session whose stream this is.
    sid: String,
}

impl Listener {
    async fn open(socket: &Path) -> Self {
        let init = mcp(
            socket,
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "hub-upstream-test", "version": "1"}}}),
            None,
        )
        .await;
        let sid = init.headers["mcp-session-id"].to_str().unwrap().to_owned();
        let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let req = Request::get("/mcp")
            .header("host", "localhost")
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &sid)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        Self {
            body: resp.into_body(),
            seen: String::new(),
            sid,
        }
    }

    /// The next JSON-RPC message on the stream (bounded).
    async fn next_message(&mut self, limit: Duration) -> Value {
        tokio::time::timeout(limit, async {
            loop {
                while let Some(i) = self.seen.find('\n') {
                    let line: String = self.seen.drain(..=i).collect();
                    if let Some(data) = line.trim_end().strip_prefix("data:")
                        && let Ok(v) = serde_json::from_str::<Value>(data.trim())
                    {
                        return v;
                    }
                }
                let f = self.body.frame().await.expect("stream open").unwrap();
                if let Ok(d) = f.into_data() {
                    self.seen.push_str(&String::from_utf8_lossy(&d));
                }
            }
        })
        .await
        .expect("a message on the stream in time")
    }

    /// Progress notifications read until `done` says the list is complete; every other message
    /// is skipped. Returns `(token, progress)` pairs in stream order.
    async fn progress_until(
        &mut self,
        limit: Duration,
        done: impl Fn(&[(Value, u64)]) -> bool,
    ) -> Vec<(Value, u64)> {
        let deadline = Instant::now() + limit;
        let mut out = Vec::new();
        while !done(&out) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "progress in time; so far {out:?}");
            let m = self.next_message(left).await;
            if m["method"] == "notifications/progress" {
                let p = &m["params"];
                out.push((p["progressToken"].clone(), p["progress"].as_u64().unwrap()));
            }
        }
        out
    }

    /// Waits for the next `notifications/tools/list_changed` (bounded).
    async fn list_changed(&mut self, limit: Duration) {
        const N: &str = "notifications/tools/list_changed";
        tokio::time::timeout(limit, async {
            loop {
                if let Some(i) = self.seen.find(N) {
                    self.seen.drain(..i + N.len());
                    return;
                }
                let f = self.body.frame().await.expect("stream open").unwrap();
                if let Ok(d) = f.into_data() {
                    self.seen.push_str(&String::from_utf8_lossy(&d));
                }
            }
        })
        .await
        .expect("list_changed in time");
    }
}

/// A `tools/call` in the listener's protocol session, with a progress token, from a client
/// that accepts JSON only: the answer is JSON and the progress goes to the session's `GET /mcp`
/// stream (an event-stream client gets it on the POST's own stream, see
/// `mcp_progress_stream.rs`).
async fn call_with_progress(
    socket: &Path,
    sid: &str,
    name: &str,
    args: Value,
    token: &str,
) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": name, "arguments": args, "_meta": {"progressToken": token}}});
    let req = Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("mcp-session-id", sid)
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let r = ipc_request(socket, req).await.unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()["result"].clone()
}

fn upstreams(python: &str, deny: &[&str]) -> Value {
    let script = tuic_tests::clients_dir().join("upstream_server.py");
    json!({"servers": [{"id": "py-1", "name": "py",
        "transport": {"type": "stdio", "command": python,
            "args": [script.display().to_string(), "stdio"]},
        "tool_filter": {"deny": deny}}]})
}

fn text(r: &Value) -> String {
    r["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn start_hub(bed: &FedBed) -> NodeProc {
    NodeProc::start_in(
        Some(bed.net.hub()),
        "tuic-hub",
        &["--config-dir", bed.hub_dir.path().to_str().unwrap()],
        &[],
    )
    .unwrap()
}

#[tokio::test]
async fn upstreams_on_the_hub_are_offered_to_agents_on_a_node() {
    let python = tuic_tests::sdk_clients().python;
    // The WebSocket link: the check below that the node hears a killed hub at once relies on
    // TCP's reset. Over QUIC a killed hub sends nothing and the node notices at the liveness
    // deadline (15 s); see docs/mail-protocol.md.
    let mut bed = FedBed::start_with_hub(
        1,
        json!({"tuning": {"hub_tools_grace_ms": GRACE_MS, "hub_tool_call_timeout_ms": 20_000}}),
        json!({"hub": {"transport": "websocket"}}),
        None,
    )
    .await
    .unwrap();
    let node = bed.nodes[0].proc().socket.clone();
    let mut listen = Listener::open(&node).await;

    // The upstream is configured on the hub only (a hand-written file, picked up live).
    std::fs::write(
        bed.hub_dir.path().join("mcp-upstreams.json"),
        serde_json::to_vec_pretty(&upstreams(&python, &["get_secret", "crash", "hang"])).unwrap(),
    )
    .unwrap();
    let names = wait_tools(&node, "the hub's tools reach the node", |n| {
        n.iter().any(|t| t == "hub.py__echo")
    })
    .await;
    listen.list_changed(Duration::from_secs(5)).await;
    for want in ["hub.py__echo", "hub.py__add", "hub.py__progress_steps"] {
        assert!(names.iter().any(|n| n == want), "{want}: {names:?}");
    }
    assert!(
        !names.iter().any(|n| n.contains("get_secret")),
        "the hub's deny filter hides it on the node: {names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("py__")),
        "the node has no upstream of its own: {names:?}"
    );

    // The result over the link equals the upstream's on the hub, field for field.
    let direct = call(&bed.hub.socket, "py__add", json!({"a": 2, "b": 40})).await;
    let routed = call(&node, "hub.py__add", json!({"a": 2, "b": 40})).await;
    assert_eq!(routed, direct, "passed through unchanged");
    assert_eq!(routed["structuredContent"], json!({"sum": 42}));

    // Denied on the hub: refused at dispatch too, directly and through call_tool.
    for r in [
        call(&node, "hub.py__get_secret", json!({})).await,
        call(
            &node,
            "call_tool",
            json!({"name": "hub.py__get_secret", "arguments": {}}),
        )
        .await,
    ] {
        assert_eq!(r["isError"], true, "{r}");
        assert!(text(&r).contains("tool_filtered"), "{r}");
        assert!(!text(&r).contains("the secret"), "{r}");
    }
    // The collapsed surface finds and describes them.
    let s = call(
        &node,
        "search_tools",
        json!({"query": "add two numbers sum"}),
    )
    .await;
    assert!(text(&s).contains("hub.py__add"), "{s}");
    let sch = call(&node, "get_tool_schema", json!({"name": "hub.py__add"})).await;
    assert!(text(&sch).contains("\"b\""), "{sch}");

    // An agent on the official Python SDK, connected to the node, lists and calls them.
    let url = tuic_tests::progress::tcp_forward(&node).await;
    let out = tokio::process::Command::new(&python)
        .arg(tuic_tests::clients_dir().join("upstream_agent.py"))
        .arg(&url)
        .arg(
            json!([
                ["hub.py__echo", {"text": "over the link"}],
                ["hub.py__add", {"a": 20, "b": 22}],
                ["call_tool", {"name": "hub.py__echo", "arguments": {"text": "collapsed"}}],
                ["hub.py__get_secret", {}],
                ["hub.py__progress_steps", {"steps": 3}],
            ])
            .to_string(),
        )
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "agent: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    let tools = report["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("hub.py__echo")), "{report}");
    assert!(!tools.contains(&json!("hub.py__get_secret")), "{report}");
    let c = &report["calls"];
    assert_eq!(c[0]["text"], "echo: over the link", "{report}");
    assert_eq!(c[1]["structured"], json!({"sum": 42}), "{report}");
    assert_eq!(c[2]["text"], "echo: collapsed", "{report}");
    assert_eq!(c[3]["is_error"], true, "{report}");
    // The SDK client's progress callback saw the hub's upstream's progress (the same check as
    // for a local upstream in `upstream.rs`).
    assert_eq!(c[4]["text"], "done 3", "{report}");
    let steps: Vec<f64> = c[4]["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_f64().unwrap())
        .collect();
    assert_eq!(
        steps,
        vec![1.0, 2.0, 3.0],
        "progress relayed in order: {report}"
    );

    // The hub's config change (PUT /mcp/upstreams on the hub) reaches the node's list.
    let cur = ipc(&bed.hub.socket, "GET", "/mcp/upstreams", None)
        .await
        .unwrap()
        .json();
    let base = cur.get("config").cloned().unwrap_or(cur.clone());
    let mut next = base.clone();
    next["servers"][0]["tool_filter"] = json!({"deny": ["get_secret", "crash", "hang", "echo"]});
    let r = ipc(
        &bed.hub.socket,
        "PUT",
        "/mcp/upstreams",
        Some(json!({"base": base, "config": next})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let t0 = Instant::now();
    listen.list_changed(Duration::from_secs(20)).await;
    eprintln!(
        "hub config change → node list_changed in {:?}",
        t0.elapsed()
    );
    // The hub restarts the changed upstream (its tools leave, then return without echo).
    wait_tools(&node, "echo leaves the node's list, add stays", |n| {
        !n.iter().any(|t| t == "hub.py__echo") && n.iter().any(|t| t == "hub.py__add")
    })
    .await;
    let r = call(&node, "hub.py__echo", json!({"text": "x"})).await;
    assert!(text(&r).contains("tool_filtered"), "{r}");

    // The hub dies: a call answers a clear error naming the hub at once, not a hang.
    let _ = bed.hub.child.kill();
    let _ = bed.hub.child.wait();
    let t0 = Instant::now();
    let r = loop {
        let r = call(&node, "hub.py__add", json!({"a": 1, "b": 1})).await;
        // The node hears the reset at once; until then the call may still race the kill.
        if text(&r).contains("hub_unavailable") || t0.elapsed() > Duration::from_secs(20) {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(r["isError"], true, "{r}");
    assert!(text(&r).contains("hub_unavailable"), "{r}");
    assert!(text(&r).contains("runs on hub"), "names the hub: {r}");
    let t_call = Instant::now();
    let r = call(&node, "hub.py__add", json!({"a": 1, "b": 1})).await;
    assert!(text(&r).contains("hub_unavailable"), "{r}");
    assert!(
        t_call.elapsed() < Duration::from_secs(1),
        "answered at once, not at the deadline: {:?}",
        t_call.elapsed()
    );
    // The list stays stable across the drop (the grace period).
    assert!(
        tool_names(&node).await.iter().any(|n| n == "hub.py__add"),
        "stable across a brief drop"
    );

    // The hub comes back: calls work again.
    bed.hub = start_hub(&bed);
    bed.wait_up("nodeb", true, Duration::from_secs(30))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = call(&node, "hub.py__add", json!({"a": 3, "b": 4})).await;
        if r["structuredContent"] == json!({"sum": 7}) {
            break;
        }
        assert!(Instant::now() < deadline, "calls work again: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Disconnected for good: the tools go after the grace period, with list_changed.
    let (code, _, err) = tuic_tests::run_with_stdin(
        "tuic-hub",
        &[
            "disconnect",
            "--config-dir",
            bed.hub_dir.path().to_str().unwrap(),
            "--id",
            "nodeb",
        ],
        "",
    )
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let t0 = Instant::now();
    let names = wait_tools(&node, "the hub's tools are withdrawn", |n| {
        !n.iter().any(|t| t.starts_with("hub."))
    })
    .await;
    let gone = t0.elapsed();
    assert!(
        gone >= Duration::from_millis(GRACE_MS - 1_000),
        "not before the grace period: {gone:?}"
    );
    listen.list_changed(Duration::from_secs(5)).await;
    assert!(names.iter().any(|n| n == "session"), "{names:?}");
    let st = ipc(&node, "GET", "/mcp/status", None).await.unwrap().json();
    assert_eq!(st["hub_upstream_tools"]["link_up"], false, "{st}");
    assert_eq!(st["hub_upstream_tools"]["tools"], 0, "{st}");
}

/// The node's progress relay counters (`GET /mcp/status` → `hub_upstream_tools.progress`).
async fn progress_counters(socket: &Path) -> (u64, u64, u64) {
    let st = ipc(socket, "GET", "/mcp/status", None)
        .await
        .unwrap()
        .json();
    let p = &st["hub_upstream_tools"]["progress"];
    let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} in {st}"));
    (n("relayed"), n("coalesced_by_hub"), n("dropped"))
}

#[tokio::test]
async fn progress_of_hub_routed_calls_reaches_the_agent_in_order_and_stops_with_the_answer() {
    let python = tuic_tests::sdk_clients().python;
    let bed = FedBed::start_with(1, json!({"tuning": {"hub_tool_call_timeout_ms": 60_000}}))
        .await
        .unwrap();
    let node = bed.nodes[0].proc().socket.clone();
    let raw = tuic_tests::clients_dir().join("upstream_raw.py");
    let server = |name: &str| {
        json!({"id": name, "name": name, "transport": {"type": "stdio", "command": python,
            "args": [raw.display().to_string(), "ok"]}})
    };
    // Two real upstreams on the hub: `raw` for ordinary calls, `flood` for the flood.
    std::fs::write(
        bed.hub_dir.path().join("mcp-upstreams.json"),
        serde_json::to_vec_pretty(&json!({"servers": [server("raw"), server("flood")]})).unwrap(),
    )
    .unwrap();
    wait_tools(&node, "the hub's tools reach the node", |n| {
        ["hub.raw__progress_burst", "hub.flood__progress_burst"]
            .iter()
            .all(|w| n.iter().any(|t| t == w))
    })
    .await;
    let mut agent = Listener::open(&node).await;
    let sid = agent.sid.clone();

    // N notifications, then the answer, then 5 more that must never reach the agent. N is below
    // the hub's per-call queue (64) and the agent's stream buffer (64), so none may be lost.
    const N: u64 = 40;
    let r = call_with_progress(
        &node,
        &sid,
        "hub.raw__progress_burst",
        json!({"n": N, "after": 5}),
        "agent-tok-1",
    )
    .await;
    assert_eq!(text(&r), format!("burst {N}"), "{r}");
    let seen = agent
        .progress_until(Duration::from_secs(20), |p| p.len() as u64 >= N)
        .await;
    let want: Vec<(Value, u64)> = (1..=N).map(|i| (json!("agent-tok-1"), i)).collect();
    assert_eq!(seen, want, "all N, the agent's own token, in order");

    // The upstream wrote its 5 late notifications before it could see this second call, so on
    // the one ordered stream they would come before this call's progress: none does.
    let r = call_with_progress(
        &node,
        &sid,
        "hub.raw__progress_burst",
        json!({"n": 1}),
        "agent-tok-2",
    )
    .await;
    assert_eq!(text(&r), "burst 1", "{r}");
    let seen = agent
        .progress_until(Duration::from_secs(20), |p| {
            p.iter().any(|(t, _)| t == "agent-tok-2")
        })
        .await;
    assert_eq!(
        seen,
        vec![(json!("agent-tok-2"), 1)],
        "no progress after the answer"
    );
    // A call without a token gets no progress (and nothing is sent over the link for it).
    let before = progress_counters(&node).await;
    let r = call(&node, "hub.raw__progress_burst", json!({"n": 3})).await;
    assert_eq!(text(&r), "burst 3", "{r}");
    assert_eq!(progress_counters(&node).await, before);

    // A flood: 20,000 notifications as fast as the upstream writes them. Calls to another
    // upstream over the same link answer meanwhile.
    const FLOOD: u64 = 20_000;
    let (r0, c0, d0) = progress_counters(&node).await;
    let flood = call_with_progress(
        &node,
        &sid,
        "hub.flood__progress_burst",
        json!({"n": FLOOD}),
        "agent-tok-3",
    );
    let others = async {
        let mut slowest = Duration::ZERO;
        for i in 0..20 {
            let t0 = Instant::now();
            let r = call(&node, "hub.raw__ping_me", json!({})).await;
            assert_eq!(text(&r), "pong", "call {i} during the flood: {r}");
            slowest = slowest.max(t0.elapsed());
        }
        slowest
    };
    let (f, slowest) = tokio::join!(flood, others);
    assert_eq!(text(&f), format!("burst {FLOOD}"), "{f}");
    eprintln!("slowest other call during the progress flood: {slowest:?}");
    assert!(
        slowest < Duration::from_secs(10),
        "other calls are not held up by the flood: {slowest:?}"
    );
    // Every notification is accounted for: relayed to the agent, coalesced on the hub, or
    // dropped at the agent's full stream — all counted.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (relayed, coalesced, dropped) = loop {
        let (r, c, d) = progress_counters(&node).await;
        let (r, c, d) = (r - r0, c - c0, d - d0);
        if r + c + d >= FLOOD {
            break (r, c, d);
        }
        assert!(
            Instant::now() < deadline,
            "flood accounted for: relayed {r}, coalesced {c}, dropped {d}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "progress flood of {FLOOD}: relayed {relayed}, coalesced on the hub {coalesced}, dropped on the node {dropped}"
    );
    assert_eq!(relayed + coalesced + dropped, FLOOD);
    let seen = agent
        .progress_until(Duration::from_secs(30), |p| p.len() as u64 >= relayed)
        .await;
    assert!(
        seen.iter().all(|(t, _)| t == "agent-tok-3"),
        "the agent's token"
    );
    assert!(
        seen.windows(2).all(|w| w[0].1 < w[1].1),
        "in order, never backwards"
    );
    assert!(seen.iter().all(|(_, p)| (1..=FLOOD).contains(p)));
    // The relay still works after the flood.
    let r = call_with_progress(
        &node,
        &sid,
        "hub.raw__progress_burst",
        json!({"n": 2}),
        "agent-tok-4",
    )
    .await;
    assert_eq!(text(&r), "burst 2", "{r}");
    let seen = agent
        .progress_until(Duration::from_secs(20), |p| {
            p.iter().filter(|(t, _)| t == "agent-tok-4").count() == 2
        })
        .await;
    assert_eq!(
        seen,
        vec![(json!("agent-tok-4"), 1), (json!("agent-tok-4"), 2)]
    );

    // The deadline holds with progress flowing: a call that reports and never answers ends at
    // the node's deadline (progress does not extend it), and the hub cancels it upstream at
    // that deadline, as a local call is cancelled at its own.
    let cfg = ipc(&node, "GET", "/config", None).await.unwrap().json();
    let mut short = cfg.clone();
    short["tuning"]["hub_tool_call_timeout_ms"] = json!(DEADLINE_MS);
    let r = ipc(
        &node,
        "PUT",
        "/config",
        Some(json!({"base": cfg, "config": short})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    const DEADLINE_MS: u64 = 3_000;
    let t0 = Instant::now();
    let r = call_with_progress(
        &node,
        &sid,
        "hub.raw__progress_burst",
        json!({"n": 3, "hang": true}),
        "agent-tok-5",
    )
    .await;
    let took = t0.elapsed();
    assert_eq!(r["isError"], true, "{r}");
    assert!(text(&r).contains("timeout"), "{r}");
    assert!(
        took >= Duration::from_millis(DEADLINE_MS - 100),
        "not before the deadline: {took:?}"
    );
    let seen = agent
        .progress_until(Duration::from_secs(20), |p| p.len() == 3)
        .await;
    assert!(seen.iter().all(|(t, _)| t == "agent-tok-5"), "{seen:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = call(&node, "hub.raw__cancelled", json!({})).await;
        let ids: Vec<Value> = serde_json::from_str(&text(&r)).unwrap_or_default();
        if !ids.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the hub cancels the call upstream at the deadline: {r}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
