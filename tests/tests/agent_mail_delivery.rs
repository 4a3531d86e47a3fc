//! End-to-end delivery routes of agent mail on a real `tuic-node`: the channel push on a
//! terminal-less client's `GET /mcp` stream, the PTY wake notice's expiry, single retry and
//! budget, the lifecycle-summary exception, urgent notices, and the reaper retiring peers
//! nobody can reach. Test agents are shell scripts written here and run in real PTYs.

mod agent_mail_support;
mod mcp_support;

use std::time::Duration;

use agent_mail_support::{
    Client, Stream, count, eventually, get_json, output_until, post_json, script,
};
use mcp_support::NodeProc;
use serde_json::{Value, json};

const NOTICE: &str = "[TUIC] message available — read it with: agent action=inbox";
/// A prompt loop that echoes every line it receives.
const PROMPT_AGENT: &str =
    "while true; do printf '> '; IFS= read -r line || exit 0; echo \"got: $line\"; done";

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

/// The session's clean log lines (not the screen copy), one per line.
async fn log_text(node: &NodeProc, sid: &str) -> String {
    let v = get_json(node, &format!("/sessions/{sid}/output?format=log")).await;
    v["lines"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Polls the log lines until `pred` holds (bounded).
async fn lines_until(
    node: &NodeProc,
    sid: &str,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let o = log_text(node, sid).await;
        if pred(&o) {
            return o;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {o}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn channel_push_reaches_a_terminal_less_client_inline_or_as_a_pointer() {
    let node = NodeProc::start(json!({})).await;
    let mut ext = Client::new(&node).await;
    let te = ext.agent(json!({"action":"register","name":"ext"})).await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut stream = Stream::open(&node, &ext.sid).await;
    let mut b = Client::new(&node).await;
    let tb = b
        .agent(json!({"action":"register","name":"Mallory display name"}))
        .await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();

    // A small body travels inline, the sender named by UUID.
    let s1 = b
        .agent(json!({"action":"send","to":te,"message":"hi there"}))
        .await;
    assert_eq!(s1["delivery_path"], "sse", "{s1}");
    let n1 = stream
        .next_method("notifications/claude/channel", Duration::from_secs(10))
        .await;
    assert_eq!(n1["jsonrpc"], "2.0");
    assert_eq!(n1["params"]["content"], "hi there");
    assert_eq!(n1["params"]["meta"]["from_tuic_session"], tb.as_str());
    assert_eq!(n1["params"]["meta"]["message_id"], s1["message_id"]);

    // A large body becomes a pointer under 300 bytes; the full body stays in the inbox.
    let big = format!("Large report\n{}", "x".repeat(10_240));
    let s2 = b
        .agent(json!({"action":"send","to":te,"message":big}))
        .await;
    assert_eq!(s2["delivery_path"], "sse");
    let n2 = stream
        .next_method("notifications/claude/channel", Duration::from_secs(10))
        .await;
    let content = n2["params"]["content"].as_str().unwrap();
    let mid = s2["message_id"].as_str().unwrap();
    assert_eq!(
        content,
        format!(
            "{NOTICE}\nfrom {tb} id {mid} {} bytes: Large report",
            big.len()
        )
    );
    assert!(content.len() < 300, "{}", content.len());
    assert!(
        !content.contains("Mallory"),
        "display name leaked: {content}"
    );
    assert_eq!(n2["params"]["meta"]["message_id"], mid);

    // The push took no lease: the next wait still returns both, full bodies included.
    let w = ext.agent(json!({"action":"wait","timeout_ms":5000})).await;
    let got: Vec<&str> = w["new_messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(got, [s1["message_id"].as_str().unwrap(), mid]);
    assert_eq!(w["new_messages"][1]["message"], big.as_str());

    // A registered orchestrator never gets a peer payload on its channel, however small.
    let mut orch = Client::new(&node).await;
    let to = orch
        .agent(json!({"action":"register","orchestrator":true}))
        .await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut ostream = Stream::open(&node, &orch.sid).await;
    let s3 = b
        .agent(json!({"action":"send","to":to,"message":"tiny secret"}))
        .await;
    assert_eq!(s3["delivery_path"], "sse");
    let n3 = ostream
        .next_method("notifications/claude/channel", Duration::from_secs(10))
        .await;
    let c3 = n3["params"]["content"].as_str().unwrap();
    assert!(c3.starts_with(NOTICE), "{c3}");
    assert!(!c3.contains("tiny secret\n"), "{c3}");

    // No stream, no push: the message waits in the inbox.
    let mut quiet = Client::new(&node).await;
    let tq = quiet.agent(json!({"action":"register"})).await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    let s4 = b
        .agent(json!({"action":"send","to":tq,"message":"x"}))
        .await;
    assert_eq!(s4["delivery_path"], "inbox_only");
    // And the first client's stream saw nothing meant for the others.
    stream
        .none_within("notifications/claude/channel", Duration::from_millis(300))
        .await;
}

#[tokio::test]
async fn wake_notice_expires_unread_retries_once_then_stays_inbox_only_until_read() {
    let node = NodeProc::start(json!({"tuning": {"mail_wake_expiry_ms": 1500}})).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = script(dir.path(), "prompt-agent", PROMPT_AGENT);
    let (sid, tuic) = user_session(&node, &agent, dir.path()).await;
    output_until(&node, &sid, "the prompt", |o| o.contains(">")).await;
    let mut b = Client::new(&node).await;
    b.agent(json!({"action":"register","name":"sender"})).await;
    let notice = format!("got: {NOTICE}");
    let r = b
        .agent(json!({"action":"send","to":sid,"message":"payload one"}))
        .await;
    assert_eq!(r["delivery_path"], "terminal_or_queued");
    // Nobody reads: the notice expires and is retried exactly once.
    lines_until(&node, &sid, "the retried notice", |o| {
        count(o, &notice) >= 2
    })
    .await;
    // More mail coalesces into the exhausted group: no further notice (absence needs a
    // window: two expiry periods).
    b.agent(json!({"action":"send","to":tuic,"message":"payload two"}))
        .await;
    let until = std::time::Instant::now() + Duration::from_millis(3200);
    while std::time::Instant::now() < until {
        let o = log_text(&node, &sid).await;
        assert_eq!(count(&o, &notice), 2, "{o}");
        assert!(!o.contains("payload"), "payload entered the PTY: {o}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The agent in that PTY reads its inbox: the group is acknowledged.
    let mut me = Client::new_as(&node, &tuic).await;
    let page = me.agent(json!({"action":"inbox"})).await;
    assert_eq!(page["messages"].as_array().unwrap().len(), 2, "{page}");
    // New mail starts a new group with a fresh budget: a third notice.
    b.agent(json!({"action":"send","to":tuic,"message":"payload three"}))
        .await;
    lines_until(&node, &sid, "the next group's notice", |o| {
        count(o, &notice) >= 3
    })
    .await;
    // Read promptly this time: the notice is consumed and never retried.
    me.agent(json!({"action":"inbox"})).await;
    let until = std::time::Instant::now() + Duration::from_millis(3200);
    while std::time::Instant::now() < until {
        assert_eq!(count(&log_text(&node, &sid).await, &notice), 3);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn lifecycle_summary_is_typed_for_server_authored_mail_and_acknowledges_it() {
    let node = NodeProc::start(json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let parent_agent = script(dir.path(), "prompt-agent", PROMPT_AGENT);
    let (psid, ptuic) = user_session(&node, &parent_agent, dir.path()).await;
    output_until(&node, &psid, "the parent prompt", |o| o.contains(">")).await;
    // The parent's bridge binds to its PTY identity and spawns a child that exits 0.
    let mut parent = Client::new_as(&node, &ptuic).await;
    let child_agent = script(dir.path(), "short-child", "echo working\nsleep 1\nexit 0");
    let r = parent
        .agent(
            json!({"action":"spawn","command":child_agent,"cwd":dir.path().display().to_string()}),
        )
        .await;
    assert_eq!(r["parent_session_id"], ptuic.as_str());
    let child = r["tuic_session"].as_str().unwrap();
    let short: String = child.chars().take(8).collect();
    let o = output_until(&node, &psid, "the exit summary", |o| {
        o.contains(&format!("child agent {short} exited (exit 0)"))
    })
    .await;
    assert!(
        o.contains(&format!("got: [TUIC] child agent {short}")),
        "{o}"
    );
    assert!(
        !o.contains("message available"),
        "generic notice typed: {o}"
    );
    // Each summary acknowledges its window right after it is typed; its log line follows.
    // The log page repeats committed lines on the screen and each summary shows twice (the
    // terminal's echo after the prompt, the agent's `got:`), so distinct summaries are counted.
    let page: Value = serde_json::from_str(&o).unwrap();
    let typed = ["lines", "screen"]
        .iter()
        .flat_map(|k| page[k].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .filter_map(|l| l.find("[TUIC] child agent").map(|i| &l[i..]))
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    eventually(
        "the summaries' acknowledgements",
        Duration::from_secs(10),
        || {
            let node = &node;
            async move {
                let l = get_json(node, "/logs?source=agent_msg&level=info&limit=1000").await;
                (count(&l.to_string(), "lifecycle summary written") >= typed).then_some(l)
            }
        },
    )
    .await;
    // The summary acknowledged its window: no inbox call is owed, the mail is still retained.
    let fresh = parent.agent(json!({"action":"inbox"})).await;
    assert_eq!(fresh["messages"], json!([]), "{fresh}");
    let all = parent.agent(json!({"action":"inbox","since":0})).await;
    let states: Vec<Value> = all["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| serde_json::from_str(m["message"].as_str().unwrap()).unwrap())
        .collect();
    assert!(states.iter().any(|s| s["state"] == "exited"), "{states:?}");
}

#[tokio::test]
async fn urgent_notice_reaches_a_busy_claude_session_and_falls_back_otherwise() {
    let node = NodeProc::start(json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    // Busy forever (output every 100 ms) while it reads its input.
    let busy = "(while :; do echo working; sleep 0.1; done) &\nwhile IFS= read -r line; do echo \"got: $line\"; done";
    let claude = script(dir.path(), "claude", busy);
    let other = script(dir.path(), "worker", busy);
    let (csid, ctuic) = user_session(&node, &claude, dir.path()).await;
    let (osid, _) = user_session(&node, &other, dir.path()).await;
    output_until(&node, &csid, "claude working", |o| o.contains("working")).await;
    output_until(&node, &osid, "worker working", |o| o.contains("working")).await;
    let mut b = Client::new(&node).await;
    b.agent(json!({"action":"register","name":"boss"})).await;
    let r = b
        .agent(json!({"action":"send","to":csid,"message":"urgent payload","urgency":"urgent"}))
        .await;
    assert_eq!(r["urgent_delivered"], true, "{r}");
    let notice = format!("got: {NOTICE}");
    lines_until(&node, &csid, "the urgent notice", |o| o.contains(&notice)).await;
    // A second urgent message is covered by the unread notice: no second write.
    let r2 = b
        .agent(json!({"action":"send","to":ctuic,"message":"urgent two","urgency":"urgent"}))
        .await;
    assert_eq!(r2["urgent_delivered"], true, "{r2}");
    let until = std::time::Instant::now() + Duration::from_millis(1000);
    while std::time::Instant::now() < until {
        let o = log_text(&node, &csid).await;
        assert_eq!(count(&o, &notice), 1, "{o}");
        assert!(
            !o.contains("urgent payload"),
            "payload entered the PTY: {o}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // An unknown agent type falls back to the inbox with the reason.
    let r3 = b
        .agent(json!({"action":"send","to":osid,"message":"u","urgency":"urgent"}))
        .await;
    tuic_tests::agent::assert_urgent_fallback(&r3, "agent type");
    // A draft in a Claude composer is never submitted by an urgent notice.
    let (dsid, _) = user_session(&node, &claude, dir.path()).await;
    output_until(&node, &dsid, "claude working", |o| o.contains("working")).await;
    post_json(
        &node,
        &format!("/sessions/{dsid}/write"),
        json!({"data":"half typed"}),
    )
    .await;
    let r4 = b
        .agent(json!({"action":"send","to":dsid,"message":"u","urgency":"urgent"}))
        .await;
    tuic_tests::agent::assert_urgent_fallback(&r4, "draft");
    // A terminal-less recipient without a stream: queued, with the reason.
    let mut ext = Client::new(&node).await;
    let te = ext.agent(json!({"action":"register"})).await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    let r5 = b
        .agent(json!({"action":"send","to":te,"message":"u","urgency":"urgent"}))
        .await;
    assert_eq!(r5["urgent_delivered"], false);
    assert!(r5["urgent_fallback_reason"].is_string());
}

#[tokio::test]
async fn reaper_retires_unreachable_peers_and_keeps_pty_owners_and_parents() {
    let node = NodeProc::start(json!({"tuning": {
        "mcp_session_ttl_ms": 1500,
        "mcp_reap_interval_ms": 200,
        "mcp_identity_grace_ms": 0
    }}))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut gone = Client::new(&node).await;
    let tg = gone.agent(json!({"action":"register","name":"gone"})).await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    // A parent whose child keeps running.
    let mut parent = Client::new(&node).await;
    let tp = parent
        .agent(json!({"action":"register","name":"parent"}))
        .await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    let sleeper = script(dir.path(), "sleeper", "echo child up\nexec sleep 600");
    parent
        .agent(json!({"action":"spawn","command":sleeper,"name":"kid","cwd":dir.path().display().to_string()}))
        .await;
    // A bridge inside a terminal.
    let agent = script(dir.path(), "prompt-agent", PROMPT_AGENT);
    let (_, tt) = user_session(&node, &agent, dir.path()).await;
    let mut inside = Client::new_as(&node, &tt).await;
    inside
        .agent(json!({"action":"register","name":"inside"}))
        .await;
    // A client ended by DELETE /mcp is retired at once.
    let mut deleted = Client::new(&node).await;
    let td = deleted
        .agent(json!({"action":"register","name":"deleted"}))
        .await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    let del = deleted
        .conn
        .send("DELETE", "/mcp", &[("mcp-session-id", &deleted.sid)], "")
        .await;
    assert_eq!(del.status, 200);

    // Every protocol session above goes idle past the TTL; a fresh observer polls.
    let peers = eventually(
        "the idle peer's retirement",
        Duration::from_secs(15),
        || {
            let node = &node;
            let tg = tg.clone();
            async move {
                let mut obs = Client::new(node).await;
                let p = obs.agent(json!({"action":"list_peers"})).await;
                let ids: Vec<String> = p["peers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x["tuic_session"].as_str().unwrap().to_owned())
                    .collect();
                (!ids.contains(&tg)).then_some(p)
            }
        },
    )
    .await;
    let ids: Vec<&str> = peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["tuic_session"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&tp.as_str()),
        "the live child's parent was retired: {peers}"
    );
    assert!(
        ids.contains(&tt.as_str()),
        "the PTY owner was retired: {peers}"
    );
    assert!(
        !ids.contains(&td.as_str()),
        "the deleted session's peer stayed: {peers}"
    );
    // Mail to the retired identities is refused; the kept parent still receives.
    let mut s = Client::new(&node).await;
    s.agent(json!({"action":"register"})).await;
    for t in [&tg, &td] {
        let (err, e) = s
            .tool("agent", json!({"action":"send","to":t,"message":"late"}))
            .await;
        assert!(err, "{e}");
        assert_eq!(e["code"], "unknown_recipient");
    }
    let ok = s
        .agent(json!({"action":"send","to":tp,"message":"still here"}))
        .await;
    assert_eq!(ok["delivered"], true);
}
