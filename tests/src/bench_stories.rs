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

/// `bench workflow-events [STEPS]`: a real node runs a STEPS-step graph (default 100) whose
/// workers are spawned shell scripts; the bench reports for each worker under its own bound
/// identity, then times 1,000 event pages (`events`, limit 100, at spread cursors) p50/p99.
pub async fn workflow_events(steps: usize) -> anyhow::Result<()> {
    use crate::agent::rpc_with;
    use crate::progress::Events;
    let dir = config_dir(json!({}));
    let d = dir.path().to_str().context("utf-8")?;
    let (code, _, err) =
        crate::run_with_stdin("tuic-node", &["set-password", "--config-dir", d], "pw")?;
    if code != 0 {
        bail!("set-password: {err}");
    }
    let node = NodeProc::start(
        "tuic-node",
        &[
            "--config-dir",
            d,
            "--remote-access",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
        ],
        &[],
    )?;
    let repo = tempfile::tempdir()?;
    let project = std::fs::canonicalize(repo.path())?
        .to_string_lossy()
        .into_owned();
    let worker = repo.path().join("worker.sh");
    std::fs::write(&worker, "#!/bin/sh\nexec sleep 600\n")?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755))?;
    }
    let post = |path: &'static str, body: serde_json::Value| {
        let socket = node.socket.clone();
        async move {
            let r = ipc(&socket, "POST", path, Some(body)).await?;
            if r.status != 200 {
                bail!("{path} {}: {}", r.status, String::from_utf8_lossy(&r.body));
            }
            Ok::<_, anyhow::Error>(r.json())
        }
    };
    post("/repos", json!({"path": project})).await?;
    let act = |input: serde_json::Value| json!({"input": input, "project_path": project});
    post(
        "/stories/action",
        act(json!({"action": "create", "title": "long graph"})),
    )
    .await?;
    let tcp = node.tcp.context("remote access")?;
    let human = |path: &'static str, body: serde_json::Value| async move {
        let r = reqwest::Client::new()
            .post(format!("http://{tcp}{path}"))
            .basic_auth("admin", Some("pw"))
            .json(&body)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("{path} {}", r.status());
        }
        Ok::<_, anyhow::Error>(r.json::<serde_json::Value>().await?)
    };
    human(
        "/stories/action",
        act(json!({"action": "approve", "id": "st-1", "expected_revision": 1})),
    )
    .await?;
    let step_defs: Vec<serde_json::Value> = (0..steps)
        .map(|i| json!({"id": format!("s{i}"), "agent": {"command": worker.to_string_lossy()}, "prompt": "step {stepId}"}))
        .collect();
    human("/workflows/definition/action", act(json!({"action": "publish", "definition_id": "long", "name": "long", "steps": step_defs}))).await?;
    let mut events = Events::subscribe(&node.socket, "workflow-run-changed").await;
    let t_run = Instant::now();
    let v = post(
        "/workflows/run/action",
        act(
            json!({"action": "start_graph", "target": {"type": "story", "id": "st-1"},
        "definition_id": "long", "definition_revision": 1, "request_id": "b"}),
        ),
    )
    .await?;
    let run_id = v["run"]["run_id"].as_str().context("run id")?.to_owned();
    for _ in 0..steps {
        // Wait for the current attempt's worker to be bound, then report as that worker.
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        let att = loop {
            let v = post(
                "/workflows/run/action",
                act(json!({"action": "get", "run_id": run_id})),
            )
            .await?;
            let a = &v["run"]["attempt"];
            if a["tuic_session"].is_string() {
                break a.clone();
            }
            let left = deadline
                .checked_duration_since(Instant::now())
                .context("a worker was not launched within 60 s")?;
            events
                .next_matching("workflow-run-changed", left, |v| {
                    v["payload"]["runId"] == run_id.as_str()
                })
                .await;
        };
        let tuic = att["tuic_session"].as_str().context("tuic")?;
        let h = [("x-tuic-session", tuic)];
        let r = rpc_with(&node.socket, None, &h, json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench-worker","version":"1"}}})).await;
        let sid = r.headers["mcp-session-id"].to_str()?.to_owned();
        rpc_with(
            &node.socket,
            Some(&sid),
            &h,
            json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        )
        .await;
        let rep = json!({"input": {"contractVersion": 1, "runId": run_id, "storyId": "st-1", "storyRevision": 2,
            "attemptId": att["attempt_id"], "generation": att["generation"], "outcome": "completed", "summary": "ok"}});
        let v = rpc_with(&node.socket, Some(&sid), &h, json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"workflow_report","arguments":rep}})).await.json();
        if v["result"]["isError"] == true {
            bail!("report: {v}");
        }
    }
    let v = post(
        "/workflows/run/action",
        act(json!({"action": "get", "run_id": run_id})),
    )
    .await?;
    if v["run"]["status"] != "completed" {
        bail!("run did not complete: {v}");
    }
    let total = v["run"]["sequence"].as_u64().unwrap_or(0);
    println!(
        "workflow-events steps={steps} events={total} run wall time {:.1} s (spawn + bind + report per step)",
        t_run.elapsed().as_secs_f64()
    );
    let mut pages = Vec::new();
    for i in 0..1_000u64 {
        let cursor = (i * 7919) % total.max(1);
        let t0 = Instant::now();
        post(
            "/workflows/run/action",
            act(json!({"action": "events", "run_id": run_id, "cursor": cursor, "limit": 100})),
        )
        .await?;
        pages.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "  event page (≤ 100): p50 {:.3} ms  p99 {:.3} ms",
        pct(&mut pages, 0.5),
        pct(&mut pages, 0.99)
    );
    Ok(())
}
