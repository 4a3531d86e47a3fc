//! Helpers shared by the agent-mail end-to-end tests: an MCP client over the node's IPC
//! socket (optionally bound to a TUIC identity, optionally holding its `GET /mcp` stream),
//! REST helpers, bounded polling of a session's output, and script agents.

#![allow(dead_code, unreachable_pub)]

use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::mcp_support::{Conn, NodeProc};

/// One MCP protocol session over its own IPC connection.
pub struct Client {
    pub conn: Conn,
    pub sid: String,
    next: u64,
}

impl Client {
    pub async fn new(node: &NodeProc) -> Self {
        Self::init(node, None).await
    }

    /// A client whose initialize asserts `tuic` in `x-tuic-session` (a bridge in that PTY).
    pub async fn new_as(node: &NodeProc, tuic: &str) -> Self {
        Self::init(node, Some(tuic)).await
    }

    async fn init(node: &NodeProc, tuic: Option<&str>) -> Self {
        let mut conn = node.connect().await;
        let headers: Vec<(&str, &str)> = tuic.map(|t| ("x-tuic-session", t)).into_iter().collect();
        let r = conn
            .rpc(
                &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mail-e2e","version":"1"}}}),
                &headers,
            )
            .await;
        assert!(
            r.json()["result"]["capabilities"]["experimental"]["claude/channel"].is_object(),
            "initialize advertises the channel capability: {}",
            r.json()
        );
        let sid = r.session().expect("initialize returns a session id");
        conn.rpc(
            &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
            &[("mcp-session-id", &sid)],
        )
        .await;
        Self { conn, sid, next: 2 }
    }

    /// Another connection on the same protocol session (for a wait running alongside).
    pub async fn twin(&self, node: &NodeProc) -> Self {
        Self {
            conn: node.connect().await,
            sid: self.sid.clone(),
            next: 1_000_000,
        }
    }

    /// Calls a tool; returns (is_error, value).
    pub async fn tool(&mut self, name: &str, args: Value) -> (bool, Value) {
        self.next += 1;
        let r = self
            .conn
            .rpc(
                &json!({"jsonrpc":"2.0","id":self.next,"method":"tools/call","params":{"name":name,"arguments":args}}),
                &[("mcp-session-id", &self.sid)],
            )
            .await;
        let v = r.json();
        let text = v["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no tool result: {v}"));
        (
            v["result"]["isError"] == true,
            serde_json::from_str(text).unwrap(),
        )
    }

    pub async fn ok(&mut self, name: &str, args: Value) -> Value {
        let (err, v) = self.tool(name, args.clone()).await;
        assert!(!err, "{name} {args} failed: {v}");
        v
    }

    pub async fn agent(&mut self, args: Value) -> Value {
        self.ok("agent", args).await
    }
}

pub async fn get_json(node: &NodeProc, path: &str) -> Value {
    let mut c = node.connect().await;
    c.send("GET", path, &[], "").await.json()
}

pub async fn post_json(node: &NodeProc, path: &str, body: Value) -> Value {
    let mut c = node.connect().await;
    c.send(
        "POST",
        path,
        &[("content-type", "application/json")],
        body.to_string(),
    )
    .await
    .json()
}

/// Polls a session's output until `pred` holds (bounded).
pub async fn output_until(
    node: &NodeProc,
    id: &str,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = get_json(node, &format!("/sessions/{id}/output?format=log")).await;
        let text = v.to_string();
        if pred(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn script(dir: &std::path::Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p.display().to_string()
}

/// A held `GET /mcp` stream of one protocol session, read message by message.
pub struct Stream {
    _conn: Conn,
    body: hyper::body::Incoming,
    buf: String,
}

impl Stream {
    /// Opens the stream of `sid` on its own connection.
    pub async fn open(node: &NodeProc, sid: &str) -> Self {
        let mut c = node.connect().await;
        let r = c
            .send_head(
                "GET",
                "/mcp",
                &[("accept", "text/event-stream"), ("mcp-session-id", sid)],
                "",
            )
            .await;
        assert_eq!(r.status(), 200);
        Self {
            _conn: c,
            body: r.into_body(),
            buf: String::new(),
        }
    }

    /// The next JSON-RPC message whose method is `method` (bounded).
    pub async fn next_method(&mut self, method: &str, limit: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            while let Some(i) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..i + 2).collect();
                let data: String = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if let Ok(v) = serde_json::from_str::<Value>(&data)
                    && v["method"] == method
                {
                    return v;
                }
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .unwrap_or_else(|_| panic!("no {method} within {limit:?}"))
                .expect("stream open")
                .expect("stream frame");
            if let Ok(d) = frame.into_data() {
                self.buf.push_str(&String::from_utf8_lossy(&d));
            }
        }
    }

    /// Asserts that no `method` message arrives within `window` (absence needs a window).
    pub async fn none_within(&mut self, method: &str, window: Duration) {
        let deadline = tokio::time::Instant::now() + window;
        loop {
            if let Some(i) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..i + 2).collect();
                assert!(!event.contains(method), "unexpected {method}: {event}");
                continue;
            }
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => return,
                Ok(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        self.buf.push_str(&String::from_utf8_lossy(&d));
                    }
                }
                Ok(_) => return,
            }
        }
    }
}

/// Counts non-overlapping occurrences of `needle` in `hay`.
pub fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

/// Polls until `pred` holds on the value `probe` returns (bounded by `limit`).
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut probe: F) -> Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<Value>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
