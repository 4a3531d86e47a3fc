//! The upstream MCP proxy (spec "Upstream MCP Proxy"): other MCP servers, configured in
//! `mcp-upstreams.json`, whose tools join `tools/list` as `{name}__{tool}` and are called
//! through tuic with their `CallToolResult` passed through unchanged.
//!
//! One supervisor task per enabled upstream owns its connection: it connects (stdio child or
//! Streamable HTTP), lists the tools, serves until the connection dies, a health check fails
//! past the breaker's threshold, or the definition changes, and reconnects as the breaker
//! says. The tool set visible to agents is the union of the `ready` upstreams' filtered
//! tools; every change bumps a generation that fires `notifications/tools/list_changed` and
//! invalidates the search index. Saves (`PUT /mcp/upstreams`) and hand edits of the file
//! restart exactly the upstreams whose definition changed.
//!
//! It does not speak MCP to agents (the `mcp` module does, through its `ToolSource` in `mcp/upstreams.rs`) and it
//! holds no secret in the file: bearer tokens live in the vault, bound to their origin.

pub mod breaker;
pub mod client;
pub mod config;
pub mod env;
pub mod http;
pub mod hubtools;
pub mod oauth;
pub mod search;
pub mod stdio;

mod credentials;
mod source;
mod supervisor;

pub use env::UpstreamEnv;
pub use supervisor::spawn;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::ConfigFile;
use crate::mcp::registry::ToolError;
use breaker::{Breaker, Verdict};
use client::{Client, ClientEvent, UpstreamError};
use config::{ServerDef, Transport, UpstreamsFile};
use supervisor::tool_name;

/// Pages of `tools/list` followed before giving up on a cursor loop.
const MAX_TOOL_PAGES: usize = 100;
/// Shortest pause between two tool refreshes caused by `list_changed` (a flood collapses).
const REFRESH_DEBOUNCE: Duration = Duration::from_millis(250);

/// Where one upstream is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// `enabled: false` in the file.
    Disabled,
    /// Spawning or dialing, handshaking, listing tools.
    Connecting,
    /// Connected; its tools are listed.
    Ready,
    /// The breaker is open: reconnecting after a backoff.
    CircuitOpen,
    /// Out of retries: retried on each health tick.
    Failed,
    /// HTTP 401 and no usable credential: waits for a new credential.
    NeedsAuth,
    /// An OAuth authorization of a `needs_auth` upstream is pending.
    Authorizing,
}

impl Status {
    /// The status string (`GET /mcp/status`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::Connecting => "connecting",
            Self::Ready => "ready",
            Self::CircuitOpen => "circuit_open",
            Self::Failed => "failed",
            Self::NeedsAuth => "needs_auth",
            Self::Authorizing => "authorizing",
        }
    }
}

/// What one upstream's supervisor publishes.
#[derive(Debug)]
struct Live {
    status: Status,
    /// The upstream's own tool objects, as listed.
    tools: Vec<Value>,
    /// Why the list may be empty (diagnosable "0 tools").
    tools_note: Option<String>,
    client: Option<Arc<Client>>,
    last_error: Option<String>,
    last_error_at_ms: Option<u64>,
    breaker: Breaker,
    protocol: String,
    next_retry_at_ms: Option<u64>,
    connected_at_ms: Option<u64>,
    /// The last 401's `WWW-Authenticate` challenge (OAuth discovery starts from it).
    challenge: Option<String>,
    /// The breaker's bounds as the supervisor last read them (proxied calls count too).
    btun: Option<breaker::Tuning>,
}

/// One configured upstream.
#[derive(Debug)]
struct Entry {
    def: ServerDef,
    live: Mutex<Live>,
    /// Ends the supervisor (removed, changed, shutdown).
    stop: CancellationToken,
    /// Asks the supervisor to reconnect now (a new credential).
    kick: Notify,
    /// A proxied call found the credential rejected for good (401 after recovery, refresh
    /// refused): the supervisor leaves `ready` for `needs_auth`.
    auth_lost: Mutex<Option<UpstreamError>>,
    auth_lost_signal: Notify,
    /// Proxied calls failed past the breaker's threshold: the supervisor stops serving the
    /// connection and reconnects as the verdict says.
    broken: Mutex<Option<(UpstreamError, Verdict)>>,
    broken_signal: Notify,
    /// A call found the upstream down: the supervisor cuts its pause short and tries now.
    probe: Notify,
    /// Fires (to all waiters) after every connect attempt, whatever its outcome.
    attempted: Notify,
}

