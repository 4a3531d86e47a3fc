//! Federation benchmarks in namespaces: a remote session's stream and keystrokes through the
//! hub against the same node reached directly (its own socket), measured in the same run.
//!
//! `bench fed-stream [MiB]`, `bench fed-keystroke [N]`, `bench fed-mail [N] [SENDERS]` (cross-host agent mail).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::fed::FedBed;
use crate::term::{Ws, read_until};
use crate::{percentile, records};

const T: Duration = Duration::from_secs(300);

/// Opens node `address`'s stream on `socket` (a hub address is percent-encoded).
pub async fn ws_at(socket: &Path, address: &str, query: &str) -> anyhow::Result<Ws> {
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
        let mut v = key_round_trips(&mut ws, n, T).await?;
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

/// `n` single-key round trips on `ws` (a raw `cat` session's stream), one key in flight at a
/// time: milliseconds from sending each key to reading its echo (each bounded by `limit`).
pub async fn key_round_trips(ws: &mut Ws, n: usize, limit: Duration) -> anyhow::Result<Vec<f64>> {
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let key = [b'a' + (i % 26) as u8];
        let t0 = Instant::now();
        ws.send(Message::Binary(key.to_vec().into())).await?;
        read_until(ws, &key, limit).await?;
        v.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(v)
}

/// Receives on `agent` until `n` messages arrived (or `limit`); each message's body and the
/// instant its `wait` returned, plus the inbox's `missed_count` (evictions) seen on the way.
pub(crate) async fn receive(
    agent: &mut crate::agent::Agent,
    n: usize,
    limit: Duration,
) -> anyhow::Result<(Vec<(String, Instant)>, u64)> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::with_capacity(n);
    let mut missed = 0;
    while got.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("received {} of {n} messages", got.len());
        }
        let (err, w) = agent
            .call(json!({"action":"wait","timeout_ms": left.as_millis().min(10_000) as u64}))
            .await;
        if err {
            bail!("wait failed: {w}");
        }
        let now = Instant::now();
        for m in w["new_messages"].as_array().into_iter().flatten() {
            got.push((m["message"].as_str().unwrap_or("").to_owned(), now));
        }
        missed += w["missed_count"].as_u64().unwrap_or(0);
    }
    Ok((got, missed))
}

/// Sends `message` and fails on a refusal.
pub(crate) async fn send_ok(
    agent: &mut crate::agent::Agent,
    to: &str,
    message: &str,
) -> anyhow::Result<()> {
    let (err, v) = agent
        .call(json!({"action":"send","to":to,"message":message}))
        .await;
    if err {
        bail!("send refused: {v}");
    }
    Ok(())
}

/// Most concurrent senders [`mail`] takes: one reader drains the recipient's bounded inbox
/// (100 messages) between its `wait` calls, and beyond this it falls behind and misses mail.
pub const MAX_SENDERS: usize = 32;

