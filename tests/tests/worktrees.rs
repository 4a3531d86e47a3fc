//! End-to-end: worktrees and branch safety through the real `tuic-node` binary — `POST
//! /worktrees`, the `repo` tool over MCP (bound to a real PTY's identity), declared placement
//! surviving a node restart in `GET /sessions`, bad input refused with nothing created, and the
//! official Python MCP SDK client driving the whole flow through `tuic-bridge`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tuic_tests::progress::{Events, Mcp};
use tuic_tests::{NodeProc, config_dir, enc, ipc};

fn git(dir: &Path, args: &[&str]) -> String {
    tuic_tests::bed::git(dir, args).trim().to_owned()
}

/// A repository `repo` on `main` with one commit, inside its own temp dir.
fn repo() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("a.txt"), "a\n").unwrap();
    git(&root, &["add", "a.txt"]);
    git(&root, &["commit", "-q", "-m", "base"]);
    let root = root.canonicalize().unwrap();
    (d, root)
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

fn start(cfg: &Path) -> NodeProc {
    NodeProc::start("tuic-node", &["--config-dir", &s(cfg)], &[]).unwrap()
}

/// Stops `node` and starts it again on the same config dir. The new process starts once the
/// old one's locks on the config dir and the store are released — awaited with a blocking
/// `flock` (bounded): the kernel can release an exited process's last file references a few
/// milliseconds after its parent reaped it (seen as the old pid's `FLOCK` in `/proc/locks`
/// with no process holding the file), and `claim_instance` does not wait for that.
fn restart(mut node: NodeProc, cfg: &Path) -> NodeProc {
    node.terminate().unwrap();
    for f in ["node.lock", "state.redb"] {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(cfg.join(f))
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(file.lock().is_ok() && file.unlock().is_ok());
        });
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap_or(false),
            "{f} stayed locked after the node exited"
        );
    }
    start(cfg)
}

async fn post(node: &NodeProc, path: &str, body: Value) -> (u16, Value) {
    let r = ipc(&node.socket, "POST", path, Some(body)).await.unwrap();
    (r.status, r.json())
}

async fn get(node: &NodeProc, path: &str) -> (u16, Value) {
    let r = ipc(&node.socket, "GET", path, None).await.unwrap();
    (r.status, r.json())
}

async fn shell_in(node: &NodeProc, cwd: &Path, tuic: Option<&str>) -> Value {
    let mut body = json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": s(cwd)});
    if let Some(t) = tuic {
        body["tuic_session"] = json!(t);
    }
    let (st, v) = post(node, "/sessions", body).await;
    assert_eq!(st, 200, "{v}");
    v
}

