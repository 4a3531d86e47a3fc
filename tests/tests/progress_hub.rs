//! Acceptance across hosts: two agents (official Python MCP SDK clients) on two nodes in their
//! own network namespaces report done/blocked steps; the hub's `POST /progress/list` shows
//! both hosts' entries in order and paged, a node restart keeps its journal, a `blocked` entry
//! reaches an SSE subscriber on the hub within 1 s of its commit, Progress Flow of a node's
//! agent session is read through the hub by its address, an offline node is named, and the hub's
//! `/metrics` parses with the Prometheus parser with every node's samples labelled.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tuic_tests::fed::FedBed;
use tuic_tests::progress::{Events, tcp_forward};
use tuic_tests::{enc, ipc};

/// Milliseconds since the epoch, the clock journal entries are stamped with.
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

async fn hub_pages(bed: &FedBed, project: &str, limit: u64) -> (Vec<Value>, Vec<Value>) {
    let mut input = json!({"limit": limit});
    let mut entries = Vec::new();
    let mut pages = Vec::new();
    loop {
        let r = ipc(
            &bed.hub.socket,
            "POST",
            &format!("/progress/list?path={}", enc(project)),
            Some(input.clone()),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        entries.extend(v["entries"].as_array().unwrap().iter().cloned());
        let next = v["nextCursor"].clone();
        pages.push(v);
        if next.is_null() {
            break;
        }
        input["cursor"] = next;
        assert!(pages.len() < 50, "paging never ended");
    }
    (entries, pages)
}

async fn sdk_reports(
    python: &str,
    socket: &std::path::Path,
    name: &str,
    project: &str,
    reports: Value,
) {
    let url = tcp_forward(socket).await;
    let out = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(python)
            .arg(tuic_tests::clients_dir().join("mcp_python_progress.py"))
            .args([&url, name, project, &reports.to_string()])
            .output(),
    )
    .await
    .expect("client finished")
    .expect("client ran");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap();
    let r: Value = serde_json::from_str(line).unwrap();
    for s in r["sent"].as_array().unwrap() {
        assert_eq!(s["is_error"], false, "{s}");
    }
}

