//! `config.json`: typed settings with documented defaults, redaction, and the `{base, config}`
//! three-way save.
//!
//! The file is the user's: it may be edited by hand while the node runs, so every save locks
//! the file across processes, re-reads the latest version, applies only the caller's
//! base→config delta, and publishes the result with an atomic rename. Unknown keys are kept.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// All settings of a node. Every field has a default, so an empty file is a valid config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Whether the authenticated TCP listener runs. The IPC socket always runs.
    pub remote_access_enabled: bool,
    /// Listener and authentication settings.
    pub services: Services,
    /// Browser origins allowed besides the HTTP(S) origin of the validated Host.
    pub allowed_origins: Vec<String>,
    /// Whether the `/mcp` protocol route is active (the HTTP API stays up either way).
    pub mcp_server_enabled: bool,
    /// Native MCP tools hidden from listing and refused at dispatch.
    pub disabled_native_tools: Vec<String>,
    /// Whether `tools/list` shows the collapsed search/schema/call surface.
    pub collapse_tools: bool,
    /// Whether the progress journal records.
    pub progress_tracking: bool,
    /// Test-only: expose the MCP conformance suite's fixture tools (false). Read at start.
    pub mcp_conformance_fixtures: bool,
    /// Tailscale integration.
    pub tailscale: Tailscale,
    /// Where secrets go: `auto` (OS keyring when one answers, else a 0600 file) or `file`.
    pub secret_store: SecretStore,
    /// Timeouts and TTLs; tests shorten these through the file, not hidden switches.
    pub tuning: Tuning,
    /// Notification channels, coalescing, quiet hours and mutes (`crate::notify`).
    pub notifications: crate::notify::config::NotifyConfig,
    /// Agent launch settings: run configurations and per-agent options (`mail::launch`).
    pub agents: Agents,
    /// Keys this version does not know, kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `services.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Services {
    /// TCP listener.
    pub server: Server,
    /// Credentials for TCP callers.
    pub auth: Auth,
    /// Other service sections, kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `services.server`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Server {
    /// TCP port (9876); when busy the next two ports are tried.
    pub port: u16,
    /// Bind address ("0.0.0.0").
    pub bind: String,
    /// Whether the QUIC peer-link listener (UDP) runs beside the TCP one when remote access
    /// is on (true).
    pub quic_enabled: bool,
    /// Its UDP port; unset: the TCP listener's bound port number.
    pub quic_port: Option<u16>,
}

impl Default for Server {
    fn default() -> Self {
        Self {
            port: 9876,
            bind: "0.0.0.0".into(),
            quic_enabled: true,
            quic_port: None,
        }
    }
}

/// `services.auth`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Auth {
    /// Basic/login user name ("admin").
    pub username: String,
    /// bcrypt hash of the password; never returned by `GET /config`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
}

impl Default for Auth {
    fn default() -> Self {
        Self {
            username: "admin".into(),
            password_hash: None,
        }
    }
}

/// `tailscale.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tailscale {
    /// Whether to trust the machine's Tailscale name in the Host guard.
    pub enabled: bool,
    /// The Tailscale DNS name to trust (e.g. `box.tailnet.ts.net`) when detection is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// tailscaled's local API socket (default `/var/run/tailscale/tailscaled.sock`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
}

impl Default for Tailscale {
    fn default() -> Self {
        Self {
            enabled: true,
            hostname: None,
            socket: None,
        }
    }
}

/// Secret storage backend choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SecretStore {
    /// OS keyring when a Secret Service answers, else the 0600 file.
    #[default]
    Auto,
    /// Always the 0600 file.
    File,
}

