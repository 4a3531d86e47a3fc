//! End-to-end: native stories, workflow runs and automations against the real `tuic-node`
//! binary — MCP agents (registered identities), scripted workers spawned in real PTYs, the
//! IPC socket (local API authority) and authenticated TCP (human authority), `kill -9` and
//! restart mid-run, and the `tuic story` CLI.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::agent::{Agent, rpc_with};
use tuic_tests::progress::Events;
use tuic_tests::{NodeProc, config_dir, ipc, run_with_stdin};

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

fn start(dir: &Path) -> NodeProc {
    NodeProc::start(
        "tuic-node",
        &[
            "--config-dir",
            &s(dir),
            "--remote-access",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
        ],
        &[],
    )
    .unwrap()
}

async fn add_repo(node: &NodeProc, path: &Path) -> String {
    let r = ipc(
        &node.socket,
        "POST",
        "/repos",
        Some(json!({"path": s(path)})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    s(&std::fs::canonicalize(path).unwrap())
}

/// `POST` over the IPC socket (local API authority): (status, body).
async fn local(node: &NodeProc, path: &str, body: Value) -> (u16, Value) {
    let r = ipc(&node.socket, "POST", path, Some(body)).await.unwrap();
    (r.status, r.json())
}

/// `POST` over TCP with Basic credentials (human authority): (status, body).
async fn human(node: &NodeProc, path: &str, body: Value) -> (u16, Value) {
    let addr = node.tcp.expect("remote access is on");
    let r = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .basic_auth("admin", Some("pw"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// One tool call from a client that asserts `tuic` (a process inside that PTY).
async fn call_as(socket: &Path, tuic: &str, tool: &str, args: Value) -> (bool, Value) {
    let h = [("x-tuic-session", tuic)];
    let r = rpc_with(
        socket,
        None,
        &h,
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"stories-worker","version":"1"}}}),
    )
    .await;
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    rpc_with(
        socket,
        Some(&sid),
        &h,
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    )
    .await;
    let v = rpc_with(
        socket,
        Some(&sid),
        &h,
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":tool,"arguments":args}}),
    )
    .await
    .json();
    let text = v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"));
    (
        v["result"]["isError"] == true,
        serde_json::from_str(text).unwrap(),
    )
}

async fn story(a: &mut Agent, input: Value) -> (bool, Value) {
    a.tool("story", json!({"input": input})).await
}

/// Every event of a run, page by page; asserts the pages are gapless by cursor.
async fn run_events(node: &NodeProc, project: &str, run_id: &str) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut cursor = Value::Null;
    for _ in 0..200 {
        let (st, v) = local(
            node,
            "/workflows/run/action",
            json!({"input": {"action": "events", "run_id": run_id, "cursor": cursor, "limit": 3}, "project_path": project}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        for e in v["events"].as_array().unwrap() {
            let want = out.len() as u64 + 1;
            assert_eq!(e["seq"], want, "gapless by cursor: {e}");
            out.push(e.clone());
        }
        cursor = v["next_cursor"].clone();
        if cursor.is_null() {
            return out;
        }
    }
    panic!("run event paging never ended")
}

/// Waits (on `workflow-run-changed` wake hints) until the run has an event satisfying `f`.
async fn await_event(
    node: &NodeProc,
    events: &mut Events,
    project: &str,
    run_id: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(e) = run_events(node, project, run_id)
            .await
            .into_iter()
            .find(|e| f(e))
        {
            return e;
        }
        let left = deadline
            .checked_duration_since(Instant::now())
            .expect("the run event did not come within 30 s");
        events
            .next_matching("workflow-run-changed", left, |v| {
                v["payload"]["runId"] == run_id
            })
            .await;
    }
}

/// The state letter and parent pid of `pid` (`/proc/<pid>/stat`).
fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    Some((state, rest.next()?.parse().ok()?))
}

