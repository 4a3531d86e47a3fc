//! End-to-end tests of the `tuic` CLI against a real `tuic-node` and hostile IPC peers.

use std::path::Path;
use std::time::{Duration, Instant};

use tuic_tests::bridge::{NodeProc, tuic};
use tuic_tests::fake::{Hostile, HostileServer};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn config_env(dir: &Path) -> Vec<(&'static str, String)> {
    vec![("TUIC_CONFIG_DIR", dir.display().to_string())]
}

fn run(sandbox: &Path, args: &[&str], env: &[(&'static str, String)]) -> (i32, String, String) {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = tuic(sandbox, args, &env);
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[test]
fn status_tells_not_running_from_running_and_survives_a_restart() {
    let sandbox = tempfile::tempdir().unwrap();
    let cfg = sandbox.path().join("cfg");
    let env = config_env(&cfg);

    let (code, _, err) = run(sandbox.path(), &["status"], &env);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("not running"), "{err}");
    assert!(err.contains("mcp.sock"), "names the socket: {err}");

    let node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    let (code, out, err) = run(sandbox.path(), &["status"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("tuic node running (default instance)"),
        "{out}"
    );
    assert!(out.contains(&node.socket.display().to_string()), "{out}");
    let (code, out, _) = run(sandbox.path(), &["status", "--json"], &env);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["protocol_version"], 1);

    // A crash leaves the socket file behind: connection refused is still "not running".
    node.kill();
    let (code, _, err) = run(sandbox.path(), &["status"], &env);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("not running"), "{err}");

    let _node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    let (code, out, err) = run(sandbox.path(), &["status"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("running"), "{out}");
}

#[test]
fn instances_never_cross() {
    let sandbox = tempfile::tempdir().unwrap();
    let cfg_a = sandbox.path().join("a");
    let node_a = NodeProc::start(sandbox.path(), &cfg_a, Some("a")).unwrap();
    let tmp = sandbox.path().join("tmp");
    assert!(
        node_a.socket.starts_with(&tmp),
        "{}",
        node_a.socket.display()
    );
    // The default instance's config dir exists with a socket-less state; b has no node.
    let none: Vec<(&'static str, String)> = vec![];

    let (code, out, err) = run(sandbox.path(), &["--instance", "a", "status"], &none);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("instance \"a\""), "{out}");

    let with_env = vec![("TUIC_APP_INSTANCE", "a".to_string())];
    let (code, _, err) = run(sandbox.path(), &["status"], &with_env);
    assert_eq!(code, 0, "{err}");

    // b and the default instance are not running, and never reach a.
    let (code, _, err) = run(sandbox.path(), &["--instance", "b", "status"], &none);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("instance \"b\""), "{err}");
    let (code, _, err) = run(sandbox.path(), &["status"], &none);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("default instance"), "{err}");
    // The flag beats the environment.
    let (code, _, _) = run(sandbox.path(), &["--instance", "b", "status"], &with_env);
    assert_eq!(code, 3);

    // An explicit TUIC_SOCKET wins over the instance selection.
    let sock = vec![("TUIC_SOCKET", node_a.socket.display().to_string())];
    let (code, _, err) = run(sandbox.path(), &["--instance", "b", "status"], &sock);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn routes_the_node_lacks_are_named_never_faked() {
    let sandbox = tempfile::tempdir().unwrap();
    let cfg = sandbox.path().join("cfg");
    let env = config_env(&cfg);
    let _node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();

    // `sessions` lists the node's sessions (header row).
    let (code, out, err) = run(sandbox.path(), &["sessions"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("HOST"), "{out}");

    // `open` goes through MCP `repo action=add` and registers the canonical directory; a
    // repeat keeps the record.
    let repo = tempfile::tempdir().unwrap();
    let canon = repo.path().canonicalize().unwrap();
    let (code, out, err) = run(
        sandbox.path(),
        &["open", repo.path().to_str().unwrap()],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    let added: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(added["repo"]["path"], canon.to_str().unwrap(), "{out}");
    assert_eq!(added["created"], true, "{out}");
    let (code, out, err) = run(
        sandbox.path(),
        &["open", repo.path().to_str().unwrap()],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    let again: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(again["created"], false, "{out}");

    let (code, _, err) = run(sandbox.path(), &["open", "/definitely/not/here"], &env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("/definitely/not/here"), "{err}");

    let (code, _, err) = run(sandbox.path(), &["story", "{not json"], &env);
    assert_eq!(code, 2, "{err}");

    // A plain node is not a hub: `cp` says so (exit 4) instead of pretending.
    let (code, _, err) = run(sandbox.path(), &["cp", "/etc/hostname", "conn:/repo"], &env);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("not a tuic hub"), "{err}");
    let (code, _, _) = run(sandbox.path(), &["cp", "/etc/hostname", "nocolon"], &env);
    assert_eq!(code, 2);
}

fn assert_invalid_data_fast(script: Hostile) {
    let sandbox = tempfile::tempdir().unwrap();
    let sock = sandbox.path().join("hostile.sock");
    let _server = HostileServer::start(&sock, script);
    let env = vec![("TUIC_SOCKET", sock.display().to_string())];
    let started = Instant::now();
    let (code, _, err) = run(sandbox.path(), &["status", "--timeout", "30"], &env);
    let took = started.elapsed();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("invalid response"), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}: {err}");
}

#[test]
fn forty_interim_responses_are_invalid_data_within_a_second() {
    assert_invalid_data_fast(Hostile::Once(b"HTTP/1.1 100 Continue\r\n\r\n".repeat(40)));
}

#[test]
fn endless_interim_responses_are_invalid_data_within_a_second() {
    assert_invalid_data_fast(Hostile::Forever(
        b"HTTP/1.1 102 Processing\r\n\r\n".to_vec(),
    ));
}

#[test]
fn seventy_kib_of_headers_is_invalid_data_within_a_second() {
    let mut resp = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..1000 {
        resp.extend_from_slice(format!("x-pad-{i:04}: {}\r\n", "a".repeat(60)).as_bytes());
    }
    assert!(resp.len() > 70 * 1024);
    assert_invalid_data_fast(Hostile::Once(resp));
}

#[test]
fn truncated_chunked_body_fails_cleanly() {
    let sandbox = tempfile::tempdir().unwrap();
    let sock = sandbox.path().join("hostile.sock");
    // The server closes after half a chunk: a clean EOF error, not a hang.
    let _server = HostileServer::start(
        &sock,
        Hostile::ThenClose(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\nabc".to_vec(),
        ),
    );
    let env = vec![("TUIC_SOCKET", sock.display().to_string())];
    let (code, _, err) = run(sandbox.path(), &["status"], &env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("closed mid-response"), "{err}");
}

#[test]
fn bad_chunk_size_fails_cleanly() {
    let sandbox = tempfile::tempdir().unwrap();
    let sock = sandbox.path().join("hostile.sock");
    let _server = HostileServer::start(
        &sock,
        Hostile::Once(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n".to_vec()),
    );
    let env = vec![("TUIC_SOCKET", sock.display().to_string())];
    let (code, _, err) = run(sandbox.path(), &["status"], &env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("invalid chunk size"), "{err}");
}

#[test]
fn content_length_answer_completes_while_the_peer_holds_the_connection() {
    let sandbox = tempfile::tempdir().unwrap();
    let sock = sandbox.path().join("slowclose.sock");
    let body = r#"{"ok":true,"uptime_secs":5,"session_count":2,"protocol_version":1}"#;
    let _server = HostileServer::start(
        &sock,
        Hostile::Once(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        ),
    );
    let env = vec![("TUIC_SOCKET", sock.display().to_string())];
    let started = Instant::now();
    let (code, out, err) = run(sandbox.path(), &["status"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sessions: 2"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// `--config-dir` (and `--instance`) go before or after the subcommand, for `tuic-node`,
/// `tuic-hub` and `tuic` alike; serve's own flags before another subcommand are refused
/// rather than ignored.
#[test]
fn global_flags_go_before_or_after_the_subcommand() {
    use std::io::Write;
    let sandbox = tempfile::tempdir().unwrap();
    let cfg = sandbox.path().join("cfg");
    let c = cfg.to_str().unwrap();
    let node_cmd = |binary: &str, args: &[&str], stdin: &str| {
        let mut cmd = tuic_tests::bridge::clean_command(&tuic_tests::bin(binary), sandbox.path());
        let mut child = cmd
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        (
            o.status.code().unwrap_or(-1),
            text(&o.stdout),
            text(&o.stderr),
        )
    };
    let (code, _, err) = node_cmd("tuic-node", &["--config-dir", c, "set-password"], "pw\n");
    assert_eq!(code, 0, "{err}");
    assert!(cfg.join("config.json").exists(), "{err}");
    let (code, before, err) = node_cmd("tuic-node", &["--config-dir", c, "token"], "");
    assert_eq!(code, 0, "{err}");
    let (code, after, err) = node_cmd("tuic-node", &["token", "--config-dir", c], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(before, after, "one config dir, one token");
    let (code, hub, err) = node_cmd("tuic-hub", &["--config-dir", c, "token"], "");
    assert_eq!((code, hub), (0, before), "{err}");
    let (code, _, err) = node_cmd("tuic-node", &["--port", "4000", "token"], "");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("belong to `serve`"), "{err}");

    let node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    for args in [["--config-dir", c, "status"], ["status", "--config-dir", c]] {
        let (code, out, err) = run(sandbox.path(), &args, &[]);
        assert_eq!(code, 0, "tuic {args:?}: {err}");
        assert!(out.contains(&node.socket.display().to_string()), "{out}");
    }
}