/// Timeouts, TTLs and bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tuning {
    /// Request/response deadline (301 s: one second above the longest in-handler deadline).
    pub request_timeout_ms: u64,
    /// SSE keep-alive interval (15 s).
    pub sse_keepalive_ms: u64,
    /// Failed logins per (client address, user name) per minute before 429 (5).
    pub login_failures_per_minute: u32,
    /// Failed logins per minute across every address and user before every password check
    /// answers 429 (60): the ceiling on guessing from many addresses at once.
    pub login_failures_global_per_minute: u32,
    /// Login session lifetime, sliding (30 days).
    pub login_session_days: u32,
    /// How long a successful Basic check is remembered (60 s), so a request never pays bcrypt.
    pub basic_cache_secs: u64,
    /// Drain deadline at shutdown (5 s).
    pub shutdown_drain_ms: u64,
    /// A TCP connection must finish a request's headers within this long of opening (or, on
    /// a kept-alive HTTP/1 connection, of starting to wait for the next request), else it is
    /// closed (15 s).
    pub header_read_timeout_ms: u64,
    /// A TCP connection with no request in flight and no byte in either direction for this
    /// long is closed (120 s). SSE keep-alives count as traffic.
    pub idle_connection_timeout_ms: u64,
    /// Open TCP connections from one client address (256; upgraded WebSockets count); past it
    /// a new connection is closed at once.
    pub connections_per_address: usize,
    /// Largest upload, in file bytes (64 GiB).
    pub upload_max_bytes: u64,
    /// Most entries in one upload (1,000,000).
    pub upload_max_entries: u64,
    /// Uploads extracted at once (4).
    pub upload_concurrency: u32,
    /// Longest wait for the next upload chunk (30 s).
    pub upload_idle_ms: u64,
    /// How long an exited session's buffers keep answering output routes (300 s).
    pub tombstone_secs: u64,
    /// An MCP protocol session idle this long is reaped (1 h).
    pub mcp_session_ttl_ms: u64,
    /// How often the MCP reaper sweeps (60 s).
    pub mcp_reap_interval_ms: u64,
    /// Most MCP protocol sessions held at once (20,000): past it the oldest idle ones (no
    /// `GET /mcp` stream) are evicted, counted in `GET /mcp/status` `sessions.evicted`.
    pub mcp_session_cap: usize,
    /// A co-owner of a TUIC identity active this recently is joined, never replaced (30 s).
    pub mcp_identity_grace_ms: u64,
    /// How long MCP task handles are kept in memory (24 h).
    pub mcp_task_retention_ms: u64,
    /// A payload-free wake notice not consumed by an inbox read this long expires (5 s).
    pub mail_wake_expiry_ms: u64,
    /// A deferred spawn prompt still undelivered this long reports `prompt_delivery_failed` (30 s).
    pub mail_prompt_delivery_timeout_ms: u64,
    /// A managed child quiet this long after reporting `completed` is closed unless it is
    /// marked `keep_open` (30 min).
    pub mail_child_idle_close_ms: u64,
    /// `ui action=confirm`'s answer window (300 s, one second under the request deadline).
    pub mcp_confirm_timeout_ms: u64,
    /// How long `session action=suspend` waits for a UI's verdict (spec: 20 s).
    pub mcp_suspend_timeout_ms: u64,
    /// Messages one cross-host outbox holds before a send is refused (1,000, API "Federation").
    pub peer_outbox_max_messages: usize,
    /// Bytes one cross-host outbox holds before a send is refused (16 MiB).
    pub peer_outbox_max_bytes: u64,
    /// How long `agent action=send` to a remote address waits for the destination's verdict
    /// before answering `accepted` (1.5 s); 0 answers as soon as the mail is held.
    pub peer_send_wait_ms: u64,
    /// How long a hub waits for the destination's answer to mail it relays before it commits
    /// custody and answers `accepted` to the previous hop (20 ms; "cut-through").
    pub peer_cut_through_ms: u64,
    /// The hub's longest pause between two reconnect attempts to a node (30 s; exponential
    /// from 1 s, each pause plus a random jitter of up to its own length).
    pub peer_reconnect_max_ms: u64,
    /// How often Tailscale detection asks tailscaled (30 s).
    pub tailscale_refresh_ms: u64,
    /// The budget of one detection (500 ms); past it the state is `unavailable`.
    pub tailscale_probe_ms: u64,
    /// How often the upstream health checker lists every connected upstream's tools (60 s).
    pub upstream_health_interval_ms: u64,
    /// Consecutive upstream failures that open its circuit breaker (3).
    pub upstream_failure_threshold: u32,
    /// The first reconnect pause of an open breaker (1 s); it doubles per retry.
    pub upstream_backoff_base_ms: u64,
    /// The longest reconnect pause of an open breaker (60 s).
    pub upstream_backoff_max_ms: u64,
    /// Breaker retries before an upstream is `failed` (5); a failed one is retried per tick.
    pub upstream_max_retries: u32,
    /// Budget of one upstream connect: spawn or first POST, initialize, tools/list (30 s).
    pub upstream_connect_timeout_ms: u64,
    /// An OAuth access token is refreshed this long before its `expires_at` (60 s).
    pub upstream_oauth_refresh_margin_ms: u64,
    /// A pending OAuth authorization is dropped this long after it started (5 min).
    pub upstream_oauth_flow_timeout_ms: u64,
    /// The loopback callback server outlives its flow by this much (120 s), so a late
    /// redirect gets a page naming the reason instead of a refused connection.
    pub upstream_oauth_callback_grace_ms: u64,
    /// How long a node keeps listing its hub's upstream tools (`hub.{name}__{tool}`) after the
    /// peer link dropped (60 s): a hub restart does not churn agents' tool lists; a hub that
    /// stays away (disconnected) loses its tools, with `notifications/tools/list_changed`.
    pub hub_tools_grace_ms: u64,
    /// The deadline of one call to a hub's upstream tool from a node (300 s, under the 301 s
    /// request deadline); the hub gets it with the call and gives up at it too.
    pub hub_tool_call_timeout_ms: u64,
    /// How often at most the QUIC listener logs the datagrams it could not decode (10 s): a
    /// flood of garbage is one line per interval per batch, never one per datagram.
    pub quic_garbage_log_ms: u64,
    /// Entries the audit log keeps (50,000; each ≤ 1 KiB, so ≤ ~50 MiB): past it the oldest
    /// go, counted in `dropped` (`crate::audit`).
    pub audit_max_entries: u64,
    /// Audit entries older than this are dropped too (90 days).
    pub audit_max_age_days: u64,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            request_timeout_ms: 301_000,
            sse_keepalive_ms: 15_000,
            login_failures_per_minute: 5,
            login_failures_global_per_minute: 60,
            login_session_days: 30,
            basic_cache_secs: 60,
            shutdown_drain_ms: 5_000,
            header_read_timeout_ms: 15_000,
            idle_connection_timeout_ms: 120_000,
            connections_per_address: 256,
            upload_max_bytes: 64 << 30,
            upload_max_entries: 1_000_000,
            upload_concurrency: 4,
            upload_idle_ms: 30_000,
            tombstone_secs: 300,
            mcp_session_ttl_ms: 3_600_000,
            mcp_reap_interval_ms: 60_000,
            mcp_session_cap: 20_000,
            mcp_identity_grace_ms: 30_000,
            mcp_task_retention_ms: 86_400_000,
            mail_wake_expiry_ms: 5_000,
            mail_prompt_delivery_timeout_ms: 30_000,
            mail_child_idle_close_ms: 1_800_000,
            mcp_confirm_timeout_ms: 300_000,
            mcp_suspend_timeout_ms: 20_000,
            peer_outbox_max_messages: 1_000,
            peer_outbox_max_bytes: 16 * 1024 * 1024,
            peer_send_wait_ms: 1_500,
            peer_cut_through_ms: 20,
            peer_reconnect_max_ms: 30_000,
            tailscale_refresh_ms: 30_000,
            tailscale_probe_ms: 500,
            upstream_health_interval_ms: 60_000,
            upstream_failure_threshold: 3,
            upstream_backoff_base_ms: 1_000,
            upstream_backoff_max_ms: 60_000,
            upstream_max_retries: 5,
            upstream_connect_timeout_ms: 30_000,
            upstream_oauth_refresh_margin_ms: 60_000,
            upstream_oauth_flow_timeout_ms: 300_000,
            upstream_oauth_callback_grace_ms: 120_000,
            hub_tools_grace_ms: 60_000,
            hub_tool_call_timeout_ms: 300_000,
            quic_garbage_log_ms: 10_000,
            audit_max_entries: 50_000,
            audit_max_age_days: 90,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            remote_access_enabled: false,
            services: Services::default(),
            allowed_origins: Vec::new(),
            mcp_server_enabled: true,
            disabled_native_tools: vec!["config".into(), "debug".into()],
            collapse_tools: false,
            progress_tracking: true,
            mcp_conformance_fixtures: false,
            tailscale: Tailscale::default(),
            secret_store: SecretStore::Auto,
            tuning: Tuning::default(),
            notifications: crate::notify::config::NotifyConfig::default(),
            agents: Agents::default(),
            extra: Map::new(),
        }
    }
}

