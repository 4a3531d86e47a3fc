//! Harness for the terminal-core tests and the benchmark runner.
//!
//! `Node` starts `tuic-node` with a temporary config dir and stops it on drop; `Node::http`
//! speaks HTTP/1.1 over the IPC socket; `Node::ws` opens a WebSocket over it. `records` holds
//! the deterministic byte streams the `producer` helper binary writes, so tests can compare.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::Message;

/// A WebSocket over the node's Unix socket.
pub type Ws = tokio_tungstenite::WebSocketStream<UnixStream>;

/// The directory holding the workspace binaries (`target/<profile>`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    // Test binaries live in target/<profile>/deps; bins in target/<profile>.
    if dir.ends_with("deps") {
        dir.parent().expect("profile dir").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// Path of a workspace binary.
pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// A running `tuic-node` with its own config dir; killed on drop.
pub struct Node {
    child: tokio::process::Child,
    /// Temporary config dir (removed on drop).
    pub dir: tempfile::TempDir,
    /// The IPC socket.
    pub socket: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: hyper::HeaderMap,
    /// Body bytes.
    pub body: Bytes,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

impl Node {
    /// Starts a node; `config` is written to `config.json` first when given.
    pub async fn start(config: Option<Value>) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut cfg = config.unwrap_or_else(|| serde_json::json!({}));
        cfg["secret_store"] = "file".into();
        std::fs::write(dir.path().join("config.json"), serde_json::to_vec(&cfg)?)?;
        let mut child = tokio::process::Command::new(bin("tuic-node"))
            .arg("--config-dir")
            .arg(dir.path())
            .env_remove("TUIC_SOCKET")
            .env_remove("TUIC_APP_INSTANCE")
            .env_remove("TUIC_PORT")
            .env_remove("TUIC_CAPTURE_DIR")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting tuic-node (run `cargo build --workspace --bins` first)")?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .context("waiting for the ready line")??
            .context("node exited before ready")?;
        let socket = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("ipc="))
            .map(PathBuf::from)
            .with_context(|| format!("no ipc= in {line:?}"))?;
        // Keep draining stdout so the node never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self { child, dir, socket })
    }

    /// The node's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// A cheap handle for requests from other tasks.
    pub fn client(&self) -> Client {
        Client {
            socket: self.socket.clone(),
        }
    }

    /// One HTTP request over the IPC socket.
    pub async fn http(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Answer> {
        self.client().http(method, path, body).await
    }
    /// A JSON request that must answer 200.
    pub async fn ok(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let a = self.http(method, path, body).await?;
        if a.status != StatusCode::OK {
            bail!(
                "{method} {path}: {} {}",
                a.status,
                String::from_utf8_lossy(&a.body)
            );
        }
        Ok(a.json())
    }

    /// Creates a session; returns its create answer.
    pub async fn create(&self, body: Value) -> anyhow::Result<Value> {
        self.ok("POST", "/sessions", Some(body)).await
    }

    /// Writes text to a session.
    pub async fn write(&self, id: &str, data: &str) -> anyhow::Result<()> {
        self.ok(
            "POST",
            &format!("/sessions/{id}/write"),
            Some(serde_json::json!({"data": data})),
        )
        .await
        .map(drop)
    }

    /// Opens `/sessions/{id}/stream` with a query string (may be empty).
    pub async fn ws(&self, id: &str, query: &str) -> anyhow::Result<Ws> {
        let stream = UnixStream::connect(&self.socket).await?;
        let url = format!("ws://localhost/sessions/{id}/stream{query}");
        let (ws, _) = tokio_tungstenite::client_async(url, stream).await?;
        Ok(ws)
    }

    /// Opens `GET /events` and returns a reader of `(event, data)` pairs.
    pub async fn events(&self, types: &str) -> anyhow::Result<Sse> {
        let stream = UnixStream::connect(&self.socket).await?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let req = Request::builder()
            .uri(if types.is_empty() {
                "/events".to_owned()
            } else {
                format!("/events?types={types}")
            })
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))?;
        let resp = send.send_request(req).await?;
        Ok(Sse {
            body: resp.into_body(),
            buf: String::new(),
            _send: send,
        })
    }
}

