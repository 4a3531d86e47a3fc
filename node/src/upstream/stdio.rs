//! The stdio upstream client: a child process speaking newline-delimited JSON-RPC on stdin and
//! stdout. Spec "Stdio transport".
//!
//! One reader task parses stdout line by line and hands each message to the id-matching core
//! (notifications between a request and its answer are skipped, never mistaken for it; a
//! line that is not JSON is counted and skipped); one task forwards stderr to the log ring
//! (`source = "upstream"`); one waits for the exit and fails every waiting request with the
//! exit status. The child runs in its own process group, killed with the node or when the
//! upstream is stopped; `~` in command, arguments and cwd is expanded.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio_util::sync::CancellationToken;

use super::client::{ClientEvent, ProgressSink, RpcCore, UpstreamError};
use crate::paths::expand_tilde;

/// Longest stdout line accepted (a big tool result still fits); longer lines are dropped.
const MAX_LINE: usize = 32 * 1024 * 1024;
/// Longest stderr line kept in the log ring.
const MAX_STDERR_LINE: usize = 2_000;

/// A running stdio upstream.
#[derive(Debug)]
pub struct StdioClient {
    core: Arc<RpcCore>,
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    /// Fired when the child is gone; `exit` says how.
    dead: CancellationToken,
    exit: Arc<Mutex<Option<String>>>,
    /// Asks the waiter task to kill the child.
    kill: CancellationToken,
    pid: Option<u32>,
    protocol: Mutex<String>,
    /// Lines on stdout that were not JSON, and the last one (for the status).
    pub(crate) garbage: Arc<(AtomicU64, Mutex<Option<String>>)>,
}