/// `agents.*`: how `agent action=spawn` and `POST /sessions/agent` launch children.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Agents {
    /// Named run configurations, selected by `run_config` or by a `command` equal to a name
    /// (the literal `codex` selects the Codex configuration marked `default`).
    pub run_configs: Vec<RunConfig>,
    /// Claude Code children.
    pub claude: AgentSettings,
    /// Codex children.
    pub codex: AgentSettings,
    /// Settings of other agent types (`agents.<type>.progress_tracking`), kept as written.
    #[serde(flatten)]
    pub others: Map<String, Value>,
}

impl Agents {
    /// `agents.<agent>.progress_tracking` as written (`None`: not set).
    pub fn progress_tracking(&self, agent: &str) -> Option<bool> {
        match agent {
            "claude" => self.claude.progress_tracking,
            "codex" => self.codex.progress_tracking,
            other => self
                .others
                .get(other)
                .and_then(|s| s.get("progress_tracking"))
                .and_then(Value::as_bool),
        }
    }
}

/// One run configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct RunConfig {
    /// The name callers select it by.
    pub name: String,
    /// The agent it runs (`claude` or `codex`) when `command` is a wrapper.
    pub agent: Option<String>,
    /// The executable.
    pub command: String,
    /// Its argv (`{prompt}` is substituted where authored, else the prompt is appended).
    pub args: Vec<String>,
    /// Environment (a caller's `env` overrides it).
    pub env: std::collections::BTreeMap<String, String>,
    /// Default model (a spawn's `model` overrides it).
    pub model: Option<String>,
    /// The configuration the literal `codex` selects.
    pub default: bool,
}

