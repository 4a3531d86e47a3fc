//! End-to-end: the official MCP SDK clients (Python `mcp` in legacy, 2026-07-28 and auto
//! modes; TypeScript `@modelcontextprotocol/sdk`) connect over Streamable HTTP to a real node,
//! list the tools and call `session action=list`; the Python client also runs a real
//! `session action=create` + `input` + `output` round trip on a PTY in every mode.
//!
//! The clients are installed once by `tests/clients/setup.sh` (PyPI and npm); they reach the
//! node through a loopback TCP port forwarded to its IPC socket, because the node's own TCP
//! listener requires credentials these stock clients do not send.

mod mcp_support;

use mcp_support::NodeProc;
use serde_json::{Value, json};

const FAMILY: &[&str] = &[
    "session",
    "agent",
    "task",
    "remote",
    "repo",
    "story",
    "automations",
    "workflow_run",
    "workflow_report",
    "workflow_launch",
    "workflow_story_create",
    "progress",
    "ui",
    "plugin_dev_guide",
    "voice",
    "secret",
    "search_tools",
    "get_tool_schema",
    "call_tool",
];

fn check(report: &Value) {
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tools, FAMILY, "{report}");
    // session action=list answers from the real registry.
    assert_eq!(report["session_list"]["is_error"], false, "{report}");
    let inner: Value =
        serde_json::from_str(report["session_list"]["text"].as_str().unwrap()).unwrap();
    assert!(inner["sessions"].is_array(), "{report}");
}

async fn run(cmd: &mut tokio::process::Command) -> Value {
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output())
        .await
        .expect("client finished within 120 s")
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

#[tokio::test]
async fn official_python_and_typescript_clients_initialize_list_and_call() {
    let tuic_tests::SdkClients {
        python,
        ts_dir: tsdir,
    } = tuic_tests::sdk_clients();
    let node = NodeProc::start(json!({})).await;
    let url = node.tcp_forward().await;
    for (mode, want) in [
        ("legacy", "2025-11-25"),
        ("2026-07-28", "2026-07-28"),
        ("auto", "2026-07-28"),
    ] {
        let report = run(tokio::process::Command::new(&python)
            .arg(tuic_tests::clients_dir().join("mcp_python_client.py"))
            .arg(&url)
            .arg(mode)
            .arg(node.dir.path()))
        .await;
        assert_eq!(report["protocol"], want, "python {mode}: {report}");
        check(&report);
        let rt = &report["round_trip"];
        assert_eq!(rt["created"], true, "python {mode}: {report}");
        assert_eq!(rt["input_ok"], true, "python {mode}: {report}");
        assert_eq!(rt["found"], true, "python {mode}: {report}");
        assert_eq!(rt["closed"], true, "python {mode}: {report}");
    }
    // The ESM import resolves from the script's folder, so the script sits beside node_modules.
    let script = tsdir.join("tuic_ts_client.mjs");
    std::fs::copy(tuic_tests::clients_dir().join("mcp_ts_client.mjs"), &script).unwrap();
    let report = run(tokio::process::Command::new("node").arg(&script).arg(&url)).await;
    assert_eq!(report["protocol"], "2025-11-25", "{report}");
    assert!(report["session_id"].is_string());
    check(&report);
    // The TS client terminated its session on close: the id answers 404 now.
    let sid = report["session_id"].as_str().unwrap().to_owned();
    let mut c = node.connect().await;
    let r = c
        .rpc(
            &json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}),
            &[("mcp-session-id", &sid)],
        )
        .await;
    assert_eq!(r.status, 404);
}
