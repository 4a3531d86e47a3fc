//! `bench fed-scale N [SESSIONS_PER_NODE] [--holders]`: one hub and N nodes as processes on
//! loopback ([`crate::scale::ScaleBed`]), each node with SESSIONS_PER_NODE idle sessions.
//!
//! Prints: hub start → every link up (session and mail) and the spread of the links' up
//! times; the hub's descriptors, RSS and idle CPU; `GET /sessions` answered 304 by
//! `If-None-Match` and a `?since=` delta after one change (p50/p99); hub `kill -9` → every
//! link back and its spread; a node killed: how long until the hub shows it down on both
//! carriers, and after outages of 5 s and 30 s how long from its restart until both links and
//! its list are back.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

use crate::scale::{ScaleBed, hub_connections, open_fds, wait_all_up};
use crate::{NodeProc, cpu_secs, ipc, percentile, rss_bytes};

/// Every wait of the bench is bounded by this.
const T: Duration = Duration::from_secs(600);
/// How often the hub's connections are polled while waiting for links.
const POLL: Duration = Duration::from_millis(20);

/// One kept-alive HTTP/1.1 connection to a Unix socket, for latency without the connect.
struct Client(hyper::client::conn::http1::SendRequest<Full<Bytes>>);

impl Client {
    async fn open(socket: &Path) -> anyhow::Result<Self> {
        let s = tokio::net::UnixStream::connect(socket).await?;
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s)).await?;
        tokio::spawn(conn);
        Ok(Self(send))
    }

    /// GET `path` with `headers`: status, `x-revision`, `etag`, body.
    async fn get(
        &mut self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<(u16, String, String, Bytes)> {
        let mut b = hyper::Request::get(path).header("host", "localhost");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        self.0.ready().await?;
        let resp = self
            .0
            .send_request(b.body(Full::new(Bytes::new()))?)
            .await?;
        let h = |k: &str| {
            resp.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let (status, rev, etag) = (resp.status().as_u16(), h("x-revision"), h("etag"));
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, rev, etag, body))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `first .. last (p50)` of seconds.
fn spread(v: &[f64]) -> String {
    let mut s = v.to_vec();
    let p50 = percentile(&mut s, 0.5);
    format!(
        "first {:.2} s, p50 {p50:.2} s, last {:.2} s (spread {:.2} s)",
        s[0],
        s[s.len() - 1],
        s[s.len() - 1] - s[0]
    )
}

/// Waits until the hub lists `rows` rows.
async fn wait_rows(hub: &NodeProc, rows: usize) -> anyhow::Result<()> {
    let t0 = Instant::now();
    loop {
        let r = ipc(&hub.socket, "GET", "/sessions", None).await?;
        let n = r.json().as_array().map_or(0, Vec::len);
        if n >= rows {
            return Ok(());
        }
        if t0.elapsed() > T {
            bail!("the hub lists {n} of {rows} rows");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls connection `id` until `pred` holds on its row; the time since `t0`.
async fn wait_conn(
    hub: &NodeProc,
    id: &str,
    t0: Instant,
    pred: impl Fn(&Value) -> bool,
) -> anyhow::Result<Duration> {
    loop {
        let (rows, _) = hub_connections(hub).await?;
        if rows.iter().any(|r| r["id"] == id && pred(r)) {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > T {
            bail!("connection {id} never reached the state");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The hub's descriptors, RSS and CPU over `idle` of rest, as one line.
async fn footprint(hub: &NodeProc, idle: Duration) -> anyhow::Result<String> {
    let pid = hub.pid();
    let before = cpu_secs(pid)?;
    tokio::time::sleep(idle).await;
    let cpu = (cpu_secs(pid)? - before) / idle.as_secs_f64() * 100.0;
    let (_, fds) = hub_connections(hub).await?;
    Ok(format!(
        "hub fds {} (/hub/connections: used {}, limit {}, reserve {}, refused {}), RSS {:.1} MB, idle CPU {cpu:.1} % over {} s",
        open_fds(pid),
        fds["used"],
        fds["limit"],
        fds["reserve"],
        fds["refused_total"],
        rss_bytes(pid) as f64 / 1e6,
        idle.as_secs()
    ))
}

/// `calls` 304s of `GET /sessions` with the list's tag; p50/p99 ms.
async fn not_modified(hub: &NodeProc, calls: usize) -> anyhow::Result<(f64, f64, usize)> {
    let mut c = Client::open(&hub.socket).await?;
    let (status, _, etag, body) = c.get("/sessions", &[]).await?;
    ensure!(status == 200 && !etag.is_empty(), "GET /sessions: {status}");
    let rows = serde_json::from_slice::<Value>(&body)?
        .as_array()
        .map_or(0, Vec::len);
    let mut v = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        let (status, ..) = c.get("/sessions", &[("if-none-match", &etag)]).await?;
        v.push(ms(t.elapsed()));
        ensure!(status == 304, "If-None-Match answered {status}");
    }
    Ok((percentile(&mut v, 0.5), percentile(&mut v, 0.99), rows))
}

/// `changes` renames, one at a time, each on a session of the bed's nodes in turn: once the
/// hub's feed has it, the `?since=` delta that carries it is read `reads` times. p50/p99 ms of
/// those reads, and of the time from the rename's answer until the hub's feed had it.
async fn deltas(
    bed: &ScaleBed,
    hub: &NodeProc,
    sessions: &[(usize, String)],
    changes: usize,
    reads: usize,
) -> anyhow::Result<((f64, f64), (f64, f64))> {
    let mut c = Client::open(&hub.socket).await?;
    let (_, mut rev, ..) = c.get("/sessions", &[]).await?;
    let (mut read, mut seen) = (Vec::new(), Vec::new());
    for k in 0..changes {
        let (i, sid) = &sessions[k % sessions.len()];
        let r = ipc(
            &bed.nodes[*i].socket,
            "PUT",
            &format!("/sessions/{sid}/name"),
            Some(json!({"name": format!("renamed-{k}")})),
        )
        .await?;
        ensure!(r.status == 200, "rename: {}", r.status);
        let t = Instant::now();
        let path = format!("/sessions?since={rev}");
        let next = loop {
            let (status, _, _, body) = c.get(&path, &[]).await?;
            ensure!(status == 200, "since answered {status}");
            let d: Value = serde_json::from_slice(&body)?;
            if d["changed"].as_array().is_some_and(|a| !a.is_empty()) {
                seen.push(ms(t.elapsed()));
                break d["revision"].as_str().context("revision")?.to_owned();
            }
            ensure!(t.elapsed() < T, "the rename never reached the hub's feed");
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        for _ in 0..reads {
            let t = Instant::now();
            let (status, ..) = c.get(&path, &[]).await?;
            read.push(ms(t.elapsed()));
            ensure!(status == 200);
        }
        rev = next;
    }
    Ok((
        (percentile(&mut read, 0.5), percentile(&mut read, 0.99)),
        (percentile(&mut seen, 0.5), percentile(&mut seen, 0.99)),
    ))
}

/// The bench.
pub async fn run(n: usize, per_node: usize, holders: bool) -> anyhow::Result<()> {
    ensure!(
        n >= 1 && per_node >= 1,
        "N and SESSIONS_PER_NODE must be at least 1"
    );
    let t = Instant::now();
    let mut bed = ScaleBed::start(n, holders).await?;
    let started = t.elapsed();
    bed.fill(per_node).await?;
    let rows = n * per_node;
    println!(
        "fed-scale nodes={n} sessions/node={per_node} rows={rows} holders={holders}: nodes started in {:.1} s, sessions made in {:.1} s",
        started.as_secs_f64(),
        (t.elapsed() - started).as_secs_f64()
    );
    let hub_dir = bed.hub_dir()?;
    bed.connect_all(&hub_dir)?;

    // Start: the connections are in config.json when the hub starts.
    let t0 = Instant::now();
    let mut hub = bed.start_hub(&hub_dir)?;
    let ready = t0.elapsed();
    let ups = wait_all_up(&hub, n, t0, POLL, T).await?;
    wait_rows(&hub, rows).await?;
    let listed = t0.elapsed();
    println!(
        "  hub start -> ready {:.2} s; every link up (session + mail): {}; all {rows} rows listed {:.2} s",
        ready.as_secs_f64(),
        spread(&ups),
        listed.as_secs_f64()
    );
    println!("  {}", footprint(&hub, Duration::from_secs(5)).await?);

    let (p50, p99, listed_rows) = not_modified(&hub, 500).await?;
    println!(
        "  GET /sessions If-None-Match -> 304 at {listed_rows} rows: p50 {p50:.3} ms, p99 {p99:.3} ms"
    );
    let mut sessions = Vec::new();
    for (i, node) in bed.nodes.iter().enumerate().take(20) {
        let r = ipc(&node.socket, "GET", "/sessions", None).await?.json();
        if let Some(id) = r[0]["session_id"].as_str() {
            sessions.push((i, id.to_owned()));
        }
    }
    let ((d50, d99), (s50, s99)) = deltas(&bed, &hub, &sessions, 20, 10).await?;
    println!(
        "  GET /sessions?since= after one change at {listed_rows} rows: p50 {d50:.3} ms, p99 {d99:.3} ms (the change on the hub's feed after the node's answer: p50 {s50:.1} ms, p99 {s99:.1} ms)"
    );

    // Hub crash.
    hub.child.kill()?;
    hub.child.wait()?;
    let t0 = Instant::now();
    hub = bed.start_hub(&hub_dir)?;
    let ready = t0.elapsed();
    let ups = wait_all_up(&hub, n, t0, POLL, T).await?;
    println!(
        "  hub kill -9 -> restarted and ready {:.2} s; every link back: {}",
        ready.as_secs_f64(),
        spread(&ups)
    );
    println!("  {}", footprint(&hub, Duration::from_secs(5)).await?);

    // A node's outages.
    let id = ScaleBed::id(0);
    for outage in [Duration::from_secs(5), Duration::from_secs(30)] {
        bed.nodes[0].child.kill()?;
        bed.nodes[0].child.wait()?;
        let killed = Instant::now();
        let session_down = wait_conn(&hub, &id, killed, |r| r["up"] != true).await?;
        let both_down = wait_conn(&hub, &id, killed, |r| {
            r["up"] != true && r["peer_link_up"] != true
        })
        .await?;
        tokio::time::sleep(outage.saturating_sub(killed.elapsed())).await;
        bed.restart_node(0)?;
        let back = Instant::now();
        let links = wait_conn(&hub, &id, back, |r| {
            r["up"] == true && r["peer_link_up"] == true
        })
        .await?;
        // Its list: a session made after the restart listed on the hub.
        let sid = crate::scale::create_idle(&bed.nodes[0].socket).await?;
        let made = back.elapsed();
        let address = format!("{id}/{sid}");
        loop {
            let r = ipc(&hub.socket, "GET", "/sessions", None).await?.json();
            if r.as_array()
                .is_some_and(|a| a.iter().any(|row| row["address"] == address.as_str()))
            {
                break;
            }
            ensure!(back.elapsed() < T, "{address} never listed");
            tokio::time::sleep(POLL).await;
        }
        println!(
            "  node kill -9: shown down on the session link {:.2} s, on both carriers {:.2} s; after a {} s outage, restart -> both links up {:.2} s, a new session listed {:.2} s (made at {:.2} s)",
            session_down.as_secs_f64(),
            both_down.as_secs_f64(),
            outage.as_secs(),
            links.as_secs_f64(),
            back.elapsed().as_secs_f64(),
            made.as_secs_f64()
        );
    }
    let log = hub.log_text();
    let emfile = log
        .lines()
        .filter(|l| l.contains("Too many open files") || l.contains("os error 24"))
        .count();
    println!("  hub log lines naming EMFILE: {emfile}");
    Ok(())
}