impl StdioClient {
    /// Spawns the child. Returns at once; the handshake is the caller's.
    pub fn spawn(
        upstream: &str,
        command: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
        cwd: Option<&str>,
        events: tokio::sync::mpsc::Sender<ClientEvent>,
    ) -> Result<Self, UpstreamError> {
        let program = expand_tilde(command);
        let mut cmd = Command::new(&program);
        cmd.args(args.iter().map(|a| expand_tilde(a)))
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(d) = cwd {
            cmd.current_dir(expand_tilde(d));
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| UpstreamError::Transport(format!("starting {program:?} failed: {e}")))?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let core = Arc::new(RpcCore::new(upstream, events));
        let stdin = Arc::new(tokio::sync::Mutex::new(stdin));
        let dead = CancellationToken::new();
        let kill = CancellationToken::new();
        let exit = Arc::new(Mutex::new(None));
        let garbage = Arc::new((AtomicU64::new(0), Mutex::new(None)));

        // stdout: the protocol.
        let (c, w, g) = (core.clone(), stdin.clone(), garbage.clone());
        let name = upstream.to_owned();
        tokio::spawn(async move {
            let mut r = BufReader::with_capacity(64 * 1024, stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match read_bounded_line(&mut r, &mut line).await {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(source = "upstream", upstream = %name, error = %e, "reading upstream stdout");
                        break;
                    }
                }
                let text = String::from_utf8_lossy(&line);
                let text = text.trim();
                if text.is_empty() {
                    continue;
                }
                match serde_json::from_str::<Value>(text) {
                    Ok(msg) => {
                        if let Some(reply) = c.incoming(msg) {
                            write_line(&w, &reply).await;
                        }
                    }
                    Err(_) => {
                        let n = g.0.fetch_add(1, Ordering::Relaxed) + 1;
                        let excerpt: String = text.chars().take(200).collect();
                        if n <= 3 {
                            tracing::warn!(source = "upstream", upstream = %name, line = %excerpt, "upstream wrote a line that is not JSON-RPC; skipped");
                        }
                        *g.1.lock().unwrap_or_else(|p| p.into_inner()) = Some(excerpt);
                    }
                }
            }
        });
        // stderr: the upstream's own log, into ours.
        let name = upstream.to_owned();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                let l: String = l.chars().take(MAX_STDERR_LINE).collect();
                tracing::info!(source = "upstream", upstream = %name, stream = "stderr", line = %l, "upstream stderr");
            }
        });
        // The waiter: exit status, or a kill on request.
        let (c, d, x, k) = (core.clone(), dead.clone(), exit.clone(), kill.clone());
        let name = upstream.to_owned();
        tokio::spawn(async move {
            let status = tokio::select! {
                s = child.wait() => s,
                _ = k.cancelled() => {
                    kill_group(pid);
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            let why = match status {
                Ok(s) => format!("the upstream process exited ({s})"),
                Err(e) => format!("waiting for the upstream process failed: {e}"),
            };
            tracing::info!(source = "upstream", upstream = %name, why = %why, "upstream process ended");
            *x.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
            c.fail_all(&why);
            d.cancel();
        });
        Ok(Self {
            core,
            stdin,
            dead,
            exit,
            kill,
            pid,
            protocol: Mutex::new(String::new()),
            garbage,
        })
    }

    /// One request with a deadline. A timed-out request is cancelled upstream.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        progress: Option<(Value, ProgressSink)>,
    ) -> Result<Value, UpstreamError> {
        if self.dead.is_cancelled() {
            return Err(UpstreamError::Closed(self.exit_reason()));
        }
        let (id, rx, msg) = self.core.start(method, params, progress);
        let _forget = self.core.finish_on_drop(id);
        if !write_line(&self.stdin, &msg).await {
            self.core.finish(id);
            return Err(UpstreamError::Closed(self.exit_reason()));
        }
        let r = tokio::time::timeout(timeout, rx).await;
        self.core.finish(id);
        match r {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(UpstreamError::Closed(self.exit_reason())),
            Err(_) => {
                let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": id, "reason": "timed out in the tuic proxy"}});
                write_line(&self.stdin, &cancel).await;
                Err(UpstreamError::Timeout(timeout.as_millis() as u64))
            }
        }
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Value) -> bool {
        write_line(
            &self.stdin,
            &json!({"jsonrpc": "2.0", "method": method, "params": params}),
        )
        .await
    }

    /// Resolves when the child has exited; the reason.
    pub async fn closed(&self) -> String {
        self.dead.cancelled().await;
        self.exit_reason()
    }

    fn exit_reason(&self) -> String {
        self.exit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| "the upstream process closed its stdin".into())
    }

    /// Closes stdin, kills the process group, and waits (bounded) for the exit.
    pub async fn shutdown(&self) {
        self.stdin.lock().await.take();
        self.kill.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.dead.cancelled()).await;
    }

    /// The negotiated revision.
    pub fn protocol(&self) -> String {
        self.protocol
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_protocol(&self, v: &str) {
        *self.protocol.lock().unwrap_or_else(|p| p.into_inner()) = v.to_owned();
    }

    /// The child's pid.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Stdout lines that were not JSON so far, and the last one.
    pub fn garbage(&self) -> (u64, Option<String>) {
        (
            self.garbage.0.load(Ordering::Relaxed),
            self.garbage
                .1
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        self.kill.cancel();
    }
}

fn kill_group(pid: Option<u32>) {
    let Some(pgid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    else {
        return;
    };
    let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
}

async fn write_line(stdin: &tokio::sync::Mutex<Option<ChildStdin>>, msg: &Value) -> bool {
    let mut bytes = serde_json::to_vec(msg).unwrap_or_default();
    bytes.push(b'\n');
    let mut g = stdin.lock().await;
    let Some(w) = g.as_mut() else {
        return false;
    };
    let ok = w.write_all(&bytes).await.is_ok() && w.flush().await.is_ok();
    if !ok {
        g.take();
    }
    ok
}

/// Reads one `\n`-terminated line of at most [`MAX_LINE`] bytes; a longer one is consumed
/// and replaced by an empty line.
async fn read_bounded_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    out: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let mut total = 0;
    let mut overflow = false;
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok(total);
        }
        let (chunk, done) = match memchr::memchr(b'\n', buf) {
            Some(i) => (&buf[..=i], true),
            None => (buf, false),
        };
        let n = chunk.len();
        if !overflow && out.len() + n <= MAX_LINE {
            out.extend_from_slice(chunk);
        } else {
            overflow = true;
            out.clear();
        }
        total += n;
        r.consume(n);
        if done {
            return Ok(total);
        }
    }
}
