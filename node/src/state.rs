//! The node's shared state, passed explicitly to every handler as `State<Arc<Node>>`.

use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::AuthState;
use crate::config::{Config, ConfigFile, SecretStore};
use crate::events::Bus;
use crate::guard::HostTrust;
use crate::logs::LogRing;
use crate::paths::Paths;
use crate::repos::Repos;
use crate::server::TcpControl;
use crate::store::Store;
use crate::vault::{self, Vault};

/// Name of the node's long-lived connection token in the vault.
pub const NODE_TOKEN: &str = "session_token";

/// Per-run overrides from flags and `TUIC_PORT`; never persisted.
#[derive(Debug, Clone, Default)]
pub struct RunOverrides {
    /// `--remote-access` for this run (cleared when a config save changes the setting).
    pub remote_access: Option<bool>,
    /// `--port` or `TUIC_PORT`.
    pub port: Option<u16>,
    /// `--bind`.
    pub bind: Option<String>,
}

/// Everything a running node shares between its listeners and handlers.
#[derive(Debug)]
pub struct Node {
    /// Binary name used in the `ready` line and logs (`tuic-node`, `tuic-hub`).
    pub name: &'static str,
    /// Where the node's files are.
    pub paths: Paths,
    /// `config.json`.
    pub config_file: ConfigFile,
    /// The latest loaded config; replaced whole on every reload.
    config: RwLock<Arc<Config>>,
    /// Flag overrides for this run.
    pub overrides: Mutex<RunOverrides>,
    /// Secrets (shared with the secret tool's service).
    pub vault: Arc<Vault>,
    /// The embedded store.
    pub store: Arc<Store>,
    /// Event bus behind `GET /events` (shared with the session layer's environment).
    pub bus: Arc<Bus>,
    /// Recent log records behind `GET /logs`.
    pub logs: LogRing,
    /// Login sessions, Basic cache and login throttling.
    pub auth: AuthState,
    /// The long-lived connection token a hub presents (as the `tui-session` cookie); replaced
    /// by [`Node::rotate_node_token`]. Read it with [`Node::node_token`].
    node_token: RwLock<String>,
    /// Cancelled when the node token is rotated (then replaced): every peer link
    /// authenticated with the old token ends with it. A child of `shutdown`.
    token_epoch: Mutex<CancellationToken>,
    /// Process start, for `uptime_secs`.
    pub started: Instant,
    /// Fired once at shutdown; streams end and listeners drain.
    pub shutdown: CancellationToken,
    /// Hosts the TCP Host guard trusts besides literals (shared with Tailscale detection).
    pub host_trust: Arc<RwLock<HostTrust>>,
    /// Tailscale detection and what it found last ([`crate::tailscale`]).
    pub tailscale: Arc<crate::tailscale::Tailscale>,
    /// The TCP listener, when running.
    pub tcp: tokio::sync::Mutex<TcpControl>,
    /// Owner of every background task, so shutdown can wait for them.
    pub tasks: TaskTracker,
    /// Registered repositories (the roots of every file route).
    pub repos: Arc<Repos>,
    /// The git service's bounded runner and open orphan dialogs (`crate::git`).
    pub git: crate::git::Git,
    /// Concurrent uploads allowed; a permit is held through extraction.
    pub upload_permits: Arc<tokio::sync::Semaphore>,
    /// PTY sessions and their exit tombstones.
    pub sessions: Arc<crate::session::Registry>,
    /// The MCP endpoint's protocol sessions, tool registry and task handles.
    pub mcp: crate::mcp::McpState,
    /// Agent mail: inboxes, peers, waits and PTY wake notices.
    pub mail: crate::mail::Mail,
    /// Cross-host mail: the outbox towards a hub, dedupe rings, the hub's peer directory.
    pub peer: crate::mail::PeerState,
    /// The progress journal and the Progress Flow cursors.
    pub progress: Arc<crate::progress::Progress>,
    /// Native stories, workflow definitions and runs (`crate::stories`).
    pub stories: Arc<crate::stories::Stories>,
    /// Workflow definitions and runs (`crate::stories::workflow`).
    pub workflows: Arc<crate::stories::workflow::Workflows>,
    /// What the planning layer's entry points take (`crate::stories::StoriesEnv`).
    pub planning: crate::stories::StoriesEnv,
    /// Automation definitions, their scheduler's state and firing ledger.
    pub automations: Arc<crate::automations::Automations>,
    /// The automation scheduler (started with the node's background tasks).
    pub scheduler: crate::automations::scheduler::Scheduler,
    /// Operations state: metrics collectors, process samples.
    pub ops: crate::ops::Ops,
    /// The upstream MCP servers this node proxies (`mcp-upstreams.json`).
    pub upstreams: Arc<crate::upstream::Upstreams>,
    /// The hooks an extension installed before serving (`crate::ext`; none on a plain node).
    pub ext: crate::ext::Extensions,
    /// The audit log (`crate::audit`).
    pub audit: Arc<crate::audit::Audit>,
    /// Scoped share links (`crate::share`).
    pub shares: Arc<crate::share::Shares>,
    /// The secret tool's service (`crate::secrets`).
    pub secrets: Arc<crate::secrets::Secrets>,
    /// Notifications to the person: Web Push, ntfy, webhook (`crate::notify`).
    pub notify: crate::notify::Notify,
    /// ACP connections to configured agents (`crate::acp`).
    pub acp: Arc<crate::acp::Acp>,
    /// Stored reviews, their delivery and landing (`crate::review`).
    pub reviews: Arc<crate::review::Reviews>,
    /// Pull requests, issues, CI logs and the `github_pr` proof (`crate::github`).
    pub github: Arc<crate::github::Github>,
}

