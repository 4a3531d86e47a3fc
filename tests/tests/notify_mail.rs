//! Agent mail to the person: `agent action=send to=human` over a real MCP session raises one
//! notification naming the sender, with the subject (first line) and an excerpt of the body,
//! and the signed webhook carries it; mail to `human` fills no inbox.

mod agent_mail_support;
mod mcp_support;

use std::time::Duration;

use agent_mail_support::{Client, get_json};
use mcp_support::NodeProc;
use serde_json::{Value, json};
use tuic_tests::receiver::Receiver;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_to_human_notifies_with_the_sender_and_the_subject() {
    let mut hook = Receiver::start().await;
    let node = NodeProc::start(json!({"notifications": {
        "coalesce_ms": 0,
        "webhook": {"url": hook.url("/hook")},
    }}))
    .await;
    let mut a = Client::new(&node).await;
    a.agent(json!({"action": "register", "name": "builder"}))
        .await;
    let body = format!(
        "Deploy finished\nAll 42 checks green on main. {}",
        "x".repeat(600)
    );
    let r = a
        .agent(json!({"action": "send", "to": "human", "message": body}))
        .await;
    assert_eq!(r["to"], "human", "{r}");
    assert_eq!(r["status"], "notified", "{r}");
    let id = r["notification_id"].as_u64().expect("a notification id");

    let hit = hook.next("/hook", Duration::from_secs(15)).await;
    let ev: Value = serde_json::from_slice(&hit.body).unwrap();
    let n = &ev["notification"];
    assert_eq!(n["id"], id);
    assert_eq!(n["kind"], "mail");
    assert_eq!(n["title"], "mail for you from builder");
    let text = n["text"].as_str().unwrap();
    assert!(
        text.starts_with("From builder: Deploy finished\nAll 42 checks green on main. xxx"),
        "{text}"
    );
    assert!(
        text.ends_with('…') && text.len() < 400,
        "an excerpt: {text}"
    );

    let list = get_json(&node, "/notifications").await;
    let rec = list["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .cloned()
        .unwrap();
    assert_eq!(rec["kind"], "mail");
    // Refusals: over the mail limit, and without an identity; neither notifies.
    let (failed, v) = a
        .tool(
            "agent",
            json!({"action": "send", "to": "human", "message": "x".repeat(70_000)}),
        )
        .await;
    assert!(failed && v.to_string().contains("too_large"), "{v}");
    let mut stranger = Client::new(&node).await;
    let (failed, v) = stranger
        .tool(
            "agent",
            json!({"action": "send", "to": "human", "message": "hi"}),
        )
        .await;
    assert!(failed && v.to_string().contains("not_registered"), "{v}");
    let mails = get_json(&node, "/notifications").await["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "mail")
        .count();
    assert_eq!(mails, 1);
    // Nobody's inbox got it: `human` is not a peer.
    let peers = a.agent(json!({"action": "list_peers"})).await;
    assert!(!peers.to_string().contains("\"human\""), "{peers}");
}
