//! Shared harness for tuic's end-to-end tests: starting real binaries, waiting for their
//! `ready` line, and talking HTTP to them over the IPC socket.
//!
//! The binaries are the ones cargo built next to the test executables (`.ci/run` builds
//! them with `cargo build --workspace --bins` before running the tests).

pub mod acp;
pub mod agent;
pub mod bed;
pub mod bench_acp;
pub mod bench_attach;
pub mod bench_fed;
pub mod bench_fedscale;
pub mod bench_floor;
pub mod bench_mcp;
pub mod bench_notify;
pub mod bench_outbox;
pub mod bench_progress;
pub mod bench_quic;
pub mod bench_review;
pub mod bench_stories;
pub mod bench_upload;
pub mod bench_upstream;
pub mod bench_worktrees;
pub mod bridge;
pub mod fake;
pub mod fed;
pub mod github_replay;
pub mod impair;
pub mod netns;
pub mod progress;
pub mod receiver;
pub mod records;
pub mod scale;
pub mod term;
pub mod webdriver;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;

/// CPU seconds (user + system) of a process itself, children excluded.
pub fn cpu_secs(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').context("stat")?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the comm field.
    let ticks: f64 = f[11].parse::<f64>()? + f[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}

/// The `p` quantile (0..=1, nearest rank) of `v`, which it sorts.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Percent-encodes `s` for a query value or a path segment (unreserved bytes kept).
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A process's resident set in bytes (`VmRSS` of `/proc/<pid>/status`; children excluded).
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// `tuic-node set-password` for the config dir `dir`; returns what it printed on stderr.
pub fn set_password(dir: &Path, password: &str) -> String {
    let (code, _, err) = run_with_stdin(
        "tuic-node",
        &[
            "set-password",
            "--config-dir",
            dir.to_str().expect("utf-8 dir"),
        ],
        &format!("{password}\n"),
    )
    .expect("set-password runs");
    assert_eq!(code, 0, "{err}");
    err
}

/// A node on the config dir `dir` with remote access on loopback, on a port of the system's
/// choosing (`NodeProc::tcp`).
pub fn remote_node(dir: &Path) -> NodeProc {
    NodeProc::start(
        "tuic-node",
        &[
            "--config-dir",
            dir.to_str().expect("utf-8 dir"),
            "--remote-access",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
        ],
        &[],
    )
    .expect("node starts")
}

/// Path of a workspace binary built beside the running test.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // Tests run from target/<profile>/deps/, the benchmark runner from target/<profile>/.
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace --bins` first",
        p.display()
    );
    p
}

/// `tests/clients/`: the SDK client scripts and their installer.
pub fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

/// The official MCP SDK clients, installed once by `tests/clients/setup.sh` (PyPI and npm).
#[derive(Debug, Clone)]
pub struct SdkClients {
    /// A Python interpreter with the `mcp` package.
    pub python: String,
    /// A folder whose `node_modules` holds `@modelcontextprotocol/sdk`.
    pub ts_dir: PathBuf,
}

/// Installs (first use) and locates the SDK clients. Blocking.
pub fn sdk_clients() -> SdkClients {
    let out = Command::new("bash")
        .arg(clients_dir().join("setup.sh"))
        .output()
        .expect("running tests/clients/setup.sh");
    assert!(
        out.status.success(),
        "installing the MCP SDK clients failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("{k} missing in {text}"))
            .to_owned()
    };
    SdkClients {
        python: get("PYTHON="),
        ts_dir: PathBuf::from(get("TSDIR=")),
    }
}

/// A temp config dir whose `config.json` uses the file secret store plus `extra` keys, so a
/// test never touches the user's keyring.
pub fn config_dir(extra: serde_json::Value) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("temp dir");
    let mut cfg = serde_json::json!({"secret_store": "file"});
    if let Some(e) = extra.as_object() {
        for (k, v) in e {
            cfg[k] = v.clone();
        }
    }
    std::fs::write(d.path().join("config.json"), cfg.to_string()).expect("config.json");
    d
}

/// A running node (or hub) process, killed on drop.
#[derive(Debug)]
pub struct NodeProc {
    /// The child process.
    pub child: Child,
    /// The IPC socket from the ready line.
    pub socket: PathBuf,
    /// The TCP address from the ready line, if remote access started.
    pub tcp: Option<std::net::SocketAddr>,
    /// File receiving the process's stderr log.
    pub log: PathBuf,
}

impl NodeProc {
    /// Starts `binary` with `args` and waits (bounded) for its ready line.
    pub fn start(binary: &str, args: &[&str], envs: &[(&str, &str)]) -> anyhow::Result<Self> {
        Self::start_in(None, binary, args, envs)
    }

    /// Like [`NodeProc::start`], inside network namespace `netns` when given.
    pub fn start_in(
        netns: Option<&str>,
        binary: &str,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let log =
            std::env::temp_dir().join(format!("tuic-test-{}-{}.log", std::process::id(), unique()));
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(bin(binary));
                c
            }
            None => Command::new(bin(binary)),
        };
        cmd.args(args)
            .env_remove("TUIC_SOCKET")
            .env_remove("TUIC_APP_INSTANCE")
            .env_remove("TUIC_PORT")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?);
        let mut child = cmd.spawn().with_context(|| format!("spawning {binary}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains(" ready ipc=") {
                    let _ = tx.send(line);
                }
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                bail!(
                    "{binary} did not become ready ({status:?}); log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
        };
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .map(str::to_owned)
                .unwrap_or_default()
        };
        let socket = PathBuf::from(field("ipc="));
        let tcp = field("tcp=").parse().ok();
        Ok(Self {
            child,
            socket,
            tcp,
            log,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).context("pid")?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)?;
        self.wait_exit(Duration::from_secs(15))
    }

    /// Waits (bounded) for the process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait()? {
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!("process did not exit within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The stderr log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A response read whole.
#[derive(Debug)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: hyper::HeaderMap,
    /// Body bytes.
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// One HTTP/1.1 request over a Unix socket.
pub async fn ipc(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> anyhow::Result<Reply> {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost");
    let bytes = match body {
        Some(v) => {
            b = b.header("content-type", "application/json");
            Bytes::from(v.to_string())
        }
        None => Bytes::new(),
    };
    ipc_request(socket, b.body(Full::new(bytes))?).await
}

/// Sends a prepared request over a Unix socket and reads the whole response.
pub async fn ipc_request(socket: &Path, req: Request<Full<Bytes>>) -> anyhow::Result<Reply> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .with_context(|| format!("connecting {}", socket.display()))?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let resp = send.send_request(req).await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// Opens a streaming GET over a Unix socket (SSE) and returns the live response.
pub async fn ipc_stream(
    socket: &Path,
    path: &str,
) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
    let stream = tokio::net::UnixStream::connect(socket).await?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))?;
    Ok(send.send_request(req).await?)
}

/// TCP ports on which process `pid` has a listening socket (from `/proc`).
pub fn listening_tcp_ports(pid: u32) -> Vec<u16> {
    let mut inodes = std::collections::HashSet::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in rd.flatten() {
            if let Ok(t) = std::fs::read_link(e.path()) {
                let t = t.to_string_lossy().into_owned();
                if let Some(i) = t.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                    inodes.insert(i.to_owned());
                }
            }
        }
    }
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // state 0A = LISTEN; field 9 is the inode.
            if f.len() > 9
                && f[3] == "0A"
                && inodes.contains(f[9])
                && let Some(port) = f[1]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
            {
                ports.push(port);
            }
        }
    }
    ports
}

/// Runs a binary to completion with `stdin` text, returning (status, stdout, stderr).
pub fn run_with_stdin(
    binary: &str,
    args: &[&str],
    stdin: &str,
) -> anyhow::Result<(i32, String, String)> {
    use std::io::Write;
    let mut child = Command::new(bin(binary))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())?;
    let out = child.wait_with_output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}
