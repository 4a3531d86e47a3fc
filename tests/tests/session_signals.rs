//! End-to-end checks of the signals an orchestrator waits for, on a real `tuic-node`:
//! `pty-description-changed` on `/events` (submit/input and spawn), the row's `standby` while a
//! session is paused, and `delivery_path` telling an orchestrator's coalesced inbox wake apart
//! from an ordinary terminal notice.

mod agent_mail_support;
mod mcp_support;

use std::time::Duration;

use agent_mail_support::{Client, eventually, get_json, output_until, post_json, script};
use mcp_support::NodeProc;
use serde_json::{Value, json};
use tuic_tests::progress::Events;

/// A prompt loop that echoes every line it receives.
const PROMPT_AGENT: &str =
    "while true; do printf '> '; IFS= read -r line || exit 0; echo \"got: $line\"; done";
const NOTICE: &str = "[TUIC] message available — read it with: agent action=inbox";

async fn user_session(node: &NodeProc, shell: &str, cwd: &std::path::Path) -> (String, String) {
    let s = post_json(
        node,
        "/sessions",
        json!({"shell": shell, "cwd": cwd.display().to_string()}),
    )
    .await;
    (
        s["session_id"].as_str().unwrap().to_owned(),
        s["tuic_session"].as_str().unwrap().to_owned(),
    )
}

