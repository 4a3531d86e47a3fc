//! The hub's upstream MCP tools offered on this node (issue 17 item 7): a tool source whose
//! tools are the ones the hub lists to its own agents (`{upstream}__{tool}`, the hub's
//! allow/deny filters applied), named here `hub.{upstream}__{tool}` so the name says where the
//! tool runs. The `.` cannot occur in an upstream name (`[a-z0-9_-]+`), so these names never
//! collide with this node's own upstreams, and they keep the one `__` delimiter Grok accepts.
//!
//! The catalogue comes over the peer link (`list_upstream_tools`) when the link comes up and
//! again when the hub hints `upstream_tools_changed`; a call goes over the link
//! (`call_upstream_tool`) with the caller's deadline, and the hub's `CallToolResult` comes back
//! unchanged. The hub applies its filters at dispatch too.
//!
//! A call that carries a `progressToken` (and a protocol session to stream to) asks the hub for
//! the upstream's progress (`progress: true`); the link task hands each `upstream_progress`
//! frame to [`HubTools::relay_progress`], which puts the caller's token back and pushes
//! `notifications/progress` to the caller's `GET /mcp` stream, exactly as a local upstream
//! call's progress goes. Progress stops with the call: a frame for a call whose caller stopped
//! waiting (its deadline) is dropped. Counters in `GET /mcp/status`: relayed, coalesced by the
//! hub (a flood outran the link), dropped here (the caller's stream was full or gone, or the
//! call was over).
//!
//! Across a link drop the list stays as it was (an agent's tool cache is not churned by a hub
//! restart), calls answer `hub_unavailable` at once, and the link's return re-reads the
//! catalogue. A node cannot tell a hub's `disconnect` from a restart, so the tools go (with
//! `notifications/tools/list_changed`) when the link has stayed down for
//! `tuning.hub_tools_grace_ms`.
//!
//! It owns no connection: the link task (`endpoint.rs`) sends the requests and hands the
//! answers back here. It holds no node either: what it tells the layer above (a changed list,
//! a caller's progress) goes through the [`HubToolsEnv`] the link task hands in, and the
//! registry's [`crate::mcp::registry::ToolSource`] face is the MCP adapter's
//! (`mcp/hubtools.rs`), which calls [`HubTools::call_over`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::mail::endpoint::Cmd;
use crate::mcp::registry::{CallCtx, ToolError};

/// The prefix that says a tool runs on the hub.
pub const PREFIX: &str = "hub.";

/// What a call's waiter gets back from the link task.
pub type CallReply = oneshot::Sender<Result<Value, ToolError>>;

/// Pushes a `notifications/progress` message to the stream of a caller's protocol session
/// (session, the caller's token, the message); whether it went.
pub type ProgressOut = Arc<dyn Fn(&str, &Value, &Value) -> bool + Send + Sync>;

/// What the hub's tools use of the node, built by the composition root and handed in by the
/// link task that drives them.
#[derive(Clone)]
pub struct HubToolsEnv {
    /// Owner of the grace timer started when the link goes down.
    pub tasks: TaskTracker,
    /// Fired at shutdown: the grace timer ends on it.
    pub shutdown: CancellationToken,
    /// `tuning.hub_tools_grace_ms` in force: how long the list outlives a dropped link.
    pub grace: Arc<dyn Fn() -> Duration + Send + Sync>,
    /// Announces a change of the listed set (`notifications/tools/list_changed` to every
    /// `GET /mcp` stream).
    pub list_changed: Arc<dyn Fn() + Send + Sync>,
    /// Pushes a caller's progress to its stream ([`ProgressOut`]).
    pub progress_out: ProgressOut,
}

impl std::fmt::Debug for HubToolsEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubToolsEnv").finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    /// The hub's tools, named as the hub names them.
    tools: Vec<Value>,
    /// The hub's catalogue generation `tools` belongs to.
    hub_generation: Option<u64>,
    /// The link generation (endpoint slot) that is up, if any.
    up: Option<u64>,
    /// The hub's `node_id` as its `hello` gave it, for messages.
    hub_name: Option<String>,
    /// Bumped by every link drop: a grace timer only clears the drop it was started for.
    down_epoch: u64,
}

