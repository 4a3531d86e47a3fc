//! Federation benchmarks in namespaces: a remote session's stream and keystrokes through the
//! hub against the same node reached directly (its own socket), measured in the same run.
//!
//! `bench fed-stream [MiB]`, `bench fed-keystroke [N]`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::fed::FedBed;
use crate::records;
use crate::term::{Ws, read_until};

const T: Duration = Duration::from_secs(300);

async fn ws_at(socket: &Path, address: &str, query: &str) -> anyhow::Result<Ws> {
    let stream = tokio::net::UnixStream::connect(socket).await?;
    let url = format!(
        "ws://localhost/sessions/{}/stream{query}",
        address.replace('/', "%2F")
    );
    Ok(tokio_tungstenite::client_async(url, stream).await?.0)
}

/// The path a client takes to node B's session: directly or through the hub.
struct Route<'a> {
    name: &'static str,
    socket: &'a Path,
    address: String,
}

fn routes<'a>(bed: &'a FedBed, id: &str) -> [Route<'a>; 2] {
    [
        Route {
            name: "direct (node socket)",
            socket: &bed.nodes[0].proc().socket,
            address: id.to_owned(),
        },
        Route {
            name: "through the hub",
            socket: &bed.hub.socket,
            address: format!("{}/{id}", bed.nodes[0].id),
        },
    ]
}

/// Streams `cat` of a `mib` MiB file once per route; returns seconds per route.
pub async fn stream(mib: usize) -> anyhow::Result<()> {
    let size = mib << 20;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("payload.txt");
    std::fs::write(&file, records::payload(size, false, 17))?;
    let bed = FedBed::start(1).await?;
    println!("fed-stream payload={mib} MiB (node B in its namespace, hub in another)");
    let mut secs = Vec::new();
    for pass in 0..2 {
        let script = format!(
            "stty raw -echo; printf READY; read go; cat {}",
            file.display()
        );
        let id = bed
            .create_on_node(
                0,
                json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp", "args": ["-c", script]}),
            )
            .await?;
        bed.wait_listed(&format!("{}/{id}", bed.nodes[0].id), T)
            .await?;
        let route = &routes(&bed, &id)[pass];
        let mut ws = ws_at(route.socket, &route.address, "?binary=1&from_byte=0").await?;
        read_until(&mut ws, b"READY", T).await?;
        let start = Instant::now();
        ws.send(Message::Text("go\n".into())).await?;
        let mut n = 0usize;
        let mut exit = false;
        while let Some(m) = tokio::time::timeout(T, ws.next()).await? {
            match m? {
                Message::Binary(b) => n += b.len(),
                Message::Text(t) if t.as_str().contains("\"exit\"") => exit = true,
                Message::Close(_) => break,
                _ => {}
            }
        }
        let s = start.elapsed().as_secs_f64();
        if n != size {
            bail!("{}: received {n} of {size} bytes", route.name);
        }
        println!(
            "  {:<22} {:.3} s  {:.1} MB/s  bytes={n} exact=true exit_frame={exit}",
            route.name,
            s,
            size as f64 / 1e6 / s
        );
        secs.push(s);
    }
    println!("  ratio (hub/direct throughput): {:.2}", secs[0] / secs[1]);
    Ok(())
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// `n` single-key round trips per route to a `cat` on node B.
pub async fn keystroke(n: usize) -> anyhow::Result<()> {
    let bed = FedBed::start(1).await?;
    let id = bed
        .create_on_node(
            0,
            json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp",
                "args": ["-c", "stty raw -echo; printf READY; exec cat"]}),
        )
        .await?;
    bed.wait_listed(&format!("{}/{id}", bed.nodes[0].id), T)
        .await?;
    println!("fed-keystroke round trips={n} (key -> [hub ->] node B PTY -> cat -> back)");
    let mut p = Vec::new();
    for route in routes(&bed, &id) {
        let mut ws = ws_at(route.socket, &route.address, "?binary=1&from_byte=0").await?;
        read_until(&mut ws, b"READY", T).await.context("READY")?;
        let mut v = Vec::with_capacity(n);
        for i in 0..n {
            let key = [b'a' + (i % 26) as u8];
            let t0 = Instant::now();
            ws.send(Message::Binary(key.to_vec().into())).await?;
            read_until(&mut ws, &key, T).await?;
            v.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        let (p50, p99) = (percentile(&mut v, 0.5), percentile(&mut v, 0.99));
        println!("  {:<22} p50 {p50:.3} ms  p99 {p99:.3} ms", route.name);
        p.push((p50, p99));
    }
    println!(
        "  ratios hub/direct: p50 {:.1}x  p99 {:.1}x",
        p[1].0 / p[0].0,
        p[1].1 / p[0].1
    );
    Ok(())
}