/// Cross-host mail: agents on node B send to an agent on node C through the hub.
/// `n` one-at-a-time sends for latency (send call -> the recipient's `wait` returns), then
/// `clients * n` sends from `clients` concurrent senders (each waits for its verdict before
/// its next send) for throughput. The same run with both agents on node B is the floor.
pub async fn mail(n: usize, clients: usize) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=MAX_SENDERS).contains(&clients),
        "senders must be 1..={MAX_SENDERS}"
    );
    use crate::agent::Agent;
    let bed = FedBed::start(2).await?;
    let (b_sock, c_sock) = (
        bed.nodes[0].proc().socket.clone(),
        bed.nodes[1].proc().socket.clone(),
    );
    let (carol, tcarol) = Agent::new(&c_sock, "carol").await;
    let (bella, tbella) = Agent::new(&b_sock, "bella").await;
    let mut senders = Vec::new();
    for i in 0..clients {
        senders.push(Agent::new(&b_sock, &format!("bob{i}")).await.0);
    }
    let remote = format!("{}/{tcarol}", bed.nodes[1].id);
    senders[0].sees(&remote, Duration::from_secs(30)).await;
    println!(
        "fed-mail: agents on node B -> agent on node C through the hub (floor: both on node B)"
    );
    let mut results = Vec::new();
    for (label, to, rx) in [
        ("local (same node)", tbella, bella),
        ("cross-host via hub", remote, carol),
    ] {
        let (m, _, budget) = budgeted_phase(&bed, &mut senders, rx, &to, n).await?;
        println!(
            "  {label:<20} latency p50 {:.3} ms  p99 {:.3} ms | {} msgs from {clients} senders in {:.2} s: {:.0} msg/s, received={} distinct={} missed={}",
            m.p50, m.p99, m.total, m.secs, m.per_sec, m.received, m.distinct, m.missed
        );
        budget.print(23);
        results.push((m.p50, m.p99, m.per_sec, budget.host_ceiling));
    }
    println!(
        "  ratios cross-host/local: latency p50 {:.1}x p99 {:.1}x, throughput {:.2}x (per-host CPU ceilings {:.2}x)",
        results[1].0 / results[0].0,
        results[1].1 / results[0].1,
        results[1].2 / results[0].2,
        results[1].3 / results[0].3
    );
    // The floor: the same namespaces, shape and concurrency with none of tuic's layers.
    let sync_file = bed.nodes[1].dir.path().join("floor-sync");
    let (bare, synced) = tokio::task::block_in_place(|| {
        anyhow::Ok((
            crate::bench_floor::relay_round_trips(&bed.net, clients * n, clients, None)?,
            crate::bench_floor::relay_round_trips(
                &bed.net,
                clients * n,
                clients,
                Some(&sync_file),
            )?,
        ))
    })?;
    println!(
        "  floor, plain TCP B -> hub relay -> C echo, {clients} clients: {bare:.0} round trips/s; with an fdatasync per message at C: {synced:.0}/s"
    );
    println!(
        "  cross-host / floor: {:.2}x of the plain relay, {:.2}x of the synced one",
        results[1].2 / bare,
        results[1].2 / synced
    );
    Ok(())
}

/// The CPU a mail phase cost ([`budgeted_phase`]): two printable lines, and the rate the
/// busiest host would cap at if each host had this machine's cores to itself.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    /// CPU per message by process, and what all cores busy at that cost would deliver.
    pub(crate) cpu: String,
    /// The busiest host and its cap ([`Budget::host_ceiling`]).
    pub(crate) hosts: String,
    /// Messages per second the busiest host's CPU per message allows with the cores to itself.
    pub(crate) host_ceiling: f64,
}

impl Budget {
    /// Both lines, each after `indent` spaces.
    pub(crate) fn print(&self, indent: usize) {
        println!("{:indent$}{}", "", self.cpu);
        println!("{:indent$}{}", "", self.hosts);
    }
}

/// [`mail_phase`] from `senders` to `to` (read by `rx`) on `bed`, with the CPU every process
/// on the mail's path (the bench's clients, node B, the hub, node C) spent per message over
/// the throughput part, what all cores busy at that cost would deliver, and the same per host
/// (the agents run on B's host): in this bed all hosts share the machine's cores, in a
/// deployment each has its own, so the busiest host's CPU per message bounds the rate there.
pub(crate) async fn budgeted_phase(
    bed: &FedBed,
    senders: &mut Vec<crate::agent::Agent>,
    rx: crate::agent::Agent,
    to: &str,
    n: usize,
) -> anyhow::Result<(MailRun, crate::agent::Agent, Budget)> {
    let pids = [
        ("bench", std::process::id()),
        ("node B", bed.nodes[0].proc().child.id()),
        ("hub", bed.hub.child.id()),
        ("node C", bed.nodes[1].proc().child.id()),
    ];
    let cpu = || -> anyhow::Result<Vec<f64>> {
        pids.iter().map(|(_, pid)| crate::cpu_secs(*pid)).collect()
    };
    let done = AtomicBool::new(false);
    // `during` starts with the throughput part.
    let mut before = Vec::new();
    let during = async {
        before = cpu()?;
        anyhow::Ok(())
    };
    let (m, rx, ()) = mail_phase(senders, rx, to, n, "m", &done, during).await?;
    let spent: Vec<f64> = cpu()?.iter().zip(&before).map(|(a, b)| a - b).collect();
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let per_msg = |cpu_s: f64| cpu_s * 1e3 / m.total as f64;
    // Messages per second with every core busy at `ms` of CPU per message.
    let cap = |ms: f64| cores as f64 * 1e3 / ms;
    let total = per_msg(spent.iter().sum());
    let parts: Vec<String> = pids
        .iter()
        .zip(&spent)
        .map(|((name, _), s)| format!("{name} {:.3}", per_msg(*s)))
        .collect();
    // Hosts: B's (the agents and node B), the hub's, C's. The bench's clients all count as B's
    // host, the reader too (it would run on C's): B's figure is the higher for it, so the
    // ceiling errs low.
    let hosts = [
        ("B's host", per_msg(spent[0] + spent[1])),
        ("hub", per_msg(spent[2])),
        ("C's host", per_msg(spent[3])),
    ];
    let (busiest, worst) = hosts
        .iter()
        .copied()
        .fold(("", 0.0), |a, h| if h.1 > a.1 { h } else { a });
    let host_ceiling = cap(worst);
    let cpu = format!(
        "cpu ms/msg: {} | total {total:.3}: {:.0}% of {cores} cores busy, all {cores} busy would be {:.0} msg/s",
        parts.join(", "),
        100.0 * total * m.total as f64 / (1e3 * m.secs * cores as f64),
        cap(total),
    );
    let hosts = format!(
        "per host: the busiest is {busiest} at {worst:.3} ms/msg; with {cores} cores of its own it would cap at {host_ceiling:.0} msg/s"
    );
    Ok((
        m,
        rx,
        Budget {
            cpu,
            hosts,
            host_ceiling,
        },
    ))
}

