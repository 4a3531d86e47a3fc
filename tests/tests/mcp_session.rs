//! End-to-end: MCP `session` against a real `tuic-node` over its IPC socket, on real PTYs —
//! the atomic submission contract (receipt for an idle shell, refusal before the first byte for
//! a half-typed or busy one), identity binding (`x-tuic-session` → `is_caller`), and the
//! tombstone after close.

mod mcp_support;

use std::time::{Duration, Instant};

use mcp_support::{Conn, NodeProc, tool_value};
use serde_json::{Value, json};

async fn call(c: &mut Conn, args: Value, headers: &[(&str, &str)]) -> (bool, Value) {
    let r = c
        .rpc(
            &json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
                    "params":{"name":"session","arguments":args}}),
            headers,
        )
        .await;
    assert_eq!(r.status, 200);
    let is_error = r.json()["result"]["isError"] == json!(true);
    (is_error, tool_value(&r))
}

async fn ok(c: &mut Conn, args: Value) -> Value {
    let (err, v) = call(c, args.clone(), &[]).await;
    assert!(!err, "{args}: {v}");
    v
}

/// The raw bytes the PTY produced so far (source of truth for "nothing was written").
async fn raw(c: &mut Conn, id: &str) -> String {
    ok(
        c,
        json!({"action":"output","session_id":id,"format":"raw","from_byte":0}),
    )
    .await["data"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn wait_idle(c: &mut Conn, id: &str) {
    let w = ok(
        c,
        json!({"action":"wait","session_id":id,"until":"idle","timeout_ms":10_000}),
    )
    .await;
    assert_eq!(w["reached"], true, "{w}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_receipts_refusals_identity_and_tombstone() {
    let node = NodeProc::start(json!({})).await;
    let mut c = node.connect().await;
    let created = ok(
        &mut c,
        json!({"action":"create","shell":"/bin/sh","cwd":node.dir.path()}),
    )
    .await;
    let id = created["session_id"].as_str().unwrap().to_owned();
    let tuic = created["tuic_session"].as_str().unwrap().to_owned();

    // A protocol session bound to the PTY's identity sees itself as the caller.
    let init = c
        .rpc(
            &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
                "protocolVersion":"2025-11-25","capabilities":{},
                "clientInfo":{"name":"e2e","version":"1"}}}),
            &[("x-tuic-session", &tuic)],
        )
        .await;
    let sid = init.session().unwrap();
    let (_, l) = call(
        &mut c,
        json!({"action":"list"}),
        &[("mcp-session-id", &sid)],
    )
    .await;
    assert_eq!(l["sessions"][0]["is_caller"], true, "{l}");
    let (_, l) = call(&mut c, json!({"action":"list"}), &[]).await;
    assert_eq!(l["sessions"][0]["is_caller"], false, "{l}");

    // Idle shell: a receipt.
    wait_idle(&mut c, &id).await;
    let r = ok(
        &mut c,
        json!({"action":"submit","session_id":id,"input":"echo receipt-$((20+3))","timeout_ms":5000}),
    )
    .await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["ack"], "output", "{r}");
    assert_eq!(r["retry_safe"], false, "{r}");
    assert_eq!(r["turn_epoch"], 1, "{r}");

    // Half-typed composer: refused, and the submitted text never reaches the PTY.
    wait_idle(&mut c, &id).await;
    ok(
        &mut c,
        json!({"action":"input","session_id":id,"input":"echo half"}),
    )
    .await;
    let (err, e) = call(
        &mut c,
        json!({"action":"submit","session_id":id,"input":"echo never-1"}),
        &[],
    )
    .await;
    assert!(err, "{e}");
    assert_eq!(e["code"], "busy", "{e}");
    assert_eq!(e["retry_safe"], true, "{e}");
    ok(
        &mut c,
        json!({"action":"input","session_id":id,"special_key":"ctrl-u"}),
    )
    .await;

    // Busy shell (a foreground job): refused before the first byte as well.
    wait_idle(&mut c, &id).await;
    ok(
        &mut c,
        json!({"action":"input","session_id":id,"input":"sleep 30","special_key":"enter"}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (err, e) = call(
            &mut c,
            json!({"action":"submit","session_id":id,"input":"echo never-2"}),
            &[],
        )
        .await;
        assert!(err, "a busy shell accepted a submission: {e}");
        assert_eq!(e["code"], "busy", "{e}");
        if e["reason"].as_str().unwrap().contains("foreground") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never saw the foreground job: {e}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all = raw(&mut c, &id).await;
    assert!(
        !all.contains("never-"),
        "refused input reached the PTY: {all:?}"
    );
    assert_eq!(
        ok(&mut c, json!({"action":"status","session_id":id})).await["turn_epoch"],
        1
    );

    // close → exited; output keeps answering from the tombstone; the row leaves the list.
    ok(&mut c, json!({"action":"close","session_id":id})).await;
    let w = ok(
        &mut c,
        json!({"action":"wait","session_id":id,"until":"exited","timeout_ms":10_000}),
    )
    .await;
    assert_eq!(w["exited"], true, "{w}");
    let out = ok(&mut c, json!({"action":"output","session_id":id})).await;
    assert_eq!(out["exited"], true, "{out}");
    assert_eq!(ok(&mut c, json!({"action":"list"})).await["count"], 0);
}
