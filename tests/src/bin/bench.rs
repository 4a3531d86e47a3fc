//! Benchmark runner for the terminal core. Run in release:
//!
//! ```text
//! cargo build --release -p tuic-node -p tuic-tests --bins
//! cargo run -p tuic-tests --release --bin bench -- pty-throughput [MiB]
//! cargo run -p tuic-tests --release --bin bench -- keystroke-latency [N]
//! cargo run -p tuic-tests --release --bin bench -- screen-keystroke [N] [GAP_MS]
//! cargo run -p tuic-tests --release --bin bench -- idle-rss [SESSIONS]
//! cargo run -p tuic-tests --release --bin bench -- mcp-session-list [SESSIONS] [CALLS]
//! cargo run -p tuic-tests --release --bin bench -- mail-latency [N]
//! cargo run -p tuic-tests --release --bin bench -- outbox-store [N] [KiB]
//! cargo run -p tuic-tests --release --bin bench -- upload-copy | upload-copy-netns
//! cargo run -p tuic-tests --release --bin bench -- notify [N] [FLOOD]
//! cargo run -p tuic-tests --release --bin bench -- progress-journal [N]
//! cargo run -p tuic-tests --release --bin bench -- metrics-scrape [SESSIONS]
//! cargo run -p tuic-tests --release --bin bench -- upstream-call [N] | hub-upstream-call [N] | hub-upstream-progress [N] [ROUNDS] | tool-search [TOOLS] [Q] | surface-bytes [UPSTREAM_TOOLS]
//! cargo run -p tuic-tests --release --bin bench -- worktree-list [WORKTREES] [COMMITS] [CALLS]
//! cargo run -p tuic-tests --release --bin bench -- branch-integrations [BRANCHES] [COMMITS] [CALLS]
//! cargo run -p tuic-tests --release --bin bench -- acp-stream [CHUNKS] [STAMPED] [IDLE]
//! cargo run -p tuic-tests --release --bin bench -- fed-scale [N] [SESSIONS_PER_NODE] [--holders]
//! ```
//!
//! Every workload also measures the bare-PTY floor in the same run (a child writing into a PTY
//! that this process reads directly, no node) and prints ratios against it.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{SinkExt, StreamExt};
use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tuic_tests::bench_attach::bare_round_trips;
use tuic_tests::term::{Node, read_until};
use tuic_tests::{cpu_secs, percentile, records};

