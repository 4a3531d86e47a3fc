//! What both upstream transports share: the typed error, the JSON-RPC core that matches
//! responses to requests by id (skipping notifications that arrive in between), answers the
//! few server-to-client requests a proxy can answer, relays progress, and reports
//! `notifications/tools/list_changed`; and the [`Client`] the service talks to.
//!
//! Results are kept as raw JSON (`serde_json::Value`) end to end: a proxied `CallToolResult`
//! must reach the agent unchanged, extension fields included.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::http::HttpClient;
use super::stdio::StdioClient;

/// Why an upstream request failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum UpstreamError {
    /// No answer within the deadline.
    #[error("no answer within {0} ms")]
    Timeout(u64),
    /// The connection or process is gone.
    #[error("{0}")]
    Closed(String),
    /// The upstream answered with a JSON-RPC error.
    #[error("upstream error {code}: {message}")]
    Rpc {
        /// JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
        /// Its data, if any.
        data: Option<Value>,
    },
    /// The upstream sent something that is not MCP.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The network or the process could not be reached.
    #[error("{0}")]
    Transport(String),
    /// HTTP 401 with no usable credential: authorization is needed.
    #[error("the upstream needs authorization ({www_authenticate})")]
    NeedsAuth {
        /// The `WWW-Authenticate` challenge, for discovery.
        www_authenticate: String,
    },
    /// The stored credential is bound to another origin: nothing was sent.
    #[error("{0}")]
    Origin(String),
    /// The authorization server refused a refresh (or there is nothing to refresh with): a
    /// new authorization is needed.
    #[error("{0}")]
    AuthFailed(String),
}

impl UpstreamError {
    /// Stable code for tool errors and the status.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Timeout(_) => "upstream_timeout",
            Self::Closed(_) => "upstream_closed",
            Self::Rpc { .. } => "upstream_error",
            Self::Protocol(_) => "upstream_protocol",
            Self::Transport(_) => "upstream_unreachable",
            Self::NeedsAuth { .. } => "upstream_needs_auth",
            Self::Origin(_) => "upstream_origin_mismatch",
            Self::AuthFailed(_) => "upstream_auth_failed",
        }
    }
}

/// Receives the params of each `notifications/progress` of one proxied call, with the
/// caller's own progress token restored.
pub type ProgressSink = Arc<dyn Fn(Value) + Send + Sync>;

/// Something an upstream told us without being asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientEvent {
    /// `notifications/tools/list_changed`.
    ToolsChanged,
}

type Waiter = oneshot::Sender<Result<Value, UpstreamError>>;

/// The id-matching core of one connection.
pub(crate) struct RpcCore {
    /// The upstream's name, for logs.
    pub(crate) upstream: String,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, Waiter>>,
    /// Our progress token → (the caller's token, where to relay).
    progress: Mutex<HashMap<String, (Value, ProgressSink)>>,
    /// Bounded: a flood of list_changed collapses into one pending event.
    events: tokio::sync::mpsc::Sender<ClientEvent>,
    /// Notifications that were neither progress nor list_changed (counted, not logged each).
    pub(crate) ignored_notifications: AtomicU64,
}

