//! What one request may cost a real `tuic-node`: terminal sizes are capped on every create
//! and resize path, the node's live screens share a cell budget, an ended session's memory
//! goes back to the OS, and JSON-RPC batches are refused where the protocol removed them and
//! capped where it still has them. Memory is the node's `VmRSS` from `/proc/<pid>/status`.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use hyper::StatusCode;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tuic_proto::screen::{ClientFrame, ServerFrame};
use tuic_tests::term::Node;

const MB: u64 = 1024 * 1024;

/// The node's resident set, in bytes.
fn rss(node: &Node) -> u64 {
    tuic_tests::rss_bytes(node.pid().expect("running"))
}

/// Waits (bounded) until the node's RSS is at most `limit`; returns the last reading. The
/// allocator returns freed pages on its own decay clock (about a second), so there is no
/// event to await: the reading itself is the condition.
async fn rss_settles_below(node: &Node, limit: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = rss(node);
        if now <= limit || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn shell(rows: u16, cols: u16) -> Value {
    json!({"rows": rows, "cols": cols, "shell": "/bin/sh", "cwd": "/tmp"})
}

/// Deletes a session and waits until it is no longer live.
async fn delete(node: &Node, id: &str) {
    node.ok("DELETE", &format!("/sessions/{id}"), None)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = node.ok("GET", "/sessions", None).await.unwrap();
        if !rows
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["session_id"] == id)
        {
            return;
        }
        assert!(Instant::now() < deadline, "{id} did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_huge_create_is_refused_and_an_ended_big_session_gives_its_memory_back() {
    let node = Node::start(None).await.unwrap();
    // Warm the create path (threads, the monitor) so the baseline is the steady state.
    let warm = node.create(shell(24, 80)).await.unwrap();
    delete(&node, warm["session_id"].as_str().unwrap()).await;
    let before = rss(&node);

    // 4096 × 4096 (the old cap; ~800 MB of grid) is refused and costs nothing.
    let a = node
        .http("POST", "/sessions", Some(shell(4096, 4096)))
        .await
        .unwrap();
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.json()["code"], "size_limit", "{}", a.json());
    assert!(a.json()["error"].as_str().unwrap().contains("1000"));
    for (r, c) in [(1001, 10), (10, 1001), (0, 80)] {
        let a = node
            .http("POST", "/sessions", Some(shell(r, c)))
            .await
            .unwrap();
        assert_eq!(a.json()["code"], "size_limit", "{r}x{c}");
    }

    // 1,000 × 1,000 is allowed and really costs memory...
    let big = node.create(shell(1000, 1000)).await.unwrap();
    let id = big["session_id"].as_str().unwrap().to_owned();
    let held = rss(&node);
    assert!(
        held > before + 30 * MB,
        "a 1000x1000 screen should cost tens of MB: {} -> {} MB",
        before / MB,
        held / MB
    );
    // ...and gives it back when it ends, while its tombstone still answers.
    delete(&node, &id).await;
    let after = rss_settles_below(&node, before + 10 * MB).await;
    assert!(
        after <= before + 10 * MB,
        "RSS {} MB before, {} MB with the session, {} MB after it ended",
        before / MB,
        held / MB,
        after / MB
    );
    let tomb = node
        .ok("GET", &format!("/sessions/{id}/terminal/snapshot"), None)
        .await
        .unwrap();
    assert_eq!(tomb["rows"], 1000);
}