const T: Duration = Duration::from_secs(300);

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match args.first().map(String::as_str) {
        Some("pty-throughput") => {
            let mib = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
            rt.block_on(throughput(mib))
        }
        Some("keystroke-latency") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
            rt.block_on(latency(n))
        }
        Some("screen-keystroke") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(300);
            let gap = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(60);
            rt.block_on(screen_keystroke(n, gap))
        }
        Some("idle-rss") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
            rt.block_on(idle_rss(n))
        }
        Some("mail-latency") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(500);
            rt.block_on(mail::latency(n))
        }
        Some("mcp-session-list") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100);
            let calls = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(500);
            rt.block_on(mcp_session_list(n, calls))
        }
        Some("mcp-resource-read") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2_000);
            rt.block_on(tuic_tests::bench_mcp::resource_read(n))
        }
        Some("fed-stream") => {
            let mib = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
            rt.block_on(tuic_tests::bench_fed::stream(mib))
        }
        Some("attach-keystroke") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
            rt.block_on(tuic_tests::bench_attach::keystroke(n))
        }
        Some("fed-keystroke") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
            rt.block_on(tuic_tests::bench_fed::keystroke(n))
        }
        Some("outbox-store") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1_000);
            let kib = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
            tuic_tests::bench_outbox::run_both(n, kib)
        }
        Some("floor-echo" | "floor-relay" | "floor-client") => {
            rt.block_on(tuic_tests::bench_floor::role(&args))
        }
        Some("fed-scale") => {
            let holders = args.iter().any(|a| a == "--holders");
            let nums: Vec<usize> = args[1..].iter().filter_map(|s| s.parse().ok()).collect();
            let n = nums.first().copied().unwrap_or(50);
            let per_node = nums.get(1).copied().unwrap_or(4);
            rt.block_on(tuic_tests::bench_fedscale::run(n, per_node, holders))
        }
        Some("fed-mail") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
            let senders = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
            rt.block_on(tuic_tests::bench_fed::mail(n, senders))
        }
        Some("fed-mail-quic") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
            let loss = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
            rt.block_on(tuic_tests::bench_quic::mail(n, loss))
        }
        Some("fed-impaired") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100);
            let loss = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5.0);
            let delay = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(100);
            rt.block_on(tuic_tests::bench_quic::impaired(n, loss, delay))
        }
        Some("upstream-call") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2_000);
            rt.block_on(tuic_tests::bench_upstream::call(n))
        }
        Some("hub-upstream-call") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2_000);
            rt.block_on(tuic_tests::bench_upstream::hub_call(n))
        }
        Some("hub-upstream-progress") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100_000);
            let rounds = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
            rt.block_on(tuic_tests::bench_upstream::hub_progress(n, rounds))
        }
        Some("tool-search") => {
            let tools = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1_000);
            let q = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2_000);
            rt.block_on(tuic_tests::bench_upstream::search(tools, q))
        }
        Some("surface-bytes") => {
            let tools = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(180);
            rt.block_on(tuic_tests::bench_upstream::surface(tools))
        }
        Some("notify") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(500);
            let flood = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
            rt.block_on(tuic_tests::bench_notify::run(n, flood))
        }
        Some("upload-copy") => rt.block_on(tuic_tests::bench_upload::run(
            tuic_tests::bench_upload::TreeSpec::FULL,
        )),
        Some("upload-copy-netns") => rt.block_on(tuic_tests::bench_upload::run_netns(
            tuic_tests::bench_upload::TreeSpec::FULL,
        )),
        Some("progress-journal") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100_000);
            rt.block_on(tuic_tests::bench_progress::journal(n))
        }
        Some("stories-list") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
            rt.block_on(tuic_tests::bench_stories::list(n))
        }
        Some("workflow-events") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100);
            rt.block_on(tuic_tests::bench_stories::workflow_events(n))
        }
        Some("metrics-scrape") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1_000);
            rt.block_on(tuic_tests::bench_progress::metrics(n))
        }
        Some("worktree-list") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(50);
            let commits = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20_000);
            let calls = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(30);
            rt.block_on(tuic_tests::bench_worktrees::worktree_list(
                n, commits, calls,
            ))
        }
        Some("branch-integrations") => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
            let commits = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20_000);
            let calls = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(20);
            rt.block_on(tuic_tests::bench_worktrees::branch_integrations(
                n, commits, calls,
            ))
        }
        Some("review-diff") => {
            let commits = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20_000);
            let calls = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(50);
            rt.block_on(tuic_tests::bench_review::review_diff(commits, calls))
        }
        Some("acp-stream") => {
            let chunks = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
            let stamped = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(500);
            let idle = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(20);
            rt.block_on(tuic_tests::bench_acp::stream(chunks, stamped, idle))
        }
        _ => bail!(
            "usage: bench review-diff [COMMITS] [CALLS] | acp-stream [CHUNKS] [STAMPED] [IDLE] | worktree-list [WORKTREES] [COMMITS] [CALLS] | branch-integrations [BRANCHES] [COMMITS] [CALLS] | progress-journal [N] | stories-list [N] | workflow-events [STEPS] | metrics-scrape [SESSIONS] | pty-throughput [MiB] | keystroke-latency [N] | screen-keystroke [N] [GAP_MS] | idle-rss [N] | mcp-session-list [N] [CALLS] | mcp-resource-read [READS] | mail-latency [N] | upload-copy | upload-copy-netns | fed-stream [MiB] | fed-keystroke [N] | attach-keystroke [N] | fed-mail [N] [SENDERS] | fed-scale [N] [SESSIONS_PER_NODE] [--holders] | fed-mail-quic [N] [LOSS_PERCENT] | fed-impaired [N] [LOSS_PERCENT] [DELAY_MS] | outbox-store [N] [KiB] | upstream-call [N] | hub-upstream-call [N] | hub-upstream-progress [N] [ROUNDS] | tool-search [TOOLS] [Q] | surface-bytes [UPSTREAM_TOOLS]"
        ),
    }
}

/// Resident set size of a process, in KiB.
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("VmRSS")?;
    Ok(line.split_whitespace().nth(1).context("rss")?.parse()?)
}

/// Reader, writer and child of a PTY opened by the benchmark itself.
type BarePty = (
    Box<dyn Read + Send>,
    Box<dyn Write + Send>,
    Box<dyn portable_pty::Child + Send + Sync>,
);

