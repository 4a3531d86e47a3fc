//! Operations routes: the replacements the removed MCP actions name (`GET /agents`,
//! `GET /stats`, `GET /process/stats`, `GET /metrics`) and the phone's persisted Activity
//! array (`GET/PUT /config/activity`).
//!
//! Read-only views over the services (sessions, mail, peer outbox, progress journal) plus
//! `/proc`; the only thing this module writes is `activity.json`. It knows no other host: the
//! hub merges these views across its connections (`tuic-hub`).

pub mod metrics;
pub mod procstat;
pub mod service;
pub mod update;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::state::Node;

/// Items the Activity array holds at most.
pub const MAX_ACTIVITY_ITEMS: usize = 1_000;

/// Operations state of a node.
#[derive(Debug, Default)]
pub struct Ops {
    /// The `/metrics` collectors.
    pub metrics: metrics::Metrics,
    /// Messages delivered into this node's inboxes (`Mail::post` counts).
    pub mail_posted: AtomicU64,
    /// The previous `/process/stats` sample per session: (when, CPU seconds), for
    /// `cpu_percent` over the interval between two requests.
    cpu_samples: Mutex<HashMap<String, (Instant, f64)>>,
    /// Serialises writes of `activity.json`.
    activity: Mutex<()>,
}

/// The operations routes, merged into the node's router.
pub fn routes() -> axum::Router<Arc<Node>> {
    axum::Router::new()
        .route("/agents", get(agents))
        .route("/stats", get(stats))
        .route("/process/stats", get(process_stats))
        .route("/metrics", get(metrics_text))
        .route("/config/activity", get(get_activity).put(put_activity))
        .route("/store/backup", axum::routing::post(backup))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
}

/// `GET /agents`: agent detection over the live sessions (the foreground process of each).
async fn agents(State(node): State<Arc<Node>>) -> Result<Json<Value>, ApiError> {
    blocking(move || {
        let rows = node.sessions.rows();
        let scanned = rows.len();
        let agents: Vec<Value> = rows
            .into_iter()
            .filter(|r| r.agent_type.is_some())
            .map(|r| {
                let mut v = serde_json::to_value(&r).unwrap_or(Value::Null);
                if let Some(s) = node.sessions.live(&r.session_id) {
                    v["pid"] = json!(s.pid);
                    v["foreground_pid"] = json!(s.foreground_pid());
                }
                v
            })
            .collect();
        Ok(Json(json!({"agents": agents, "sessions_scanned": scanned})))
    })
    .await
}

/// `GET /stats`: one object of the node's counts.
async fn stats(State(node): State<Arc<Node>>) -> Json<Value> {
    let s = node.sessions.stats();
    let (peers, unread) = {
        let g = node.mail.lock();
        let unread: usize = g.peers.keys().map(|p| g.inboxes.unread(p)).sum();
        (g.peers.len(), unread)
    };
    Json(json!({
        "uptime_secs": node.started.elapsed().as_secs(),
        "sessions": {
            "live": s.live,
            "tombstoned": s.tombstoned,
            "created_total": s.created_total,
            "output_bytes_total": s.output_bytes_total,
        },
        "mail": {
            "peers": peers,
            "unread": unread,
            "posted_total": node.ops.mail_posted.load(std::sync::atomic::Ordering::Relaxed),
            "uplink": node.peer.uplink_status(),
        },
        "mcp": {"sessions": node.mcp.sessions.len()},
        "progress": {
            "entries": node.progress.journal.len(),
            "projects": node.progress.journal.projects().len(),
        },
    }))
}

/// `GET /process/stats`: per live session, its process tree's CPU and resident memory.
async fn process_stats(State(node): State<Arc<Node>>) -> Result<Json<Value>, ApiError> {
    blocking(move || {
        let now = Instant::now();
        let mut rows = Vec::new();
        let mut next = HashMap::new();
        let prev = node
            .ops
            .cpu_samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut sessions = node.sessions.live_sessions();
        sessions.sort_by(|a, b| a.alias.cmp(&b.alias));
        for s in sessions {
            if s.exit().is_some() {
                continue;
            }
            let Some(pid) = s.pid else { continue };
            let t = procstat::tree(pid as i32);
            let cpu_percent = prev.get(&s.id).and_then(|(at, cpu)| {
                let dt = now.duration_since(*at).as_secs_f64();
                (dt > 0.0).then(|| (t.cpu_seconds - cpu).max(0.0) / dt * 100.0)
            });
            next.insert(s.id.clone(), (now, t.cpu_seconds));
            rows.push(json!({
                "session_id": s.id,
                "alias": s.alias,
                "pid": pid,
                "processes": t.pids.len(),
                "pids": t.pids,
                "cpu_seconds": t.cpu_seconds,
                "cpu_percent": cpu_percent,
                "rss_bytes": t.rss_bytes,
            }));
        }
        *node
            .ops
            .cpu_samples
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = next;
        Ok(Json(
            json!({"sessions": rows, "sampled_at_ms": crate::logs::now_ms()}),
        ))
    })
    .await
}

