//! `tuic-bridge`: a stdio MCP server (newline-delimited JSON-RPC) that forwards every
//! message to the node's `POST /mcp` over the IPC socket and survives node restarts.
//!
//! One task owns each concern: the stdin reader (the main loop), one handler task per
//! request, the stdout writer (the only writer of stdout), the upstream loop (eager connect,
//! 3 s `ping` liveness, background reconnects) and the `GET /mcp` notification stream. The
//! upstream state (protocol session id, the client's last `initialize`, the shared backoff)
//! sits behind one async mutex that is never held across a network call.
//!
//! What the bridge deliberately does not do: keep server state beyond that, retry a
//! `tools/call` whose request may have reached the node, or send the client a second
//! `initialize` response after a reconnect.

pub mod policy;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, Notify, mpsc};
use tokio::task::JoinSet;
use tuic_proto::ipc_http::Response;
use tuic_proto::mcp as rpc;
use tuic_proto::sse::SseDecoder;

use crate::ipc::{self, AsyncResponse, IpcError};
use crate::mcp::{self, DEFAULT_PROTOCOL_VERSION, McpHeaders};
use policy::{Backoff, Offline};

/// Liveness check interval (spec: three seconds).
pub const PING_INTERVAL: Duration = Duration::from_secs(3);
/// Deadline of one liveness ping.
const PING_DEADLINE: Duration = Duration::from_secs(3);
/// Deadline of the `DELETE /mcp` sent at stdin EOF.
const DELETE_DEADLINE: Duration = Duration::from_secs(2);
/// Largest stdin line accepted.
const MAX_LINE: usize = 64 * 1024 * 1024;
/// Pushed messages held until the client has its initialize response.
const MAX_EARLY_PUSHES: usize = 64;
/// How long a response waits after a progress notification written just before it. The
/// official TypeScript SDK handles a notification in a later microtask but a response at once,
/// so a progress notification that reaches it in the same read as its call's result is
/// dropped (the result removed its handler); a gap puts them in separate reads of an idle
/// client. Only responses that follow progress wait, at most this long.
const PROGRESS_GAP: Duration = Duration::from_millis(20);

/// How the bridge was configured by its command line and environment.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The socket to dial.
    pub socket: PathBuf,
    /// For messages: which instance the socket belongs to.
    pub instance_label: String,
    /// `$TUIC_SESSION`, sent as `x-tuic-session` on every request.
    pub tuic_session: Option<String>,
}

#[derive(Debug, Default)]
struct Upstream {
    /// The protocol session id the node minted; kept across transport errors and restarts
    /// so identity-bound calls refresh it rather than start over.
    session_id: Option<String>,
    connected: bool,
    /// Bumped on every successful connect; a stream or ping of an older generation cannot
    /// mark a newer connection down.
    generation: u64,
    /// The client's last `initialize` request, replayed after a reconnect.
    last_initialize: Option<Value>,
    /// What that initialize negotiated.
    negotiated: Option<String>,
    backoff: Backoff,
    last_failure: Option<Offline>,
    /// The last tool list the node gave, served while it is unreachable.
    tools: Option<Value>,
    /// The client was told something while the node was away (or the node went away after
    /// a connect): on the next connect it gets `notifications/tools/list_changed`.
    outage: bool,
    /// The client sent its own initialize (a reconnect then announces list changes).
    client_initialized: bool,
    /// The client has its initialize response, so pushed messages may follow it.
    client_ready: bool,
    /// Messages the node pushed before the client was ready (bounded; oldest dropped).
    early_pushes: Vec<Value>,
    /// The `GET /mcp` stream of the current generation; aborted when a newer one starts,
    /// so a half-dead stream of an old connection never forwards duplicates.
    stream: Option<tokio::task::JoinHandle<()>>,
}

struct Bridge {
    cfg: BridgeConfig,
    up: Mutex<Upstream>,
    /// Serialises connection attempts so retry paths share one attempt and one backoff.
    connecting: Mutex<()>,
    out: mpsc::UnboundedSender<Value>,
    /// Wakes the upstream loop when a request notices the node went away.
    wake: Notify,
    stopping: AtomicBool,
    stop: Notify,
    next_id: AtomicU64,
}

impl Bridge {
    fn send_client(&self, msg: Value) {
        let _ = self.out.send(msg);
    }

    fn internal_id(&self, what: &str) -> Value {
        json!(format!(
            "tuic-bridge-{what}-{}",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        ))
    }

