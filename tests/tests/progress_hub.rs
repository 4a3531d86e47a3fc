//! Acceptance across hosts: two agents (official Python MCP SDK clients) on two nodes in their
//! own network namespaces report done/blocked steps; the hub's `POST /progress/list` shows
//! both hosts' entries in order and paged, a node restart keeps its journal, a `blocked` entry
//! reaches an SSE subscriber on the hub fast, an offline node is named, and the hub's
//! `/metrics` parses with the Prometheus parser with every node's samples labelled.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::fed::FedBed;
use tuic_tests::ipc;
use tuic_tests::progress::{Events, tcp_forward};

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
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
    // A blocked step on node C reaches the hub's subscriber.
    let (mut c, _) = tuic_tests::agent::Agent::register(
        &bed.nodes[1].proc().socket,
        json!({"action": "register", "name": "agent-c2", "path": project}),
    )
    .await;
    let t0 = Instant::now();
    let (err, v) = c
        .tool(
            "progress",
            json!({"type": "blocked", "text": "c2 needs review"}),
        )
        .await;
    assert!(!err, "{v}");
    let id = v["entry"]["id"].clone();
    let ev = hub_events
        .next_matching("progress-recorded", Duration::from_secs(20), |e| {
            e["id"] == id && e["connection_id"] == "nodec"
        })
        .await
        .expect("the blocked entry relayed to the hub's SSE");
    let latency = t0.elapsed();
    eprintln!("blocked on node C → hub SSE subscriber: {latency:?}");
    assert!(latency < Duration::from_secs(5), "{latency:?}");
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
