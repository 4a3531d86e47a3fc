//! The MCP endpoint: Streamable HTTP on `/mcp` in both protocol eras (legacy `initialize`
//! sessions and the stateless 2026-07-28 `server/discover`), the protocol-session table and
//! its reaper, the native tool registry, the instructions, and `GET /mcp/status` /
//! `GET /mcp/instructions`.
//!
//! Hand-written on axum: the transport's behaviour is the product, and official SDKs are the
//! test oracles. It owns no PTYs and no mailboxes: the terminal core and agent mail plug in
//! through [`sessions::IdentityLiveness`] and the tool handlers.

pub(crate) mod features;
pub(crate) mod fixtures;
pub(crate) mod hubtools;
pub(crate) mod instructions;
pub(crate) mod protocol;
pub(crate) mod registry;
pub(crate) mod rights;
pub(crate) mod sessions;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tool_tests;
pub(crate) mod tools;
pub(crate) mod transport;
pub(crate) mod upstreams;

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::state::Node;
use registry::Registry;
use sessions::{IdentityLiveness, NoPtys, SessionTable};
use tools::task::TaskTable;

/// The MCP server name (public contract, like the tool names).
pub(crate) const SERVER_NAME: &str = "tuicommander";

/// Everything the MCP endpoint keeps between requests.
#[derive(Debug)]
pub struct McpState {
    /// Protocol sessions, identities and stream senders.
    pub sessions: SessionTable,
    /// Native and run-time tools.
    pub registry: Registry,
    /// Task handles of spawned agents.
    pub tasks: TaskTable,
    /// Whether an identity is still addressable (the terminal core replaces the default).
    pub liveness: RwLock<Arc<dyn IdentityLiveness>>,
    /// The last announced tool surface, to fire `list_changed` only on a real change.
    surface: Mutex<(Vec<String>, bool, bool)>,
    /// Tool-surface changes, for `subscriptions/listen` streams (2026-07-28).
    pub changes: tokio::sync::broadcast::Sender<()>,
    /// Open `ui action=confirm` dialogs: request id → the waiting handler's answer channel.
    pub confirms: Mutex<std::collections::HashMap<String, std::sync::mpsc::SyncSender<bool>>>,
    /// Open `session action=suspend` requests: request id → the waiting call's verdict channel
    /// (`Err(reason)` when the tab refuses).
    pub(crate) suspends: Mutex<std::collections::HashMap<String, SuspendReply>>,
    /// (claimant protocol session, identity) pairs already warned about a refused identity
    /// claim: the spec throttles the WARN to one per claimant pair (bounded, see
    /// `tools::agent::identity::CLAIM_WARNINGS`).
    pub(crate) claim_warnings: Mutex<std::collections::HashSet<(String, String)>>,
    /// Resources, prompts, logging and completion state (subscriptions, levels).
    pub features: features::Features,
}

/// Where a UI's answer to one suspend request goes.
pub(crate) type SuspendReply = tokio::sync::oneshot::Sender<Result<(), String>>;

impl McpState {
    /// Fresh state for a node whose config is `cfg`.
    pub fn new(cfg: &crate::config::Config) -> Self {
        let s = Self {
            sessions: SessionTable::default(),
            registry: Registry::default(),
            tasks: TaskTable::default(),
            liveness: RwLock::new(Arc::new(NoPtys)),
            surface: Mutex::new(registry::surface_fingerprint(cfg)),
            confirms: Mutex::new(std::collections::HashMap::new()),
            suspends: Mutex::new(std::collections::HashMap::new()),
            claim_warnings: Mutex::new(std::collections::HashSet::new()),
            features: features::Features::default(),
            changes: tokio::sync::broadcast::channel(16).0,
        };
        if cfg.mcp_conformance_fixtures {
            fixtures::register(&s.registry);
        }
        s
    }