/// A child on a fresh PTY, read directly by this process (the floor).
fn bare_pty(script: &str) -> anyhow::Result<BarePty> {
    let pair = native_pty_system().openpty(PtySize {
        rows: 24,
        cols: 80,
        pixel_width: 0,
        pixel_height: 0,
    })?;
    let mut cmd = CommandBuilder::new("/bin/sh");
    cmd.args(["-c", script]);
    let child = pair.slave.spawn_command(cmd)?;
    drop(pair.slave);
    let r = pair.master.try_clone_reader()?;
    let w = pair.master.take_writer()?;
    // The master must stay open while the child runs: leak it into the reader's lifetime.
    std::mem::forget(pair.master);
    Ok((r, w, child))
}

/// Reads a PTY until `marker` appears; returns what was read.
fn read_until_marker(r: &mut dyn Read, marker: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(marker.len()).any(|w| w == marker) {
        let n = r.read(&mut buf)?;
        if n == 0 {
            bail!("eof before marker");
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(got)
}

fn bare_throughput(file: &std::path::Path, size: usize) -> anyhow::Result<(f64, usize)> {
    let (mut r, mut w, mut child) = bare_pty(&format!(
        "stty raw -echo; printf READY; read go; cat {}",
        file.display()
    ))?;
    read_until_marker(&mut r, b"READY")?;
    w.write_all(b"go\n")?;
    let start = Instant::now();
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0usize;
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let _ = child.wait();
    if n != size {
        eprintln!("bare pty: read {n} of {size} bytes");
    }
    Ok((secs, n))
}

async fn throughput(mib: usize) -> anyhow::Result<()> {
    let size = mib << 20;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("payload.txt");
    std::fs::write(&file, records::payload(size, false, 11))?;
    let (bare_secs, bare_n) = tokio::task::spawn_blocking({
        let f = file.clone();
        move || bare_throughput(&f, size)
    })
    .await??;

    let node = Node::start(None).await?;
    let pid = node.pid().context("node pid")?;
    let c = node
        .create(json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp",
            "args": ["-c", format!("stty raw -echo; printf READY; read go; cat {}", file.display())]}))
        .await?;
    let id = c["session_id"].as_str().context("id")?.to_owned();
    let mut ws = node.ws(&id, "?binary=1&from_byte=0").await?;
    read_until(&mut ws, b"READY", T).await?;
    let cpu0 = cpu_secs(pid)?;
    let start = Instant::now();
    node.write(&id, "go\n").await?;
    let mut n = 0usize;
    let mut lagged = 0u64;
    let mut exit = false;
    while let Some(m) = tokio::time::timeout(T, ws.next()).await? {
        match m? {
            Message::Binary(b) => n += b.len(),
            Message::Text(t) => {
                let v: serde_json::Value = serde_json::from_str(t.as_str())?;
                match v["type"].as_str() {
                    Some("exit") => exit = true,
                    Some("lagged") => lagged += v["missed"].as_u64().unwrap_or(0),
                    _ => {}
                }
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_secs(pid)? - cpu0;
    let mb = size as f64 / 1e6;
    println!("pty-throughput payload={mib} MiB");
    println!(
        "  bare pty : {:.3} s  {:.1} MB/s  bytes={bare_n}",
        bare_secs,
        mb / bare_secs
    );
    println!(
        "  tuic-node: {:.3} s  {:.1} MB/s  bytes={n} exact={} lagged={lagged} exit_frame={exit}",
        secs,
        mb / secs,
        n == size
    );
    println!("  ratio (node/bare throughput): {:.2}", bare_secs / secs);
    println!(
        "  node CPU: {:.2} s ({:.2} s per 64 MiB)",
        cpu,
        cpu * 64.0 / mib as f64
    );
    Ok(())
}

/// `screen-keystroke`: one `cat` session watched by a raw byte stream and a screen-sync stream
/// at once; each keystroke is timed to its raw echo frame and to the screen frame showing it.
/// Keys go `gap_ms` apart (default 60 ms, fast typing): a change after a quiet spell is framed
/// at once, while changes closer together than the frame interval (16–50 ms) are coalesced by
/// design, so `GAP_MS=0` measures the rate limit rather than the latency.
async fn screen_keystroke(n: usize, gap_ms: u64) -> anyhow::Result<()> {
    use tuic_proto::screen::{ClientFrame, Mirror, ServerFrame};
    let node = Node::start(None).await?;
    let c = node
        .create(
            json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp",
            "args": ["-c", "stty raw -echo; printf READY; exec cat"]}),
        )
        .await?;
    let id = c["session_id"].as_str().context("id")?.to_owned();
    let mut raw = node.ws(&id, "?binary=1&from_byte=0").await?;
    read_until(&mut raw, b"READY", T).await?;
    let mut scr = node.ws(&id, "?mode=screen").await?;
    let mut mirror = Mirror::default();
    let mut screen_bytes = 0usize;
    // Applies screen frames (acking each) until `done` holds for the mirror.
    async fn screen_until(
        scr: &mut tuic_tests::term::Ws,
        mirror: &mut Mirror,
        bytes: &mut usize,
        done: &dyn Fn(&Mirror) -> bool,
    ) -> anyhow::Result<()> {
        while !done(mirror) {
            let m = tokio::time::timeout(T, scr.next())
                .await?
                .context("screen stream closed")??;
            if let Message::Text(t) = m {
                *bytes += t.len();
                let f: ServerFrame = serde_json::from_str(t.as_str())?;
                if let Some(seq) = mirror.apply(&f)? {
                    let a = serde_json::to_string(&ClientFrame::Ack { seq })?;
                    scr.send(Message::Text(a.into())).await?;
                }
            }
        }
        Ok(())
    }
    let cursor = |m: &Mirror| m.screen.as_ref().map(|s| (s.cursor.x, s.cursor.y));
    screen_until(&mut scr, &mut mirror, &mut screen_bytes, &|m| {
        cursor(m) == Some((5, 0))
    })
    .await?;
    let (mut raw_ms, mut screen_ms) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut x, mut y) = (5u16, 0u16);
    let mut raw_bytes = 0usize;
    for i in 0..n {
        if x >= 70 {
            // A new line, untimed: both views catch up first.
            raw.send(Message::Binary(b"\r\n".to_vec().into())).await?;
            raw_bytes += read_until(&mut raw, b"\n", T).await?.len();
            y = (y + 1).min(23);
            x = 0;
            screen_until(&mut scr, &mut mirror, &mut screen_bytes, &|m| {
                cursor(m) == Some((0, y))
            })
            .await?;
        }
        if gap_ms > 0 {
            tokio::time::sleep(Duration::from_millis(gap_ms)).await;
        }
        let key = [b'a' + (i % 26) as u8];
        let t0 = Instant::now();
        raw.send(Message::Binary(key.to_vec().into())).await?;
        x += 1;
        let want = Some((x, y));
        let (r, s) = tokio::join!(
            async {
                let got = read_until(&mut raw, &key, T).await;
                (got, t0.elapsed().as_secs_f64() * 1e3)
            },
            async {
                let got = screen_until(&mut scr, &mut mirror, &mut screen_bytes, &|m| {
                    cursor(m) == want
                })
                .await;
                (got, t0.elapsed().as_secs_f64() * 1e3)
            }
        );
        raw_bytes += r.0?.len();
        s.0?;
        raw_ms.push(r.1);
        screen_ms.push(s.1);
    }
    node.ok("DELETE", &format!("/sessions/{id}"), None).await?;
    println!(
        "screen-keystroke round trips={n} gap={gap_ms} ms (key -> PTY -> cat -> raw echo frame | screen frame)"
    );
    let (r50, r99) = (percentile(&mut raw_ms, 0.5), percentile(&mut raw_ms, 0.99));
    let (s50, s99) = (
        percentile(&mut screen_ms, 0.5),
        percentile(&mut screen_ms, 0.99),
    );
    println!("  raw echo frame   p50 {r50:.3} ms  p99 {r99:.3} ms  ({raw_bytes} bytes)");
    println!("  screen frame     p50 {s50:.3} ms  p99 {s99:.3} ms  ({screen_bytes} bytes)");
    println!(
        "  screen adds p50 {:.3} ms, p99 {:.3} ms",
        s50 - r50,
        s99 - r99
    );
    Ok(())
}

