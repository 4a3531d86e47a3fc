//! Operations views behind the routes in `routes::ops`: the replacements the removed MCP
//! actions name (`GET /agents`, `GET /stats`, `GET /process/stats`, `GET /metrics`) and the
//! phone's persisted Activity array (`GET/PUT /config/activity`).
//!
//! Read-only views over the services (sessions, mail, peer outbox, progress journal) plus
//! `/proc`; the only thing this module writes is `activity.json`. It knows no other host: the
//! hub merges these views across its connections (`tuic-hub`). The views read the services
//! through [`OpsEnv`], built by the composition root; this module holds no node.

pub mod metrics;
pub mod procstat;
pub mod service;
pub mod update;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::progress::Progress;
use crate::session::Registry;
use crate::upstream::Upstreams;

/// Items the Activity array holds at most.
pub const MAX_ACTIVITY_ITEMS: usize = 1_000;

/// What the views read of the layers above the domain services (agent mail, the uplink
/// outbox, the MCP endpoint), at the moment of a view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Registered mail peers.
    pub mail_peers: usize,
    /// Unread messages over every peer's inbox.
    pub mail_unread: usize,
    /// The uplink outbox's status (`{held, bytes, ...}`).
    pub uplink: Value,
    /// Open MCP protocol sessions.
    pub mcp_sessions: usize,
}

/// Reads [`Counts`] now.
pub type CountsSource = Arc<dyn Fn() -> Counts + Send + Sync>;

/// What the operations views use of the node. Cloning shares everything.
#[derive(Clone)]
pub struct OpsEnv {
    /// Live sessions (agents, process trees, session counts).
    pub sessions: Arc<Registry>,
    /// The progress journal (entry counts).
    pub progress: Arc<Progress>,
    /// The upstream MCP servers (`/metrics` gauges).
    pub upstreams: Arc<Upstreams>,
    /// Where `activity.json` is kept.
    pub config_dir: PathBuf,
    /// Process start, for `uptime_secs`.
    pub started: Instant,
    /// Mail, uplink and MCP figures.
    pub counts: CountsSource,
}

impl std::fmt::Debug for OpsEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpsEnv")
            .field("config_dir", &self.config_dir)
            .finish_non_exhaustive()
    }
}

/// Operations state of a node.
#[derive(Debug)]
pub struct Ops {
    /// The `/metrics` collectors.
    pub metrics: metrics::Metrics,
    /// Messages delivered into this node's inboxes (`Mail::post` counts).
    pub mail_posted: Arc<AtomicU64>,
    /// The previous `/process/stats` sample per session: (when, CPU seconds), for
    /// `cpu_percent` over the interval between two requests.
    cpu_samples: Mutex<HashMap<String, (Instant, f64)>>,
    /// Serialises writes of `activity.json`.
    activity: Mutex<()>,
    /// What the views read.
    env: OpsEnv,
}

impl Ops {
    /// The operations state over `env`.
    pub fn new(env: OpsEnv) -> Self {
        Self {
            metrics: metrics::Metrics::default(),
            mail_posted: Arc::default(),
            cpu_samples: Mutex::default(),
            activity: Mutex::default(),
            env,
        }
    }

    /// `GET /metrics`: the text exposition now.
    pub fn metrics_text(&self) -> String {
        self.metrics.render(
            &self.env,
            self.mail_posted.load(std::sync::atomic::Ordering::Relaxed),
        )
    }
}

impl Ops {
    /// `GET /agents`: agent detection over the live sessions (the foreground process of each).
    /// Blocking (reads `/proc`).
    pub(crate) fn agents(&self) -> Value {
        {
            let rows = self.env.sessions.rows();
            let scanned = rows.len();
            let agents: Vec<Value> = rows
                .into_iter()
                .filter(|r| r.agent_type.is_some())
                .map(|r| {
                    let mut v = serde_json::to_value(&r).unwrap_or(Value::Null);
                    if let Some(s) = self.env.sessions.live(&r.session_id) {
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
    pub(crate) fn stats(&self) -> Value {
        let s = self.env.sessions.stats();
        let c = (self.env.counts)();
        let (peers, unread) = (c.mail_peers, c.mail_unread);
        json!({
            "uptime_secs": self.env.started.elapsed().as_secs(),
            "sessions": {
                "live": s.live,
                "tombstoned": s.tombstoned,
                "created_total": s.created_total,
                "output_bytes_total": s.output_bytes_total,
            },
            "mail": {
                "peers": peers,
                "unread": unread,
                "posted_total": self.mail_posted.load(std::sync::atomic::Ordering::Relaxed),
                "uplink": c.uplink,
            },
            "mcp": {"sessions": c.mcp_sessions},
            "progress": {
                "entries": self.env.progress.journal.len(),
                "projects": self.env.progress.journal.projects().len(),
            },
        })
    }

    /// `GET /process/stats`: per live session, its process tree's CPU and resident memory.
    /// Blocking (reads `/proc`).
    pub(crate) fn process_stats(&self) -> Value {
        {
            let now = Instant::now();
            let mut rows = Vec::new();
            let mut next = HashMap::new();
            let prev = self
                .cpu_samples
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let mut sessions = self.env.sessions.live_sessions();
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
            *self.cpu_samples.lock().unwrap_or_else(|p| p.into_inner()) = next;
            json!({"sessions": rows, "sampled_at_ms": crate::logs::now_ms()})
        }
    }

    fn activity_file(&self) -> std::path::PathBuf {
        self.env.config_dir.join("activity.json")
    }

    /// `GET /config/activity`: the persisted Activity array (`[]` before anything was saved).
    /// Blocking.
    pub(crate) fn read_activity(&self) -> Result<Value, ApiError> {
        let path = self.activity_file();
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

    /// Replaces the persisted array (checked by [`activity_items`]); written to a temporary file
    /// and renamed into place. Blocking.
    pub(crate) fn write_activity(&self, items: &[Value]) -> Result<(), ApiError> {
        let _g = self.activity.lock().unwrap_or_else(|p| p.into_inner());
        let path = self.activity_file();
        let bytes = serde_json::to_vec(items).map_err(|e| ApiError::internal(e.to_string()))?;
        crate::config::write_file_atomic(&path, &bytes, 0o600)
            .map_err(|e| ApiError::internal(format!("writing activity.json: {e:#}")))
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