    /// Sends `notifications/tools/list_changed` to every `GET /mcp` stream.
    pub fn notify_list_changed(&self) -> usize {
        let n = self
            .sessions
            .broadcast(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        // A listen stream is optional; no listener is not an error.
        let _ = self.changes.send(());
        tracing::info!(source = "mcp", streams = n, "tool list changed");
        n
    }

    /// Compares the config's tool surface with the last announced one and notifies on change.
    pub fn surface_maybe_changed(&self, node: &Node) -> bool {
        let now = registry::surface_fingerprint(&node.config());
        let mut last = self.surface.lock().unwrap_or_else(|p| p.into_inner());
        if *last == now {
            return false;
        }
        *last = now;
        drop(last);
        self.notify_list_changed();
        true
    }

    /// Adds a run-time tool and announces it.
    pub fn add_tool(&self, def: Arc<registry::ToolDef>) -> bool {
        let added = self.registry.add(def);
        if added {
            self.notify_list_changed();
        }
        added
    }

    /// Removes a run-time tool and announces it.
    pub fn remove_tool(&self, name: &str) -> bool {
        let removed = self.registry.remove(name);
        if removed {
            self.notify_list_changed();
        }
        removed
    }

    /// One reaper sweep: idle protocol sessions and expired tasks. Returns how many protocol
    /// sessions went.
    pub fn reap(&self, cfg: &crate::config::Config, now: Instant) -> usize {
        self.sweep(cfg, now).reaped.len()
    }

    /// [`McpState::reap`], reporting what the sweep did (the caller retires the peers of
    /// `retired` identities).
    pub fn sweep(&self, cfg: &crate::config::Config, now: Instant) -> sessions::Sweep {
        let liveness = self
            .liveness
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let ttl = Duration::from_millis(cfg.tuning.mcp_session_ttl_ms);
        let sweep = self.sessions.reap(now, ttl, liveness.as_ref());
        let tasks = self
            .tasks
            .reap(now, Duration::from_millis(cfg.tuning.mcp_task_retention_ms));
        if !sweep.reaped.is_empty() || !sweep.kept.is_empty() || tasks > 0 {
            tracing::info!(
                source = "mcp",
                reaped = sweep.reaped.len(),
                tasks_reaped = tasks,
                retained_identities = ?sweep.kept,
                retired_identities = ?sweep.retired,
                "mcp reaper sweep"
            );
        }
        sweep
    }

    /// Applies the table cap (`tuning.mcp_session_cap`) after a request may have added a
    /// session: the oldest idle sessions go, with the reaper's identity rules. The caller
    /// retires the peers of `retired` identities, as after a sweep.
    pub fn enforce_cap(&self, cfg: &crate::config::Config) -> sessions::Sweep {
        let cap = cfg.tuning.mcp_session_cap.max(1);
        if self.sessions.len() <= cap {
            return sessions::Sweep::default();
        }
        let liveness = self
            .liveness
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let sweep = self.sessions.evict_over_cap(cap, liveness.as_ref());
        if !sweep.reaped.is_empty() {
            tracing::info!(
                source = "mcp",
                evicted = sweep.reaped.len(),
                cap,
                retained_identities = ?sweep.kept,
                retired_identities = ?sweep.retired,
                "mcp session cap evicted idle sessions"
            );
        }
        sweep
    }
}

/// Routes of the MCP endpoint, merged into the node router.
pub(crate) fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route(
            "/mcp",
            get(transport::get_stream)
                .post(transport::post)
                .delete(transport::delete),
        )
        .route("/mcp/status", get(status))
        .route(
            "/mcp/confirm-response",
            axum::routing::post(confirm_response),
        )
        .route(
            "/mcp/suspend-response",
            axum::routing::post(suspend_response),
        )
        .route("/mcp/instructions", get(instructions_route))
}

/// Starts the reaper and the tool-surface watcher; both end at shutdown.
pub(crate) fn spawn_background(node: &Arc<Node>) {
    features::resources::spawn_list_changes(node);
    features::logging::spawn_forwarder(node);
    let n = node.clone();
    node.tasks.spawn(async move {
        loop {
            let every = Duration::from_millis(n.config().tuning.mcp_reap_interval_ms.max(10));
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
            }
            let sweep = n.mcp.sweep(&n.config(), Instant::now());
            crate::mail::evict_peers_for_reaped_mcp_session(&n.mail, &sweep.retired);
            crate::mail::forget_pending(&n.mail, &sweep.reaped);
        }
    });
    // Config reloads from disk and `PUT /config` both publish or replace the config; the
    // watcher reacts to the bus event and re-checks on a slow tick for hand edits.
    let n = node.clone();
    node.tasks.spawn(async move {
        let mut rx = n.bus.subscribe();
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        loop {
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                _ = rx.recv() => {}
                _ = tick.tick() => {}
            }
            n.mcp.surface_maybe_changed(&n);
        }
    });
}

