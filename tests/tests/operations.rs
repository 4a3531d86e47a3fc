//! Running a node as a machine's service, through the real binaries: the systemd unit that
//! `install-service` writes (verified by systemd and started by its own `ExecStart`), store
//! backups while the node serves and restores while it is stopped, and the primary
//! instance's repair of agent MCP configs at start.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::{NodeProc, bin, config_dir, ipc};

fn run(binary: &str, args: &[&str], envs: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(bin(binary))
        .args(args)
        .envs(envs.iter().copied())
        .env_remove("TUIC_SOCKET")
        .stdin(Stdio::null())
        .output()
        .expect("running the binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[tokio::test]
async fn install_service_writes_a_unit_systemd_accepts_and_its_command_serves() {
    let cfg = config_dir(json!({}));
    let units = tempfile::tempdir().unwrap();
    for name in ["tuic-node", "tuic-hub"] {
        let (code, _, err) = run(
            name,
            &[
                "install-service",
                "--config-dir",
                &s(cfg.path()),
                "--unit-dir",
                &s(units.path()),
                "--no-enable",
            ],
            &[],
        );
        assert_eq!(code, 0, "{err}");
        assert!(
            err.contains(&format!("journalctl --user -u {name} -f")),
            "{err}"
        );
        let unit = units.path().join(format!("{name}.service"));
        let text = std::fs::read_to_string(&unit).unwrap();
        assert!(text.contains("Restart=on-failure"), "{text}");
        // systemd's own check of the unit (syntax, the ExecStart binary exists).
        let v = Command::new("systemd-analyze")
            .args(["verify", &s(&unit)])
            .output()
            .expect("systemd-analyze (Debian package systemd)");
        assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    }
    // The node unit's ExecStart, run as systemd would, serves on the configured socket.
    let text = std::fs::read_to_string(units.path().join("tuic-node.service")).unwrap();
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    let argv: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(argv[1..], ["serve", "--config-dir", &s(cfg.path())]);
    let node = NodeProc::start(
        Path::new(argv[0]).file_name().unwrap().to_str().unwrap(),
        &argv[1..],
        &[],
    )
    .unwrap();
    let h = ipc(&node.socket, "GET", "/health", None).await.unwrap();
    assert_eq!(h.status, 200);
    drop(node);
    // Enabling needs a user service manager: where none runs, the unit is kept and the
    // command says why it is not enabled (and exits 1); where one runs, it is enabled.
    let (code, _, err) = run(
        "tuic-node",
        &[
            "install-service",
            "--config-dir",
            &s(cfg.path()),
            "--unit-dir",
            &s(units.path()),
        ],
        &[],
    );
    match code {
        0 => assert!(err.contains("(enabled and started)"), "{err}"),
        _ => {
            assert_eq!(code, 1, "{err}");
            assert!(err.contains("enabling it failed"), "{err}");
            assert!(err.contains("is written but not enabled"), "{err}");
        }
    }
}

async fn repos(socket: &Path) -> Vec<String> {
    let r = ipc(socket, "GET", "/repos", None).await.unwrap();
    let v = r.json();
    let rows = v
        .as_array()
        .cloned()
        .or_else(|| v["repos"].as_array().cloned());
    rows.unwrap_or_default()
        .iter()
        .filter_map(|r| r["path"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn backup_while_serving_and_restore_while_stopped() {
    let cfg = config_dir(json!({}));
    let dir = s(cfg.path());
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let mut node = NodeProc::start("tuic-node", &["--config-dir", &dir], &[]).unwrap();
    let r = ipc(
        &node.socket,
        "POST",
        "/repos",
        Some(json!({"path": s(a.path())})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // Backup through the running node.
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("state.backup");
    let (code, stdout, err) = run(
        "tuic-node",
        &["backup", "--config-dir", &dir, &s(&file)],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(stdout.trim(), s(&file));
    assert!(err.contains("sha256"), "{err}");
    // An existing file is never overwritten.
    let (code, _, err) = run(
        "tuic-node",
        &["backup", "--config-dir", &dir, &s(&file)],
        &[],
    );
    assert_eq!(code, 1);
    assert!(err.contains("exists"), "{err}");
    // Changes after the backup.
    ipc(
        &node.socket,
        "POST",
        "/repos",
        Some(json!({"path": s(b.path())})),
    )
    .await
    .unwrap();
    assert_eq!(repos(&node.socket).await.len(), 2);
    // Restore refuses while the node runs.
    let (code, _, err) = run(
        "tuic-node",
        &["restore", "--config-dir", &dir, &s(&file)],
        &[],
    );
    assert_eq!(code, 1);
    assert!(err.contains("stop it first"), "{err}");
    node.terminate().unwrap();
    // A file that is not a store is refused and nothing changes.
    let junk = out.path().join("junk");
    std::fs::write(&junk, b"not a database").unwrap();
    let (code, _, err) = run(
        "tuic-node",
        &["restore", "--config-dir", &dir, &s(&junk)],
        &[],
    );
    assert_eq!(code, 1);
    assert!(err.contains("is not a tuic store"), "{err}");
    // An offline backup of the current store, then the restore of the first one.
    let offline = out.path().join("offline.backup");
    let (code, _, err) = run(
        "tuic-node",
        &["backup", "--config-dir", &dir, &s(&offline)],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(
        "tuic-node",
        &["restore", "--config-dir", &dir, &s(&file)],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("the previous store is kept as"), "{err}");
    let node = NodeProc::start("tuic-node", &["--config-dir", &dir], &[]).unwrap();
    let now = repos(&node.socket).await;
    assert_eq!(now.len(), 1, "{now:?}");
    assert!(
        now[0].ends_with(a.path().file_name().unwrap().to_str().unwrap()),
        "{now:?}"
    );
}

/// Waits (bounded) until `f` holds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn the_primary_node_repairs_agent_configs_at_start_and_only_when_needed() {
    let home = tempfile::tempdir().unwrap();
    let h = s(home.path());
    let envs = [("HOME", h.as_str()), ("XDG_CONFIG_HOME", "")];
    let default_dir = home.path().join(".config/tuicommander");
    std::fs::create_dir_all(&default_dir).unwrap();
    std::fs::write(
        default_dir.join("config.json"),
        r#"{"secret_store":"file"}"#,
    )
    .unwrap();
    // No agent config names a managed bridge: nothing is published.
    let node = NodeProc::start("tuic-node", &[], &envs).unwrap();
    eventually("the repair check to run", || {
        node.log_text().contains("no agent config needs repair")
    });
    assert!(!default_dir.join("mcp-bridge").exists());
    drop(node);
    // A Claude config pointing at a cargo build of the bridge is repointed at a published
    // copy under the config dir; a custom command stays.
    let claude = home.path().join(".claude.json");
    let stale = "/somewhere/target/debug/tuic-bridge";
    std::fs::write(
        &claude,
        json!({"mcpServers": {
            "tuicommander": {"type": "stdio", "command": stale},
            "mine": {"command": "/opt/custom/tuic-bridge-wrapper"}
        }})
        .to_string(),
    )
    .unwrap();
    let node = NodeProc::start("tuic-node", &[], &envs).unwrap();
    let published = || -> Option<String> {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&claude).ok()?).ok()?;
        let c = v["mcpServers"]["tuicommander"]["command"]
            .as_str()?
            .to_owned();
        (c != stale).then_some(c)
    };
    eventually("the config to be repointed", || published().is_some());
    let cmd = published().unwrap();
    assert!(
        cmd.starts_with(&s(&default_dir.join("mcp-bridge"))) && cmd.ends_with("/tuic-bridge"),
        "{cmd}"
    );
    assert!(Path::new(&cmd).is_file());
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&claude).unwrap()).unwrap();
    assert_eq!(
        v["mcpServers"]["mine"]["command"],
        "/opt/custom/tuic-bridge-wrapper"
    );
    drop(node);
    // A node with another config dir (not the primary) never touches agent configs.
    std::fs::write(
        &claude,
        json!({"mcpServers": {"tuicommander": {"command": stale}}}).to_string(),
    )
    .unwrap();
    let other = config_dir(json!({}));
    let node = NodeProc::start("tuic-node", &["--config-dir", &s(other.path())], &envs).unwrap();
    let h = ipc(&node.socket, "GET", "/health", None).await.unwrap();
    assert_eq!(h.status, 200);
    assert!(!node.log_text().contains("bridge_repair"));
    assert!(std::fs::read_to_string(&claude).unwrap().contains(stale));
}

/// A node run from `exe` (a copy this test may replace) with remote access on loopback; its
/// stdout lines arrive on the returned channel (a re-executed node prints a new ready line).
fn spawn_copy(exe: &Path, cfg: &Path) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut child = Command::new(exe)
        .args([
            "--config-dir",
            &s(cfg),
            "--remote-access",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
        ])
        .env_remove("TUIC_SOCKET")
        .env("TUIC_NO_BRIDGE_REPAIR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

fn ready_tcp(rx: &std::sync::mpsc::Receiver<String>) -> String {
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("a ready line");
        if line.contains(" ready ipc=") {
            return line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("tcp="))
                .unwrap()
                .to_owned();
        }
    }
}

fn sha(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

#[tokio::test]
async fn remote_update_is_cookie_only_checks_the_binary_and_restarts_on_it() {
    let cfg = config_dir(json!({}));
    let (code, _, err) = tuic_tests::run_with_stdin(
        "tuic-node",
        &["set-password", "--config-dir", &s(cfg.path())],
        "update pw\n",
    )
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let bin_dir = tempfile::tempdir().unwrap();
    let exe = bin_dir.path().join("tuic-node");
    std::fs::copy(bin("tuic-node"), &exe).unwrap();
    let original = sha(&exe);
    let (child, rx) = spawn_copy(&exe, cfg.path());
    // Killed however the test ends (a re-executed node is the same process).
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = KillOnDrop(child);
    let base = format!("http://{}", ready_tcp(&rx));
    let http = reqwest::Client::new();
    let login = http
        .post(format!("{base}/auth/login"))
        .json(&json!({"username": "admin", "password": "update pw"}))
        .send()
        .await
        .unwrap();
    let cookie = login.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    // The new build: the same program with bytes appended (a different digest).
    let mut new_bytes = std::fs::read(bin("tuic-node")).unwrap();
    new_bytes.extend_from_slice(b"\0tuic update test build");
    let new_sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&new_bytes))
    };
    let post = |body: Vec<u8>, digest: &str| {
        http.post(format!("{base}/remote/update"))
            .header("x-update-sha256", digest)
            .body(body)
    };
    // Basic Auth and ?token= never authorize executable replacement (refused before the
    // body is read, so a small one is sent).
    let r = post(b"\x7fELF".to_vec(), &new_sha)
        .basic_auth("admin", Some("update pw"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("login cookie"), "{v}");
    let token = cookie.trim_start_matches("tui-session=").to_owned();
    let r = http
        .post(format!("{base}/remote/update?token={token}"))
        .header("x-update-sha256", &new_sha)
        .body(b"\x7fELF".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // With the cookie: a wrong digest, a non-executable, another program are refused, and
    // the executable is untouched.
    let refused = [
        (new_bytes.clone(), "0".repeat(64), "not the announced"),
        (
            b"#!/bin/sh\necho hi\n".to_vec(),
            String::new(),
            "not an executable",
        ),
        (
            std::fs::read(bin("tuic-hub")).unwrap(),
            String::new(),
            "is not tuic-node",
        ),
    ];
    for (body, digest, why) in refused {
        let digest = if digest.is_empty() {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(&body))
        } else {
            digest
        };
        let r = post(body, &digest)
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        let msg = v["error"].as_str().unwrap();
        assert!(
            msg.contains(why) && msg.contains("nothing was replaced"),
            "{v}"
        );
        assert_eq!(sha(&exe), original);
    }
    // A terminal open across the update: its holder keeps it and the new executable
    // re-adopts it (same session, same shell).
    let ipc_sock = cfg.path().join("mcp.sock");
    let grid_line = |id: String, needle: &'static str| {
        let ipc_sock = ipc_sock.clone();
        async move {
            for _ in 0..3000 {
                let v = tuic_tests::ipc(
                    &ipc_sock,
                    "GET",
                    &format!("/sessions/{id}/terminal/lines"),
                    None,
                )
                .await
                .map(|r| r.json())
                .unwrap_or(Value::Null);
                // The line once the next prompt shows after it (so it is whole).
                let ls: Vec<&str> = v["lines"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let hit = ls
                    .iter()
                    .position(|l| l.contains(needle) && !l.contains("echo"))
                    .filter(|&i| ls[i + 1..].iter().any(|l| !l.trim().is_empty()))
                    .map(|i| ls[i].to_owned());
                if let Some(l) = hit {
                    return l;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            panic!("{needle} never showed on {id}");
        }
    };
    let created = tuic_tests::ipc(
        &ipc_sock,
        "POST",
        "/sessions",
        Some(json!({"shell": "/bin/sh", "args": ["-i"], "cwd": "/tmp"})),
    )
    .await
    .unwrap()
    .json();
    let sid = created["session_id"].as_str().unwrap().to_owned();
    let type_line = |text: &'static str| {
        let (ipc_sock, sid) = (ipc_sock.clone(), sid.clone());
        async move {
            let r = tuic_tests::ipc(
                &ipc_sock,
                "POST",
                &format!("/sessions/{sid}/write"),
                Some(json!({ "data": text })),
            )
            .await
            .unwrap();
            assert_eq!(r.status, 200);
        }
    };
    type_line("echo UP-$((1+1)) pid=$$\r").await;
    let before = grid_line(sid.clone(), "UP-2").await;
    // The real update: answered, then the node drains and re-executes the new file.
    let r = post(new_bytes.clone(), &new_sha)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["restarting"], true, "{v}");
    assert_eq!(v["sha256"], json!(new_sha));
    assert!(
        v["version"].as_str().unwrap().starts_with("tuic-node "),
        "{v}"
    );
    let base2 = format!("http://{}", ready_tcp(&rx));
    let h = http.get(format!("{base2}/health")).send().await.unwrap();
    assert_eq!(h.status(), 200);
    assert_eq!(sha(&exe), new_sha);
    assert_eq!(sha(&bin_dir.path().join("tuic-node.previous")), original);
    // Same process (re-exec keeps the pid).
    assert!(child.0.try_wait().unwrap().is_none());
    // The terminal came through: its screen, and the same shell answering.
    assert_eq!(grid_line(sid.clone(), "UP-2").await, before);
    type_line("echo UP-$((2+2)) pid=$$\r").await;
    let after = grid_line(sid.clone(), "UP-4").await;
    assert_eq!(
        after.rsplit("pid=").next(),
        before.rsplit("pid=").next(),
        "{before} / {after}"
    );
}
