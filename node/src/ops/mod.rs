//! Operations views behind the routes in `routes::ops`: the replacements the removed MCP
//! actions name (`GET /agents`, `GET /stats`, `GET /process/stats`, `GET /metrics`) and the
//! phone's persisted Activity array (`GET/PUT /config/activity`).
//!
//! Read-only views over the services (sessions, mail, peer outbox, progress journal) plus
//! `/proc`; the only thing this module writes is `activity.json`. It knows no other host: the
//! hub merges these views across its connections (`tuic-hub`).

pub mod metrics;
pub mod procstat;
pub mod service;
pub mod update;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

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

/// `GET /agents`: agent detection over the live sessions (the foreground process of each).
/// Blocking (reads `/proc`).
pub(crate) fn agents(node: &Node) -> Value {
    {
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
        json!({"agents": agents, "sessions_scanned": scanned})
    }
}

/// `GET /stats`: one object of the node's counts.
pub(crate) fn stats(node: &Node) -> Value {
    let s = node.sessions.stats();
    let (peers, unread) = {
        let g = node.mail.lock();
        let unread: usize = g.peers.keys().map(|p| g.inboxes.unread(p)).sum();
        (g.peers.len(), unread)
    };
    json!({
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
    })
}

/// `GET /process/stats`: per live session, its process tree's CPU and resident memory.
/// Blocking (reads `/proc`).
pub(crate) fn process_stats(node: &Node) -> Value {
    {
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
        json!({"sessions": rows, "sampled_at_ms": crate::logs::now_ms()})
    }
}

fn activity_file(node: &Node) -> std::path::PathBuf {
    node.paths.config_dir.join("activity.json")
}

/// `GET /config/activity`: the persisted Activity array (`[]` before anything was saved).
/// Blocking.
pub(crate) fn read_activity(node: &Node) -> Result<Value, ApiError> {
    let path = activity_file(node);
    match std::fs::read(&path) {
        Ok(b) => match serde_json::from_slice::<Value>(&b) {
            Ok(v @ Value::Array(_)) => Ok(v),
            _ => {
                tracing::warn!(file = %path.display(), "activity.json is not an array; serving []");
                Ok(json!([]))
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!([])),
        Err(e) => Err(ApiError::internal(format!("reading activity.json: {e}"))),
    }
}

/// Checks a `PUT /config/activity` body before anything is written: a JSON array of objects,
/// at most [`MAX_ACTIVITY_ITEMS`].
pub(crate) fn activity_items(body: &[u8]) -> Result<Vec<Value>, ApiError> {
    let items = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(a)) => a,
        Ok(_) => {
            return Err(ApiError::bad_request(
                "the activity body must be a JSON array",
            ));
        }
        Err(e) => return Err(ApiError::bad_request(format!("the body is not JSON: {e}"))),
    };
    if items.len() > MAX_ACTIVITY_ITEMS {
        return Err(ApiError::too_large(format!(
            "{} activity items; at most {MAX_ACTIVITY_ITEMS} are kept",
            items.len()
        )));
    }
    if let Some(i) = items.iter().position(|v| !v.is_object()) {
        return Err(ApiError::bad_request(format!(
            "activity item {i} is not an object"
        )));
    }
    Ok(items)
}

/// Replaces the persisted array (checked by [`activity_items`]); written to a temporary file
/// and renamed into place. Blocking.
pub(crate) fn write_activity(node: &Node, items: &[Value]) -> Result<(), ApiError> {
    let _g = node.ops.activity.lock().unwrap_or_else(|p| p.into_inner());
    let path = activity_file(node);
    let bytes = serde_json::to_vec(items).map_err(|e| ApiError::internal(e.to_string()))?;
    crate::config::write_file_atomic(&path, &bytes, 0o600)
        .map_err(|e| ApiError::internal(format!("writing activity.json: {e:#}")))
}