    async fn headers_owned(&self, version: Option<&str>) -> (Option<String>, String) {
        let up = self.up.lock().await;
        let v = version
            .map(str::to_owned)
            .or_else(|| up.negotiated.clone())
            .unwrap_or_else(|| DEFAULT_PROTOCOL_VERSION.into());
        (up.session_id.clone(), v)
    }

    async fn post(
        &self,
        session_id: Option<&str>,
        version: &str,
        msg: &Value,
        deadline: Duration,
    ) -> Result<Response, IpcError> {
        let h = McpHeaders {
            session_id,
            tuic_session: self.cfg.tuic_session.as_deref(),
            protocol_version: version,
        };
        ipc::request(&self.cfg.socket, &h.post(msg), deadline).await
    }

    fn classify(&self, e: &IpcError) -> Offline {
        match e {
            IpcError::NotRunning { .. } => Offline::NotRunning(format!(
                "{}; nothing listens on {}",
                self.cfg.instance_label,
                self.cfg.socket.display()
            )),
            other => Offline::Other(other.to_string()),
        }
    }

    fn http_offline(resp: &Response) -> Offline {
        Offline::McpUnavailable(format!(
            "POST /mcp answered {} {}",
            resp.status(),
            mcp::error_text(resp)
        ))
    }

    async fn mark_down(&self, generation: Option<u64>) {
        let mut up = self.up.lock().await;
        if up.connected && generation.is_none_or(|g| g == up.generation) {
            up.connected = false;
            up.outage = true;
            drop(up);
            self.wake.notify_one();
        }
    }

    /// Connects if needed: replays the client's last initialize (or the bridge's own eager
    /// one) and starts the notification stream. Shares one backoff with every caller.
    /// Returns the initialize response when this call performed it.
    async fn ensure_connected(self: &Arc<Self>) -> Result<Option<Value>, Offline> {
        let _attempt = self.connecting.lock().await;
        let (init, old_sid) = {
            let up = self.up.lock().await;
            if up.connected {
                return Ok(None);
            }
            if !up.backoff.wait(Instant::now()).is_zero() {
                return Err(up
                    .last_failure
                    .clone()
                    .unwrap_or_else(|| Offline::Other("reconnecting".into())));
            }
            let init = up.last_initialize.clone().unwrap_or_else(|| {
                mcp::rpc_request(
                    Value::Null,
                    "initialize",
                    json!({
                        "protocolVersion": DEFAULT_PROTOCOL_VERSION,
                        "capabilities": {},
                        "clientInfo": mcp::client_info("tuic-bridge"),
                    }),
                )
            });
            (init, up.session_id.clone())
        };
        let outcome = self.try_initialize(init, old_sid).await;
        let mut up = self.up.lock().await;
        match outcome {
            Ok((sid, answer)) => {
                eprintln!(
                    "tuic-bridge: connected to {} (mcp-session-id {})",
                    self.cfg.socket.display(),
                    sid.as_deref().unwrap_or("none")
                );
                up.backoff.succeeded();
                up.connected = true;
                up.generation += 1;
                up.last_failure = None;
                if sid.is_some() {
                    up.session_id = sid.clone();
                }
                if up.last_initialize.is_some()
                    && let Some(v) = answer
                        .pointer("/result/protocolVersion")
                        .and_then(Value::as_str)
                {
                    up.negotiated = Some(v.to_owned());
                }
                let announce = up.outage && up.client_initialized;
                up.outage = false;
                self.restart_stream(&mut up);
                drop(up);
                if announce {
                    self.send_client(mcp::rpc_notification(
                        "notifications/tools/list_changed",
                        None,
                    ));
                }
                Ok(Some(answer))
            }
            Err(why) => {
                up.backoff.failed(Instant::now(), crate::jitter());
                if up.last_failure.as_ref() != Some(&why) {
                    eprintln!("tuic-bridge: {}", why.message());
                }
                up.last_failure = Some(why.clone());
                Err(why)
            }
        }
    }

    /// Replaces the notification stream with one for the current session and generation.
    fn restart_stream(self: &Arc<Self>, up: &mut Upstream) {
        if let Some(old) = up.stream.take() {
            old.abort();
        }
        up.stream = Some(tokio::spawn(
            self.clone()
                .notification_stream(up.generation, up.session_id.clone()),
        ));
    }

    /// Adopts the session id the node gave the client's own initialize, if it differs.
    async fn adopt_session(self: &Arc<Self>, sid: &str) {
        let mut up = self.up.lock().await;
        if up.connected && up.session_id.as_deref() != Some(sid) {
            up.session_id = Some(sid.to_owned());
            up.generation += 1;
            self.restart_stream(&mut up);
        }
    }

