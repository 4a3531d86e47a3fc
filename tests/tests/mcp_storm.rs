//! End-to-end: an `initialize` storm stays bounded, the reaper frees the sessions when their
//! TTL is shortened through the config's tuning keys, and the table cap evicts the oldest idle
//! sessions first (never one with a `GET /mcp` stream) while an evicted id auto-recovers.

mod mcp_support;

use std::time::{Duration, Instant};

use mcp_support::NodeProc;
use serde_json::json;

const STORM: usize = 10_000;
/// The bound of issue 14 (tighter than the API clarifications' 3 MB; the upstream daemon
/// grows 2.96 MB): < 2 MB RSS growth per 10,000 initializes.
const MAX_GROWTH: u64 = 2 * 1000 * 1000;

#[tokio::test]
async fn ten_thousand_initializes_stay_under_two_megabytes() {
    let node = NodeProc::start(json!({})).await;
    let mut c = node.connect().await;
    let msg = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"storm","version":"1"}}});
    // Warm up allocator arenas and the log ring (bounded at 2,000 records) first.
    for _ in 0..2_500 {
        assert_eq!(c.rpc(&msg, &[]).await.status, 200);
    }
    let before = node.rss_bytes();
    let t = Instant::now();
    for _ in 0..STORM {
        assert_eq!(c.rpc(&msg, &[]).await.status, 200);
    }
    let elapsed = t.elapsed();
    let after = node.rss_bytes();
    let growth = after.saturating_sub(before);
    eprintln!(
        "initialize storm: {STORM} in {:.2}s, rss {before} -> {after} (+{growth} bytes)",
        elapsed.as_secs_f64()
    );
    let st = c.send("GET", "/mcp/status", &[], "").await.json();
    assert_eq!(st["sessions"]["sessions"], STORM + 2_500);
    assert!(growth < MAX_GROWTH, "rss grew {growth} bytes");
}

#[tokio::test]
async fn reaper_frees_sessions_when_ttl_is_shortened() {
    let node =
        NodeProc::start(json!({"tuning": {"mcp_session_ttl_ms": 200, "mcp_reap_interval_ms": 50}}))
            .await;
    let mut c = node.connect().await;
    for i in 0..1_000 {
        let r = c
            .rpc(
                &json!({"jsonrpc":"2.0","id":i,"method":"initialize","params":{}}),
                &[],
            )
            .await;
        assert_eq!(r.status, 200);
    }
    // The reaper runs on its own timer: wait for its effect, bounded.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = c.send("GET", "/mcp/status", &[], "").await.json();
        if st["sessions"]["sessions"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "sessions not reaped: {st}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs = c.send("GET", "/logs?source=mcp", &[], "").await.json();
    assert!(logs.to_string().contains("mcp reaper sweep"), "{logs}");
}

fn init_msg() -> serde_json::Value {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"cap","version":"1"}}})
}

#[tokio::test]
async fn session_cap_evicts_the_oldest_idle_sessions_and_an_evicted_id_recovers() {
    let node = NodeProc::start(json!({"tuning": {"mcp_session_cap": 5}})).await;
    let mut c = node.connect().await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        let r = c.rpc(&init_msg(), &[]).await;
        assert_eq!(r.status, 200);
        ids.push(r.session().unwrap());
    }
    // The oldest session holds a GET /mcp stream; the second oldest is used again.
    let mut sc = node.connect().await;
    let stream = sc
        .send_head(
            "GET",
            "/mcp",
            &[("accept", "text/event-stream"), ("mcp-session-id", &ids[0])],
            "",
        )
        .await;
    assert_eq!(stream.status(), 200);
    let ping = json!({"jsonrpc":"2.0","id":2,"method":"ping"});
    let r = c.rpc(&ping, &[("mcp-session-id", &ids[1])]).await;
    assert_eq!(r.json()["result"], json!({}));

    // Two more sessions: the two oldest idle ones (ids[2], ids[3]) make room.
    for _ in 0..2 {
        assert_eq!(c.rpc(&init_msg(), &[]).await.status, 200);
    }
    let st = c.send("GET", "/mcp/status", &[], "").await.json();
    assert_eq!(st["sessions"]["sessions"], 5, "{st}");
    assert_eq!(st["sessions"]["evicted"], 2, "{st}");
    assert_eq!(st["sessions"]["streams"], 1, "{st}");
    // DELETE of an id the table no longer holds answers 404 and changes nothing.
    for gone in &ids[2..4] {
        let r = c
            .send("DELETE", "/mcp", &[("mcp-session-id", gone)], "")
            .await;
        assert_eq!(r.status, 404, "{} should be evicted", gone);
    }

    // An evicted id is not refused: the next request with it auto-recovers, as after a
    // TTL reap (and the recovered session in turn pushes out the oldest idle one, ids[4]).
    let call = json!({"jsonrpc":"2.0","id":3,"method":"tools/list"});
    let r = c.rpc(&call, &[("mcp-session-id", &ids[2])]).await;
    assert_eq!(r.status, 200);
    assert!(r.json()["result"]["tools"].is_array(), "{}", r.json());
    let logs = c.send("GET", "/logs?source=mcp", &[], "").await.json();
    let text = logs.to_string();
    assert!(
        text.contains("mcp session cap evicted idle sessions"),
        "{logs}"
    );
    assert!(
        text.contains("recovered a stale protocol session") && text.contains(&ids[2]),
        "{logs}"
    );
    let st = c.send("GET", "/mcp/status", &[], "").await.json();
    assert_eq!(st["sessions"]["evicted"], 3, "{st}");
    let r = c
        .send("DELETE", "/mcp", &[("mcp-session-id", &ids[4])], "")
        .await;
    assert_eq!(r.status, 404);
    // The refreshed and the streaming sessions are still live.
    for kept in [&ids[1], &ids[0]] {
        let r = c
            .send("DELETE", "/mcp", &[("mcp-session-id", kept)], "")
            .await;
        assert_eq!(r.status, 200, "{kept} should still be live");
    }
    drop(stream);
}
