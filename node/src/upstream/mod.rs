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
//! It does not speak MCP to agents (the `mcp` module does, through [`ToolSource`]) and it
//! holds no secret in the file: bearer tokens live in the vault, bound to their origin.

pub mod breaker;
pub mod client;
pub mod config;
pub mod http;
pub mod oauth;
pub mod search;
pub mod stdio;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::ConfigFile;
use crate::mcp::registry::{CallCtx, ToolError, ToolSource};
use crate::state::Node;
use breaker::{Breaker, Verdict};
use client::{Client, ClientEvent, UpstreamError};
use config::{ServerDef, Transport, UpstreamsFile};

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
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Upstreams {
    /// The service for the file at `path`; nothing starts until [`spawn`].
    pub fn new(path: std::path::PathBuf) -> Self {
        Self {
            file: ConfigFile::new(path),
            entries: RwLock::new(Vec::new()),
            applied: Mutex::new(UpstreamsFile::default()),
            apply: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(0),
            changed: tokio::sync::watch::channel(0).0,
            creds: Arc::new(Mutex::new(HashMap::new())),
            oauth: Arc::new(oauth::OAuth::default()),
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

    /// Stores bearer tokens from a save, each bound to its server's origin, in one write per
    /// credential. Blocking (vault).
    fn store_credentials(
        &self,
        node: &Node,
        file: &UpstreamsFile,
        creds: &[config::NewCredential],
    ) -> anyhow::Result<()> {
        for c in creds {
            let origin = file.get(&c.id).and_then(|s| match &s.transport {
                Transport::Http { url } => config::origin_of(url),
                Transport::Stdio { .. } => None,
            });
            let cred = Credential::bearer(origin, c.token.clone());
            node.vault
                .set(&vault_key(&c.id), &serde_json::to_string(&cred)?)?;
            lock(&self.creds).insert(c.id.clone(), cred);
        }
        Ok(())
    }

    /// Loads the vault credentials of `file`'s servers. Blocking.
    fn load_credentials(&self, node: &Node, file: &UpstreamsFile) {
        for s in &file.servers {
            // Every HTTP upstream: an OAuth token set may exist without auth metadata (an
            // upstream authorized after a 401).
            if !matches!(s.transport, Transport::Http { .. })
                || lock(&self.creds).contains_key(&s.id)
            {
                continue;
            }
            match node.vault.get(&vault_key(&s.id)) {
                Ok(Some(raw)) => match serde_json::from_str::<Credential>(&raw) {
                    Ok(c) => {
                        lock(&self.creds).insert(s.id.clone(), c);
                    }
                    Err(_) => {
                        tracing::warn!(source = "upstream", upstream = %s.name, "the stored credential is unreadable; save it again");
                    }
                },
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(source = "upstream", upstream = %s.name, error = %format!("{e:#}"), "reading the upstream credential");
                }
            }
        }
    }

    /// The credential resolver of one HTTP upstream: checks the origin binding before every
    /// request and refresh; a mismatch sends nothing.
    fn bearer_source(&self, node: std::sync::Weak<Node>, def: &ServerDef) -> http::BearerSource {
        let declared = def
            .auth
            .as_ref()
            .and_then(|a| a.get("type"))
            .and_then(Value::as_str)
            .is_some_and(|t| t == "bearer" || t == "oauth2");
        Arc::new(oauth::Resolver {
            creds: self.creds.clone(),
            oauth: self.oauth.clone(),
            node,
            id: def.id.clone(),
            name: def.name.clone(),
            origin: match &def.transport {
                Transport::Http { url } => config::origin_of(url),
                Transport::Stdio { .. } => None,
            },
            declared,
        })
    }

    /// Applies `next` to the running set: stops removed and changed upstreams, starts added
    /// and changed ones, kicks those in `kicked` (a new credential). Unchanged ones keep
    /// running untouched.
    async fn apply(self: &Arc<Self>, node: &Arc<Node>, next: UpstreamsFile, kicked: &[String]) {
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
                        }),
                        stop: node.shutdown.child_token(),
                        kick: Notify::new(),
                        auth_lost: Mutex::new(None),
                        auth_lost_signal: Notify::new(),
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
            let (n, s) = (node.clone(), self.clone());
            node.tasks.spawn(async move { s.supervise(n, e).await });
        }
        if !stopped.is_empty() {
            self.bump();
        }
    }

    /// Saves `{base, config}` and applies the result. Returns the redacted saved file.
    pub async fn save(
        self: &Arc<Self>,
        node: &Arc<Node>,
        base: Value,
        desired: Value,
    ) -> Result<Value, config::UpstreamSaveError> {
        let (n, s) = (node.clone(), self.clone());
        let (after, creds) = tokio::task::spawn_blocking(move || {
            let (_before, after, creds) = config::save_delta(&s.file, &base, &desired)?;
            s.store_credentials(&n, &after, &creds)
                .map_err(config::UpstreamSaveError::Io)?;
            s.load_credentials(&n, &after);
            Ok::<_, config::UpstreamSaveError>((after, creds))
        })
        .await
        .map_err(|e| config::UpstreamSaveError::Io(anyhow::anyhow!("save task: {e}")))??;
        let kicked: Vec<String> = creds.into_iter().map(|c| c.id).collect();
        self.apply(node, after.clone(), &kicked).await;
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
                    "status": l.status.as_str(),
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

    /// The `auth` object of a status row: `state` is `needs_auth`, `authorizing` or
    /// `authorized`; never a token.
    fn auth_row(&self, e: &Entry, status: Status) -> Option<Value> {
        if !matches!(e.def.transport, Transport::Http { .. }) {
            return None;
        }
        let cred = lock(&self.creds).get(&e.def.id).cloned();
        let declared = e
            .def
            .auth
            .as_ref()
            .and_then(|a| a.get("type"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let pending = self.oauth.pending(&e.def.id);
        let error = self.oauth.error(&e.def.id);
        if cred.is_none() && declared.is_none() && pending.is_none() && status != Status::NeedsAuth
        {
            return None;
        }
        let kind = cred
            .as_ref()
            .map(|c| c.kind.clone())
            .or(declared)
            .unwrap_or_else(|| "oauth2".into());
        let state = if pending.is_some() {
            "authorizing"
        } else if status == Status::NeedsAuth || cred.is_none() {
            "needs_auth"
        } else {
            "authorized"
        };
        let mut a = json!({"type": kind, "state": state});
        if let Some(c) = &cred {
            if let Some(x) = c.expires_at_ms {
                a["expires_at_ms"] = json!(x);
            }
            if let Some(x) = &c.issuer {
                a["authorization_server"] = json!(x);
            }
            a["refresh_token_exists"] = json!(c.refresh_token.is_some());
            if c.kind == "oauth2" {
                a["refreshes"] = json!(self.oauth.refresh_count(&e.def.id));
            }
        }
        if let Some(p) = pending {
            a["flow"] = p;
        }
        if let Some(x) = error {
            a["last_error"] = json!(x);
        }
        Some(a)
    }

    /// Starts an OAuth authorization of upstream `name` (an HTTP one): the consent step
    /// opens the returned URL; the caller serves the returned callback listener. Flows are
    /// never serialized with each other.
    pub async fn start_oauth(
        self: &Arc<Self>,
        node: &Arc<Node>,
        name: &str,
    ) -> Result<(oauth::Started, oauth::CallbackServer), oauth::OAuthError> {
        let e = self
            .by_name(name)
            .ok_or_else(|| oauth::OAuthError::NotFound(format!("no upstream named {name}")))?;
        let Transport::Http { url } = &e.def.transport else {
            return Err(oauth::OAuthError::Invalid(format!(
                "upstream {name} is a stdio upstream; only http upstreams authorize"
            )));
        };
        if !e.def.enabled {
            return Err(oauth::OAuthError::Invalid(format!(
                "upstream {name} is disabled"
            )));
        }
        let challenge = lock(&e.live).challenge.clone();
        let (started, server) = self
            .oauth
            .start(
                node,
                &e.def.id,
                name,
                url,
                e.def.auth.as_ref(),
                challenge.as_deref(),
            )
            .await?;
        // Only now, with the flow recorded, may the status say so.
        let mut l = lock(&e.live);
        if l.status == Status::NeedsAuth {
            l.status = Status::Authorizing;
        }
        Ok((started, server))
    }

    /// Cancels the pending authorizations of upstream `name`; the status goes back to what
    /// it was before the attempt. Returns how many flows were dropped.
    pub fn cancel_oauth(&self, node: &Node, name: &str) -> Result<usize, oauth::OAuthError> {
        let e = self
            .by_name(name)
            .ok_or_else(|| oauth::OAuthError::NotFound(format!("no upstream named {name}")))?;
        let n = self.oauth.cancel(
            &e.def.id,
            node.config().tuning.upstream_oauth_callback_grace_ms,
        );
        if n > 0 {
            tracing::info!(source = "upstream", upstream = %name, "OAuth authorization cancelled");
            self.oauth_ended(&e.def.id, false);
        }
        Ok(n)
    }

    /// The auth part of one upstream's status row (`GET /mcp/upstreams/{name}/oauth`).
    pub fn oauth_status(&self, name: &str) -> Option<Value> {
        let e = self.by_name(name)?;
        let status = lock(&e.live).status;
        Some(json!({
            "upstream": name,
            "status": status.as_str(),
            "auth": self.auth_row(&e, status).unwrap_or(json!({"state": "none"})),
        }))
    }

    /// Stores a token set from a completed authorization, bound to its origin, in one vault
    /// write.
    async fn store_oauth(
        &self,
        node: &Arc<Node>,
        id: &str,
        cred: Credential,
    ) -> Result<(), String> {
        let raw = serde_json::to_string(&cred).map_err(|e| e.to_string())?;
        let (n, key) = (node.clone(), vault_key(id));
        match tokio::task::spawn_blocking(move || n.vault.set(&key, &raw)).await {
            Ok(Ok(())) => {
                lock(&self.creds).insert(id.to_owned(), cred);
                Ok(())
            }
            Ok(Err(e)) => Err(format!("storing the tokens in the vault: {e:#}")),
            Err(e) => Err(format!("storing the tokens in the vault: {e}")),
        }
    }

    /// A flow of upstream `id` ended: `authorized` reconnects it with the new tokens;
    /// otherwise an `authorizing` status goes back to `needs_auth` when no other flow of it
    /// is pending.
    fn oauth_ended(&self, id: &str, authorized: bool) {
        let Some(e) = self.entries().into_iter().find(|e| e.def.id == id) else {
            return;
        };
        if authorized {
            lock(&e.live).status = Status::Connecting;
            e.kick.notify_one();
            return;
        }
        if self.oauth.pending(id).is_none() {
            let mut l = lock(&e.live);
            if l.status == Status::Authorizing {
                l.status = Status::NeedsAuth;
            }
        }
    }

    fn set_error(&self, e: &Entry, err: &str) {
        let mut l = lock(&e.live);
        l.last_error = Some(err.to_owned());
        l.last_error_at_ms = Some(crate::logs::now_ms());
    }

    /// The supervisor of one upstream: connect, serve, reconnect as the breaker says.
    async fn supervise(self: Arc<Self>, node: Arc<Node>, e: Arc<Entry>) {
        let name = e.def.name.clone();
        loop {
            if e.stop.is_cancelled() {
                break;
            }
            let tun = node.config().tuning.clone();
            let btun = breaker::Tuning::from_config(&tun);
            {
                let mut l = lock(&e.live);
                if l.status != Status::CircuitOpen && l.status != Status::Failed {
                    l.status = Status::Connecting;
                }
                l.next_retry_at_ms = None;
            }
            let connect_timeout = Duration::from_millis(tun.upstream_connect_timeout_ms.max(100));
            let attempt = tokio::select! {
                _ = e.stop.cancelled() => break,
                r = self.connect(&node, &e, connect_timeout) => r,
            };
            let failure = match attempt {
                Ok((client, tools, note, events)) => {
                    {
                        let mut l = lock(&e.live);
                        l.breaker.success();
                        l.status = Status::Ready;
                        l.protocol = client.protocol();
                        l.tools = tools;
                        l.tools_note = note;
                        l.client = Some(client.clone());
                        l.connected_at_ms = Some(crate::logs::now_ms());
                    }
                    tracing::info!(source = "upstream", upstream = %name, protocol = %client.protocol(), tools = lock(&e.live).tools.len(), "upstream ready");
                    self.bump();
                    let end = self.serve(&node, &e, &client, events).await;
                    {
                        let mut l = lock(&e.live);
                        l.client = None;
                        l.tools.clear();
                        l.tools_note = None;
                    }
                    self.bump();
                    client.shutdown().await;
                    match end {
                        Ended::Stop => break,
                        Ended::Kick => continue,
                        Ended::Failed(err, verdict) => Some((err, Some(verdict))),
                    }
                }
                Err(err) => Some((err, None)),
            };
            let Some((err, verdict)) = failure else {
                continue;
            };
            let msg = err.to_string();
            tracing::warn!(source = "upstream", upstream = %name, error = %msg, "upstream failed");
            self.set_error(&e, &msg);
            if matches!(
                err,
                UpstreamError::NeedsAuth { .. }
                    | UpstreamError::Origin(_)
                    | UpstreamError::AuthFailed(_)
            ) {
                {
                    let mut l = lock(&e.live);
                    if let UpstreamError::NeedsAuth { www_authenticate } = &err {
                        l.challenge = Some(www_authenticate.clone());
                    }
                    // A flow started meanwhile keeps saying so.
                    l.status = if self.oauth.pending(&e.def.id).is_none() {
                        Status::NeedsAuth
                    } else {
                        Status::Authorizing
                    };
                }
                tokio::select! {
                    _ = e.stop.cancelled() => break,
                    _ = e.kick.notified() => continue,
                }
            }
            let verdict = verdict.unwrap_or_else(|| lock(&e.live).breaker.failure(&btun));
            let health = Duration::from_millis(tun.upstream_health_interval_ms.max(10));
            let pause = match verdict {
                Verdict::Degraded { .. } => {
                    lock(&e.live).status = Status::Connecting;
                    // A short pause, so a crash loop cannot spin before the breaker opens.
                    btun.base / 4
                }
                Verdict::Open { backoff, retry } => {
                    tracing::info!(source = "upstream", upstream = %name, backoff_ms = backoff.as_millis() as u64, retry, "upstream circuit open");
                    let mut l = lock(&e.live);
                    l.status = Status::CircuitOpen;
                    l.next_retry_at_ms = Some(crate::logs::now_ms() + backoff.as_millis() as u64);
                    backoff
                }
                Verdict::Failed => {
                    let mut l = lock(&e.live);
                    l.status = Status::Failed;
                    l.next_retry_at_ms = Some(crate::logs::now_ms() + health.as_millis() as u64);
                    health
                }
            };
            tokio::select! {
                _ = e.stop.cancelled() => break,
                _ = e.kick.notified() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
        tracing::debug!(source = "upstream", upstream = %name, "upstream supervisor ended");
    }

    /// Connects and lists the tools.
    async fn connect(
        &self,
        node: &Arc<Node>,
        e: &Entry,
        timeout: Duration,
    ) -> Result<
        (
            Arc<Client>,
            Vec<Value>,
            Option<String>,
            tokio::sync::mpsc::Receiver<ClientEvent>,
        ),
        UpstreamError,
    > {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let client = match &e.def.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let c =
                    stdio::StdioClient::spawn(&e.def.name, command, args, env, cwd.as_deref(), tx)?;
                let init = c
                    .request(
                        "initialize",
                        client::initialize_params(crate::mcp::protocol::LEGACY_DEFAULT),
                        timeout,
                        None,
                    )
                    .await;
                let init = match init {
                    Ok(r) => r,
                    Err(err) => {
                        let (n, last) = c.garbage();
                        c.shutdown().await;
                        if n > 0 {
                            return Err(UpstreamError::Protocol(format!(
                                "{err}; {n} stdout line(s) were not JSON-RPC, the last: {}",
                                last.unwrap_or_default()
                            )));
                        }
                        return Err(err);
                    }
                };
                let v = init
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or(crate::mcp::protocol::LEGACY_DEFAULT);
                c.set_protocol(v);
                c.notify("notifications/initialized", json!({})).await;
                Arc::new(Client::Stdio(c))
            }
            Transport::Http { url } => {
                let choice = match e.def.extra.get("protocol").and_then(Value::as_str) {
                    Some("legacy") => http::EraChoice::Legacy,
                    Some("modern") => http::EraChoice::Modern,
                    _ => http::EraChoice::Auto,
                };
                let c = http::HttpClient::new(
                    &e.def.name,
                    url,
                    choice,
                    self.bearer_source(Arc::downgrade(node), &e.def),
                    tx,
                )?;
                c.connect(timeout).await?;
                Arc::new(Client::Http(c))
            }
        };
        match list_tools(&client, &e.def.name, timeout).await {
            Ok((tools, note)) => Ok((client, tools, note, rx)),
            Err(err) => {
                client.shutdown().await;
                Err(err)
            }
        }
    }

    /// Serves a connected upstream: health checks on the tick, tool refreshes on
    /// `list_changed`, until it dies, fails, is kicked or stopped.
    async fn serve(
        &self,
        node: &Arc<Node>,
        e: &Entry,
        client: &Arc<Client>,
        mut events: tokio::sync::mpsc::Receiver<ClientEvent>,
    ) -> Ended {
        loop {
            let tun = node.config().tuning.clone();
            let health = Duration::from_millis(tun.upstream_health_interval_ms.max(10));
            let timeout = Duration::from_millis(tun.upstream_connect_timeout_ms.max(100));
            let refresh = tokio::select! {
                _ = e.stop.cancelled() => return Ended::Stop,
                _ = e.kick.notified() => return Ended::Kick,
                _ = e.auth_lost_signal.notified() => {
                    if let Some(err) = lock(&e.auth_lost).take() {
                        return Ended::Failed(err, Verdict::Failed);
                    }
                    continue;
                }
                why = client.closed() => {
                    let verdict = lock(&e.live).breaker.failure(&breaker::Tuning::from_config(&tun));
                    return Ended::Failed(UpstreamError::Closed(why), verdict);
                }
                ev = events.recv() => ev.is_some(),
                _ = tokio::time::sleep(health) => true,
            };
            if !refresh {
                continue;
            }
            let checked = tokio::select! {
                _ = e.stop.cancelled() => return Ended::Stop,
                r = list_tools(client, &e.def.name, timeout) => r,
            };
            match checked {
                Ok((tools, note)) => {
                    let changed = {
                        let mut l = lock(&e.live);
                        l.breaker.success();
                        l.tools_note = note;
                        let changed = l.tools != tools;
                        l.tools = tools;
                        changed
                    };
                    if changed {
                        tracing::info!(source = "upstream", upstream = %e.def.name, "upstream tools changed");
                        self.bump();
                    }
                }
                Err(err) => {
                    let verdict = lock(&e.live)
                        .breaker
                        .failure(&breaker::Tuning::from_config(&tun));
                    self.set_error(e, &err.to_string());
                    tracing::warn!(source = "upstream", upstream = %e.def.name, error = %err, ?verdict, "upstream health check failed");
                    // A connection that is gone (a stdio child that exited) is not served on,
                    // whatever the breaker says: it reconnects now.
                    if !matches!(verdict, Verdict::Degraded { .. })
                        || matches!(err, UpstreamError::Closed(_))
                    {
                        return Ended::Failed(err, verdict);
                    }
                }
            }
            // A flood of list_changed collapses: at most one refresh per debounce period.
            tokio::select! {
                _ = e.stop.cancelled() => return Ended::Stop,
                _ = tokio::time::sleep(REFRESH_DEBOUNCE) => {}
            }
        }
    }
}

/// Why [`Upstreams::serve`] returned.
enum Ended {
    Stop,
    Kick,
    Failed(UpstreamError, Verdict),
}

fn tool_name(t: &Value) -> Option<&str> {
    t.get("name").and_then(Value::as_str)
}

/// `tools/list` with pagination. A result without `tools` is logged and reported in the
/// status (a silent "0 tools" is not diagnosable).
async fn list_tools(
    client: &Client,
    upstream: &str,
    timeout: Duration,
) -> Result<(Vec<Value>, Option<String>), UpstreamError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_TOOL_PAGES {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let r = client.request("tools/list", params, timeout, None).await?;
        match r.get("tools").and_then(Value::as_array) {
            Some(list) => tools.extend(
                list.iter()
                    .filter(|t| tool_name(t).is_some_and(|n| !n.is_empty()))
                    .cloned(),
            ),
            None => {
                let excerpt: String = r.to_string().chars().take(200).collect();
                tracing::warn!(source = "upstream", upstream, result = %excerpt, "tools/list answered without result.tools");
                return Ok((
                    tools,
                    Some(format!(
                        "tools/list answered without result.tools: {excerpt}"
                    )),
                ));
            }
        }
        cursor = r
            .get("nextCursor")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        if cursor.is_none() {
            let note = tools
                .is_empty()
                .then(|| "the upstream lists no tools".to_owned());
            return Ok((tools, note));
        }
    }
    Ok((
        tools,
        Some(format!(
            "tools/list pagination stopped after {MAX_TOOL_PAGES} pages"
        )),
    ))
}

fn qualified(e: &Entry, t: &Value) -> Option<Value> {
    let n = tool_name(t)?;
    if !e.def.tool_filter.allows(n) {
        return None;
    }
    let mut v = t.clone();
    v["name"] = json!(format!("{}{}{n}", e.def.name, config::SEPARATOR));
    Some(v)
}

impl ToolSource for Upstreams {
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    fn listings(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for e in self.entries() {
            let l = lock(&e.live);
            if l.status != Status::Ready {
                continue;
            }
            out.extend(l.tools.iter().filter_map(|t| qualified(&e, t)));
        }
        out
    }

    fn owns(&self, name: &str) -> bool {
        config::split_name(name).is_some_and(|(n, _)| self.by_name(n).is_some())
    }

    fn schema(&self, name: &str) -> Result<Value, ToolError> {
        let (e, tool) = self.resolve(name)?;
        let l = lock(&e.live);
        l.tools
            .iter()
            .find(|t| tool_name(t) == Some(tool))
            .and_then(|t| qualified(&e, t))
            .ok_or_else(|| unknown_tool(&e.def.name, tool))
    }

    fn call<'a>(
        &'a self,
        node: &'a Arc<Node>,
        ctx: &'a CallCtx,
        name: &'a str,
        args: Map<String, Value>,
    ) -> futures::future::BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let progress = match (&ctx.progress_token, &ctx.mcp_session) {
                (Some(token), Some(sid)) => {
                    let (node, sid) = (node.clone(), sid.clone());
                    let sink: client::ProgressSink = Arc::new(move |params: Value| {
                        node.mcp.sessions.push_to_session(
                            &sid,
                            &json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}),
                        );
                    });
                    Some((token.clone(), sink))
                }
                _ => None,
            };
            self.call_with(name, args, progress, None).await
        })
    }
}

