//! Scripted IPC peers for the client tests: a hostile HTTP server and a minimal MCP
//! Streamable HTTP endpoint, each on a Unix socket, each stopped (socket removed, every
//! connection closed) on drop.
//!
//! The fake MCP endpoint does just what the bridge's contract needs: `initialize` mints an
//! `mcp-session-id`, other requests with an id it does not know get 404 (as after a node
//! restart), `GET /mcp` holds an SSE stream that pushes one channel notification,
//! `DELETE /mcp` ends the session. Tools: `echo` (returns the arguments and the
//! `x-tuic-session` it saw), `slow` (answers after 500 ms) and `hang` (never answers).

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A minimal parsed request.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    /// HTTP method.
    pub method: String,
    /// Request target.
    pub path: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The JSON body (`Null` when none).
    pub body: Value,
    /// When the request had been read.
    pub at: Instant,
}

impl SeenRequest {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    /// The JSON-RPC method of the body.
    pub fn rpc_method(&self) -> Option<&str> {
        self.body.get("method").and_then(Value::as_str)
    }
}

/// Reads one request (head ≤ 64 KiB, body by Content-Length ≤ 8 MiB); `None` on EOF or junk.
fn read_request(s: &mut UnixStream) -> Option<SeenRequest> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if buf.len() > 64 * 1024 || s.read(&mut byte).ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    if len > 8 << 20 {
        return None;
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Some(SeenRequest {
        method,
        path,
        headers,
        body,
        at: Instant::now(),
    })
}

fn respond(s: &mut UnixStream, status: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut out = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    let _ = s.write_all(&bytes);
}

/// Accept loop shared by both fakes; stops when `stopped` is set and a wake-up connects.
struct Listener {
    path: PathBuf,
    stopped: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    fn start(path: &Path, handle: impl Fn(UnixStream) + Send + Sync + 'static) -> Self {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).expect("binding the fake socket");
        let stopped = Arc::new(AtomicBool::new(false));
        let stop = stopped.clone();
        let handle = Arc::new(handle);
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let h = handle.clone();
                std::thread::spawn(move || h(conn));
            }
        });
        Self {
            path: path.to_path_buf(),
            stopped,
            thread: Some(thread),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What a hostile server sends after reading a request.
#[derive(Debug, Clone)]
pub enum Hostile {
    /// These bytes, then the connection is held open (a client must not wait for EOF).
    Once(Vec<u8>),
    /// These bytes over and over until the client goes away.
    Forever(Vec<u8>),
    /// These bytes, then the connection is closed.
    ThenClose(Vec<u8>),
}

/// A server that answers every request with [`Hostile`] bytes.
pub struct HostileServer {
    _listener: Listener,
}

impl HostileServer {
    /// Starts serving at `path`.
    pub fn start(path: &Path, script: Hostile) -> Self {
        let l = Listener::start(path, move |mut s| {
            let _ = read_request(&mut s);
            match &script {
                Hostile::Once(b) => {
                    let _ = s.write_all(b);
                    // Held open so only the client's own limits can end the exchange.
                    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                    let _ = s.read(&mut [0u8; 1]);
                }
                Hostile::Forever(b) => while s.write_all(b).is_ok() {},
                Hostile::ThenClose(b) => {
                    let _ = s.write_all(b);
                }
            }
        });
        Self { _listener: l }
    }
}

#[derive(Default)]
struct McpState {
    log: Mutex<Vec<SeenRequest>>,
    sessions: Mutex<HashSet<String>>,
    streams: Mutex<Vec<UnixStream>>,
    stopped: AtomicBool,
    minted: AtomicU32,
    epoch: u32,
}

/// A minimal MCP endpoint (see the module docs).
pub struct FakeMcp {
    state: Arc<McpState>,
    listener: Option<Listener>,
}

impl FakeMcp {
    /// Starts serving at `path`; `epoch` distinguishes session ids across "restarts".
    pub fn start(path: &Path, epoch: u32) -> Self {
        let state = Arc::new(McpState {
            epoch,
            ..Default::default()
        });
        let st = state.clone();
        let listener = Listener::start(path, move |s| serve(&st, s));
        Self {
            state,
            listener: Some(listener),
        }
    }

    /// Every request seen so far, in arrival order.
    pub fn log(&self) -> Vec<SeenRequest> {
        self.state.log.lock().expect("log").clone()
    }

    /// Stops like a crashed node: the socket goes away and every connection, streams and
    /// unanswered calls included, is closed.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        for s in self.state.streams.lock().expect("streams").drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        self.listener.take();
    }
}

