//! Benchmark workload `notify`: (1) event → channel POST latency: `POST /notifications/test`
//! over IPC raises a notification, a local webhook receiver timestamps its arrival (p50/p99,
//! issue 49's target p99 ≤ 50 ms); (2) a flood: N notifications at 1,000/s through the
//! coalescer, the node's RSS before and after (it must not grow with N).

use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::json;
use tokio::sync::mpsc;

use crate::{NodeProc, config_dir, ipc, percentile, rss_bytes};

/// A receiver that reports each request's arrival time and body.
async fn receiver() -> anyhow::Result<(
    std::net::SocketAddr,
    mpsc::UnboundedReceiver<(Instant, Bytes)>,
)> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((sock, _)) = l.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let tx = tx.clone();
                        async move {
                            let at = Instant::now();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let _ = tx.send((at, body));
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::new(),
                            )))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    Ok((addr, rx))
}

/// Runs both parts: `n` latency samples, `flood` notifications at 1,000/s.
pub async fn run(n: usize, flood: usize) -> anyhow::Result<()> {
    let (addr, mut rx) = receiver().await?;
    let d = config_dir(json!({"notifications": {
        "coalesce_ms": 0,
        "webhook": {"url": format!("http://{addr}/hook")},
    }}));
    let node = NodeProc::start(
        "tuic-node",
        &["--config-dir", d.path().to_str().context("utf-8")?],
        &[],
    )?;
    // Warm up: the webhook key is created in the vault on first use.
    ipc(&node.socket, "POST", "/notifications/test", None).await?;
    tokio::time::timeout(Duration::from_secs(10), rx.recv()).await?;
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = ipc(&node.socket, "POST", "/notifications/test", None).await?;
        anyhow::ensure!(r.status == 200, "test notification: {}", r.status);
        let (at, _) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .with_context(|| {
                format!(
                    "sample {}: no webhook POST within 10 s; {}",
                    ms.len(),
                    String::from_utf8_lossy(&r.body)
                )
            })?
            .context("receiver closed")?;
        ms.push(at.duration_since(t).as_secs_f64() * 1000.0);
    }
    let p50 = percentile(&mut ms, 0.50);
    let p99 = percentile(&mut ms, 0.99);
    println!("notify event→webhook POST: n={n} p50={p50:.2} ms p99={p99:.2} ms");
    drop(node);

    // The flood, coalesced: one session-less group, a 30 s window.
    let (addr, mut rx) = receiver().await?;
    let d = config_dir(json!({"notifications": {
        "coalesce_ms": 30000,
        "webhook": {"url": format!("http://{addr}/hook")},
    }}));
    let node = NodeProc::start(
        "tuic-node",
        &["--config-dir", d.path().to_str().context("utf-8")?],
        &[],
    )?;
    let pace = |i: usize, start: Instant| start + Duration::from_micros(1000 * i as u64);
    let round = |count: usize| {
        let socket = node.socket.clone();
        async move {
            let start = Instant::now();
            let mut tasks = Vec::with_capacity(count);
            for i in 0..count {
                tokio::time::sleep_until(pace(i, start).into()).await;
                let socket = socket.clone();
                tasks.push(tokio::spawn(async move {
                    ipc(&socket, "POST", "/notifications/test", None).await
                }));
            }
            for t in tasks {
                t.await??;
            }
            anyhow::Ok(start.elapsed())
        }
    };
    // A first round of the same size warms the allocator's arenas and the connection
    // machinery; the second shows whether the coalescer itself grows.
    round(flood).await?;
    let before = rss_bytes(node.pid());
    let mut took = Duration::ZERO;
    let mut after = before;
    let mut trail = Vec::new();
    for _ in 0..3 {
        took = round(flood).await?;
        after = rss_bytes(node.pid());
        trail.push(format!("{:.1}", after as f64 / 1048576.0));
    }
    println!(
        "notify flood: RSS after each further round: {} MiB",
        trail.join(" → ")
    );
    let mut sent = 0;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        sent += 1;
    }
    println!(
        "notify flood: {flood} in {:.2} s ({:.0}/s), {sent} webhook POSTs, RSS {:.1} → {:.1} MiB ({:+.1} MiB)",
        took.as_secs_f64(),
        flood as f64 / took.as_secs_f64(),
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        (after as f64 - before as f64) / 1048576.0
    );
    Ok(())
}
