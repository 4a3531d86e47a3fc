//! Shared helpers of the MCP end-to-end tests: start a real `tuic-node` with a temporary
//! config dir, talk HTTP/1.1 to its IPC socket, and forward a loopback TCP port to the socket
//! for HTTP-only clients (official SDKs, the conformance suite).

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, UnixStream};
use tokio::process::{Child, Command};

/// `target/debug/tuic-node`, next to the test binary's `deps/` folder.
pub fn node_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe path");
    let dir = exe.parent().and_then(Path::parent).expect("target/debug");
    let bin = dir.join("tuic-node");
    assert!(
        bin.exists(),
        "{} is missing: build the binaries first (cargo build --workspace --bins)",
        bin.display()
    );
    bin
}

/// A running node; killed on drop.
pub struct NodeProc {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
}

impl NodeProc {
    /// Starts a node whose config.json is `config` (merged over `secret_store: file`).
    pub async fn start(config: Value) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), config).await
    }

    /// [`NodeProc::start`] in a config dir the caller prepared (other files already there).
    pub async fn start_in(dir: tempfile::TempDir, config: Value) -> Self {
        let mut cfg = serde_json::json!({"secret_store": "file"});
        if let (Some(c), Some(e)) = (cfg.as_object_mut(), config.as_object()) {
            c.extend(e.clone());
        }
        std::fs::write(dir.path().join("config.json"), cfg.to_string()).unwrap();
        let mut child = Command::new(node_bin())
            .arg("--config-dir")
            .arg(dir.path())
            .env("TUIC_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawning tuic-node");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        // Drain stderr so the node never blocks on a full pipe.
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(_)) = lines.next_line().await {}
        });
        let mut lines = BufReader::new(stdout).lines();
        let socket = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let line = lines
                    .next_line()
                    .await
                    .unwrap()
                    .expect("node exited before ready");
                if let Some(rest) = line.strip_prefix("tuic-node ready ipc=") {
                    let path = rest.split(" tcp=").next().unwrap();
                    return PathBuf::from(path);
                }
            }
        })
        .await
        .expect("node ready line within 30 s");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { child, dir, socket }
    }

    /// The node's resident set size in bytes (its own process only).
    pub fn rss_bytes(&self) -> u64 {
        tuic_tests::rss_bytes(self.child.id().expect("running"))
    }

    /// Opens a keep-alive HTTP/1.1 connection to the IPC socket.
    pub async fn connect(&self) -> Conn {
        let s = UnixStream::connect(&self.socket).await.unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
            .await
            .unwrap();
        tokio::spawn(conn);
        Conn { sender }
    }

    /// Forwards a fresh loopback TCP port to the IPC socket; returns `http://127.0.0.1:P/mcp`.
    pub async fn tcp_forward(&self) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let socket = self.socket.clone();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = l.accept().await {
                let socket = socket.clone();
                tokio::spawn(async move {
                    if let Ok(mut unix) = UnixStream::connect(&socket).await {
                        let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                    }
                });
            }
        });
        format!("http://127.0.0.1:{port}/mcp")
    }
}

/// One HTTP/1.1 connection to the node.
pub struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

/// A response, body fully read.
pub struct Resp {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    pub fn session(&self) -> Option<String> {
        self.headers
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned())
    }
}

impl Conn {
    /// Sends a request and reads the whole response.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Resp {
        let r = self.send_head(method, path, headers, body).await;
        let (parts, body) = r.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        }
    }

    /// Sends a request and returns the response with its body still streaming.
    pub async fn send_head(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> hyper::Response<hyper::body::Incoming> {
        let mut b = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        self.sender.ready().await.unwrap();
        self.sender
            .send_request(b.body(Full::new(body.into())).unwrap())
            .await
            .unwrap()
    }

    /// POSTs one JSON-RPC message to `/mcp`.
    pub async fn rpc(&mut self, msg: &Value, headers: &[(&str, &str)]) -> Resp {
        let mut h = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        h.extend_from_slice(headers);
        self.send("POST", "/mcp", &h, msg.to_string()).await
    }
}

/// The JSON value a native tool returned (compact JSON text in the content envelope).
pub fn tool_value(r: &Resp) -> Value {
    let v = r.json();
    serde_json::from_str(v["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// A raw `tools/call` over the IPC socket (no protocol session needed); the whole answer.
pub async fn call(node: &NodeProc, name: &str, args: Value) -> Value {
    node.connect()
        .await
        .rpc(
            &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": name, "arguments": args}}),
            &[],
        )
        .await
        .json()
}

/// The first text content of a `tools/call` answer (empty when there is none).
pub fn text(r: &Value) -> String {
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `GET path` over the IPC socket; the JSON body.
pub async fn get(node: &NodeProc, path: &str) -> Value {
    node.connect().await.send("GET", path, &[], "").await.json()
}

/// Waits (bounded) until `pred` holds for `GET /mcp/status`; returns the status.
pub async fn wait_status(
    node: &NodeProc,
    what: &str,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let s = get(node, "/mcp/status").await;
        if pred(&s) {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} within {limit:?}; status: {:#}",
            s["upstreams"]
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