impl Drop for FakeMcp {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn serve(st: &Arc<McpState>, mut s: UnixStream) {
    if st.stopped.load(Ordering::SeqCst) {
        return;
    }
    let Some(req) = read_request(&mut s) else {
        return;
    };
    st.log.lock().expect("log").push(req.clone());
    if let Ok(c) = s.try_clone() {
        st.streams.lock().expect("streams").push(c);
    }
    let sid = req.header("mcp-session-id").map(str::to_owned);
    let known = sid
        .as_ref()
        .is_some_and(|id| st.sessions.lock().expect("sessions").contains(id));
    let json_ok = |s: &mut UnixStream, v: Value, extra: &[(&str, &str)]| {
        let mut h = vec![("content-type", "application/json")];
        h.extend_from_slice(extra);
        respond(s, "200 OK", &h, v.to_string().as_bytes());
    };
    match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/mcp") => {
            let id = req.body.get("id").cloned();
            let method = req.rpc_method().unwrap_or("").to_owned();
            if method == "initialize" {
                let sid = match (&sid, known) {
                    (Some(id), true) => id.clone(),
                    _ => format!(
                        "fake{}-{}",
                        st.epoch,
                        st.minted.fetch_add(1, Ordering::SeqCst)
                    ),
                };
                st.sessions.lock().expect("sessions").insert(sid.clone());
                let version = req
                    .body
                    .pointer("/params/protocolVersion")
                    .cloned()
                    .unwrap_or(json!("2025-11-25"));
                json_ok(
                    &mut s,
                    json!({"jsonrpc":"2.0","id":id,"result":{
                        "protocolVersion": version,
                        "capabilities": {"tools": {"listChanged": true}},
                        "serverInfo": {"name": "fake-mcp", "version": "0"}}}),
                    &[("mcp-session-id", &sid)],
                );
                return;
            }
            let Some(id) = id else {
                respond(&mut s, "202 Accepted", &[], b"");
                return;
            };
            if sid.is_some() && !known {
                respond(
                    &mut s,
                    "404 Not Found",
                    &[("content-type", "application/json")],
                    br#"{"error":"unknown MCP session"}"#,
                );
                return;
            }
            let result = match method.as_str() {
                "ping" => json!({}),
                "tools/list" => json!({"tools": [
                    {"name": "echo", "inputSchema": {"type": "object"}},
                    {"name": "slow", "inputSchema": {"type": "object"}},
                    {"name": "hang", "inputSchema": {"type": "object"}},
                ]}),
                "tools/call" => {
                    let name = req.body.pointer("/params/name").and_then(Value::as_str);
                    match name {
                        Some("slow") => std::thread::sleep(Duration::from_millis(500)),
                        Some("hang") => {
                            let until = Instant::now() + Duration::from_secs(60);
                            while !st.stopped.load(Ordering::SeqCst) && Instant::now() < until {
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            return;
                        }
                        _ => {}
                    }
                    let seen = json!({
                        "tool": name,
                        "arguments": req.body.pointer("/params/arguments"),
                        "x_tuic_session": req.header("x-tuic-session"),
                        "epoch": st.epoch,
                    });
                    json!({"content": [{"type": "text", "text": seen.to_string()}]})
                }
                _ => {
                    json_ok(
                        &mut s,
                        json!({"jsonrpc":"2.0","id":id,"error":{"code":-32601,"message":"method not found"}}),
                        &[],
                    );
                    return;
                }
            };
            json_ok(
                &mut s,
                json!({"jsonrpc":"2.0","id":id,"result":result}),
                &[],
            );
        }
        ("GET", "/mcp") => {
            if !known {
                respond(&mut s, "404 Not Found", &[], b"");
                return;
            }
            let note = json!({"jsonrpc":"2.0","method":"notifications/claude/channel",
                              "params":{"content":"hello from fake"}});
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                        transfer-encoding: chunked\r\n\r\n";
            let event = format!("event: message\ndata: {note}\n\n");
            let chunk = format!("{:x}\r\n{event}\r\n", event.len());
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(chunk.as_bytes());
            // Held until the server stops (shutdown closes it) or the client goes away.
            let _ = s.read(&mut [0u8; 1]);
        }
        ("DELETE", "/mcp") => {
            if let Some(id) = &sid {
                st.sessions.lock().expect("sessions").remove(id);
            }
            respond(&mut s, "200 OK", &[], b"");
        }
        _ => respond(
            &mut s,
            "404 Not Found",
            &[],
            br#"{"error":"no such route"}"#,
        ),
    }
}