/// The hub's upstream tools as this node knows them.
#[derive(Debug, Default)]
pub struct HubTools {
    state: Mutex<State>,
    /// Changes whenever the listed set changes (search index key, list_changed).
    generation: AtomicU64,
    /// Progress notifications pushed to a caller's stream.
    progress_relayed: AtomicU64,
    /// Progress notifications the hub coalesced away (as its frames reported).
    progress_coalesced: AtomicU64,
    /// Progress notifications that reached this node but not the caller.
    progress_dropped: AtomicU64,
}

/// Where a hub-routed call's progress goes: the caller's token and protocol session.
#[derive(Debug, Clone)]
pub struct ProgressRelay {
    /// The caller's own `progressToken`, put back on every notification.
    pub token: Value,
    /// The caller's protocol session, whose `GET /mcp` stream receives them.
    pub mcp_session: String,
}

fn qualified(t: &Value) -> Option<Value> {
    let n = t.get("name")?.as_str()?;
    let mut v = t.clone();
    v["name"] = json!(format!("{PREFIX}{n}"));
    Some(v)
}

impl HubTools {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hub(&self) -> String {
        self.lock()
            .hub_name
            .clone()
            .map_or_else(|| "the hub".to_owned(), |h| format!("hub '{h}'"))
    }

    /// The link `link` is up with the hub `hub_name`.
    pub fn link_up(&self, link: u64, hub_name: &str) {
        let mut g = self.lock();
        g.up = Some(link);
        g.hub_name = Some(hub_name.to_owned());
    }

    /// The hub's generation this node holds the catalogue of.
    pub fn hub_generation(&self) -> Option<u64> {
        self.lock().hub_generation
    }

    /// Installs the catalogue the hub answered; announces a change of the listed set.
    pub fn install(&self, env: &HubToolsEnv, hub_generation: u64, tools: Vec<Value>) {
        let changed = {
            let mut g = self.lock();
            g.hub_generation = Some(hub_generation);
            let changed = g.tools != tools;
            g.tools = tools;
            changed
        };
        if changed {
            self.generation.fetch_add(1, Ordering::Relaxed);
            (env.list_changed)();
        }
    }

