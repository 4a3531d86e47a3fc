//! End-to-end agent mail on a real `tuic-node`: register, send, inbox paging and eviction,
//! event-driven waits, the PTY wake notice behind the composer gate, and spawned children with
//! task handles and lifecycle notices. Test agents are shell scripts written here.

mod agent_mail_support;
mod mcp_support;

use std::time::{Duration, Instant};

use agent_mail_support::{Client, get_json, output_until, post_json, script};
use mcp_support::NodeProc;
use serde_json::{Value, json};

#[tokio::test]
async fn register_send_inbox_eviction_wait_and_ambiguous_names() {
    let node = NodeProc::start(json!({})).await;
    let mut a = Client::new(&node).await;
    let mut b = Client::new(&node).await;
    let ra = a
        .agent(json!({"action":"register","name":"alpha","orchestrator":true}))
        .await;
    let rb = b.agent(json!({"action":"register","name":"beta"})).await;
    let (ta, tb) = (
        ra["tuic_session"].as_str().unwrap().to_owned(),
        rb["tuic_session"].as_str().unwrap().to_owned(),
    );
    assert_eq!(ra["orchestrator"], true);
    assert_eq!(ra["mail_wake"], "none");
    assert_ne!(ta, tb);
    let peers = a.agent(json!({"action":"list_peers"})).await;
    let names: Vec<&str> = peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"alpha") && names.contains(&"beta"),
        "{peers}"
    );

    // 150 messages to one inbox: the oldest 50 are evicted and reported once.
    for i in 0..150 {
        let r = b
            .agent(json!({"action":"send","to":"alpha","message":format!("m{i}")}))
            .await;
        assert_eq!(r["delivered"], true);
        assert_eq!(r["delivery_path"], "inbox_only");
    }
    let page = a.agent(json!({"action":"inbox"})).await;
    assert_eq!(page["missed_count"], 50, "{}", page["missed_count"]);
    let msgs = page["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 100);
    assert_eq!(msgs[0]["message"], "m50");
    assert_eq!(msgs[99]["message"], "m149");
    assert_eq!(msgs[0]["from"], tb.as_str());
    assert_eq!(msgs[0]["from_name"], "beta");
    let next = page["next_since"].as_u64().unwrap();
    let again = a.agent(json!({"action":"inbox"})).await;
    assert_eq!(again["missed_count"], 0);
    assert_eq!(again["messages"].as_array().unwrap().len(), 0);
    // since=0 replays without rewinding the stored cursor.
    let replay = a
        .agent(json!({"action":"inbox","since":0,"limit":10}))
        .await;
    assert_eq!(replay["has_more"], true);
    assert_eq!(replay["messages"].as_array().unwrap().len(), 10);

    // A timed-out wait still returns next_since.
    let t0 = Instant::now();
    let w = a.agent(json!({"action":"wait","timeout_ms":300})).await;
    assert_eq!(w["timed_out"], true);
    assert_eq!(w["met"], false);
    assert_eq!(w["next_since"].as_u64(), Some(next));
    assert!(t0.elapsed() >= Duration::from_millis(290));

    // A pending wait is resolved by the arriving message (event-driven, no polling).
    let mut a2 = a.twin(&node).await;
    let waiter = tokio::spawn(async move {
        let t = Instant::now();
        let v = a2.agent(json!({"action":"wait","timeout_ms":60000})).await;
        (v, t.elapsed())
    });
    let s = b
        .agent(json!({"action":"send","to":ta,"message":"wake up"}))
        .await;
    let (w, took) = waiter.await.unwrap();
    assert_eq!(w["met"], true, "{w}");
    assert_eq!(w["new_messages"][0]["message"], "wake up");
    assert_eq!(w["new_messages"][0]["message_id"], s["message_id"]);
    assert!(w["next_since"].as_u64().unwrap() > next);
    assert!(took < Duration::from_secs(30), "{took:?}");

    // Two peers named beta: the name is refused with the candidates; 64 KB + 1 is refused.
    let mut c = Client::new(&node).await;
    c.agent(json!({"action":"register","name":"beta"})).await;
    let (err, e) = a
        .tool("agent", json!({"action":"send","to":"beta","message":"x"}))
        .await;
    assert!(err);
    assert_eq!(e["code"], "ambiguous_recipient");
    assert_eq!(e["candidates"].as_array().unwrap().len(), 2);
    let (err, e) = a
        .tool(
            "agent",
            json!({"action":"send","to":tb,"message":"x".repeat(65_537)}),
        )
        .await;
    assert!(err);
    assert_eq!(e["code"], "too_large");
    // Mail to an unknown address is refused, never buffered.
    let (err, e) = a
        .tool(
            "agent",
            json!({"action":"send","to":"nobody","message":"x"}),
        )
        .await;
    assert!(err);
    assert_eq!(e["code"], "unknown_recipient");
}