impl Upstreams {
    /// A call relayed for a node over the peer link (the hub's end): `progress` receives the
    /// upstream's progress params (with a `progressToken` of no meaning to the caller, which
    /// replaces it), and `deadline` — the node caller's — caps the upstream's own
    /// `timeout_secs`, so a call that runs out of time is cancelled upstream
    /// (`notifications/cancelled` on stdio) exactly as a local one is.
    pub async fn call_relayed(
        &self,
        name: &str,
        args: Map<String, Value>,
        progress: Option<client::ProgressSink>,
        deadline: Duration,
    ) -> Result<Value, ToolError> {
        let progress = progress.map(|sink| (Value::Null, sink));
        self.call_with(name, args, progress, Some(deadline)).await
    }

    async fn call_with(
        &self,
        name: &str,
        args: Map<String, Value>,
        progress: Option<(Value, client::ProgressSink)>,
        deadline: Option<Duration>,
    ) -> Result<Value, ToolError> {
        let (e, tool) = self.resolve(name)?;
        let client = {
            let l = lock(&e.live);
            if !l.tools.iter().any(|t| tool_name(t) == Some(tool)) && l.client.is_some() {
                return Err(unknown_tool(&e.def.name, tool));
            }
            l.client.clone()
        };
        let client = client.ok_or_else(|| unavailable(&e))?;
        let params = json!({"name": tool, "arguments": Value::Object(args)});
        let own = Duration::from_secs(e.def.timeout_secs);
        let timeout = deadline.map_or(own, |d| d.min(own));
        client
            .request("tools/call", params, timeout, progress)
            .await
            .map_err(|err| {
                if matches!(
                    err,
                    UpstreamError::NeedsAuth { .. } | UpstreamError::AuthFailed(_)
                ) {
                    // A NeedsAuth on any request moves the upstream to needs_auth.
                    *lock(&e.auth_lost) = Some(err.clone());
                    e.auth_lost_signal.notify_one();
                }
                ToolError::new(err.code(), format!("upstream {}: {err}", e.def.name))
                    .with("upstream", json!(e.def.name))
            })
    }

