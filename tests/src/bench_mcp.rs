//! `bench mcp-resource-read`: MCP `resources/read` of a full 200×50 screen
//! (`tuic://sessions/{id}/screen`) over IPC on one kept-alive connection, as the bridge holds
//! its own, with `GET /health` on the same connection as the floor. Not a timed test: the
//! figures go to docs/benchmarks.md.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{Value, json};

use crate::percentile;
use crate::term::Node;

/// Runs `reads` screen reads (after a warm-up) and prints p50/p99 of each.
pub async fn resource_read(reads: usize) -> anyhow::Result<()> {
    let node = Node::start(None).await?;
    let made = node
        .create(json!({"rows": 50, "cols": 200, "shell": "/bin/sh", "cwd": "/tmp"}))
        .await?;
    let id = made["session_id"]
        .as_str()
        .or_else(|| made["id"].as_str())
        .context("session id")?
        .to_owned();
    node.write(&id, "for i in $(seq 60); do printf '%0199d\\n' $i; done\n")
        .await?;
    let s = tokio::net::UnixStream::connect(&node.socket).await?;
    let (mut send, c) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s)).await?;
    tokio::spawn(c);
    let uri = format!("tuic://sessions/{id}/screen");
    let read = Bytes::from(
        json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri}})
            .to_string(),
    );
    // The screen is full once its last row shows 60.
    let full = format!("{:0199}", 60);
    let deadline = Instant::now() + Duration::from_secs(20);
    let bytes = loop {
        let got = one(&mut send, "POST", "/mcp", read.clone()).await?;
        let v: Value = serde_json::from_slice(&got)?;
        let text = v["result"]["contents"][0]["text"].as_str().unwrap_or("");
        if text.contains(&full) {
            break got.len();
        }
        if Instant::now() > deadline {
            bail!("screen never filled: {v}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (mut health, mut reads_ms) = (Vec::with_capacity(reads), Vec::with_capacity(reads));
    for i in 0..reads * 2 {
        let t0 = Instant::now();
        if i % 2 == 0 {
            one(&mut send, "GET", "/health", Bytes::new()).await?;
            health.push(t0.elapsed().as_secs_f64() * 1e3);
        } else {
            one(&mut send, "POST", "/mcp", read.clone()).await?;
            reads_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    println!("mcp-resource-read screen=200x50 reads={reads} answer={bytes} bytes");
    for (what, v) in [
        ("GET /health, kept-alive (floor)", &mut health),
        (
            "resources/read tuic://sessions/{id}/screen, kept-alive",
            &mut reads_ms,
        ),
    ] {
        let (p50, p99) = (percentile(v, 0.5), percentile(v, 0.99));
        println!("  {what}: p50 {p50:.3} ms  p99 {p99:.3} ms");
    }
    Ok(())
}

/// One request on the kept-alive connection; the body of a 200.
async fn one(
    send: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    method: &str,
    path: &str,
    body: Bytes,
) -> anyhow::Result<Bytes> {
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Full::new(body))?;
    send.ready().await?;
    let r = send.send_request(req).await?;
    if r.status() != 200 {
        bail!("{method} {path}: {}", r.status());
    }
    Ok(r.into_body().collect().await?.to_bytes())
}
