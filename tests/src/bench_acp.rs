//! `bench acp-stream [CHUNKS] [STAMPED] [IDLE]`: ACP turns through a real node with the SDK
//! test agent (`clients/acp_test_agent.py`). Chunk → WebSocket latency (the agent stamps each
//! chunk with its send time, the reader subtracts on arrival; same clock), a CHUNKS-chunk turn
//! journaled and delivered (chunks/s from the prompt to the reader's `turn_end`) from the SDK
//! agent and from the flood agent (`clients/acp_flood_agent.py`: the handshake by hand, then
//! pre-serialized lines as fast as it can write, so the figure is the node's), and the
//! node's RSS per idle connection (IDLE connections launched and ready, RSS before and after;
//! the agents' own processes are not the node's).

use std::time::Instant;

use anyhow::Context;
use serde_json::{Value, json};

use crate::acp::{Bed, agent_config, is, next, start_node, until};
use crate::{clients_dir, config_dir, percentile, sdk_clients};

/// A CHUNKS-chunk turn of connection `id` journaled and delivered to a live reader:
/// (seconds from the prompt to the reader's `turn_end`, WebSocket messages, text bytes).
async fn turn(bed: &Bed, id: &str, chunks: usize) -> anyhow::Result<(f64, usize, usize)> {
    // A fresh connection is read from its start up to `ready`; one that has had turns from its
    // newest frame (a replayed `turn_end` must not end this one).
    let (_, snap) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    let mut ws = if snap["state"] == "starting" {
        let mut ws = bed.stream(id, 0).await?;
        until(&mut ws, |f| is(f, "ready")).await?;
        ws
    } else {
        bed.stream(id, snap["last_seq"].as_u64().unwrap_or(0))
            .await?
    };
    let t0 = Instant::now();
    bed.prompt(id, &format!("flood {chunks}")).await;
    let mut messages = 0usize;
    let mut text = 0usize;
    loop {
        let f: Value = next(&mut ws).await?.context("stream closed")?;
        if is(&f, "turn_end") {
            break;
        }
        if is(&f, "update") {
            messages += 1;
            text += f["update"]["content"]["text"].as_str().map_or(0, str::len);
        }
    }
    Ok((t0.elapsed().as_secs_f64(), messages, text))
}

/// `bench acp-stream`.
pub async fn stream(chunks: usize, stamped: usize, idle: usize) -> anyhow::Result<()> {
    let mut cfg = agent_config(json!({"journal_max_bytes": 64 << 20}));
    cfg["acp_agents"]
        .as_array_mut()
        .context("acp_agents")?
        .push(json!({
            "name": "flood",
            "command": sdk_clients().python,
            "args": [clients_dir().join("acp_flood_agent.py").display().to_string()],
        }));
    let dir = config_dir(cfg);
    let node = start_node(dir.path(), false);
    let bed = Bed::with(dir, node).await;
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

    drop(ws);
    // Throughput: a CHUNKS-chunk turn, journaled and delivered to a live reader, from the SDK
    // agent (bound by its own per-chunk serialization) and from the flood agent.
    let (secs, messages, text) = turn(&bed, &id, chunks).await?;
    println!(
        "acp-stream turn (SDK agent): {chunks} chunks journaled and delivered in {secs:.2} s = {:.0} chunks/s ({messages} WebSocket messages after coalescing, {text} text bytes)",
        chunks as f64 / secs
    );
    let (s, v) = bed
        .call(
            "POST",
            "/acp/connections",
            Some(json!({"agent": "flood", "cwd": bed.repo.display().to_string()})),
        )
        .await;
    anyhow::ensure!(s == 201, "launching the flood agent: {v}");
    let flood = v["id"].as_str().context("id")?.to_owned();
    let (secs, messages, text) = turn(&bed, &flood, chunks).await?;
    println!(
        "acp-stream turn (flood agent): {chunks} chunks journaled and delivered in {secs:.3} s = {:.0} chunks/s ({messages} WebSocket messages after coalescing, {text} text bytes)",
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
