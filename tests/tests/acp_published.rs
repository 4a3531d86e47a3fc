//! The published ACP agents from npm (`@zed-industries/codex-acp`,
//! `@zed-industries/claude-code-acp`), driven through tuic without credentials: each completes
//! `initialize` and refuses `session/new` with its own error; the connection ends with a clear
//! reason and the snapshot carries the agent's error and auth methods as a card — never a hang.

use serde_json::{Value, json};
use tuic_tests::acp::{Bed, is, published_agents_dir, start_node, until};
use tuic_tests::config_dir;

async fn refused(agent: &str) -> (Value, Value) {
    let bin = published_agents_dir().join("node_modules/.bin").join(agent);
    let home = tempfile::tempdir().unwrap();
    let dir = config_dir(json!({
        "acp_agents": [{
            "name": agent,
            "command": bin.display().to_string(),
            "env": {"HOME": home.path().display().to_string()},
        }],
    }));
    let node = start_node(dir.path(), false);
    let bed = Bed::with(dir, node).await;
    let (s, v) = bed
        .call(
            "POST",
            "/acp/connections",
            Some(json!({"agent": agent, "cwd": bed.repo.display().to_string()})),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let mut ws = bed.stream(&id, 0).await.unwrap();
    let frames = until(&mut ws, |f| is(f, "exit")).await.unwrap();
    let card = frames
        .iter()
        .find(|f| is(f, "agent_error"))
        .cloned()
        .unwrap_or_else(|| panic!("no agent_error card: {frames:?}"));
    let (_, snap) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    assert_eq!(snap["state"], "ended", "{snap}");
    assert!(
        snap["ended"]
            .as_str()
            .unwrap()
            .starts_with("session/new failed"),
        "{snap}"
    );
    assert_eq!(snap["error"], card_body(&card), "{snap}");
    (card, snap)
}

/// A frame without its sequence and time: the snapshot's `error`.
fn card_body(f: &Value) -> Value {
    let mut v = f.clone();
    let o = v.as_object_mut().unwrap();
    o.remove("seq");
    o.remove("ts_ms");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_acp_without_credentials_shows_authentication_required_with_its_methods() {
    let (card, _) = refused("codex-acp").await;
    assert_eq!(card["method"], "session/new");
    assert_eq!(card["code"], -32000, "{card}");
    assert_eq!(card["message"], "Authentication required");
    let ids: Vec<&str> = card["auth_methods"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert!(ids.contains(&"openai-api-key"), "{card}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_acp_without_credentials_shows_its_error_and_login_method() {
    let (card, _) = refused("claude-code-acp").await;
    assert_eq!(card["method"], "session/new");
    assert_eq!(card["code"], -32603, "{card}");
    assert_eq!(
        card["data"]["details"], "Query closed before response received",
        "{card}"
    );
    assert_eq!(card["auth_methods"][0]["id"], "claude-login", "{card}");
}
