//! Benchmarks of the upstream MCP proxy (`bench upstream-call | tool-search | surface-bytes`):
//! the latency a proxied `tools/call` adds over calling the same stdio upstream directly, the
//! BM25 `search_tools` latency at 1,000 tools (in process and over IPC), and the tool surface
//! in bytes, full against collapsed, at 190 tools.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::percentile;
use crate::term::Node;

fn raw_script() -> PathBuf {
    crate::clients_dir().join("upstream_raw.py")
}

/// A keep-alive HTTP/1.1 connection to the node's IPC socket.
struct Conn(hyper::client::conn::http1::SendRequest<Full<Bytes>>);

impl Conn {
    async fn open(node: &Node) -> anyhow::Result<Self> {
        Self::open_path(&node.socket).await
    }

    async fn open_path(socket: &std::path::Path) -> anyhow::Result<Self> {
        let s = tokio::net::UnixStream::connect(socket).await?;
        let (send, c) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s)).await?;
        tokio::spawn(c);
        Ok(Self(send))
    }

    async fn rpc(&mut self, msg: &Value) -> anyhow::Result<Value> {
        self.0.ready().await?;
        let req = hyper::Request::post("/mcp")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(Bytes::from(msg.to_string())))?;
        let r = self.0.send_request(req).await?;
        let body = r.into_body().collect().await?.to_bytes();
        Ok(serde_json::from_slice(&body)?)
    }
}

/// Starts a node proxying `python3 upstream_raw.py ARGS` as upstream `raw`, ready.
async fn node_with(args: &[&str], config: Value) -> anyhow::Result<Node> {
    let node = Node::start(Some(config)).await?;
    let mut a = vec![raw_script().display().to_string()];
    a.extend(args.iter().map(|s| (*s).to_owned()));
    let servers = json!({"servers": [{"id": "raw", "name": "raw",
        "transport": {"type": "stdio", "command": "python3", "args": a}}]});
    node.ok(
        "PUT",
        "/mcp/upstreams",
        Some(json!({"base": {"servers": []}, "config": servers})),
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = node.ok("GET", "/mcp/status", None).await?;
        if s["upstreams"][0]["status"] == "ready" {
            return Ok(node);
        }
        if Instant::now() > deadline {
            bail!("upstream not ready: {}", s["upstreams"]);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `upstream-call [N]`.
pub async fn call(n: usize) -> anyhow::Result<()> {
    // Direct: this process speaks to the same upstream over its stdio.
    let mut child = tokio::process::Command::new("python3")
        .arg(raw_script())
        .arg("ok")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    async fn rt(
        stdin: &mut tokio::process::ChildStdin,
        lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
        msg: Value,
    ) -> anyhow::Result<Value> {
        stdin.write_all(format!("{msg}\n").as_bytes()).await?;
        stdin.flush().await?;
        let l = lines.next_line().await?.context("upstream closed")?;
        Ok(serde_json::from_str::<Value>(&l)?)
    }
    rt(&mut stdin, &mut lines, json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}})).await?;
    let call = |id: usize| json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"ping_me","arguments":{}}});
    let mut direct = Vec::with_capacity(n);
    for i in 0..n + 50 {
        let t0 = Instant::now();
        let r = rt(&mut stdin, &mut lines, call(i + 1)).await?;
        if i >= 50 {
            direct.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        if r["result"]["content"][0]["text"] != "pong" {
            bail!("direct answer {r}");
        }
    }
    drop(child);

    let node = node_with(&["ok"], json!({})).await?;
    let mut c = Conn::open(&node).await?;
    let native = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"session","arguments":{"action":"list"}}});
    let proxied = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"raw__ping_me","arguments":{}}});
    let (mut floor, mut via) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n + 50 {
        let t0 = Instant::now();
        c.rpc(&native).await?;
        let t1 = Instant::now();
        let r = c.rpc(&proxied).await?;
        let t2 = Instant::now();
        if r["result"]["content"][0]["text"] != "pong" {
            bail!("proxied answer {r}");
        }
        if i >= 50 {
            floor.push((t1 - t0).as_secs_f64() * 1e3);
            via.push((t2 - t1).as_secs_f64() * 1e3);
        }
    }
    let (d50, d99) = (percentile(&mut direct, 0.5), percentile(&mut direct, 0.99));
    let (f50, f99) = (percentile(&mut floor, 0.5), percentile(&mut floor, 0.99));
    let (p50, p99) = (percentile(&mut via, 0.5), percentile(&mut via, 0.99));
    println!("upstream-call calls={n} (stdio upstream: tests/clients/upstream_raw.py ok)");
    println!("  direct stdio tools/call:            p50 {d50:.3} ms  p99 {d99:.3} ms");
    println!("  native tools/call over IPC (floor): p50 {f50:.3} ms  p99 {f99:.3} ms");
    println!("  proxied tools/call over IPC:        p50 {p50:.3} ms  p99 {p99:.3} ms");
    println!(
        "  added by tuic (proxied - direct):   p50 {:.3} ms  p99 {:.3} ms",
        p50 - d50,
        p99 - d99
    );
    println!(
        "  added by the proxy hop (proxied - native - direct): p50 {:.3} ms",
        p50 - f50 - d50
    );
    Ok(())
}

