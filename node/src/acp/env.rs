//! The ACP service's settings (configured agents, permission timeout, journal bounds)
//! and its environment of handles ([`AcpEnv`]).

use super::*;

/// The service's settings, read from the config at the moment they are needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `acp_agents`: the agents a request may name.
    pub agents: Vec<AgentSpec>,
    /// `ego_executable`: the agent named `ego`, when set.
    pub ego_executable: Option<String>,
    /// `acp.permission_timeout_ms` (10 min): a permission request unanswered this long is
    /// cancelled.
    pub permission_timeout: Duration,
    /// `acp.journal_max_bytes` (8 MiB per connection): past it the oldest frames go.
    pub journal_max_bytes: usize,
    /// `acp.journal_max_age_secs` (7 days): older frames go.
    pub journal_max_age: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            agents: Vec::new(),
            ego_executable: None,
            permission_timeout: Duration::from_secs(600),
            journal_max_bytes: 8 << 20,
            journal_max_age: Duration::from_secs(7 * 86_400),
        }
    }
}

/// One configured agent (`acp_agents[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSpec {
    /// What a request names.
    pub name: String,
    /// The program.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Tuning {
    permission_timeout_ms: Option<u64>,
    journal_max_bytes: Option<usize>,
    journal_max_age_secs: Option<u64>,
}

impl Settings {
    /// Reads the settings from the config's top-level keys (`acp_agents`, `ego_executable`,
    /// `acp`); malformed entries are skipped with a warning.
    pub fn from_keys(keys: &serde_json::Map<String, Value>) -> Self {
        let mut s = Self::default();
        if let Some(list) = keys.get("acp_agents").and_then(Value::as_array) {
            for a in list {
                match serde_json::from_value::<AgentSpec>(a.clone()) {
                    Ok(spec) => s.agents.push(spec),
                    Err(e) => {
                        tracing::warn!(source = "acp", error = %e, "skipping a malformed acp_agents entry")
                    }
                }
            }
        }
        s.ego_executable = keys
            .get("ego_executable")
            .and_then(Value::as_str)
            .filter(|e| !e.is_empty())
            .map(str::to_owned);
        if let Some(t) = keys
            .get("acp")
            .and_then(|v| serde_json::from_value::<Tuning>(v.clone()).ok())
        {
            if let Some(ms) = t.permission_timeout_ms {
                s.permission_timeout = Duration::from_millis(ms);
            }
            if let Some(b) = t.journal_max_bytes {
                s.journal_max_bytes = b.max(1024);
            }
            if let Some(secs) = t.journal_max_age_secs {
                s.journal_max_age = Duration::from_secs(secs);
            }
        }
        s
    }

    /// The agent a request names.
    pub(super) fn agent(&self, name: &str) -> Option<AgentSpec> {
        if name == "ego"
            && let Some(exe) = &self.ego_executable
        {
            return Some(AgentSpec {
                name: "ego".into(),
                command: exe.clone(),
                args: Vec::new(),
                env: BTreeMap::new(),
            });
        }
        self.agents.iter().find(|a| a.name == name).cloned()
    }

    /// The names a request may use.
    pub(super) fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.agents.iter().map(|a| a.name.clone()).collect();
        if self.ego_executable.is_some() {
            v.push("ego".into());
        }
        v
    }
}

/// Reads the current settings.
pub type SettingsSource = Arc<dyn Fn() -> Settings + Send + Sync>;

/// Lists the registered repository roots (a connection's cwd must be inside one).
pub type RootsSource = Arc<dyn Fn() -> Vec<PathBuf> + Send + Sync>;

/// What the ACP service uses of the node it runs in.
#[derive(Clone)]
pub struct AcpEnv {
    /// `acp-notice` goes here.
    pub bus: Arc<Bus>,
    /// The journal's store.
    pub store: Arc<Store>,
    /// Owner of the drivers, so shutdown waits for them.
    pub tasks: TaskTracker,
    /// Fired once at shutdown: every agent is stopped.
    pub shutdown: CancellationToken,
    /// The settings in force.
    pub settings: SettingsSource,
    /// The registered roots.
    pub roots: RootsSource,
    /// The IPC socket (the agent's `tuic-bridge` MCP server reaches the node through it).
    pub socket: PathBuf,
    /// The named instance, for the bridge's `TUIC_APP_INSTANCE`.
    pub instance: Option<String>,
    /// The PTY sessions `terminal/create` runs commands in (none while the node stops).
    pub sessions: SessionsSource,
    /// Registers a chat's identity in agent mail as a terminal-less peer, and retires it.
    pub peers: PeersSink,
    /// Where an agent that speaks MCP over HTTP reaches the node's `/mcp`.
    pub http: HttpSource,
}

/// A chat's identity in agent mail (`POST /acp/chat/open`): a peer without a terminal that
/// stays addressable while the node holds the connection — from the open, across a restart
/// (the node re-registers the chats it restores), until `DELETE` retires it.
pub trait ChatPeers: Send + Sync {
    /// Registers `identity` as a peer without a terminal, named `name`, working in `cwd`
    /// (an identity already registered keeps its inbox, name and path).
    fn register(&self, identity: &str, name: &str, cwd: &str);
    /// Retires `identity`: its peer entry and inbox go (pending waits end) and mail to it is
    /// refused from now on.
    fn retire(&self, identity: &str);
}

/// Where the service registers and retires its chats' identities.
pub type PeersSink = Arc<dyn ChatPeers>;

/// The node's `/mcp` over loopback HTTP, when its TCP listener serves one an agent on this
/// host can reach as a loopback caller (so `x-tuic-session` binds its identity).
pub type HttpSource =
    Arc<dyn Fn() -> futures::future::BoxFuture<'static, Option<HttpMcp>> + Send + Sync>;

/// How an agent reaches `/mcp` over HTTP.
#[derive(Clone)]
pub struct HttpMcp {
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    /// The `cookie` header that authenticates it (the node token: a machine credential; it
    /// goes only into the agent's `session/new`, never into the journal or a log).
    pub cookie: String,
}

impl std::fmt::Debug for HttpMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpMcp")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The node's session registry, when it still runs.
pub type SessionsSource = Arc<dyn Fn() -> Option<Arc<crate::session::Registry>> + Send + Sync>;

impl std::fmt::Debug for AcpEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpEnv")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}