use oauth::{Credential, vault_key};

/// The node's upstreams.
#[derive(Debug)]
pub struct Upstreams {
    file: ConfigFile,
    /// In the file's order.
    entries: RwLock<Vec<Arc<Entry>>>,
    /// The file as applied to `entries`.
    applied: Mutex<UpstreamsFile>,
    /// Serializes applying a new file.
    apply: tokio::sync::Mutex<()>,
    /// Changes when the listed tool set changes.
    generation: AtomicU64,
    changed: tokio::sync::watch::Sender<u64>,
    /// Vault credentials by server id, re-read by every request attempt.
    creds: Arc<Mutex<HashMap<String, Credential>>>,
    /// Pending OAuth flows, refresh semaphores, authorization errors.
    oauth: Arc<oauth::OAuth>,
    /// What the service uses of the node.
    env: UpstreamEnv,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Live {
    /// The status as shown: a `ready` upstream with failures since its last success is
    /// `degraded` (still listed and called, probed sooner).
    fn status_str(&self) -> &'static str {
        if self.status == Status::Ready && self.breaker.failures() > 0 {
            "degraded"
        } else {
            self.status.as_str()
        }
    }
}

impl Upstreams {
    /// The service for the file at `path`; nothing starts until [`spawn`].
    pub fn new(path: std::path::PathBuf, env: UpstreamEnv) -> Self {
        Self {
            file: ConfigFile::new(path),
            entries: RwLock::new(Vec::new()),
            applied: Mutex::new(UpstreamsFile::default()),
            apply: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(0),
            changed: tokio::sync::watch::channel(0).0,
            creds: Arc::new(Mutex::new(HashMap::new())),
            oauth: Arc::new(oauth::OAuth::default()),
            env,
        }
    }

    /// The OAuth state.
    pub fn oauth(&self) -> &Arc<oauth::OAuth> {
        &self.oauth
    }

    /// Fires with the new generation whenever the listed tool set changes (a hub hints its
    /// nodes from it).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The file.
    pub fn file(&self) -> &ConfigFile {
        &self.file
    }

    fn bump(&self) {
        let g = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        self.changed.send_replace(g);
    }

