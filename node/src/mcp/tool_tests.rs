//! Service tests of the `session` and `repo` tools on the real registries: real PTYs (`/bin/sh`
//! in a temporary directory), real repository store, dispatched through the tool registry the
//! transport uses (blocking actions on the blocking pool, as in production).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::logs::LogRing;
use crate::mcp::registry::{CallCtx, ToolError};
use crate::paths::{LocationEnv, Paths};
use crate::state::{Node, RunOverrides};

/// A node on a temporary config dir; its sessions are closed on drop.
pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) node: Arc<Node>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for r in self.node.sessions.rows() {
            if let Some(s) = self.node.sessions.live(&r.session_id) {
                s.close();
            }
        }
    }
}

pub(crate) fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        json!({"secret_store": "file"}).to_string(),
    )
    .unwrap();
    let paths = Paths::resolve(Some(dir.path()), None, &LocationEnv::default()).unwrap();
    let node = Node::open(
        "tuic-node",
        paths,
        RunOverrides::default(),
        LogRing::default(),
    )
    .unwrap();
    Fixture { dir, node }
}

fn local() -> CallCtx {
    CallCtx {
        loopback: true,
        ..Default::default()
    }
}

async fn tool(f: &Fixture, ctx: &CallCtx, name: &str, args: Value) -> Result<Value, ToolError> {
    let args: Map<String, Value> = args.as_object().unwrap().clone();
    f.node
        .mcp
        .registry
        .call(&f.node, ctx, name, args)
        .await
        .unwrap()
        .0
        .map(crate::mcp::registry::Answer::into_value)
}

async fn ok(f: &Fixture, name: &str, args: Value) -> Value {
    tool(f, &local(), name, args.clone())
        .await
        .unwrap_or_else(|e| panic!("{name} {args}: {}", e.to_json()))
}

async fn shell(f: &Fixture) -> Value {
    ok(
        f,
        "session",
        json!({"action": "create", "shell": "/bin/sh", "cwd": f.dir.path(), "rows": 24, "cols": 80}),
    )
    .await
}