    /// One upstream initialize: with the known session id first, and once more without it
    /// when the node no longer knows that id (it restarted).
    async fn try_initialize(
        &self,
        mut init: Value,
        old_sid: Option<String>,
    ) -> Result<(Option<String>, Value), Offline> {
        let id = self.internal_id("init");
        init["id"] = id.clone();
        let version = policy::request_version(&init, None);
        let version = init
            .pointer("/params/protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or(&version)
            .to_owned();
        let mut sid = old_sid;
        loop {
            let resp = self
                .post(sid.as_deref(), &version, &init, policy::ORDINARY_DEADLINE)
                .await
                .map_err(|e| self.classify(&e))?;
            if !(200..300).contains(&resp.status()) {
                if sid.is_some() && matches!(resp.status(), 400 | 404) {
                    sid = None;
                    continue;
                }
                return Err(Self::http_offline(&resp));
            }
            let msgs = mcp::rpc_messages(&resp).map_err(Offline::Other)?;
            let answer = mcp::find_response(&msgs, &id)
                .cloned()
                .ok_or_else(|| Offline::Other("no initialize response".into()))?;
            if let Some(err) = answer.get("error") {
                return Err(Offline::Other(format!("initialize refused: {err}")));
            }
            let new_sid = resp
                .head
                .header(rpc::SESSION_HEADER)
                .map(str::to_owned)
                .or(sid);
            let note = mcp::rpc_notification("notifications/initialized", None);
            let _ = self
                .post(
                    new_sid.as_deref(),
                    &version,
                    &note,
                    policy::ORDINARY_DEADLINE,
                )
                .await;
            return Ok((new_sid, answer));
        }
    }

    /// Keeps one `GET /mcp` stream and forwards what the node pushes to the client.
    async fn notification_stream(self: Arc<Self>, generation: u64, sid: Option<String>) {
        let Some(sid) = sid else { return };
        let version = self.headers_owned(None).await.1;
        let h = McpHeaders {
            session_id: Some(&sid),
            tuic_session: self.cfg.tuic_session.as_deref(),
            protocol_version: &version,
        };
        let run = async {
            let mut resp = AsyncResponse::send(&self.cfg.socket, &h.get_stream()).await?;
            let head = resp.head().await?;
            if head.status != 200 {
                // No stream on this node (405) or a refused one: the 3 s ping still notices
                // a restart, so this is not a disconnect.
                eprintln!(
                    "tuic-bridge: GET /mcp answered {}; no server notifications",
                    head.status
                );
                return Ok(false);
            }
            let mut dec = SseDecoder::new(mcp::MAX_SSE_EVENT);
            while let Some(chunk) = resp.next_data().await? {
                if dec.feed(&chunk).is_err() {
                    break;
                }
                while let Some(ev) = dec.poll_event() {
                    self.forward_pushed(&ev.data).await;
                }
            }
            Ok::<bool, IpcError>(true)
        };
        let ended = tokio::select! {
            r = run => r.unwrap_or(true),
            _ = self.stop.notified() => false,
        };
        if ended && !self.stopping.load(Ordering::SeqCst) {
            self.mark_down(Some(generation)).await;
        }
    }

    async fn forward_pushed(&self, data: &str) {
        let Ok(msg) = serde_json::from_str::<Value>(data) else {
            return;
        };
        if msg.get("method").is_none() {
            return;
        }
        let mut up = self.up.lock().await;
        if up.client_ready {
            self.send_client(msg);
        } else {
            if up.early_pushes.len() >= MAX_EARLY_PUSHES {
                up.early_pushes.remove(0);
            }
            up.early_pushes.push(msg);
        }
    }

    /// Eager connect, then liveness pings while connected and retries while not.
    async fn upstream_loop(self: Arc<Self>) {
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            let (connected, generation, wait) = {
                let up = self.up.lock().await;
                (up.connected, up.generation, up.backoff.wait(Instant::now()))
            };
            if connected {
                tokio::select! {
                    _ = tokio::time::sleep(PING_INTERVAL) => {}
                    _ = self.wake.notified() => continue,
                    _ = self.stop.notified() => return,
                }
                if !self.ping().await {
                    self.mark_down(Some(generation)).await;
                }
            } else {
                if !wait.is_zero() {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.stop.notified() => return,
                    }
                }
                let _ = self.ensure_connected().await;
            }
        }
    }

    async fn ping(&self) -> bool {
        let (sid, version) = self.headers_owned(None).await;
        let msg = mcp::rpc_request(self.internal_id("ping"), "ping", json!({}));
        match self
            .post(sid.as_deref(), &version, &msg, PING_DEADLINE)
            .await
        {
            Ok(resp) => (200..300).contains(&resp.status()),
            Err(_) => false,
        }
    }

    async fn offline(&self, msg: &Value, why: &Offline) -> Value {
        let mut up = self.up.lock().await;
        up.outage = true;
        let version = policy::request_version(msg, up.negotiated.as_deref());
        policy::offline_answer(msg, &version, why, up.tools.as_ref())
    }

    /// Answers one client request.
    async fn handle_request(self: Arc<Self>, msg: Value) {
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
        let answer = match method {
            "ping" => json!({"jsonrpc": "2.0", "id": msg["id"], "result": {}}),
            "initialize" => {
                let answer = self.initialize(msg).await;
                // The initialize response goes first; what the node pushed meanwhile follows,
                // in order, under the same lock that orders later pushes.
                let mut up = self.up.lock().await;
                self.send_client(answer);
                up.client_ready = true;
                for m in std::mem::take(&mut up.early_pushes) {
                    self.send_client(m);
                }
                return;
            }
            _ => self.forward(msg).await,
        };
        self.send_client(answer);
    }

    async fn initialize(self: &Arc<Self>, msg: Value) -> Value {
        let connected = {
            let mut up = self.up.lock().await;
            up.last_initialize = Some(msg.clone());
            up.client_initialized = true;
            up.connected
        };
        let answer = if connected {
            Some(self.forward(msg.clone()).await)
        } else {
            // Connecting now replays exactly this initialize; its answer is the client's.
            match self.ensure_connected().await {
                Ok(Some(mut a)) => {
                    a["id"] = msg["id"].clone();
                    Some(a)
                }
                Ok(None) => Some(self.forward(msg.clone()).await),
                Err(why) => {
                    self.up.lock().await.outage = true;
                    return policy::offline_initialize(&msg, &why);
                }
            }
        };
        let answer = answer.expect("set above");
        if let Some(v) = answer
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
        {
            self.up.lock().await.negotiated = Some(v.to_owned());
        }
        answer
    }

    /// Forwards a request and returns the node's answer, or the offline answer.
    async fn forward(self: &Arc<Self>, msg: Value) -> Value {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let deadline = policy::deadline_for(&msg);
        let mut retried = false;
        loop {
            if let Err(why) = self.ensure_connected().await {
                return self.offline(&msg, &why).await;
            }
            let generation = self.up.lock().await.generation;
            let (sid, version) = self.headers_owned(None).await;
            let version = policy::request_version(&msg, Some(&version));
            match self.post(sid.as_deref(), &version, &msg, deadline).await {
                Ok(resp) if (200..300).contains(&resp.status()) => {
                    if msg.get("method").and_then(Value::as_str) == Some("initialize")
                        && let Some(new_sid) = resp.head.header(rpc::SESSION_HEADER)
                    {
                        self.adopt_session(new_sid).await;
                    }
                    return self.answer_from(&msg, &resp).await;
                }
                Ok(resp) if !retried && sid.is_some() && resp.status() == 404 => {
                    // The node no longer knows our protocol session (it restarted before a
                    // ping noticed): reconnect with the replayed initialize and try once more.
                    // Nothing ran on the node, so the retry cannot duplicate work.
                    retried = true;
                    self.mark_down(Some(generation)).await;
                }
                Ok(resp) => {
                    if resp.status() == 404 {
                        self.mark_down(Some(generation)).await;
                        return self.offline(&msg, &Self::http_offline(&resp)).await;
                    }
                    return policy::error_answer(
                        id,
                        rpc::INTERNAL_ERROR,
                        &format!(
                            "the node answered {} for POST /mcp: {}",
                            resp.status(),
                            mcp::error_text(&resp)
                        ),
                    );
                }
                Err(IpcError::NotRunning { .. }) if !retried => {
                    // Nothing reached the node; one fresh attempt (subject to the backoff).
                    retried = true;
                    self.mark_down(Some(generation)).await;
                }
                Err(IpcError::Timeout { .. }) => {
                    // The node may be hung: let the liveness check look now. A tools/call
                    // gets a tool error, other methods a JSON-RPC error.
                    self.wake.notify_one();
                    let why = Offline::Other(format!("no answer within {}s", deadline.as_secs()));
                    return policy::offline_answer(&msg, &version, &why, None);
                }
                Err(e) => {
                    self.mark_down(Some(generation)).await;
                    let why = self.classify(&e);
                    return self.offline(&msg, &why).await;
                }
            }
        }
    }

    async fn answer_from(&self, msg: &Value, resp: &Response) -> Value {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let msgs = match mcp::rpc_messages(resp) {
            Ok(m) => m,
            Err(e) => {
                return policy::error_answer(
                    id,
                    rpc::INTERNAL_ERROR,
                    &format!("invalid answer: {e}"),
                );
            }
        };
        let mut answer = None;
        for m in msgs {
            if answer.is_none() && m.get("id") == Some(&id) && m.get("method").is_none() {
                answer = Some(m);
            } else if m.get("method").is_some() {
                self.send_client(m);
            }
        }
        let Some(answer) = answer else {
            return policy::error_answer(
                id,
                rpc::INTERNAL_ERROR,
                "the node sent no response to this request",
            );
        };
        if msg.get("method").and_then(Value::as_str) == Some("tools/list")
            && let Some(tools) = answer.pointer("/result/tools")
        {
            self.up.lock().await.tools = Some(tools.clone());
        }
        answer
    }

    /// Forwards a client notification or response; best effort, never answered.
    async fn handle_oneway(self: Arc<Self>, msg: Value) {
        if !self.up.lock().await.connected {
            return;
        }
        let (sid, version) = self.headers_owned(None).await;
        let _ = self
            .post(sid.as_deref(), &version, &msg, policy::ORDINARY_DEADLINE)
            .await;
    }
}

