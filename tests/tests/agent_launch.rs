//! Spawn launch semantics end to end, through `POST /sessions/agent` and `POST /sessions
//! {config}` on a real `tuic-node`: scripted agents named `claude` and `codex` print the argv
//! and environment they received, then draw their release's real trust screen
//! (`node/src/mail/fixtures/`) unless launched trusted, and reach a ready prompt once past it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::{NodeProc, config_dir, ipc};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../node/src/mail/fixtures")
        .join(name)
}

/// A scripted agent: prints `ARG[...]` per argument and the variables the tests look at, then
/// (unless one of its arguments is Codex's trust override for `$PWD`) draws `$SCREEN` with
/// `{cwd}` filled in and waits for one line. An answer clears the screen and the agent shows
/// its ready prompt, echoing each line it gets.
const AGENT: &str = r#"#!/bin/sh
for a in "$@"; do printf 'ARG[%s]\n' "$a"; done
printf 'TMPDIR[%s]\n' "$CLAUDE_CODE_TMPDIR"
printf 'FOO[%s]\n' "$FOO"
trusted=no
for a in "$@"; do
  [ "$a" = "projects.\"$PWD\".trust_level=\"trusted\"" ] && trusted=yes
done
if [ "$trusted" = no ] && [ -n "$SCREEN" ]; then
  sed "s|{cwd}|$PWD|" "$SCREEN"
  IFS= read -r answer
  printf '\033[2J\033[H'
  echo "ANSWERED[$answer]"
fi
while true; do printf '> '; IFS= read -r line || exit 0; echo "got: $line"; done
"#;

/// Writes the scripted agent as `<dir>/<name>` (its name is how TUIC recognises it).
fn agent(dir: &Path, name: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, AGENT).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p.display().to_string()
}

/// A fresh repository (nothing trusted it before).
fn fresh_repo() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().canonicalize().unwrap();
    let ok = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&root)
        .status()
        .unwrap();
    assert!(ok.success());
    (t, root)
}

struct Bed {
    _cfg: tempfile::TempDir,
    home: tempfile::TempDir,
    node: NodeProc,
}

fn start(config: Value) -> Bed {
    let cfg = config_dir(config);
    let home = tempfile::tempdir().unwrap();
    let node = NodeProc::start(
        "tuic-node",
        &["--config-dir", cfg.path().to_str().unwrap()],
        &[("HOME", home.path().to_str().unwrap())],
    )
    .unwrap();
    Bed {
        _cfg: cfg,
        home,
        node,
    }
}

