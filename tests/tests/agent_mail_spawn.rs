//! End-to-end spawning on a real `tuic-node`: deferred prompt injection for a prefill-only TUI
//! (a script named `codex`), its `prompt_delivery_failed` watchdog, the launch receipt route,
//! and `keep_open` against automatic idle closure of managed children.

mod agent_mail_support;
mod mcp_support;

use std::time::Duration;

use agent_mail_support::{Client, eventually, get_json, output_until, script};
use mcp_support::NodeProc;
use serde_json::{Value, json};

#[tokio::test]
async fn deferred_prompt_is_typed_after_the_ready_prompt_and_the_receipt_records_it() {
    let node = NodeProc::start(json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    // A prefill-only TUI: it takes a while to show its prompt and prints its argument count.
    let codex = script(
        dir.path(),
        "codex",
        "echo \"args: $#\"\nsleep 1\nwhile true; do printf '> '; IFS= read -r line || exit 0; echo \"task: $line\"; done",
    );
    let mut parent = Client::new(&node).await;
    let tp = parent
        .agent(json!({"action":"register","name":"orch"}))
        .await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = parent
        .agent(json!({"action":"spawn","command":codex,"prompt":"fix the bug","cwd":dir.path().display().to_string()}))
        .await;
    assert_eq!(r["prompt_delivery"], "deferred_pty", "{r}");
    let sid = r["session_id"].as_str().unwrap().to_owned();
    let child = r["tuic_session"].as_str().unwrap().to_owned();
    let o = output_until(&node, &sid, "the typed prompt", |o| {
        o.contains("task: fix the bug")
    })
    .await;
    // Not on the argv: the TUI got it only through its composer. Its two arguments are the
    // trust override Codex children get by default (`agents.codex.skip_trust_dialog`).
    assert!(o.contains("args: 2"), "{o}");

    let receipt = eventually("the delivered receipt", Duration::from_secs(10), || {
        let node = &node;
        let sid = sid.clone();
        async move {
            let v = get_json(node, &format!("/sessions/{sid}/prompt-receipt")).await;
            (v["launch"]["prompt_state"] == "delivered").then_some(v)
        }
    })
    .await;
    assert_eq!(receipt["session_id"], sid.as_str());
    assert_eq!(receipt["tuic_session"], child.as_str());
    assert_eq!(receipt["launch"]["prompt_delivery"], "deferred_pty");
    assert_eq!(receipt["launch"]["prompt"], "fix the bug");
    let trusted = format!(
        "projects.\"{}\".trust_level=\"trusted\"",
        dir.path().canonicalize().unwrap().display()
    );
    assert_eq!(receipt["launch"]["args"], json!(["-c", trusted]));
    assert_eq!(receipt["launch"]["parent_session_id"], tp.as_str());
    assert!(receipt["launch"]["delivered_at_ms"].as_u64().is_some());
    assert_eq!(receipt["mcp_instructions"], json!([]));
    // The child's bridge initializes: the served instructions join the receipt.
    let mut c = node.connect().await;
    let init = c
        .rpc(
            &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"child-bridge","version":"1"}}}),
            &[("x-tuic-session", &child)],
        )
        .await;
    let served = init.json()["result"]["instructions"].clone();
    let msid = init.session().unwrap();
    let v = get_json(&node, &format!("/sessions/{child}/prompt-receipt")).await;
    let list = v["mcp_instructions"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    assert_eq!(list[0]["mcp_session"], msid.as_str());
    assert_eq!(list[0]["instructions"], served);

    // A user-created session has no launch brief; an unknown id is 404.
    let mut u = node.connect().await;
    let s = u
        .send(
            "POST",
            "/sessions",
            &[("content-type", "application/json")],
            json!({"shell": "/bin/sh", "cwd": dir.path().display().to_string()}).to_string(),
        )
        .await
        .json();
    let user = get_json(
        &node,
        &format!(
            "/sessions/{}/prompt-receipt",
            s["session_id"].as_str().unwrap()
        ),
    )
    .await;
    assert!(user["launch_unavailable"].is_string(), "{user}");
    assert!(user.get("launch").is_none());
    let mut n = node.connect().await;
    let missing = n
        .send("GET", "/sessions/nope/prompt-receipt", &[], "")
        .await;
    assert_eq!(missing.status, 404);
}

#[tokio::test]
async fn deferred_prompt_watchdog_reports_prompt_delivery_failed_once() {
    let node = NodeProc::start(json!({"tuning": {"mail_prompt_delivery_timeout_ms": 1500}})).await;
    let dir = tempfile::tempdir().unwrap();
    // Never shows a ready prompt.
    let codex = script(dir.path(), "codex", "echo loading forever\nexec sleep 600");
    let mut parent = Client::new(&node).await;
    parent
        .agent(json!({"action":"register","name":"orch","orchestrator":true}))
        .await;
    let r = parent
        .agent(json!({"action":"spawn","command":codex,"prompt":"do it","cwd":dir.path().display().to_string()}))
        .await;
    let sid = r["session_id"].as_str().unwrap().to_owned();
    let child = r["tuic_session"].as_str().unwrap().to_owned();
    let t0 = std::time::Instant::now();
    let mut failed: Vec<Value> = Vec::new();
    while failed.is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no prompt_delivery_failed"
        );
        let w = parent
            .agent(json!({"action":"wait","timeout_ms":10000}))
            .await;
        failed.extend(
            w["new_messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["kind"] == "prompt_delivery_failed")
                .cloned(),
        );
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["from"], child.as_str());
    assert!(
        failed[0]["message_id"]
            .as_str()
            .unwrap()
            .starts_with("tuic-auto-")
    );
    let body: Value = serde_json::from_str(failed[0]["message"].as_str().unwrap()).unwrap();
    assert_eq!(body["state"], "prompt_delivery_failed");
    assert_eq!(body["session_id"], sid.as_str());
    let v = get_json(&node, &format!("/sessions/{sid}/prompt-receipt")).await;
    assert_eq!(v["launch"]["prompt_state"], "failed", "{v}");
    // One-shot: nothing more arrives, and the prompt never reaches the terminal.
    let w = parent
        .agent(json!({"action":"wait","timeout_ms":1500}))
        .await;
    assert!(
        w["new_messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["kind"] != "prompt_delivery_failed"),
        "{w}"
    );
    let o = get_json(&node, &format!("/sessions/{sid}/output?format=log"))
        .await
        .to_string();
    assert!(!o.contains("do it"), "{o}");
}