/// The `GET /sessions` row of `sid`.
async fn row(node: &NodeProc, sid: &str) -> Value {
    let list = get_json(node, "/sessions").await;
    let rows = list
        .as_array()
        .cloned()
        .or_else(|| list["sessions"].as_array().cloned())
        .unwrap_or_default();
    rows.into_iter()
        .find(|r| r["session_id"] == sid)
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn description_changes_are_published_once_per_change_on_events() {
    let node = NodeProc::start(json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let mut events = Events::subscribe(&node.socket, "pty-description-changed").await;
    let agent = script(dir.path(), "prompt-agent", PROMPT_AGENT);
    let (sid, _) = user_session(&node, &agent, dir.path()).await;
    output_until(&node, &sid, "the prompt", |o| o.contains('>')).await;
    let mut c = Client::new(&node).await;
    let of = |sid: String| move |v: &Value| v["session_id"] == sid.as_str();
    let limit = Duration::from_secs(10);

    // MCP input sets it.
    c.ok(
        "session",
        json!({"action":"input","session_id":sid,"input":"a","pty_description":"build the docs"}),
    )
    .await;
    let e = events
        .next_matching("pty-description-changed", limit, of(sid.clone()))
        .await
        .expect("the first change");
    assert_eq!(
        e,
        json!({"session_id": sid, "pty_description": "build the docs"})
    );
    assert_eq!(row(&node, &sid).await["pty_description"], "build the docs");
    // The same value again is no change: the next event is the REST clear below.
    c.ok(
        "session",
        json!({"action":"input","session_id":sid,"input":"b","pty_description":"build the docs"}),
    )
    .await;
    let cleared = post_json(
        &node,
        &format!("/sessions/{sid}/input"),
        json!({"input":"c","pty_description":null}),
    )
    .await;
    assert_eq!(cleared["ok"], true, "{cleared}");
    let e = events
        .next_matching("pty-description-changed", limit, of(sid.clone()))
        .await
        .expect("the clear");
    assert_eq!(
        e,
        json!({"session_id": sid}),
        "a clear carries no description"
    );
    assert!(row(&node, &sid).await.get("pty_description").is_none());

    // A spawn's derived description reaches the child's row and the event stream.
    c.agent(json!({"action":"register","name":"orch"})).await;
    let child = script(dir.path(), "child", "sleep 30");
    let r = c
        .agent(json!({"action":"spawn","command":child,"prompt":"write   the release\nnotes","cwd":dir.path().display().to_string()}))
        .await;
    let csid = r["session_id"].as_str().unwrap().to_owned();
    assert_eq!(r["pty_description"], "write the release notes");
    let e = events
        .next_matching("pty-description-changed", limit, of(csid.clone()))
        .await
        .expect("the spawn's description");
    assert_eq!(e["pty_description"], "write the release notes");
    assert_eq!(
        row(&node, &csid).await["pty_description"],
        "write the release notes"
    );
}

#[tokio::test]
async fn standby_appears_only_while_the_session_is_paused() {
    let node = NodeProc::start(json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = script(dir.path(), "prompt-agent", PROMPT_AGENT);
    let (sid, _) = user_session(&node, &agent, dir.path()).await;
    output_until(&node, &sid, "the prompt", |o| o.contains('>')).await;
    assert!(row(&node, &sid).await.get("standby").is_none());
    let mut c = Client::new(&node).await;
    c.ok("session", json!({"action":"pause","session_id":sid}))
        .await;
    let paused = eventually("standby in the row", Duration::from_secs(10), || {
        let (node, sid) = (&node, sid.clone());
        async move {
            let r = row(node, &sid).await;
            (r["standby"] == true).then_some(r)
        }
    })
    .await;
    assert_eq!(paused["standby"], true);
    c.ok("session", json!({"action":"resume","session_id":sid}))
        .await;
    eventually("standby gone", Duration::from_secs(10), || {
        let (node, sid) = (&node, sid.clone());
        async move {
            let r = row(node, &sid).await;
            r.get("standby").is_none().then_some(r)
        }
    })
    .await;
    // The resumed program still answers.
    post_json(
        &node,
        &format!("/sessions/{sid}/write"),
        json!({"data":"back\r"}),
    )
    .await;
    output_until(&node, &sid, "the echo", |o| o.contains("got: back")).await;
}

#[tokio::test]
async fn an_orchestrators_terminal_gets_the_orchestrator_wake_and_coalesces() {
    let node = NodeProc::start(json!({"tuning": {"mail_wake_expiry_ms": 60000}})).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = script(dir.path(), "prompt-agent", PROMPT_AGENT);
    let (osid, otuic) = user_session(&node, &agent, dir.path()).await;
    output_until(&node, &osid, "the prompt", |o| o.contains('>')).await;
    let mut orch = Client::new_as(&node, &otuic).await;
    let reg = orch
        .agent(json!({"action":"register","orchestrator":true}))
        .await;
    assert_eq!(reg["orchestrator"], true, "{reg}");
    let mut b = Client::new(&node).await;
    b.agent(json!({"action":"register","name":"worker"})).await;

    let first = b
        .agent(json!({"action":"send","to":otuic,"message":"one"}))
        .await;
    assert_eq!(first["delivery_path"], "orchestrator_wake", "{first}");
    // The notice is typed and stays pending until read: more mail joins it.
    output_until(&node, &osid, "the wake notice", |o| {
        o.contains(&format!("got: {NOTICE}"))
    })
    .await;
    let second = b
        .agent(json!({"action":"send","to":otuic,"message":"two"}))
        .await;
    assert_eq!(
        second["delivery_path"], "orchestrator_wake_coalesced",
        "{second}"
    );
    // Reading settles the group; the next message earns a wake of its own.
    let inbox = orch.agent(json!({"action":"inbox"})).await;
    assert_eq!(inbox["messages"].as_array().unwrap().len(), 2, "{inbox}");
    let third = b
        .agent(json!({"action":"send","to":otuic,"message":"three"}))
        .await;
    assert_eq!(third["delivery_path"], "orchestrator_wake", "{third}");

    // An ordinary (non-orchestrator) terminal keeps the generic route name.
    let (psid, ptuic) = user_session(&node, &agent, dir.path()).await;
    output_until(&node, &psid, "the prompt", |o| o.contains('>')).await;
    let plain = b
        .agent(json!({"action":"send","to":ptuic,"message":"x"}))
        .await;
    assert_eq!(plain["delivery_path"], "terminal_or_queued", "{plain}");
}
