//! `bench fed-mail-quic [N] [LOSS_PERCENT]`: cross-host agent mail (node B → hub → node C) with
//! every peer link over the WebSocket, then over QUIC, in one run: latency of `N` one-at-a-time
//! sends (send call → the recipient's `wait` returns) and the throughput of `4 * N` sends from
//! four concurrent senders. With `LOSS_PERCENT`, node C's link drops that share of packets in
//! both directions (`nft numgen random` in its namespace) while mail is measured.
//!
//! `bench fed-impaired [N] [LOSS_PERCENT] [DELAY_MS]`: the same comparison over a
//! packet-level impaired link (loss and delay), plus a remote session's keystrokes; see
//! [`impaired`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use crate::agent::Agent;
use crate::bench_fed::{budgeted_phase, key_round_trips, mail_phase, ws_at};
use crate::fed::FedBed;
use crate::impair::Params;
use crate::percentile;
use crate::term::read_until;

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

/// Waits (bounded) until every peer link of `bed` is up over `transport`.
async fn wait_transport(bed: &FedBed, transport: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = bed.connections().await?;
        if rows
            .iter()
            .all(|c| c["peer_link_up"] == true && c["transport"] == transport)
        {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the peer links are not all up over {transport}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One transport's figures: latency p50, p99 (ms), throughput (msg/s), and the CPU budget.
async fn measure(
    transport: &str,
    n: usize,
    loss: u32,
) -> anyhow::Result<(f64, f64, f64, crate::bench_fed::Budget)> {
    let bed = FedBed::start_with_hub(2, json!({}), json!({"hub": {"transport": transport}}), None)
        .await?;
    wait_transport(&bed, transport).await?;
    let (b_sock, c_sock) = (
        bed.nodes[0].proc().socket.clone(),
        bed.nodes[1].proc().socket.clone(),
    );
    let (carol, tcarol) = Agent::new(&c_sock, "carol").await;
    let mut senders = Vec::new();
    for i in 0..4 {
        senders.push(Agent::new(&b_sock, &format!("bob{i}")).await.0);
    }
    let to = format!("{}/{tcarol}", bed.nodes[1].id);
    senders[0].sees(&to, Duration::from_secs(30)).await;
    if loss > 0 {
        set_loss(&bed, loss)?;
    }
    let (m, _, budget) = budgeted_phase(&bed, &mut senders, carol, &to, n).await?;
    m.all_received()?;
    Ok((m.p50, m.p99, m.per_sec, budget))
}

/// Runs the comparison and prints one line per transport.
pub async fn mail(n: usize, loss: u32) -> anyhow::Result<()> {
    println!(
        "fed-mail-quic: agents on node B -> agent on node C through the hub, {n} latency sends, {} throughput sends, {loss}% loss on node C's link",
        4 * n
    );
    let mut rows = Vec::new();
    for t in ["websocket", "quic"] {
        let (p50, p99, tput, budget) = measure(t, n, loss).await?;
        println!("  {t:<10} latency p50 {p50:.3} ms  p99 {p99:.3} ms | {tput:.0} msg/s");
        budget.print(13);
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

/// One phase's figures on one transport.
#[derive(Debug, Clone, Copy)]
struct Figures {
    mail_p50: f64,
    mail_p99: f64,
    tput: f64,
    key_p50: f64,
    key_p99: f64,
    /// Keystrokes measured during the mail throughput, and their p50/p99.
    loaded_n: usize,
    loaded_p50: f64,
    loaded_p99: f64,
}

impl Figures {
    fn line(&self) -> String {
        format!(
            "mail p50 {:.1} ms p99 {:.1} ms | {:.1} msg/s | keystroke p50 {:.1} ms p99 {:.1} ms | under mail load ({} keys) p50 {:.1} ms p99 {:.1} ms",
            self.mail_p50,
            self.mail_p99,
            self.tput,
            self.key_p50,
            self.key_p99,
            self.loaded_n,
            self.loaded_p50,
            self.loaded_p99
        )
    }

    fn ratio(q: &Self, w: &Self) -> String {
        format!(
            "mail p50 {:.2}x p99 {:.2}x | throughput {:.2}x | keystroke p50 {:.2}x p99 {:.2}x | under load p50 {:.2}x p99 {:.2}x",
            q.mail_p50 / w.mail_p50,
            q.mail_p99 / w.mail_p99,
            q.tput / w.tput,
            q.key_p50 / w.key_p50,
            q.key_p99 / w.key_p99,
            q.loaded_p50 / w.loaded_p50,
            q.loaded_p99 / w.loaded_p99
        )
    }
}

/// One transport: a bed whose hub reaches node C over a [`crate::impair::TunLink`], measured
/// clean, then with `impaired` set on that link. Returns (clean, impaired).
async fn measure_impaired(
    transport: &str,
    n: usize,
    impaired: Params,
) -> anyhow::Result<(Figures, Figures)> {
    let bed = FedBed::start_impaired(
        2,
        json!({}),
        json!({"hub": {"transport": transport}}),
        1,
        Params::CLEAN,
    )
    .await?;
    wait_transport(&bed, transport).await?;
    let link = bed.impaired.as_ref().context("the impaired link")?;
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
    // A raw `cat` on node C, attached through the hub.
    let id = bed
        .create_on_node(
            1,
            json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp",
                "args": ["-c", "stty raw -echo; printf READY; exec cat"]}),
        )
        .await?;
    let address = format!("{}/{id}", bed.nodes[1].id);
    bed.wait_listed(&address, T).await?;
    let mut ws = ws_at(&bed.hub.socket, &address, "?binary=1&from_byte=0").await?;
    read_until(&mut ws, b"READY", T).await.context("READY")?;
    let mut out = Vec::new();
    for (phase, p) in [("clean", Params::CLEAN), ("impaired", impaired)] {
        link.set(p);
        let before = link.counts();
        // Keystrokes while the mail throughput runs (one at a time, until it ends or `n`):
        // the same link carries both, so a lost mail segment holds the keys queued behind it.
        let done = AtomicBool::new(false);
        let loaded = async {
            let mut v = Vec::with_capacity(n);
            while v.len() < n && !done.load(Ordering::Relaxed) {
                v.extend(key_round_trips(&mut ws, 1, T).await?);
            }
            anyhow::Ok(v)
        };
        let (m, rx, mut under_load) =
            mail_phase(&mut senders, carol, &to, n, phase, &done, loaded).await?;
        m.all_received()?;
        let (mail_p50, mail_p99, tput) = (m.p50, m.p99, m.per_sec);
        carol = rx;
        let mut keys = key_round_trips(&mut ws, n, T).await?;
        anyhow::ensure!(!under_load.is_empty(), "no keystroke during the mail load");
        let f = Figures {
            mail_p50,
            mail_p99,
            tput,
            key_p50: percentile(&mut keys, 0.5),
            key_p99: percentile(&mut keys, 0.99),
            loaded_n: under_load.len(),
            loaded_p50: percentile(&mut under_load, 0.5),
            loaded_p99: percentile(&mut under_load, 0.99),
        };
        let after = link.counts();
        let shown = |d: usize| {
            let (o, l) = (
                after[d].offered - before[d].offered,
                after[d].lost - before[d].lost,
            );
            format!("{l}/{o} lost ({:.1}%)", 100.0 * l as f64 / o.max(1) as f64)
        };
        println!(
            "  {transport:<10} {phase:<9} {} [link hub->C {}, C->hub {}]",
            f.line(),
            shown(0),
            shown(1)
        );
        out.push(f);
    }
    anyhow::ensure!(!link.failed(), "the impaired link's relay failed");
    Ok((out[0], out[1]))
}

/// `bench fed-impaired [N] [LOSS_PERCENT] [DELAY_MS]`: node C's peer link (hub <-> C, TCP
/// and UDP) runs over a packet-level impaired link ([`crate::impair::TunLink`]: `LOSS_PERCENT`
/// loss and `DELAY_MS` delay in each direction); per transport (WebSocket, then QUIC) the
/// same bed is measured clean and impaired: cross-host mail (node B -> hub -> node C) latency
/// p50/p99 over `N` one-at-a-time sends and throughput of `4 * N` sends from four senders,
/// and `N` keystroke round trips to a `cat` on node C attached through the hub (alone, and
/// while the mail throughput runs: up to `N`, one at a time, until that ends).
pub async fn impaired(n: usize, loss_percent: f64, delay_ms: u64) -> anyhow::Result<()> {
    let p = Params {
        loss: loss_percent / 100.0,
        delay: Duration::from_millis(delay_ms),
    };
    println!(
        "fed-impaired: N={n} (mail: {n} latency sends, {} throughput sends; {n} keystrokes), node C's link: {loss_percent}% loss and {delay_ms} ms delay in each direction (TUN relay), clean = same link with 0/0",
        4 * n
    );
    let mut rows = Vec::new();
    for t in ["websocket", "quic"] {
        rows.push(measure_impaired(t, n, p).await?);
    }
    println!(
        "  quic/websocket clean:    {}",
        Figures::ratio(&rows[1].0, &rows[0].0)
    );
    println!(
        "  quic/websocket impaired: {}",
        Figures::ratio(&rows[1].1, &rows[0].1)
    );
    Ok(())
}
