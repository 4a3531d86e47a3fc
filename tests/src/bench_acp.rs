//! `bench acp-stream [CHUNKS] [STAMPED] [IDLE]`: ACP turns through a real node with the SDK
//! test agent (`clients/acp_test_agent.py`), and the same node reached through a `tuic-hub`
//! (both on loopback, the hub connected to the node as `nodeb`).
//!
//! - Chunk → WebSocket latency: the agent stamps each chunk with its send time and the reader
//!   subtracts on arrival (same clock), STAMPED chunks 1 ms apart read on the node's socket,
//!   then STAMPED more read through the hub's relay; the hub's added latency is the difference
//!   of the two medians (and of the two p99s).
//! - A CHUNKS-chunk turn journaled and delivered (chunks/s from the prompt to the reader's
//!   `turn_end`) from the SDK agent and from the flood agent (`clients/acp_flood_agent.py`:
//!   the handshake by hand, then pre-serialized lines as fast as it can write, so the figure
//!   is the node's), with the journal's own count of frames as proof every chunk was kept.
//! - The node's RSS per idle connection: IDLE flood-agent connections launched and ready, each
//!   with its stream open, RSS before and after (the agents' own processes are not the node's).
//!
//! The node and the hub are stopped with SIGTERM at the end, so every agent is stopped too.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::acp::{Bed, agent_config_with_flood, is, next, stream_at, until};
use crate::term::Ws;
use crate::{NodeProc, percentile};

/// The connection id the hub knows the node by.
const HOST: &str = "nodeb";

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

/// Reads a `stamp` turn on `ws` up to its `turn_end`: milliseconds from each stamp to the
/// arrival of the message carrying it.
async fn stamps(ws: &mut Ws) -> anyhow::Result<Vec<f64>> {
    let mut lat = Vec::new();
    loop {
        let f = next(ws).await?.context("stream closed")?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as f64;
        if is(&f, "turn_end") {
            return Ok(lat);
        }
        if let Some(t) = f["update"]["content"]["text"].as_str() {
            for stamp in t.split('|').filter_map(|s| s.parse::<f64>().ok()) {
                lat.push((now - stamp) / 1e6);
            }
        }
    }
}

/// Waits (bounded) until the hub reports its connection to the node up.
async fn hub_up(hub: &NodeProc) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = crate::fed::connections(hub).await?;
        if c.iter().any(|c| c["id"] == HOST && c["up"] == true) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the hub's connection to the node never came up: {c:?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// One `stamp` turn of `id` read on `socket` at `address` (the id, or through the hub
/// `nodeb%2F<id>`), from the connection's newest frame: (p50, p99, samples).
async fn stamped_turn(
    bed: &Bed,
    socket: &Path,
    address: &str,
    id: &str,
    n: usize,
) -> anyhow::Result<(f64, f64, usize)> {
    let (_, snap) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    let mut ws = stream_at(socket, address, snap["last_seq"].as_u64().unwrap_or(0)).await?;
    bed.prompt(id, &format!("stamp {n}")).await;
    let mut lat = stamps(&mut ws).await?;
    anyhow::ensure!(!lat.is_empty(), "no stamped chunk arrived");
    Ok((
        percentile(&mut lat, 0.5),
        percentile(&mut lat, 0.99),
        lat.len(),
    ))
}

/// `bench acp-stream`.
pub async fn stream(chunks: usize, stamped: usize, idle: usize) -> anyhow::Result<()> {
    let mut cfg = agent_config_with_flood(json!({"journal_max_bytes": 64 << 20}));
    cfg["secret_store"] = json!("file");
    // A node with remote access on loopback (the hub dials it), and a hub connected to it.
    let (dir, node) = crate::bed::remote_proc("tuic-node", cfg, "0", &[]);
    let (_hub_dir, mut hub) = crate::bed::hub_connected_to(dir.path(), &node, HOST);
    let mut bed = Bed::with(dir, node).await;
    hub_up(&hub).await?;
    let id = bed.launch().await;
    let mut ws = bed.stream(&id, 0).await?;
    until(&mut ws, |f| is(f, "ready")).await?;
    drop(ws);
    println!(
        "acp-stream: node {} and hub {} on loopback (the hub relays {HOST}'s ACP routes and streams)",
        bed.node.tcp.context("node tcp")?,
        hub.tcp.context("hub tcp")?
    );

    // Latency: one chunk at a time, 1 ms apart, so no reader backlog coalesces them; the
    // local reader first, then a reader through the hub, on the same connection and agent.
    let hub_address = format!("{HOST}%2F{id}");
    let local = stamped_turn(&bed, &bed.node.socket, &id, &id, stamped).await?;
    let relayed = stamped_turn(&bed, &hub.socket, &hub_address, &id, stamped).await?;
    for (route, (p50, p99, n)) in [("local (node socket)", local), ("through the hub", relayed)] {
        println!(
            "acp-stream latency {route:<20}: {n} chunks, agent send → WebSocket receive p50 {p50:.3} ms, p99 {p99:.3} ms"
        );
    }
    println!(
        "acp-stream hub added latency: p50 {:+.3} ms, p99 {:+.3} ms",
        relayed.0 - local.0,
        relayed.1 - local.1
    );

    // Throughput: a CHUNKS-chunk turn, journaled and delivered to a live reader, from the SDK
    // agent (bound by its own per-chunk serialization) and from the flood agent.
    let (secs, messages, text) = turn(&bed, &id, chunks).await?;
    println!(
        "acp-stream turn (SDK agent): {chunks} chunks journaled and delivered in {secs:.3} s = {:.0} chunks/s ({messages} WebSocket messages after coalescing, {text} text bytes)",
        chunks as f64 / secs
    );
    let flood = bed.launch_agent("flood").await;
    let (_, before) = bed
        .call("GET", &format!("/acp/connections/{flood}"), None)
        .await;
    let (secs, messages, text) = turn(&bed, &flood, chunks).await?;
    let (_, after) = bed
        .call("GET", &format!("/acp/connections/{flood}"), None)
        .await;
    let journaled =
        after["last_seq"].as_u64().unwrap_or(0) - before["last_seq"].as_u64().unwrap_or(0);
    anyhow::ensure!(
        text == chunks,
        "the flood turn delivered {text} of {chunks} chunks' text"
    );
    println!(
        "acp-stream turn (flood agent): {chunks} chunks journaled and delivered in {secs:.3} s = {:.0} chunks/s ({messages} WebSocket messages after coalescing, {text} text bytes, {journaled} frames journaled)",
        chunks as f64 / secs
    );

    // Node RSS per idle connection (flood agents: the node holds the same per connection
    // whatever the agent, and they start in a fraction of the SDK agent's time).
    let pid = bed.node.pid();
    let before = crate::rss_bytes(pid);
    let mut streams = Vec::new();
    for _ in 0..idle {
        let idle_id = bed.launch_agent("flood").await;
        let mut ws = bed.stream(&idle_id, 0).await?;
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
    drop(streams);

    // Stop both processes gracefully: the node stops every agent's process group.
    hub.terminate().context("stopping the hub")?;
    let status = bed.node.terminate().context("stopping the node")?;
    anyhow::ensure!(status.success(), "the node exited with {status}");
    Ok(())
}
