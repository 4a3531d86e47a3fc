//! End-to-end: an `initialize` storm stays bounded, and the reaper frees the sessions when
//! their TTL is shortened through the config's tuning keys.

mod mcp_support;

use std::time::{Duration, Instant};

use mcp_support::NodeProc;
use serde_json::json;

const STORM: usize = 10_000;
/// The bound from the API clarifications: < 3 MB RSS growth per 10,000 initializes.
const MAX_GROWTH: u64 = 3 * 1000 * 1000;

#[tokio::test]
async fn ten_thousand_initializes_stay_under_three_megabytes() {
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
