//! Sessions outlive their node: real `tuic-node` processes killed with SIGKILL and restarted,
//! real PTYs kept by their holder processes (`tuic-node hold`), and holder sockets that are
//! stale, not ours, or not holders at all.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{Value, json};
use tuic_tests::{NodeProc, ipc};

const T: Duration = Duration::from_secs(60);

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

fn start(dir: &Path) -> NodeProc {
    NodeProc::start("tuic-node", &["--config-dir", &dir.to_string_lossy()], &[]).unwrap()
}

/// A node in its own process group (as a service manager or a shell job runs it), so the test
/// can `kill -9` the whole group; returns the child and its IPC socket.
fn start_group(dir: &Path) -> (std::process::Child, PathBuf) {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(tuic_tests::bin("tuic-node"))
        .arg("--config-dir")
        .arg(dir)
        .env_remove("TUIC_SOCKET")
        .env_remove("TUIC_APP_INSTANCE")
        .env_remove("TUIC_PORT")
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let socket = loop {
        let line = lines.next().expect("node exited before ready").unwrap();
        if let Some(s) = line.split_whitespace().find_map(|w| w.strip_prefix("ipc=")) {
            break PathBuf::from(s);
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, socket)
}

/// `kill -9`, waited for.
fn kill9(node: &mut NodeProc) {
    node.child.kill().unwrap();
    node.child.wait().unwrap();
}

async fn create(sock: &Path, body: Value) -> Value {
    let r = ipc(sock, "POST", "/sessions", Some(body)).await.unwrap();
    assert_eq!(r.status, 200, "{:?}", r.json());
    r.json()
}

async fn write(sock: &Path, id: &str, data: &str) {
    let r = ipc(
        sock,
        "POST",
        &format!("/sessions/{id}/write"),
        Some(json!({ "data": data })),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.json());
}

async fn lines(sock: &Path, id: &str) -> Value {
    ipc(sock, "GET", &format!("/sessions/{id}/terminal/lines"), None)
        .await
        .unwrap()
        .json()
}

/// Waits until the grid of `id` has a line containing `needle`; returns that line.
async fn grid_line(sock: &Path, id: &str, needle: &str) -> String {
    until(&format!("{needle:?} on the grid of {id}"), || async {
        let v = lines(sock, id).await;
        Ok(v["lines"].as_array().and_then(|ls| {
            ls.iter()
                .filter_map(Value::as_str)
                .find(|l| l.contains(needle))
                .map(str::to_owned)
        }))
    })
    .await
    .unwrap()
}

/// The shell pid an `echo TAG$$` printed on the grid of `id`: read once the next prompt shows,
/// so the number is whole.
async fn pid_after(sock: &Path, id: &str, tag: &str) -> u32 {
    until(
        &format!("{tag:?} and a prompt after it on {id}"),
        || async {
            let v = lines(sock, id).await;
            let ls: Vec<&str> = v["lines"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let Some(i) = ls
                .iter()
                .position(|l| l.contains(tag) && !l.contains("echo"))
            else {
                return Ok(None);
            };
            if !ls[i + 1..].iter().any(|l| !l.trim().is_empty()) {
                return Ok(None);
            }
            let rest = ls[i].split_once(tag).map_or("", |(_, r)| r);
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            Ok(digits.parse().ok())
        },
    )
    .await
    .unwrap()
}

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie still does but is not running.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

async fn gone(pid: u32) {
    until(&format!("process {pid} to end"), || async {
        Ok((!alive(pid)).then_some(()))
    })
    .await
    .unwrap();
}

fn sockets(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir.join("holders"))
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn sessions_survive_a_kill_9_of_their_node_group_and_are_re_adopted() {
    let dir = tuic_tests::config_dir(json!({}));
    let work = tempfile::tempdir().unwrap();
    let flag = work.path().join("flag");
    let done = work.path().join("done");
    let pid_b = work.path().join("pid-b");
    let (mut node, sock) = start_group(dir.path());

    // A: an interactive shell. B: a program that exits 7 once the flag appears.
    let a = create(
        &sock,
        json!({"shell": "/bin/sh", "args": ["-i"], "cwd": "/tmp", "name": "keeper", "rows": 30, "cols": 120}),
    )
    .await;
    let b = create(
        &sock,
        json!({"shell": "/bin/sh", "cwd": "/tmp", "args": ["-c", format!(
            "echo $$ > {}; while [ ! -e {} ]; do sleep 0.05; done; exit 7",
            pid_b.display(), flag.display()
        )]}),
    )
    .await;
    let a_id = a["session_id"].as_str().unwrap().to_owned();
    let b_id = b["session_id"].as_str().unwrap().to_owned();
    write(&sock, &a_id, "echo MARK-$((6*7)) pid=$$\r").await;
    let a_pid = pid_after(&sock, &a_id, "MARK-42 pid=").await;
    // Gated on the flag: about 100 KB of output written while no node is connected.
    write(
        &sock,
        &a_id,
        &format!(
            "while [ ! -e {} ]; do sleep 0.05; done; i=0; while [ $i -lt 1000 ]; do echo \"late-$i-{}\"; i=$((i+1)); done; echo LATE-$((1+1))-END; touch {}\r",
            flag.display(),
            "x".repeat(88),
            done.display()
        ),
    )
    .await;
    let before: Vec<Value> = ipc(&sock, "GET", "/sessions", None)
        .await
        .unwrap()
        .json()
        .as_array()
        .cloned()
        .unwrap();
    assert_eq!(before.len(), 2);
    let b_pid: u32 = until("B to write its pid", || async {
        Ok(std::fs::read_to_string(&pid_b)
            .ok()
            .and_then(|s| s.trim().parse().ok()))
    })
    .await
    .unwrap();

    // kill -9 of the node's whole process group: the holders are in their own sessions.
    let pgid = rustix::process::Pid::from_raw(node.id() as i32).unwrap();
    rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL).unwrap();
    node.wait().unwrap();
    assert!(alive(a_pid), "the shell died with its node");
    std::fs::write(&flag, "").unwrap();
    until(
        "A's late output to be written while the node is down",
        || async { Ok(done.exists().then_some(())) },
    )
    .await
    .unwrap();
    gone(b_pid).await;

    let node = start(dir.path());
    let sock = node.socket.clone();
    let after: Vec<Value> = ipc(&sock, "GET", "/sessions", None)
        .await
        .unwrap()
        .json()
        .as_array()
        .cloned()
        .unwrap();
    // A is back under the same names; B ended while the node was away.
    assert_eq!(after.len(), 1, "{after:?}");
    let was = before.iter().find(|r| r["session_id"] == a_id).unwrap();
    for k in ["session_id", "alias", "tuic_session", "cwd", "display_name"] {
        assert_eq!(after[0][k], was[k], "{k}");
    }
    // The screen is rebuilt from the holder's ring: the output written while the node was
    // down is on the grid, and the stream offsets continue past it (1000 lines of 96+ bytes).
    grid_line(&sock, &a_id, "LATE-2-END").await;
    grid_line(&sock, &a_id, "late-999-").await;
    let snap = ipc(
        &sock,
        "GET",
        &format!("/sessions/{a_id}/terminal/snapshot"),
        None,
    )
    .await
    .unwrap()
    .json();
    assert!(
        snap["offset"].as_u64().unwrap() > 96_000,
        "offset {}",
        snap["offset"]
    );
    assert_eq!(
        (snap["rows"].as_u64(), snap["cols"].as_u64()),
        (Some(30), Some(120))
    );
    // B's exit code is reported.
    let bl = lines(&sock, &b_id).await;
    assert_eq!(bl["exit_code"], 7, "{bl}");
    // Typing reaches the same shell.
    write(&sock, &a_id, "echo AGAIN-$((2*3)) pid=$$\r").await;
    assert_eq!(pid_after(&sock, &a_id, "AGAIN-6 pid=").await, a_pid);
    // Kill still works after the re-adoption: the shell and its holder end.
    let r = ipc(&sock, "DELETE", &format!("/sessions/{a_id}"), None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    gone(a_pid).await;
    until("the holder sockets to be removed", || async {
        Ok(sockets(dir.path()).is_empty().then_some(()))
    })
    .await
    .unwrap();
    until("the killed session to leave the list", || async {
        let left = ipc(&sock, "GET", "/sessions", None).await?.json();
        Ok((left == json!([])).then_some(()))
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_graceful_stop_ends_held_sessions() {
    let dir = tuic_tests::config_dir(json!({}));
    let mut node = start(dir.path());
    let sock = node.socket.clone();
    let a = create(
        &sock,
        json!({"shell": "/bin/sh", "args": ["-i"], "cwd": "/tmp"}),
    )
    .await;
    let id = a["session_id"].as_str().unwrap().to_owned();
    write(&sock, &id, "echo P$((1))ID=$$\r").await;
    let pid = pid_after(&sock, &id, "P1ID=").await;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(node.child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    node.child.wait().unwrap();
    gone(pid).await;
    until("the holder socket to be removed", || async {
        Ok(sockets(dir.path()).is_empty().then_some(()))
    })
    .await
    .unwrap();
    // Nothing is re-adopted by the next node.
    let node = start(dir.path());
    let rows = ipc(&node.socket, "GET", "/sessions", None)
        .await
        .unwrap()
        .json();
    assert_eq!(rows, json!([]));
}

/// Writes a held-session record naming `socket` straight into the (stopped) node's store.
fn record(store: &tuic_node::store::Store, id: &str, socket: &Path) {
    let r = tuic_node::session::held::Record {
        id: id.into(),
        tuic_session: format!("00000000-0000-4000-8000-{:0>12}", &id[id.len() - 7..]),
        alias: "tmp-1".into(),
        cwd: "/tmp".into(),
        shell: "/bin/sh".into(),
        args: Vec::new(),
        rows: 24,
        cols: 80,
        name: None,
        name_is_custom: false,
        name_from_spawn: false,
        parent_session: None,
        description: None,
        created_ms: 0,
        socket: socket.to_path_buf(),
    };
    store
        .put_held_session(id, &serde_json::to_vec(&r).unwrap())
        .unwrap();
}

fn mode(p: &Path, m: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

#[tokio::test]
async fn stale_foreign_and_garbage_holder_sockets_are_skipped() {
    use std::os::unix::net::UnixListener;
    let dir = tuic_tests::config_dir(json!({}));
    let holders = dir.path().join("holders");
    std::fs::create_dir_all(&holders).unwrap();
    let at = |id: &str| holders.join(format!("{id}.sock"));
    // Stale: a socket file nobody listens on (its holder died).
    drop(UnixListener::bind(at("pty-000000stale")).unwrap());
    mode(&at("pty-000000stale"), 0o600);
    // Open to everyone: not a socket this node made.
    let _open = UnixListener::bind(at("pty-0000000open")).unwrap();
    mode(&at("pty-0000000open"), 0o666);
    // Owned by another user (when this test may chown).
    let _other = UnixListener::bind(at("pty-000000other")).unwrap();
    mode(&at("pty-000000other"), 0o600);
    let chowned = std::os::unix::fs::chown(at("pty-000000other"), Some(65534), Some(65534)).is_ok();
    // A peer that answers the hello with garbage.
    let garbage = UnixListener::bind(at("pty-00000garbage")).unwrap();
    mode(&at("pty-00000garbage"), 0o600);
    std::thread::spawn(move || {
        use std::io::Write;
        for c in garbage.incoming() {
            let Ok(mut c) = c else { break };
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
        }
    });
    // A record whose socket does not exist at all.
    {
        let store = tuic_node::store::Store::open(&dir.path().join("state.redb")).unwrap();
        for id in [
            "pty-000000stale",
            "pty-0000000open",
            "pty-000000other",
            "pty-00000garbage",
        ] {
            record(&store, id, &at(id));
        }
        record(&store, "pty-0000missing", &at("pty-0000missing"));
    }

    let mut node = start(dir.path());
    let sock = node.socket.clone();
    let rows = ipc(&sock, "GET", "/sessions", None).await.unwrap().json();
    assert_eq!(rows, json!([]));
    let log = std::fs::read_to_string(&node.log).unwrap();
    let skipped = |id: &str, why: &str| {
        log.lines()
            .any(|l| l.contains("skipping a held session") && l.contains(id) && l.contains(why))
    };
    assert!(skipped("pty-000000stale", "stale socket"), "{log}");
    assert!(skipped("pty-0000missing", "stale socket"), "{log}");
    assert!(skipped("pty-0000000open", "mode 666"), "{log}");
    if chowned {
        assert!(skipped("pty-000000other", "owned by uid 65534"), "{log}");
    }
    assert!(skipped("pty-00000garbage", "bad peer"), "{log}");
    // The stale socket file is cleaned up; others' files are left alone.
    assert!(!at("pty-000000stale").exists());
    assert!(at("pty-0000000open").exists());
    // The node works: a new session runs and answers.
    let s = create(
        &sock,
        json!({"shell": "/bin/sh", "args": ["-i"], "cwd": "/tmp"}),
    )
    .await;
    let id = s["session_id"].as_str().unwrap().to_owned();
    write(&sock, &id, "echo fine-$((4+4))\r").await;
    grid_line(&sock, &id, "fine-8").await;
    // The bad records were forgotten: the next start skips nothing.
    kill9(&mut node);
    let node = start(dir.path());
    let log = std::fs::read_to_string(&node.log).unwrap();
    assert!(!log.contains("skipping a held session"), "{log}");
    let rows = ipc(&node.socket, "GET", "/sessions", None)
        .await
        .unwrap()
        .json();
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
}

#[tokio::test]
async fn garbage_on_a_holder_socket_is_refused_and_the_session_carries_on() {
    use std::io::{Read, Write};
    let dir = tuic_tests::config_dir(json!({}));
    let mut node = start(dir.path());
    let sock = node.socket.clone();
    let a = create(
        &sock,
        json!({"shell": "/bin/sh", "args": ["-i"], "cwd": "/tmp"}),
    )
    .await;
    let id = a["session_id"].as_str().unwrap().to_owned();
    let holder = sockets(dir.path()).pop().expect("a holder socket");
    // Not a hello, then a frame claiming 4 GiB: each connection is dropped, nothing is sent.
    for junk in [
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        vec![b'h', 0xff, 0xff, 0xff, 0xff],
    ] {
        let mut c = std::os::unix::net::UnixStream::connect(&holder).unwrap();
        c.write_all(&junk).unwrap();
        let mut got = Vec::new();
        // Closed (or reset, with the junk unread) by the holder.
        let _ = c.read_to_end(&mut got);
        assert!(got.is_empty(), "the holder answered junk: {got:?}");
    }
    // The node's own connection was not displaced: typing and output still work.
    write(&sock, &id, "echo still-$((8+1))\r").await;
    grid_line(&sock, &id, "still-9").await;
    // And a later node still re-adopts it.
    kill9(&mut node);
    let node = start(dir.path());
    write(&node.socket, &id, "echo again-$((8+2))\r").await;
    grid_line(&node.socket, &id, "again-10").await;
}