    /// The link `link` went down: the catalogue stays for the grace period, then goes unless
    /// a link came back.
    pub fn link_down(self: &Arc<Self>, env: &HubToolsEnv, link: u64) {
        let epoch = {
            let mut g = self.lock();
            if g.up != Some(link) {
                return;
            }
            g.up = None;
            g.down_epoch += 1;
            g.down_epoch
        };
        let grace = (env.grace)();
        let (tools, shutdown, list_changed) =
            (self.clone(), env.shutdown.clone(), env.list_changed.clone());
        env.tasks.spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(grace) => {}
            }
            let cleared = {
                let mut g = tools.lock();
                let gone = g.up.is_none() && g.down_epoch == epoch && !g.tools.is_empty();
                if gone {
                    g.tools.clear();
                    g.hub_generation = None;
                }
                gone
            };
            if cleared {
                tracing::info!(
                    grace_ms = grace.as_millis() as u64,
                    "hub link stayed down; the hub's upstream tools are withdrawn"
                );
                tools.generation.fetch_add(1, Ordering::Relaxed);
                list_changed();
            }
        });
    }

    /// One `upstream_progress` frame of a call whose caller still waits: the caller's token
    /// back on it, pushed to the caller's stream (bounded; a full stream drops and counts).
    pub fn relay_progress(
        &self,
        env: &HubToolsEnv,
        relay: &ProgressRelay,
        mut params: Map<String, Value>,
        coalesced: u64,
    ) {
        self.progress_coalesced
            .fetch_add(coalesced, Ordering::Relaxed);
        params.insert("progressToken".into(), relay.token.clone());
        let msg = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params});
        if (env.progress_out)(&relay.mcp_session, &relay.token, &msg) {
            self.progress_relayed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.progress_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A progress frame that arrived for a call nobody waits for any more.
    pub fn progress_after_caller_left(&self, coalesced: u64) {
        self.progress_coalesced
            .fetch_add(coalesced, Ordering::Relaxed);
        self.progress_dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// `GET /mcp/status` row: whether the link is up, how many hub tools are listed, and the
    /// progress relay's counters.
    pub fn status(&self) -> Value {
        let g = self.lock();
        let mut v = json!({
            "link_up": g.up.is_some(),
            "tools": g.tools.len(),
            "progress": {
                "relayed": self.progress_relayed.load(Ordering::Relaxed),
                "coalesced_by_hub": self.progress_coalesced.load(Ordering::Relaxed),
                "dropped": self.progress_dropped.load(Ordering::Relaxed),
            },
        });
        if let Some(h) = &g.hub_name {
            v["hub"] = json!(h);
        }
        if let Some(gen_) = g.hub_generation {
            v["hub_generation"] = json!(gen_);
        }
        v
    }

    fn unavailable(&self, name: &str, why: &str) -> ToolError {
        let hub = self.hub();
        ToolError::new(
            "hub_unavailable",
            format!("{name} runs on {hub}, which is unreachable: {why}"),
        )
        .with("runs_on", json!("hub"))
    }
}

impl HubTools {
    /// Changes whenever the listed set changes.
    pub fn tool_generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// The hub's tools as callable here (`hub.{upstream}__{tool}`).
    pub fn tool_listings(&self) -> Vec<Value> {
        self.lock().tools.iter().filter_map(qualified).collect()
    }

    /// Whether `name` says it runs on the hub.
    pub fn owns_tool(&self, name: &str) -> bool {
        name.starts_with(PREFIX)
    }

    /// The listing of one hub tool, or why it cannot be called.
    pub fn tool_schema(&self, name: &str) -> Result<Value, ToolError> {
        let inner = &name[PREFIX.len()..];
        self.lock()
            .tools
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(inner))
            .and_then(qualified)
            .ok_or_else(|| {
                ToolError::new(
                    "unknown_tool",
                    format!("the hub lists no tool {inner} (unknown, or hidden by its filters)"),
                )
            })
    }

    /// Calls hub tool `name` over the live link task's channel `link` (none: no link is up),
    /// waiting at most `timeout_ms` (`tuning.hub_tool_call_timeout_ms`).
    pub async fn call_over(
        &self,
        link: Option<mpsc::UnboundedSender<Cmd>>,
        timeout_ms: u64,
        ctx: &CallCtx,
        name: &str,
        args: Map<String, Value>,
    ) -> Result<Value, ToolError> {
        let inner = name[PREFIX.len()..].to_owned();
        let timeout_ms = timeout_ms.max(1);
        let Some(link) = link else {
            return Err(self.unavailable(name, "no peer link to a hub is up"));
        };
        let (tx, rx) = oneshot::channel();
        // As for a local upstream: progress needs a token and a stream to carry it.
        let progress = match (&ctx.progress_token, &ctx.mcp_session) {
            (Some(token), Some(sid)) => Some(ProgressRelay {
                token: token.clone(),
                mcp_session: sid.clone(),
            }),
            _ => None,
        };
        let cmd = Cmd::CallUpstream {
            name: inner,
            arguments: args,
            timeout_ms,
            progress,
            reply: tx,
        };
        if link.send(cmd).is_err() {
            return Err(self.unavailable(name, "the peer link just ended"));
        }
        match tokio::time::timeout(Duration::from_millis(timeout_ms), rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(self.unavailable(name, "the peer link ended during the call")),
            Err(_) => Err(ToolError::new(
                "timeout",
                format!(
                    "{name}: {} did not answer within {timeout_ms} ms",
                    self.hub()
                ),
            )
            .with("runs_on", json!("hub"))),
        }
    }
}

/// The link task's side of calls: turns link answers into the waiting caller's reply.
pub fn answer(reply: CallReply, response: tuic_proto::peer::Response, hub: &str) {
    use tuic_proto::peer::Response as R;
    let r = match response {
        R::UpstreamResult(v) => Ok(v),
        R::Error {
            code,
            connection,
            message,
        } => Err(ToolError::new(
            "hub_refused",
            format!("the hub '{hub}' refused the call ({code:?}): {message}"),
        )
        .with("connection", json!(connection))),
        other => Err(ToolError::new(
            "internal",
            format!("unexpected answer from the hub '{hub}': {other:?}"),
        )),
    };
    let _ = reply.send(r);
}

/// A call whose request never got an answer because the link went down: uncertain whether the
/// hub ran it.
pub fn lost(reply: CallReply, hub: &str) {
    let _ = reply.send(Err(ToolError::new(
        "hub_unavailable",
        format!(
            "the link to hub '{hub}' went down during the call; the tool may or may not have run there"
        ),
    )
    .with("runs_on", json!("hub"))
    .with("uncertain", json!(true))));
}