async fn node_round_trips(node: &Node, n: usize) -> anyhow::Result<Vec<f64>> {
    let c = node
        .create(
            json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp",
            "args": ["-c", "stty raw -echo; printf READY; exec cat"]}),
        )
        .await?;
    let id = c["session_id"].as_str().context("id")?.to_owned();
    let mut ws = node.ws(&id, "?binary=1&from_byte=0").await?;
    read_until(&mut ws, b"READY", T).await?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let key = [b'a' + (i % 26) as u8];
        let t0 = Instant::now();
        ws.send(Message::Binary(key.to_vec().into())).await?;
        read_until(&mut ws, &key, T).await?;
        out.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    node.ok("DELETE", &format!("/sessions/{id}"), None).await?;
    Ok(out)
}

/// [`node_round_trips`] on a thread of its own with its own runtime: the typing client is a
/// program apart from the bulk stream's subscriber (whose reads keep this process's runtime
/// busy), as the bare floor's client is. Blocks the calling thread.
fn round_trips_apart(node: &Node, n: usize) -> anyhow::Result<Vec<f64>> {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(node_round_trips(node, n))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the keystroke client thread panicked"))?
    })
}

async fn latency(n: usize) -> anyhow::Result<()> {
    let mut bare = tokio::task::spawn_blocking(move || bare_round_trips(n)).await??;
    let node = Node::start(None).await?;
    let mut idle = round_trips_apart(&node, n)?;
    // Another session streams bulk output, with a subscriber reading it, the whole time.
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("bulk.txt");
    std::fs::write(&file, records::payload(8 << 20, false, 13))?;
    let bulk = node
        .create(
            json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp",
            "args": ["-c", format!("while :; do cat {}; done", file.display())]}),
        )
        .await?;
    let bulk_id = bulk["session_id"].as_str().context("id")?.to_owned();
    let mut bulk_ws = node.ws(&bulk_id, "?binary=1").await?;
    let reader = tokio::spawn(async move {
        let mut n = 0usize;
        while let Some(Ok(m)) = bulk_ws.next().await {
            if let Message::Binary(b) = m {
                n += b.len();
            }
        }
        n
    });
    let t0 = Instant::now();
    let mut busy = round_trips_apart(&node, n)?;
    // The machine's own floor under the same load: a PTY read directly while the bulk stream
    // still runs.
    let mut bare_busy = tokio::task::spawn_blocking(move || bare_round_trips(n)).await??;
    let busy_secs = t0.elapsed().as_secs_f64();
    node.ok("DELETE", &format!("/sessions/{bulk_id}"), None)
        .await?;
    let streamed = reader.await?;
    println!("keystroke-latency round trips={n} (WebSocket key -> PTY -> cat -> PTY -> WebSocket)");
    let line = |name: &str, v: &mut Vec<f64>| {
        let p50 = percentile(v, 0.5);
        let p99 = percentile(v, 0.99);
        println!("  {name:<28} p50 {p50:.3} ms  p99 {p99:.3} ms");
        (p50, p99)
    };
    let (b50, b99) = line("bare pty", &mut bare);
    let (i50, i99) = line("tuic-node idle", &mut idle);
    let (u50, u99) = line("tuic-node with bulk stream", &mut busy);
    let (bb50, bb99) = line("bare pty with bulk stream", &mut bare_busy);
    println!(
        "  bulk session streamed {:.1} MB to its subscriber during the loaded runs ({:.1} MB/s)",
        streamed as f64 / 1e6,
        streamed as f64 / 1e6 / busy_secs
    );
    println!(
        "  ratios vs bare: idle p50 {:.1}x p99 {:.1}x; busy p50 {:.1}x p99 {:.1}x",
        i50 / b50,
        i99 / b99,
        u50 / b50,
        u99 / b99
    );
    println!(
        "  ratios under the same bulk load (node/bare): p50 {:.1}x p99 {:.1}x",
        u50 / bb50,
        u99 / bb99
    );
    Ok(())
}