    fn entries(&self) -> Vec<Arc<Entry>> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn by_name(&self, name: &str) -> Option<Arc<Entry>> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|e| e.def.name == name)
            .cloned()
    }

    /// The file as `GET /mcp/upstreams` shows it: secrets absent, `auth.token_exists` added.
    pub fn redacted(&self, f: &UpstreamsFile) -> Value {
        let mut v = serde_json::to_value(f).unwrap_or_else(|_| json!({"servers": []}));
        let creds = lock(&self.creds);
        if let Some(servers) = v.get_mut("servers").and_then(Value::as_array_mut) {
            for s in servers {
                let id = s.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
                if let Some(a) = s.get_mut("auth").and_then(Value::as_object_mut) {
                    a.remove("token");
                    a.insert("token_exists".into(), json!(creds.contains_key(&id)));
                }
            }
        }
        v
    }

    /// Applies `next` to the running set: stops removed and changed upstreams, starts added
    /// and changed ones, kicks those in `kicked` (a new credential). Unchanged ones keep
    /// running untouched.
    async fn apply(self: &Arc<Self>, next: UpstreamsFile, kicked: &[String]) {
        let _g = self.apply.lock().await;
        let prev = lock(&self.applied).clone();
        let old: HashMap<String, Arc<Entry>> = self
            .entries()
            .into_iter()
            .map(|e| (e.def.id.clone(), e))
            .collect();
        let mut list = Vec::new();
        let mut stopped = Vec::new();
        let mut started = Vec::new();
        for def in &next.servers {
            match old.get(&def.id) {
                Some(e) if prev.get(&def.id) == Some(def) => {
                    if kicked.contains(&def.id) {
                        e.kick.notify_one();
                    }
                    list.push(e.clone());
                }
                other => {
                    if let Some(e) = other {
                        stopped.push(e.clone());
                    }
                    let e = Arc::new(Entry {
                        def: def.clone(),
                        live: Mutex::new(Live {
                            status: if def.enabled {
                                Status::Connecting
                            } else {
                                Status::Disabled
                            },
                            tools: Vec::new(),
                            tools_note: None,
                            client: None,
                            last_error: None,
                            last_error_at_ms: None,
                            breaker: Breaker::default(),
                            protocol: String::new(),
                            next_retry_at_ms: None,
                            connected_at_ms: None,
                            challenge: None,
                            btun: None,
                        }),
                        stop: self.env.shutdown.child_token(),
                        kick: Notify::new(),
                        auth_lost: Mutex::new(None),
                        auth_lost_signal: Notify::new(),
                        broken: Mutex::new(None),
                        broken_signal: Notify::new(),
                        probe: Notify::new(),
                        attempted: Notify::new(),
                    });
                    if def.enabled {
                        started.push(e.clone());
                    }
                    list.push(e);
                }
            }
        }
        for (id, e) in &old {
            if next.get(id).is_none() {
                stopped.push(e.clone());
            }
        }
        *self.entries.write().unwrap_or_else(|p| p.into_inner()) = list;
        *lock(&self.applied) = next;
        for e in &stopped {
            tracing::info!(source = "upstream", upstream = %e.def.name, id = %e.def.id, "stopping upstream");
            e.stop.cancel();
        }
        for e in started {
            tracing::info!(source = "upstream", upstream = %e.def.name, id = %e.def.id, "starting upstream");
            let s = self.clone();
            self.env.tasks.spawn(async move { s.supervise(e).await });
        }
        if !stopped.is_empty() {
            self.bump();
        }
    }

    /// Saves `{base, config}` and applies the result. Returns the redacted saved file.
    pub async fn save(
        self: &Arc<Self>,
        base: Value,
        desired: Value,
    ) -> Result<Value, config::UpstreamSaveError> {
        let s = self.clone();
        let (after, creds) = tokio::task::spawn_blocking(move || {
            let (_before, after, creds) = config::save_delta(&s.file, &base, &desired)?;
            s.store_credentials(&after, &creds)
                .map_err(config::UpstreamSaveError::Io)?;
            s.load_credentials(&after);
            Ok::<_, config::UpstreamSaveError>((after, creds))
        })
        .await
        .map_err(|e| config::UpstreamSaveError::Io(anyhow::anyhow!("save task: {e}")))??;
        let kicked: Vec<String> = creds.into_iter().map(|c| c.id).collect();
        self.apply(after.clone(), &kicked).await;
        Ok(self.redacted(&after))
    }

    /// The current file, redacted.
    pub fn current(&self) -> Value {
        let f = lock(&self.applied).clone();
        self.redacted(&f)
    }

    /// Per-upstream status rows for `GET /mcp/status`.
    pub fn status(&self) -> Vec<Value> {
        self.entries()
            .iter()
            .map(|e| {
                let l = lock(&e.live);
                let listed = l
                    .tools
                    .iter()
                    .filter(|t| tool_name(t).is_some_and(|n| e.def.tool_filter.allows(n)))
                    .count();
                let mut row = json!({
                    "id": e.def.id,
                    "name": e.def.name,
                    "transport": match e.def.transport { Transport::Stdio { .. } => "stdio", Transport::Http { .. } => "http" },
                    "enabled": e.def.enabled,
                    "status": l.status_str(),
                    "tools": listed,
                    "tools_total": l.tools.len(),
                    "failures": l.breaker.failures(),
                    "retries": l.breaker.retries(),
                });
                let mut put = |k: &str, v: Value| {
                    row[k] = v;
                };
                if !l.protocol.is_empty() {
                    put("protocol", json!(l.protocol));
                }
                if let Some(x) = &l.last_error {
                    put("last_error", json!(x));
                }
                if let Some(x) = l.last_error_at_ms {
                    put("last_error_at_ms", json!(x));
                }
                if let Some(x) = l.next_retry_at_ms {
                    put("next_retry_at_ms", json!(x));
                }
                if let Some(x) = l.connected_at_ms {
                    put("connected_at_ms", json!(x));
                }
                let note = l.tools_note.clone().or_else(|| {
                    (l.status == Status::Ready && listed == 0 && !l.tools.is_empty()).then(|| {
                        format!("all {} tools are hidden by tool_filter", l.tools.len())
                    })
                });
                if let Some(n) = note {
                    put("tools_note", json!(n));
                }
                if let Some(pid) = l.client.as_ref().and_then(|c| c.pid()) {
                    put("pid", json!(pid));
                }
                if let Some(a) = self.auth_row(e, l.status) {
                    put("auth", a);
                }
                row
            })
            .collect()
    }

    fn set_error(&self, e: &Entry, err: &str) {
        let mut l = lock(&e.live);
        l.last_error = Some(err.to_owned());
        l.last_error_at_ms = Some(crate::logs::now_ms());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http_def(url: &str) -> ServerDef {
        serde_json::from_value(json!({"id": "h", "name": "remote",
            "transport": {"type": "http", "url": url}, "auth": {"type": "bearer"}}))
        .unwrap()
    }

    #[tokio::test]
    async fn bearer_is_sent_only_to_the_origin_it_was_saved_for() {
        let dir = tempfile::tempdir().unwrap();
        let up = Upstreams::new(
            dir.path().join("unused-upstreams.json"),
            UpstreamEnv::standalone(dir.path()),
        );
        lock(&up.creds).insert(
            "h".into(),
            Credential::bearer(Some("http://127.0.0.1:8000".into()), "t1".into()),
        );
        let src = |def: &ServerDef| up.bearer_source(def);
        let same = src(&http_def("http://127.0.0.1:8000/other/path"));
        assert_eq!(
            same.bearer().await.unwrap().as_deref(),
            Some("t1"),
            "same-origin path edits keep auth"
        );
        let moved = src(&http_def("http://evil.test:8000/mcp"));
        assert!(
            matches!(moved.bearer().await, Err(UpstreamError::Origin(m)) if m.contains("bound to http://127.0.0.1:8000"))
        );
        // A 401 on t1 with t1 still stored: no other generation, nothing to retry.
        assert_eq!(same.recover(Some("t1")).await.unwrap(), None);
        // A new generation is read on the next attempt, without a restart, and a 401 on
        // the old one retries the new one as it is.
        lock(&up.creds).get_mut("h").unwrap().token = "t2".into();
        assert_eq!(same.bearer().await.unwrap().as_deref(), Some("t2"));
        assert_eq!(
            same.recover(Some("t1")).await.unwrap().as_deref(),
            Some("t2")
        );
        // Unbound (saved before origin binding): refused, nothing sent.
        lock(&up.creds).get_mut("h").unwrap().origin = None;
        assert!(matches!(same.bearer().await, Err(UpstreamError::Origin(_))));
        // No auth metadata: no static bearer at all, whatever the vault holds.
        let mut plain = http_def("http://127.0.0.1:8000/mcp");
        plain.auth = None;
        assert_eq!(src(&plain).bearer().await.unwrap(), None);
    }

    #[test]
    fn the_redacted_file_shows_token_presence_only() {
        let dir = tempfile::tempdir().unwrap();
        let up = Upstreams::new(
            dir.path().join("unused-upstreams.json"),
            UpstreamEnv::standalone(dir.path()),
        );
        lock(&up.creds).insert(
            "h".into(),
            Credential::bearer(Some("http://127.0.0.1:8000".into()), "s3cret".into()),
        );
        let f = UpstreamsFile {
            servers: vec![http_def("http://127.0.0.1:8000/mcp")],
            extra: Map::new(),
        };
        let v = up.redacted(&f);
        assert_eq!(
            v["servers"][0]["auth"],
            json!({"type": "bearer", "token_exists": true})
        );
        assert!(!v.to_string().contains("s3cret"));
    }
}