/// `GET /metrics`: the Prometheus text exposition.
async fn metrics_text(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    let text = blocking(move || Ok(node.ops.metrics.render(&node))).await?;
    Ok(([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response())
}

fn activity_file(node: &Node) -> std::path::PathBuf {
    node.paths.config_dir.join("activity.json")
}

/// `GET /config/activity`: the persisted Activity array (`[]` before anything was saved).
async fn get_activity(State(node): State<Arc<Node>>) -> Result<Json<Value>, ApiError> {
    blocking(move || {
        let path = activity_file(&node);
        match std::fs::read(&path) {
            Ok(b) => match serde_json::from_slice::<Value>(&b) {
                Ok(v @ Value::Array(_)) => Ok(Json(v)),
                _ => {
                    tracing::warn!(file = %path.display(), "activity.json is not an array; serving []");
                    Ok(Json(json!([])))
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Json(json!([]))),
            Err(e) => Err(ApiError::internal(format!("reading activity.json: {e}"))),
        }
    })
    .await
}

/// `PUT /config/activity`: replaces the persisted array (objects only, at most
/// [`MAX_ACTIVITY_ITEMS`]); written to a temporary file and renamed into place.
async fn put_activity(State(node): State<Arc<Node>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let items = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Array(a)) => a,
        Ok(_) => {
            return Err(ApiError::bad_request(
                "the activity body must be a JSON array",
            ));
        }
        Err(e) => return Err(ApiError::bad_request(format!("the body is not JSON: {e}"))),
    };
    if items.len() > MAX_ACTIVITY_ITEMS {
        return Err(ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "{} activity items; at most {MAX_ACTIVITY_ITEMS} are kept",
                items.len()
            ),
        ));
    }
    if let Some(i) = items.iter().position(|v| !v.is_object()) {
        return Err(ApiError::bad_request(format!(
            "activity item {i} is not an object"
        )));
    }
    blocking(move || {
        let _g = node.ops.activity.lock().unwrap_or_else(|p| p.into_inner());
        let path = activity_file(&node);
        let bytes = serde_json::to_vec(&items).map_err(|e| ApiError::internal(e.to_string()))?;
        crate::config::write_file_atomic(&path, &bytes, 0o600)
            .map_err(|e| ApiError::internal(format!("writing activity.json: {e:#}")))?;
        Ok(Json(json!({"ok": true, "count": items.len()})))
    })
    .await
}

#[derive(Debug, serde::Deserialize)]
struct BackupBody {
    /// Absolute path of the file to write (must not exist).
    path: String,
}

/// `POST /store/backup {path}` (IPC only): a consistent copy of the store while the node runs
/// (writes pause for the copy) → `{path, bytes, sha256}`. `tuic-node backup FILE` calls it.
async fn backup(
    State(node): State<Arc<Node>>,
    transport: Option<axum::Extension<crate::guard::Transport>>,
    crate::error::JsonBody(b): crate::error::JsonBody<BackupBody>,
) -> Result<Json<Value>, ApiError> {
    if !matches!(
        transport.map(|axum::Extension(t)| t),
        Some(crate::guard::Transport::Ipc)
    ) {
        return Err(ApiError::forbidden(
            "store backups are taken only from this machine's IPC socket",
        ));
    }
    let dest = std::path::PathBuf::from(&b.path);
    if !dest.is_absolute() {
        return Err(ApiError::bad_request("path must be absolute"));
    }
    let n = node.clone();
    let r = tokio::task::spawn_blocking(move || {
        service::backup_store(&n.store, &n.paths.store_file(), &dest)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::bad_request(format!("{e:#}")))?;
    Ok(Json(json!(r)))
}