async fn idle_rss(n: usize) -> anyhow::Result<()> {
    let node = Node::start(None).await?;
    let pid = node.pid().context("node pid")?;
    let before = rss_kib(pid)?;
    let mut ids = Vec::new();
    for _ in 0..n {
        let c = node
            .create(json!({"rows": 24, "cols": 80, "shell": "/bin/bash", "args": ["--norc", "-i"], "cwd": "/tmp"}))
            .await?;
        ids.push(c["session_id"].as_str().context("id")?.to_owned());
    }
    // Wait (bounded) until every shell printed its prompt.
    for id in &ids {
        for _ in 0..500 {
            let o = node
                .ok("GET", &format!("/sessions/{id}/output?format=raw"), None)
                .await?;
            if o["total_written"].as_u64().unwrap_or(0) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let after = rss_kib(pid)?;
    let per = (after.saturating_sub(before)) as f64 / n as f64;
    println!("idle-rss sessions={n} (bash --norc -i)");
    println!("  node RSS before {before} KiB, after {after} KiB");
    println!("  per session: {per:.1} KiB ({:.3} MiB)", per / 1024.0);
    Ok(())
}

/// `tools/call session action=list` over IPC (one HTTP/1.1 connection per call, as the CLI
/// and bridge make them) with `n` live sessions: p50/p99 of the whole request.
async fn mcp_session_list(n: usize, calls: usize) -> anyhow::Result<()> {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    let node = Node::start(None).await?;
    for _ in 0..n {
        node.create(json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp"}))
            .await?;
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "session", "arguments": {"action": "list"}}});
    // Warm-up, and a check that the answer really lists every session.
    let first = node.ok("POST", "/mcp", Some(body.clone())).await?;
    let text = first["result"]["content"][0]["text"]
        .as_str()
        .context("tool text")?;
    let listed: serde_json::Value = serde_json::from_str(text)?;
    if listed["count"].as_u64() != Some(n as u64) {
        bail!("session list answered {listed}");
    }
    // A fresh connection per call, the answer parsed (what the figures before 2026-12-04 measured).
    let mut fresh = Vec::with_capacity(calls);
    let mut health = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t0 = Instant::now();
        node.ok("GET", "/health", None).await?;
        health.push(t0.elapsed().as_secs_f64() * 1e3);
        let t0 = Instant::now();
        node.ok("POST", "/mcp", Some(body.clone())).await?;
        fresh.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    // One kept-alive connection, as the bridge and the hub hold theirs; bytes only.
    let s = tokio::net::UnixStream::connect(&node.socket).await?;
    let (mut send, c) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s)).await?;
    tokio::spawn(c);
    let raw = Bytes::from(body.to_string());
    let mut kept = Vec::with_capacity(calls);
    let mut kept_rest = Vec::with_capacity(calls);
    let mut kept_health = Vec::with_capacity(calls);
    for i in 0..calls * 3 {
        let (method, path, b) = match i % 3 {
            0 => ("GET", "/health", Bytes::new()),
            1 => ("POST", "/mcp", raw.clone()),
            _ => ("GET", "/sessions", Bytes::new()),
        };
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(b))?;
        let t0 = Instant::now();
        send.ready().await?;
        let r = send.send_request(req).await?;
        if r.status() != 200 {
            bail!("{method} {path}: {}", r.status());
        }
        let got = r.into_body().collect().await?.to_bytes();
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        if got.is_empty() {
            bail!("{method} {path}: empty answer");
        }
        [&mut kept_health, &mut kept, &mut kept_rest][i % 3].push(ms);
    }
    let q = |v: &mut Vec<f64>| (percentile(v, 0.5), percentile(v, 0.99));
    println!(
        "mcp-session-list sessions={n} calls={calls} response={} bytes",
        text.len()
    );
    for (what, v) in [
        ("GET /health, fresh connection (floor)", &mut health),
        (
            "tools/call session action=list, fresh connection + parse",
            &mut fresh,
        ),
        (
            "GET /health, kept-alive connection (floor)",
            &mut kept_health,
        ),
        ("tools/call session action=list, kept-alive", &mut kept),
        ("GET /sessions, kept-alive", &mut kept_rest),
    ] {
        let (p50, p99) = q(v);
        println!("  {what}: p50 {p50:.3} ms  p99 {p99:.3} ms");
    }
    Ok(())
}

