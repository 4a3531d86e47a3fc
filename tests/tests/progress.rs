//! End-to-end: the progress journal, the `intent:` marker, Progress Flow from transcript
//! files, and the operations routes (`/agents`, `/stats`, `/process/stats`, `/metrics`,
//! `/config/activity`), against the real `tuic-node` binary with real PTYs and the official
//! Python MCP SDK client and Prometheus text parser.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::progress::{Events, Mcp, fake_agent, tcp_forward, wait_agent};
use tuic_tests::{NodeProc, config_dir, enc, ipc};

fn arg(d: &Path) -> String {
    d.to_str().unwrap().to_owned()
}

fn start(dir: &Path) -> NodeProc {
    NodeProc::start("tuic-node", &["--config-dir", &arg(dir)], &[]).unwrap()
}

async fn add_repo(node: &NodeProc, path: &Path) -> String {
    let r = ipc(
        &node.socket,
        "POST",
        "/repos",
        Some(json!({"path": arg(path)})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    std::fs::canonicalize(path)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

async fn list(node: &NodeProc, path: &str, input: Value) -> (u16, Value) {
    let q = enc(path);
    let r = ipc(
        &node.socket,
        "POST",
        &format!("/progress/list?path={q}"),
        Some(input),
    )
    .await
    .unwrap();
    (r.status, r.json())
}

/// Reads a whole journal page by page; returns (texts newest first, totals per page).
async fn read_all(node: &NodeProc, path: &str, mut input: Value) -> (Vec<String>, Vec<u64>) {
    let mut texts = Vec::new();
    let mut totals = Vec::new();
    loop {
        let (s, v) = list(node, path, input.clone()).await;
        assert_eq!(s, 200, "{v}");
        totals.push(v["total"].as_u64().unwrap());
        texts.extend(
            v["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["text"].as_str().unwrap().to_owned()),
        );
        match &v["nextCursor"] {
            Value::Null => break,
            c => input["cursor"] = c.clone(),
        }
        assert!(totals.len() < 200, "paging never ended");
    }
    (texts, totals)
}

#[tokio::test]
async fn the_python_sdk_reports_done_and_blocked_and_reads_back_pages() {
    let python = tuic_tests::sdk_clients().python;
    let dir = config_dir(json!({}));
    let node = start(dir.path());
    let repo = tempfile::tempdir().unwrap();
    let project = add_repo(&node, repo.path()).await;
    let url = tcp_forward(&node.socket).await;
    let reports = json!([
        {"type": "done", "text": "parsed the spec", "step": "1"},
        {"type": "done", "text": "wrote the journal"},
        {"type": "blocked", "text": "need the staging password", "step": "3"},
        {"type": "done", "text": "paged the list"},
        {"type": "done", "text": "last one"},
    ]);
    let out = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(&python)
            .arg(tuic_tests::clients_dir().join("mcp_python_progress.py"))
            .args([&url, "sdk-agent", &project, &reports.to_string()])
            .output(),
    )
    .await
    .expect("client finished")
    .expect("client ran");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap();
    let r: Value = serde_json::from_str(line).unwrap();
    // The schema is the spec's input and nothing else.
    let props = r["schema"]["properties"].as_object().unwrap();
    let mut names: Vec<&str> = props.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(names, ["step", "text", "type"]);
    assert_eq!(
        r["schema"]["properties"]["type"]["enum"],
        json!(["done", "blocked"])
    );
    assert_eq!(r["register"]["is_error"], false, "{}", r["register"]);
    for (i, s) in r["sent"].as_array().unwrap().iter().enumerate() {
        assert_eq!(s["is_error"], false, "report {i}: {s}");
        let e = &s["value"]["entry"];
        assert_eq!(e["project"], json!(project));
        assert_eq!(e["agent_name"], "sdk-agent");
        assert_eq!(e["origin"], "agent");
        assert_eq!(e["type"], reports[i]["type"]);
    }
    // Refusals: each an error, and none of them reached the journal.
    for k in ["intent", "unknown_type", "too_long", "extra"] {
        assert_eq!(r["bad"][k]["is_error"], true, "{k}: {}", r["bad"][k]);
    }
    if r["bad"]["intent"].get("value").is_some() {
        assert_eq!(r["bad"]["intent"]["value"]["code"], "intent_is_observed");
    }
    let pages = r["pages"].as_array().unwrap();
    let got: Vec<&str> = pages
        .iter()
        .flat_map(|p| p["value"]["entries"].as_array().unwrap())
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        got,
        [
            "last one",
            "paged the list",
            "need the staging password",
            "wrote the journal",
            "parsed the spec"
        ]
    );
    let totals: Vec<u64> = pages
        .iter()
        .map(|p| p["value"]["total"].as_u64().unwrap())
        .collect();
    assert_eq!(totals, [5, 2]);
    assert_eq!(pages.last().unwrap()["value"]["nextCursor"], Value::Null);
}

#[tokio::test]
async fn journal_pages_filters_refuses_bad_input_and_survives_a_restart() {
    let dir = config_dir(json!({}));
    let mut node = start(dir.path());
    let repo = tempfile::tempdir().unwrap();
    let project = add_repo(&node, repo.path()).await;
    let (mut agent, _) = tuic_tests::agent::Agent::register(
        &node.socket,
        json!({"action": "register", "name": "a", "path": project}),
    )
    .await;
    let mut events = Events::subscribe(&node.socket, "progress-recorded").await;
    let mut latencies = Vec::new();
    for i in 0..25 {
        let kind = if i % 5 == 4 { "blocked" } else { "done" };
        let t0 = Instant::now();
        let (err, v) = agent
            .tool("progress", json!({"type": kind, "text": format!("e{i}")}))
            .await;
        assert!(!err, "{v}");
        if kind == "blocked" {
            let id = v["entry"]["id"].clone();
            let ev = events
                .next_matching("progress-recorded", Duration::from_secs(10), |e| {
                    e["id"] == id
                })
                .await
                .expect("blocked entry on the SSE stream");
            latencies.push(t0.elapsed());
            assert_eq!(ev["type"], "blocked");
            assert_eq!(ev["text"], format!("e{i}"));
        }
    }
    let worst = latencies.iter().max().unwrap();
    eprintln!(
        "blocked report → SSE subscriber (call + delivery): worst {worst:?} of {latencies:?}"
    );
    assert!(*worst < Duration::from_secs(5), "{latencies:?}");
    let want: Vec<String> = (0..25).rev().map(|i| format!("e{i}")).collect();
    let (texts, totals) = read_all(&node, &project, json!({"limit": 7})).await;
    assert_eq!(texts, want);
    assert_eq!(totals, [25, 18, 11, 4]);
    // Defaults and clamps.
    let (_, v) = list(&node, &project, json!({})).await;
    assert_eq!(v["entries"].as_array().unwrap().len(), 8);
    assert_eq!(v["total"], 25);
    let (_, v) = list(&node, &project, json!({"limit": 0})).await;
    assert_eq!(v["entries"].as_array().unwrap().len(), 1);
    let (_, v) = list(&node, &project, json!({"limit": 1000})).await;
    assert_eq!(v["entries"].as_array().unwrap().len(), 25);
    assert_eq!(v["nextCursor"], Value::Null);
    // Filters apply before paging.
    let (blocked, btotals) =
        read_all(&node, &project, json!({"blockedOnly": true, "limit": 2})).await;
    assert_eq!(blocked, ["e24", "e19", "e14", "e9", "e4"]);
    assert_eq!(btotals, [5, 3, 1]);
    let (_, v) = list(&node, &project, json!({"ptyId": "pty-none"})).await;
    assert_eq!(v["total"], 0);
    assert_eq!(v["nextCursor"], Value::Null);
    // The MCP action answers the same shape.
    let (err, v) = agent
        .tool("repo", json!({"action": "progress_list", "path": project, "input": {"limit": 3, "blockedOnly": true}}))
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["total"], 5);
    assert_eq!(v["entries"][0]["text"], "e24");
    assert!(v["nextCursor"].is_u64());
    // Bad input: a clear 400, nothing changes.
    for (q, body) in [
        (
            format!("/progress/list?path={}", enc(&project)),
            json!({"limit": "x"}),
        ),
        (
            format!("/progress/list?path={}", enc(&project)),
            json!({"blocked_only": true}),
        ),
        (
            format!("/progress/list?path={}", enc(&project)),
            json!({"cursor": "later"}),
        ),
        ("/progress/list".to_owned(), json!({})),
        ("/progress/list?path=relative".to_owned(), json!({})),
    ] {
        let r = ipc(&node.socket, "POST", &q, Some(body.clone()))
            .await
            .unwrap();
        assert_eq!(
            r.status,
            400,
            "{q} {body}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert!(r.json()["error"].is_string());
    }
    let (err, v) = agent
        .tool("progress", json!({"type": "done", "text": "x".repeat(501)}))
        .await;
    assert!(err);
    assert_eq!(v["code"], "text_too_long");
    let (err, v) = agent
        .tool("progress", json!({"type": "paused", "text": "x"}))
        .await;
    assert!(err, "{v}");
    let (err, v) = agent
        .tool("progress", json!({"type": "intent", "text": "x"}))
        .await;
    assert!(err);
    assert_eq!(v["code"], "intent_is_observed", "{v}");
    let (_, v) = list(&node, &project, json!({"limit": 100})).await;
    assert_eq!(v["total"], 25, "refused reports wrote nothing");
    let projects = ipc(&node.socket, "GET", "/progress/projects", None)
        .await
        .unwrap()
        .json();
    assert_eq!(projects["projects"][0]["project"], json!(project));
    assert_eq!(projects["projects"][0]["entries"], 25);
    assert_eq!(projects["projects"][0]["blocked"], 5);
    // A restart keeps the journal and continues its ids.
    let last_id = v["entries"][0]["id"].as_u64().unwrap();
    node.terminate().unwrap();
    let node = start(dir.path());
    let (texts, _) = read_all(&node, &project, json!({"limit": 10})).await;
    assert_eq!(texts, want);
    let (mut agent, _) = tuic_tests::agent::Agent::register(
        &node.socket,
        json!({"action": "register", "name": "a", "path": project}),
    )
    .await;
    let (err, v) = agent
        .tool("progress", json!({"type": "done", "text": "after"}))
        .await;
    assert!(!err, "{v}");
    assert!(v["entry"]["id"].as_u64().unwrap() > last_id);
    // A caller with no project is told how to get one.
    let (mut lost, _) = tuic_tests::agent::Agent::new(&node.socket, "lost").await;
    let (err, v) = lost
        .tool("progress", json!({"type": "done", "text": "x"}))
        .await;
    assert!(err);
    assert_eq!(v["code"], "not_bound", "{v}");
}

#[tokio::test]
async fn an_agents_intent_marker_is_journaled_and_its_terminal_reports_as_itself() {
    let dir = config_dir(json!({}));
    let node = start(dir.path());
    let repo = tempfile::tempdir().unwrap();
    let project = add_repo(&node, repo.path()).await;
    let bin = tempfile::tempdir().unwrap();
    let claude = fake_agent(
        bin.path(),
        "claude",
        &["starting up", "● intent: refactor the parser"],
    );
    let mut events = Events::subscribe(&node.socket, "progress-recorded").await;
    let r = ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"shell": arg(&claude), "cwd": arg(repo.path()), "name": "worker"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let sid = r.json()["session_id"].as_str().unwrap().to_owned();
    let tuic = r.json()["tuic_session"].as_str().unwrap().to_owned();
    let ev = events
        .next_matching("progress-recorded", Duration::from_secs(20), |e| {
            e["type"] == "intent"
        })
        .await
        .expect("the intent marker journaled");
    assert_eq!(ev["text"], "refactor the parser");
    assert_eq!(ev["origin"], "observed");
    assert_eq!(ev["pty_id"], json!(sid));
    assert_eq!(ev["agent_type"], "claude");
    assert_eq!(ev["project"], json!(project));
    wait_agent(&node.socket, &sid, "claude", Duration::from_secs(20)).await;
    // The terminal's own MCP client reports as that terminal.
    let mcp = Mcp::start(&node.socket, Some(&tuic)).await;
    let (err, v) = mcp
        .tool(
            "progress",
            json!({"type": "blocked", "text": "which branch?", "step": "2"}),
        )
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["entry"]["pty_id"], json!(sid));
    assert_eq!(v["entry"]["agent_type"], "claude");
    assert_eq!(v["entry"]["agent_name"], "worker");
    let (_, page) = list(&node, &project, json!({"ptyId": sid})).await;
    let kinds: Vec<&str> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["blocked", "intent"]);
    // The alias names the same terminal in the filter.
    let alias = r.json()["alias"].as_str().unwrap().to_owned();
    let (_, by_alias) = list(&node, &project, json!({"ptyId": alias})).await;
    assert_eq!(by_alias["total"], 2);
    // Operations views see the agent.
    let agents = ipc(&node.socket, "GET", "/agents", None)
        .await
        .unwrap()
        .json();
    let a = agents["agents"].as_array().unwrap();
    assert_eq!(a.len(), 1, "{agents}");
    assert_eq!(a[0]["session_id"], json!(sid));
    assert_eq!(a[0]["agent_type"], "claude");
    let ps = ipc(&node.socket, "GET", "/process/stats", None)
        .await
        .unwrap()
        .json();
    let row = ps["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["session_id"] == json!(sid))
        .unwrap()
        .clone();
    assert!(row["rss_bytes"].as_u64().unwrap() > 0, "{row}");
    assert!(row["processes"].as_u64().unwrap() >= 1);
    assert!(row["cpu_percent"].is_null(), "first sample has no interval");
    let ps = ipc(&node.socket, "GET", "/process/stats", None)
        .await
        .unwrap()
        .json();
    assert!(ps["sessions"][0]["cpu_percent"].is_number(), "{ps}");
    let stats = ipc(&node.socket, "GET", "/stats", None)
        .await
        .unwrap()
        .json();
    assert_eq!(stats["sessions"]["live"], 1);
    assert_eq!(stats["progress"]["entries"], 2);
}

#[tokio::test]
async fn the_agents_flag_answers_disabled_and_the_global_flag_hides_the_tool() {
    let bin = tempfile::tempdir().unwrap();
    let claude = fake_agent(bin.path(), "claude", &["ready"]);
    let repo = tempfile::tempdir().unwrap();
    let dir = config_dir(json!({"agents": {"claude": {"progress_tracking": false}}}));
    let node = start(dir.path());
    add_repo(&node, repo.path()).await;
    let r = ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"shell": arg(&claude), "cwd": arg(repo.path())})),
    )
    .await
    .unwrap();
    let sid = r.json()["session_id"].as_str().unwrap().to_owned();
    let tuic = r.json()["tuic_session"].as_str().unwrap().to_owned();
    wait_agent(&node.socket, &sid, "claude", Duration::from_secs(20)).await;
    let mcp = Mcp::start(&node.socket, Some(&tuic)).await;
    let listed = mcp.rpc("tools/list", json!({})).await;
    assert!(
        listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "progress"),
        "the per-agent flag does not hide the tool"
    );
    let (err, v) = mcp
        .tool("progress", json!({"type": "done", "text": "x"}))
        .await;
    assert!(err);
    assert_eq!(v["code"], "progress_tracking_disabled", "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("agents.claude.progress_tracking")
    );
    // Globally off: not listed, not callable.
    let dir = config_dir(json!({"progress_tracking": false}));
    let node = start(dir.path());
    let mcp = Mcp::start(&node.socket, None).await;
    let listed = mcp.rpc("tools/list", json!({})).await;
    assert!(
        !listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "progress")
    );
    let (err, _) = mcp
        .tool("progress", json!({"type": "done", "text": "x"}))
        .await;
    assert!(err);
}