/// A request handle that can move to other tasks.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
}

impl Client {
    /// One HTTP request over the IPC socket.
    pub async fn http(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Answer> {
        self.http_with_headers(method, path, body, &[]).await
    }

    /// [`Client::http`] with extra request headers.
    pub async fn http_with_headers(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<Answer> {
        let stream = UnixStream::connect(&self.socket).await?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(Method::from_bytes(method.as_bytes())?)
            .uri(path)
            .header("host", "localhost")
            // `/mcp` wants both; other routes ignore it.
            .header("accept", "application/json, text/event-stream");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let bytes = match body {
            Some(v) => {
                req = req.header("content-type", "application/json");
                Bytes::from(serde_json::to_vec(&v)?)
            }
            None => Bytes::new(),
        };
        let resp = send.send_request(req.body(Full::new(bytes))?).await?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(Answer {
            status,
            headers,
            body,
        })
    }
}

/// An SSE reader.
pub struct Sse {
    body: hyper::body::Incoming,
    buf: String,
    /// Held so the connection stays open while the body streams.
    _send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Sse {
    /// The next `(event name, data JSON)`, within `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> anyhow::Result<(String, Value)> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(i) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..i + 2).collect();
                let mut name = String::from("message");
                let mut data = String::new();
                for l in block.lines() {
                    if let Some(v) = l.strip_prefix("event:") {
                        name = v.trim().to_owned();
                    } else if let Some(v) = l.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                return Ok((name, serde_json::from_str(&data)?));
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .context("waiting for an event")?
                .context("event stream ended")??;
            if let Ok(d) = frame.into_data() {
                self.buf.push_str(&String::from_utf8_lossy(&d));
            }
        }
    }
}

/// What a stream client received until the socket closed.
#[derive(Debug, Default)]
pub struct Received {
    /// Concatenated output (binary frames or `output.data`).
    pub bytes: Vec<u8>,
    /// The `exit` frame, when one came.
    pub exit: Option<Value>,
    /// Other JSON frames (lagged, parsed, log, closed).
    pub other: Vec<Value>,
    /// Whether output arrived after the exit frame (must never happen).
    pub output_after_exit: bool,
}

/// Reads output frames until the received bytes contain `marker`; returns those bytes.
pub async fn read_until(ws: &mut Ws, marker: &[u8], timeout: Duration) -> anyhow::Result<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut got = Vec::new();
    while !got.windows(marker.len()).any(|w| w == marker) {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .context("marker did not arrive in time")?
            .context("stream closed before the marker")??;
        match msg {
            Message::Binary(b) => got.extend_from_slice(&b),
            Message::Text(t) => {
                let v: Value = serde_json::from_str(t.as_str())?;
                if v["type"] == "output" {
                    got.extend_from_slice(v["data"].as_str().unwrap_or("").as_bytes());
                }
            }
            _ => {}
        }
    }
    Ok(got)
}

/// Reads a stream until it closes (bounded by `timeout`).
pub async fn drain_ws(ws: &mut Ws, timeout: Duration) -> anyhow::Result<Received> {
    let mut r = Received::default();
    let deadline = tokio::time::Instant::now() + timeout;
    while let Some(msg) = tokio::time::timeout_at(deadline, ws.next())
        .await
        .context("stream did not close in time")?
    {
        match msg? {
            Message::Binary(b) => {
                r.output_after_exit |= r.exit.is_some();
                r.bytes.extend_from_slice(&b);
            }
            Message::Text(t) => {
                let v: Value = serde_json::from_str(t.as_str())?;
                match v["type"].as_str() {
                    Some("output") => {
                        r.output_after_exit |= r.exit.is_some();
                        r.bytes
                            .extend_from_slice(v["data"].as_str().unwrap_or("").as_bytes());
                    }
                    Some("exit") => r.exit = Some(v),
                    _ => r.other.push(v),
                }
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    Ok(r)
}