mod mail {
    use std::time::Instant;

    use anyhow::Context;
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use serde_json::{Value, json};
    use tuic_tests::term::Node;

    use super::percentile;

    struct Peer {
        send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
        sid: String,
        id: u64,
    }

    async fn conn(
        node: &Node,
    ) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
        let s = tokio::net::UnixStream::connect(&node.socket).await?;
        let (send, c) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s)).await?;
        tokio::spawn(c);
        Ok(send)
    }

    impl Peer {
        async fn new(node: &Node) -> anyhow::Result<Self> {
            let mut p = Peer {
                send: conn(node).await?,
                sid: String::new(),
                id: 0,
            };
            let (_, sid) = p
                .rpc(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}))
                .await?;
            p.sid = sid.context("no session id")?;
            Ok(p)
        }

        async fn twin(&self, node: &Node) -> anyhow::Result<Self> {
            Ok(Peer {
                send: conn(node).await?,
                sid: self.sid.clone(),
                id: 1 << 40,
            })
        }

        async fn rpc(&mut self, msg: Value) -> anyhow::Result<(Value, Option<String>)> {
            let mut b = hyper::Request::builder()
                .method("POST")
                .uri("/mcp")
                .header("host", "localhost")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream");
            if !self.sid.is_empty() {
                b = b.header("mcp-session-id", &self.sid);
            }
            self.send.ready().await?;
            let r = self
                .send
                .send_request(b.body(Full::new(Bytes::from(msg.to_string())))?)
                .await?;
            let sid = r
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = r.into_body().collect().await?.to_bytes();
            Ok((serde_json::from_slice(&body)?, sid))
        }

        async fn agent(&mut self, args: Value) -> anyhow::Result<Value> {
            self.id += 1;
            let (v, _) = self
                .rpc(json!({"jsonrpc":"2.0","id":self.id,"method":"tools/call","params":{"name":"agent","arguments":args}}))
                .await?;
            let text = v["result"]["content"][0]["text"]
                .as_str()
                .context("no tool result")?;
            anyhow::ensure!(v["result"]["isError"] != true, "agent failed: {text}");
            Ok(serde_json::from_str(text)?)
        }
    }

    pub(super) async fn latency(n: usize) -> anyhow::Result<()> {
        let node = Node::start(None).await?;
        let mut a = Peer::new(&node).await?;
        let mut b = Peer::new(&node).await?;
        let ta = a.agent(json!({"action":"register","name":"a"})).await?["tuic_session"]
            .as_str()
            .context("id")?
            .to_owned();
        b.agent(json!({"action":"register","name":"b"})).await?;
        let mut a2 = a.twin(&node).await?;
        let mut lat = Vec::with_capacity(n);
        let mut not_pending = 0;
        for i in 0..n {
            let w = tokio::spawn(async move {
                let r = a2.agent(json!({"action":"wait","timeout_ms":30000})).await;
                (a2, r, Instant::now())
            });
            // Give the wait a head start so it is pending; samples where it was not are dropped.
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            let t0 = Instant::now();
            let s = b
                .agent(json!({"action":"send","to":ta,"message":format!("p{i}")}))
                .await?;
            let (back, r, t1) = w.await?;
            a2 = back;
            r?;
            if s["delivery_path"] == "waiter" {
                lat.push((t1 - t0).as_secs_f64() * 1e3);
            } else {
                not_pending += 1;
            }
        }
        // Throughput: the sender streams, the recipient drains concurrently.
        let m = n * 4;
        let t0 = Instant::now();
        let to = ta.clone();
        let sender = tokio::spawn(async move {
            for i in 0..m {
                b.agent(json!({"action":"send","to":to,"message":format!("t{i}")}))
                    .await?;
            }
            anyhow::Ok(())
        });
        let mut got = 0usize;
        let mut rounds = 0usize;
        // Evictions are reported by whichever read comes first: the waits, then the last inbox.
        let mut missed = 0usize;
        // Bounded: every round either receives mail or, once the sender is done, ends.
        while rounds < m * 2 {
            rounds += 1;
            let w = a.agent(json!({"action":"wait","timeout_ms":1000})).await?;
            got += w["new_messages"].as_array().map_or(0, Vec::len);
            missed += w["missed_count"].as_u64().unwrap_or(0) as usize;
            if got >= m || (w["timed_out"] == true && sender.is_finished()) {
                break;
            }
        }
        let recv_secs = t0.elapsed().as_secs_f64();
        sender.await??;
        missed += a.agent(json!({"action":"inbox"})).await?["missed_count"]
            .as_u64()
            .unwrap_or(0) as usize;
        let secs = recv_secs;
        println!("mail-latency peers=2 transport=IPC (MCP over HTTP/1.1 keep-alive)");
        println!(
            "  send -> pending wait wake-up: p50 {:.3} ms  p99 {:.3} ms  ({} samples, {} dropped: wait not yet pending)",
            percentile(&mut lat, 0.5),
            percentile(&mut lat, 0.99),
            lat.len(),
            not_pending
        );
        println!(
            "  sustained: {m} messages sent, {got} received by wait in {secs:.2} s = {:.0} msg/s ({rounds} wait calls, {missed} evicted unread)",
            got as f64 / secs
        );
        anyhow::ensure!(got + missed == m, "received {got} + missed {missed} of {m}");
        Ok(())
    }
}
