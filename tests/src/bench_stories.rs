//! `bench stories-list [N]`: N stories (default 10,000) created straight through the story
//! service in a fresh `state.redb` (each create one committed, durable `redb` transaction, as
//! in the node), then a real `tuic-node` on that store and `POST /stories/action` list pages
//! over IPC: the first page, pages at deep cursors, and a status-filtered page, p50/p99.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;
use tuic_node::stories::service::Ctx;
use tuic_node::stories::{Actor, Stories, StoryAction};

use crate::{NodeProc, config_dir, ipc};

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// `bench stories-list [N]`.
pub async fn list(n: usize) -> anyhow::Result<()> {
    let dir = config_dir(json!({}));
    let repo = tempfile::tempdir()?;
    let project = std::fs::canonicalize(repo.path())?
        .to_string_lossy()
        .into_owned();
    let store = Arc::new(tuic_node::store::Store::open(
        &dir.path().join("state.redb"),
    )?);
    let svc = Stories::open(store.clone())?;
    let ctx = Ctx {
        project: project.clone(),
        actor: Actor::LocalApi,
        now_ms: 1,
    };
    let t_all = Instant::now();
    let mut create = Vec::with_capacity(n);
    for i in 0..n {
        let a = StoryAction::from_value(
            &json!({"action": "create", "title": format!("story {i}: parse the config and report"),
            "description": "A paragraph of description that a real story would carry, about this long.",
            "acceptance_criteria": ["it parses", "it reports"]}),
        )?;
        let t0 = Instant::now();
        svc.execute(&ctx, a)?;
        create.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let total_s = t_all.elapsed().as_secs_f64();
    drop(svc);
    drop(store);
    println!(
        "stories-list stories={n}  create (durable commit each): p50 {:.3} ms  p99 {:.3} ms  ({:.0}/s)",
        pct(&mut create, 0.5),
        pct(&mut create, 0.99),
        n as f64 / total_s
    );
    let t0 = Instant::now();
    let node = NodeProc::start(
        "tuic-node",
        &["--config-dir", dir.path().to_str().context("utf-8")?],
        &[],
    )?;
    println!(
        "  node start with the stories (mirror rebuilt): {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    let r = ipc(
        &node.socket,
        "POST",
        "/repos",
        Some(json!({"path": project})),
    )
    .await?;
    if r.status != 200 {
        bail!("repo add {}", r.status);
    }
    let (mut first, mut deep, mut filtered) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..1_000usize {
        for (bucket, input) in [
            (&mut first, json!({"action": "list"})),
            (
                &mut deep,
                json!({"action": "list", "cursor": ((i * 7919) % n.max(1)) as u64, "limit": 100}),
            ),
            (
                &mut filtered,
                json!({"action": "list", "status": "backlog", "limit": 50}),
            ),
        ] {
            let t0 = Instant::now();
            let r = ipc(
                &node.socket,
                "POST",
                "/stories/action",
                Some(json!({"input": input, "project_path": project})),
            )
            .await?;
            bucket.push(t0.elapsed().as_secs_f64() * 1e3);
            if r.status != 200 {
                bail!("list {}: {}", r.status, String::from_utf8_lossy(&r.body));
            }
        }
    }
    for (name, v) in [
        ("first page (50)", &mut first),
        ("deep cursor page (100)", &mut deep),
        ("status-filtered page (50)", &mut filtered),
    ] {
        println!(
            "  {name}: p50 {:.3} ms  p99 {:.3} ms",
            pct(v, 0.5),
            pct(v, 0.99)
        );
    }
    Ok(())
}