/// One mail phase's figures ([`mail_phase`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MailRun {
    /// Latency of the one-at-a-time sends, ms.
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    /// Sends of the throughput part, its wall time and rate.
    pub(crate) total: usize,
    pub(crate) secs: f64,
    pub(crate) per_sec: f64,
    /// What the recipient's `wait` returned in the throughput part.
    pub(crate) received: usize,
    pub(crate) distinct: usize,
    pub(crate) missed: u64,
}

impl MailRun {
    /// Every throughput send arrived.
    pub(crate) fn all_received(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.received == self.total,
            "received {} of {}",
            self.received,
            self.total
        );
        Ok(())
    }
}

/// Mail from `senders` to `to` (read by `rx`): latency of `n` one-at-a-time sends from
/// `senders[0]` (send call -> `rx`'s `wait` returns), then the throughput of `senders.len() * n`
/// sends from all `senders` at once, with `during` running alongside the throughput part (`done` is
/// set when that part ends). Hands `rx` back for the next phase; the senders are back in
/// `senders`.
pub(crate) async fn mail_phase<R>(
    senders: &mut Vec<crate::agent::Agent>,
    mut rx: crate::agent::Agent,
    to: &str,
    n: usize,
    tag: &str,
    done: &AtomicBool,
    during: impl std::future::Future<Output = anyhow::Result<R>>,
) -> anyhow::Result<(MailRun, crate::agent::Agent, R)> {
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let body = format!("{tag}-lat-{i}");
        let t0 = Instant::now();
        let (sent, got) = tokio::join!(send_ok(&mut senders[0], to, &body), receive(&mut rx, 1, T));
        sent?;
        lat.push(got?.0[0].1.duration_since(t0).as_secs_f64() * 1e3);
    }
    let total = senders.len() * n;
    let throughput = async {
        let start = Instant::now();
        let collector = tokio::spawn(async move {
            let r = receive(&mut rx, total, T).await;
            (rx, r)
        });
        let mut sends = Vec::new();
        for (k, mut s) in std::mem::take(senders).into_iter().enumerate() {
            let (to, tag) = (to.to_owned(), tag.to_owned());
            sends.push(tokio::spawn(async move {
                for i in 0..n {
                    send_ok(&mut s, &to, &format!("{tag}-tp-{k}-{i}")).await?;
                }
                anyhow::Ok(s)
            }));
        }
        for h in sends {
            senders.push(h.await??);
        }
        let (rx, got) = collector.await?;
        let (got, missed) = got?;
        let secs = start.elapsed().as_secs_f64();
        let mut bodies: Vec<&str> = got.iter().map(|(m, _)| m.as_str()).collect();
        bodies.sort_unstable();
        bodies.dedup();
        anyhow::Ok((secs, got.len(), bodies.len(), missed, rx))
    };
    let (tp, side) = tokio::join!(
        async {
            let r = throughput.await;
            done.store(true, Ordering::Relaxed);
            r
        },
        during
    );
    let (secs, received, distinct, missed, rx) = tp?;
    let run = MailRun {
        p50: percentile(&mut lat, 0.5),
        p99: percentile(&mut lat, 0.99),
        total,
        secs,
        per_sec: total as f64 / secs,
        received,
        distinct,
        missed,
    };
    Ok((run, rx, side?))
}
