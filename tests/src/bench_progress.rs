//! Benchmarks of the progress journal and the metrics scrape (`bench progress-journal`,
//! `bench metrics-scrape`).
//!
//! `progress-journal`: appends N entries (default 100,000) over 10 projects straight into the
//! node's journal in a fresh `state.redb` (each append is one committed, durable `redb`
//! transaction, as in the node), then starts a real `tuic-node` on that store and measures
//! `POST /progress/list` pages over IPC (first pages, deep cursors, a filtered page), and
//! `progress` tool calls end to end (MCP over IPC, commit and event included).
//!
//! `metrics-scrape`: a node with N sessions (default 1,000) and `GET /metrics` p50/p99.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tuic_node::progress::journal::{Journal, Kind, NewEntry, Origin};

use crate::{NodeProc, config_dir, enc, ipc};

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// `bench progress-journal [N]`.
pub async fn journal(n: usize) -> anyhow::Result<()> {
    let dir = config_dir(json!({}));
    let projects: Vec<tempfile::TempDir> = (0..10)
        .map(|_| tempfile::tempdir())
        .collect::<Result<_, _>>()?;
    let names: Vec<String> = projects
        .iter()
        .map(|p| std::fs::canonicalize(p.path()).map(|p| p.to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    let store = Arc::new(tuic_node::store::Store::open(
        &dir.path().join("state.redb"),
    )?);
    let journal = Journal::open(store.clone())?;
    let mut append = Vec::with_capacity(n);
    let t_all = Instant::now();
    for i in 0..n {
        let kind = if i % 10 == 9 {
            Kind::Blocked
        } else {
            Kind::Done
        };
        let e = NewEntry {
            project: names[i % names.len()].clone(),
            kind,
            text: format!("step {i}: rebuilt the parser and ran the suite; 412 tests passed"),
            step: Some(format!("{}", i % 7)),
            origin: Origin::Agent,
            pty_id: Some(format!("pty-{:04}", i % 40)),
            tuic_session: None,
            agent_name: Some("bench".into()),
            agent_type: Some("claude".into()),
            run_id: None,
        };
        let t0 = Instant::now();
        journal.append(e, i as u64)?;
        append.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let total_s = t_all.elapsed().as_secs_f64();
    let retained = journal.len();
    drop(journal);
    drop(store);
    println!(
        "progress-journal entries={n} projects=10 retained={retained} (10,000 newest per project)"
    );
    let (p50, p99, max) = (
        pct(&mut append, 0.5),
        pct(&mut append, 0.99),
        pct(&mut append, 1.0),
    );
    println!(
        "  append (durable redb commit each): p50 {p50:.3} ms  p99 {p99:.3} ms  max {max:.3} ms  ({:.0}/s)",
        n as f64 / total_s
    );
    // A real node on that store: its index is rebuilt at open.
    let t0 = Instant::now();
    let node = NodeProc::start(
        "tuic-node",
        &["--config-dir", dir.path().to_str().context("utf-8")?],
        &[],
    )?;
    println!(
        "  node start with the journal (index rebuilt): {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    for n in &names {
        let r = ipc(&node.socket, "POST", "/repos", Some(json!({"path": n}))).await?;
        if r.status != 200 {
            bail!("repo add {}", r.status);
        }
    }
    let path = |i: usize| format!("/progress/list?path={}", enc(&names[i % names.len()]));
    let first = ipc(&node.socket, "POST", &path(0), Some(json!({})))
        .await?
        .json();
    let total = first["total"].as_u64().unwrap_or(0);
    if first["entries"].as_array().map(Vec::len) != Some(8) {
        bail!("first page: {first}");
    }
    let top = first["entries"][0]["id"].as_u64().unwrap_or(0);
    let mut first_pages = Vec::new();
    let mut deep = Vec::new();
    let mut filtered = Vec::new();
    for i in 0..1_000usize {
        let t0 = Instant::now();
        let r = ipc(&node.socket, "POST", &path(i), Some(json!({}))).await?;
        first_pages.push(t0.elapsed().as_secs_f64() * 1e3);
        if r.status != 200 {
            bail!("list {}", r.status);
        }
        // A cursor somewhere in the middle of the retained window.
        let cursor = top.saturating_sub(((i * 7919) % 90_000) as u64);
        let t0 = Instant::now();
        let r = ipc(
            &node.socket,
            "POST",
            &path(i),
            Some(json!({"cursor": cursor, "limit": 100})),
        )
        .await?;
        deep.push(t0.elapsed().as_secs_f64() * 1e3);
        if r.status != 200 {
            bail!("deep list {}", r.status);
        }
        let t0 = Instant::now();
        ipc(
            &node.socket,
            "POST",
            &path(i),
            Some(json!({"blockedOnly": true, "ptyId": format!("pty-{:04}", i % 40)})),
        )
        .await?;
        filtered.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    println!("  POST /progress/list over IPC (project total {total}):");
    println!(
        "    first page (8):            p50 {:.3} ms  p99 {:.3} ms",
        pct(&mut first_pages, 0.5),
        pct(&mut first_pages, 0.99)
    );
    println!(
        "    deep cursor page (100):    p50 {:.3} ms  p99 {:.3} ms",
        pct(&mut deep, 0.5),
        pct(&mut deep, 0.99)
    );
    println!(
        "    blockedOnly+ptyId page (8): p50 {:.3} ms  p99 {:.3} ms",
        pct(&mut filtered, 0.5),
        pct(&mut filtered, 0.99)
    );
    // End to end through the tool.
    let (mut agent, _) = crate::agent::Agent::register(
        &node.socket,
        json!({"action": "register", "name": "bench", "path": names[0]}),
    )
    .await;
    let mut tool = Vec::new();
    for i in 0..1_000 {
        let t0 = Instant::now();
        let (err, v): (bool, Value) = agent
            .tool(
                "progress",
                json!({"type": "done", "text": format!("tool step {i}")}),
            )
            .await;
        tool.push(t0.elapsed().as_secs_f64() * 1e3);
        if err {
            bail!("progress tool: {v}");
        }
    }
    println!(
        "  progress tool call over IPC (MCP + commit + event): p50 {:.3} ms  p99 {:.3} ms",
        pct(&mut tool, 0.5),
        pct(&mut tool, 0.99)
    );
    Ok(())
}

/// `bench metrics-scrape [SESSIONS]`.
pub async fn metrics(sessions: usize) -> anyhow::Result<()> {
    let dir = config_dir(json!({}));
    let node = NodeProc::start(
        "tuic-node",
        &["--config-dir", dir.path().to_str().context("utf-8")?],
        &[],
    )?;
    for _ in 0..sessions {
        let r = ipc(
            &node.socket,
            "POST",
            "/sessions",
            Some(json!({"shell": "/bin/sh", "args": ["-c", "echo up; exec sleep 100000"], "cwd": "/tmp"})),
        )
        .await?;
        if r.status != 200 {
            bail!("create: {}", String::from_utf8_lossy(&r.body));
        }
    }
    let first = ipc(&node.socket, "GET", "/metrics", None).await?;
    let text = String::from_utf8_lossy(&first.body).into_owned();
    let live = text
        .lines()
        .find_map(|l| l.strip_prefix("tuic_sessions "))
        .unwrap_or("?")
        .to_owned();
    let mut v = Vec::new();
    for _ in 0..500 {
        let t0 = Instant::now();
        let r = ipc(&node.socket, "GET", "/metrics", None).await?;
        v.push(t0.elapsed().as_secs_f64() * 1e3);
        if r.status != 200 {
            bail!("scrape {}", r.status);
        }
    }
    println!(
        "metrics-scrape sessions={sessions} (tuic_sessions {live}) exposition={} bytes",
        first.body.len()
    );
    println!(
        "  GET /metrics over IPC: p50 {:.3} ms  p99 {:.3} ms",
        pct(&mut v, 0.5),
        pct(&mut v, 0.99)
    );
    Ok(())
}