/// Bounded polling of a condition on the session's clean output.
async fn until_output(f: &Fixture, id: &str, needle: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = ok(f, "session", json!({"action": "output", "session_id": id})).await;
        if v["data"].as_str().unwrap().contains(needle) {
            return v;
        }
        assert!(Instant::now() < deadline, "no {needle:?} in {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_idle(f: &Fixture, id: &str) {
    let w = ok(
        f,
        "session",
        json!({"action": "wait", "session_id": id, "until": "idle", "timeout_ms": 10_000}),
    )
    .await;
    assert_eq!(w["reached"], true, "{w}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_lifecycle_on_the_real_registry() {
    let f = fixture();
    let c = shell(&f).await;
    let id = c["session_id"].as_str().unwrap().to_owned();
    let tuic = c["tuic_session"].as_str().unwrap().to_owned();
    let alias = c["alias"].as_str().unwrap().to_owned();

    // list: one row, is_caller only for the bound caller.
    let l = ok(&f, "session", json!({"action": "list"})).await;
    assert_eq!(l["count"], 1);
    assert_eq!(l["sessions"][0]["session_id"], id.as_str());
    assert_eq!(l["sessions"][0]["is_caller"], false);
    assert!(l["sessions"][0].get("child_pid").is_none());
    let bound = CallCtx {
        loopback: true,
        tuic_session: Some(tuic.clone()),
        ..Default::default()
    };
    let l = tool(&f, &bound, "session", json!({"action": "list"}))
        .await
        .unwrap();
    assert_eq!(l["sessions"][0]["is_caller"], true);

    // input (raw pair write) then output by alias, in both formats.
    ok(
        &f,
        "session",
        json!({"action": "input", "session_id": alias, "input": "echo mcp-$((40+2))", "special_key": "enter"}),
    )
    .await;
    let out = until_output(&f, &id, "mcp-42").await;
    for k in [
        "cursor",
        "start_offset",
        "oldest_offset",
        "has_more",
        "truncated",
    ] {
        assert!(out.get(k).is_some(), "{k} missing in {out}");
    }
    let raw = ok(
        &f,
        "session",
        json!({"action": "output", "session_id": id, "format": "raw", "from_byte": 0}),
    )
    .await;
    assert!(raw["data"].as_str().unwrap().contains("mcp-42"), "{raw}");
    assert_eq!(raw["start_offset"], 0);

    // status, rename, resize.
    let st = ok(
        &f,
        "session",
        json!({"action": "status", "session_id": tuic}),
    )
    .await;
    assert_eq!(st["session_id"], id.as_str());
    assert_eq!(st["turn_epoch"], 0);
    ok(
        &f,
        "session",
        json!({"action": "rename", "session_id": id, "name": "build box"}),
    )
    .await;
    let st = ok(&f, "session", json!({"action": "status", "session_id": id})).await;
    assert_eq!(st["display_name"], "build box");
    ok(
        &f,
        "session",
        json!({"action": "resize", "session_id": id, "rows": 30, "cols": 100}),
    )
    .await;
    let e = tool(
        &f,
        &local(),
        "session",
        json!({"action": "resize", "session_id": id, "rows": 0, "cols": 100}),
    )
    .await
    .unwrap_err();
    // Sizes are checked by `session::budget` on every resize path, with its own code.
    assert_eq!(e.code, "size_limit");

    // submit to an idle shell: a receipt, epoch advanced once.
    wait_idle(&f, &id).await;
    let r = ok(
        &f,
        "session",
        json!({"action": "submit", "session_id": id, "input": "echo sub-$((1+1))", "pty_description": "build the thing"}),
    )
    .await;
    assert_eq!(r["ack"], "output", "{r}");
    assert_eq!(r["ok"], true);
    assert_eq!(r["retry_safe"], false);
    assert_eq!(r["turn_epoch"], 1);
    assert!(r["ack_ms"].as_u64().unwrap() <= 3000);
    until_output(&f, &id, "sub-2").await;
    let st = ok(&f, "session", json!({"action": "status", "session_id": id})).await;
    assert_eq!(st["pty_description"], "build the thing");

    // Half-typed composer: refused before the first byte.
    wait_idle(&f, &id).await;
    ok(
        &f,
        "session",
        json!({"action": "input", "session_id": id, "input": "ech"}),
    )
    .await;
    let e = tool(
        &f,
        &local(),
        "session",
        json!({"action": "submit", "session_id": id, "input": "ls"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "busy", "{}", e.to_json());
    assert_eq!(e.extra["retry_safe"], true);
    assert_eq!(e.extra["turn_epoch"], 1);
    ok(
        &f,
        "session",
        json!({"action": "input", "session_id": id, "special_key": "ctrl-u"}),
    )
    .await;

    // A foreground job makes the shell busy: refused too.
    wait_idle(&f, &id).await;
    ok(
        &f,
        "session",
        json!({"action": "input", "session_id": id, "input": "sleep 30", "special_key": "enter"}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let e = tool(
            &f,
            &local(),
            "session",
            json!({"action": "submit", "session_id": id, "input": "ls"}),
        )
        .await;
        match e {
            Err(e)
                if e.code == "busy"
                    && e.extra["reason"].as_str().unwrap().contains("foreground") =>
            {
                break;
            }
            Err(e) if e.code == "busy" => {}
            other => panic!("submit to a busy shell: {other:?}"),
        }
        assert!(Instant::now() < deadline, "never saw the foreground job");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // pause/resume signal the foreground group; ctrl-c ends the job.
    ok(&f, "session", json!({"action": "pause", "session_id": id})).await;
    ok(&f, "session", json!({"action": "resume", "session_id": id})).await;
    ok(
        &f,
        "session",
        json!({"action": "input", "session_id": id, "special_key": "ctrl-c"}),
    )
    .await;

    // Backends a headless node lacks: precise errors.
    let e = tool(
        &f,
        &local(),
        "session",
        json!({"action": "keep_open", "session_id": id, "enabled": true}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "user_session");
    let e = tool(
        &f,
        &bound,
        "session",
        json!({"action": "suspend", "session_id": id}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "cannot_suspend");
    assert!(
        e.message
            .starts_with("Cannot suspend: a session cannot suspend itself"),
        "{}",
        e.message
    );
    let e = tool(
        &f,
        &local(),
        "session",
        json!({"action": "declare_worktree", "worktree_path": "/x"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "not_bound");

    // close ends it; wait until=exited; the tombstone still answers output and status.
    let cl = ok(&f, "session", json!({"action": "close", "session_id": id})).await;
    assert_eq!(cl["was_running"], true);
    let w = ok(
        &f,
        "session",
        json!({"action": "wait", "session_id": id, "until": "exited", "timeout_ms": 10_000}),
    )
    .await;
    assert_eq!(w["reached"], true, "{w}");
    assert_eq!(w["exited"], true);
    let out = ok(&f, "session", json!({"action": "output", "session_id": id})).await;
    assert_eq!(out["exited"], true);
    let e = tool(
        &f,
        &local(),
        "session",
        json!({"action": "input", "session_id": id, "input": "x"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "session_exited");
    let e = tool(
        &f,
        &local(),
        "session",
        json!({"action": "submit", "session_id": id, "input": "x"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "session_exited");
    assert_eq!(
        ok(&f, "session", json!({"action": "list"})).await["count"],
        0
    );
    let e = tool(
        &f,
        &local(),
        "session",
        json!({"action": "status", "session_id": "nope"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "unknown_session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaper_keeps_an_identity_that_owns_a_live_pty() {
    let f = fixture();
    let c = shell(&f).await;
    let tuic = c["tuic_session"].as_str().unwrap().to_owned();
    let other = uuid::Uuid::new_v4().to_string();
    let now = Instant::now();
    let t = &f.node.mcp.sessions;
    let (a, _) = t.initialize(None, now, "2025-11-25", None);
    let (b, _) = t.initialize(None, now, "2025-11-25", None);
    t.bind_identity(&a, &tuic, now, Duration::ZERO);
    t.bind_identity(&b, &other, now, Duration::ZERO);
    let liveness = f.node.mcp.liveness.read().unwrap().clone();
    let sweep = t.reap(
        now + Duration::from_secs(7200),
        Duration::from_secs(3600),
        liveness.as_ref(),
    );
    assert_eq!(sweep.reaped.len(), 2);
    assert_eq!(sweep.kept, vec![tuic.clone()]);
    assert_eq!(sweep.retired, vec![other.clone()]);
    assert!(liveness.is_addressable(&tuic));
    assert!(!liveness.is_addressable(&other));
    // Once the PTY is gone, the identity is no longer addressable.
    ok(
        &f,
        "session",
        json!({"action": "close", "session_id": tuic}),
    )
    .await;
    ok(&f, "session", json!({"action": "wait", "session_id": c["session_id"], "until": "exited", "timeout_ms": 10_000})).await;
    assert!(!liveness.is_addressable(&tuic));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repo_add_list_status_active_on_the_registry() {
    let f = fixture();
    let root = tempfile::tempdir().unwrap();
    let path = root.path().canonicalize().unwrap();
    let mut bus = f.node.bus.subscribe();
    let a = ok(&f, "repo", json!({"action": "add", "path": path})).await;
    assert_eq!(a["created"], true);
    assert_eq!(a["repo"]["kind"], "shell");
    assert_eq!(a["repo"]["path"], path.to_str().unwrap());
    let ev = tokio::time::timeout(Duration::from_secs(5), bus.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(format!("{:?}", ev.event).contains("RepositoriesChanged"));
    // Repeat: the existing record is kept.
    let again = ok(&f, "repo", json!({"action": "add", "path": path})).await;
    assert_eq!(again["created"], false);
    assert_eq!(again["repo"]["added_ms"], a["repo"]["added_ms"]);
    let l = ok(&f, "repo", json!({"action": "list"})).await;
    assert_eq!(l["repos"].as_array().unwrap().len(), 1);
    // Same service as GET /repos.
    assert_eq!(json!(f.node.repos.list().unwrap()), l["repos"]);

    let e = tool(
        &f,
        &local(),
        "repo",
        json!({"action": "add", "path": "relative/dir"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "invalid_path");
    let e = tool(
        &f,
        &local(),
        "repo",
        json!({"action": "add", "path": "/definitely/not/here"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "invalid_path");
    let e = tool(
        &f,
        &local(),
        "repo",
        json!({"action": "status", "path": "/tmp/nope-not-registered"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "unknown_repository");
    let e = tool(
        &f,
        &local(),
        "repo",
        json!({"action": "worktree_list", "path": path}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "not_git", "a shell workspace has no worktrees");

    // status and active see a session started inside the repository.
    let c = ok(
        &f,
        "session",
        json!({"action": "create", "shell": "/bin/sh", "cwd": path}),
    )
    .await;
    let st = ok(&f, "repo", json!({"action": "status", "path": path})).await;
    assert_eq!(st["sessions"][0]["session_id"], c["session_id"]);
    let e = tool(&f, &local(), "repo", json!({"action": "active"}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "not_bound");
    let bound = CallCtx {
        loopback: true,
        tuic_session: c["tuic_session"].as_str().map(str::to_owned),
        ..Default::default()
    };
    let act = tool(&f, &bound, "repo", json!({"action": "active"}))
        .await
        .unwrap();
    assert_eq!(act["repo"]["path"], path.to_str().unwrap());
}

/// Every `<tool> action=<a>` the server instructions tell an agent to use is answered by a
/// backend: none of them is `not_available`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instructions_promise_no_action_that_answers_not_available() {
    let f = fixture();
    let text = crate::mcp::instructions::render(&Default::default(), false);
    let words: Vec<&str> = text.split_whitespace().collect();
    let clean = |w: &str| {
        w.trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .to_owned()
    };
    let mut promised = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if let Some(a) = w.strip_prefix("action=")
            && i > 0
        {
            let tool = clean(words[i - 1]);
            promised.push((tool.clone(), clean(a)));
            let mut j = i + 1;
            while j + 1 < words.len() && words[j] == "/" {
                promised.push((tool.clone(), clean(words[j + 1])));
                j += 2;
            }
        }
    }
    assert!(
        promised.contains(&("repo".into(), "worktree_remove".into())),
        "{promised:?}"
    );
    for (tool_name, a) in promised {
        let r = tool(&f, &local(), &tool_name, json!({"action": a})).await;
        if let Err(e) = r {
            assert_ne!(
                e.code, "not_available",
                "{tool_name} action={a}: {}",
                e.message
            );
        }
    }
}

/// `session action=suspend` (spec): refused with no UI attached; with one, the request goes out
/// as `session-suspend-requested` and the call returns the tab's verdict — a refusal with its
/// reason, `{ok: true}`, or "no tab answered" when the window closes; nothing stays open.
#[tokio::test]
async fn suspend_asks_an_attached_ui_and_returns_its_verdict() {
    let f = fixture();
    let c = shell(&f).await;
    let id = c["session_id"].as_str().unwrap().to_owned();
    wait_idle(&f, &id).await;
    let suspend = json!({"action": "suspend", "session_id": id});
    let e = tool(&f, &local(), "session", suspend.clone())
        .await
        .unwrap_err();
    assert_eq!(e.code, "cannot_suspend");
    assert!(e.message.contains("no UI is attached"), "{}", e.message);
    // Not for callers from another machine (spec: localhost clients only).
    let e = tool(&f, &CallCtx::default(), "session", suspend.clone())
        .await
        .unwrap_err();
    assert_eq!(e.code, "loopback_only", "{}", e.message);

    let ui = f.node.bus.ui_attach();
    let mut events = f.node.bus.subscribe();
    let answer_next = |verdict: Result<(), String>| {
        let node = f.node.clone();
        let mut events = events.resubscribe();
        async move {
            let rid = loop {
                let ev = events.recv().await.unwrap();
                if let tuic_proto::events::Event::SessionSuspendRequested { request_id, .. } =
                    &ev.event
                {
                    break request_id.clone();
                }
            };
            let tx = node.mcp.suspends.lock().unwrap().remove(&rid).unwrap();
            tx.send(verdict).unwrap();
        }
    };
    let tab = tokio::spawn(answer_next(Err("the user keeps this one".into())));
    let e = tool(&f, &local(), "session", suspend.clone())
        .await
        .unwrap_err();
    tab.await.unwrap();
    assert_eq!(e.message, "Cannot suspend: the user keeps this one");
    let tab = tokio::spawn(answer_next(Ok(())));
    let v = tool(&f, &local(), "session", suspend.clone())
        .await
        .unwrap();
    tab.await.unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["session_id"], id.as_str());
    // The request event names the session.
    let ev = loop {
        let ev = events.recv().await.unwrap();
        if ev.event.name() == "session-suspend-requested" {
            break ev.event.payload();
        }
    };
    assert_eq!(ev["session_id"], id.as_str());

    // Nobody answers: refused when the window closes, and the table is empty again.
    let mut cfg = (*f.node.config()).clone();
    cfg.tuning.mcp_suspend_timeout_ms = 100;
    f.node.set_config(cfg);
    let e = tool(&f, &local(), "session", suspend.clone())
        .await
        .unwrap_err();
    assert!(
        e.message
            .starts_with("Cannot suspend: no tab answered within"),
        "{}",
        e.message
    );
    assert!(f.node.mcp.suspends.lock().unwrap().is_empty());
    drop(ui);
    assert_eq!(f.node.bus.uis_attached(), 0);
}

/// Typed arguments (`crate::args`): a field of the wrong type is refused with the field named,
/// before anything runs, in the words the hand-written readers used; only the called action's
/// own fields are read.
#[tokio::test]
async fn typed_arguments_refuse_a_wrong_type_by_name() {
    let f = fixture();
    let s = shell(&f).await;
    let id = s["session_id"].as_str().unwrap().to_owned();
    let cases = [
        (
            "session",
            json!({"action": "output", "session_id": id, "limit": "10"}),
            "limit must be a non-negative integer",
        ),
        (
            "session",
            json!({"action": "resize", "session_id": id, "rows": 70000, "cols": 80}),
            "rows is too large",
        ),
        (
            "session",
            json!({"action": "status", "session_id": 7}),
            "session_id must be a string",
        ),
        (
            "session",
            json!({"action": "keep_open", "session_id": id, "enabled": "yes"}),
            "enabled (boolean) is required",
        ),
        (
            "session",
            json!({"action": "input", "session_id": id, "input": 3}),
            "input must be a string",
        ),
        (
            "repo",
            json!({"action": "worktree_remove", "path": f.dir.path(), "branch": "b", "force": "yes"}),
            "force must be a boolean",
        ),
        (
            "agent",
            json!({"action": "list_peers", "path": 1}),
            "path must be a string",
        ),
        (
            "ui",
            json!({"action": "toast", "message": "m", "title": 5}),
            "title must be a string",
        ),
        (
            "task",
            json!({"action": "get", "task_id": 5}),
            "task_id must be a string",
        ),
        (
            "task",
            json!({"action": "cancel"}),
            "task: task_id is required",
        ),
        (
            "remote",
            json!({"action": "status", "connection_id": false}),
            "connection_id must be a string",
        ),
        (
            "story",
            json!({"input": {"action": "list"}, "project_path": 3}),
            "project_path must be a string",
        ),
        (
            "repo",
            json!({"action": "status", "path": 5}),
            "path must be a string",
        ),
        (
            "repo",
            json!({"action": "diff_summary", "path": f.dir.path(), "limit": -1}),
            "limit must be a non-negative integer",
        ),
        (
            "repo",
            json!({"action": "diff_file", "path": f.dir.path(), "file": "a", "uncommitted": "yes"}),
            "uncommitted must be a boolean",
        ),
        (
            "repo",
            json!({"action": "diff_file", "path": f.dir.path(), "branch": ["b"]}),
            "branch must be a string",
        ),
        (
            "ui",
            json!({"action": "tab", "url": "https://example.com", "focus": "no"}),
            "focus must be a boolean",
        ),
        (
            "ui",
            json!({"action": "tab", "url": 1}),
            "url must be a string",
        ),
        (
            "secret",
            json!({"action": "run", "name": "T", "command": 5}),
            "secret action=run: command must be a string or an array of strings",
        ),
        (
            "secret",
            json!({"action": "run", "name": "T", "command": ["ls", 1]}),
            "secret action=run: command must be a string or an array of strings",
        ),
        (
            "secret",
            json!({"action": "run", "name": "T", "command": "ls", "timeout_ms": "9"}),
            "secret action=run: timeout_ms must be a non-negative integer",
        ),
        (
            "secret",
            json!({"action": "run", "name": "T", "command": "ls", "reason": "r"}),
            "secret action=run: unknown field `reason`, expected one of `name`, `command`, `cwd`, `timeout_ms`",
        ),
        (
            "secret",
            json!({"action": "remove"}),
            "secret action=remove: missing field `name`",
        ),
        (
            "secret",
            json!({"action": "request", "name": 7}),
            "secret action=request: name must be a string",
        ),
        (
            "search_tools",
            json!({"query": "x", "limit": 0}),
            "limit must be an integer 1..=100",
        ),
        (
            "search_tools",
            json!({"query": 3}),
            "query must be a string",
        ),
        ("get_tool_schema", json!({}), "name is required"),
        (
            "call_tool",
            json!({"name": "voice", "arguments": [1]}),
            "arguments must be an object",
        ),
    ];
    for (name, args, want) in cases {
        let e = tool(&f, &local(), name, args.clone()).await.unwrap_err();
        assert_eq!(e.code, "invalid_arguments", "{args}");
        assert_eq!(e.message, want, "{args}");
    }
    // Another action's field is not read: `status` ignores a bad `limit`.
    let v = ok(
        &f,
        "session",
        json!({"action": "status", "session_id": id, "limit": "x"}),
    )
    .await;
    assert_eq!(v["session_id"], json!(id));
}
