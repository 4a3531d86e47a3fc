//! An MCP client for end-to-end tests and benchmarks: one protocol session over a process's
//! IPC socket (a fresh connection per request), with helpers for the `agent` tool.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

use crate::ipc_request;

/// An MCP client (one protocol session) on a process's IPC socket.
pub struct Agent {
    /// The process's IPC socket.
    pub socket: PathBuf,
    /// The protocol session id.
    pub sid: String,
    next: u64,
}

/// One JSON-RPC POST to `/mcp` (with the session header when given).
pub async fn rpc(socket: &Path, sid: Option<&str>, msg: Value) -> crate::Reply {
    rpc_with(socket, sid, &[], msg).await
}

/// [`rpc`] with extra request headers (an asserted `x-tuic-session`, ...).
pub async fn rpc_with(
    socket: &Path,
    sid: Option<&str>,
    headers: &[(&str, &str)],
    msg: Value,
) -> crate::Reply {
    let mut b = hyper::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(sid) = sid {
        b = b.header("mcp-session-id", sid);
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    ipc_request(
        socket,
        b.body(Full::new(Bytes::from(msg.to_string()))).unwrap(),
    )
    .await
    .unwrap()
}

impl Agent {
    /// Initializes a protocol session and registers under `name`.
    pub async fn new(socket: &Path, name: &str) -> (Self, String) {
        Self::register(socket, json!({"action":"register","name":name})).await
    }

    /// Initializes a protocol session and registers with `register` arguments.
    pub async fn register(socket: &Path, register: Value) -> (Self, String) {
        let r = rpc(
            socket,
            None,
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"federation-e2e","version":"1"}}}),
        )
        .await;
        let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
        rpc(
            socket,
            Some(&sid),
            json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        )
        .await;
        let mut a = Self {
            socket: socket.to_owned(),
            sid,
            next: 1,
        };
        let me = a.ok(register).await["tuic_session"]
            .as_str()
            .unwrap()
            .to_owned();
        (a, me)
    }

    /// Calls `agent`; returns (is_error, value).
    pub async fn call(&mut self, args: Value) -> (bool, Value) {
        self.tool("agent", args).await
    }

    /// Calls any tool; returns (is_error, value).
    pub async fn tool(&mut self, name: &str, args: Value) -> (bool, Value) {
        self.next += 1;
        let r = rpc(
            &self.socket,
            Some(&self.sid),
            json!({"jsonrpc":"2.0","id":self.next,"method":"tools/call","params":{"name":name,"arguments":args}}),
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

    pub async fn ok(&mut self, args: Value) -> Value {
        let (err, v) = self.call(args.clone()).await;
        assert!(!err, "agent {args} failed: {v}");
        v
    }

    pub async fn send(&mut self, to: &str, message: &str) -> Value {
        self.ok(json!({"action":"send","to":to,"message":message}))
            .await
    }

    /// Waits on the inbox until `n` messages arrived in total (asserting no wait reports unread
    /// mail evicted), bounded by `limit`.
    pub async fn collect(&mut self, n: usize, limit: Duration) -> Vec<Value> {
        let deadline = Instant::now() + limit;
        let mut got: Vec<Value> = Vec::new();
        while got.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "only {} of {n} messages: {got:?}",
                got.len()
            );
            let w = self
                .ok(json!({"action":"wait","timeout_ms": left.as_millis().min(10_000) as u64}))
                .await;
            assert_eq!(
                w["missed_count"].as_u64().unwrap_or(0),
                0,
                "mail evicted: {w}"
            );
            got.extend(w["new_messages"].as_array().cloned().unwrap_or_default());
        }
        got
    }

    /// `list_peers` until one entry has `address` (bounded).
    pub async fn sees(&mut self, address: &str, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let peers = self.ok(json!({"action":"list_peers"})).await;
            if let Some(p) = peers["peers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["address"] == address)
            {
                return p.clone();
            }
            assert!(Instant::now() < deadline, "{address} never listed: {peers}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Asserts an `agent action=send urgency=urgent` answer fell back (`urgent_delivered: false`)
/// with a reason that mentions `why`.
pub fn assert_urgent_fallback(r: &Value, why: &str) {
    assert_eq!(r["urgent_delivered"], false, "{r}");
    assert!(
        r["urgent_fallback_reason"]
            .as_str()
            .is_some_and(|s| s.contains(why)),
        "{r}"
    );
}
