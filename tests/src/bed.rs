//! Shared end-to-end beds, so test files do not paste them: a password-protected node (or
//! hub) with remote access on loopback, a hub connected to such a node, the browser's login
//! form, a plain shell session, and the upstream MCP server packages the upstream tests share;
//! [`review`] the review tests' repository fixture and phone steps.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};

use crate::webdriver::Browser;
use crate::{NodeProc, run_with_stdin};

pub mod review;

/// The password the phone-sized browser beds log in with.
pub const PASSWORD: &str = "phone pass";

/// `binary` (`tuic-node` or `tuic-hub`) on a fresh config dir holding `config`, with
/// [`PASSWORD`] set and remote access on loopback, asked for `port`, with `extra` flags.
pub fn remote_proc(
    binary: &str,
    config: Value,
    port: &str,
    extra: &[&str],
) -> (tempfile::TempDir, NodeProc) {
    remote_proc_as(binary, config, PASSWORD, port, extra)
}

/// [`remote_proc`] with its own `password`.
pub fn remote_proc_as(
    binary: &str,
    config: Value,
    password: &str,
    port: &str,
    extra: &[&str],
) -> (tempfile::TempDir, NodeProc) {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("config.json"), config.to_string()).unwrap();
    let dir = d.path().to_str().unwrap().to_owned();
    let (code, _, err) =
        run_with_stdin(binary, &["set-password", "--config-dir", &dir], password).unwrap();
    assert_eq!(code, 0, "{err}");
    let p = start_remote(binary, &dir, port, extra);
    (d, p)
}

/// `binary` on the config dir `dir` with remote access on loopback, asked for `port`, with
/// `extra` flags (a restart on the same dir, or the start after [`remote_proc_as`]'s setup).
pub fn start_remote(binary: &str, dir: &str, port: &str, extra: &[&str]) -> NodeProc {
    let args: Vec<&str> = [
        "--config-dir",
        dir,
        "--remote-access",
        "--port",
        port,
        "--bind",
        "127.0.0.1",
    ]
    .iter()
    .chain(extra)
    .copied()
    .collect();
    NodeProc::start(binary, &args, &[]).unwrap()
}

/// A node with the file secret store, [`PASSWORD`] and remote access on loopback.
pub fn phone_node() -> (tempfile::TempDir, NodeProc) {
    phone_node_with(json!({"secret_store": "file"}))
}

/// [`phone_node`] with the whole config.json given.
pub fn phone_node_with(config: Value) -> (tempfile::TempDir, NodeProc) {
    remote_proc("tuic-node", config, "0", &[])
}

/// A hub (file secret store, [`PASSWORD`], remote access on loopback) connected to `node`
/// (config dir `node_dir`) as `id`, with the node's token.
pub fn hub_connected_to(
    node_dir: &Path,
    node: &NodeProc,
    id: &str,
) -> (tempfile::TempDir, NodeProc) {
    let (hd, hub) = remote_proc("tuic-hub", json!({"secret_store": "file"}), "0", &[]);
    connect_hub(hd.path(), node_dir, node, id);
    (hd, hub)
}

/// `tuic-hub connect` on the hub config dir `hub_dir`: `node` (config dir `node_dir`) as
/// `id`, with the node's token.
pub fn connect_hub(hub_dir: &Path, node_dir: &Path, node: &NodeProc, id: &str) {
    let (_, token, _) = run_with_stdin(
        "tuic-node",
        &["token", "--config-dir", node_dir.to_str().unwrap()],
        "",
    )
    .unwrap();
    let url = format!("http://{}", node.tcp.unwrap());
    let (code, _, err) = run_with_stdin(
        "tuic-hub",
        &[
            "connect",
            "--config-dir",
            hub_dir.to_str().unwrap(),
            "--id",
            id,
            "--url",
            &url,
            "--token-stdin",
        ],
        token.trim(),
    )
    .unwrap();
    assert_eq!(code, 0, "{err}");
}

/// Opens `url`, types `password` into the login form, submits, and waits until `until` (a
/// script expression) holds.
pub async fn login_via(b: &Browser, url: &str, password: &str, until: &str) {
    b.goto(url).await.unwrap();
    b.wait_for("!!document.getElementById('password')", 10_000)
        .await
        .unwrap();
    let pw = b.find("#password").await.unwrap();
    b.type_text(&pw, password).await.unwrap();
    b.click(&b.find("button[type=submit]").await.unwrap())
        .await
        .unwrap();
    b.wait_for(until, 10_000).await.unwrap();
}