/// The instructions for the node's current state and a caller's surface.
pub(crate) fn current_instructions(node: &Node, collapsed: bool) -> String {
    // Repositories and sessions join the context when their registries are merged.
    let ctx = instructions::InstructionContext {
        peers: node.mcp.sessions.identity_count(),
        ..Default::default()
    };
    instructions::render(&ctx, collapsed)
}

/// `GET /mcp/instructions`: the classic (or configured collapsed) instructions as text.
async fn instructions_route(State(node): State<Arc<Node>>) -> impl IntoResponse {
    let collapsed = node.config().collapse_tools;
    (
        [(CONTENT_TYPE, "text/plain; charset=utf-8")],
        current_instructions(&node, collapsed),
    )
}

/// Body of `POST /mcp/confirm-response`.
#[derive(Debug, serde::Deserialize)]
struct ConfirmAnswer {
    request_id: String,
    confirmed: bool,
}

/// `POST /mcp/confirm-response {request_id, confirmed}`: a UI answers an open confirm dialog.
async fn confirm_response(
    State(node): State<Arc<Node>>,
    crate::routes::JsonBody(a): crate::routes::JsonBody<ConfirmAnswer>,
) -> Result<Json<Value>, ApiError> {
    let tx = node
        .mcp
        .confirms
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&a.request_id);
    match tx {
        Some(tx) => {
            // The handler may have timed out a moment ago; then the answer is moot.
            let _ = tx.try_send(a.confirmed);
            Ok(Json(json!({"ok": true})))
        }
        None => Err(ApiError::not_found(
            "no open confirmation with that request_id (answered or timed out)",
        )),
    }
}

/// Body of `POST /mcp/suspend-response`.
#[derive(Debug, serde::Deserialize)]
struct SuspendAnswer {
    request_id: String,
    ok: bool,
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /mcp/suspend-response {request_id, ok, reason}`: the tab that performed (or refused)
/// a suspend answers the waiting `session action=suspend`; the first answer wins.
async fn suspend_response(
    State(node): State<Arc<Node>>,
    crate::routes::JsonBody(a): crate::routes::JsonBody<SuspendAnswer>,
) -> Result<Json<Value>, ApiError> {
    let tx = node
        .mcp
        .suspends
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&a.request_id);
    let Some(tx) = tx else {
        return Err(ApiError::not_found(
            "no open suspend request with that request_id (answered or timed out)",
        ));
    };
    let verdict = if a.ok {
        Ok(())
    } else {
        Err(a
            .reason
            .filter(|r| !r.trim().is_empty())
            .unwrap_or_else(|| "the tab refused".into()))
    };
    // The call may have timed out a moment ago; then the answer is moot.
    let _ = tx.send(verdict);
    Ok(Json(json!({"ok": true})))
}

/// `GET /mcp/status`: whether the route is active, the table counts, and the `native_tools`
/// catalogue (disabled tools included, so a UI can re-enable them).
async fn status(State(node): State<Arc<Node>>) -> Result<Json<Value>, ApiError> {
    let cfg = node.config();
    let native: Vec<Value> = node
        .mcp
        .registry
        .native()
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "summary": t.summary,
                "description": t.description,
                "enabled": Registry::enabled(&cfg, t.name),
            })
        })
        .collect();
    Ok(Json(json!({
        "enabled": cfg.mcp_server_enabled,
        "server_name": SERVER_NAME,
        "protocol_versions": protocol::SUPPORTED,
        "collapse_tools": cfg.collapse_tools,
        "disabled_native_tools": cfg.disabled_native_tools,
        "sessions": node.mcp.sessions.stats(),
        "tasks": node.mcp.tasks.len(),
        "resource_subscriptions": node.mcp.features.subs.total(),
        "peer_uplink": node.peer.uplink_status(),
        "native_tools": native,
        "upstreams": node.upstreams.status(),
        "hub_upstream_tools": node.peer.hub_tools.status(),
    })))
}