/// Runs the bridge until stdin ends; then settles in-flight requests and ends the
/// protocol session with `DELETE /mcp`.
pub async fn run(cfg: BridgeConfig) -> anyhow::Result<()> {
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        let mut last_progress: Option<Instant> = None;
        // `Null` is the end marker: stray tasks may still hold a sender at shutdown.
        while let Some(msg) = out_rx.recv().await {
            if msg.is_null() {
                break;
            }
            let method = msg.get("method").and_then(Value::as_str);
            if method.is_none()
                && msg.get("id").is_some()
                && let Some(at) = last_progress.take()
            {
                let wait = PROGRESS_GAP.saturating_sub(at.elapsed());
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
            }
            let progress = method == Some("notifications/progress");
            let mut line = serde_json::to_vec(&msg).expect("a Value always serializes");
            line.push(b'\n');
            if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
            if progress {
                last_progress = Some(Instant::now());
            }
        }
    });
    let bridge = Arc::new(Bridge {
        cfg,
        up: Mutex::new(Upstream::default()),
        connecting: Mutex::new(()),
        out: out_tx,
        wake: Notify::new(),
        stopping: AtomicBool::new(false),
        stop: Notify::new(),
        next_id: AtomicU64::new(1),
    });
    let upstream = tokio::spawn(bridge.clone().upstream_loop());
    let mut inflight = JoinSet::new();
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut stdin)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            break;
        }
        if line.len() > MAX_LINE {
            bridge.send_client(policy::error_answer(
                Value::Null,
                rpc::INVALID_REQUEST,
                "message too large",
            ));
            // Skip the rest of the oversized line.
            let mut rest = Vec::new();
            stdin.read_until(b'\n', &mut rest).await?;
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let msg: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                bridge.send_client(policy::error_answer(
                    Value::Null,
                    rpc::PARSE_ERROR,
                    &format!("parse error: {e}"),
                ));
                continue;
            }
        };
        let is_request = msg.get("method").is_some() && msg.get("id").is_some();
        if is_request {
            inflight.spawn(bridge.clone().handle_request(msg));
        } else {
            inflight.spawn(bridge.clone().handle_oneway(msg));
        }
        // Reap finished handlers so the set does not grow with the session's length.
        while inflight.try_join_next().is_some() {}
    }
    // stdin EOF: every in-flight request settles (each is bounded by its deadline).
    while inflight.join_next().await.is_some() {}
    bridge.stopping.store(true, Ordering::SeqCst);
    bridge.stop.notify_waiters();
    let (sid, version) = bridge.headers_owned(None).await;
    if let Some(sid) = sid {
        let h = McpHeaders {
            session_id: Some(&sid),
            tuic_session: bridge.cfg.tuic_session.as_deref(),
            protocol_version: &version,
        };
        let _ = ipc::request(&bridge.cfg.socket, &h.delete(), DELETE_DEADLINE).await;
    }
    upstream.abort();
    if let Some(stream) = bridge.up.lock().await.stream.take() {
        stream.abort();
    }
    bridge.send_client(Value::Null);
    let _ = writer.await;
    Ok(())
}