async fn row_of(node: &NodeProc, tuic: &str) -> Value {
    let (_, rows) = get(node, "/sessions").await;
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["tuic_session"] == tuic)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn worktrees_over_http_and_mcp_and_placement_across_a_restart() {
    let cfg = config_dir(json!({}));
    let node = start(cfg.path());
    let (d, root) = repo();
    let (st, v) = post(&node, "/repos", json!({"path": s(&root)})).await;
    assert_eq!(st, 200, "{v}");
    let wt_dir = root.with_file_name("repo__wt");

    // Bad input over HTTP: each names the problem; nothing is created.
    let (_d2, stranger) = repo();
    std::os::unix::fs::symlink(&stranger, root.join("link")).unwrap();
    let shell_ws = d.path().join("plain");
    std::fs::create_dir(&shell_ws).unwrap();
    post(&node, "/repos", json!({"path": s(&shell_ws)})).await;
    let bad = [
        (
            json!({"base_repo": s(&stranger), "branch": "x"}),
            "unknown_repository",
            "not a registered repository",
        ),
        (
            json!({"base_repo": format!("{}/../repo", s(&root)), "branch": "x"}),
            "invalid_path",
            "..",
        ),
        (
            json!({"base_repo": s(&root.join("link")), "branch": "x"}),
            "unknown_repository",
            "symlink",
        ),
        (
            json!({"base_repo": s(&shell_ws), "branch": "x"}),
            "not_git",
            "not a Git repository",
        ),
        (
            json!({"base_repo": s(&root), "branch": "x", "base": "no-such-branch"}),
            "unknown_ref",
            "no-such-branch",
        ),
        (
            json!({"base_repo": s(&root), "branch": "bad..name"}),
            "invalid_branch",
            "bad..name",
        ),
    ];
    for (body, code, says) in bad {
        let (st, v) = post(&node, "/worktrees", body.clone()).await;
        assert_eq!(st, 400, "{body}: {v}");
        assert_eq!(v["code"], code, "{body}: {v}");
        assert!(v["error"].as_str().unwrap().contains(says), "{body}: {v}");
    }
    assert!(!wt_dir.exists(), "nothing was created");
    assert_eq!(git(&root, &["branch", "--format=%(refname:short)"]), "main");

    // POST /worktrees, with its event.
    let mut events = Events::subscribe(
        &node.socket,
        "worktree-created,session-worktree-declared,worktree-removed",
    )
    .await;
    let (st, v) = post(
        &node,
        "/worktrees",
        json!({"base_repo": s(&root), "branch": "http-one"}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let http_wt = wt_dir.join("http-one");
    assert_eq!(v["worktree_path"], s(&http_wt));
    assert_eq!(v["workspace_id"], "http-one");
    assert!(v.get("cc_agent_hint").is_none(), "HTTP callers get no hint");
    assert!(http_wt.join("a.txt").is_file());
    events
        .next_matching("worktree-created", Duration::from_secs(10), |e| {
            e["worktree_path"] == s(&http_wt)
        })
        .await
        .expect("worktree-created");

    // MCP, bound to a real PTY started in the repository, as Claude Code.
    let pty = shell_in(&node, &root, None).await;
    let tuic = pty["tuic_session"].as_str().unwrap().to_owned();
    let mcp = Mcp::start(&node.socket, Some(&tuic)).await;
    let cc = mcp
        .rpc(
            "tools/call",
            json!({"name": "repo",
                   "arguments": {"action": "worktree_create", "path": s(&root), "branch": "agent/two"},
                   "_meta": {"io.modelcontextprotocol/clientInfo": {"name": "claude-code", "version": "1"}}}),
        )
        .await;
    let cc: Value =
        serde_json::from_str(cc["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    let agent_wt = wt_dir.join("agent-two");
    assert_eq!(cc["worktree_path"], s(&agent_wt), "{cc}");
    assert_eq!(cc["cc_agent_hint"]["worktree_path"], s(&agent_wt));
    assert!(
        cc["cc_agent_hint"]["suggested_prompt"]
            .as_str()
            .unwrap()
            .contains("absolute paths")
    );
    let ev = events
        .next_matching("worktree-created", Duration::from_secs(10), |e| {
            e["branch"] == "agent/two"
        })
        .await
        .expect("worktree-created");
    assert_eq!(ev["creator_session"], tuic.as_str());
    // The creator was in the repository: its tab moved to the new workspace.
    assert_eq!(row_of(&node, &tuic).await["worktree_path"], s(&agent_wt));

    let (err, l) = mcp
        .tool("repo", json!({"action": "worktree_list", "path": s(&root)}))
        .await;
    assert!(!err, "{l}");
    assert_eq!(l["main"]["kind"], "main");
    assert_eq!(l["http-one"]["lifecycle_status"]["removal_safety"], "safe");
    assert_eq!(
        l["agent/two"]["lifecycle_status"]["commit_status"],
        "in_sync"
    );

    // Declaration: the main checkout is refused, the worktree accepted, and the row shows it.
    let (err, e) = mcp
        .tool(
            "session",
            json!({"action": "declare_worktree", "worktree_path": s(&root)}),
        )
        .await;
    assert!(err);
    assert_eq!(e["code"], "main_checkout", "{e}");
    let (err, dv) = mcp
        .tool(
            "session",
            json!({"action": "declare_worktree", "worktree_path": s(&http_wt)}),
        )
        .await;
    assert!(!err, "{dv}");
    assert_eq!(dv["creator_session"], tuic.as_str());
    events
        .next_matching("session-worktree-declared", Duration::from_secs(10), |e| {
            e["worktree_path"] == s(&http_wt)
        })
        .await
        .expect("session-worktree-declared");
    let row = row_of(&node, &tuic).await;
    assert_eq!(row["worktree_path"], s(&http_wt));
    assert_eq!(row["worktree_branch"], "http-one");
    assert_eq!(row["cwd"], s(&root), "the real cwd is unchanged");
    // The single-row route (what a hub's mirror fetches) and session status carry it too.
    let (_, one) = get(
        &node,
        &format!("/sessions/{}", pty["session_id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(one["worktree_path"], s(&http_wt), "{one}");
    let (_, st) = mcp
        .tool("session", json!({"action": "status", "session_id": tuic}))
        .await;
    assert_eq!(st["worktree_branch"], "http-one", "{st}");

    // GET /repo/info.
    let (st, info) = get(&node, &format!("/repo/info?path={}", enc(&s(&root)))).await;
    assert_eq!(st, 200, "{info}");
    assert_eq!(info["default_branch"], "main");
    assert_eq!(info["worktree_count"], 2);

    // Restart: the tab comes back with its identity and its placement.
    let node = restart(node, cfg.path());
    assert!(row_of(&node, &tuic).await.is_null());
    let back = shell_in(&node, &root, Some(&tuic)).await;
    assert_eq!(back["tuic_session"], tuic.as_str());
    let row = row_of(&node, &tuic).await;
    assert_eq!(row["worktree_path"], s(&http_wt), "{row}");
    assert_eq!(row["worktree_branch"], "http-one");

    // Removal over HTTP: a dirty worktree is refused, a forced one needs the fingerprint.
    std::fs::write(http_wt.join("wip.txt"), "wip").unwrap();
    let (st, v) = post(
        &node,
        "/worktrees/remove",
        json!({"path": s(&root), "branch": "http-one"}),
    )
    .await;
    assert_eq!((st, v["code"].as_str()), (409, Some("dirty")), "{v}");
    let (_, lc) = get(
        &node,
        &format!(
            "/worktrees/lifecycle?path={}&branch=http-one",
            enc(&s(&root))
        ),
    )
    .await;
    let fp = lc["lifecycle_status"]["fingerprint"].as_str().unwrap();
    let (st, v) = post(
        &node,
        "/worktrees/remove",
        json!({"path": s(&root), "branch": "http-one", "force": true, "expected_fingerprint": fp}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["ok"], true);
    assert!(
        v["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("live session")),
        "the tab placed there is named: {v}"
    );
    assert!(!http_wt.exists());
    assert!(row_of(&node, &tuic).await.get("worktree_path").is_none());

    // spawn_session starts a bare shell in the new worktree, placed there.
    let (st, v) = post(
        &node,
        "/worktrees",
        json!({"base_repo": s(&root), "branch": "spawned", "spawn_session": true}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let spawned_wt = wt_dir.join("spawned");
    let row = row_of(&node, v["tuic_session"].as_str().unwrap()).await;
    assert_eq!(row["session_id"], v["session_id"]);
    assert_eq!(row["cwd"], s(&spawned_wt));
    assert_eq!(row["worktree_path"], s(&spawned_wt));
    assert_eq!(row["worktree_branch"], "spawned");
    // That shell's repository is the parent one: its worktree belongs to it.
    let inside = Mcp::start(&node.socket, v["tuic_session"].as_str()).await;
    let (err, act) = inside.tool("repo", json!({"action": "active"})).await;
    assert!(!err, "{act}");
    assert_eq!(act["repo"]["path"], s(&root));
    let listed = act["sessions"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|x| x["session_id"] == v["session_id"] && x["worktree_path"] == s(&spawned_wt)),
        "{act}"
    );
}

#[tokio::test]
async fn the_python_sdk_creates_lists_declares_and_removes_a_worktree() {
    let python = match std::env::var("TUIC_TEST_PYTHON") {
        Ok(p) => p,
        Err(_) => tuic_tests::sdk_clients().python,
    };
    let cfg = config_dir(json!({}));
    let node = start(cfg.path());
    let (_d, root) = repo();
    let (st, v) = post(&node, "/repos", json!({"path": s(&root)})).await;
    assert_eq!(st, 200, "{v}");
    let pty = shell_in(&node, &root, None).await;
    let tuic = pty["tuic_session"].as_str().unwrap().to_owned();
    let run = |socket: PathBuf, phase: &'static str| {
        let python = python.clone();
        let tuic = tuic.clone();
        let root = s(&root);
        async move {
            let out = tokio::time::timeout(
                Duration::from_secs(120),
                tokio::process::Command::new(&python)
                    .arg(tuic_tests::clients_dir().join("mcp_python_worktrees.py"))
                    .arg(tuic_tests::bin("tuic-bridge"))
                    .args([phase, &root, "sdk/feature"])
                    .env_remove("TUIC_APP_INSTANCE")
                    .env("TUIC_SOCKET", &socket)
                    .env("TUIC_SESSION", &tuic)
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
            serde_json::from_str::<Value>(line).unwrap()
        }
    };
    let wt = root.with_file_name("repo__wt").join("sdk-feature");
    let first = run(node.socket.clone(), "create").await;
    assert!(first["tools"].as_array().unwrap().contains(&json!("repo")));
    assert_eq!(first["create"]["is_error"], false, "{first}");
    assert_eq!(first["create"]["value"]["worktree_path"], s(&wt));
    assert!(
        first["create"]["value"].get("cc_agent_hint").is_none(),
        "only Claude Code gets the hint"
    );
    assert_eq!(
        first["list"]["value"]["sdk/feature"]["lifecycle_status"]["removal_safety"], "safe",
        "{first}"
    );
    assert_eq!(first["declare"]["is_error"], false, "{first}");
    assert_eq!(first["declare"]["value"]["branch"], "sdk/feature");

    // After a restart GET /sessions shows the placement of the restored tab.
    let node = restart(node, cfg.path());
    shell_in(&node, &root, Some(&tuic)).await;
    let row = row_of(&node, &tuic).await;
    assert_eq!(row["worktree_path"], s(&wt), "{row}");
    assert_eq!(row["worktree_branch"], "sdk/feature");

    let second = run(node.socket.clone(), "remove").await;
    assert_eq!(second["lifecycle"]["is_error"], false, "{second}");
    assert_eq!(second["remove"]["is_error"], false, "{second}");
    assert_eq!(second["remove"]["value"]["ok"], true);
    assert_eq!(
        second["remove"]["value"]["branch_deleted"], true,
        "{second}"
    );
    assert!(
        second["list"]["value"].get("sdk/feature").is_none(),
        "{second}"
    );
    assert!(!wt.exists());
    // The deleted branch's tip is kept under its archive ref and restorable.
    let archived = git(&root, &["rev-parse", "refs/archive/sdk/feature"]);
    git(
        &root,
        &["branch", "sdk/feature", "refs/archive/sdk/feature"],
    );
    assert_eq!(git(&root, &["rev-parse", "sdk/feature"]), archived);
}

#[tokio::test]
async fn a_hub_addresses_a_node_repository_as_connection_colon_path() {
    let bed = tuic_tests::fed::FedBed::start(1).await.unwrap();
    let node = &bed.nodes[0];
    let (_d, root) = repo();
    let r = ipc(
        &node.proc().socket,
        "POST",
        "/repos",
        Some(json!({"path": s(&root)})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    let remote = format!("{}:{}", node.id, s(&root));
    // MCP on the hub: created and listed on the owner.
    let mcp = Mcp::start(&bed.hub.socket, None).await;
    let (err, v) = mcp
        .tool(
            "repo",
            json!({"action": "worktree_create", "path": remote, "branch": "via-hub"}),
        )
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["connection_id"], node.id.as_str());
    let wt = root.with_file_name("repo__wt").join("via-hub");
    assert_eq!(v["worktree_path"], s(&wt));
    assert!(wt.join("a.txt").is_file());
    let (err, l) = mcp
        .tool("repo", json!({"action": "worktree_list", "path": remote}))
        .await;
    assert!(!err, "{l}");
    assert_eq!(l["via-hub"]["kind"], "worktree");
    // POST /worktrees on the hub with the same address.
    let r = ipc(
        &bed.hub.socket,
        "POST",
        "/worktrees",
        Some(json!({"base_repo": remote, "branch": "via-hub-http"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        root.with_file_name("repo__wt")
            .join("via-hub-http")
            .is_dir()
    );
    // The owner's refusal keeps its code and names the connection; an unknown one is named.
    let (err, e) = mcp
        .tool(
            "repo",
            json!({"action": "worktree_create", "path": format!("{}:/definitely/not/registered", node.id), "branch": "x"}),
        )
        .await;
    assert!(err);
    assert_eq!(e["code"], "invalid_path", "{e}");
    assert_eq!(e["connection"], node.id.as_str());
    let (err, e) = mcp
        .tool(
            "repo",
            json!({"action": "worktree_list", "path": "nodez:/x"}),
        )
        .await;
    assert!(err);
    assert_eq!(e["code"], "unknown_connection", "{e}");
    // A declaration on the node reaches the hub's mirrored row.
    let pty = shell_in(node.proc(), &root, None).await;
    let tuic = pty["tuic_session"].as_str().unwrap();
    let bound = Mcp::start(&node.proc().socket, Some(tuic)).await;
    let (err, d) = bound
        .tool(
            "session",
            json!({"action": "declare_worktree", "worktree_path": s(&wt)}),
        )
        .await;
    assert!(!err, "{d}");
    let address = format!("{}/{}", node.id, pty["session_id"].as_str().unwrap());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let row = bed
            .wait_listed(&address, Duration::from_secs(10))
            .await
            .unwrap();
        if row["worktree_path"] == s(&wt) {
            assert_eq!(row["worktree_branch"], "via-hub");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "hub row never placed: {row}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Removal through the hub.
    let (err, v) = mcp
        .tool(
            "repo",
            json!({"action": "worktree_remove", "path": remote, "branch": "via-hub"}),
        )
        .await;
    assert!(!err, "{v}");
    assert!(!wt.exists());
}
