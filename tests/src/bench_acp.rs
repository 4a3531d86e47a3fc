//! `bench acp-stream [CHUNKS] [STAMPED] [IDLE]`: ACP turns through a real node with the SDK
//! test agent (`clients/acp_test_agent.py`). Chunk → WebSocket latency (the agent stamps each
//! chunk with its send time, the reader subtracts on arrival; same clock), a CHUNKS-chunk turn
//! journaled and delivered (chunks/s from the prompt to the reader's `turn_end`), and the
//! node's RSS per idle connection (IDLE connections launched and ready, RSS before and after;
//! the agents' own processes are not the node's).

use std::time::Instant;

use anyhow::Context;
use serde_json::{Value, json};

use crate::acp::{Bed, is, next, until};
use crate::percentile;

/// `bench acp-stream`.
pub async fn stream(chunks: usize, stamped: usize, idle: usize) -> anyhow::Result<()> {
    let bed = Bed::start(json!({"journal_max_bytes": 64 << 20})).await;
    let id = bed.launch().await;
    let mut ws = bed.stream(&id, 0).await?;
    until(&mut ws, |f| is(f, "ready")).await?;

    // Latency: one chunk at a time, 1 ms apart, so no reader backlog coalesces them.
    bed.prompt(&id, &format!("stamp {stamped}")).await;
    let mut lat = Vec::with_capacity(stamped);
    loop {
        let f = next(&mut ws).await?.context("stream closed")?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as f64;
        if is(&f, "turn_end") {
            break;
        }
        if let Some(t) = f["update"]["content"]["text"].as_str() {
            for stamp in t.split('|').filter_map(|s| s.parse::<f64>().ok()) {
                lat.push((now - stamp) / 1e6);
            }
        }
    }
    let (p50, p99) = (percentile(&mut lat, 0.5), percentile(&mut lat, 0.99));
    println!(
        "acp-stream latency: {} chunks, agent send → WebSocket receive p50 {p50:.3} ms, p99 {p99:.3} ms",
        lat.len()
    );

    // Throughput: a CHUNKS-chunk turn, journaled and delivered to a live reader.
    let t0 = Instant::now();
    bed.prompt(&id, &format!("flood {chunks}")).await;
    let mut messages = 0usize;
    let mut text = 0usize;
    loop {
        let f: Value = next(&mut ws).await?.context("stream closed")?;
        if is(&f, "turn_end") {
            break;
        }
        messages += 1;
        text += f["update"]["content"]["text"].as_str().map_or(0, str::len);
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "acp-stream turn: {chunks} chunks journaled and delivered in {secs:.2} s = {:.0} chunks/s ({messages} WebSocket messages after coalescing, {text} text bytes)",
        chunks as f64 / secs
    );

    // Node RSS per idle connection.
    let pid = bed.node.pid();
    let before = crate::rss_bytes(pid);
    let mut streams = Vec::new();
    for _ in 0..idle {
        let id = bed.launch().await;
        let mut ws = bed.stream(&id, 0).await?;
        until(&mut ws, |f| is(f, "ready")).await?;
        streams.push(ws);
    }
    let after = crate::rss_bytes(pid);
    println!(
        "acp-stream idle: node RSS {:.1} MiB → {:.1} MiB with {idle} more idle connections (streams open) = {:.0} KiB per connection",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        (after.saturating_sub(before)) as f64 / 1024.0 / idle.max(1) as f64
    );
    Ok(())
}
