//! The composition root's wiring: each service's environment cut from what the node has, and
//! the adapters through which a lower layer reaches a higher one (each holds the node weakly).

use super::*;
/// The session layer's environment: the node's bus, tasks and shutdown, the child environment,
/// the tuning read from the current config, and the progress journal's observed `intent:`.
pub(super) fn session_env(
    node: &Weak<Node>,
    paths: &Paths,
    bus: &Arc<Bus>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
    redactions: &Arc<crate::session::valuemask::Redactions>,
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
        redactions: redactions.clone(),
    }
}

/// The audit log's environment: the store and the bounds of the current tuning.
pub(super) fn audit_env(node: &Weak<Node>, store: &Arc<Store>) -> crate::audit::AuditEnv {
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
pub(super) fn notify_env(
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
        hub_attached: {
            let n = node.clone();
            Arc::new(move || n.upgrade().is_some_and(|n| n.peer.hub_attached()))
        },
        workflows: Arc::new(NotifyRuns(node.clone())),
        acp: Arc::new(NotifyAcp(node.clone())),
    }
}

/// Workflow runs as notifications read them. Holds the node weakly.
pub(super) struct NotifyRuns(pub(super) Weak<Node>);

impl crate::notify::sources::WorkflowLookup for NotifyRuns {
    fn run(&self, run_id: &str) -> Option<crate::notify::sources::RunView> {
        let n = self.0.upgrade()?;
        let r = n.workflows.run(run_id)?;
        let status = serde_json::to_value(r.status)
            .ok()?
            .as_str()
            .unwrap_or("")
            .to_owned();
        Some(crate::notify::sources::RunView {
            project: r.project.clone(),
            status,
            step: r.step_ids.get(r.step_index).cloned(),
            pending: r
                .pending_input
                .as_ref()
                .map(|p| (p.activation_id.clone(), p.question.clone())),
        })
    }
}

/// ACP permission requests as notifications read them. Holds the node weakly.
pub(super) struct NotifyAcp(pub(super) Weak<Node>);

impl crate::notify::sources::AcpLookup for NotifyAcp {
    fn permission(
        &self,
        connection_id: &str,
        request_id: &str,
    ) -> Option<crate::notify::sources::PermissionView> {
        let n = self.0.upgrade()?;
        let c = n.acp.get(connection_id).ok()?;
        let i = c
            .interactions()
            .into_iter()
            .find(|i| i.request_id == request_id && i.state == "pending")?;
        let row = c.row();
        let (repo, branch) = crate::notify::repo_and_branch(std::path::Path::new(&row.cwd));
        let title = i
            .tool_call
            .get("title")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| "a tool call".to_owned());
        Some(crate::notify::sources::PermissionView {
            context: crate::notify::core::Context {
                host: n.notify.env().host.clone(),
                name: Some(row.name.clone()),
                repo,
                branch,
                agent: Some(row.agent.clone()),
                ..Default::default()
            },
            text: format!("{} asks to run {title}", row.agent),
            options: i
                .options
                .iter()
                .map(|o| (o.option_id.clone(), o.name.clone()))
                .collect(),
        })
    }
}

/// Session context for notifications: alias, name, agent, and the repository and branch of
/// the session's directory. Holds the node weakly.
pub(super) struct NotifySessions(pub(super) Weak<Node>);

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
pub(super) struct NotifySecrets(pub(super) Weak<Node>);

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
pub(super) fn acp_env(
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
    let peers = node.clone();
    let http = node.clone();
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
        peers: Arc::new(ChatMail(peers)),
        http: Arc::new(move || {
            let node = http.clone();
            Box::pin(async move {
                let n = node.upgrade()?;
                let addr = n.tcp.lock().await.addr()?;
                // Reached as a loopback caller, or not offered: only then does the node honour
                // the identity header.
                let ip = match addr.ip() {
                    std::net::IpAddr::V4(v) if v.is_unspecified() => {
                        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
                    }
                    std::net::IpAddr::V6(v) if v.is_unspecified() => {
                        std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
                    }
                    ip if ip.is_loopback() => ip,
                    _ => return None,
                };
                Some(crate::acp::HttpMcp {
                    url: format!("http://{}/mcp", std::net::SocketAddr::new(ip, addr.port())),
                    cookie: format!("{}={}", crate::auth::COOKIE_NAME, n.node_token()),
                })
            })
        }),
    }
}

