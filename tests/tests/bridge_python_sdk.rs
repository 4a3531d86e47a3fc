//! End-to-end: the official Python `mcp` SDK's stdio client drives `tuic-bridge`, first against
//! a scripted endpoint that restarts, then against the real node across a restart.
//!
//! The SDK is installed once by `tests/clients/setup.sh` (a venv in the clients cache, the
//! same one `mcp_sdk_clients.rs` uses); `TUIC_TEST_PYTHON` overrides the interpreter.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use tuic_tests::bridge::{NodeProc, bin, clean_command};
use tuic_tests::fake::FakeMcp;

const SESSION: &str = "0f8c1d52-7a43-4e29-9a3c-5b6f1e2d7c90";

/// The interpreter with the `mcp` SDK: `TUIC_TEST_PYTHON`, else the venv of
/// `tests/clients/setup.sh` (installed on first use).
fn python() -> String {
    if let Ok(p) = std::env::var("TUIC_TEST_PYTHON") {
        return p;
    }
    tuic_tests::sdk_clients().python
}

struct Sdk {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

impl Sdk {
    fn start(sandbox: &Path, env: &[(&str, &str)], tool: &str, args: Value) -> Self {
        let python = python();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/mcp_sdk_client.py");
        let mut cmd: Command = clean_command(Path::new(&python), sandbox);
        cmd.arg(script)
            .arg(bin("tuic-bridge"))
            .arg(tool)
            .arg(args.to_string())
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("python with the mcp SDK");
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        Self { child, lines: rx }
    }

    fn next(&self, event: &str, within: Duration) -> Value {
        let v = self
            .lines
            .recv_timeout(within)
            .unwrap_or_else(|_| panic!("no {event}"));
        assert_eq!(v["event"], event, "{v}");
        v
    }

    fn restarted(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Sdk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn python_sdk_through_the_bridge_survives_a_restart_of_a_scripted_endpoint() {
    let sandbox = tempfile::tempdir().unwrap();
    let sock = sandbox.path().join("mcp.sock");
    let first = FakeMcp::start(&sock, 1);
    let s = sock.display().to_string();
    let mut sdk = Sdk::start(
        sandbox.path(),
        &[("TUIC_SOCKET", &s), ("TUIC_SESSION", SESSION)],
        "echo",
        json!({"action": "list"}),
    );
    assert_eq!(
        sdk.next("initialized", Duration::from_secs(20))["server"],
        "fake-mcp"
    );
    assert_eq!(
        sdk.next("tools", Duration::from_secs(10))["names"][0],
        "echo"
    );
    let call = sdk.next("call", Duration::from_secs(10));
    assert_eq!(call["is_error"], false, "{call}");
    first.stop();
    let second = FakeMcp::start(&sock, 2);
    sdk.restarted();
    let after = sdk.next("after_restart", Duration::from_secs(20));
    assert_eq!(after["is_error"], false, "{after}");
    assert!(after["elapsed"].as_f64().unwrap() < 10.0, "{after}");
    let seen: Value = serde_json::from_str(after["text"].as_str().unwrap()).unwrap();
    assert_eq!(seen["x_tuic_session"], SESSION);
    assert_eq!(seen["epoch"], 2);
    assert!(
        second
            .log()
            .iter()
            .any(|r| r.rpc_method() == Some("initialize"))
    );
}

#[test]
fn python_sdk_acceptance_against_the_real_node() {
    let sandbox = tempfile::tempdir().unwrap();
    let cfg = sandbox.path().join("cfg");
    let node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    let c = cfg.display().to_string();
    let mut sdk = Sdk::start(
        sandbox.path(),
        &[("TUIC_CONFIG_DIR", &c), ("TUIC_SESSION", SESSION)],
        "session",
        json!({"action": "list"}),
    );
    sdk.next("initialized", Duration::from_secs(20));
    let tools = sdk.next("tools", Duration::from_secs(10));
    assert!(
        tools["names"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "session"),
        "{tools}"
    );
    let call = sdk.next("call", Duration::from_secs(10));
    assert_eq!(call["is_error"], false, "{call}");
    node.kill();
    let _node = NodeProc::start(sandbox.path(), &cfg, None).unwrap();
    sdk.restarted();
    let after = sdk.next("after_restart", Duration::from_secs(20));
    assert_eq!(after["is_error"], false, "{after}");
    assert!(after["elapsed"].as_f64().unwrap() < 10.0, "{after}");
}