/// Loses every worker of `run_id` on the node at `socket` (found by `TUIC_RUN_ID` and
/// `TUIC_SOCKET` in its environment) while that node is down: a worker's PTY outlives a
/// killed node (its holder keeps it for the restarted node to re-adopt), so the test kills the
/// holder too (`kill -9`), and the terminal is gone for good (a stale holder socket).
async fn kill_workers(socket: &Path, run_id: &str) {
    // Run ids repeat across nodes: the node's socket tells this test's workers apart.
    let run = format!("TUIC_RUN_ID={run_id}");
    let sock = format!("TUIC_SOCKET={}", socket.display());
    let workers: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &i32| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                let has = |want: &str| env.split(|b| *b == 0).any(|v| v == want.as_bytes());
                has(&run) && has(&sock)
            })
        })
        .collect();
    assert!(!workers.is_empty(), "no worker of {run_id} runs");
    let holders: Vec<i32> = workers
        .iter()
        .filter_map(|&w| proc_stat(w).map(|(_, ppid)| ppid))
        .filter(|&h| {
            // Only a session holder (`tuic-node hold --socket …`), never an adoptive init.
            h > 1
                && std::fs::read(format!("/proc/{h}/cmdline"))
                    .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"hold"))
        })
        .collect();
    let all: Vec<i32> = holders.iter().chain(&workers).copied().collect();
    for &pid in &all {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    // Gone, or a zombie nobody reaps yet (the killed node's orphans).
    while all
        .iter()
        .any(|&p| proc_stat(p).is_some_and(|(state, _)| state != 'Z'))
    {
        assert!(Instant::now() < deadline, "workers {all:?} did not end");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn worker_script(dir: &Path) -> String {
    let p = dir.join("worker.sh");
    std::fs::write(
        &p,
        "#!/bin/sh\necho \"worker run=$TUIC_RUN_ID attempt=$TUIC_ATTEMPT_ID gen=$TUIC_ATTEMPT_GENERATION: $1\"\nexec sleep 600\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    s(&p)
}

fn report(run: &str, story: &str, rev: u64, launched: &Value, summary: &str) -> Value {
    json!({"input": {"contractVersion": 1, "runId": run, "storyId": story, "storyRevision": rev,
        "attemptId": launched["detail"]["attempt_id"], "generation": launched["detail"]["generation"],
        "outcome": "completed", "summary": summary, "criterionResults": [{"criterion": 0, "ok": true}],
        "evidence": [{"command": "true", "exit": 0}]}})
}

#[tokio::test]
async fn a_reviewed_story_runs_a_two_step_graph_through_a_kill_9() {
    two_step_graph_through_a_kill_9(true).await;
}

#[tokio::test]
async fn a_worker_that_outlives_its_nodes_kill_9_finishes_its_attempt() {
    two_step_graph_through_a_kill_9(false).await;
}

/// A reviewed story's two-step graph with the node killed (-9) during step 2. When
/// `worker_dies`, the worker ends too while the node is away and recovery relaunches the step;
/// otherwise the worker's PTY outlives the node (its holder keeps it), the restarted node
/// re-adopts it, and the same worker's report completes the run with no recovery.
async fn two_step_graph_through_a_kill_9(worker_dies: bool) {
    let dir = config_dir(json!({}));
    let (code, _, err) = run_with_stdin(
        "tuic-node",
        &["set-password", "--config-dir", &s(dir.path())],
        "pw",
    )
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let mut node = start(dir.path());
    let repo = tempfile::tempdir().unwrap();
    let project = add_repo(&node, repo.path()).await;
    let worker = worker_script(repo.path());
    let (mut a, _) = Agent::register(
        &node.socket,
        json!({"action": "register", "name": "author", "path": project}),
    )
    .await;
    let (mut b, _) = Agent::register(
        &node.socket,
        json!({"action": "register", "name": "reviewer", "path": project}),
    )
    .await;

    // A writes the story; A cannot approve it; B reviews and approves it (backlog → ready).
    let (err, v) = story(
        &mut a,
        json!({"action": "create", "title": "Two steps", "acceptance_criteria": ["both steps report"], "request_id": "c1"}),
    )
    .await;
    assert!(!err, "{v}");
    let id = v["story"]["id"].as_str().unwrap().to_owned();
    let (err, e) = story(
        &mut a,
        json!({"action": "approve", "id": id, "expected_revision": 1}),
    )
    .await;
    assert!(err);
    assert_eq!(e["code"], "not_independent", "{e}");
    let (err, v) = story(
        &mut b,
        json!({"action": "review", "id": id, "expected_revision": 1, "decision": "approve",
               "findings": [{"criterion": 0, "ok": true, "note": "clear"}]}),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v["story"]["status"], "ready");
    let rev = v["story"]["revision"].as_u64().unwrap();

    // Definitions are policy: the local API may not publish, a human may.
    let def = json!({"action": "publish", "definition_id": "two-step", "name": "Build then verify",
    "steps": [
        {"id": "build", "agent": {"command": worker}, "prompt": "build {storyId}@{storyRevision} as {attemptId}"},
        {"id": "verify", "agent": {"command": worker}, "prompt": "verify {storyTitle} ({runId})"}
    ]});
    let (st, v) = local(
        &node,
        "/workflows/definition/action",
        json!({"input": def, "project_path": project}),
    )
    .await;
    assert_eq!((st, v["code"].as_str()), (403, Some("forbidden")), "{v}");
    let (st, v) = human(
        &node,
        "/workflows/definition/action",
        json!({"input": def, "project_path": project}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["definition"]["revision"], 1);

    // Bad input: an unknown definition revision, a stale story revision; nothing starts.
    let start_req = |revision: u64, def_rev: u64, req: &str| {
        json!({"input": {"action": "start_graph", "target": {"type": "story", "id": id},
            "expected_revision": revision, "definition_id": "two-step",
            "definition_revision": def_rev, "request_id": req}, "project_path": project})
    };
    let (st, v) = local(&node, "/workflows/run/action", start_req(rev, 7, "bad-1")).await;
    assert_eq!(st, 404, "{v}");
    assert!(v["error"].as_str().unwrap().contains("two-step@7"), "{v}");
    let (st, v) = local(
        &node,
        "/workflows/run/action",
        start_req(rev - 1, 1, "bad-2"),
    )
    .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (409, Some("stale_revision")),
        "{v}"
    );
    let (_, v) = local(
        &node,
        "/workflows/run/action",
        json!({"input": {"action": "list"}, "project_path": project}),
    )
    .await;
    assert_eq!(v["runs"].as_array().unwrap().len(), 0, "{v}");

    let mut events = Events::subscribe(&node.socket, "workflow-run-changed").await;
    // Start; the same request id and payload returns the first result, another payload is refused.
    let (st, first) = local(&node, "/workflows/run/action", start_req(rev, 1, "go")).await;
    assert_eq!(st, 200, "{first}");
    let run_id = first["run"]["run_id"].as_str().unwrap().to_owned();
    let (st, again) = local(&node, "/workflows/run/action", start_req(rev, 1, "go")).await;
    assert_eq!(st, 200);
    assert_eq!(again["run"]["run_id"], run_id);
    assert_eq!(again, first, "the first result, replayed");
    let mut other = start_req(rev, 1, "go");
    other["input"]["limits"] = json!({"max_repairs": 5});
    let (st, v) = local(&node, "/workflows/run/action", other).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (409, Some("idempotency_conflict")),
        "{v}"
    );
    // An agent cannot start a run.
    let (err, v) = a
        .tool(
            "workflow_run",
            json!({"action": "start_graph", "target": {"type": "story", "id": id},
            "definition_id": "two-step", "definition_revision": 1, "request_id": "agent"}),
        )
        .await;
    assert!(err);
    assert_eq!(v["code"], "forbidden", "{v}");

    // Step 1: the worker is a spawned PTY; it reports through its own bound identity.
    let launched = await_event(&node, &mut events, &project, &run_id, |e| {
        e["kind"] == "attempt_launched" && e["detail"]["step_id"] == "build"
    })
    .await;
    let worker1 = launched["detail"]["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    // Somebody else cannot report for it.
    let (err, v) = b
        .tool(
            "workflow_report",
            report(&run_id, &id, rev, &launched, "not mine"),
        )
        .await;
    assert!(err);
    assert_eq!(v["code"], "forbidden", "{v}");
    let (err, r1) = call_as(
        &node.socket,
        &worker1,
        "workflow_report",
        report(&run_id, &id, rev, &launched, "built"),
    )
    .await;
    assert!(!err, "{r1}");
    let (err, r1b) = call_as(
        &node.socket,
        &worker1,
        "workflow_report",
        report(&run_id, &id, rev, &launched, "built"),
    )
    .await;
    assert!(!err, "{r1b}");
    assert_eq!(
        (r1b["sequence"].clone(), r1b["replayed"].clone()),
        (r1["sequence"].clone(), json!(true))
    );
    let (err, v) = call_as(
        &node.socket,
        &worker1,
        "workflow_report",
        report(&run_id, &id, rev, &launched, "changed"),
    )
    .await;
    assert!(err);
    assert_eq!(v["code"], "idempotency_conflict", "{v}");

    // Step 2 is launched; the node is killed (-9) before it reports.
    let launched2 = await_event(&node, &mut events, &project, &run_id, |e| {
        e["kind"] == "attempt_launched" && e["detail"]["step_id"] == "verify"
    })
    .await;
    assert_eq!(launched2["detail"]["generation"], 1);
    let before_kill = run_events(&node, &project, &run_id).await.len();
    let sock = node.socket.clone();
    node.child.kill().unwrap();
    node.child.wait().unwrap();
    drop(events);
    if !worker_dies {
        // Restart: the worker was re-adopted with its PTY; its report completes the run.
        let node = start(dir.path());
        let worker = launched2["detail"]["tuic_session"].as_str().unwrap();
        let rows = ipc(&node.socket, "GET", "/sessions", None)
            .await
            .unwrap()
            .json();
        assert!(
            rows.as_array()
                .unwrap()
                .iter()
                .any(|r| r["tuic_session"] == worker),
            "{rows}"
        );
        let (err, v) = call_as(
            &node.socket,
            worker,
            "workflow_report",
            report(&run_id, &id, rev, &launched2, "verified"),
        )
        .await;
        assert!(!err, "{v}");
        assert_eq!(v["status"], "completed");
        let all = run_events(&node, &project, &run_id).await;
        assert!(!all.iter().any(|e| e["kind"] == "attempt_lost"), "{all:?}");
        let (_, v) = local(
            &node,
            "/workflows/run/action",
            json!({"input": {"action": "get", "run_id": run_id}, "project_path": project}),
        )
        .await;
        assert_eq!(v["run"]["status"], "completed");
        assert_eq!(v["run"]["recoveries"], 0);
        return;
    }
    // The worker dies too while the node is away.
    kill_workers(&sock, &run_id).await;

    // Restart: the run resumes from its journal — the lost worker is relaunched as generation 2.
    let node = start(dir.path());
    let mut events = Events::subscribe(&node.socket, "workflow-run-changed").await;
    let relaunched = await_event(&node, &mut events, &project, &run_id, |e| {
        e["kind"] == "attempt_launched"
            && e["detail"]["step_id"] == "verify"
            && e["detail"]["generation"] == 2
    })
    .await;
    let all = run_events(&node, &project, &run_id).await;
    let lost = all
        .iter()
        .position(|e| e["kind"] == "attempt_lost")
        .expect("attempt_lost recorded");
    assert_eq!(
        lost, before_kill,
        "recovery continues right after the last durable event"
    );
    let worker2 = relaunched["detail"]["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    let (err, v) = call_as(
        &node.socket,
        &worker2,
        "workflow_report",
        report(&run_id, &id, rev, &relaunched, "verified"),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "completed");

    let all = run_events(&node, &project, &run_id).await;
    let kinds: Vec<&str> = all.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"started"));
    assert_eq!(kinds.last(), Some(&"completed"));
    assert_eq!(
        kinds.iter().filter(|k| **k == "step_completed").count(),
        2,
        "{kinds:?}"
    );
    let (_, v) = local(
        &node,
        "/workflows/run/action",
        json!({"input": {"action": "get", "run_id": run_id}, "project_path": project}),
    )
    .await;
    assert_eq!(v["run"]["status"], "completed");
    assert_eq!(v["run"]["recoveries"], 1);
    assert_eq!(v["run"]["story_revision"], rev);
    // Reports are evidence: the story is not promoted to done by them.
    let (_, v) = local(
        &node,
        "/stories/action",
        json!({"input": {"action": "get", "id": id}, "project_path": project}),
    )
    .await;
    assert_eq!(v["story"]["status"], "ready");
    // The story log pages are gapless too, and survived the kill.
    let (_, v) = local(
        &node,
        "/stories/action",
        json!({"input": {"action": "events", "limit": 500}, "project_path": project}),
    )
    .await;
    let seqs: Vec<u64> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(seqs.len() >= 2);
}

#[tokio::test]
async fn bad_story_input_is_refused_and_changes_nothing() {
    let dir = config_dir(json!({}));
    let node = NodeProc::start("tuic-node", &["--config-dir", &s(dir.path())], &[]).unwrap();
    let repo = tempfile::tempdir().unwrap();
    let project = add_repo(&node, repo.path()).await;
    let act = |input: Value| json!({"input": input, "project_path": project});
    for t in ["a", "b"] {
        let (st, v) = local(
            &node,
            "/stories/action",
            act(json!({"action": "create", "title": t})),
        )
        .await;
        assert_eq!(st, 200, "{v}");
    }
    let (st, _) = local(&node, "/stories/action", act(json!({"action": "add_dependency", "id": "st-2", "expected_revision": 1, "depends_on": "st-1"}))).await;
    assert_eq!(st, 200);
    let (_, before) = local(&node, "/stories/action", act(json!({"action": "events"}))).await;
    for (input, status, code) in [
        (
            json!({"action": "add_dependency", "id": "st-1", "expected_revision": 1, "depends_on": "st-2"}),
            409,
            "dependency_cycle",
        ),
        (
            json!({"action": "update", "id": "st-2", "expected_revision": 1, "title": "late"}),
            409,
            "stale_revision",
        ),
        (
            json!({"action": "approve", "id": "st-1", "expected_revision": 1}),
            403,
            "not_independent",
        ),
        (
            json!({"action": "transition", "id": "st-1", "expected_revision": 1, "to": "wont_fix"}),
            403,
            "forbidden",
        ),
        (json!({"action": "frobnicate"}), 400, "invalid_arguments"),
    ] {
        let (st, v) = local(&node, "/stories/action", act(input.clone())).await;
        assert_eq!(
            (st, v["code"].as_str()),
            (status, Some(code)),
            "{input}: {v}"
        );
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    let (_, after) = local(&node, "/stories/action", act(json!({"action": "events"}))).await;
    assert_eq!(before, after, "nothing changed");
    // The capability probe and the CLI path reach the same service.
    let r = ipc(&node.socket, "GET", "/stories/capabilities", None)
        .await
        .unwrap();
    assert_eq!(r.json(), json!(true));
    let out = std::process::Command::new(tuic_tests::bin("tuic"))
        .args([
            "story",
            r#"{"action":"get","id":"st-2"}"#,
            "--project",
            &project,
        ])
        .env("TUIC_SOCKET", &node.socket)
        .env_remove("TUIC_SESSION")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("\"st-2\"") && text.contains("\"revision\":2"),
        "{text}"
    );
}

#[tokio::test]
async fn a_one_second_automation_fires_once_a_second_and_stops_when_paused() {
    let dir = config_dir(json!({}));
    let node = NodeProc::start("tuic-node", &["--config-dir", &s(dir.path())], &[]).unwrap();
    let (mut a, me) = Agent::new(&node.socket, "scheduler").await;
    let mut events = Events::subscribe(&node.socket, "automation-fired").await;
    let (err, v) = a
        .tool(
            "automations",
            json!({"action": "create", "definition": {"name": "tick", "schedule": "* * * * * *"}}),
        )
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["ok"], true);
    let id = v["id"].as_str().unwrap().to_owned();
    let (_, d) = a
        .tool("automations", json!({"action": "get", "id": id}))
        .await;
    assert_eq!(d["created_by_session"], me);
    let is_ours = |v: &Value| v["automation_id"] == id.as_str();
    events
        .next_matching("automation-fired", Duration::from_secs(5), is_ours)
        .await
        .expect("the first firing");
    // Count firings over N seconds after the first one.
    const N: u64 = 5;
    let window_end = Instant::now() + Duration::from_secs(N);
    let mut n = 0;
    while let Some(left) = window_end.checked_duration_since(Instant::now()) {
        if events
            .next_matching("automation-fired", left, is_ours)
            .await
            .is_some()
        {
            n += 1;
        }
    }
    assert!((N - 1..=N + 1).contains(&n), "{n} firings in {N} s");
    let (err, v) = a
        .tool("automations", json!({"action": "pause", "id": id}))
        .await;
    assert!(!err, "{v}");
    // At most one firing was already in flight when the pause committed; then silence.
    let straggler = events
        .next_matching("automation-fired", Duration::from_millis(300), is_ours)
        .await;
    let quiet = events
        .next_matching("automation-fired", Duration::from_millis(2_500), is_ours)
        .await;
    assert!(
        quiet.is_none(),
        "fired after the pause: {quiet:?} (straggler {straggler:?})"
    );
    // The ledger holds every firing, gapless.
    let (st, v) = local(
        &node,
        "/automations/action",
        json!({"input": {"action": "firings", "id": id, "limit": 500}}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let f = v["firings"].as_array().unwrap();
    let expect = n + 1 + u64::from(straggler.is_some());
    assert_eq!(f.len() as u64, expect, "{v}");
    for (i, x) in f.iter().enumerate() {
        assert_eq!(x["seq"], i as u64 + 1);
    }
    // Creation needs a bound session; an unbound MCP caller is refused.
    let r = rpc_with(
        &node.socket,
        None,
        &[],
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}),
    )
    .await;
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let v = rpc_with(
        &node.socket,
        Some(&sid),
        &[],
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"automations","arguments":{"action":"create","definition":{"name":"x","schedule":"* * * * *"}}}}),
    )
    .await
    .json();
    assert_eq!(v["result"]["isError"], true, "{v}");
    assert!(
        v["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("not_bound")
    );
}

