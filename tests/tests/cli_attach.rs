//! `tuic attach` and the tmux-like commands through the real binaries.
//!
//! The outer terminal is itself a real PTY: a session of a node running `tuic attach …` (the
//! node's own emulator then shows what the user would see, its resize route is the outer
//! window's resize, and its write route is the keyboard). The inner session is the one being
//! attached to, locally or on another host behind a hub in network namespaces.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tuic_tests::fed::FedBed;
use tuic_tests::term::{Node, bin};
use tuic_tests::{NodeProc, ipc};

const T: Duration = Duration::from_secs(30);

/// Any node's (or hub's) IPC socket, for plain JSON requests.
async fn call(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let r = ipc(socket, method, path, body).await?;
    if r.status != 200 {
        bail!(
            "{method} {path}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    Ok(r.json())
}

/// Polls `f` (bounded by [`T`]) until it returns `Some`.
async fn until<F, Fut, R>(what: &str, mut f: F) -> anyhow::Result<R>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<R>>>,
{
    let deadline = Instant::now() + T;
    loop {
        if let Some(r) = f().await? {
            return Ok(r);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The visible screen of session `id` on `socket` (rows trimmed at the right).
async fn screen(socket: &Path, id: &str) -> anyhow::Result<Vec<String>> {
    let info = call(
        socket,
        "GET",
        &format!("/sessions/{id}/terminal/scroll-info"),
        None,
    )
    .await?;
    let total = info["total_lines"].as_u64().context("total")?;
    let rows = info["screen_lines"].as_u64().context("rows")?;
    let v = call(
        socket,
        "GET",
        &format!(
            "/sessions/{id}/terminal/lines?start={}&end={total}",
            total - rows
        ),
        None,
    )
    .await?;
    Ok(v["lines"]
        .as_array()
        .context("lines")?
        .iter()
        .map(|l| l.as_str().unwrap_or_default().to_owned())
        .collect())
}

async fn screen_has(socket: &Path, id: &str, text: &str) -> anyhow::Result<bool> {
    Ok(screen(socket, id).await?.iter().any(|l| l.contains(text)))
}

async fn wait_text(socket: &Path, id: &str, text: &str) -> anyhow::Result<()> {
    let r = until(&format!("{text:?} on {id}"), || async {
        Ok(screen_has(socket, id, text).await?.then_some(()))
    })
    .await;
    match r {
        Ok(()) => Ok(()),
        Err(e) => {
            let now = screen(socket, id).await.unwrap_or_default();
            Err(e.context(format!("screen of {id}: {now:#?}")))
        }
    }
}

async fn write(socket: &Path, id: &str, data: &str) -> anyhow::Result<()> {
    call(
        socket,
        "POST",
        &format!("/sessions/{id}/write"),
        Some(json!({"data": data})),
    )
    .await
    .map(drop)
}

/// An inner shell with a fixed prompt.
fn shell() -> Value {
    json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp",
           "env": {"PS1": "inner$ ", "ENV": ""}, "args": ["-i"]})
}

/// An outer terminal on `host` running `tuic attach <target>` against `socket`.
async fn outer(
    host: &Path,
    socket: &Path,
    target: &str,
    rows: u16,
    cols: u16,
) -> anyhow::Result<String> {
    let v = call(
        host,
        "POST",
        "/sessions",
        // A session's TUIC_SOCKET names its own node; this client talks to `socket`'s node
        // (its config dir's default socket).
        Some(
            json!({"rows": rows, "cols": cols, "cwd": "/tmp", "shell": "env",
                    "args": ["-u", "TUIC_SOCKET", bin("tuic").to_string_lossy(),
                             "--config-dir", socket.parent().unwrap().to_string_lossy(),
                             "attach", target, "--reconnect-secs", "60"]}),
        ),
    )
    .await?;
    Ok(v["session_id"].as_str().context("id")?.to_owned())
}

/// Waits until session `id` exited; its exit code and its last screen.
async fn exited(socket: &Path, id: &str) -> anyhow::Result<(Option<i64>, Vec<String>)> {
    let v = until(&format!("{id} to exit"), || async {
        let v = call(
            socket,
            "GET",
            &format!("/sessions/{id}/terminal/snapshot"),
            None,
        )
        .await?;
        Ok((v["exited"] == json!(true)).then_some(v))
    })
    .await?;
    Ok((v["exit_code"].as_i64(), screen(socket, id).await?))
}

#[tokio::test]
async fn attach_types_paints_resizes_detaches_and_reattaches() {
    let node = Node::start(None).await.unwrap();
    let sock = node.socket.clone();
    let inner = node.create(shell()).await.unwrap();
    let (iid, alias) = (
        inner["session_id"].as_str().unwrap().to_owned(),
        inner["alias"].as_str().unwrap().to_owned(),
    );
    write(&sock, &iid, "echo before-attach\n").await.unwrap();
    wait_text(&sock, &iid, "before-attach").await.unwrap();

    // Attaching paints what was printed before it: the stream does not start "from now".
    let o1 = outer(&sock, &sock, &alias, 24, 80).await.unwrap();
    wait_text(&sock, &o1, "before-attach").await.unwrap();

    // Typed keys reach the session; its output and cursor appear in the outer terminal.
    write(&sock, &o1, "echo typed-$((40+2))\r").await.unwrap();
    wait_text(&sock, &iid, "typed-42").await.unwrap();
    wait_text(&sock, &o1, "typed-42").await.unwrap();
    until("the outer screen and cursor to equal the inner", || async {
        let a = call(
            &sock,
            "GET",
            &format!("/sessions/{iid}/terminal/snapshot"),
            None,
        )
        .await?;
        let b = call(
            &sock,
            "GET",
            &format!("/sessions/{o1}/terminal/snapshot"),
            None,
        )
        .await?;
        let same =
            screen(&sock, &iid).await? == screen(&sock, &o1).await? && a["cursor"] == b["cursor"];
        Ok(same.then_some(()))
    })
    .await
    .unwrap();

    // The window size follows a resize of the outer terminal.
    call(
        &sock,
        "POST",
        &format!("/sessions/{o1}/resize"),
        Some(json!({"rows": 30, "cols": 100})),
    )
    .await
    .unwrap();
    until("the inner size to follow", || async {
        let v = call(
            &sock,
            "GET",
            &format!("/sessions/{iid}/terminal/snapshot"),
            None,
        )
        .await?;
        Ok((v["rows"] == 30 && v["cols"] == 100).then_some(()))
    })
    .await
    .unwrap();
    write(&sock, &o1, "stty size\r").await.unwrap();
    wait_text(&sock, &o1, "30 100").await.unwrap();

    // The detach key leaves the session running; tuic exits 0 and says so.
    write(&sock, &o1, "\x02d").await.unwrap();
    let (code, last) = exited(&sock, &o1).await.unwrap();
    assert_eq!(code, Some(0), "{last:?}");
    assert!(
        last.iter().any(|l| l.contains("[detached (from session")),
        "{last:?}"
    );
    call(&sock, "GET", &format!("/sessions/{iid}"), None)
        .await
        .unwrap();

    // Output while detached, then a re-attach shows the current screen.
    write(&sock, &iid, "echo while-detached\n").await.unwrap();
    wait_text(&sock, &iid, "while-detached").await.unwrap();
    let o2 = outer(&sock, &sock, &iid, 30, 100).await.unwrap();
    until("the re-attached screen to equal the inner", || async {
        Ok((screen(&sock, &iid).await? == screen(&sock, &o2).await?).then_some(()))
    })
    .await
    .unwrap();

    // The session ending ends the attachment with its exit code.
    write(&sock, &o2, "exit 7\r").await.unwrap();
    let (code, last) = exited(&sock, &o2).await.unwrap();
    assert_eq!(code, Some(7), "{last:?}");
}

#[tokio::test]
async fn two_clients_type_in_order_and_the_latest_sets_the_size() {
    let node = Node::start(None).await.unwrap();
    let sock = node.socket.clone();
    let inner = node
        .create(
            json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp",
                       "args": ["-c", "stty raw -echo; printf READY; exec cat"]}),
        )
        .await
        .unwrap();
    let iid = inner["session_id"].as_str().unwrap().to_owned();
    wait_text(&sock, &iid, "READY").await.unwrap();
    let a = outer(&sock, &sock, &iid, 24, 80).await.unwrap();
    wait_text(&sock, &a, "READY").await.unwrap();
    let b = outer(&sock, &sock, &iid, 20, 70).await.unwrap();
    wait_text(&sock, &b, "READY").await.unwrap();
    // The latest client to attach sets the size (tmux's `window-size latest`).
    until("the second client's size", || async {
        let v = call(
            &sock,
            "GET",
            &format!("/sessions/{iid}/terminal/snapshot"),
            None,
        )
        .await?;
        Ok((v["rows"] == 20 && v["cols"] == 70).then_some(()))
    })
    .await
    .unwrap();
    // Keys from both reach the PTY in the order they were typed.
    for (i, c) in ["a", "b", "a", "b", "a"].iter().enumerate() {
        let who = if *c == "a" { &a } else { &b };
        write(&sock, who, &format!("<{c}{i}>")).await.unwrap();
        wait_text(&sock, &iid, &format!("<{c}{i}>")).await.unwrap();
    }
    let all = screen(&sock, &iid).await.unwrap().join("");
    assert!(all.contains("<a0><b1><a2><b3><a4>"), "{all}");
    // Both clients show the same bytes.
    wait_text(&sock, &a, "<a0><b1><a2><b3><a4>").await.unwrap();
    wait_text(&sock, &b, "<a0><b1><a2><b3><a4>").await.unwrap();
}

/// Runs the CLI against `socket` with stdin not a terminal.
fn tuic(socket: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin("tuic"))
        .args(args)
        .env("TUIC_SOCKET", socket)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("running tuic");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn commands_new_ls_send_keys_capture_rename_resize_kill_and_bad_targets() {
    let node = Node::start(None).await.unwrap();
    let sock = node.socket.clone();
    let s = sock.as_path();
    // new -d prints the alias; stdin is not a terminal, so plain `new` would not attach.
    let (code, out, err) = tuic(
        s,
        &[
            "new", "-d", "-s", "dup", "-c", "/tmp", "--", "/bin/sh", "-i",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let first = out.trim().to_owned();
    let (code, out, err) = tuic(s, &["new", "-s", "dup", "--", "/bin/sh", "-i"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("not attaching: stdin is not a terminal"),
        "{err}"
    );
    let second = out.trim().to_owned();
    let (code, out, _) = tuic(s, &["ls"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("HOST"), "{out}");
    assert!(
        out.contains(&first) && out.contains(&second) && out.contains("local"),
        "{out}"
    );
    let (_, out, _) = tuic(s, &["ls", "--json"]);
    let rows: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 2);

    // send-keys with tmux names, capture as text.
    let (code, _, err) = tuic(s, &["send-keys", &first, "echo sk-$((2*21))", "Enter"]);
    assert_eq!(code, 0, "{err}");
    let id = rows[0]["session_id"].as_str().unwrap().to_owned();
    let first_id = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["alias"] == json!(first))
        .unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_text(&sock, &first_id, "sk-42").await.unwrap();
    let (code, out, _) = tuic(s, &["capture", &first]);
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l == "sk-42"), "{out}");
    let (_, ansi, _) = tuic(s, &["capture", &first, "--ansi"]);
    assert!(ansi.contains("\x1b[") && ansi.contains("sk-42"), "{ansi:?}");
    // C-c reaches the PTY as ETX: it interrupts a running sleep (else the echo would wait
    // 300 s, far past the bound).
    tuic(s, &["send-keys", &first, "sleep 300", "Enter"]);
    tuic(s, &["send-keys", &first, "C-c"]);
    tuic(s, &["send-keys", &first, "echo interrupted", "Enter"]);
    wait_text(&sock, &first_id, "interrupted").await.unwrap();

    // An ambiguous target lists its candidates; a unique prefix resolves.
    let (code, _, err) = tuic(s, &["capture", "dup"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("ambiguous") && err.contains(&first) && err.contains(&second),
        "{err}"
    );
    let (code, _, err) = tuic(s, &["attach", "nope"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no such session") && err.contains(&first),
        "{err}"
    );
    let prefix = &id[..id.len() - 3];
    let (code, _, err) = tuic(s, &["capture", prefix]);
    assert_eq!(code, 0, "{err}");

    // rename, resize, kill.
    assert_eq!(tuic(s, &["rename", &first, "renamed"]).0, 0);
    assert_eq!(tuic(s, &["resize", "renamed", "90", "20"]).0, 0);
    let snap = call(
        &sock,
        "GET",
        &format!("/sessions/{first_id}/terminal/snapshot"),
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        (snap["rows"].clone(), snap["cols"].clone()),
        (json!(20), json!(90))
    );
    // A non-terminal stdin is a clear error for attach (after the target resolved).
    let (code, _, err) = tuic(s, &["attach", "renamed"]);
    assert_eq!(code, 2);
    assert!(err.contains("stdin is not a TTY"), "{err}");
    let (code, out, _) = tuic(s, &["kill", "renamed"]);
    assert_eq!(code, 0);
    assert!(out.contains("killed"), "{out}");

    // run: output on stdout, the exit code as its own; attach to the exited one says how it ended.
    let (code, out, err) = tuic(s, &["run", "--", "sh", "-c", "echo from-run; exit 5"]);
    assert_eq!(code, 5, "{err}");
    assert!(out.contains("from-run"), "{out}");
    let (code, _, err) = tuic(s, &["attach", &second]);
    assert_eq!(code, 2, "{err}");
    write(&sock, &second_id(&rows, &second), "exit 3\n")
        .await
        .unwrap();
    exited(&sock, &second_id(&rows, &second)).await.unwrap();
    let (code, _, err) = tuic(s, &["attach", &second]);
    assert_eq!(code, 1);
    assert!(err.contains("has exited with code 3"), "{err}");
}

fn second_id(rows: &Value, alias: &str) -> String {
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["alias"] == json!(alias))
        .unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn attach_through_a_hub_to_another_host_survives_a_hub_restart_and_a_kill_9_of_the_host() {
    let mut bed = FedBed::start(1).await.unwrap();
    let hub_sock = bed.hub.socket.clone();
    // A session on node B, created through the hub (POST /sessions?host=).
    let (code, out, err) = tuic(
        &hub_sock,
        &["new", "-d", "-H", "nodeb", "--", "/bin/sh", "-i"],
    );
    assert_eq!(code, 0, "{err}");
    let label = out.trim().to_owned();
    assert!(label.starts_with("nodeb/"), "{label}");
    until("the hub to list it", || async {
        let rows = bed.hub_sessions().await?;
        Ok(rows
            .iter()
            .any(|r| format!("nodeb/{}", r["alias"].as_str().unwrap_or("")) == label)
            .then_some(()))
    })
    .await
    .unwrap();
    // The outer terminal is on a plain local node; its tuic talks to the hub.
    let term = Node::start(None).await.unwrap();
    let tsock = term.socket.clone();
    let o = outer(&tsock, &hub_sock, &label, 24, 80).await.unwrap();
    // The painted screen shows the remote shell's prompt before anything is typed.
    wait_text(&tsock, &o, "#").await.unwrap();
    write(&tsock, &o, "echo via-hub-$((3*3))\r").await.unwrap();
    wait_text(&tsock, &o, "via-hub-9").await.unwrap();
    let (code, out, _) = tuic(&hub_sock, &["capture", &label]);
    assert_eq!(code, 0);
    assert!(out.contains("via-hub-9"), "{out}");
    let (code, out, _) = tuic(&hub_sock, &["hosts"]);
    assert_eq!(code, 0);
    assert!(out.contains("nodeb") && out.contains("up"), "{out}");

    // kill -9 of the hub: the attachment says it lost the session, then re-attaches to the
    // same PTY once the hub is back, and typing works again.
    let hub_args = [
        "--config-dir".to_owned(),
        bed.hub_dir.path().to_string_lossy().into_owned(),
    ];
    let _ = bed.hub.child.kill();
    let _ = bed.hub.child.wait();
    wait_text(&tsock, &o, "[tuic: lost").await.unwrap();
    bed.hub = NodeProc::start_in(
        Some(bed.net.hub()),
        "tuic-hub",
        &hub_args.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    )
    .unwrap();
    bed.wait_up("nodeb", true, T).await.unwrap();
    // Typed while still disconnected: kept and delivered once re-attached.
    write(&tsock, &o, "echo back-$((5+5))\r").await.unwrap();
    wait_text(&tsock, &o, "back-10").await.unwrap();

    // kill -9 of the host that owns the PTY: the line says so; the shell lives on in its
    // holder, and after the host's restart tuic re-attaches to the same PTY: the screen shows
    // what was printed before the kill, typing works, and it is the same shell process.
    write(&tsock, &o, "echo P$((2))ID=$$\r").await.unwrap();
    wait_text(&tsock, &o, "P2ID=").await.unwrap();
    // The pid after `tag` in a capture, once the prompt after it shows (so it is whole).
    let shell_pid = |tag: &'static str| {
        let (hub_sock, label) = (hub_sock.clone(), label.clone());
        async move {
            let what = format!("{tag} and a prompt after it");
            until(&what, move || {
                let (hub_sock, label) = (hub_sock.clone(), label.clone());
                async move {
                    let (_, out, _) = tuic(&hub_sock, &["capture", &label]);
                    let ls: Vec<&str> = out.lines().collect();
                    Ok(ls
                        .iter()
                        .position(|l| l.contains(tag) && !l.contains("echo"))
                        .filter(|&i| ls[i + 1..].iter().any(|l| !l.trim().is_empty()))
                        .and_then(|i| {
                            let rest = ls[i].split_once(tag)?.1;
                            let d: String = rest.chars().take_while(char::is_ascii_digit).collect();
                            (!d.is_empty()).then_some(d)
                        }))
                }
            })
            .await
        }
    };
    let before = shell_pid("P2ID=").await.unwrap();
    bed.nodes[0].kill9();
    wait_text(&tsock, &o, "[tuic: lost").await.unwrap();
    bed.nodes[0].restart().unwrap();
    write(&tsock, &o, "echo AFTER-$((7*7)) P$((3))ID=$$\r")
        .await
        .unwrap();
    wait_text(&tsock, &o, "AFTER-49").await.unwrap();
    wait_text(&tsock, &o, "back-10").await.unwrap();
    let (code, out, _) = tuic(&hub_sock, &["capture", &label]);
    assert_eq!(code, 0);
    assert!(out.contains("back-10"), "{out}");
    assert_eq!(shell_pid("P3ID=").await.unwrap(), before, "{out}");
    let (_, out, _) = tuic(&hub_sock, &["ls"]);
    assert!(out.contains(label.split('/').nth(1).unwrap()), "{out}");
    // Killing it still works after the re-adoption; tuic attach then ends with it.
    let (code, _, err) = tuic(&hub_sock, &["kill", &label]);
    assert_eq!(code, 0, "{err}");
    let (code, last) = exited(&tsock, &o).await.unwrap();
    assert!(code.is_some(), "{last:?}");
}

#[tokio::test]
async fn connect_hosts_ls_and_disconnect_front_the_hub() {
    let dir = tuic_tests::config_dir(json!({}));
    let d = dir.path().to_string_lossy().into_owned();
    let hub = NodeProc::start("tuic-hub", &["--config-dir", &d], &[]).unwrap();
    let tuic_in = |args: &[&str], stdin: &str| {
        use std::io::Write;
        let mut c = std::process::Command::new(bin("tuic"))
            .arg("--config-dir")
            .arg(&d)
            .args(args)
            .env_remove("TUIC_SOCKET")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let o = c.wait_with_output().unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // Nothing listens on port 9 of loopback: the connection stays down with its error.
    let (code, _, err) = tuic_in(&["connect", "boxz", "http://127.0.0.1:9"], "a-token\n");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("connection boxz saved"), "{err}");
    let down = until("boxz to be listed down with its error", || async {
        let (_, out, _) = tuic(&hub.socket, &["hosts", "--json"]);
        let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        Ok(v.as_array()
            .and_then(|a| a.iter().find(|c| c["id"] == "boxz").cloned())
            .filter(|c| c["up"] == false && c.get("last_error").is_some()))
    })
    .await
    .unwrap();
    assert_eq!(down["url"], "http://127.0.0.1:9");
    let (code, out, _) = tuic(&hub.socket, &["hosts"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("HOST") && out.contains("boxz") && out.contains("down"),
        "{out}"
    );
    let (_, out, _) = tuic(&hub.socket, &["ls"]);
    assert!(out.contains("boxz: offline"), "{out}");
    let (code, _, err) = tuic_in(&["disconnect", "boxz"], "");
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = tuic(&hub.socket, &["hosts", "--json"]);
    assert_eq!(out.trim(), "[]", "{out}");
    // On a plain node, hosts says it is not a hub (exit 4).
    let node = Node::start(None).await.unwrap();
    let (code, _, err) = tuic(&node.socket, &["hosts"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("not a tuic hub"), "{err}");
}

#[tokio::test]
async fn agent_spawn_list_and_send_through_the_cli() {
    let node = Node::start(None).await.unwrap();
    let s = node.socket.as_path();
    let (code, out, err) = tuic(
        s,
        &[
            "agent", "spawn", "--name", "worker", "--", "sh", "-c", "sleep 30",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|_| json!({"raw": out}));
    let sid = v["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    let tuic_session = v["tuic_session"].as_str().unwrap().to_owned();
    // The spawned child has a peer entry at once.
    let (code, out, err) = tuic(s, &["agent", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&tuic_session), "{out}");
    let (code, out, err) = tuic(s, &["agent", "send", &tuic_session, "hello worker"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("delivered") || out.contains("ok") || out.contains("message_id"),
        "{out}"
    );
    let (_, out, _) = tuic(s, &["ls"]);
    assert!(out.contains("worker"), "{out}");
    assert_eq!(tuic(s, &["kill", &sid]).0, 0);
}

/// Runs the CLI against `socket` with its stdout a pipe whose reader is already gone, as in
/// `tuic ls | head` after `head` exited: status, stderr.
fn tuic_into_closed_pipe(socket: &Path, args: &[&str]) -> (i32, String) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = std::process::Command::new(bin("tuic"))
        .args(args)
        .env("TUIC_SOCKET", socket)
        .stdin(std::process::Stdio::null())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("running tuic");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn capture_n_counts_from_the_last_written_row_and_a_closed_pipe_ends_quietly() {
    let node = Node::start(None).await.unwrap();
    let s = node.socket.as_path();
    let v = node
        .create(json!({"rows": 24, "cols": 80, "cwd": "/tmp", "shell": "/bin/sh",
                       "args": ["-c", "for i in 1 2 3 4 5; do echo line$i; done; echo end; exec sleep 60"]}))
        .await
        .unwrap();
    let id = v["session_id"].as_str().unwrap().to_owned();
    wait_text(s, &id, "end").await.unwrap();
    // Five written rows and eighteen blank ones below: -n 3 is the last three written.
    let (code, out, err) = tuic(s, &["capture", &id, "-n", "3"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "line4\nline5\nend\n");
    let (_, out, _) = tuic(s, &["capture", &id, "-n", "100"]);
    assert_eq!(out, "line1\nline2\nline3\nline4\nline5\nend\n");

    // Every command that prints ends with status 0 and nothing on stderr when its reader is
    // gone (no panic, no backtrace), like coreutils.
    for args in [
        vec!["ls"],
        vec!["ls", "--json"],
        vec!["status"],
        vec!["status", "--json"],
        vec!["capture", &id],
        vec!["capture", &id, "--ansi"],
        vec!["run", "--", "seq", "1", "100000"],
    ] {
        let (code, err) = tuic_into_closed_pipe(s, &args);
        assert_eq!((code, err.as_str()), (0, ""), "tuic {args:?}");
    }
}

#[tokio::test]
async fn run_prints_plain_newlines_uses_no_alias_and_ls_sorts_aliases_naturally() {
    let node = Node::start(None).await.unwrap();
    let s = node.socket.as_path();
    let new = || {
        let (code, out, err) = tuic(s, &["new", "-d", "-c", "/tmp", "--", "sleep", "60"]);
        assert_eq!(code, 0, "{err}");
        out.trim().to_owned()
    };
    let first = new();
    // Piped, the command's newlines arrive as `\n` (the PTY's `\r\n` is a terminal's business).
    let (code, out, err) = tuic(s, &["run", "-c", "/tmp", "--", "printf", "a\\nb\\n"]);
    assert_eq!((code, out.as_str()), (0, "a\nb\n"), "{err}");
    // The run took no alias number: the next session's is the one after the first's.
    let next = new();
    let num = |a: &str| a.rsplit_once('-').unwrap().1.parse::<u32>().unwrap();
    assert_eq!(num(&next), num(&first) + 1, "{first} then {next}");
    // Ten more: ls lists them in natural order (…-9 before …-10).
    let mut made = vec![first, next];
    made.extend((0..9).map(|_| new()));
    let (_, out, _) = tuic(s, &["ls"]);
    let listed: Vec<&str> = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(listed, made, "{out}");
    let (_, out, _) = tuic(s, &["ls", "--json"]);
    let rows: Value = serde_json::from_str(&out).unwrap();
    let listed: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["alias"].as_str())
        .collect();
    assert_eq!(listed, made, "GET /sessions order");
}

/// What `run_gives_…` runs: stdout and stderr interleaved, a non-ASCII byte sequence split
/// from its line, more stderr than one read of the route returns, and its own exit status.
const STREAMS_SCRIPT: &str = concat!(
    "echo out1; echo err1 >&2; echo out2; ",
    r"printf 'e\342\234\223' >&2; ",
    r"head -c 1500000 /dev/zero | tr '\0' x >&2; exit 3",
);

fn assert_streams_apart(code: i32, out: &str, err: &str, via: &str) {
    assert_eq!(code, 3, "{via}: {err:.300}");
    assert_eq!(out, "out1\nout2\n", "{via}: stdout");
    let want = format!("err1\ne✓{}", "x".repeat(1_500_000));
    assert_eq!(err.len(), want.len(), "{via}: stderr length");
    assert!(err == want, "{via}: stderr differs: {:.80}", err);
}

#[tokio::test]
async fn run_gives_stdout_and_stderr_apart_locally_and_through_a_hub() {
    let bed = FedBed::start(1).await.unwrap();
    let hub = bed.hub.socket.clone();
    let (code, out, err) = tuic(
        &hub,
        &["run", "-c", "/tmp", "--", "sh", "-c", STREAMS_SCRIPT],
    );
    assert_streams_apart(code, &out, &err, "local");
    let (code, out, err) = tuic(
        &hub,
        &[
            "run",
            "-H",
            "nodeb",
            "-c",
            "/tmp",
            "--",
            "sh",
            "-c",
            STREAMS_SCRIPT,
        ],
    );
    assert_streams_apart(code, &out, &err, "through the hub");
    // A program that cannot start says so on stderr with a shell's 127, not on stdout.
    let (code, out, err) = tuic(&hub, &["run", "--", "/nonexistent/tuic-none"]);
    assert_eq!((code, out.as_str()), (127, ""), "{err}");
    assert!(err.contains("tuic-none"), "{err}");
    // A session made without separate stderr has none to read; a bad offset is refused.
    let v = call(
        &hub,
        "POST",
        "/sessions",
        Some(json!({"cwd": "/tmp", "shell": "sh", "args": ["-c", "echo e >&2; exec sleep 60"]})),
    )
    .await
    .unwrap();
    let plain = v["session_id"].as_str().unwrap().to_owned();
    let r = ipc(&hub, "GET", &format!("/sessions/{plain}/stderr"), None)
        .await
        .unwrap();
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["code"], "no_stderr");
    let v = call(
        &hub,
        "POST",
        "/sessions",
        Some(
            json!({"cwd": "/tmp", "shell": "sh", "args": ["-c", "echo e >&2; exec sleep 60"],
                    "separate_stderr": true, "no_alias": true}),
        ),
    )
    .await
    .unwrap();
    let apart = v["session_id"].as_str().unwrap().to_owned();
    let r = until("the separate stderr to hold the line", || async {
        let r = ipc(
            &hub,
            "GET",
            &format!("/sessions/{apart}/stderr?from_byte=0"),
            None,
        )
        .await?;
        Ok((r.status == 200 && r.body[..] == b"e\n"[..]).then_some(r))
    })
    .await
    .unwrap();
    let header = |n: &str| {
        r.headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(header("x-next-byte").as_deref(), Some("2"));
    assert_eq!(header("x-stderr-complete").as_deref(), Some("false"));
    for bad in ["from_byte=99", "from_byte=-1", "from_byte=x", "offset=0"] {
        let r = ipc(
            &hub,
            "GET",
            &format!("/sessions/{apart}/stderr?{bad}"),
            None,
        )
        .await
        .unwrap();
        assert_eq!(r.status, 400, "{bad}: {}", String::from_utf8_lossy(&r.body));
    }
    // The terminal never saw it.
    let r = ipc(&hub, "GET", &format!("/sessions/{apart}/raw-ring"), None)
        .await
        .unwrap();
    assert_eq!((r.status, &r.body[..]), (200, &b""[..]));
}

/// A private tmux server (its own socket, no config): the outer terminal of a real user.
struct Tmux {
    socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("running tmux (tests/run-all.sh installs it)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane as `capture-pane -e -p` prints it: text with its colours and attributes.
    fn capture(&self) -> String {
        self.cmd(&["capture-pane", "-e", "-p", "-t", "outer"])
    }

    async fn wait(&self, what: &str, f: impl Fn(&str) -> bool) -> String {
        until(what, || async {
            let c = self.capture();
            Ok(f(&c).then_some(c))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}: pane:\n{}", self.capture()))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

/// Detaching gives the outer terminal back as tmux does: inside a real tmux pane, the pane
/// after attach → output in the session → a full-screen switch → detach is byte-identical
/// (`capture-pane -e`) to the pane before the attach, plus the detach line on the fresh line
/// below the command and the next prompt.
#[tokio::test]
async fn detach_leaves_the_outer_tmux_pane_as_it_was_before_the_attach() {
    let node = Node::start(None).await.unwrap();
    let sock = node.socket.clone();
    let inner = node.create(shell()).await.unwrap();
    let (iid, alias) = (
        inner["session_id"].as_str().unwrap().to_owned(),
        inner["alias"].as_str().unwrap().to_owned(),
    );
    write(&sock, &iid, "echo inner-before\n").await.unwrap();
    wait_text(&sock, &iid, "inner-before").await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux {
        socket: dir.path().join("tmux.sock"),
        _dir: dir,
    };
    tmux.cmd(&[
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        "outer",
        "-x",
        "80",
        "-y",
        "24",
        "-e",
        &format!("TUIC_SOCKET={}", sock.display()),
        "-e",
        "PS1=outer$ ",
        "-e",
        "ENV=",
        "/bin/sh",
        "-i",
    ]);
    // Some history in the pane, coloured, so attributes are compared too.
    tmux.cmd(&[
        "send-keys",
        "-t",
        "outer",
        "-l",
        "printf '\\033[1;31mred\\033[0m plain\\n'; echo second",
    ]);
    tmux.cmd(&["send-keys", "-t", "outer", "Enter"]);
    tmux.wait("the pane's history", |c| c.contains("second\nouter$"))
        .await;
    let command = format!("{} attach {alias}", bin("tuic").display());
    tmux.cmd(&["send-keys", "-t", "outer", "-l", &command]);
    let before = tmux
        .wait("the typed command", |c| c.contains(&command))
        .await;
    tmux.cmd(&["send-keys", "-t", "outer", "Enter"]);
    tmux.wait("the inner screen", |c| c.contains("inner-before"))
        .await;
    // Work in the session, including a full-screen program's screen switches.
    tmux.cmd(&[
        "send-keys",
        "-t",
        "outer",
        "-l",
        "printf '\\033[?1049hFULL'; sleep 0.3; printf '\\033[?1049l'; echo inner-after",
    ]);
    tmux.cmd(&["send-keys", "-t", "outer", "Enter"]);
    wait_text(&sock, &iid, "inner-after").await.unwrap();
    tmux.wait("inner-after in the pane", |c| c.contains("inner-after"))
        .await;
    // The detach key (tmux's own prefix, sent past it by send-keys).
    tmux.cmd(&["send-keys", "-t", "outer", "C-b", "d"]);
    let after = tmux
        .wait("the detach line and the next prompt", |c| {
            c.lines().any(|l| l.starts_with("[detached")) && c.trim_end().ends_with("outer$")
        })
        .await;

    let rows = |c: &str| -> Vec<String> {
        let mut v: Vec<String> = c.lines().map(str::to_owned).collect();
        while v.last().is_some_and(|l| l.trim().is_empty()) {
            v.pop();
        }
        v
    };
    let mut want = rows(&before);
    want.push(format!("[detached (from session {alias})]"));
    want.push("outer$".into());
    let got: Vec<String> = rows(&after)
        .iter()
        .map(|l| l.trim_end().to_owned())
        .collect();
    let want: Vec<String> = want.iter().map(|l| l.trim_end().to_owned()).collect();
    assert_eq!(
        got, want,
        "pane after detach:\n{after}\nbefore attach:\n{before}"
    );
    // The session lives on.
    call(&sock, "GET", &format!("/sessions/{iid}"), None)
        .await
        .unwrap();

    // An attachment that ends because the session exits gives the pane back the same way.
    tmux.cmd(&["send-keys", "-t", "outer", "-l", &command]);
    let before = tmux
        .wait("the typed command again", |c| {
            c.matches(&command).count() == 2
        })
        .await;
    tmux.cmd(&["send-keys", "-t", "outer", "Enter"]);
    tmux.wait("the inner screen again", |c| c.contains("inner-after"))
        .await;
    tmux.cmd(&["send-keys", "-t", "outer", "-l", "exit 4"]);
    tmux.cmd(&["send-keys", "-t", "outer", "Enter"]);
    let after = tmux
        .wait("the exit line and the next prompt", |c| {
            c.lines().any(|l| l.starts_with("[session")) && c.trim_end().ends_with("outer$")
        })
        .await;
    let mut want = rows(&before);
    want.push(format!("[session {alias} exited with code 4]"));
    want.push("outer$".into());
    let got: Vec<String> = rows(&after)
        .iter()
        .map(|l| l.trim_end().to_owned())
        .collect();
    let want: Vec<String> = want.iter().map(|l| l.trim_end().to_owned()).collect();
    assert_eq!(
        got, want,
        "pane after the exit:\n{after}\nbefore attach:\n{before}"
    );
}

/// On a hub, a bare alias names the hub's own session even when a connected host has one of
/// the same name (as a relative path names a file here); the other host's needs `host/`.
#[tokio::test]
async fn on_a_hub_a_local_alias_wins_and_the_remote_one_needs_its_host() {
    let bed = FedBed::start(1).await.unwrap();
    let hub = bed.hub.socket.clone();
    let mk = |host: Option<&str>, tag: &str| {
        let mut args = vec!["new", "-d", "-c", "/tmp"];
        if let Some(h) = host {
            args.extend(["-H", h]);
        }
        let script = format!("echo {tag}; exec sleep 60");
        args.extend(["--", "sh", "-c"]);
        let (code, out, err) = tuic(&hub, &[args.as_slice(), &[script.as_str()]].concat());
        assert_eq!(code, 0, "{err}");
        out.trim().to_owned()
    };
    let local = mk(None, "on-the-hub");
    let remote = mk(Some("nodeb"), "on-nodeb");
    // Both are the first session under /tmp on their machine: one alias, two hosts.
    assert_eq!(remote, format!("nodeb/{local}"));
    until("the hub to list nodeb's session", || async {
        let rows = bed.hub_sessions().await?;
        Ok(rows
            .iter()
            .any(|r| r["connection_id"] == "nodeb")
            .then_some(()))
    })
    .await
    .unwrap();
    let capture = |t: &str| {
        let (code, out, err) = tuic(&hub, &["capture", t]);
        assert_eq!(code, 0, "capture {t}: {err}");
        out
    };
    until("both screens", || async {
        Ok(
            (capture(&local).contains("on-the-hub") && capture(&remote).contains("on-nodeb"))
                .then_some(()),
        )
    })
    .await
    .unwrap();
}