#[tokio::test]
async fn keep_open_spares_a_completed_child_from_idle_closure() {
    let node = NodeProc::start(json!({"tuning": {"mail_child_idle_close_ms": 800}})).await;
    let dir = tempfile::tempdir().unwrap();
    let done = script(
        dir.path(),
        "done-agent",
        "echo 'suggest: [next step]'\nexec sleep 600",
    );
    let mut parent = Client::new(&node).await;
    parent.agent(json!({"action":"register"})).await;
    let cwd = dir.path().display().to_string();
    let closed = parent
        .agent(json!({"action":"spawn","command":done,"cwd":cwd}))
        .await;
    let kept = parent
        .agent(json!({"action":"spawn","command":done,"cwd":cwd,"keep_open":true}))
        .await;
    assert_eq!(kept["keep_open"], true);
    // The unmarked child is closed after its quiet completed period.
    let w = parent
        .ok("session", json!({"action":"wait","session_id":closed["session_id"],"until":"exited","timeout_ms":15000}))
        .await;
    assert_eq!(w["reached"], true, "{w}");
    // The marked one stays (absence needs a window: three idle periods past the first close).
    let w = parent
        .ok("session", json!({"action":"wait","session_id":kept["session_id"],"until":"exited","timeout_ms":2400}))
        .await;
    assert_eq!(w["timed_out"], true, "{w}");
    // Clearing the mark through session action=keep_open lets it close.
    let k = parent
        .ok(
            "session",
            json!({"action":"keep_open","session_id":kept["session_id"],"enabled":false}),
        )
        .await;
    assert_eq!(k["keep_open"], false);
    let w = parent
        .ok("session", json!({"action":"wait","session_id":kept["session_id"],"until":"exited","timeout_ms":15000}))
        .await;
    assert_eq!(w["reached"], true, "{w}");

    // keep_open on a user-created session is refused, by both actions; nothing is sent.
    let mut c = node.connect().await;
    let s = c
        .send(
            "POST",
            "/sessions",
            &[("content-type", "application/json")],
            json!({"shell": "/bin/sh", "cwd": cwd}).to_string(),
        )
        .await
        .json();
    let us = s["session_id"].as_str().unwrap();
    let (err, e) = parent
        .tool(
            "session",
            json!({"action":"keep_open","session_id":us,"enabled":true}),
        )
        .await;
    assert!(err);
    assert_eq!(e["code"], "user_session");
    let (err, e) = parent
        .tool(
            "agent",
            json!({"action":"send","to":us,"message":"hi","keep_open":true}),
        )
        .await;
    assert!(err);
    assert_eq!(e["code"], "user_session");
    let ut = s["tuic_session"].as_str().unwrap();
    let mut reader = Client::new_as(&node, ut).await;
    let page = reader.agent(json!({"action":"inbox"})).await;
    assert_eq!(
        page["messages"],
        json!([]),
        "a refused send buffered mail: {page}"
    );
}

#[tokio::test]
async fn an_unregistered_spawner_is_linked_by_a_later_register_with_its_notices() {
    let node = NodeProc::start(json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let quick = script(dir.path(), "quick-agent", "echo bye\nexit 0");
    let mut caller = Client::new(&node).await;
    let r = caller
        .agent(json!({"action":"spawn","command":quick,"cwd":dir.path().display().to_string()}))
        .await;
    assert!(r.get("parent_session_id").is_none(), "{r}");
    assert!(r["warning"].is_string(), "{r}");
    let child = r["tuic_session"].as_str().unwrap().to_owned();
    let task = r["task_id"].as_str().unwrap().to_owned();
    // The spawner reaches its task before registering; once it is finished, the exit notice
    // has been posted (to the pending parent).
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let t = caller
            .ok("task", json!({"action":"get","task_id":task}))
            .await;
        if t["status"] == "completed" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "task not finished: {t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Registering links the child and migrates the notices emitted before it.
    let reg = caller
        .agent(json!({"action":"register","name":"late"}))
        .await;
    assert_eq!(reg["children_linked"], 1, "{reg}");
    assert!(reg["lifecycle_migrated"].as_u64().unwrap() >= 1, "{reg}");
    let page = caller.agent(json!({"action":"inbox"})).await;
    let exited = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["message"].as_str().unwrap().contains("\"exited\""))
        .cloned()
        .unwrap_or_else(|| panic!("no exit notice: {page}"));
    assert_eq!(exited["from"], child.as_str());
    assert_eq!(exited["kind"], "state_change");
    // The pending parent is internal: never listed as a peer.
    let peers = caller.agent(json!({"action":"list_peers"})).await;
    assert!(!peers.to_string().contains("mcp-pending"), "{peers}");
}