/// Logs in with [`PASSWORD`] through the form and waits for the page `next` (`/mobile` or
/// `/`).
pub async fn login_to(b: &Browser, base: &str, next: &str) {
    let enc = if next == "/" { "%2F" } else { "%2Fmobile" };
    login_via(
        b,
        &format!("{base}/mobile/login?next={enc}"),
        PASSWORD,
        &format!("location.pathname === '{next}'"),
    )
    .await;
}

/// Logs in with [`PASSWORD`] and waits for `/mobile`.
pub async fn login(b: &Browser, base: &str) {
    login_to(b, base, "/mobile").await;
}

/// Creates a session on `node` with `body`; returns its id.
pub async fn create(node: &NodeProc, body: Value) -> String {
    let r = crate::ipc(&node.socket, "POST", "/sessions", Some(body))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    r.json()["session_id"].as_str().unwrap().to_owned()
}

/// A 24×80 `/bin/sh` session in `cwd` whose every typed byte from now on lands in `file` (the
/// shell `exec`s `cat > file`): an agent's terminal as a test reads it. Returns its id.
pub async fn recording_shell(node: &NodeProc, cwd: &Path, file: &Path) -> String {
    let id = create(
        node,
        json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": cwd.to_str().unwrap()}),
    )
    .await;
    let r = crate::ipc(
        &node.socket,
        "POST",
        &format!("/sessions/{id}/write"),
        Some(json!({"data": format!("exec cat > {}\r", file.display())})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    id
}

/// A 30×60 `/bin/sh` session on `node`; returns its id.
pub async fn create_shell(node: &NodeProc) -> String {
    create(node, json!({"rows": 30, "cols": 60, "shell": "/bin/sh"})).await
}

/// The node's visible screen rows of session `id` (`terminal/lines` over the bottom
/// `screen_lines` rows).
pub async fn screen_lines(socket: &Path, id: &str) -> Vec<String> {
    let info = crate::ipc(
        socket,
        "GET",
        &format!("/sessions/{id}/terminal/scroll-info"),
        None,
    )
    .await
    .unwrap()
    .json();
    let total = info["total_lines"].as_u64().unwrap();
    let rows = info["screen_lines"].as_u64().unwrap();
    let v = crate::ipc(
        socket,
        "GET",
        &format!(
            "/sessions/{id}/terminal/lines?start={}&end={total}",
            total - rows
        ),
        None,
    )
    .await
    .unwrap()
    .json();
    serde_json::from_value(v["lines"].clone()).unwrap()
}

/// One IPC request that must answer 200: its JSON (the status and body name a failure).
pub async fn ipc_ok(socket: &Path, method: &str, path: &str, body: Option<Value>) -> Value {
    let r = crate::ipc(socket, method, path, body).await.unwrap();
    assert_eq!(
        r.status,
        200,
        "{method} {path}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r.json()
}

/// Follows a session's text stream on `socket` from its first byte until `needle` shows
/// (bounded, 20 s): no polling sleeps. `address` may name another host's session
/// (`conn/id`, relayed by a hub); its `/` is encoded.
pub async fn await_output(socket: &Path, address: &str, needle: &str) {
    use futures::StreamExt;
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let enc = address.replace('/', "%2F");
    let (mut ws, _) = tokio_tungstenite::client_async(
        format!("ws://localhost/sessions/{enc}/stream?format=text&from_byte=0"),
        stream,
    )
    .await
    .unwrap();
    let mut seen = String::new();
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while let Some(Ok(m)) = ws.next().await {
            if let Ok(t) = m.to_text()
                && let Ok(v) = serde_json::from_str::<Value>(t)
                && let Some(d) = v["data"].as_str()
            {
                seen.push_str(d);
                if seen.contains(needle) {
                    return;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{needle:?} never appeared; saw {seen:?}"));
}

/// `@modelcontextprotocol/server-everything`, installed once from the npm registry into a
/// cache under `target/` (shared by every upstream test).
pub fn npm_everything() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/upstream-npm");
    let entry = target.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !entry.exists() {
        std::fs::create_dir_all(&target).unwrap();
        let ok = std::process::Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                target.to_str().unwrap(),
                "@modelcontextprotocol/server-everything@2026.8.31",
            ])
            .stdout(Stdio::null())
            .status()
            .expect("running npm");
        assert!(ok.success(), "npm install server-everything failed");
    }
    entry
}

/// A loopback TCP port free at the moment of the call.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `git -C dir args` as a fixed test identity and returns its stdout; panics with git's
/// stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
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
    String::from_utf8_lossy(&o.stdout).into_owned()
}