impl Node {
    /// Opens the node's config, vault and store. Blocking; call before serving.
    pub fn open(
        name: &'static str,
        paths: Paths,
        overrides: RunOverrides,
        logs: LogRing,
    ) -> anyhow::Result<Arc<Self>> {
        paths.ensure_dir()?;
        paths.narrow_modes();
        let config_file = ConfigFile::new(paths.config_file());
        let config = config_file.load()?;
        let vault = Arc::new(Vault::open(
            &paths.config_dir,
            paths.secrets_file(),
            config.secret_store == SecretStore::Auto,
        ));
        let node_token = vault
            .get_or_create(NODE_TOKEN, vault::random_token)
            .context("loading the node token")?;
        let store = Store::open(&paths.store_file())?;
        let now = crate::logs::now_ms();
        store.prune_login_sessions(now)?;
        let auth = AuthState::with_sessions(store.login_sessions()?);
        let tailscale_name = tailscale_name(&config);
        let store = Arc::new(store);
        let peer = crate::mail::PeerState::load(&store, &config.tuning)
            .context("loading cross-host mail state")?;
        let journal = crate::progress::Journal::open(store.clone())
            .context("opening the progress journal")?;
        let stories = Arc::new(
            crate::stories::Stories::open(store.clone()).context("opening the story service")?,
        );
        let workflows = Arc::new(
            crate::stories::workflow::Workflows::open(store.clone())
                .context("opening the workflow runs")?,
        );
        let automations = Arc::new(
            crate::automations::Automations::open(store.clone(), now)
                .context("opening the automations")?,
        );
        crate::audit::create_tables(&store).context("opening the audit log")?;
        let repos =
            Arc::new(Repos::open(store.clone()).context("opening the repository registry")?);
        crate::fs::upload::sweep_staging(&repos.roots());
        let upload_permits = Arc::new(tokio::sync::Semaphore::new(
            config.tuning.upload_concurrency.max(1) as usize,
        ));
        let mcp = crate::mcp::McpState::new(&config);
        let bus = Arc::new(Bus::default());
        let secrets = Arc::new(
            crate::secrets::Secrets::open(crate::secrets::SecretsEnv {
                vault: vault.clone(),
                store: store.clone(),
                bus: bus.clone(),
            })
            .context("opening the secret names")?,
        );
        let tasks = TaskTracker::new();
        let shutdown = CancellationToken::new();
        let shares = Arc::new(
            crate::share::Shares::open(crate::share::ShareEnv {
                store: store.clone(),
                shutdown: shutdown.clone(),
            })
            .context("opening the share links")?,
        );
        // The composition root: each layer gets what it uses of the node, and hooks into the
        // layers above it go through a weak reference to the node being built.
        let paths_for_notify = paths.clone();
        let started = Instant::now();
        let host_trust = Arc::new(RwLock::new(HostTrust {
            interface_ips: crate::guard::interface_ips(),
            tailscale_name,
            tailscale_detected: None,
        }));
        crate::review::create_tables(&store).context("opening the reviews")?;
        let node = Arc::new_cyclic(|weak: &Weak<Self>| {
            let audit = Arc::new(crate::audit::Audit::new(audit_env(weak, &store)));
            let sessions = Arc::new(crate::session::Registry::new(
                &paths.config_dir,
                session_env(weak, &paths, &bus, &tasks, &shutdown),
            ));
            let planning = planning_env(weak, &stories, &workflows, &bus, &tasks, &shutdown);
            let upstreams = Arc::new(crate::upstream::Upstreams::new(
                paths.upstreams_file(),
                upstream_env(weak, &vault, &tasks, &shutdown),
            ));
            let github = Arc::new(crate::github::Github::new(github_env(weak, &vault, &repos)));
            let domain = Domain::new(
                weak,
                Shared {
                    paths: &paths,
                    bus: &bus,
                    tasks: &tasks,
                    shutdown: &shutdown,
                    repos: &repos,
                    sessions: &sessions,
                    github: &github,
                },
                journal,
                automations,
                &upstreams,
                &host_trust,
                started,
            );
            let acp = Arc::new(crate::acp::Acp::open(acp_env(
                weak, &paths, &bus, &store, &tasks, &shutdown,
            )));
            let reviews = Arc::new(crate::review::Reviews::new(crate::review::ReviewEnv {
                store: store.clone(),
                sessions: sessions.clone(),
                acp: acp.clone(),
                mail: Arc::new(ReviewMail(weak.clone())),
                audit: audit.clone(),
            }));
            Self {
                audit,
                reviews,
                shares,
                secrets,
                sessions,
                planning,
                notify: crate::notify::Notify::new(notify_env(
                    weak,
                    &paths_for_notify,
                    &bus,
                    &tasks,
                    &shutdown,
                )),
                acp,
                github,
                name,
                paths,
                config_file,
                config: RwLock::new(Arc::new(config)),
                overrides: Mutex::new(overrides),
                vault,
                store,
                bus,
                logs,
                auth,
                node_token: RwLock::new(node_token),
                token_epoch: Mutex::new(shutdown.child_token()),
                started,
                shutdown,
                host_trust,
                tailscale: domain.tailscale,
                tcp: tokio::sync::Mutex::new(TcpControl::default()),
                tasks,
                repos,
                git: domain.git,
                upload_permits,
                mcp,
                mail: crate::mail::Mail::new(Arc::new(McpClients(weak.clone()))),
                peer,
                progress: domain.progress,
                stories,
                workflows,
                automations: domain.automations,
                scheduler: domain.scheduler,
                ops: domain.ops,
                upstreams,
                ext: domain.ext,
            }
        });
        node.mcp.registry.add_source(node.upstreams.clone());
        node.mcp.registry.add_source(node.peer.hub_tools.clone());
        // Story and run commits publish their wake hints on the bus.
        let weak = Arc::downgrade(&node);
        node.stories.set_notify(Arc::new(move |project, seq| {
            if let Some(n) = weak.upgrade() {
                n.bus.publish(tuic_proto::events::Event::StoryChanged {
                    repo_path: project.to_owned(),
                    sequence: seq,
                });
            }
        }));
        let weak = Arc::downgrade(&node);
        node.workflows
            .set_notify(Arc::new(move |project, run_id, seq| {
                if let Some(n) = weak.upgrade() {
                    n.bus
                        .publish(tuic_proto::events::Event::WorkflowRunChanged {
                            repo_path: project.to_owned(),
                            payload: serde_json::json!({"runId": run_id, "sequence": seq}),
                        });
                }
            }));
        node.git.load_placements();
        // The reaper keeps identities that own a live PTY or parent a live child; mail answers.
        *node.mcp.liveness.write().unwrap_or_else(|p| p.into_inner()) =
            Arc::new(Addressable(Arc::downgrade(&node)));
        Ok(node)
    }