#[tokio::test]
async fn replaces_carries_mail_over_to_the_new_identity() {
    let node = NodeProc::start(json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let mut old = Client::new(&node).await;
    let mut b = Client::new(&node).await;
    let t_old = old
        .agent(json!({"action":"register","name":"worker","orchestrator":true}))
        .await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    // A live child keeps the orchestrator's identity addressable after its session ends.
    let child = script(dir.path(), "waiting-child", "read -r _ignored");
    old.agent(json!({"action":"spawn","command":child,"cwd":dir.path().display().to_string()}))
        .await;
    b.agent(json!({"action":"register"})).await;
    for i in 0..3 {
        b.agent(json!({"action":"send","to":t_old,"message":format!("k{i}")}))
            .await;
    }
    // While the old session is live, nobody else may take its mail (issue 40, finding 1).
    let mut new = Client::new(&node).await;
    let (err, e) = new
        .tool("agent", json!({"action":"register","replaces":t_old}))
        .await;
    assert!(err, "{e}");
    assert_eq!(e["code"], "identity_in_use", "{e}");
    // The worker's session ends; it comes back as a new protocol session with a new
    // identity and names the old one, which no session holds any more.
    let r = old
        .conn
        .send("DELETE", "/mcp", &[("mcp-session-id", &old.sid)], "")
        .await;
    assert_eq!(r.status, 200);
    let r = new
        .agent(json!({"action":"register","replaces":t_old}))
        .await;
    assert_eq!(r["superseded_identity"], t_old.as_str());
    let page = new.agent(json!({"action":"inbox"})).await;
    let bodies: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m.get("kind").is_none())
        .map(|m| m["message"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["k0", "k1", "k2"]);
    assert!(r["mail_migrated"].as_u64().unwrap() >= 3, "{r}");
    // The old address is retired: mail to it is refused.
    let (err, e) = b
        .tool(
            "agent",
            json!({"action":"send","to":t_old,"message":"late"}),
        )
        .await;
    assert!(err, "{e}");
}

#[tokio::test]
async fn spawned_child_exit_3_fails_its_task_and_notifies_the_parent() {
    let node = NodeProc::start(json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = script(
        dir.path(),
        "fake-agent",
        "echo \"agent ready: $1\"\necho 'suggest: [done]'\nread -r _ignored\nexit 3",
    );
    let mut parent = Client::new(&node).await;
    let tp = parent
        .agent(json!({"action":"register","name":"orch","orchestrator":true}))
        .await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = parent
        .agent(json!({"action":"spawn","command":agent,"prompt":"fix   the\nbug","name":"kid","cwd":dir.path().display().to_string()}))
        .await;
    assert_eq!(r["parent_session_id"], tp.as_str());
    assert_eq!(r["pty_description"], "fix the bug");
    assert_eq!(r["name"], "kid");
    let task = r["task_id"].as_str().unwrap().to_owned();
    let sid = r["session_id"].as_str().unwrap().to_owned();
    let child = r["tuic_session"].as_str().unwrap().to_owned();
    let t = parent
        .ok("task", json!({"action":"get","task_id":task}))
        .await;
    assert_eq!(t["status"], "working");
    // The prompt reached the child as its final positional argument.
    output_until(&node, &sid, "the ready line", |o| {
        o.contains("agent ready: fix   the")
    })
    .await;
    // The child is a registered peer with a live terminal.
    let peers = parent.agent(json!({"action":"list_peers"})).await;
    let kid = peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["tuic_session"] == child.as_str())
        .cloned()
        .expect("child listed");
    assert_eq!(kid["name"], "kid");
    assert_eq!(kid["session_id"], sid.as_str());
    // Let it end with code 3.
    post_json(
        &node,
        &format!("/sessions/{sid}/write"),
        json!({"data":"\n"}),
    )
    .await;
    // The parent's wait sees the lifecycle notices; bounded by the exited one.
    let mut states = Vec::new();
    for _ in 0..10 {
        let w = parent
            .agent(json!({"action":"wait","timeout_ms":20000}))
            .await;
        assert_eq!(w["timed_out"], false, "{w}");
        for m in w["new_messages"].as_array().unwrap() {
            assert_eq!(m["kind"], "state_change");
            assert_eq!(m["from"], child.as_str());
            let body: Value = serde_json::from_str(m["message"].as_str().unwrap()).unwrap();
            states.push(body.clone());
        }
        if states.iter().any(|s| s["state"] == "exited") {
            break;
        }
    }
    let exited = states
        .iter()
        .find(|s| s["state"] == "exited")
        .expect("exited notice");
    assert_eq!(exited["exit_code"], 3);
    let t = parent
        .ok("task", json!({"action":"get","task_id":task}))
        .await;
    assert_eq!(t["status"], "failed", "{t}");
    assert_eq!(t["error_detail"], "agent exited with code 3");
    // Another caller cannot read the task.
    let mut other = Client::new(&node).await;
    other.agent(json!({"action":"register"})).await;
    let (err, e) = other
        .tool("task", json!({"action":"get","task_id":task}))
        .await;
    assert!(err);
    assert_eq!(e["code"], "unknown_task");
}

#[tokio::test]
async fn wake_notice_waits_for_an_empty_composer_and_never_disturbs_a_draft() {
    const NOTICE: &str = "message available";
    let node = NodeProc::start(json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    // A script agent: a ready prompt, echoes what it receives.
    let agent = script(
        dir.path(),
        "prompt-agent",
        "while true; do printf '> '; IFS= read -r line || exit 0; echo \"got: $line\"; done",
    );
    let s = post_json(
        &node,
        "/sessions",
        json!({"shell": agent, "cwd": dir.path().display().to_string()}),
    )
    .await;
    let sid = s["session_id"].as_str().unwrap().to_owned();
    output_until(&node, &sid, "the prompt", |o| o.contains(">")).await;
    // Type a draft and leave it there.
    post_json(
        &node,
        &format!("/sessions/{sid}/write"),
        json!({"data":"half typed"}),
    )
    .await;
    output_until(&node, &sid, "the draft echo", |o| {
        o.contains("> half typed")
    })
    .await;
    let mut b = Client::new(&node).await;
    b.agent(json!({"action":"register","name":"sender"})).await;
    let r = b
        .agent(json!({"action":"send","to":sid,"message":"secret payload"}))
        .await;
    assert_eq!(r["delivery_path"], "terminal_or_queued", "{r}");
    assert_eq!(r["to"], s["tuic_session"]);
    assert!(r["recipient_state"].is_object(), "{r}");
    // The shell goes idle with the draft still there; the gate must keep the notice queued.
    // Absence needs a window: observe past two idle periods of the wake task.
    let until = Instant::now() + Duration::from_millis(2000);
    while Instant::now() < until {
        let o = get_json(&node, &format!("/sessions/{sid}/output?format=log"))
            .await
            .to_string();
        assert!(!o.contains(NOTICE), "notice written over a draft: {o}");
        assert!(!o.contains("got:"), "draft was submitted: {o}");
        assert!(o.contains("> half typed"), "draft disturbed: {o}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Clear the composer (Ctrl-U): the queued notice is written, and only the notice.
    post_json(
        &node,
        &format!("/sessions/{sid}/write"),
        json!({"data":"\u{15}"}),
    )
    .await;
    let o = output_until(&node, &sid, "the wake notice", |o| {
        o.contains(&format!("got: [TUIC] {NOTICE}"))
    })
    .await;
    assert!(
        !o.contains("secret payload"),
        "payload entered the PTY: {o}"
    );
    assert!(!o.contains("got: half typed"), "{o}");
}
