//! End-to-end: two official Python MCP SDK clients register and exchange 1,000 messages each
//! way through a real node with interleaved `wait` and `inbox`; every message arrives exactly
//! once and in order, `next_since` always advances, and a timed-out wait returns it.

mod mcp_support;

use mcp_support::NodeProc;
use serde_json::{Value, json};

#[tokio::test]
async fn two_python_sdk_clients_exchange_a_thousand_messages_exactly_once_in_order() {
    let python = tuic_tests::sdk_clients().python;
    let node = NodeProc::start(json!({})).await;
    let url = node.tcp_forward().await;
    let n = 1000;
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(600),
        tokio::process::Command::new(&python)
            .arg(tuic_tests::clients_dir().join("mcp_python_mail.py"))
            .arg(&url)
            .arg(n.to_string())
            .output(),
    )
    .await
    .expect("client finished within 600 s")
    .expect("client ran");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap();
    let r: Value = serde_json::from_str(line).unwrap();
    assert_eq!(r["problems"], json!([]), "{}", r["problems"]);
    let want = |p: &str| (0..n).map(|i| json!(format!("{p}{i}"))).collect::<Vec<_>>();
    assert_eq!(r["a_got"].as_array().unwrap(), &want("b"));
    assert_eq!(r["b_got"].as_array().unwrap(), &want("a"));
    assert_eq!(r["timeout"]["timed_out"], true);
    assert_eq!(r["timeout"]["next_since"], r["a_last_since"]);
}
