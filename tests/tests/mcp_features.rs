//! End-to-end: the MCP server beyond tools — resources with subscriptions, prompts,
//! `logging/setLevel` and `completion/complete` — through the official SDK clients (Python
//! `mcp`, TypeScript `@modelcontextprotocol/sdk`) against a real node and real PTYs, and the
//! bad inputs over raw JSON-RPC: another identity's inbox, a subscription flood, a 1 MB
//! completion argument, an unknown log level.

mod mcp_support;

use mcp_support::NodeProc;
use serde_json::{Value, json};

async fn run(cmd: &mut tokio::process::Command) -> Value {
    let out = tokio::time::timeout(std::time::Duration::from_secs(240), cmd.output())
        .await
        .expect("client finished within 240 s")
        .expect("client ran");
    assert!(
        out.status.success(),
        "client failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .expect("a JSON report line");
    serde_json::from_str(line).unwrap()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn python_sdk_subscribes_reads_logs_prompts_and_completes() {
    let tuic_tests::SdkClients { python, .. } = tuic_tests::sdk_clients();
    let node = NodeProc::start(json!({})).await;
    let url = node.tcp_forward().await;
    let cwd = tempfile::tempdir().unwrap();
    let r = run(tokio::process::Command::new(&python)
        .arg(tuic_tests::clients_dir().join("mcp_python_resources.py"))
        .arg(&url)
        .arg(cwd.path())
        .arg("30"))
    .await;
    let caps = &r["capabilities"];
    assert_eq!(caps["resources"]["subscribe"], true, "{r}");
    for c in ["prompts", "logging", "completions", "tools"] {
        assert!(caps[c].is_object(), "{c} not declared: {r}");
    }
    let alias = r["alias"].as_str().unwrap();
    assert_eq!(caps["resources"]["list_changed"], true, "{r}");
    assert_eq!(r["list_changed"], true, "a new session is announced: {r}");
    let uris = strs(&r["uris"]);
    assert!(
        uris.contains(&format!("tuic://sessions/{alias}/screen")),
        "{r}"
    );
    assert!(
        uris.contains(&format!("tuic://sessions/{alias}/output")),
        "{r}"
    );
    assert!(uris.contains(&"tuic://repos".to_owned()), "{r}");
    assert_eq!(
        strs(&r["templates"]),
        [
            "tuic://sessions/{alias}/screen",
            "tuic://sessions/{alias}/output",
            "tuic://repos/{name}",
            "tuic://repos/{name}/progress"
        ]
    );
    // Every round saw its update and then the marker on the screen; p50 within 100 ms.
    assert_eq!(r["latencies_ms"].as_array().unwrap().len(), 30, "{r}");
    assert_eq!(r["screens_shown"], true, "{r}");
    let p50 = r["p50_ms"].as_f64().unwrap();
    assert!(p50 <= 100.0, "updated p50 {p50} ms: {r}");
    eprintln!("resources/updated after output: p50 {p50:.1} ms over 30 rounds");
    assert!(
        strs(&r["output_keys"]).contains(&"cursor".to_owned()),
        "{r}"
    );
    // One message per tool call at `info`; the failed one at `error` with its code.
    let logs = r["logs"].as_array().unwrap();
    assert!(
        logs.iter().any(|l| l["level"] == "info"
            && l["data"]["tool"] == "session"
            && l["data"]["action"] == "list"),
        "{r}"
    );
    assert!(
        logs.iter()
            .any(|l| l["level"] == "error" && l["data"]["error"] == "unknown_session"),
        "{r}"
    );
    assert_eq!(
        strs(&r["prompts"]),
        ["spawn_reviewer", "hand_off_task", "summarise_agents"]
    );
    let text = r["prompt_text"].as_str().unwrap();
    assert!(
        text.contains("codex") && text.contains(cwd.path().to_str().unwrap()),
        "{text}"
    );
    assert_eq!(strs(&r["complete_agent"]), ["codex"], "{r}");
    assert!(
        strs(&r["complete_alias"]).contains(&alias.to_owned()),
        "{r}"
    );
}

#[tokio::test]
async fn typescript_sdk_subscribes_and_reads_a_screen() {
    let tuic_tests::SdkClients { ts_dir, .. } = tuic_tests::sdk_clients();
    let node = NodeProc::start(json!({})).await;
    let url = node.tcp_forward().await;
    let cwd = tempfile::tempdir().unwrap();
    // The ESM import resolves from the script's folder, so the script sits beside node_modules.
    let script = ts_dir.join("tuic_ts_resources.mjs");
    std::fs::copy(
        tuic_tests::clients_dir().join("mcp_ts_resources.mjs"),
        &script,
    )
    .unwrap();
    let r = run(tokio::process::Command::new("node")
        .arg(&script)
        .arg(&url)
        .arg(cwd.path())
        .arg("20"))
    .await;
    assert_eq!(r["latencies_ms"].as_array().unwrap().len(), 20, "{r}");
    assert_eq!(r["screens_shown"], true, "{r}");
    let p50 = r["p50_ms"].as_f64().unwrap();
    assert!(p50 <= 100.0, "updated p50 {p50} ms: {r}");
    eprintln!("TS SDK: resources/updated after output: p50 {p50:.1} ms over 20 rounds");
    assert!(strs(&r["prompts"]).contains(&"hand_off_task".to_owned()));
    assert!(
        strs(&r["complete_agent"]).contains(&"claude".to_owned()),
        "{r}"
    );
}

/// A legacy protocol session over IPC: its id.
async fn initialize(node: &NodeProc, tuic: Option<&str>) -> String {
    let mut h = vec![];
    if let Some(t) = tuic {
        h.push(("x-tuic-session", t));
    }
    let r = node
        .connect()
        .await
        .rpc(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}),
            &h,
        )
        .await;
    r.headers
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn bad_input_is_refused_with_clear_errors() {
    let node = NodeProc::start(json!({})).await;
    let me = "4b1c5b2e-7d3a-4c1e-9f00-0000000000a1".to_owned();
    let other = "4b1c5b2e-7d3a-4c1e-9f00-0000000000b2".to_owned();
    let sid = initialize(&node, Some(&me)).await;
    let mut conn = node.connect().await;
    let h = [
        ("mcp-session-id", sid.as_str()),
        ("x-tuic-session", me.as_str()),
    ];
    macro_rules! rpc {
        ($method:expr, $params:expr $(,)?) => {
            conn.rpc(
                &json!({"jsonrpc": "2.0", "id": 7, "method": $method, "params": $params}),
                &h,
            )
            .await
            .json()
        };
    }
    // Unknown log level → -32602.
    let r = rpc!("logging/setLevel", json!({"level": "verbose"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("verbose"),
        "{r}"
    );
    let r = rpc!("logging/setLevel", json!({"level": "warning"}));
    assert_eq!(r["result"], json!({}), "{r}");
    // A 1 MB completion argument → a bounded error.
    let big = "a".repeat(1 << 20);
    let r = rpc!(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "hand_off_task"},
            "argument": {"name": "agent", "value": big}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r:.200}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("over 1024 bytes")
    );
    // The caller's own inbox reads; another identity's is refused.
    let r = rpc!("resources/read", json!({"uri": "tuic://inbox"}));
    let inbox: Value =
        serde_json::from_str(r["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(inbox["recipient"], me.as_str(), "{r}");
    let r = rpc!(
        "resources/read",
        json!({"uri": format!("tuic://inbox/{other}")}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("refused"),
        "{r}"
    );
    // Unknown resources → -32002.
    let r = rpc!(
        "resources/read",
        json!({"uri": "tuic://sessions/nope/screen"})
    );
    assert_eq!(r["error"]["code"], -32002, "{r}");
    let r = rpc!(
        "resources/read",
        json!({"uri": "tuic://repos/nope/progress?limit=3"})
    );
    assert_eq!(r["error"]["code"], -32002, "{r}");
    // Capabilities per era: a stateless 2026-07-28 discover claims no subscriptions and no
    // logging (those methods answer 404 there); a legacy session gets both.
    let d = conn
        .rpc(
            &json!({"jsonrpc": "2.0", "id": 8, "method": "server/discover", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}}),
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "server/discover"),
            ],
        )
        .await
        .json();
    let caps = &d["result"]["capabilities"];
    assert_eq!(caps["resources"]["subscribe"], false, "{d}");
    assert!(caps.get("logging").is_none(), "{d}");
    assert!(
        caps["prompts"].is_object() && caps["completions"].is_object(),
        "{d}"
    );
    // A subscription flood: 10,000 subscribes over 10,000 distinct URIs of one session (its
    // output with different pages): the first 256 are held, every other one is refused.
    let created = rpc!(
        "tools/call",
        json!({"name": "session", "arguments": {"action": "create", "shell": "/bin/sh"}}),
    );
    let made: Value =
        serde_json::from_str(created["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    let pty = made["session_id"].as_str().unwrap().to_owned();
    let (mut ok, mut refused) = (0, 0);
    for i in 0..10_000 {
        let r = rpc!(
            "resources/subscribe",
            json!({"uri": format!("tuic://sessions/{pty}/output?limit={}", i + 1)}),
        );
        if r["result"] == json!({}) {
            ok += 1;
        } else {
            assert_eq!(r["error"]["code"], -32602, "{r}");
            assert!(
                r["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("at most 256"),
                "{r}"
            );
            refused += 1;
        }
    }
    assert_eq!((ok, refused), (256, 9_744));
    let st = node
        .connect()
        .await
        .send("GET", "/mcp/status", &[], "")
        .await
        .json();
    assert_eq!(st["resource_subscriptions"], 256, "{st}");
}

/// `resources/read` of a 200×50 screen over IPC (one keep-alive connection, 1,000 reads), and
/// `updated` fan-out to 100 subscribers (100 protocol sessions, each with its `GET /mcp`
/// stream) of one busy session: every stream gets updates, and a third busy round grows the
/// node by less than 2 MB (the first two fill the session's scrollback).
#[tokio::test]
async fn screen_reads_are_fast_and_fan_out_to_100_subscribers_does_not_grow_the_node() {
    let node = NodeProc::start(json!({})).await;
    let sid = initialize(&node, None).await;
    let mut conn = node.connect().await;
    let h = [("mcp-session-id", sid.as_str())];
    let created = conn
        .rpc(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "session",
                "arguments": {"action": "create", "shell": "/bin/sh", "rows": 50, "cols": 200}}}),
            &h,
        )
        .await
        .json();
    let made: Value =
        serde_json::from_str(created["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    let pty = made["session_id"].as_str().unwrap().to_owned();
    let uri = format!("tuic://sessions/{pty}/screen");
    let input = |cmd: &str| {
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "session",
            "arguments": {"action": "input", "session_id": pty, "input": cmd, "special_key": "enter"}}})
    };
    let read =
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": uri}});
    // A full screen: 60 lines of 199 digits.
    conn.rpc(
        &input("for i in $(seq 60); do printf '%0199d\\n' $i; done"),
        &h,
    )
    .await;
    let full = format!("{:0199}", 60);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let r = conn.rpc(&read, &h).await.json();
        if r["result"]["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains(&full))
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "screen filled: {r}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut took = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t0 = std::time::Instant::now();
        let r = conn.rpc(&read, &h).await;
        took.push(t0.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(r.status, 200);
    }
    took.sort_by(f64::total_cmp);
    let (p50, p99) = (took[500], took[990]);
    eprintln!(
        "resources/read 200x50 screen over IPC: p50 {p50:.3} ms, p99 {p99:.3} ms (1000 reads)"
    );
    assert!(p50 < 5.0, "p50 {p50} ms");

    // 100 subscribers, each with its own protocol session and GET /mcp stream.
    let mut counters = Vec::new();
    for _ in 0..100 {
        let s = initialize(&node, None).await;
        let mut c = node.connect().await;
        let r = c
            .rpc(
                &json!({"jsonrpc": "2.0", "id": 4, "method": "resources/subscribe", "params": {"uri": uri}}),
                &[("mcp-session-id", s.as_str())],
            )
            .await
            .json();
        assert_eq!(r["result"], json!({}), "{r}");
        let mut g = node.connect().await;
        let resp = g
            .send_head(
                "GET",
                "/mcp",
                &[
                    ("accept", "text/event-stream"),
                    ("mcp-session-id", s.as_str()),
                ],
                "",
            )
            .await;
        assert_eq!(resp.status(), 200);
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let n = seen.clone();
        tokio::spawn(async move {
            use http_body_util::BodyExt;
            let _keep = g;
            let mut body = resp.into_body();
            while let Some(Ok(f)) = body.frame().await {
                if let Ok(d) = f.into_data() {
                    let k = String::from_utf8_lossy(&d)
                        .matches("notifications/resources/updated")
                        .count();
                    n.fetch_add(k as u64, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
        counters.push(seen);
    }
    // 6,000 lines of 199 columns a round: two rounds fill the 10,000-row scrollback, so a
    // third one measures what the notifications cost, not the terminal's own history.
    let busy = "for i in $(seq 6000); do printf '%0199d\\n' $i; done; echo busy-done";
    let round = async |conn: &mut mcp_support::Conn, tag: &str| {
        let cmd = busy.replace("busy-done", tag);
        conn.rpc(&input(&cmd), &h).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let r = conn.rpc(&read, &h).await.json();
            let t = r["result"]["contents"][0]["text"].as_str().unwrap_or("");
            if t.lines().any(|l| l.trim() == tag) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{tag} in time");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    round(&mut conn, "round-1-done").await;
    round(&mut conn, "round-2-done").await;
    let before = node.rss_bytes();
    round(&mut conn, "round-3-done").await;
    let after = node.rss_bytes();
    let counts: Vec<u64> = counters
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    eprintln!(
        "100 subscribers: node RSS {} KiB before the third busy round, {} KiB after; updates per subscriber min {} max {}",
        before / 1024,
        after / 1024,
        counts.iter().min().unwrap(),
        counts.iter().max().unwrap()
    );
    assert!(counts.iter().all(|&c| c > 0), "{counts:?}");
    assert!(
        after < before + 2 * 1024 * 1024,
        "the node grew {} KiB in a round",
        (after.saturating_sub(before)) / 1024
    );
}