    /// The current config.
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The node token in force.
    pub fn node_token(&self) -> String {
        self.node_token
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the node token with a fresh one (vault first, then memory) and returns it: the
    /// old token stops working at once, for cookies, `?token=` and new peer links alike. A
    /// hub learns the new one when `connect` is run again with it. Blocking (the vault).
    pub fn rotate_node_token(&self) -> anyhow::Result<String> {
        let mut held = self.node_token.write().unwrap_or_else(|p| p.into_inner());
        let fresh = vault::random_token();
        self.vault
            .set(NODE_TOKEN, &fresh)
            .context("storing the rotated node token")?;
        *held = fresh.clone();
        let mut epoch = self.token_epoch.lock().unwrap_or_else(|p| p.into_inner());
        epoch.cancel();
        *epoch = self.shutdown.child_token();
        tracing::info!(
            source = "auth",
            "node token rotated; peer links opened with the old one are closed"
        );
        Ok(fresh)
    }

    /// A token that is cancelled at shutdown or when the node token in force now is rotated:
    /// a peer link stops on it.
    pub fn token_epoch(&self) -> CancellationToken {
        self.token_epoch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .child_token()
    }

    /// Revokes login sessions: from memory at once, from the store off the async workers.
    pub fn forget_logins(&self, hashes: Vec<String>) {
        if hashes.is_empty() {
            return;
        }
        let store = self.store.clone();
        let persist = move || {
            if let Err(e) = store.remove_login_sessions(&hashes) {
                tracing::warn!(error = %format!("{e:#}"), "removing revoked logins from the store");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(_) => {
                self.tasks.spawn_blocking(persist);
            }
            Err(_) => persist(),
        }
    }

    /// Replaces the in-memory config (after a save or a reload from disk). A changed password
    /// hash revokes every login: a password change is how a person ends sessions they lost.
    pub fn set_config(&self, c: Config) {
        let ts = tailscale_name(&c);
        let old_hash = self.config().services.auth.password_hash.clone();
        if old_hash != c.services.auth.password_hash {
            let revoked = self.auth.revoke_all();
            tracing::info!(
                source = "auth",
                revoked = revoked.len(),
                "password changed: every login revoked"
            );
            self.forget_logins(revoked);
        }
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(c);
        self.host_trust
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .tailscale_name = ts;
        // A changed password hash must not be satisfied by a cached Basic check.
        self.auth.clear_basic_cache();
    }

    /// A snapshot of what the Host guard trusts.
    pub fn host_trust(&self) -> HostTrust {
        self.host_trust
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The request deadline in force.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.config().tuning.request_timeout_ms)
    }
}

/// The session layer's environment: the node's bus, tasks and shutdown, the child environment,
/// the tuning read from the current config, and the progress journal's observed `intent:`.
fn session_env(
    node: &Weak<Node>,
    paths: &Paths,
    bus: &Arc<Bus>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> crate::session::SessionEnv {
    let tuning = node.clone();
    let intents = node.clone();
    crate::session::SessionEnv {
        bus: bus.clone(),
        tasks: tasks.clone(),
        shutdown: shutdown.clone(),
        socket: paths.socket.clone(),
        instance: paths.instance.id().map(str::to_owned),
        tuning: Arc::new(move || {
            tuning
                .upgrade()
                .map(|n| crate::session::env::Tuning {
                    tombstone: Duration::from_secs(n.config().tuning.tombstone_secs),
                })
                .unwrap_or_default()
        }),
        on_intent: Some(Arc::new(move |s, text| {
            if let Some(n) = intents.upgrade() {
                n.progress.observe_intent(s, text);
            }
        })),
        cells: Arc::default(),
    }
}

/// The audit log's environment: the store and the bounds of the current tuning.
fn audit_env(node: &Weak<Node>, store: &Arc<Store>) -> crate::audit::AuditEnv {
    let tuning = node.clone();
    crate::audit::AuditEnv {
        store: store.clone(),
        bounds: Arc::new(move || {
            let t = tuning
                .upgrade()
                .map(|n| n.config().tuning.clone())
                .unwrap_or_default();
            crate::audit::Bounds {
                max_entries: t.audit_max_entries,
                max_age_ms: t.audit_max_age_days.saturating_mul(86_400_000),
            }
        }),
    }
}

/// The notification service's environment: the bus, tasks and shutdown, the config's
/// `notifications` section, this host's name, session context and the vault, each reached
/// through a weak reference to the node being built.
fn notify_env(
    node: &Weak<Node>,
    paths: &Paths,
    bus: &Arc<Bus>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> crate::notify::NotifyEnv {
    let config = node.clone();
    crate::notify::NotifyEnv {
        bus: bus.clone(),
        tasks: tasks.clone(),
        shutdown: shutdown.clone(),
        config: Arc::new(move || {
            config
                .upgrade()
                .map(|n| n.config().notifications.clone())
                .unwrap_or_default()
        }),
        host: rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned(),
        sessions: Arc::new(NotifySessions(node.clone())),
        secrets: Arc::new(NotifySecrets(node.clone())),
        subscriptions_file: paths.config_dir.join("push-subscriptions.json"),
    }
}

/// Session context for notifications: alias, name, agent, and the repository and branch of
/// the session's directory. Holds the node weakly.
struct NotifySessions(Weak<Node>);

impl crate::notify::SessionLookup for NotifySessions {
    fn context(&self, session_id: &str) -> Option<crate::notify::core::Context> {
        let n = self.0.upgrade()?;
        let s = n.sessions.resolve(session_id)?;
        let row = s.row();
        let (repo, branch) = crate::notify::repo_and_branch(std::path::Path::new(&row.cwd));
        Some(crate::notify::core::Context {
            host: n.notify.env().host.clone(),
            session_id: Some(row.session_id),
            session: Some(row.alias),
            name: row.display_name,
            repo,
            branch,
            agent: row.agent_type,
        })
    }
}

/// The vault as the notification service uses it. Holds the node weakly.
struct NotifySecrets(Weak<Node>);

impl crate::notify::Secrets for NotifySecrets {
    fn get(&self, name: &str) -> anyhow::Result<Option<String>> {
        match self.0.upgrade() {
            Some(n) => n.vault.get(name),
            None => Ok(None),
        }
    }

    fn get_or_create(&self, name: &str, make: fn() -> String) -> anyhow::Result<String> {
        let n = self.0.upgrade().context("the node is gone")?;
        n.vault.get_or_create(name, make)
    }
}

/// The ACP service's environment: the bus, store, tasks and shutdown, the settings read from
/// the current config's `acp_agents` / `ego_executable` / `acp` keys, and the registered
/// roots.
fn acp_env(
    node: &Weak<Node>,
    paths: &Paths,
    bus: &Arc<Bus>,
    store: &Arc<Store>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> crate::acp::AcpEnv {
    let settings = node.clone();
    let roots = node.clone();
    let sessions = node.clone();
    crate::acp::AcpEnv {
        bus: bus.clone(),
        store: store.clone(),
        tasks: tasks.clone(),
        shutdown: shutdown.clone(),
        settings: Arc::new(move || {
            settings
                .upgrade()
                .map(|n| crate::acp::Settings::from_keys(&n.config().extra))
                .unwrap_or_default()
        }),
        roots: Arc::new(move || roots.upgrade().map(|n| n.repos.roots()).unwrap_or_default()),
        socket: paths.socket.clone(),
        instance: paths.instance.id().map(str::to_owned),
        sessions: Arc::new(move || sessions.upgrade().map(|n| n.sessions.clone())),
    }
}

/// Agent mail as reviews use it. Holds the node weakly: the node owns the reviews.
struct ReviewMail(Weak<Node>);

impl crate::review::Mailer for ReviewMail {
    fn registered(&self, identity: &str) -> bool {
        self.0
            .upgrade()
            .is_some_and(|n| n.mail.lock().inboxes.is_registered(identity))
    }

    fn send(&self, identity: &str, text: String) -> Result<String, String> {
        let n = self.0.upgrade().ok_or("the node is gone")?;
        crate::mail::Mail::post(
            &n,
            identity,
            "tuic-review",
            Some("review".into()),
            text,
            None,
            None,
        )
        .map(|s| s.message_id)
        .map_err(|e| e.to_string())
    }
}

/// Mail's [`crate::mail::Clients`], answered by the MCP endpoint: pushes go to the identity's
/// `GET /mcp` streams, task handles to the `task` tool's table. Holds the node weakly: the
/// node owns the mail that owns this.
#[derive(Debug)]
struct McpClients(Weak<Node>);

impl crate::mail::Clients for McpClients {
    fn push(&self, identity: &str, note: &serde_json::Value) -> bool {
        self.0
            .upgrade()
            .is_some_and(|n| n.mcp.sessions.push_to_identity(identity, note))
    }

    fn open_task(&self, owners: Vec<String>) -> (String, u64) {
        let poll = crate::mcp::tools::task::POLL_INTERVAL_MS;
        match self.0.upgrade() {
            Some(n) => (n.mcp.tasks.create(owners, Instant::now()), poll),
            // Unreachable while a handler runs (it holds the node); an id nobody can poll.
            None => (uuid::Uuid::new_v4().to_string(), poll),
        }
    }

    fn finish_task(&self, task_id: &str, session_id: &str, exit_code: Option<i32>) {
        if let Some(n) = self.0.upgrade() {
            n.mcp.tasks.finish(task_id, session_id, exit_code);
        }
    }
}

/// The MCP reaper's liveness answer: mail's addressability rule
/// ([`crate::mail::peer_identity_is_addressable`]). Holds the node weakly: the node owns the
/// MCP state that owns this.
#[derive(Debug)]
struct Addressable(Weak<Node>);

impl crate::mcp::sessions::IdentityLiveness for Addressable {
    fn is_addressable(&self, tuic_session: &str) -> bool {
        self.0
            .upgrade()
            .is_some_and(|n| crate::mail::peer_identity_is_addressable(&n, tuic_session))
    }
}

/// What every domain service's environment is cut from.
struct Shared<'a> {
    paths: &'a Paths,
    bus: &'a Arc<Bus>,
    tasks: &'a TaskTracker,
    shutdown: &'a CancellationToken,
    repos: &'a Arc<Repos>,
    sessions: &'a Arc<crate::session::Registry>,
    github: &'a Arc<crate::github::Github>,
}

/// The domain services (`git`, `progress`, `ops`, `automations`, `tailscale`, `ext`), each
/// built over its environment. Hooks into the layers above them (mail, the uplink, MCP, the
/// config) go through a weak reference to the node being built.
struct Domain {
    git: crate::git::Git,
    progress: Arc<crate::progress::Progress>,
    ops: crate::ops::Ops,
    automations: Arc<crate::automations::Automations>,
    scheduler: crate::automations::scheduler::Scheduler,
    tailscale: Arc<crate::tailscale::Tailscale>,
    ext: crate::ext::Extensions,
}

impl Domain {
    fn new(
        node: &Weak<Node>,
        sh: Shared<'_>,
        journal: crate::progress::Journal,
        automations: Arc<crate::automations::Automations>,
        upstreams: &Arc<crate::upstream::Upstreams>,
        host_trust: &Arc<RwLock<HostTrust>>,
        started: Instant,
    ) -> Self {
        let git = crate::git::Git::new(crate::git::GitEnv {
            repos: sh.repos.clone(),
            sessions: sh.sessions.clone(),
            bus: sh.bus.clone(),
            github: Some(sh.github.clone() as Arc<dyn crate::git::PrEvidence>),
        });
        let (config, peers) = (node.clone(), node.clone());
        let progress = Arc::new(crate::progress::Progress::with_journal(
            journal,
            crate::progress::ProgressEnv {
                repos: sh.repos.clone(),
                sessions: sh.sessions.clone(),
                bus: sh.bus.clone(),
                config: Arc::new(move || config.upgrade().map(|n| n.config()).unwrap_or_default()),
                peers: Arc::new(move |tuic| {
                    let n = peers.upgrade()?;
                    let g = n.mail.lock();
                    let p = g.peers.get(tuic)?;
                    Some(crate::progress::PeerFacts {
                        name: p.name.clone(),
                        path: p.path.clone(),
                    })
                }),
            },
        ));
        let counts = node.clone();
        let ops = crate::ops::Ops::new(crate::ops::OpsEnv {
            sessions: sh.sessions.clone(),
            progress: progress.clone(),
            upstreams: upstreams.clone(),
            config_dir: sh.paths.config_dir.clone(),
            started,
            counts: Arc::new(move || {
                let Some(n) = counts.upgrade() else {
                    return crate::ops::Counts::default();
                };
                let (mail_peers, mail_unread) = {
                    let g = n.mail.lock();
                    let unread = g.peers.keys().map(|p| g.inboxes.unread(p)).sum();
                    (g.peers.len(), unread)
                };
                crate::ops::Counts {
                    mail_peers,
                    mail_unread,
                    uplink: n.peer.uplink_status(),
                    mcp_sessions: n.mcp.sessions.len(),
                }
            }),
        });
        let spawner = node.clone();
        let scheduler = crate::automations::scheduler::Scheduler::new(
            crate::automations::scheduler::SchedulerEnv {
                automations: automations.clone(),
                bus: sh.bus.clone(),
                tasks: sh.tasks.clone(),
                shutdown: sh.shutdown.clone(),
                spawn_agent: Arc::new(move |req| {
                    let n = spawner.upgrade().ok_or("the node is shutting down")?;
                    crate::mail::spawn::spawn(&n, req)
                }),
            },
        );
        let settings = node.clone();
        let tailscale = Arc::new(crate::tailscale::Tailscale::new(
            crate::tailscale::TailscaleEnv {
                bus: sh.bus.clone(),
                tasks: sh.tasks.clone(),
                shutdown: sh.shutdown.clone(),
                settings: Arc::new(move || {
                    let c = settings.upgrade().map(|n| n.config()).unwrap_or_default();
                    crate::tailscale::Settings::of(&c)
                }),
                host_trust: host_trust.clone(),
            },
        ));
        let registry = node.clone();
        let ext = crate::ext::Extensions::new(crate::ext::ExtEnv {
            sessions: sh.sessions.clone(),
            install_tools: Arc::new(move |source| {
                if let Some(n) = registry.upgrade() {
                    n.mcp.registry.add_source(source);
                }
            }),
        });
        Self {
            git,
            progress,
            ops,
            automations,
            scheduler,
            tailscale,
            ext,
        }
    }
}

/// The GitHub service's environment: the `github` config section read afresh, the vault
/// (its token) and the registered repositories.
fn github_env(
    node: &Weak<Node>,
    vault: &Arc<Vault>,
    repos: &Arc<Repos>,
) -> crate::github::GithubEnv {
    let settings = node.clone();
    crate::github::GithubEnv {
        settings: Arc::new(move || {
            settings
                .upgrade()
                .map(|n| crate::github::Settings::from_keys(&n.config().extra))
                .unwrap_or_default()
        }),
        vault: vault.clone(),
        repos: repos.clone(),
    }
}

/// The planning layer's environment: its two services, the bus, tasks and shutdown, the
/// session registry and the services beside it, each reached through a weak reference to the
/// node being built.
fn planning_env(
    node: &Weak<Node>,
    stories: &Arc<crate::stories::Stories>,
    workflows: &Arc<crate::stories::workflow::Workflows>,
    bus: &Arc<Bus>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> crate::stories::StoriesEnv {
    let sessions = node.clone();
    crate::stories::StoriesEnv {
        stories: stories.clone(),
        workflows: workflows.clone(),
        sessions: Arc::new(move || sessions.upgrade().map(|n| n.sessions.clone())),
        bus: bus.clone(),
        tasks: tasks.clone(),
        shutdown: shutdown.clone(),
        host: Arc::new(PlanningHost(node.clone())),
    }
}

/// The upstream service's environment: the vault, tasks and shutdown, and the tuning read
/// from the current config.
fn upstream_env(
    node: &Weak<Node>,
    vault: &Arc<Vault>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> crate::upstream::UpstreamEnv {
    let tuning = node.clone();
    crate::upstream::UpstreamEnv {
        vault: vault.clone(),
        tasks: tasks.clone(),
        shutdown: shutdown.clone(),
        tuning: Arc::new(move || {
            tuning
                .upgrade()
                .map(|n| n.config().tuning.clone())
                .unwrap_or_default()
        }),
    }
}

/// What the planning layer asks of mail, progress and git. Holds the node weakly: the node
/// owns the planning environment that owns this.
struct PlanningHost(Weak<Node>);

impl PlanningHost {
    fn node(&self) -> Result<Arc<Node>, String> {
        self.0
            .upgrade()
            .ok_or_else(|| "the node is shutting down".to_owned())
    }
}

impl crate::stories::env::Host for PlanningHost {
    fn identity_path(&self, tuic: &str) -> Option<String> {
        let n = self.0.upgrade()?;
        n.mail.lock().peers.get(tuic).and_then(|p| p.path.clone())
    }

    fn is_managed(&self, tuic: &str) -> bool {
        self.0
            .upgrade()
            .is_some_and(|n| n.mail.lock().peers.get(tuic).is_some_and(|p| p.managed))
    }

    fn project_of(&self, dir: &str) -> Option<String> {
        self.0.upgrade()?.progress.project_of(dir)
    }

    fn linked_worktrees(&self, main: &std::path::Path) -> Result<Vec<std::path::PathBuf>, String> {
        let n = self.node()?;
        let entries = crate::git::worktree::entries(&n.git, main).map_err(|e| e.to_string())?;
        Ok(entries
            .into_iter()
            .filter(|e| !e.main)
            .map(|e| e.path)
            .collect())
    }

    fn spawn_agent(
        &self,
        w: crate::stories::env::WorkerSpawn,
    ) -> Result<serde_json::Value, String> {
        let owners = w.parent.iter().cloned().collect();
        crate::mail::spawn::spawn(
            &self.node()?,
            crate::mail::spawn::SpawnRequest {
                command: w.command,
                args: w.args,
                cwd: Some(w.cwd),
                prompt: Some(w.prompt),
                env: w.env,
                name: Some(w.name),
                parent: w.parent,
                owners,
                ..Default::default()
            },
        )
    }

    fn journal(&self, entry: crate::progress::NewEntry) -> Result<(), String> {
        self.node()?
            .progress
            .append(entry)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn post_system(
        &self,
        recipient: &str,
        from_name: &str,
        body: String,
        kind: &str,
    ) -> Result<(), String> {
        let n = self.node()?;
        {
            let mut g = n.mail.lock();
            crate::mail::Mail::ensure(&n, &mut g, recipient);
        }
        crate::mail::Mail::post(
            &n,
            recipient,
            "tuic",
            Some(from_name.to_owned()),
            body,
            Some(kind.to_owned()),
            None,
        )
        .map(drop)
        .map_err(|e| e.to_string())
    }
}

fn tailscale_name(c: &Config) -> Option<String> {
    c.tailscale
        .enabled
        .then_some(c.tailscale.hostname.as_deref())
        .flatten()
        .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
        .filter(|h| !h.is_empty())
}

// ---- link wiring (the carrier room's handles; `crate::link` never sees the node) ----

/// The node as the QUIC listener's host: the token check against this node's auth state and
/// token, and the node's end of the link (`mail::endpoint`).
struct LinkHost(Arc<Node>);

impl crate::link::quic::LinkHost for LinkHost {
    fn admit(&self, ip: std::net::IpAddr, now: std::time::Instant) -> bool {
        let tuning = self.0.config().tuning.clone();
        // A token has no user name: the peer link's failures are keyed by address alone.
        !matches!(
            self.0.auth.admit(
                ip,
                "",
                now,
                tuning.login_failures_per_minute,
                tuning.login_failures_global_per_minute,
            ),
            crate::auth::Admission::Throttled { .. }
        )
    }

    fn token_matches(&self, token: &str) -> bool {
        crate::auth::secret_eq(token, &self.0.node_token())
    }

    fn record_failure(&self, ip: std::net::IpAddr, now: std::time::Instant) {
        self.0.auth.record_failure(ip, "", now);
    }

    fn serve_link(&self, io: crate::link::quic::QuicIo) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(crate::mail::endpoint::serve_on(self.0.clone(), io))
    }
}

impl Node {
    /// What an agent's send to an address uses (`crate::mail::send`).
    pub(crate) fn send_env(&self) -> crate::mail::SendEnv<'_> {
        crate::mail::SendEnv {
            peer: &self.peer,
            router: self.ext.mail_router(),
            wait: std::time::Duration::from_millis(self.config().tuning.peer_send_wait_ms),
        }
    }

    /// The QUIC listener's handles (`crate::link::quic::listen`).
    pub(crate) fn link_env(self: &Arc<Self>) -> crate::link::quic::LinkEnv {
        crate::link::quic::LinkEnv {
            tasks: self.tasks.clone(),
            shutdown: self.shutdown.clone(),
            garbage_log: std::time::Duration::from_millis(self.config().tuning.quic_garbage_log_ms),
            host: Arc::new(LinkHost(self.clone())),
            streams: Arc::new(crate::routes::stream::QuicStreams(self.clone())),
        }
    }
}
