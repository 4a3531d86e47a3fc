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
            "tuic://repos/{name}"
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