    /// The upstream and its own tool name for `{name}__{tool}`, with the filter applied:
    /// a hidden tool is refused here as it is hidden from the listing.
    fn resolve<'n>(&self, qualified: &'n str) -> Result<(Arc<Entry>, &'n str), ToolError> {
        let Some((n, tool)) = config::split_name(qualified) else {
            return Err(ToolError::invalid(format!("no such tool: {qualified}")));
        };
        let e = self
            .by_name(n)
            .ok_or_else(|| ToolError::invalid(format!("no upstream named {n}")))?;
        if !e.def.tool_filter.allows(tool) {
            return Err(ToolError::new(
                "tool_filtered",
                format!("{qualified} is hidden by the tool_filter of upstream {n}"),
            )
            .with("upstream", json!(n)));
        }
        Ok((e, tool))
    }
}

fn unknown_tool(upstream: &str, tool: &str) -> ToolError {
    ToolError::new(
        "unknown_tool",
        format!("upstream {upstream} lists no tool {tool}"),
    )
    .with("upstream", json!(upstream))
}

fn unavailable(e: &Entry) -> ToolError {
    let l = lock(&e.live);
    let mut msg = format!("upstream {} is {}", e.def.name, l.status.as_str());
    if let Some(x) = &l.last_error {
        msg.push_str(&format!(" (last error: {x})"));
    }
    ToolError::new("upstream_unavailable", msg)
        .with("upstream", json!(e.def.name))
        .with("status", json!(l.status.as_str()))
}