/// Agent mail as the ACP service's chats use it. Holds the node weakly: the node owns the
/// service that owns this.
struct ChatMail(Weak<Node>);

impl crate::acp::ChatPeers for ChatMail {
    fn register(&self, identity: &str, name: &str, cwd: &str) {
        if let Some(n) = self.0.upgrade() {
            crate::mail::register_terminal_less(&n.mail, identity, name, cwd);
        }
    }

    fn retire(&self, identity: &str) {
        if let Some(n) = self.0.upgrade() {
            crate::mail::retire_terminal_less(&n.mail, identity);
        }
    }
}

/// Agent mail as reviews use it. Holds the node weakly: the node owns the reviews.
pub(super) struct ReviewMail(pub(super) Weak<Node>);

impl crate::review::Mailer for ReviewMail {
    fn registered(&self, identity: &str) -> bool {
        self.0
            .upgrade()
            .is_some_and(|n| n.mail.lock().inboxes.is_registered(identity))
    }

    fn send(&self, identity: &str, text: String) -> Result<String, String> {
        let n = self.0.upgrade().ok_or("the node is gone")?;
        n.mail
            .post(
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
pub(super) struct McpClients(pub(super) Weak<Node>);

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

    fn inbox_updated(&self, identity: &str) -> bool {
        self.0
            .upgrade()
            .is_some_and(|n| crate::mcp::features::resources::inbox_updated(&n, identity))
    }

    fn holds_identity(&self, identity: &str) -> bool {
        self.0
            .upgrade()
            .is_some_and(|n| n.acp.holds_chat_identity(identity))
    }
}

/// The MCP reaper's liveness answer: mail's addressability rule
/// ([`crate::mail::peer_identity_is_addressable`]). Holds the node weakly: the node owns the
/// MCP state that owns this.
#[derive(Debug)]
pub(super) struct Addressable(pub(super) Weak<Node>);

impl crate::mcp::sessions::IdentityLiveness for Addressable {
    fn is_addressable(&self, tuic_session: &str) -> bool {
        self.0
            .upgrade()
            .is_some_and(|n| crate::mail::peer_identity_is_addressable(&n.mail, tuic_session))
    }
}

/// Agent mail's environment: the sessions, bus, tasks and shutdown, the uplink state, the
/// installed extension hooks and the ops counter it feeds; the MCP endpoint as its
/// [`crate::mail::Clients`] and the hub tools' hooks into MCP, the config, the binary's name
/// and the token epoch, each reached through a weak reference to the node being built.
pub(super) fn mail_env(
    node: &Weak<Node>,
    name: &'static str,
    sh: Shared<'_>,
    peer: &Arc<crate::mail::PeerState>,
    domain: &Domain,
) -> crate::mail::MailEnv {
    let (config, grace, epoch) = (node.clone(), node.clone(), node.clone());
    let (changed, progress) = (node.clone(), node.clone());
    crate::mail::MailEnv {
        clients: Arc::new(McpClients(node.clone())),
        sessions: sh.sessions.clone(),
        peer: peer.clone(),
        bus: sh.bus.clone(),
        tasks: sh.tasks.clone(),
        shutdown: sh.shutdown.clone(),
        config: Arc::new(move || config.upgrade().map(|n| n.config()).unwrap_or_default()),
        name,
        token_epoch: Arc::new(move || match epoch.upgrade() {
            Some(n) => n.token_epoch(),
            // The node is gone: a link stops at once.
            None => {
                let t = CancellationToken::new();
                t.cancel();
                t
            }
        }),
        ext: domain.ext.clone(),
        posted: domain.ops.mail_posted.clone(),
        hub_tools: crate::upstream::hubtools::HubToolsEnv {
            tasks: sh.tasks.clone(),
            shutdown: sh.shutdown.clone(),
            grace: Arc::new(move || {
                let ms = grace
                    .upgrade()
                    .map(|n| n.config().tuning.hub_tools_grace_ms)
                    .unwrap_or_else(|| crate::config::Tuning::default().hub_tools_grace_ms);
                Duration::from_millis(ms)
            }),
            list_changed: Arc::new(move || {
                if let Some(n) = changed.upgrade() {
                    n.mcp.notify_list_changed();
                }
            }),
            progress_out: Arc::new(move |sid, token, msg| {
                progress.upgrade().is_some_and(|n| {
                    crate::mcp::features::streams::progress_out(&n, Some(sid), token, msg)
                })
            }),
        },
    }
}

/// What every domain service's environment is cut from.
#[derive(Clone, Copy)]
pub(super) struct Shared<'a> {
    pub(super) paths: &'a Paths,
    pub(super) bus: &'a Arc<Bus>,
    pub(super) tasks: &'a TaskTracker,
    pub(super) shutdown: &'a CancellationToken,
    pub(super) repos: &'a Arc<Repos>,
    pub(super) sessions: &'a Arc<crate::session::Registry>,
    pub(super) github: &'a Arc<crate::github::Github>,
}

/// The domain services (`git`, `progress`, `ops`, `automations`, `tailscale`, `ext`), each
/// built over its environment. Hooks into the layers above them (mail, the uplink, MCP, the
/// config) go through a weak reference to the node being built.
pub(super) struct Domain {
    pub(super) git: Arc<crate::git::Git>,
    pub(super) progress: Arc<crate::progress::Progress>,
    pub(super) ops: crate::ops::Ops,
    pub(super) automations: Arc<crate::automations::Automations>,
    pub(super) scheduler: crate::automations::scheduler::Scheduler,
    pub(super) tailscale: Arc<crate::tailscale::Tailscale>,
    pub(super) ext: Arc<crate::ext::Extensions>,
}

impl Domain {
    pub(super) fn new(
        node: &Weak<Node>,
        sh: Shared<'_>,
        journal: crate::progress::Journal,
        automations: Arc<crate::automations::Automations>,
        upstreams: &Arc<crate::upstream::Upstreams>,
        host_trust: &Arc<RwLock<HostTrust>>,
        started: Instant,
    ) -> Self {
        let git = Arc::new(crate::git::Git::new(crate::git::GitEnv {
            repos: sh.repos.clone(),
            sessions: sh.sessions.clone(),
            bus: sh.bus.clone(),
            github: Some(sh.github.clone() as Arc<dyn crate::git::PrEvidence>),
        }));
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
                    crate::mail::spawn::spawn(&n.mail, req)
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
        let ext = Arc::new(crate::ext::Extensions::new(crate::ext::ExtEnv {
            sessions: sh.sessions.clone(),
            install_tools: Arc::new(move |source| {
                if let Some(n) = registry.upgrade() {
                    n.mcp.registry.add_source(source);
                }
            }),
        }));
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
pub(super) fn github_env(
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

/// The planning layer's environment: its two services, the session registry, the services
/// beside it that it asks (mail, progress, git), and the bus, tasks and shutdown.
pub(super) fn planning_env(
    stories: &Arc<crate::stories::Stories>,
    workflows: &Arc<crate::stories::workflow::Workflows>,
    sh: Shared<'_>,
    mail: &Arc<crate::mail::Mail>,
    domain: &Domain,
) -> crate::stories::StoriesEnv {
    crate::stories::StoriesEnv {
        stories: stories.clone(),
        workflows: workflows.clone(),
        sessions: sh.sessions.clone(),
        mail: mail.clone(),
        progress: domain.progress.clone(),
        git: domain.git.clone(),
        bus: sh.bus.clone(),
        tasks: sh.tasks.clone(),
        shutdown: sh.shutdown.clone(),
    }
}

/// The upstream service's environment: the vault, tasks and shutdown, and the tuning read
/// from the current config.
pub(super) fn upstream_env(
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