#[tokio::test]
async fn operator_commands_are_fenced_and_authority_is_enforced_per_rule() {
    let dir = config_dir(json!({}));
    let (code, _, err) = run_with_stdin(
        "tuic-node",
        &["set-password", "--config-dir", &s(dir.path())],
        "pw",
    )
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let node = start(dir.path());
    let repo = tempfile::tempdir().unwrap();
    let project = add_repo(&node, repo.path()).await;
    let worker = worker_script(repo.path());
    let quitter = repo.path().join("quitter.sh");
    std::fs::write(&quitter, "#!/bin/sh\necho quitting\nexit 0\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&quitter, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let act = |input: Value| json!({"input": input, "project_path": project});
    // Stories made and approved over HTTP: the local API creates, a human approves.
    for t in ["asks", "quits"] {
        let (st, v) = local(
            &node,
            "/stories/action",
            act(json!({"action": "create", "title": t})),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        let id = v["story"]["id"].clone();
        let (st, v) = human(
            &node,
            "/stories/action",
            act(json!({"action": "approve", "id": id, "expected_revision": 1})),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["story"]["approved_by"]["kind"], "human");
    }
    for (def_id, cmd) in [("ask", worker.clone()), ("quit", s(&quitter))] {
        let (st, v) = human(
            &node,
            "/workflows/definition/action",
            act(
                json!({"action": "publish", "definition_id": def_id, "name": def_id,
            "steps": [{"id": "only", "agent": {"command": cmd}, "prompt": "go"}]}),
            ),
        )
        .await;
        assert_eq!(st, 200, "{v}");
    }
    let mut events = Events::subscribe(&node.socket, "workflow-run-changed").await;

    // A worker that exits without reporting costs repairs until the run fails.
    let (st, v) = local(&node, "/workflows/run/action", act(json!({"action": "start_graph", "target": {"type": "story", "id": "st-2"},
        "definition_id": "quit", "definition_revision": 1, "request_id": "q", "limits": {"max_repairs": 1}}))).await;
    assert_eq!(st, 200, "{v}");
    let quit_run = v["run"]["run_id"].as_str().unwrap().to_owned();
    await_event(&node, &mut events, &project, &quit_run, |e| {
        e["kind"] == "failed"
    })
    .await;
    let all = run_events(&node, &project, &quit_run).await;
    assert_eq!(
        all.iter().filter(|e| e["kind"] == "repair").count(),
        2,
        "{all:?}"
    );

    // needs_input: only a human answers it, on the explicit activation.
    let (st, v) = local(
        &node,
        "/workflows/run/action",
        act(
            json!({"action": "start_graph", "target": {"type": "story", "id": "st-1"},
        "definition_id": "ask", "definition_revision": 1, "request_id": "a"}),
        ),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let run_id = v["run"]["run_id"].as_str().unwrap().to_owned();
    let launched = await_event(&node, &mut events, &project, &run_id, |e| {
        e["kind"] == "attempt_launched"
    })
    .await;
    let w = launched["detail"]["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut ask = report(&run_id, "st-1", 2, &launched, "which database?");
    ask["input"]["outcome"] = json!("needs_input");
    let (err, v) = call_as(&node.socket, &w, "workflow_report", ask.clone()).await;
    assert!(err, "needs_input without inputRequest");
    assert_eq!(v["code"], "invalid_arguments");
    ask["input"]["inputRequest"] =
        json!({"question": "which database?", "options": ["sqlite", "postgres"]});
    let (err, v) = call_as(&node.socket, &w, "workflow_report", ask).await;
    assert!(!err, "{v}");
    let (_, v) = local(
        &node,
        "/workflows/run/action",
        act(json!({"action": "get", "run_id": run_id})),
    )
    .await;
    assert_eq!(v["run"]["status"], "awaiting_input");
    let activation = v["run"]["pending_input"]["activation_id"].clone();
    let seq = v["run"]["sequence"].as_u64().unwrap();
    // Status-only resume cannot bypass the pending activation.
    let (st, v) = local(
        &node,
        "/workflows/run/action",
        act(json!({"action": "resume", "run_id": run_id, "expected_sequence": seq})),
    )
    .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (409, Some("invalid_transition")),
        "{v}"
    );
    let answer = json!({"action": "resume_graph", "execution_id": run_id, "activation_id": activation, "resolution": "sqlite"});
    let (st, v) = local(&node, "/workflows/run/action", act(answer.clone())).await;
    assert_eq!((st, v["code"].as_str()), (403, Some("forbidden")), "{v}");
    let mut wrong = answer.clone();
    wrong["activation_id"] = json!("run-0-a9");
    let (st, _) = human(&node, "/workflows/run/action", act(wrong)).await;
    assert_eq!(st, 409);
    let (st, v) = human(&node, "/workflows/run/action", act(answer)).await;
    assert_eq!(st, 200, "{v}");
    let relaunched = await_event(&node, &mut events, &project, &run_id, |e| {
        e["kind"] == "attempt_launched" && e["detail"]["generation"] == 2
    })
    .await;
    assert_ne!(
        relaunched["detail"]["attempt_id"],
        launched["detail"]["attempt_id"]
    );

    // Pause and cancel are fenced by the sequence; agents may not cancel.
    let (_, v) = local(
        &node,
        "/workflows/run/action",
        act(json!({"action": "get", "run_id": run_id})),
    )
    .await;
    let seq = v["run"]["sequence"].as_u64().unwrap();
    let (st, v) = local(
        &node,
        "/workflows/run/action",
        act(json!({"action": "pause", "run_id": run_id, "expected_sequence": seq - 1})),
    )
    .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (409, Some("stale_revision")),
        "{v}"
    );
    let (st, v) = local(
        &node,
        "/workflows/run/action",
        act(json!({"action": "pause", "run_id": run_id, "expected_sequence": seq})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["run"]["status"], "paused");
    // Killed while paused, and the worker dies while the node is away; resuming after the
    // restart reconciles (attempt_lost) and launches the next generation.
    let mut node = node;
    let sock = node.socket.clone();
    node.child.kill().unwrap();
    node.child.wait().unwrap();
    drop(events);
    kill_workers(&sock, &run_id).await;
    let node = start(dir.path());
    let mut events = Events::subscribe(&node.socket, "workflow-run-changed").await;
    let (_, v) = local(
        &node,
        "/workflows/run/action",
        act(json!({"action": "get", "run_id": run_id})),
    )
    .await;
    assert_eq!(
        v["run"]["status"], "paused",
        "recovery does not resume a paused run"
    );
    let seq = v["run"]["sequence"].as_u64().unwrap();
    let (st, v) = local(
        &node,
        "/workflows/run/action",
        act(json!({"action": "resume", "run_id": run_id, "expected_sequence": seq})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    await_event(&node, &mut events, &project, &run_id, |e| {
        e["kind"] == "attempt_launched" && e["detail"]["generation"] == 3
    })
    .await;
    assert!(
        run_events(&node, &project, &run_id)
            .await
            .iter()
            .any(|e| e["kind"] == "attempt_lost")
    );
    let (_, v) = local(
        &node,
        "/workflows/run/action",
        act(json!({"action": "get", "run_id": run_id})),
    )
    .await;
    let seq = v["run"]["sequence"].as_u64().unwrap();
    let (mut agent, _) = Agent::register(
        &node.socket,
        json!({"action": "register", "name": "x", "path": project}),
    )
    .await;
    let (err, v) = agent
        .tool(
            "workflow_run",
            json!({"action": "cancel", "run_id": run_id, "expected_sequence": seq}),
        )
        .await;
    assert!(err);
    assert_eq!(v["code"], "forbidden", "{v}");
    let (err, v) = agent
        .tool("workflow_run", json!({"action": "get", "run_id": run_id}))
        .await;
    assert!(!err, "agents read runs: {v}");
    let (st, v) = local(
        &node,
        "/workflows/run/action",
        act(json!({"action": "cancel", "run_id": run_id, "expected_sequence": seq})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["run"]["status"], "cancelled");
    // Plan targets are unavailable in this build, and say so.
    let (st, v) = local(
        &node,
        "/workflows/run/action",
        act(
            json!({"action": "start_graph", "target": {"type": "plan", "id": "ps-1"},
        "definition_id": "ask", "definition_revision": 1, "request_id": "p"}),
        ),
    )
    .await;
    assert_eq!(st, 501, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("unavailable in this build")
    );
}

fn git(dir: &Path, args: &[&str]) {
    let o = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A password-protected node and a Git repository with a plan document and two linked
/// worktrees: (config dir, node, repo temp dir, project, [worktree impl, worktree review]).
async fn coordinated_setup() -> (
    tempfile::TempDir,
    NodeProc,
    tempfile::TempDir,
    String,
    [String; 2],
) {
    let dir = config_dir(json!({}));
    let (code, _, err) = run_with_stdin(
        "tuic-node",
        &["set-password", "--config-dir", &s(dir.path())],
        "pw",
    )
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let node = start(dir.path());
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("repo");
    std::fs::create_dir_all(root.join("plans")).unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("plans/feature.md"), "# Feature plan\n").unwrap();
    git(&root, &["add", "."]);
    git(&root, &["commit", "-q", "-m", "base"]);
    let wts = ["impl", "review"].map(|b| {
        let p = t.path().join(format!("repo__wt/{b}"));
        git(&root, &["worktree", "add", "-q", "-b", b, &s(&p)]);
        s(&p.canonicalize().unwrap())
    });
    let project = add_repo(&node, &root).await;
    (dir, node, t, project, wts)
}

/// An approved story in the plan `plans/feature.md`: (author, reviewer, story id, revision).
async fn approved_plan_story(node: &NodeProc, project: &str) -> (Agent, Agent, String, u64) {
    let (mut a, _) = Agent::register(
        &node.socket,
        json!({"action": "register", "name": "author", "path": project}),
    )
    .await;
    let (mut b, _) = Agent::register(
        &node.socket,
        json!({"action": "register", "name": "reviewer", "path": project}),
    )
    .await;
    let (err, v) = story(
        &mut a,
        json!({"action": "add_plan_source", "path": "plans/feature.md"}),
    )
    .await;
    assert!(!err, "{v}");
    let plan = v["source"]["id"].as_str().unwrap().to_owned();
    let (err, v) = story(
        &mut a,
        json!({"action": "create", "title": "Coordinated", "plan_source": plan,
               "acceptance_criteria": ["it builds", "it is reviewed"]}),
    )
    .await;
    assert!(!err, "{v}");
    let id = v["story"]["id"].as_str().unwrap().to_owned();
    let (err, v) = story(
        &mut b,
        json!({"action": "approve", "id": id, "expected_revision": 1}),
    )
    .await;
    assert!(!err, "{v}");
    let rev = v["story"]["revision"].as_u64().unwrap();
    (a, b, id, rev)
}

fn launch_input(run: &str, attempt: &str, worktree: &str, agent_type: &str) -> Value {
    json!({"input": {"runId": run, "attemptId": attempt, "worktreePath": worktree,
                     "agentType": agent_type, "skills": ["rust"]}})
}

#[tokio::test]
async fn a_coordinator_launches_workers_proposes_stories_and_reads_workflow_events() {
    let (_dir, node, t, project, [wt_impl, wt_review]) = coordinated_setup().await;
    let worker = worker_script(t.path());
    let (_a, mut b, id, rev) = approved_plan_story(&node, &project).await;
    let def = json!({"action": "publish", "definition_id": "coordinated", "name": "Coordinated",
    "steps": [{"id": "coordinate", "role": "coordinator", "agent": {"command": worker},
        "prompt": "coordinate {storyId} in {runId}",
        "launches": {
            "impl": {"agent": {"command": worker}, "prompt": "implement {storyId} in {worktreePath} with {skills}"},
            "review": {"agent": {"command": worker}, "prompt": "review {storyId}", "role": "reviewer"}
        }}]});
    let (st, v) = human(
        &node,
        "/workflows/definition/action",
        json!({"input": def, "project_path": project}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    // Launch declarations belong to coordinator steps only.
    let mut bad = def.clone();
    bad["steps"][0]["role"] = json!("worker");
    let (st, v) = human(
        &node,
        "/workflows/definition/action",
        json!({"input": bad, "project_path": project}),
    )
    .await;
    assert_eq!(st, 400, "{v}");

    let mut events = Events::subscribe(&node.socket, "workflow-run-changed").await;
    let (st, v) = local(
        &node,
        "/workflows/run/action",
        json!({"input": {"action": "start_graph", "target": {"type": "story", "id": id},
            "expected_revision": rev, "definition_id": "coordinated", "definition_revision": 1,
            "request_id": "go"}, "project_path": project}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let run = v["run"]["run_id"].as_str().unwrap().to_owned();
    let launched = await_event(&node, &mut events, &project, &run, |e| {
        e["kind"] == "attempt_launched" && e["detail"]["step_id"] == "coordinate"
    })
    .await;
    assert_eq!(launched["detail"]["role"], "coordinator");
    let coord = launched["detail"]["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();

    // workflow_launch refusals; none of them records anything.
    let before = run_events(&node, &project, &run).await.len();
    let (err, v) = b
        .tool(
            "workflow_launch",
            launch_input(&run, "w1", &wt_impl, "impl"),
        )
        .await;
    assert!(err);
    assert_eq!(
        v["code"], "forbidden",
        "a registered agent without a managed PTY: {v}"
    );
    let (err, v) = call_as(
        &node.socket,
        &coord,
        "workflow_launch",
        launch_input(&run, "w1", &project, "impl"),
    )
    .await;
    assert!(err);
    assert!(
        v["error"].as_str().unwrap().contains("main checkout"),
        "{v}"
    );
    let stray = t.path().join("stray");
    std::fs::create_dir(&stray).unwrap();
    let (err, v) = call_as(
        &node.socket,
        &coord,
        "workflow_launch",
        launch_input(&run, "w1", &s(&stray), "impl"),
    )
    .await;
    assert!(err);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("not a linked worktree"),
        "{v}"
    );
    let (err, v) = call_as(
        &node.socket,
        &coord,
        "workflow_launch",
        launch_input(&run, "w1", &wt_impl, "shell"),
    )
    .await;
    assert!(err);
    assert!(v["error"].as_str().unwrap().contains("not pinned"), "{v}");
    assert_eq!(run_events(&node, &project, &run).await.len(), before);

    // One launch: reserved, spawned in the worktree, bound; the same input replays it and a
    // changed input under the same attemptId is refused.
    let (err, l) = call_as(
        &node.socket,
        &coord,
        "workflow_launch",
        launch_input(&run, "w1", &wt_impl, "impl"),
    )
    .await;
    assert!(!err, "{l}");
    let w1 = l["launch"]["tuic_session"].as_str().unwrap().to_owned();
    assert_eq!(l["launch"]["worktree"], wt_impl);
    let (err, again) = call_as(
        &node.socket,
        &coord,
        "workflow_launch",
        launch_input(&run, "w1", &wt_impl, "impl"),
    )
    .await;
    assert!(!err, "{again}");
    assert_eq!(
        (
            again["replayed"].clone(),
            again["launch"]["tuic_session"].as_str()
        ),
        (json!(true), Some(w1.as_str()))
    );
    let mut changed = launch_input(&run, "w1", &wt_impl, "impl");
    changed["input"]["skills"] = json!(["go"]);
    let (err, v) = call_as(&node.socket, &coord, "workflow_launch", changed).await;
    assert!(err);
    assert_eq!(v["code"], "idempotency_conflict", "{v}");
    let all = run_events(&node, &project, &run).await;
    let kinds: Vec<&str> = all.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    let reserved = kinds.iter().position(|k| *k == "launch_reserved").unwrap();
    assert_eq!(kinds[reserved + 1], "attempt_launched", "{kinds:?}");
    let pty = ipc(&node.socket, "GET", "/sessions", None)
        .await
        .unwrap()
        .json();
    let row = pty
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tuic_session"] == w1)
        .expect("the worker's PTY is listed");
    assert_eq!(row["cwd"], wt_impl, "{row}");

    // The worker reports; the coordinator's inbox gets a workflow_event cursor and it
    // replays the run log from it.
    let base = json!({"contractVersion": 1, "runId": run, "storyId": id, "storyRevision": rev,
        "generation": 1, "summary": "implemented", "criterionResults": [{"criterion": 0, "ok": true}],
        "evidence": [{"command": "cargo build", "exit": 0}]});
    let mut rep = base.clone();
    rep["attemptId"] = json!("w1");
    rep["outcome"] = json!("completed");
    let (err, r) = call_as(&node.socket, &w1, "workflow_report", json!({"input": rep})).await;
    assert!(!err, "{r}");
    let seq = r["sequence"].as_u64().unwrap();
    let (err, inbox) = call_as(&node.socket, &coord, "agent", json!({"action": "inbox"})).await;
    assert!(!err, "{inbox}");
    let m = inbox["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["kind"] == "workflow_event")
        .unwrap_or_else(|| panic!("no workflow_event: {inbox}"))
        .clone();
    let body: Value = serde_json::from_str(m["message"].as_str().unwrap()).unwrap();
    assert_eq!(
        body,
        json!({"type": "workflow_event", "runId": run, "storyId": id, "sequence": seq})
    );
    let (err, page) = call_as(
        &node.socket,
        &coord,
        "workflow_run",
        json!({"action": "events", "run_id": run, "cursor": seq - 1, "limit": 1}),
    )
    .await;
    assert!(!err, "{page}");
    assert_eq!(page["events"][0]["seq"], seq);
    assert_eq!(page["events"][0]["kind"], "report");
    assert_eq!(page["events"][0]["detail"]["attemptId"], "w1");

    // Evidence rules: a reviewer's completed report needs review with criterion-indexed
    // findings; needs_input needs inputRequest. Each refusal records nothing.
    let (err, l) = call_as(
        &node.socket,
        &coord,
        "workflow_launch",
        launch_input(&run, "r1", &wt_review, "review"),
    )
    .await;
    assert!(!err, "{l}");
    let r1 = l["launch"]["tuic_session"].as_str().unwrap().to_owned();
    let before = run_events(&node, &project, &run).await.len();
    let mut rr = base.clone();
    rr["attemptId"] = json!("r1");
    rr["outcome"] = json!("completed");
    for (review, needle) in [
        (None, "requires review"),
        (
            Some(
                json!({"decision": "approve", "artifactDigest": "abc", "findings": [{"criterion": 5, "ok": true}]}),
            ),
            "criterion 5",
        ),
        (
            Some(
                json!({"decision": "approve", "artifactDigest": "", "findings": [{"criterion": 0, "ok": true}]}),
            ),
            "artifactDigest",
        ),
        (
            Some(json!({"decision": "approve", "artifactDigest": "abc", "findings": []})),
            "at least one",
        ),
    ] {
        let mut x = rr.clone();
        if let Some(r) = review {
            x["review"] = r;
        }
        let (err, v) = call_as(&node.socket, &r1, "workflow_report", json!({"input": x})).await;
        assert!(err, "{v}");
        assert_eq!(v["code"], "invalid_arguments", "{v}");
        assert!(
            v["error"].as_str().unwrap().contains(needle),
            "{needle}: {v}"
        );
    }
    let mut ni = rr.clone();
    ni["outcome"] = json!("needs_input");
    let (err, v) = call_as(&node.socket, &r1, "workflow_report", json!({"input": ni})).await;
    assert!(err);
    assert!(v["error"].as_str().unwrap().contains("inputRequest"), "{v}");
    assert_eq!(
        run_events(&node, &project, &run).await.len(),
        before,
        "nothing recorded"
    );
    rr["review"] = json!({"decision": "approve", "artifactDigest": "sha256:1f2e",
        "findings": [{"criterion": 0, "ok": true}, {"criterion": 1, "ok": true, "note": "read"}]});
    let (err, v) = call_as(&node.socket, &r1, "workflow_report", json!({"input": rr})).await;
    assert!(!err, "{v}");

    // workflow_story_create: only the coordinator; the proposal key is durable.
    let proposal = |title: &str| {
        json!({"input": {"runId": run, "proposalKey": "split-1",
            "story": {"title": title, "acceptance_criteria": ["tests pass"]}}})
    };
    let (err, v) = b.tool("workflow_story_create", proposal("Follow-up")).await;
    assert!(err);
    assert_eq!(v["code"], "forbidden", "{v}");
    let (err, v) = call_as(
        &node.socket,
        &w1,
        "workflow_story_create",
        proposal("Follow-up"),
    )
    .await;
    assert!(err);
    assert_eq!(
        v["code"], "forbidden",
        "a worker is not the coordinator: {v}"
    );
    let (err, first) = call_as(
        &node.socket,
        &coord,
        "workflow_story_create",
        proposal("Follow-up"),
    )
    .await;
    assert!(!err, "{first}");
    let sid = first["story"]["id"].as_str().unwrap().to_owned();
    assert_eq!(first["story"]["origin"]["kind"], "plan_step");
    assert_eq!(first["story"]["origin"]["run_id"], run);
    assert_eq!(
        first["story"]["plan_source"],
        v_plan(&node, &project, &id).await
    );
    let (err, again) = call_as(
        &node.socket,
        &coord,
        "workflow_story_create",
        proposal("Follow-up"),
    )
    .await;
    assert!(!err, "{again}");
    assert_eq!(again["story"]["id"], sid);
    let (err, v) = call_as(
        &node.socket,
        &coord,
        "workflow_story_create",
        proposal("Something else"),
    )
    .await;
    assert!(err);
    assert_eq!(v["code"], "idempotency_conflict", "{v}");
    let all = run_events(&node, &project, &run).await;
    let effect: Vec<&str> = all
        .iter()
        .filter(|e| e["detail"]["effect"] == "create_story")
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(effect, ["effect_reserved", "effect_completed"]);
    let (_, v) = local(
        &node,
        "/stories/action",
        json!({"input": {"action": "list"}, "project_path": project}),
    )
    .await;
    assert_eq!(
        v["stories"].as_array().unwrap().len(),
        2,
        "one proposal, one story: {v}"
    );

    // The coordinator's own report advances (and here ends) the graph.
    let mut done = base.clone();
    done["attemptId"] = launched["detail"]["attempt_id"].clone();
    done["outcome"] = json!("completed");
    let (err, v) = call_as(
        &node.socket,
        &coord,
        "workflow_report",
        json!({"input": done}),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "completed");
}

async fn v_plan(node: &NodeProc, project: &str, id: &str) -> Value {
    let (_, v) = local(
        node,
        "/stories/action",
        json!({"input": {"action": "get", "id": id}, "project_path": project}),
    )
    .await;
    v["story"]["plan_source"].clone()
}

#[tokio::test]
async fn a_silent_attempt_times_out_as_a_repair_and_a_second_node_cannot_open_the_runs() {
    let (dir, node, t, project, _) = coordinated_setup().await;
    let worker = worker_script(t.path());
    let (_a, _b, id, rev) = approved_plan_story(&node, &project).await;
    let def = json!({"action": "publish", "definition_id": "silent", "name": "Silent",
        "steps": [{"id": "work", "agent": {"command": worker}, "prompt": "work {attemptId}"}]});
    let (st, v) = human(
        &node,
        "/workflows/definition/action",
        json!({"input": def, "project_path": project}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let mut events = Events::subscribe(&node.socket, "workflow-run-changed").await;
    let (st, v) = local(
        &node,
        "/workflows/run/action",
        json!({"input": {"action": "start_graph", "target": {"type": "story", "id": id},
            "expected_revision": rev, "definition_id": "silent", "definition_revision": 1,
            "request_id": "go", "limits": {"max_repairs": 1, "attempt_timeout_secs": 1}},
            "project_path": project}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let run = v["run"]["run_id"].as_str().unwrap().to_owned();

    // A second node process on the same config dir (its own socket) is refused by the
    // instance lock while the first drives the run database.
    let other = t.path().join("other.sock");
    let out = std::process::Command::new(tuic_tests::bin("tuic-node"))
        .args(["--config-dir", &s(dir.path())])
        .env("TUIC_SOCKET", &other)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already running with config dir"), "{err}");
    assert!(!other.exists(), "the refused node never listened");

    // Nobody reports: each launched attempt times out after 1 s, counts as a repair, and
    // the second timeout exhausts max_repairs = 1.
    let failed = await_event(&node, &mut events, &project, &run, |e| {
        e["kind"] == "failed"
    })
    .await;
    let all = run_events(&node, &project, &run).await;
    let kinds: Vec<&str> = all.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "attempt_timed_out").count(),
        2,
        "{kinds:?}"
    );
    let t1 = kinds
        .iter()
        .position(|k| *k == "attempt_timed_out")
        .unwrap();
    assert_eq!(kinds[t1 + 1], "repair", "{kinds:?}");
    let launched = all
        .iter()
        .find(|e| e["kind"] == "attempt_launched")
        .unwrap();
    let timed = &all[t1];
    let late = timed["at_ms"].as_u64().unwrap() - launched["at_ms"].as_u64().unwrap();
    assert!(
        (1_000..10_000).contains(&late),
        "timed out {late} ms after launch"
    );
    assert!(
        failed["detail"]["reason"]
            .as_str()
            .unwrap()
            .contains("repairs exhausted")
    );
    let (_, v) = local(
        &node,
        "/workflows/run/action",
        json!({"input": {"action": "get", "run_id": run}, "project_path": project}),
    )
    .await;
    assert_eq!(
        (v["run"]["status"].as_str(), v["run"]["repairs"].as_u64()),
        (Some("failed"), Some(2))
    );
    // The timed-out worker's PTY was closed.
    let w = launched["detail"]["session_id"].as_str().unwrap();
    let rows = ipc(&node.socket, "GET", "/sessions", None)
        .await
        .unwrap()
        .json();
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .all(|r| r["session_id"] != w),
        "{rows}"
    );
}

#[tokio::test]
async fn a_coordinator_launched_worker_that_never_reports_times_out_and_the_coordinator_is_told() {
    let (_dir, node, t, project, [wt_impl, _]) = coordinated_setup().await;
    // The scripted worker prints its prompt and never reports.
    let worker = worker_script(t.path());
    let (_a, _b, id, rev) = approved_plan_story(&node, &project).await;
    let def = json!({"action": "publish", "definition_id": "deadline", "name": "Deadline",
        "steps": [{"id": "coordinate", "role": "coordinator", "agent": {"command": worker},
            "prompt": "coordinate {storyId}",
            "launches": {"impl": {"agent": {"command": worker}, "prompt": "implement {storyId}"}}}]});
    let (st, v) = human(
        &node,
        "/workflows/definition/action",
        json!({"input": def, "project_path": project}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let mut events = Events::subscribe(&node.socket, "workflow-run-changed").await;
    let mut closed = Events::subscribe(&node.socket, "session-closed").await;
    const TIMEOUT_SECS: u64 = 4;
    let (st, v) = local(
        &node,
        "/workflows/run/action",
        json!({"input": {"action": "start_graph", "target": {"type": "story", "id": id},
            "expected_revision": rev, "definition_id": "deadline", "definition_revision": 1,
            "request_id": "go", "limits": {"attempt_timeout_secs": TIMEOUT_SECS}},
            "project_path": project}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let run = v["run"]["run_id"].as_str().unwrap().to_owned();
    let coordinator = await_event(&node, &mut events, &project, &run, |e| {
        e["kind"] == "attempt_launched" && e["detail"]["step_id"] == "coordinate"
    })
    .await;
    let coord = coordinator["detail"]["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    let coord_attempt = coordinator["detail"]["attempt_id"].clone();

    // The coordinator launches a worker: bound with the run's attempt deadline.
    let (err, l) = call_as(
        &node.socket,
        &coord,
        "workflow_launch",
        launch_input(&run, "w1", &wt_impl, "impl"),
    )
    .await;
    assert!(!err, "{l}");
    let w1 = l["launch"]["tuic_session"].as_str().unwrap().to_owned();
    let w1_pty = l["launch"]["session_id"].as_str().unwrap().to_owned();
    let launched = await_event(&node, &mut events, &project, &run, |e| {
        e["kind"] == "attempt_launched" && e["detail"]["attempt_id"] == "w1"
    })
    .await;
    let deadline = launched["detail"]["deadline_ms"].as_u64().unwrap();
    assert_eq!(
        deadline,
        launched["at_ms"].as_u64().unwrap() + TIMEOUT_SECS * 1000,
        "{launched}"
    );
    assert_eq!(l["launch"]["deadline_ms"], deadline);

    // Nobody reports: the launch times out at its deadline, its worker is closed, and the
    // coordinator's inbox gets a workflow_event cursor at the timeout event.
    let timed = await_event(&node, &mut events, &project, &run, |e| {
        e["kind"] == "attempt_timed_out" && e["detail"]["attempt_id"] == "w1"
    })
    .await;
    assert_eq!(timed["detail"]["launched"], true, "{timed}");
    assert_eq!(timed["detail"]["coordinator_attempt"], coord_attempt);
    assert_eq!(timed["detail"]["attempt_timeout_secs"], TIMEOUT_SECS);
    let late = timed["at_ms"].as_u64().unwrap() - launched["at_ms"].as_u64().unwrap();
    assert!(
        (TIMEOUT_SECS * 1000..TIMEOUT_SECS * 1000 + 10_000).contains(&late),
        "timed out {late} ms after launch"
    );
    closed
        .next_matching("session-closed", Duration::from_secs(30), |e| {
            e["session_id"] == json!(w1_pty)
        })
        .await
        .expect("the timed-out worker's PTY was closed");
    let (err, w) = call_as(
        &node.socket,
        &coord,
        "agent",
        json!({"action": "wait", "timeout_ms": 30_000}),
    )
    .await;
    assert!(!err, "{w}");
    let m = w["new_messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["kind"] == "workflow_event")
        .unwrap_or_else(|| panic!("no workflow_event: {w}"))
        .clone();
    let body: Value = serde_json::from_str(m["message"].as_str().unwrap()).unwrap();
    assert_eq!(
        body,
        json!({"type": "workflow_event", "runId": run, "storyId": id, "sequence": timed["seq"]})
    );

    // The coordinator was not timed out meanwhile (it waits on its worker, then has a full
    // window to act), and nothing counted a repair.
    let all = run_events(&node, &project, &run).await;
    let kinds: Vec<&str> = all.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "attempt_timed_out").count(),
        1,
        "{kinds:?}"
    );
    assert!(!kinds.contains(&"repair"), "{kinds:?}");
    let (_, v) = local(
        &node,
        "/workflows/run/action",
        json!({"input": {"action": "get", "run_id": run}, "project_path": project}),
    )
    .await;
    assert_eq!(v["run"]["status"], "running", "{v}");
    assert_eq!(v["run"]["attempt"]["attempt_id"], coord_attempt);
    assert_eq!(v["run"]["launches"]["w1"]["timed_out"], true, "{v}");

    // A late report from the timed-out worker is refused and records nothing.
    let rep = json!({"input": {"contractVersion": 1, "runId": run, "storyId": id,
        "storyRevision": rev, "attemptId": "w1", "generation": 1, "outcome": "completed",
        "summary": "too late", "criterionResults": [{"criterion": 0, "ok": true}],
        "evidence": [{"command": "true", "exit": 0}]}});
    let (err, v) = call_as(&node.socket, &w1, "workflow_report", rep).await;
    assert!(err, "{v}");
    assert!(v["error"].as_str().unwrap().contains("timed out"), "{v}");
    assert_eq!(run_events(&node, &project, &run).await.len(), all.len());

    // The worktree is free again: the coordinator relaunches under a new attemptId, then
    // ends its step.
    let (err, l) = call_as(
        &node.socket,
        &coord,
        "workflow_launch",
        launch_input(&run, "w2", &wt_impl, "impl"),
    )
    .await;
    assert!(!err, "{l}");
    let done = json!({"input": {"contractVersion": 1, "runId": run, "storyId": id,
        "storyRevision": rev, "attemptId": coord_attempt, "generation": 1, "outcome": "completed",
        "summary": "coordinated", "criterionResults": [{"criterion": 0, "ok": true}],
        "evidence": [{"command": "true", "exit": 0}]}});
    let (err, v) = call_as(&node.socket, &coord, "workflow_report", done).await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "completed");
}

/// `POST` over TCP with Basic credentials and the relaying hub's actor header.
async fn human_relayed(node: &NodeProc, path: &str, actor: &str, body: Value) -> (u16, Value) {
    let addr = node.tcp.expect("remote access is on");
    let r = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .basic_auth("admin", Some("pw"))
        .header("x-tuic-actor", actor)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

#[tokio::test]
async fn the_relayed_actor_header_only_lowers_authority() {
    let (_dir, node, _t, project, _) = coordinated_setup().await;
    let def = json!({"action": "publish", "definition_id": "d", "name": "D",
        "steps": [{"id": "s", "agent": {"command": "true"}, "prompt": "p"}]});
    let body = json!({"input": def, "project_path": project});
    // Verified credentials lowered to local_api: publishing (human only) is refused.
    let (st, v) = human_relayed(
        &node,
        "/workflows/definition/action",
        "local_api",
        body.clone(),
    )
    .await;
    assert_eq!(st, 403, "{v}");
    assert!(v["error"].as_str().unwrap().contains("local_api"), "{v}");
    // Any other value is refused outright; it can never raise anything.
    let (st, v) = human_relayed(&node, "/workflows/definition/action", "human", body.clone()).await;
    assert_eq!(st, 400, "{v}");
    let (_, v) = local(
        &node,
        "/workflows/definition/action",
        json!({"input": {"action": "list"}, "project_path": project}),
    )
    .await;
    assert_eq!(v["definitions"].as_array().map(Vec::len), Some(0), "{v}");
    // Without the header the same credentials are human.
    let (st, v) = human(&node, "/workflows/definition/action", body).await;
    assert_eq!(st, 200, "{v}");
}