#[tokio::test]
async fn live_screens_share_a_cell_budget_on_every_create_and_resize_path() {
    let node = Node::start(None).await.unwrap();
    let small = node.create(shell(24, 80)).await.unwrap();
    let small = small["session_id"].as_str().unwrap().to_owned();
    // Three full-size screens and a quarter-size one fit beside the small one (3,251,920 of
    // 4,000,000 cells); a fourth full-size one does not.
    let mut big = Vec::new();
    for (rows, cols) in [(1000, 1000), (1000, 1000), (1000, 1000), (500, 500)] {
        let c = node.create(shell(rows, cols)).await.unwrap();
        big.push(c["session_id"].as_str().unwrap().to_owned());
    }
    let a = node
        .http("POST", "/sessions", Some(shell(1000, 1000)))
        .await
        .unwrap();
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.json());
    assert_eq!(a.json()["code"], "cell_budget");

    // Growing a session past the budget is refused on every resize path, and changes nothing.
    let a = node
        .http(
            "POST",
            &format!("/sessions/{small}/resize"),
            Some(json!({"rows": 1000, "cols": 1000})),
        )
        .await
        .unwrap();
    assert_eq!(
        (a.status, a.json()["code"].clone()),
        (StatusCode::SERVICE_UNAVAILABLE, json!("cell_budget"))
    );
    let a = node
        .http(
            "POST",
            &format!("/sessions/{small}/resize"),
            Some(json!({"rows": 4096, "cols": 4096})),
        )
        .await
        .unwrap();
    assert_eq!(
        (a.status, a.json()["code"].clone()),
        (StatusCode::BAD_REQUEST, json!("size_limit"))
    );
    let mcp = |rows: u16, cols: u16| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "session",
            "arguments": {"action": "resize", "session_id": small, "rows": rows, "cols": cols}}})
    };
    for ((rows, cols), code) in [((4096, 4096), "size_limit"), ((1000, 1000), "cell_budget")] {
        let a = node
            .ok("POST", "/mcp", Some(mcp(rows, cols)))
            .await
            .unwrap();
        assert_eq!(a["result"]["isError"], true, "{a}");
        let body: Value =
            serde_json::from_str(a["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(body["code"], code, "{body}");
    }
    // The screen-sync stream (what `tuic attach` and the web view send) says why in a frame.
    let mut ws = node.ws(&small, "?mode=screen").await.unwrap();
    let f = ClientFrame::Resize {
        rows: 1000,
        cols: 1000,
        apply: true,
    };
    ws.send(Message::Text(serde_json::to_string(&f).unwrap().into()))
        .await
        .unwrap();
    let refused = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(m) = ws.next().await {
            if let Message::Text(t) = m.unwrap()
                && let Ok(ServerFrame::Refused { code, message }) = serde_json::from_str(&t)
            {
                return (code, message);
            }
        }
        panic!("stream closed without a refusal");
    })
    .await
    .expect("a refused frame");
    assert_eq!(refused.0, "cell_budget", "{}", refused.1);
    let size = node
        .ok(
            "GET",
            &format!("/sessions/{small}/terminal/scroll-info"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(size["screen_lines"], 24);

    // An ended session returns its cells: the refused create now fits.
    delete(&node, &big[0]).await;
    node.create(shell(1000, 1000)).await.unwrap();
}

fn tools_list(i: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": i, "method": "tools/list"})
}

#[tokio::test]
async fn json_rpc_batches_are_refused_where_removed_and_capped_where_allowed() {
    let node = Node::start(None).await.unwrap();
    // A batch of 100 from a 2025-03-26 client (no revision header: the transport's assumed
    // revision) is answered member by member.
    let batch: Vec<Value> = (0..100).map(tools_list).collect();
    let a = node.ok("POST", "/mcp", Some(json!(batch))).await.unwrap();
    assert_eq!(a.as_array().unwrap().len(), 100);
    let before = rss(&node);

    // 10,000 entries (~0.5 MB of body; it used to answer 193 MB) are refused whole.
    let batch: Vec<Value> = (0..10_000).map(tools_list).collect();
    let a = node.http("POST", "/mcp", Some(json!(batch))).await.unwrap();
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let body = a.json();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("100"));
    assert!(a.body.len() < 1024, "the refusal is small");
    let after = rss(&node);
    assert!(
        after <= before + 10 * MB,
        "RSS moved from {} to {} MB",
        before / MB,
        after / MB
    );

    // A revision that removed batching refuses even a small one.
    let c = node.client();
    for rev in ["2025-06-18", "2025-11-25"] {
        let a = c
            .http_with_headers(
                "POST",
                "/mcp",
                Some(json!([tools_list(1), tools_list(2)])),
                &[("mcp-protocol-version", rev)],
            )
            .await
            .unwrap();
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{rev}");
        assert_eq!(a.json()["error"]["code"], -32600, "{rev}");
        assert!(
            a.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("removed"),
            "{rev}"
        );
    }
}