fn jl(v: Value) -> String {
    format!("{v}\n")
}

#[tokio::test]
async fn progress_flow_reads_claude_transcripts_with_byte_cursors_and_counts_bad_lines() {
    let dir = config_dir(json!({}));
    let node = start(dir.path());
    let repo = tempfile::tempdir().unwrap();
    let cwd = arg(repo.path());
    let claude_home = tempfile::tempdir().unwrap();
    let slug: String = cwd
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let proj = claude_home.path().join("projects").join(&slug);
    let uuid = "3f1c2a9e-0000-4000-8000-000000000001";
    std::fs::create_dir_all(proj.join(uuid).join("subagents")).unwrap();
    let prompt = "Review the parser\nand report problems";
    let parent = proj.join(format!("{uuid}.jsonl"));
    let mut text = String::new();
    text += &jl(
        json!({"type": "user", "sessionId": uuid, "cwd": cwd, "timestamp": "2026-12-03T10:00:00Z",
        "message": {"role": "user", "content": "Fix the parser"}}),
    );
    text += &jl(
        json!({"type": "assistant", "sessionId": uuid, "timestamp": "2026-12-03T10:00:05Z",
        "message": {"role": "assistant", "content": [
            {"type": "text", "text": "Spawning a reviewer."},
            {"type": "tool_use", "id": "toolu_1", "name": "Agent",
             "input": {"description": "review", "prompt": prompt, "subagent_type": "general-purpose"}},
            {"type": "tool_use", "id": "toolu_2", "name": "Agent",
             "input": {"description": "second", "prompt": "Count the tests"}}]}}),
    );
    text += "this line is not json\n";
    text += &jl(
        json!({"type": "user", "sessionId": uuid, "timestamp": "2026-12-03T10:01:00Z",
        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "SECRET tool output"}]}}),
    );
    text += r#"{"type": "assistant", "message": {"role": "assis"#; // cut off mid-line
    std::fs::write(&parent, &text).unwrap();
    let sub = proj.join(uuid).join("subagents");
    let mut a = String::new();
    a += &jl(
        json!({"type": "user", "isSidechain": true, "agentId": "a1b2", "timestamp": "2026-12-03T10:00:06Z",
        "message": {"role": "user", "content": prompt}}),
    );
    a += &jl(
        json!({"type": "assistant", "isSidechain": true, "timestamp": "2026-12-03T10:00:07Z",
        "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/x"}},
            {"type": "tool_use", "id": "t2", "name": "Grep", "input": {}}]}}),
    );
    a += &jl(
        json!({"type": "user", "isSidechain": true, "message": {"role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "SECRET file body"}]}}),
    );
    a += &jl(
        json!({"type": "assistant", "isSidechain": true, "timestamp": "2026-12-03T10:00:50Z",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "Report: two problems found."}]}}),
    );
    std::fs::write(sub.join("agent-a1b2.jsonl"), &a).unwrap();
    // A subagent whose join fails (its prompt is nowhere in the parent), with a broken line.
    let b = jl(
        json!({"type": "user", "message": {"role": "user", "content": "Something else entirely"}}),
    ) + "{broken\n"
        + &jl(
            json!({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}]}}),
        );
    std::fs::write(sub.join("agent-zz9.jsonl"), &b).unwrap();

    let bin = tempfile::tempdir().unwrap();
    let claude = fake_agent(bin.path(), "claude", &["ready"]);
    let r = ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"shell": arg(&claude), "cwd": cwd,
        "env": {"CLAUDE_CONFIG_DIR": arg(claude_home.path())}})),
    )
    .await
    .unwrap();
    let sid = r.json()["session_id"].as_str().unwrap().to_owned();
    wait_agent(&node.socket, &sid, "claude", Duration::from_secs(20)).await;
    let flow = ipc(
        &node.socket,
        "POST",
        "/progress/flow",
        Some(json!({"session_id": sid})),
    )
    .await
    .unwrap();
    assert_eq!(flow.status, 200, "{}", String::from_utf8_lossy(&flow.body));
    let f = flow.json();
    assert_eq!(f["transcript"]["session_uuid"], uuid);
    assert_eq!(f["transcript"]["skipped_lines"], 1, "{f}");
    assert!(
        f["transcript"]["pending_bytes"].as_u64().unwrap() > 0,
        "the cut line waits"
    );
    assert_eq!(f["transcript"]["spawns"], 2);
    assert_eq!(f["skipped_lines"], 2, "parent + unjoined subagent");
    assert_eq!(f["unmatched_spawns"], 1);
    let agents = f["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2);
    let a1 = agents.iter().find(|a| a["agent_id"] == "a1b2").unwrap();
    assert_eq!(a1["joined"], true);
    assert_eq!(a1["status"], "done");
    assert_eq!(a1["prompt"], prompt);
    assert_eq!(a1["started_at"], "2026-12-03T10:00:05Z");
    assert_eq!(a1["subagent_type"], "general-purpose");
    assert_eq!(a1["tools"], json!({"Read": 1, "Grep": 1}));
    assert_eq!(a1["report"], "Report: two problems found.");
    let z = agents.iter().find(|a| a["agent_id"] == "zz9").unwrap();
    assert_eq!(z["joined"], false);
    assert_eq!(z["prompt"], "Something else entirely");
    assert_eq!(z["skipped_lines"], 1);
    assert!(
        !f.to_string().contains("SECRET"),
        "tool results are never kept"
    );
    // The writer finishes its line and adds the second spawn's result: a refresh reads only that.
    let mut fh = std::fs::OpenOptions::new()
        .append(true)
        .open(&parent)
        .unwrap();
    use std::io::Write;
    fh.write_all(br#"tant", "content": [{"type": "text", "text": "All fixed."}]}}"#)
        .unwrap();
    fh.write_all(b"\n").unwrap();
    drop(fh);
    let f = ipc(
        &node.socket,
        "POST",
        "/progress/flow",
        Some(json!({"session_id": sid})),
    )
    .await
    .unwrap()
    .json();
    assert_eq!(f["transcript"]["pending_bytes"], 0);
    assert_eq!(f["transcript"]["last_reply"], "All fixed.");
    assert_eq!(f["transcript"]["skipped_lines"], 1);
    // Detail: the subagent's messages, never its tool results; unknown ids are 404.
    let d = ipc(
        &node.socket,
        "POST",
        "/progress/flow/detail",
        Some(json!({"session_id": sid, "agent_id": "a1b2"})),
    )
    .await
    .unwrap();
    assert_eq!(d.status, 200);
    let d = d.json();
    let msgs: Vec<&str> = d["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(msgs, [prompt, "Report: two problems found."]);
    assert!(!d.to_string().contains("SECRET"));
    for (body, status) in [
        (json!({"session_id": sid, "agent_id": "../../etc"}), 404),
        (json!({"session_id": sid, "agent_id": "nope"}), 404),
        (json!({"session_id": sid}), 400),
        (
            json!({"session_id": "pty-unknown", "agent_id": "a1b2"}),
            404,
        ),
        (
            json!({"session_id": sid, "agent_id": "a1b2", "path": "/etc"}),
            400,
        ),
    ] {
        let r = ipc(
            &node.socket,
            "POST",
            "/progress/flow/detail",
            Some(body.clone()),
        )
        .await
        .unwrap();
        assert_eq!(
            r.status,
            status,
            "{body}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    // A shell tab is never handed an agent's transcript.
    let sh = ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"shell": "/bin/sh", "cwd": cwd})),
    )
    .await
    .unwrap();
    let shid = sh.json()["session_id"].as_str().unwrap().to_owned();
    let r = ipc(
        &node.socket,
        "POST",
        "/progress/flow",
        Some(json!({"session_id": shid})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 409, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["code"], "not_an_agent_session");
    let r = ipc(
        &node.socket,
        "POST",
        "/progress/flow",
        Some(json!({"path": "/etc/passwd"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn progress_flow_reads_a_codex_rollout_for_its_session_cwd_and_skips_bad_lines() {
    let dir = config_dir(json!({}));
    let node = start(dir.path());
    let repo = tempfile::tempdir().unwrap();
    let cwd = arg(&std::fs::canonicalize(repo.path()).unwrap());
    let other = tempfile::tempdir().unwrap();
    let codex_home = tempfile::tempdir().unwrap();
    // Codex writes sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl, first line session_meta.
    let day = codex_home.path().join("sessions/2026/12/03");
    std::fs::create_dir_all(&day).unwrap();
    let uuid = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
    let mut text = jl(
        json!({"timestamp": "2026-12-03T09:00:00.000Z", "type": "session_meta",
        "payload": {"id": uuid, "timestamp": "2026-12-03T09:00:00.000Z", "cwd": cwd,
        "originator": "codex_cli_rs", "cli_version": "0.63.0", "instructions": null}}),
    );
    text += &jl(
        json!({"timestamp": "2026-12-03T09:00:01.000Z", "type": "response_item",
        "payload": {"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Add a retry to the fetcher"}]}}),
    );
    text += &jl(
        json!({"timestamp": "2026-12-03T09:00:02.000Z", "type": "event_msg",
        "payload": {"type": "agent_reasoning", "text": "thinking"}}),
    );
    text += &jl(
        json!({"timestamp": "2026-12-03T09:00:03.000Z", "type": "response_item",
        "payload": {"type": "function_call", "name": "shell",
        "arguments": "{\"command\":[\"rg\",\"fetch\"]}", "call_id": "call_1"}}),
    );
    text += &jl(
        json!({"timestamp": "2026-12-03T09:00:04.000Z", "type": "response_item",
        "payload": {"type": "function_call_output", "call_id": "call_1",
        "output": "SECRET command output"}}),
    );
    text += "{not json at all\n";
    text += &jl(
        json!({"timestamp": "2026-12-03T09:00:05.000Z", "type": "response_item",
        "payload": {"type": "custom_tool_call", "name": "apply_patch", "call_id": "call_2",
        "input": "*** Begin Patch"}}),
    );
    text += &jl(
        json!({"timestamp": "2026-12-03T09:00:09.000Z", "type": "response_item",
        "payload": {"type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": "Retry added with backoff."}]}}),
    );
    text += r#"{"timestamp": "2026-12-03T09:00:10.000Z", "type": "respo"#; // cut mid-line
    std::fs::write(
        day.join(format!("rollout-2026-12-03T09-00-00-{uuid}.jsonl")),
        &text,
    )
    .unwrap();
    // Another project's rollout, newer, in the same day folder: never this session's.
    let foreign = jl(
        json!({"timestamp": "2026-12-03T09:30:00.000Z", "type": "session_meta",
        "payload": {"id": "0199ffff-0000-7000-8000-000000000000", "cwd": arg(other.path())}}),
    ) + &jl(
        json!({"timestamp": "2026-12-03T09:30:01.000Z", "type": "response_item",
        "payload": {"type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": "FOREIGN reply"}]}}),
    );
    std::fs::write(
        day.join("rollout-2026-12-03T09-30-00-0199ffff.jsonl"),
        foreign,
    )
    .unwrap();

    let bin = tempfile::tempdir().unwrap();
    let codex = fake_agent(bin.path(), "codex", &["ready"]);
    let r = ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"shell": arg(&codex), "cwd": cwd,
        "env": {"CODEX_HOME": arg(codex_home.path())}})),
    )
    .await
    .unwrap();
    let sid = r.json()["session_id"].as_str().unwrap().to_owned();
    wait_agent(&node.socket, &sid, "codex", Duration::from_secs(20)).await;
    let flow = ipc(
        &node.socket,
        "POST",
        "/progress/flow",
        Some(json!({"session_id": sid})),
    )
    .await
    .unwrap();
    assert_eq!(flow.status, 200, "{}", String::from_utf8_lossy(&flow.body));
    let f = flow.json();
    assert_eq!(f["agent_type"], "codex");
    let t = &f["transcript"];
    assert_eq!(t["session_uuid"], uuid, "{f}");
    assert_eq!(t["skipped_lines"], 1, "{f}");
    assert!(
        t["pending_bytes"].as_u64().unwrap() > 0,
        "the cut line waits"
    );
    assert_eq!(t["messages"], 2);
    assert_eq!(t["tools"], json!({"shell": 1, "apply_patch": 1}));
    assert_eq!(t["last_reply"], "Retry added with backoff.");
    assert_eq!(t["last_at"], "2026-12-03T09:00:09.000Z");
    assert_eq!(f["agents"], json!([]), "codex has no subagents");
    let all = f.to_string();
    assert!(!all.contains("SECRET"), "tool output is never kept");
    assert!(
        !all.contains("FOREIGN"),
        "another cwd's rollout is never read"
    );
}