impl std::fmt::Debug for RpcCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcCore")
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RpcCore {
    pub(crate) fn new(upstream: &str, events: tokio::sync::mpsc::Sender<ClientEvent>) -> Self {
        Self {
            upstream: upstream.to_owned(),
            next_id: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            progress: Mutex::new(HashMap::new()),
            events,
            ignored_notifications: AtomicU64::new(0),
        }
    }

    /// Registers a request: its id, the waiter, and the message to send. A progress sink
    /// gets a token of ours in `params._meta.progressToken` (callers' tokens could collide on
    /// a shared connection); the caller's own token is restored when relaying.
    pub(crate) fn start(
        &self,
        method: &str,
        mut params: Value,
        progress: Option<(Value, ProgressSink)>,
    ) -> (u64, oneshot::Receiver<Result<Value, UpstreamError>>, Value) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        if let Some((theirs, sink)) = progress {
            let ours = format!("tuic-{id}");
            if !params.is_object() {
                params = json!({});
            }
            if !params.get("_meta").is_some_and(Value::is_object) {
                params["_meta"] = json!({});
            }
            params["_meta"]["progressToken"] = json!(ours);
            lock(&self.progress).insert(ours, (theirs, sink));
        }
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        (id, rx, msg)
    }

    /// Forgets a request (answered, timed out or abandoned).
    pub(crate) fn finish(&self, id: u64) {
        lock(&self.pending).remove(&id);
        lock(&self.progress).remove(&format!("tuic-{id}"));
    }

    /// Forgets request `id` when the returned guard drops: a request whose caller gave up
    /// (its future dropped at an outer deadline) leaves no waiter and no progress route behind.
    pub(crate) fn finish_on_drop(&self, id: u64) -> FinishGuard<'_> {
        FinishGuard { core: self, id }
    }

    /// Fails every waiting request (the connection ended).
    pub(crate) fn fail_all(&self, why: &str) {
        let waiters: Vec<Waiter> = lock(&self.pending).drain().map(|(_, w)| w).collect();
        for w in waiters {
            let _ = w.send(Err(UpstreamError::Closed(why.to_owned())));
        }
        lock(&self.progress).clear();
    }

    /// Handles one message from the upstream. Returns a reply to send back, for a request the
    /// upstream made of us.
    pub(crate) fn incoming(&self, msg: Value) -> Option<Value> {
        let Value::Object(m) = msg else {
            tracing::debug!(source = "upstream", upstream = %self.upstream, "ignoring a non-object message");
            return None;
        };
        let method = m.get("method").and_then(Value::as_str);
        let id = m.get("id").filter(|v| !v.is_null());
        match (method, id) {
            (None, Some(id)) => {
                let n = id.as_u64()?;
                // The route goes with the answer, here in the reader's order: progress the
                // upstream sends after its answer is never relayed.
                lock(&self.progress).remove(&format!("tuic-{n}"));
                let waiter = lock(&self.pending).remove(&n);
                let Some(w) = waiter else {
                    tracing::debug!(source = "upstream", upstream = %self.upstream, id = n, "answer to no waiting request");
                    return None;
                };
                let answer = if let Some(e) = m.get("error") {
                    Err(UpstreamError::Rpc {
                        code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                        message: e
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        data: e.get("data").cloned(),
                    })
                } else if let Some(r) = m.get("result") {
                    Ok(r.clone())
                } else {
                    Err(UpstreamError::Protocol(
                        "a response without result or error".into(),
                    ))
                };
                let _ = w.send(answer);
                None
            }
            (Some(method), Some(id)) => {
                // Requests from the upstream to us: answer what a proxy can answer.
                let reply = match method {
                    "ping" => json!({"jsonrpc": "2.0", "id": id, "result": {}}),
                    "roots/list" => json!({"jsonrpc": "2.0", "id": id, "result": {"roots": []}}),
                    _ => {
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": tuic_proto::mcp::METHOD_NOT_FOUND,
                        "message": format!("{method} is not supported by the tuic proxy")}})
                    }
                };
                Some(reply)
            }
            (Some(method), None) => {
                match method {
                    "notifications/progress" => {
                        let params = m.get("params").cloned().unwrap_or(json!({}));
                        let token = params
                            .get("progressToken")
                            .map(|t| t.as_str().map(str::to_owned).unwrap_or(t.to_string()));
                        let route = token.and_then(|t| lock(&self.progress).get(&t).cloned());
                        if let Some((theirs, sink)) = route {
                            let mut p = params;
                            p["progressToken"] = theirs;
                            sink(p);
                        }
                    }
                    "notifications/tools/list_changed" => {
                        // Full means one is already pending: the flood collapses into it.
                        let _ = self.events.try_send(ClientEvent::ToolsChanged);
                    }
                    _ => {
                        self.ignored_notifications.fetch_add(1, Ordering::Relaxed);
                    }
                }
                None
            }
            (None, None) => {
                tracing::debug!(source = "upstream", upstream = %self.upstream, "ignoring a message with neither id nor method");
                None
            }
        }
    }
}

/// Forgets one request on drop (see [`RpcCore::finish_on_drop`]).
pub(crate) struct FinishGuard<'a> {
    core: &'a RpcCore,
    id: u64,
}

impl Drop for FinishGuard<'_> {
    fn drop(&mut self) {
        self.core.finish(self.id);
    }
}

/// A connected upstream.
#[derive(Debug)]
pub enum Client {
    /// A child process.
    Stdio(StdioClient),
    /// Streamable HTTP.
    Http(HttpClient),
}

impl Client {
    /// One request; `progress` relays the upstream's progress notifications for it.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        progress: Option<(Value, ProgressSink)>,
    ) -> Result<Value, UpstreamError> {
        match self {
            Self::Stdio(c) => c.request(method, params, timeout, progress).await,
            Self::Http(c) => c.request(method, params, timeout, progress).await,
        }
    }

    /// Resolves when the connection is gone (a stdio child exited); HTTP never closes by
    /// itself, its failures show in requests.
    pub async fn closed(&self) -> String {
        match self {
            Self::Stdio(c) => c.closed().await,
            Self::Http(_) => std::future::pending().await,
        }
    }

    /// Ends the connection (kills the child, ends the HTTP session).
    pub async fn shutdown(&self) {
        match self {
            Self::Stdio(c) => c.shutdown().await,
            Self::Http(c) => c.shutdown().await,
        }
    }

    /// The protocol revision in use.
    pub fn protocol(&self) -> String {
        match self {
            Self::Stdio(c) => c.protocol(),
            Self::Http(c) => c.protocol(),
        }
    }

    /// The process id of a stdio child.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Self::Stdio(c) => c.pid(),
            Self::Http(_) => None,
        }
    }
}

/// The `initialize` params tuic sends upstream.
pub(crate) fn initialize_params(version: &str) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": {"roots": {"listChanged": false}},
        "clientInfo": {"name": "tuicommander-proxy", "version": env!("CARGO_PKG_VERSION")},
    })
}