#[tokio::test]
async fn two_agents_on_two_nodes_report_and_the_hub_lists_them_in_order() {
    let python = tuic_tests::sdk_clients().python;
    let mut bed = FedBed::start(2).await.unwrap();
    // One project path; every namespace sees the same filesystem.
    let repo = tempfile::tempdir().unwrap();
    let project = std::fs::canonicalize(repo.path())
        .unwrap()
        .to_string_lossy()
        .into_owned();
    for n in &bed.nodes {
        let r = ipc(
            &n.proc().socket,
            "POST",
            "/repos",
            Some(json!({"path": project})),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200);
    }
    let mut hub_events = Events::subscribe(&bed.hub.socket, "progress-recorded").await;
    sdk_reports(
        &python,
        &bed.nodes[0].proc().socket,
        "agent-b",
        &project,
        json!([{"type": "done", "text": "b1", "step": "1"}, {"type": "done", "text": "b2"}]),
    )
    .await;
    sdk_reports(
        &python,
        &bed.nodes[1].proc().socket,
        "agent-c",
        &project,
        json!([{"type": "done", "text": "c1"}]),
    )
    .await;
    // A blocked step reported by a third Python SDK agent on node C reaches the hub's
    // subscriber within 1 s of its commit (the entry's `created_at_ms` is stamped before the
    // commit; node and hub share this machine's clock).
    let mut node_events = Events::subscribe(&bed.nodes[1].proc().socket, "progress-recorded").await;
    let w2 = tokio::spawn(async move {
        let ev = node_events
            .next_matching("progress-recorded", Duration::from_secs(60), |e| {
                e["text"] == "c2 needs review"
            })
            .await;
        (ev, wall_ms())
    });
    let watcher = tokio::spawn(async move {
        let ev = hub_events
            .next_matching("progress-recorded", Duration::from_secs(60), |e| {
                e["text"] == "c2 needs review" && e["connection_id"] == "nodec"
            })
            .await;
        (ev, wall_ms())
    });
    sdk_reports(
        &python,
        &bed.nodes[1].proc().socket,
        "agent-c2",
        &project,
        json!([{"type": "blocked", "text": "c2 needs review"}]),
    )
    .await;
    let (ev, arrived_ms) = watcher.await.unwrap();
    let (ev2, a2) = w2.await.unwrap();
    let local = a2.saturating_sub(
        ev2.expect("node C's own SSE")["created_at_ms"]
            .as_u64()
            .unwrap(),
    );
    let ev = ev.expect("the blocked entry relayed to the hub's SSE");
    let latency = arrived_ms.saturating_sub(ev["created_at_ms"].as_u64().unwrap());
    eprintln!(
        "blocked on node C → hub SSE subscriber: {latency} ms (node C's own SSE: {local} ms)"
    );
    assert!(
        latency < 1000,
        "{latency} ms (node C's own SSE: {local} ms)"
    );
    assert_eq!(ev["type"], "blocked");
    assert_eq!(ev["host"], "nodec");
    // The hub lists both hosts, newest first, paged without overlap.
    let (entries, pages) = hub_pages(&bed, &project, 2).await;
    let texts: Vec<&str> = entries
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    let hosts: Vec<&str> = entries
        .iter()
        .map(|e| e["host"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["c2 needs review", "c1", "b2", "b1"], "{pages:?}");
    assert_eq!(hosts, ["nodec", "nodec", "nodeb", "nodeb"]);
    let stamps: Vec<u64> = entries
        .iter()
        .map(|e| e["created_at_ms"].as_u64().unwrap())
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] >= w[1]), "{stamps:?}");
    assert_eq!(pages[0]["total"], 4);
    assert_eq!(pages.len(), 2);
    assert_eq!(entries[0]["agent_name"], "agent-c2");
    // One source through the hub.
    let r = ipc(
        &bed.hub.socket,
        "POST",
        &format!("/progress/list?path={}&connection=nodeb", enc(&project)),
        Some(json!({"blockedOnly": false})),
    )
    .await
    .unwrap()
    .json();
    assert_eq!(r["total"], 2);
    let blocked = ipc(
        &bed.hub.socket,
        "POST",
        &format!("/progress/list?path={}", enc(&project)),
        Some(json!({"blockedOnly": true})),
    )
    .await
    .unwrap()
    .json();
    assert_eq!(blocked["total"], 1);
    assert_eq!(blocked["entries"][0]["connection_id"], "nodec");
    let projects = ipc(&bed.hub.socket, "GET", "/progress/projects", None)
        .await
        .unwrap()
        .json();
    let mut phosts: Vec<&str> = projects["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["host"].as_str().unwrap())
        .collect();
    phosts.sort();
    assert_eq!(phosts, ["nodeb", "nodec"], "{projects}");

    // Progress Flow of an agent session on node B, read through the hub by its address.
    let codex_home = tempfile::tempdir().unwrap();
    let day = codex_home.path().join("sessions/2026/12/04");
    std::fs::create_dir_all(&day).unwrap();
    let rollout = format!(
        "{}\n{}\n",
        json!({"timestamp": "2026-12-04T08:00:00.000Z", "type": "session_meta",
            "payload": {"id": "0199b0b0-0000-7000-8000-00000000000b", "cwd": project}}),
        json!({"timestamp": "2026-12-04T08:00:02.000Z", "type": "response_item",
            "payload": {"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "b is halfway"}]}})
    );
    std::fs::write(day.join("rollout-2026-12-04T08-00-00-b.jsonl"), rollout).unwrap();
    let bin = tempfile::tempdir().unwrap();
    let codex = tuic_tests::progress::fake_agent(bin.path(), "codex", &["ready"]);
    let r = ipc(
        &bed.nodes[0].proc().socket,
        "POST",
        "/sessions",
        Some(json!({"shell": codex.display().to_string(), "cwd": project,
            "env": {"CODEX_HOME": codex_home.path().display().to_string()}})),
    )
    .await
    .unwrap();
    let bsid = r.json()["session_id"].as_str().unwrap().to_owned();
    tuic_tests::progress::wait_agent(
        &bed.nodes[0].proc().socket,
        &bsid,
        "codex",
        Duration::from_secs(20),
    )
    .await;
    let f = ipc(
        &bed.hub.socket,
        "POST",
        "/progress/flow",
        Some(json!({"session_id": format!("nodeb/{bsid}")})),
    )
    .await
    .unwrap();
    assert_eq!(f.status, 200, "{}", String::from_utf8_lossy(&f.body));
    let f = f.json();
    assert_eq!(f["connection_id"], "nodeb");
    assert_eq!(f["transcript"]["last_reply"], "b is halfway", "{f}");
    let r = ipc(
        &bed.hub.socket,
        "POST",
        "/progress/flow",
        Some(json!({"session_id": format!("nowhere/{bsid}")})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
    ipc(
        &bed.nodes[0].proc().socket,
        "DELETE",
        &format!("/sessions/{bsid}"),
        None,
    )
    .await
    .unwrap();

    // A node restart keeps its journal.
    let mut old = bed.nodes[0].proc.take().unwrap();
    old.terminate().unwrap();
    drop(old);
    bed.wait_up("nodeb", false, Duration::from_secs(60))
        .await
        .unwrap();
    bed.nodes[0].restart().unwrap();
    bed.wait_up("nodeb", true, Duration::from_secs(60))
        .await
        .unwrap();
    let (after, _) = hub_pages(&bed, &project, 3).await;
    let texts: Vec<&str> = after.iter().map(|e| e["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["c2 needs review", "c1", "b2", "b1"]);

    // The hub's metrics: the Prometheus parser reads them, every node labelled.
    let m = ipc(&bed.hub.socket, "GET", "/metrics", None).await.unwrap();
    assert_eq!(m.status, 200);
    let parsed = parse_prom(&python, &m.body).await;
    assert_eq!(
        parsed["tuic_hub_connection_up{connection=\"nodeb\"}"], 1.0,
        "{parsed}"
    );
    assert_eq!(
        parsed["tuic_progress_appended_total{connection=\"nodec\",type=\"blocked\"}"],
        1.0
    );
    assert!(parsed.get("tuic_sessions{}").is_some());

    // An offline node is named, its rows absent, the rest still listed.
    bed.nodes[1].kill9();
    bed.wait_up("nodec", false, Duration::from_secs(60))
        .await
        .unwrap();
    let r = ipc(
        &bed.hub.socket,
        "POST",
        &format!("/progress/list?path={}", enc(&project)),
        Some(json!({})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    let v = r.json();
    let texts: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["b2", "b1"]);
    let c_row = v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == "nodec")
        .unwrap()
        .clone();
    assert_eq!(c_row["up"], false, "{v}");
    assert_eq!(c_row["offline"], true);
    assert_eq!(v["nextCursor"], Value::Null);
    let agents = ipc(&bed.hub.socket, "GET", "/agents", None)
        .await
        .unwrap()
        .json();
    let conn = agents["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["connection_id"] == "nodec")
        .unwrap()
        .clone();
    assert_eq!(conn["offline"], true, "{agents}");
    let m = ipc(&bed.hub.socket, "GET", "/metrics", None).await.unwrap();
    let parsed = parse_prom(&python, &m.body).await;
    assert_eq!(parsed["tuic_hub_connection_up{connection=\"nodec\"}"], 0.0);
}

async fn parse_prom(python: &str, text: &[u8]) -> Value {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(python)
        .arg(tuic_tests::clients_dir().join("prom_parse.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(text)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