/// Per-agent launch settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentSettings {
    /// Answer (Claude) or avoid (Codex) the startup folder-trust screen for spawned children
    /// (true).
    pub skip_trust_dialog: bool,
    /// Progress collection for this agent type (`progress_tracking`; absent: on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_tracking: Option<bool>,
}

impl Default for AgentSettings {
    fn default() -> Self {
        Self {
            skip_trust_dialog: true,
            progress_tracking: None,
        }
    }
}

/// Paths into the config document that hold secrets; redacted on read, refused on write.
const SECRET_PATHS: &[&[&str]] = &[
    &["services", "auth", "password_hash"],
    &["services", "auth", "session_token"],
    &["services", "relay", "token"],
    &["services", "push", "vapid_private_key"],
];

impl Config {
    /// The redacted JSON shape for `GET /config`: secrets removed, `<name>_exists` booleans added.
    pub fn redacted(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        redact(&mut v);
        v
    }
}

/// Removes every secret path from `v` and adds its `<name>_exists` boolean beside it.
pub fn redact(v: &mut Value) {
    for path in SECRET_PATHS {
        let (leaf, parents) = path.split_last().expect("non-empty path");
        let pointer: String = parents.iter().map(|p| format!("/{p}")).collect();
        if let Some(obj) = v.pointer_mut(&pointer).and_then(Value::as_object_mut) {
            let present = obj.remove(*leaf).is_some_and(|s| !s.is_null());
            obj.insert(format!("{leaf}_exists"), Value::Bool(present));
        }
    }
}

/// Errors of a config save.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The delta tries to write a secret; secrets have their own commands.
    #[error("config field {0} is a secret and cannot be set through this route")]
    SecretField(String),
    /// The merged document is not a valid config.
    #[error("invalid config: {0}")]
    Invalid(String),
    /// Reading, locking or writing the file failed.
    #[error("config file: {0:#}")]
    Io(anyhow::Error),
}

/// The `config.json` file of one node, with cross-process locking.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    path: PathBuf,
}