/// Loads the file, starts the upstreams, announces tool-set changes to MCP clients, and
/// watches the file for hand edits. Called once when the node starts serving.
pub fn spawn(node: &Arc<Node>) {
    let up = node.upstreams.clone();
    let n = node.clone();
    node.tasks.spawn(async move {
        let file = up.file.clone();
        let first = {
            let (n2, up2) = (n.clone(), up.clone());
            tokio::task::spawn_blocking(move || {
                let f = config::load(&file);
                if let Ok(f) = &f {
                    up2.load_credentials(&n2, f);
                }
                f
            })
            .await
        };
        match first {
            Ok(Ok(f)) => up.apply(&n, f, &[]).await,
            Ok(Err(e)) => {
                tracing::warn!(source = "upstream", error = %format!("{e:#}"), "mcp-upstreams.json is invalid; no upstream started")
            }
            Err(_) => {}
        }
        // Hand edits: poll the file's stamp, as config.json is.
        let path = up.file.path().to_path_buf();
        let stamp = |p: &std::path::Path| {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.modified().ok(), m.len()))
        };
        let mut last = stamp(&path);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let now = stamp(&path);
            if now == last {
                continue;
            }
            last = now;
            let (file, n2, up2) = (up.file.clone(), n.clone(), up.clone());
            let loaded = tokio::task::spawn_blocking(move || {
                let f = config::load(&file);
                if let Ok(f) = &f {
                    up2.load_credentials(&n2, f);
                }
                f
            })
            .await;
            match loaded {
                Ok(Ok(f)) if f != *lock(&up.applied) => {
                    tracing::info!(source = "upstream", "mcp-upstreams.json changed on disk; applying");
                    up.apply(&n, f, &[]).await;
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(source = "upstream", error = %format!("{e:#}"), "mcp-upstreams.json is invalid; keeping the running upstreams")
                }
                Err(_) => {}
            }
        }
    });
    // The expiry sweep of abandoned OAuth flows: each rolls its upstream back to needs_auth.
    let n = node.clone();
    node.tasks.spawn(async move {
        loop {
            let tun = n.config().tuning.clone();
            let every =
                Duration::from_millis((tun.upstream_oauth_flow_timeout_ms / 4).clamp(50, 1_000));
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
            }
            for id in n
                .upstreams
                .oauth
                .sweep(tun.upstream_oauth_callback_grace_ms)
            {
                n.upstreams.oauth_ended(&id, false);
            }
        }
    });
    // Every tool-set change reaches every GET /mcp stream.
    let n = node.clone();
    let mut rx = node.upstreams.changed.subscribe();
    node.tasks.spawn(async move {
        loop {
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                r = rx.changed() => if r.is_err() { break },
            }
            n.mcp.notify_list_changed();
        }
    });
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
        let up = Upstreams::new(std::env::temp_dir().join("unused-upstreams.json"));
        lock(&up.creds).insert(
            "h".into(),
            Credential::bearer(Some("http://127.0.0.1:8000".into()), "t1".into()),
        );
        let src = |def: &ServerDef| up.bearer_source(std::sync::Weak::new(), def);
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
        let up = Upstreams::new(std::env::temp_dir().join("unused-upstreams.json"));
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
