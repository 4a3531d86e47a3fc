//! Helpers of the progress tests and benchmarks: an MCP session bound to a terminal's TUIC
//! identity, an SSE reader for `GET /events`, a loopback TCP forward to a node's IPC socket
//! (for HTTP-only clients such as the official SDKs) and a fake agent CLI.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyStream, Full};
use serde_json::{Value, json};

use crate::ipc_request;

/// An MCP protocol session on a node's IPC socket.
#[derive(Debug, Clone)]
pub struct Mcp {
    /// The socket.
    pub socket: PathBuf,
    /// `mcp-session-id`.
    pub sid: String,
    /// `x-tuic-session` sent on every request, when bound to a terminal.
    pub tuic: Option<String>,
}

async fn post(socket: &Path, sid: Option<&str>, tuic: Option<&str>, msg: &Value) -> crate::Reply {
    let mut b = hyper::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = sid {
        b = b.header("mcp-session-id", s);
    }
    if let Some(t) = tuic {
        b = b.header("x-tuic-session", t);
    }
    ipc_request(
        socket,
        b.body(Full::new(Bytes::from(msg.to_string()))).unwrap(),
    )
    .await
    .expect("MCP request")
}

impl Mcp {
    /// Initializes a session, bound to `tuic` (a terminal's `TUIC_SESSION`) when given.
    pub async fn start(socket: &Path, tuic: Option<&str>) -> Self {
        let r = post(
            socket,
            None,
            tuic,
            &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"progress-e2e","version":"1"}}}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
        post(
            socket,
            Some(&sid),
            tuic,
            &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        )
        .await;
        Self {
            socket: socket.to_owned(),
            sid,
            tuic: tuic.map(str::to_owned),
        }
    }

    /// A raw JSON-RPC request; the whole answer.
    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        post(
            &self.socket,
            Some(&self.sid),
            self.tuic.as_deref(),
            &json!({"jsonrpc":"2.0","id":7,"method":method,"params":params}),
        )
        .await
        .json()
    }

    /// `tools/call`: (is_error, decoded JSON result).
    pub async fn tool(&self, name: &str, args: Value) -> (bool, Value) {
        let v = self
            .rpc("tools/call", json!({"name": name, "arguments": args}))
            .await;
        let Some(text) = v["result"]["content"][0]["text"].as_str() else {
            return (true, v);
        };
        (
            v["result"]["isError"] == true,
            serde_json::from_str(text).unwrap_or(json!({"text": text})),
        )
    }
}

/// A live `GET /events` stream, decoded.
pub struct Events {
    body: BodyStream<hyper::body::Incoming>,
    dec: tuic_proto::sse::SseDecoder,
}

impl Events {
    /// Subscribes to `types` (comma-separated) on `socket`.
    pub async fn subscribe(socket: &Path, types: &str) -> Self {
        let resp = crate::ipc_stream(socket, &format!("/events?types={types}"))
            .await
            .expect("SSE subscribe");
        assert_eq!(resp.status(), 200);
        Self {
            body: BodyStream::new(resp.into_body()),
            dec: tuic_proto::sse::SseDecoder::new(1 << 20),
        }
    }

    /// The next event named `name` whose payload satisfies `f`, within `limit`.
    pub async fn next_matching(
        &mut self,
        name: &str,
        limit: Duration,
        f: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let deadline = Instant::now() + limit;
        loop {
            while let Some(ev) = self.dec.poll_event() {
                if ev.event == name {
                    let v: Value = serde_json::from_str(&ev.data).unwrap_or(Value::Null);
                    if f(&v) {
                        return Some(v);
                    }
                }
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            match tokio::time::timeout(left, self.body.next()).await {
                Ok(Some(Ok(frame))) => {
                    if let Ok(d) = frame.into_data() {
                        self.dec.feed(&d).expect("SSE decodes");
                    }
                }
                _ => return None,
            }
        }
    }
}

/// Forwards a fresh loopback TCP port to `socket`; returns `http://127.0.0.1:P/mcp`.
pub async fn tcp_forward(socket: &Path) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let socket = socket.to_owned();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = l.accept().await {
            let socket = socket.clone();
            tokio::spawn(async move {
                if let Ok(mut unix) = tokio::net::UnixStream::connect(&socket).await {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
            });
        }
    });
    format!("http://127.0.0.1:{port}/mcp")
}

/// Writes an executable fake agent CLI named `name` into `dir`: it prints each of `lines`,
/// then waits for a line of input (so it stays the terminal's foreground process).
pub fn fake_agent(dir: &Path, name: &str, lines: &[&str]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    let mut s = String::from("#!/bin/sh\n");
    for l in lines {
        s.push_str(&format!("printf '%s\\n' '{}'\n", l.replace('\'', "'\\''")));
    }
    s.push_str("read answer\necho \"got $answer\"\nread again\n");
    std::fs::write(&p, s).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// Polls `GET /sessions` on `socket` until session `id` shows `agent_type == agent`.
pub async fn wait_agent(socket: &Path, id: &str, agent: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let rows = crate::ipc(socket, "GET", "/sessions", None)
            .await
            .unwrap()
            .json();
        if let Some(r) = rows
            .as_array()
            .and_then(|a| a.iter().find(|r| r["session_id"] == id))
            && r["agent_type"] == agent
        {
            return r.clone();
        }
        assert!(
            Instant::now() < deadline,
            "session {id} never detected as {agent}: {rows}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