impl ConfigFile {
    /// The file at `path` (it may not exist yet: then every field has its default).
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock_path(&self) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(".lock");
        PathBuf::from(p)
    }

    /// Reads the document as JSON (an absent or empty file is `{}`).
    fn read_value(&self) -> anyhow::Result<Value> {
        match std::fs::read(&self.path) {
            Ok(b) if b.iter().all(u8::is_ascii_whitespace) => Ok(Value::Object(Map::new())),
            Ok(b) => serde_json::from_slice(&b)
                .with_context(|| format!("parsing {}", self.path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Value::Object(Map::new())),
            Err(e) => Err(e).with_context(|| format!("reading {}", self.path.display())),
        }
    }

    /// Loads the typed config.
    pub fn load(&self) -> anyhow::Result<Config> {
        let v = self.read_value()?;
        serde_json::from_value(v)
            .with_context(|| format!("reading settings from {}", self.path.display()))
    }

    /// Runs `f` on the latest document under the cross-process lock and publishes its result
    /// atomically. Blocking: call from a blocking thread.
    pub fn update<F>(&self, f: F) -> Result<Config, SaveError>
    where
        F: FnOnce(&mut Value) -> Result<(), SaveError>,
    {
        let (_, _, cfg) = self.update_json(f, |doc| {
            serde_json::from_value(doc.clone()).map_err(|e| SaveError::Invalid(e.to_string()))
        })?;
        Ok(cfg)
    }

    /// The general locked save shared by every hand-editable JSON file of the config dir
    /// (`config.json`, `mcp-upstreams.json`): under the cross-process lock, reads the latest
    /// document, runs `f` on it, validates the result with `check` and publishes it with an
    /// atomic rename. Returns the exact documents before and after the mutation plus what
    /// `check` made of the result, so a caller can apply precisely what the write changed.
    /// Nothing is written when `f` or `check` fails. Blocking: call from a blocking thread.
    pub fn update_json<T, E, F, C>(&self, f: F, check: C) -> Result<(Value, Value, T), E>
    where
        E: From<SaveError>,
        F: FnOnce(&mut Value) -> Result<(), E>,
        C: FnOnce(&Value) -> Result<T, E>,
    {
        let io = |e: anyhow::Error| E::from(SaveError::Io(e));
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.lock_path())
            .context("opening the config lock")
            .map_err(io)?;
        fs4::fs_std::FileExt::lock_exclusive(&lock)
            .context("locking the config")
            .map_err(io)?;
        let before = self.read_value().map_err(io)?;
        let mut doc = before.clone();
        f(&mut doc)?;
        let checked = check(&doc)?;
        self.write_atomic(&doc).map_err(io)?;
        // The lock is released when `lock` drops, after the rename is visible.
        drop(lock);
        Ok((before, doc, checked))
    }

    /// Reads the document as JSON without the lock (an absent or empty file is `{}`).
    pub fn read_json(&self) -> anyhow::Result<Value> {
        self.read_value()
    }

    /// Applies the caller's `base`→`edited` delta to the latest file (the `PUT /config` save).
    pub fn save_delta(&self, base: &Value, edited: &Value) -> Result<Config, SaveError> {
        let mut delta = Vec::new();
        diff(&mut Vec::new(), base, edited, &mut delta);
        for (path, _) in &delta {
            let joined = path.join(".");
            if SECRET_PATHS
                .iter()
                .any(|s| s.iter().copied().eq(path.iter().map(String::as_str)))
            {
                return Err(SaveError::SecretField(joined));
            }
        }
        // `*_exists` markers are read-only projections of secrets; edits to them are ignored.
        delta.retain(|(path, _)| !path.last().is_some_and(|l| l.ends_with("_exists")));
        self.update(|doc| {
            for (path, change) in delta {
                apply(doc, &path, change);
            }
            Ok(())
        })
    }

    fn write_atomic(&self, doc: &Value) -> anyhow::Result<()> {
        let mut bytes = serde_json::to_vec_pretty(doc)?;
        bytes.push(b'\n');
        write_file_atomic(&self.path, &bytes, 0o600)
    }
}

/// Writes `bytes` to `path` through a temp file in the same directory (created with `mode`),
/// synced, then renamed over `path`: a reader sees the old file or the new one, never a part.
pub fn write_file_atomic(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let dir = path.parent().context("the path has no parent")?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("publishing {}", path.display()))?;
    Ok(())
}

/// One change between two documents: set a value, or remove the key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Change {
    Set(Value),
    Remove,
}

/// Collects the changes from `a` to `b`; objects recurse, anything else is replaced whole.
pub(crate) fn diff(
    path: &mut Vec<String>,
    a: &Value,
    b: &Value,
    out: &mut Vec<(Vec<String>, Change)>,
) {
    match (a, b) {
        (Value::Object(ma), Value::Object(mb)) => {
            for (k, vb) in mb {
                path.push(k.clone());
                match ma.get(k) {
                    Some(va) => diff(path, va, vb, out),
                    None => out.push((path.clone(), Change::Set(vb.clone()))),
                }
                path.pop();
            }
            for k in ma.keys().filter(|k| !mb.contains_key(*k)) {
                let mut p = path.clone();
                p.push(k.clone());
                out.push((p, Change::Remove));
            }
        }
        _ if a == b => {}
        _ => out.push((path.clone(), Change::Set(b.clone()))),
    }
}