/// `tool-search [TOOLS] [QUERIES]`.
pub async fn search(tools: usize, queries: usize) -> anyhow::Result<()> {
    let node = node_with(&["many", &tools.to_string()], json!({})).await?;
    let mut c = Conn::open(&node).await?;
    let words = [
        "kubernetes pod",
        "list github issues",
        "slack message channel",
        "export invoice stripe",
        "search files folder",
        "update jira comment",
        "delete docker container",
        "watch sentry alert",
        "calendar event create",
        "postgres table rows",
    ];
    // The first query builds the index; the rest reuse it until the tool set changes.
    let mut ipc = Vec::with_capacity(queries);
    for i in 0..queries + 10 {
        let q = words[i % words.len()];
        let msg = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_tools","arguments":{"query": q}}});
        let t0 = Instant::now();
        let r = c.rpc(&msg).await?;
        if i >= 10 {
            ipc.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        if r["result"]["isError"] != false {
            bail!("search answered {r}");
        }
    }
    // In process: the same documents through the node's index type.
    let out = tokio::process::Command::new("python3")
        .arg(raw_script())
        .args(["many", &tools.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut out = out;
    out.stdin
        .take()
        .context("stdin")?
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n")
        .await?;
    let o = out.wait_with_output().await?;
    let listed: Value = serde_json::from_slice(&o.stdout)?;
    let docs: Vec<tuic_node::upstream::search::Doc> = listed["result"]["tools"]
        .as_array()
        .context("tools")?
        .iter()
        .filter_map(tuic_node::upstream::search::Doc::from_listing)
        .collect();
    let t0 = Instant::now();
    let index = tuic_node::upstream::search::Index::build(&docs);
    let build_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut inproc = Vec::with_capacity(queries);
    for i in 0..queries {
        let t0 = Instant::now();
        let hits = index.search(words[i % words.len()], 10);
        inproc.push(t0.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(hits);
    }
    println!("tool-search tools={} queries={queries}", docs.len());
    println!("  index build: {build_ms:.3} ms");
    println!(
        "  BM25 search in process:          p50 {:.4} ms  p99 {:.4} ms",
        percentile(&mut inproc, 0.5),
        percentile(&mut inproc, 0.99)
    );
    println!(
        "  search_tools tools/call over IPC: p50 {:.3} ms  p99 {:.3} ms",
        percentile(&mut ipc, 0.5),
        percentile(&mut ipc, 0.99)
    );
    Ok(())
}

/// `surface-bytes [UPSTREAM_TOOLS]`: tools/list bytes, full and collapsed.
pub async fn surface(upstream_tools: usize) -> anyhow::Result<()> {
    let mut sizes = Vec::new();
    for collapse in [false, true] {
        let node = node_with(
            &["many", &upstream_tools.to_string()],
            json!({"collapse_tools": collapse}),
        )
        .await?;
        let mut c = Conn::open(&node).await?;
        let r = c
            .rpc(&json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
            .await?;
        let tools = &r["result"]["tools"];
        sizes.push((
            tools.as_array().map_or(0, Vec::len),
            tools.to_string().len(),
        ));
    }
    println!("surface-bytes (tools/list result.tools, compact JSON)");
    println!("  full:      {} tools, {} bytes", sizes[0].0, sizes[0].1);
    println!("  collapsed: {} tools, {} bytes", sizes[1].0, sizes[1].1);
    Ok(())
}

/// `hub-upstream-call [N]`: a hub proxying `upstream_raw.py ok` as upstream `raw`, and a node in
/// its own network namespace connected to it. Interleaved: the hub's local proxied call
/// (`raw__ping_me` over the hub's IPC) and the node's hub-routed call (`hub.raw__ping_me` over
/// the node's IPC, then the peer link to the hub, then the same upstream); p50/p99 of each and
/// the difference, in one run.
pub async fn hub_call(n: usize) -> anyhow::Result<()> {
    let bed = crate::fed::FedBed::start(1).await?;
    let servers = json!({"servers": [{"id": "raw", "name": "raw",
        "transport": {"type": "stdio", "command": "python3",
            "args": [raw_script().display().to_string(), "ok"]}}]});
    std::fs::write(
        bed.hub_dir.path().join("mcp-upstreams.json"),
        serde_json::to_vec_pretty(&servers)?,
    )?;
    let node_sock = bed.nodes[0].proc().socket.clone();
    let mut local = Conn::open_path(&bed.hub.socket).await?;
    let mut routed = Conn::open_path(&node_sock).await?;
    let here = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"raw__ping_me","arguments":{}}});
    let via = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hub.raw__ping_me","arguments":{}}});
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = routed.rpc(&via).await?;
        if r["result"]["content"][0]["text"] == "pong" {
            break;
        }
        if Instant::now() > deadline {
            bail!("hub-routed call never answered: {r}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut a, mut b) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n + 50 {
        let t0 = Instant::now();
        let r1 = local.rpc(&here).await?;
        let t1 = Instant::now();
        let r2 = routed.rpc(&via).await?;
        let t2 = Instant::now();
        if r1 != r2 {
            bail!("answers differ: local {r1} routed {r2}");
        }
        if i >= 50 {
            a.push((t1 - t0).as_secs_f64() * 1e3);
            b.push((t2 - t1).as_secs_f64() * 1e3);
        }
    }
    let (l50, l99) = (percentile(&mut a, 0.5), percentile(&mut a, 0.99));
    let (r50, r99) = (percentile(&mut b, 0.5), percentile(&mut b, 0.99));
    println!(
        "hub-upstream-call calls={n} (stdio upstream on the hub: tests/clients/upstream_raw.py ok; node in a network namespace)"
    );
    println!("  local proxied tools/call on the hub (IPC):  p50 {l50:.3} ms  p99 {l99:.3} ms");
    println!("  hub-routed tools/call from the node (IPC):  p50 {r50:.3} ms  p99 {r99:.3} ms");
    println!(
        "  added by the node -> hub peer-link hop:     p50 {:.3} ms  p99 {:.3} ms",
        r50 - l50,
        r99 - l99
    );
    Ok(())
}

/// Resident set size of a process in KiB (`/proc/<pid>/status`), children excluded.
fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// `hub-upstream-progress [N] [ROUNDS]`: a hub proxying `upstream_raw.py ok` as upstream `raw`
/// and a node in its own network namespace. An agent on the node (a protocol session reading
/// its `GET /mcp` stream) calls `hub.raw__progress_burst {n: N}` with a progress token, ROUNDS
/// times, while a second client calls `hub.raw__ping_me` over the same link without pause.
/// Reports per round the flood's wall time, where its N notifications went (relayed to the
/// agent / coalesced on the hub / dropped at the agent's full stream — from the node's
/// counters), the hub's and the node's RSS, and p50/p99 of the concurrent ping calls.
pub async fn hub_progress(n: u64, rounds: usize) -> anyhow::Result<()> {
    let bed = crate::fed::FedBed::start(1).await?;
    let servers = json!({"servers": [{"id": "raw", "name": "raw",
        "transport": {"type": "stdio", "command": "python3",
            "args": [raw_script().display().to_string(), "ok"]}}]});
    std::fs::write(
        bed.hub_dir.path().join("mcp-upstreams.json"),
        serde_json::to_vec_pretty(&servers)?,
    )?;
    let node_sock = bed.nodes[0].proc().socket.clone();
    let mut pinger = Conn::open_path(&node_sock).await?;
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hub.raw__ping_me","arguments":{}}});
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = pinger.rpc(&ping).await?;
        if r["result"]["content"][0]["text"] == "pong" {
            break;
        }
        if Instant::now() > deadline {
            bail!("hub-routed call never answered: {r}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The agent: a protocol session whose GET stream is read (and its progress counted).
    let init = crate::agent::rpc(
        &node_sock,
        None,
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},
            "clientInfo":{"name":"bench-progress","version":"1"}}}),
    )
    .await;
    let sid = init
        .headers
        .get("mcp-session-id")
        .context("initialize gave no session")?
        .to_str()?
        .to_owned();
    let stream = tokio::net::UnixStream::connect(&node_sock).await?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let resp = send
        .send_request(
            hyper::Request::get("/mcp")
                .header("host", "localhost")
                .header("accept", "text/event-stream")
                .header("mcp-session-id", &sid)
                .body(Full::new(Bytes::new()))?,
        )
        .await?;
    let received = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = received.clone();
    let mut body = resp.into_body();
    tokio::spawn(async move {
        let mut buf = String::new();
        while let Some(Ok(f)) = body.frame().await {
            if let Ok(d) = f.into_data() {
                buf.push_str(&String::from_utf8_lossy(&d));
                while let Some(i) = buf.find('\n') {
                    let line: String = buf.drain(..=i).collect();
                    if line.starts_with("data:") && line.contains("notifications/progress") {
                        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        }
    });
    let counters = || async {
        let st = crate::ipc(&node_sock, "GET", "/mcp/status", None)
            .await
            .map(|r| r.json())
            .unwrap_or_default();
        let p = &st["hub_upstream_tools"]["progress"];
        let n = |k: &str| p[k].as_u64().unwrap_or(0);
        (n("relayed"), n("coalesced_by_hub"), n("dropped"))
    };
    let (hub_pid, node_pid) = (bed.hub.pid(), bed.nodes[0].proc().pid());
    let kib = |p: u32| rss_kib(p).map_or("n/a".to_owned(), |k| format!("{k} KiB"));
    println!(
        "hub-upstream-progress n={n} rounds={rounds} (stdio upstream on the hub: tests/clients/upstream_raw.py ok progress_burst; node in a network namespace)"
    );
    println!(
        "  before: hub RSS {}, node RSS {}",
        kib(hub_pid),
        kib(node_pid)
    );
    for round in 1..=rounds {
        let before = counters().await;
        let got0 = received.load(std::sync::atomic::Ordering::Relaxed);
        let flood = json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{
            "name":"hub.raw__progress_burst","arguments":{"n": n},
            "_meta":{"progressToken": format!("bench-{round}")}}});
        let done = std::sync::atomic::AtomicBool::new(false);
        let t0 = Instant::now();
        let call = async {
            let r = crate::agent::rpc(&node_sock, Some(&sid), flood.clone()).await;
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            r
        };
        let pings = async {
            let mut lat = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                let r = pinger.rpc(&ping).await?;
                if r["result"]["content"][0]["text"] != "pong" {
                    bail!("ping during the flood: {r}");
                }
                lat.push(t.elapsed().as_secs_f64() * 1e3);
            }
            Ok(lat)
        };
        let (r, lat) = tokio::join!(call, pings);
        let wall = t0.elapsed();
        let mut lat = lat?;
        let r = r.json();
        if r["result"]["content"][0]["text"] != format!("burst {n}") {
            bail!("flood call answered {r}");
        }
        // Wait (bounded) until every notification is accounted for by the node's counters.
        let deadline = Instant::now() + Duration::from_secs(60);
        let (rel, coal, drop) = loop {
            let (a, b, c) = counters().await;
            let d = (a - before.0, b - before.1, c - before.2);
            if d.0 + d.1 + d.2 >= n || Instant::now() > deadline {
                break d;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let got = received.load(std::sync::atomic::Ordering::Relaxed) - got0;
        let (p50, p99) = if lat.is_empty() {
            (0.0, 0.0)
        } else {
            (percentile(&mut lat, 0.5), percentile(&mut lat, 0.99))
        };
        println!(
            "  round {round}: {:.0} ms; relayed {rel} (agent read {got}), coalesced on hub {coal}, dropped on node {drop}; hub RSS {}, node RSS {}; {} pings meanwhile p50 {p50:.3} ms p99 {p99:.3} ms",
            wall.as_secs_f64() * 1e3,
            kib(hub_pid),
            kib(node_pid),
            lat.len(),
        );
    }
    Ok(())
}
