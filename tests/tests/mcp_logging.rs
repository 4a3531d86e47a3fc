//! End-to-end: `notifications/message` carries the node's own log lines emitted while serving a
//! protocol session's tool calls (here `agent action=send`'s `agent message sent`, an `info`
//! line of the mail code), at the level the session set with `logging/setLevel`, and at a
//! bounded rate (a burst, then a refill; what was dropped is said in the next message).

mod mcp_support;

use std::time::{Duration, Instant};

use mcp_support::NodeProc;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tuic_tests::agent::{Agent, rpc};

/// The `notifications/message` params that reach protocol session `sid`'s `GET /mcp` stream.
async fn messages(node: &NodeProc, sid: &str) -> mpsc::UnboundedReceiver<Value> {
    let mut g = node.connect().await;
    let resp = g
        .send_head(
            "GET",
            "/mcp",
            &[("accept", "text/event-stream"), ("mcp-session-id", sid)],
            "",
        )
        .await;
    assert_eq!(resp.status(), 200);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        use http_body_util::BodyExt;
        let _keep = g;
        let mut body = resp.into_body();
        let mut buf = String::new();
        while let Some(Ok(f)) = body.frame().await {
            let Ok(d) = f.into_data() else { continue };
            buf.push_str(&String::from_utf8_lossy(&d));
            while let Some(i) = buf.find('\n') {
                let line: String = buf.drain(..=i).collect();
                if let Some(m) = line
                    .trim_end()
                    .strip_prefix("data: ")
                    .and_then(|d| serde_json::from_str::<Value>(d).ok())
                    .filter(|m| m["method"] == "notifications/message")
                {
                    let _ = tx.send(m["params"].clone());
                }
            }
        }
    });
    rx
}

async fn set_level(a: &Agent, level: &str) {
    let r = rpc(
        &a.socket,
        Some(&a.sid),
        json!({"jsonrpc":"2.0","id":90,"method":"logging/setLevel","params":{"level":level}}),
    )
    .await
    .json();
    assert_eq!(r["result"], json!({}), "{r}");
}

/// Receives until `pred` matches (bounded); returns what came before and the match.
async fn until(
    rx: &mut mpsc::UnboundedReceiver<Value>,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> (Vec<Value>, Value) {
    let mut before = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let m = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{what}: none within 20 s; got {before:?}"))
            .expect("stream open");
        if pred(&m) {
            return (before, m);
        }
        before.push(m);
    }
}

fn sent_line(m: &Value) -> bool {
    m["data"]["message"] == "agent message sent"
}

#[tokio::test]
async fn the_nodes_own_log_lines_reach_the_session_at_its_level_and_bounded_rate() {
    let node = NodeProc::start(json!({})).await;
    let (mut alice, _) = Agent::new(&node.socket, "alice").await;
    let (_bob, bob_id) = Agent::new(&node.socket, "bob").await;
    let mut rx = messages(&node, &alice.sid).await;

    // debug: the mail code's own `info` line of the send comes, with its fields.
    set_level(&alice, "debug").await;
    let first = alice.send(&bob_id, "one").await;
    let (_, m) = until(&mut rx, "the node's line", sent_line).await;
    assert_eq!(m["level"], "info", "{m}");
    assert_eq!(m["logger"], "agent_msg", "{m}");
    assert_eq!(m["data"]["to"], bob_id.as_str(), "{m}");
    assert_eq!(m["data"]["message_id"], first["message_id"], "{m}");

    // error: the info line is filtered. Back at info, the next send's line is the next one
    // of that kind (the forwarder keeps order), so the filtered one never came.
    set_level(&alice, "error").await;
    let second = alice.send(&bob_id, "two").await;
    set_level(&alice, "info").await;
    let third = alice.send(&bob_id, "three").await;
    let (_, m) = until(&mut rx, "the third send's line", sent_line).await;
    assert_ne!(m["data"]["message_id"], second["message_id"], "{m}");
    assert_eq!(m["data"]["message_id"], third["message_id"], "{m}");

    // Rate: a flood of 60 sends (two lines each) within the window gets at most the burst
    // plus the refill; the next message after a refill says how many were dropped.
    let t0 = Instant::now();
    for i in 0..60 {
        alice.send(&bob_id, &format!("flood {i}")).await;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    // Everything admitted during the flood is queued by now or soon after; count until the
    // first message that reports drops (sent only once the bucket refilled).
    let mut admitted = 0usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    let dropped = loop {
        assert!(Instant::now() < deadline, "no dropped_before within 20 s");
        match tokio::time::timeout(Duration::from_millis(200), rx.recv()).await {
            Ok(Some(m)) => {
                if let Some(d) = m["data"]["dropped_before"].as_u64() {
                    break d;
                }
                admitted += 1;
            }
            Ok(None) => panic!("stream closed"),
            // Quiet: one more call, logged when the bucket has room again.
            Err(_) => {
                alice.send(&bob_id, "after").await;
            }
        }
    };
    let bound = 20.0 + 10.0 * (Instant::now() - t0).as_secs_f64() + 1.0;
    eprintln!(
        "logging: 120 lines in {elapsed:.2} s of sends → {admitted} admitted, {dropped} dropped before the next"
    );
    assert!(
        (admitted as f64) <= bound,
        "{admitted} admitted > {bound:.0}"
    );
    assert!(dropped > 0, "the flood dropped lines");
}