/// Applies one change at `path`, creating parent objects as needed.
pub(crate) fn apply(doc: &mut Value, path: &[String], change: Change) {
    let Some((leaf, parents)) = path.split_last() else {
        if let Change::Set(v) = change {
            *doc = v;
        }
        return;
    };
    let mut cur = doc;
    for p in parents {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        cur = cur
            .as_object_mut()
            .expect("made an object above")
            .entry(p.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !cur.is_object() {
        *cur = Value::Object(Map::new());
    }
    let obj = cur.as_object_mut().expect("made an object above");
    match change {
        Change::Set(v) => {
            obj.insert(leaf.clone(), v);
        }
        Change::Remove => {
            obj.remove(leaf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_file_is_all_defaults() {
        let d = tempfile::tempdir().unwrap();
        let f = ConfigFile::new(d.path().join("config.json"));
        let c = f.load().unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.services.server.port, 9876);
        assert_eq!(c.disabled_native_tools, vec!["config", "debug"]);
    }

    #[test]
    fn redaction_hides_secrets_and_reports_presence() {
        let mut c = Config::default();
        c.services.auth.password_hash = Some("$2b$...".into());
        let v = c.redacted();
        assert!(v["services"]["auth"].get("password_hash").is_none());
        assert_eq!(v["services"]["auth"]["password_hash_exists"], json!(true));
        assert!(!v.to_string().contains("$2b$"));
    }

    #[test]
    fn delta_keeps_a_concurrent_edit_to_another_field() {
        let d = tempfile::tempdir().unwrap();
        let f = ConfigFile::new(d.path().join("config.json"));
        let base = Config::default().redacted();
        // Writer A changes the port, writer B (same stale base) changes allowed origins.
        let mut a = base.clone();
        a["services"]["server"]["port"] = json!(1234);
        let mut b = base.clone();
        b["allowed_origins"] = json!(["http://x.test"]);
        f.save_delta(&base, &a).unwrap();
        let c = f.save_delta(&base, &b).unwrap();
        assert_eq!(c.services.server.port, 1234);
        assert_eq!(c.allowed_origins, vec!["http://x.test"]);
    }

    #[test]
    fn secrets_cannot_be_written_and_hash_survives_saves() {
        let d = tempfile::tempdir().unwrap();
        let f = ConfigFile::new(d.path().join("config.json"));
        f.update(|doc| {
            doc["services"] = json!({"auth": {"password_hash": "h"}});
            Ok(())
        })
        .unwrap();
        let base = f.load().unwrap().redacted();
        let mut edited = base.clone();
        edited["services"]["auth"]["password_hash"] = json!("evil");
        assert!(matches!(
            f.save_delta(&base, &edited),
            Err(SaveError::SecretField(_))
        ));
        let mut edited = base.clone();
        edited["remote_access_enabled"] = json!(true);
        edited["services"]["auth"]["password_hash_exists"] = json!(false);
        let c = f.save_delta(&base, &edited).unwrap();
        assert_eq!(c.services.auth.password_hash.as_deref(), Some("h"));
        assert!(c.remote_access_enabled);
    }

    #[test]
    fn unknown_keys_survive_and_invalid_types_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("config.json");
        std::fs::write(
            &path,
            r#"{"my_note": "keep me", "services": {"relay": {"url": "x"}}}"#,
        )
        .unwrap();
        let f = ConfigFile::new(path.clone());
        let base = f.load().unwrap().redacted();
        let mut edited = base.clone();
        edited["collapse_tools"] = json!(true);
        f.save_delta(&base, &edited).unwrap();
        let raw: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(raw["my_note"], json!("keep me"));
        assert_eq!(raw["services"]["relay"]["url"], json!("x"));
        let mut bad = base.clone();
        bad["services"]["server"]["port"] = json!("not a port");
        assert!(matches!(
            f.save_delta(&base, &bad),
            Err(SaveError::Invalid(_))
        ));
        // A refused save leaves the file as it was.
        assert_eq!(f.load().unwrap().services.server.port, 9876);
    }
}
