//! Harness of the bridge and CLI tests: real `tuic-node`/`tuic-bridge` processes with a
//! sandboxed environment, spoken to over stdio and the IPC socket.
//!
//! - [`bin`]: the path of a workspace binary (built by `cargo build --workspace --bins`);
//! - [`NodeProc`]: a real `tuic-node` with a temp config dir, started and awaited on its
//!   `ready` line, killed on drop;
//! - [`BridgeProc`]: a real `tuic-bridge` spoken to over stdio, line by line;
//! - [`fake`]: scripted IPC peers (a hostile HTTP server, a minimal MCP endpoint) for what a
//!   real node cannot be made to do.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

/// The directory holding the workspace's binaries (`target/debug`), found from the test
/// executable (`target/debug/deps/<test>`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("target/debug").to_path_buf()
}

/// Path of a workspace binary; panics with a hint when it has not been built.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace --bins` first",
        p.display()
    );
    p
}

/// A command with a clean tuic environment: no inherited socket, instance, session or
/// config dir, and `HOME`/`TMPDIR` inside `sandbox`, so a test never meets a real node.
pub fn clean_command(program: &Path, sandbox: &Path) -> Command {
    let mut c = Command::new(program);
    for v in [
        "TUIC_SOCKET",
        "TUIC_APP_INSTANCE",
        "TUIC_SESSION",
        "TUIC_CONFIG_DIR",
        "XDG_CONFIG_HOME",
        "TUIC_PORT",
    ] {
        c.env_remove(v);
    }
    c.env("HOME", sandbox.join("home"));
    c.env("TMPDIR", sandbox.join("tmp"));
    std::fs::create_dir_all(sandbox.join("home")).expect("home");
    std::fs::create_dir_all(sandbox.join("tmp")).expect("tmp");
    c
}

/// A running `tuic-node`.
pub struct NodeProc {
    child: Child,
    /// The IPC socket it printed in its ready line.
    pub socket: PathBuf,
}

impl NodeProc {
    /// Starts `tuic-node --config-dir <config_dir> [--instance id]` and waits (≤ 20 s) for
    /// its `ready` line.
    pub fn start(
        sandbox: &Path,
        config_dir: &Path,
        instance: Option<&str>,
    ) -> anyhow::Result<Self> {
        let mut cmd = clean_command(&bin("tuic-node"), sandbox);
        cmd.arg("--config-dir").arg(config_dir);
        if let Some(i) = instance {
            cmd.arg("--instance").arg(i);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().context("spawning tuic-node")?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains(" ready ipc=") => {
                    let sock = line
                        .split_whitespace()
                        .find_map(|w| w.strip_prefix("ipc="))
                        .context("ipc= in ready line")?;
                    return Ok(Self {
                        child,
                        socket: PathBuf::from(sock),
                    });
                }
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("tuic-node printed no ready line within 20 s");
                }
            }
        }
    }

    /// Kills the node abruptly (SIGKILL), like a crash, and reaps it.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the real `tuic` CLI with `args` in the clean environment plus `env`.
pub fn tuic(sandbox: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = clean_command(&bin("tuic"), sandbox);
    cmd.args(args).envs(env.iter().copied());
    cmd.stdin(Stdio::null());
    cmd.output().expect("running tuic")
}

/// A running `tuic-bridge` spoken to as an MCP client would.
pub struct BridgeProc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    /// Messages read but not yet claimed by [`BridgeProc::response`].
    pub unclaimed: VecDeque<Value>,
}

impl BridgeProc {
    /// Starts `tuic-bridge args` in the clean environment plus `env`.
    pub fn start(sandbox: &Path, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let mut cmd = clean_command(&bin("tuic-bridge"), sandbox);
        cmd.args(args).envs(env.iter().copied());
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().context("spawning tuic-bridge")?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            unclaimed: VecDeque::new(),
        })
    }

    /// Writes one message line.
    pub fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let mut line = serde_json::to_vec(msg).expect("json");
        line.push(b'\n');
        stdin.write_all(&line).expect("writing to the bridge");
        stdin.flush().expect("flushing the bridge's stdin");
    }

    /// Waits (≤ `within`) for the response with `id`; other messages stay in `unclaimed`.
    pub fn response(&mut self, id: &Value, within: Duration) -> anyhow::Result<Value> {
        if let Some(pos) = self
            .unclaimed
            .iter()
            .position(|m| m.get("id") == Some(id) && m.get("method").is_none())
        {
            return Ok(self.unclaimed.remove(pos).expect("present"));
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(m) if m.get("id") == Some(id) && m.get("method").is_none() => return Ok(m),
                Ok(m) => self.unclaimed.push_back(m),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!("no response to id {id} within {within:?}")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    bail!("the bridge closed stdout before answering id {id}")
                }
            }
        }
    }

    /// Sends a request and waits for its response.
    pub fn call(&mut self, msg: &Value, within: Duration) -> anyhow::Result<Value> {
        self.send(msg);
        self.response(&msg["id"], within)
    }

    /// Waits (≤ `within`) for a notification with `method`, looking at unclaimed first.
    pub fn notification(&mut self, method: &str, within: Duration) -> anyhow::Result<Value> {
        let is = |m: &Value| m.get("method").and_then(Value::as_str) == Some(method);
        if let Some(pos) = self.unclaimed.iter().position(is) {
            return Ok(self.unclaimed.remove(pos).expect("present"));
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(m) if is(&m) => return Ok(m),
                Ok(m) => self.unclaimed.push_back(m),
                Err(_) => bail!("no {method} within {within:?}"),
            }
        }
    }

    /// Closes stdin (EOF), then waits (≤ `within`) for the bridge to exit; returns every
    /// message it wrote after that and its exit status.
    pub fn finish(
        mut self,
        within: Duration,
    ) -> anyhow::Result<(Vec<Value>, std::process::ExitStatus)> {
        drop(self.stdin.take());
        let deadline = Instant::now() + within;
        let mut rest: Vec<Value> = self.unclaimed.drain(..).collect();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(m) => rest.push(m),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!("the bridge did not exit within {within:?}")
                }
            }
        }
        let status = self.child.wait()?;
        Ok((rest, status))
    }
}

impl Drop for BridgeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Retries `f` until it returns `Some` or `within` passes, pausing `every` between tries.
/// For conditions with no event to wait on (a restarted node becoming reachable again).
pub fn poll<T>(within: Duration, every: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(every);
    }
}
