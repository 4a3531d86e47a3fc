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

mod envs;
use envs::*;

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
    /// The git service's bounded runner and open orphan dialogs (`crate::git`; shared with the
    /// planning layer's environment).
    pub git: Arc<crate::git::Git>,
    /// Concurrent uploads allowed; a permit is held through extraction.
    pub upload_permits: Arc<tokio::sync::Semaphore>,
    /// PTY sessions and their exit tombstones.
    pub sessions: Arc<crate::session::Registry>,
    /// The MCP endpoint's protocol sessions, tool registry and task handles.
    pub mcp: crate::mcp::McpState,
    /// Agent mail: inboxes, peers, waits and PTY wake notices (over its `MailEnv`).
    pub mail: Arc<crate::mail::Mail>,
    /// Cross-host mail: the outbox towards a hub, dedupe rings, the hub's peer directory
    /// (shared with mail's environment).
    pub peer: Arc<crate::mail::PeerState>,
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
    pub ext: Arc<crate::ext::Extensions>,
    /// The audit log (`crate::audit`).
    pub audit: Arc<crate::audit::Audit>,
    /// Scoped share links (`crate::share`).
    pub shares: Arc<crate::share::Shares>,
    /// The secret tool's service (`crate::secrets`).
    pub secrets: Arc<crate::secrets::Secrets>,
    /// Notifications to the person: Web Push, ntfy, webhook (`crate::notify`).
    pub notify: Arc<crate::notify::Notify>,
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
        let peer = Arc::new(
            crate::mail::PeerState::load(&store, &config.tuning)
                .context("loading cross-host mail state")?,
        );
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
        let redactions = Arc::new(crate::session::valuemask::Redactions::default());
        let secrets = Arc::new(
            crate::secrets::Secrets::open(crate::secrets::SecretsEnv {
                vault: vault.clone(),
                store: store.clone(),
                bus: bus.clone(),
                redactions: redactions.clone(),
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
                session_env(weak, &paths, &bus, &tasks, &shutdown, &redactions),
            ));
            let upstreams = Arc::new(crate::upstream::Upstreams::new(
                paths.upstreams_file(),
                upstream_env(weak, &vault, &tasks, &shutdown),
            ));
            let github = Arc::new(crate::github::Github::new(github_env(weak, &vault, &repos)));
            let shared = Shared {
                paths: &paths,
                bus: &bus,
                tasks: &tasks,
                shutdown: &shutdown,
                repos: &repos,
                sessions: &sessions,
                github: &github,
            };
            let domain = Domain::new(
                weak,
                shared,
                journal,
                automations,
                &upstreams,
                &host_trust,
                started,
            );
            let mail = Arc::new(crate::mail::Mail::new(mail_env(
                weak, name, shared, &peer, &domain,
            )));
            let planning = planning_env(&stories, &workflows, shared, &mail, &domain);
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
                notify: Arc::new(crate::notify::Notify::new(notify_env(
                    weak,
                    &paths_for_notify,
                    &bus,
                    &tasks,
                    &shutdown,
                ))),
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
                mail,
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
        // Restored chats are peers in agent mail again (mail's peers live in memory).
        node.acp.register_chat_peers();
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
        Box::pin(crate::mail::endpoint::serve_on(self.0.mail.clone(), io))
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

    /// What a process built on this node (the hub) reaches of it: [`crate::ext::NodeApi`].
    /// The config closures hold the node weakly: the extension it is handed to is owned by
    /// the node's hooks.
    pub fn api(self: &Arc<Self>) -> crate::ext::NodeApi {
        let (config, set_config) = (Arc::downgrade(self), Arc::downgrade(self));
        crate::ext::NodeApi {
            ext: self.ext.clone(),
            bus: self.bus.clone(),
            tasks: self.tasks.clone(),
            shutdown: self.shutdown.clone(),
            vault: self.vault.clone(),
            config_file: self.config_file.clone(),
            upstreams: self.upstreams.clone(),
            notify: self.notify.clone(),
            audit: self.audit.clone(),
            mail: self.mail.clone(),
            store: self.store.clone(),
            config: Arc::new(move || config.upgrade().map(|n| n.config()).unwrap_or_default()),
            set_config: Arc::new(move |c| {
                if let Some(n) = set_config.upgrade() {
                    n.set_config(c);
                }
            }),
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