async fn post(node: &NodeProc, uri: &str, body: Value) -> (u16, Value) {
    let r = ipc(&node.socket, "POST", uri, Some(body)).await.unwrap();
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

async fn launch(node: &NodeProc, body: Value) -> Value {
    let (status, v) = post(node, "/sessions/agent", body).await;
    assert_eq!(status, 200, "{v}");
    v
}

/// The session's log lines and screen, as one text.
async fn text(node: &NodeProc, sid: &str) -> String {
    let r = ipc(
        &node.socket,
        "GET",
        &format!("/sessions/{sid}/output?format=log"),
        None,
    )
    .await
    .unwrap();
    let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    let part = |k: &str| {
        v[k].as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|l| l.as_str().map(str::to_owned))
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!("{}\n{SCREEN_MARK}\n{}", part("lines"), part("screen"))
}

/// Separates the committed log lines from the screen in [`text`].
const SCREEN_MARK: &str = "--- screen ---";

/// The agent shows its ready prompt (a bare `>` row; rows are right-trimmed).
fn at_prompt(t: &str) -> bool {
    t.lines().any(|l| l.trim_end() == ">")
}

async fn until(node: &NodeProc, sid: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let t = text(node, sid).await;
        if pred(&t) {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `ARG[...]` lines of the committed log (each once).
fn args_of(t: &str) -> Vec<String> {
    t.lines()
        .take_while(|l| *l != SCREEN_MARK)
        .filter_map(|l| l.strip_prefix("ARG[").and_then(|r| r.strip_suffix(']')))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn claude_child_on_a_fresh_repository_is_past_its_trust_screen_without_a_person() {
    let bed = start(json!({}));
    let (_t, repo) = fresh_repo();
    let bin = tempfile::tempdir().unwrap();
    let claude = agent(bin.path(), "claude");
    let v = launch(
        &bed.node,
        json!({
            "command": claude,
            "cwd": repo,
            "prompt": "fix the build",
            "model": "sonnet",
            "env": {"SCREEN": fixture("claude_trust_2.1.197.txt"), "FOO": "{prompt}"}
        }),
    )
    .await;
    let sid = v["session_id"].as_str().unwrap();
    assert!(v.get("launch_warning").is_none(), "{v}");
    let t = until(&bed.node, sid, "the ready prompt after the answer", |t| {
        t.contains("ANSWERED[]")
    })
    .await;
    // The answer was one Enter; the prompt was the final positional argument after the
    // composed model; `{prompt}` in an env value stayed as written.
    let argv = args_of(&t);
    assert_eq!(
        argv,
        [
            "--dangerously-load-development-channels",
            "server:tuicommander",
            "--model",
            "sonnet",
            "fix the build"
        ],
        "{t}"
    );
    assert!(t.contains("FOO[{prompt}]"), "{t}");
    // CLAUDE_CODE_TMPDIR defaulted under the node's home and exists.
    let tmp = bed.home.path().join("Gits/.tmp/claude/");
    assert!(t.contains(&format!("TMPDIR[{}]", tmp.display())), "{t}");
    assert!(tmp.is_dir());
    // Past the trust screen the agent is at its prompt and takes input.
    post(
        &bed.node,
        &format!("/sessions/{sid}/write"),
        json!({"data": "hello\r"}),
    )
    .await;
    until(&bed.node, sid, "the echo", |t| t.contains("got: hello")).await;
}

#[tokio::test]
async fn a_different_question_on_the_same_dialog_is_never_answered() {
    let bed = start(json!({}));
    let (_t, repo) = fresh_repo();
    let bin = tempfile::tempdir().unwrap();
    let claude = agent(bin.path(), "claude");
    let v = launch(
        &bed.node,
        json!({
            "command": claude,
            "cwd": repo,
            "env": {"SCREEN": fixture("claude_managed_settings_2.1.197.txt"), "CLAUDE_CODE_TMPDIR": "/tmp/explicit"}
        }),
    )
    .await;
    let sid = v["session_id"].as_str().unwrap();
    let t = until(&bed.node, sid, "the managed-settings question", |t| {
        t.contains("2. No, exit Claude Code")
    })
    .await;
    // An explicit caller value is kept (and nothing is created under the home).
    assert!(t.contains("TMPDIR[/tmp/explicit]"), "{t}");
    assert!(!bed.home.path().join("Gits").exists());
    // Absence needs a window: several monitor ticks and output edges.
    let until_t = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until_t {
        let t = text(&bed.node, sid).await;
        assert!(
            !t.contains("ANSWERED["),
            "answered a different question:\n{t}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn codex_child_is_launched_trusted_and_gets_its_prompt_typed_after_the_ready_prompt() {
    let bed = start(json!({}));
    let (_t, repo) = fresh_repo();
    let bin = tempfile::tempdir().unwrap();
    let codex = agent(bin.path(), "codex");
    let v = launch(
        &bed.node,
        json!({
            "command": codex,
            "cwd": repo,
            "prompt": "write tests",
            "env": {"SCREEN": fixture("codex_trust_directory.txt")}
        }),
    )
    .await;
    assert_eq!(v["prompt_delivery"], "deferred_pty", "{v}");
    let sid = v["session_id"].as_str().unwrap();
    // The executable itself selects Codex's parser state (no agent_type was given).
    let row = ipc(&bed.node.socket, "GET", &format!("/sessions/{sid}"), None)
        .await
        .unwrap()
        .json();
    assert_eq!(row["agent_type"], "codex", "{row}");
    let t = until(&bed.node, sid, "the deferred prompt", |t| {
        t.contains("got: write tests")
    })
    .await;
    assert!(
        !t.contains("Do you trust the contents"),
        "trust screen shown:\n{t}"
    );
    assert_eq!(
        args_of(&t),
        [
            "-c".to_owned(),
            format!("projects.\"{}\".trust_level=\"trusted\"", repo.display())
        ],
        "{t}"
    );
}

#[tokio::test]
async fn run_configurations_select_compose_and_refuse() {
    let bin = tempfile::tempdir().unwrap();
    let codex = agent(&bin.path().join("a"), "codex");
    let wrapper = agent(&bin.path().join("b"), "cx-wrapper");
    let bed = start(json!({"agents": {"run_configs": [
        {"name": "yolo", "command": codex, "args": ["--full-auto", "{prompt}"], "model": "o3", "default": true,
         "env": {"FOO": "from-config"}},
        {"name": "pinned", "command": codex, "args": ["--model", "gpt-5"]},
        {"name": "wrapped", "agent": "codex", "command": wrapper}
    ]}}));
    let (_t, repo) = fresh_repo();
    let node = &bed.node;

    // The literal `codex` selects the default configuration: its argv, model and env; the
    // prompt substituted where authored (never deferred); the trust override first.
    let v = launch(
        node,
        json!({"command": "codex", "cwd": repo, "prompt": "ship it"}),
    )
    .await;
    assert_eq!(v["run_config"], "yolo", "{v}");
    assert!(v.get("prompt_delivery").is_none(), "{v}");
    let sid = v["session_id"].as_str().unwrap();
    let t = until(node, sid, "the prompt", at_prompt).await;
    assert_eq!(
        args_of(&t),
        [
            "-c".to_owned(),
            format!("projects.\"{}\".trust_level=\"trusted\"", repo.display()),
            "--model".into(),
            "o3".into(),
            "--full-auto".into(),
            "ship it".into()
        ],
        "{t}"
    );
    assert!(t.contains("FOO[from-config]"), "{t}");
    // A caller's env value overrides the configuration's; the model parameter its default.
    let v = launch(
        node,
        json!({"run_config": "yolo", "cwd": repo, "model": "o4", "env": {"FOO": "caller"}}),
    )
    .await;
    let t = until(node, v["session_id"].as_str().unwrap(), "the prompt", |t| {
        at_prompt(t)
    })
    .await;
    assert!(t.contains("ARG[o4]") && !t.contains("ARG[o3]"), "{t}");
    assert!(t.contains("FOO[caller]"), "{t}");

    // A wrapper: the override is forwarded, and the answer warns that TUIC cannot check it.
    let v = launch(node, json!({"run_config": "wrapped", "cwd": repo})).await;
    let w = v["launch_warning"].as_str().unwrap_or_default();
    assert!(w.contains("wrapper") && w.contains("cx-wrapper"), "{v}");

    // Refusals: both models, an unknown configuration, unknown fields — nothing started.
    let before = ipc(&node.socket, "GET", "/sessions", None)
        .await
        .unwrap()
        .json()
        .as_array()
        .unwrap()
        .len();
    let (s, e) = post(
        node,
        "/sessions/agent",
        json!({"run_config": "pinned", "model": "o3", "cwd": repo}),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(e["code"], "model_conflict");
    let m = e["error"].as_str().unwrap();
    assert!(m.contains("o3") && m.contains("--model"), "{m}");
    let (s, e) = post(node, "/sessions/agent", json!({"run_config": "nope"})).await;
    assert_eq!(s, 400);
    assert_eq!(e["code"], "unknown_run_config");
    let m = e["error"].as_str().unwrap();
    for name in ["yolo", "pinned", "wrapped"] {
        assert!(m.contains(name), "{m}");
    }
    let (s, e) = post(
        node,
        "/sessions/agent",
        json!({"command": codex, "allow_alt_screen": true}),
    )
    .await;
    assert_eq!(s, 422, "{e}");
    let (s, e) = post(node, "/sessions/agent", json!({"cwd": repo})).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["code"], "invalid_arguments");
    let after = ipc(&node.socket, "GET", "/sessions", None)
        .await
        .unwrap()
        .json()
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after);
}

#[tokio::test]
async fn post_sessions_takes_the_desktop_config_shape_and_the_flat_body() {
    let bed = start(json!({}));
    let node = &bed.node;
    let (s, flat) = post(node, "/sessions", json!({"shell": "/bin/sh", "rows": 30})).await;
    assert_eq!(s, 200, "{flat}");
    let (s, wrapped) = post(
        node,
        "/sessions",
        json!({"config": {"shell": "/bin/sh", "rows": 30, "name": "from config"}}),
    )
    .await;
    assert_eq!(s, 200, "{wrapped}");
    let sid = wrapped["session_id"].as_str().unwrap();
    let row = ipc(&node.socket, "GET", &format!("/sessions/{sid}"), None)
        .await
        .unwrap()
        .json();
    assert_eq!(row["display_name"], "from config", "{row}");
    for (body, status) in [
        (json!({"config": {"shell": "/bin/sh"}, "rows": 30}), 400),
        (json!({"config": {"shell": "/bin/sh", "bogus": 1}}), 422),
        (json!({"config": "sh"}), 422),
        (json!({"bogus": 1}), 422),
    ] {
        let (s, e) = post(node, "/sessions", body.clone()).await;
        assert_eq!(s, status, "{body}: {e}");
    }
}