async fn scrape(node: &NodeProc, python: &str) -> Value {
    let r = ipc(&node.socket, "GET", "/metrics", None).await.unwrap();
    assert_eq!(r.status, 200);
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
        "{:?}",
        r.headers
    );
    parse_prom(python, &r.body).await
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
        "prometheus_client refused the exposition: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(text)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn sample(m: &Value, key: &str) -> f64 {
    m[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no sample {key} in {m}"))
}

#[tokio::test]
async fn metrics_parse_with_prometheus_client_and_counters_move_with_streams_and_mail() {
    let python = tuic_tests::sdk_clients().python;
    let dir = config_dir(json!({}));
    let node = start(dir.path());
    let before = scrape(&node, &python).await;
    let bytes0 = sample(&before, "tuic_pty_output_bytes_total{}");
    let mail0 = sample(&before, "tuic_mail_posted_total{}");
    assert_eq!(sample(&before, "tuic_sessions{}"), 0.0);
    // A session streams ~100 KB and exits; a live one keeps running.
    let mut events = Events::subscribe(&node.socket, "pty-exit").await;
    let r = ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"shell": "/bin/sh", "args": ["-c", "seq 1 20000"]})),
    )
    .await
    .unwrap();
    let streamed = r.json()["session_id"].as_str().unwrap().to_owned();
    let live = ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"shell": "/bin/sh"})),
    )
    .await
    .unwrap();
    assert_eq!(live.status, 200);
    events
        .next_matching("pty-exit", Duration::from_secs(30), |e| {
            e["session_id"] == json!(streamed)
        })
        .await
        .expect("seq exits");
    // Mail between two agents.
    let (mut a, ta) = tuic_tests::agent::Agent::new(&node.socket, "m-a").await;
    let (_b, tb) = tuic_tests::agent::Agent::new(&node.socket, "m-b").await;
    for i in 0..3 {
        a.send(&tb, &format!("hello {i}")).await;
    }
    let _ = ta;
    let after = scrape(&node, &python).await;
    let seq_bytes: f64 = (1..=20000)
        .map(|n: u32| n.to_string().len() as f64 + 2.0)
        .sum();
    assert!(
        sample(&after, "tuic_pty_output_bytes_total{}") - bytes0 >= seq_bytes,
        "{after}"
    );
    assert_eq!(sample(&after, "tuic_mail_posted_total{}") - mail0, 3.0);
    assert_eq!(sample(&after, "tuic_mail_unread{}"), 3.0);
    assert_eq!(sample(&after, "tuic_mail_peers{}"), 2.0);
    assert_eq!(sample(&after, "tuic_sessions{}"), 1.0);
    assert!(sample(&after, "tuic_sessions_created_total{}") >= 2.0);
    assert_eq!(
        sample(&after, "tuic_outbox_held_messages{connection=\"hub\"}"),
        0.0
    );
    // Request latencies are a histogram per route template.
    let count = sample(
        &after,
        "tuic_http_request_duration_seconds_count{method=\"POST\",route=\"/sessions\"}",
    );
    assert!(count >= 2.0, "{after}");
    assert!(
        after
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.starts_with("tuic_http_request_duration_seconds_bucket{le="))
    );
    // Counters never go back: the exited session's bytes stay counted.
    let again = scrape(&node, &python).await;
    assert!(
        sample(&again, "tuic_pty_output_bytes_total{}")
            >= sample(&after, "tuic_pty_output_bytes_total{}")
    );
}

#[tokio::test]
async fn config_activity_persists_an_array_and_refuses_anything_else() {
    let dir = config_dir(json!({}));
    let mut node = start(dir.path());
    let r = ipc(&node.socket, "GET", "/config/activity", None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!([]));
    let items = json!([{"kind": "blocked", "text": "needs a password", "at_ms": 1}, {"kind": "done", "at_ms": 2}]);
    let r = ipc(&node.socket, "PUT", "/config/activity", Some(items.clone()))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    for bad in [
        json!({"a": 1}),
        json!([1, 2]),
        json!((0..1001).map(|i| json!({"i": i})).collect::<Vec<_>>()),
    ] {
        let r = ipc(&node.socket, "PUT", "/config/activity", Some(bad))
            .await
            .unwrap();
        assert!(r.status == 400 || r.status == 413, "{}", r.status);
        assert!(r.json()["error"].is_string());
    }
    node.terminate().unwrap();
    let node = start(dir.path());
    let r = ipc(&node.socket, "GET", "/config/activity", None)
        .await
        .unwrap();
    assert_eq!(
        r.json(),
        items,
        "persisted across a restart, bad writes changed nothing"
    );
}
