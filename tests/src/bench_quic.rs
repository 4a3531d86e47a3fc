//! `bench fed-mail-quic [N] [LOSS_PERCENT]`: cross-host agent mail (node B → hub → node C) with
//! every peer link over the WebSocket, then over QUIC, in one run: latency of `N` one-at-a-time
//! sends (send call → the recipient's `wait` returns) and the throughput of `4 * N` sends from
//! four concurrent senders. With `LOSS_PERCENT`, node C's link drops that share of packets in
//! both directions (`nft numgen random` in its namespace) while mail is measured.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::agent::Agent;
use crate::bench_fed::{receive, send_ok};
use crate::fed::FedBed;
use crate::percentile;

const T: Duration = Duration::from_secs(300);

/// Drops `percent` % of the packets on node C's veth, inside its namespace.
fn set_loss(bed: &FedBed, percent: u32) -> anyhow::Result<()> {
    let dev = bed.net.node_if(1);
    let rules = format!(
        "table inet bench {{\n chain input {{ type filter hook input priority 0; policy accept; iifname \"{dev}\" numgen random mod 100 < {percent} drop; }}\n chain output {{ type filter hook output priority 0; policy accept; oifname \"{dev}\" numgen random mod 100 < {percent} drop; }}\n}}\n"
    );
    let path = bed.nodes[1].dir.path().join("bench-loss.nft");
    std::fs::write(&path, rules)?;
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &bed.nodes[1].ns, "nft", "-f"])
        .arg(&path)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "nft (apt-get install nftables): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// One transport's figures: latency p50, p99 (ms), throughput (msg/s).
async fn measure(transport: &str, n: usize, loss: u32) -> anyhow::Result<(f64, f64, f64)> {
    let bed = FedBed::start_with_hub(2, json!({}), json!({"hub": {"transport": transport}}), None)
        .await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = bed.connections().await?;
        if rows
            .iter()
            .all(|c| c["peer_link_up"] == true && c["transport"] == transport)
        {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the peer links are not all up over {transport}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (b_sock, c_sock) = (
        bed.nodes[0].proc().socket.clone(),
        bed.nodes[1].proc().socket.clone(),
    );
    let (mut carol, tcarol) = Agent::new(&c_sock, "carol").await;
    let mut senders = Vec::new();
    for i in 0..4 {
        senders.push(Agent::new(&b_sock, &format!("bob{i}")).await.0);
    }
    let to = format!("{}/{tcarol}", bed.nodes[1].id);
    senders[0].sees(&to, Duration::from_secs(30)).await;
    if loss > 0 {
        set_loss(&bed, loss)?;
    }
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let body = format!("lat-{i}");
        let t0 = Instant::now();
        let (sent, got) = tokio::join!(
            send_ok(&mut senders[0], &to, &body),
            receive(&mut carol, 1, T)
        );
        sent?;
        lat.push(got?.0[0].1.duration_since(t0).as_secs_f64() * 1e3);
    }
    let total = 4 * n;
    let start = Instant::now();
    let collector = tokio::spawn(async move { receive(&mut carol, total, T).await });
    let mut sends = Vec::new();
    for (k, mut s) in senders.into_iter().enumerate() {
        let to = to.clone();
        sends.push(tokio::spawn(async move {
            for i in 0..n {
                send_ok(&mut s, &to, &format!("tp-{k}-{i}")).await?;
            }
            anyhow::Ok(())
        }));
    }
    for h in sends {
        h.await??;
    }
    let (got, _) = collector.await??;
    let secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(got.len() == total, "received {} of {total}", got.len());
    Ok((
        percentile(&mut lat, 0.5),
        percentile(&mut lat, 0.99),
        total as f64 / secs,
    ))
}

/// Runs the comparison and prints one line per transport.
pub async fn mail(n: usize, loss: u32) -> anyhow::Result<()> {
    println!(
        "fed-mail-quic: agents on node B -> agent on node C through the hub, {n} latency sends, {} throughput sends, {loss}% loss on node C's link",
        4 * n
    );
    let mut rows = Vec::new();
    for t in ["websocket", "quic"] {
        let (p50, p99, tput) = measure(t, n, loss).await?;
        println!("  {t:<10} latency p50 {p50:.3} ms  p99 {p99:.3} ms | {tput:.0} msg/s");
        rows.push((p50, p99, tput));
    }
    println!(
        "  quic/websocket: latency p50 {:.2}x p99 {:.2}x, throughput {:.2}x",
        rows[1].0 / rows[0].0,
        rows[1].1 / rows[0].1,
        rows[1].2 / rows[0].2
    );
    Ok(())
}
