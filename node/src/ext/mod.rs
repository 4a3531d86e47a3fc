//! The node's extension API: the few hooks through which a process built on a node (the hub,
//! `tuic-hub`) adds what the node does not have — other hosts.
//!
//! A node by itself knows one host, its own. Every hook here is optional and installed at most
//! once, before serving ([`Extensions`], `Node::ext`); with none installed the node answers as
//! it always does. [`Extensions`] holds no node: its [`ExtEnv`] (the session registry, the tool
//! registry's installer) is built by the composition root. The node consults the hooks at
//! fixed points and never learns what is behind them:
//!
//! - [`SessionSource`]: more session rows. `GET /sessions` and MCP `session action=list` both
//!   list the node's own rows, then the source's [`RemoteRow`]s (one list, two serializers).
//! - [`HostRouter`]: calls addressed to another host. A `session` tool call whose `session_id`
//!   is an address (has a `/` and names no session here), a repository path of the form
//!   `<host>:/path`, the `remote` tool's connection rows, and MCP resource reads of remote
//!   sessions (`tuic://hosts/{connection}/sessions/{alias}/…`).
//! - [`MailRouter`]: agent mail from this process's own agents to `<connection>/<peer>`
//!   addresses, and the peers behind those connections (instead of this node's uplink).
//! - the tool registry: [`Extensions::add_tools`] installs a [`ToolSource`], listed after the
//!   native tools and this node's upstreams, filtered at listing and dispatch like them.
//!
//! - [`ShareRelay`] (`server/share_relay.rs`, beside the request boundary that calls it: it
//!   carries axum requests): share links to other hosts' sessions. The node's share routes
//!   consult it for `<connection>/…` addresses and link ids, and the request boundary hands it
//!   a request whose share token is another host's, whole (the one request a hook serves, as
//!   it is decided before authentication: the owner authenticates it).
//!
//! Deliberately absent: routes. An HTTP extension layers its own routes and middleware onto
//! the node's router through `routes::RouterHook`, inside the request boundary, so guards and
//! authentication apply to it unchanged.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::{Map, Value};
use tuic_proto::peer::PeerEntry;

pub use crate::git::GitError;
pub use crate::mail::{PendingCustody, Queued, Refusal};
pub use crate::mcp::registry::{CallCtx, ToolError, ToolSource};
pub use crate::routes::RouterHook;
/// The process's descriptor budget, which the hub's dials consult too.
pub use crate::server::fds;
pub use crate::server::share_relay::{NewShare, ShareRelay};

/// A session row owned by another host, as its owner lists it, with where it lives.
///
/// Serialized flat: the owner's fields, then `is_remote: true`, `connection_id` and
/// `address` (`<connection_id>/<session_id>`), which replace any the owner sent.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteRow {
    /// The connection the owner is reached through (the first part of the address).
    pub connection_id: String,
    /// The owner's row (`GET /sessions` on the owner), kept whole: the owner may be a newer
    /// or older node, and a field this node does not know still reaches the caller.
    pub row: Map<String, Value>,
}

/// Fields a [`RemoteRow`] sets itself.
const REMOTE_KEYS: [&str; 3] = ["is_remote", "connection_id", "address"];

impl RemoteRow {
    /// The owner's session id (empty when the owner sent none).
    pub fn session_id(&self) -> &str {
        self.row
            .get("session_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// `<connection_id>/<session_id>`: the name every routed call takes.
    pub fn address(&self) -> String {
        format!("{}/{}", self.connection_id, self.session_id())
    }

    /// The row as one JSON object (the serialized form).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl Serialize for RemoteRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in &self.row {
            if !REMOTE_KEYS.contains(&k.as_str()) {
                m.serialize_entry(k, v)?;
            }
        }
        m.serialize_entry("is_remote", &true)?;
        m.serialize_entry("connection_id", &self.connection_id)?;
        m.serialize_entry("address", &self.address())?;
        m.end()
    }
}

/// Session rows of other hosts, listed after the node's own.
pub trait SessionSource: Send + Sync + std::fmt::Debug {
    /// Every row to list now. Called on each list: keep it a read of ready state.
    fn rows(&self) -> Vec<RemoteRow>;

    /// The revision of the rows (bumped by every change the source keeps incrementally), so
    /// an unchanged list is known without building it.
    fn revision(&self) -> u64 {
        0
    }

    /// The rows added, changed and removed after `since` (rows serialized as
    /// [`RemoteRow`]s, removals by address); `None` when `since` is out of the kept window.
    fn changes(&self, since: u64) -> Option<crate::session::feed::Delta> {
        (since == 0).then(crate::session::feed::Delta::default)
    }
}

/// A `session` tool call whose `session_id` is an address that names no session here.
#[derive(Debug, Clone, Copy)]
pub struct SessionCall<'a> {
    /// The action (`output`, `input`, ...), already checked against the tool's list.
    pub action: &'a str,
    /// The `session_id` argument as the caller gave it (contains a `/`).
    pub address: &'a str,
    /// Every argument of the call, `action` and `session_id` included.
    pub args: &'a Map<String, Value>,
}

/// How a [`HostRouter`] served a [`SessionCall`].
#[derive(Debug)]
pub enum Routed {
    /// The address names a session of this host: serve the call here with these arguments
    /// (`session_id` rewritten to the local id).
    Local(Map<String, Value>),
    /// The owner answered; this is the tool's answer.
    Answered(Value),
}

/// A repository action addressed to another host (`<host>:/path`).
#[derive(Debug, Clone, Copy)]
pub struct RepoCall<'a> {
    /// The host part of the path (before the `:`).
    pub host: &'a str,
    /// The owner's absolute path (after the `:`).
    pub path: &'a str,
    /// The `repo` tool action (`worktree_create`, `info`, ...).
    pub action: &'a str,
    /// The action's arguments (as the MCP tool takes them; `path` already split off).
    pub args: &'a Map<String, Value>,
}

/// What a [`HostRouter`] call returns: a future that waits for the owner (network IO), so no
/// caller parks a thread on another host.
pub type RouteFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Calls addressed to other hosts.
pub trait HostRouter: Send + Sync + std::fmt::Debug {
    /// Serves a `session` call addressed to another host (or `local/<id>`).
    fn session<'a>(&'a self, call: SessionCall<'a>) -> RouteFuture<'a, Result<Routed, ToolError>>;
    /// Serves a repository action on the owner of `call.host`. A refusal keeps the owner's
    /// code and names the connection.
    fn repo<'a>(&'a self, call: RepoCall<'a>) -> RouteFuture<'a, Result<Value, GitError>>;
    /// The connections to other hosts, as the `remote` tool lists them (no token, no
    /// credentials).
    fn connections(&self) -> Vec<Value>;
    /// Sends one sessionless MCP JSON-RPC request (a `resources/read` of the owner's own
    /// `tuic://` URI) to the owner behind `connection`; its JSON-RPC answer. MCP resources of
    /// remote sessions (`tuic://hosts/{connection}/…`) are read through it, so the owner's
    /// redaction and paging apply unchanged. Without an override: refused.
    fn mcp_request<'a>(
        &'a self,
        connection: &'a str,
        request: Value,
    ) -> RouteFuture<'a, Result<Value, ToolError>> {
        let _ = request;
        Box::pin(async move {
            Err(ToolError::new(
                "not_routed",
                format!("MCP requests to {connection} are not routed by this process"),
            ))
        })
    }
}

/// Agent mail to other hosts, for a process that holds connections itself (instead of an
/// uplink to a hub).
pub trait MailRouter: Send + Sync + std::fmt::Debug {
    /// Takes custody of mail from this process's own peer `from` to `to`
    /// (`<connection>/<peer>`).
    fn send(
        &self,
        from: &str,
        from_name: Option<String>,
        to: &str,
        message: String,
    ) -> Result<Queued, Refusal>;
    /// Peers reachable through the connections, each with its address.
    fn peers(&self) -> Vec<PeerEntry>;
}

/// Installs a tool source in the node's tool registry.
pub type ToolInstaller = Arc<dyn Fn(Arc<dyn ToolSource>) + Send + Sync>;

/// What the extension hooks use of the node: the session registry (to tell an address of
/// another host from a local session id) and the tool registry's installer.
#[derive(Clone)]
pub struct ExtEnv {
    /// The node's sessions.
    pub sessions: Arc<crate::session::Registry>,
    /// Adds a tool source to the node's tool registry.
    pub install_tools: ToolInstaller,
}

impl std::fmt::Debug for ExtEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtEnv").finish_non_exhaustive()
    }
}

/// The installed hooks of one node (none on a plain node).
#[derive(Debug)]
pub struct Extensions {
    sessions: OnceLock<Arc<dyn SessionSource>>,
    router: OnceLock<Arc<dyn HostRouter>>,
    mail: OnceLock<Arc<dyn MailRouter>>,
    share: OnceLock<Arc<dyn ShareRelay>>,
    env: ExtEnv,
}

impl Extensions {
    /// No hooks installed yet, over `env`.
    pub fn new(env: ExtEnv) -> Self {
        Self {
            sessions: OnceLock::new(),
            router: OnceLock::new(),
            mail: OnceLock::new(),
            share: OnceLock::new(),
            env,
        }
    }

    /// Installs the source of other hosts' session rows (once, before serving).
    pub fn set_session_source(&self, s: Arc<dyn SessionSource>) {
        let _ = self.sessions.set(s);
    }

    /// Installs the router of calls addressed to other hosts (once, before serving).
    pub fn set_router(&self, r: Arc<dyn HostRouter>) {
        let _ = self.router.set(r);
    }

    /// Installs the router of mail to other hosts (once, before serving).
    pub fn set_mail_router(&self, m: Arc<dyn MailRouter>) {
        let _ = self.mail.set(m);
    }

    /// Installs the relay of share links to other hosts' sessions (once, before serving).
    pub fn set_share_relay(&self, r: Arc<dyn ShareRelay>) {
        let _ = self.share.set(r);
    }

    /// The relay of share links to other hosts, when installed.
    pub fn share_relay(&self) -> Option<&Arc<dyn ShareRelay>> {
        self.share.get()
    }

    /// `<connection>/<rest>` naming a host the share relay reaches (an address, a link id, a
    /// share token of that host): the relay, the connection and the rest.
    pub fn share_target<'a>(&self, s: &'a str) -> Option<(&Arc<dyn ShareRelay>, &'a str, &'a str)> {
        let relay = self.share_relay()?;
        let (connection, rest) = s.split_once('/')?;
        (!rest.is_empty() && relay.knows(connection)).then_some((relay, connection, rest))
    }

    /// Installs a tool source: its tools are listed after the native tools and the ones
    /// installed before it, under the same filters at listing and dispatch.
    pub fn add_tools(&self, source: Arc<dyn ToolSource>) {
        (self.env.install_tools)(source);
    }

    /// Other hosts' session rows (empty without a source).
    pub fn remote_rows(&self) -> Vec<RemoteRow> {
        self.sessions.get().map(|s| s.rows()).unwrap_or_default()
    }

    /// The other hosts' rows' revision (0 without a source).
    pub fn remote_revision(&self) -> u64 {
        self.sessions.get().map_or(0, |s| s.revision())
    }

    /// The other hosts' rows changed after `since` (see [`SessionSource::changes`]).
    pub fn remote_changes(&self, since: u64) -> Option<crate::session::feed::Delta> {
        match self.sessions.get() {
            Some(s) => s.changes(since),
            None => (since == 0).then(crate::session::feed::Delta::default),
        }
    }

    /// The router of calls addressed to other hosts, when installed.
    pub fn router(&self) -> Option<&Arc<dyn HostRouter>> {
        self.router.get()
    }

    /// The router of mail to other hosts, when installed.
    pub fn mail_router(&self) -> Option<&Arc<dyn MailRouter>> {
        self.mail.get()
    }
}

impl Extensions {
    /// The address a `session` call names on another host, when a router must serve it: a router
    /// is installed and `session_id` has a `/` and names no session here. Read-only, no IO.
    pub fn session_address<'a>(&self, args: &'a Map<String, Value>) -> Option<&'a str> {
        self.router()?;
        let address = args.get("session_id").and_then(Value::as_str)?;
        (address.contains('/') && self.env.sessions.resolve(address).is_none()).then_some(address)
    }

    /// Routes a `session` tool call: `None` when it is served here as given (no router, no
    /// address, or a session of this node whose id contains a `/`).
    pub async fn route_session(
        &self,
        action: &str,
        args: &Map<String, Value>,
    ) -> Result<Option<Routed>, ToolError> {
        let (Some(address), Some(router)) = (self.session_address(args), self.router()) else {
            return Ok(None);
        };
        router
            .session(SessionCall {
                action,
                address,
                args,
            })
            .await
            .map(Some)
    }

    /// A repository path addressed to another host: `(host, path)` when a router is installed
    /// and `path` is `<host>:/absolute` (a plain node refuses such a path as not absolute).
    pub fn repo_target<'a>(&self, path: &'a str) -> Option<(&'a str, &'a str)> {
        self.router()?;
        let (host, rest) = path.split_once(':')?;
        (!host.is_empty() && !host.contains('/') && rest.starts_with('/')).then_some((host, rest))
    }

    /// Serves a repository action on another host through the installed router.
    pub async fn route_repo(&self, call: RepoCall<'_>) -> Result<Value, GitError> {
        match self.router() {
            Some(r) => r.repo(call).await,
            None => Err(GitError::InvalidPath(
                "repositories of other hosts need a router extension".into(),
            )),
        }
    }
}

// ==== hub surface (l41-link) ====================================================================
// What `tuic-hub` reaches of the node besides the hooks above; the hub imports only `ext` and
// `link` (docs/ARCHITECTURE.md). Additive only: re-exports and thin functions, grouped here.

/// The node's JSON error answer (`{"error", "code"}` with a status).
pub use crate::error::ApiError;
/// Which listener a request came in on (IPC or TCP), set by the request boundary.
pub use crate::guard::Transport;
/// The node's deadline clock (monotonic ms) and wall clock (ms since the epoch).
pub use crate::logs::mono_ms;
/// The content type of `GET /metrics` (Prometheus text exposition).
pub use crate::ops::metrics::CONTENT_TYPE as METRICS_CONTENT_TYPE;
/// The header a forwarding process sets to lower the actor a story call runs as.
pub use crate::routes::stories::FORWARDED_ACTOR_HEADER;
/// The session list with revisions (the hub keeps its mirrored rows in one).
pub use crate::session::feed::{Delta, RowFeed};
pub use crate::session::now_ms;
/// Where an upstream tool call's progress notifications go.
pub use crate::upstream::client::ProgressSink;

/// What a process built on a node (the hub) uses of it, built by the composition root
/// (`Node::api`): the hooks to install, the bus, tasks and shutdown, the config, the vault,
/// the upstream service, and this node's mail for [`mail`]'s functions. Not the node itself:
/// no route, store table or service beyond these is reachable through it.
#[derive(Clone)]
pub struct NodeApi {
    /// Where an extension installs its hooks (once, before serving).
    pub ext: Arc<Extensions>,
    /// The event bus behind `GET /events`: other hosts' events are published on it.
    pub bus: Arc<crate::events::Bus>,
    /// Owner of every background task, so shutdown waits for an extension's too.
    pub tasks: tokio_util::task::TaskTracker,
    /// Fired once at shutdown.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// The node's secrets (an extension's connection tokens).
    pub vault: Arc<crate::vault::Vault>,
    /// `config.json`, for an extension's own sections.
    pub config_file: crate::config::ConfigFile,
    /// The upstream MCP servers this node proxies (a relay offers them over its links).
    pub upstreams: Arc<crate::upstream::Upstreams>,
    /// The notification service (a hub raises its nodes' notifications on it).
    pub notify: Arc<crate::notify::Notify>,
    /// The audit log (a hub records its connections' acts and shows its nodes' beside it).
    pub audit: Arc<crate::audit::Audit>,
    /// This node's mail: inboxes, the uplink state and its group committer.
    pub(crate) mail: Arc<crate::mail::Mail>,
    /// The store a relay's outboxes are kept in.
    pub(crate) store: Arc<crate::store::Store>,
    /// Reads the config in force.
    pub(crate) config: Arc<dyn Fn() -> Arc<crate::config::Config> + Send + Sync>,
    /// Replaces the config in force (`Node::set_config`).
    pub(crate) set_config: Arc<dyn Fn(crate::config::Config) + Send + Sync>,
}

impl std::fmt::Debug for NodeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeApi").finish_non_exhaustive()
    }
}

impl NodeApi {
    /// The config in force.
    pub fn config(&self) -> Arc<crate::config::Config> {
        (self.config)()
    }

    /// Replaces the config in force (after an extension saved `config.json`).
    pub fn set_config(&self, c: crate::config::Config) {
        (self.set_config)(c)
    }
}

/// The audit log's types, for a process that records its own acts (a hub's connections) or
/// shows other hosts' logs beside this node's (`NodeApi::audit`).
pub mod audit {
    pub use crate::audit::{Actor, Entry, Event, FORWARDED_USER_HEADER, Page, Query};
}

/// Cross-host mail pieces a relay runs on its own side of its links (the hub's relay keeps
/// per-connection outboxes in the same store, through the same group committer, and delivers
/// `local/<peer>` mail into this node's inboxes).
pub mod mail {
    use super::NodeApi;
    use crate::link::commit::Committer;
    use tuic_proto::peer::{Outbox, OutboxLimits, PeerEntry, Response, WireMessage};

    pub use crate::mail::{LateRefusal, OutcomeTx, notify_waiter, outbox_ops, persist_outbox};
    pub use crate::store::{PeerOp, UPLINK_KEY};

    /// Delivers forwarded mail into one of `node`'s inboxes (`crate::mail::deliver_local`).
    pub fn deliver_local(node: &NodeApi, connection: &str, m: &WireMessage) -> Response {
        crate::mail::deliver_local(&node.mail, connection, m)
    }

    /// `node`'s registered peers as link entries.
    pub fn local_entries(node: &NodeApi, path: Option<&str>) -> Vec<PeerEntry> {
        crate::mail::local_entries(&node.mail, path)
    }

    /// `node`'s identity on a link: the machine's host name.
    pub fn local_id(node: &NodeApi) -> String {
        crate::mail::local_id(&node.mail)
    }

    /// Posts late-refusal notices into the senders' inboxes, on a thread of its own.
    pub fn post_refusals_later(node: &NodeApi, late: Vec<LateRefusal>) {
        crate::mail::post_refusals_later(&node.mail, late)
    }

    /// The outbox bounds of `node`'s tuning.
    pub fn limits(node: &NodeApi) -> OutboxLimits {
        crate::mail::limits(&node.config().tuning)
    }

    /// Every outbox stored in `node`'s store, by key (`UPLINK_KEY` or a connection id).
    pub fn load_outboxes(
        node: &NodeApi,
    ) -> anyhow::Result<std::collections::BTreeMap<String, Outbox>> {
        crate::mail::load_outboxes(&node.store, limits(node))
    }

    /// The group committer of `node`'s link state (a relay adds its outboxes as a source).
    pub fn committer(node: &NodeApi) -> &Committer {
        node.mail.env.peer.committer()
    }
}

/// Notifications a relay sends for the hosts behind it: a hub raises its nodes' notifications
/// (the `notification` events of their `/events`) and its connections' offline/back on the
/// node's own service, whose channels are the hub's.
pub mod notify {
    use super::NodeApi;

    pub use crate::notify::Notify;

    /// `node`'s notification service.
    pub fn service(node: &NodeApi) -> &Notify {
        &node.notify
    }
}

/// The process around a node: its command line (shared by `tuic-node` and `tuic-hub`), its
/// configuration file and its secret store. A binary built on a node enters through here.
pub mod host {
    pub use crate::cli::{
        Location, NodeCommand, SERVE_ONLY, ServeArgs, ask_running, exit, paths, run_command,
    };
    pub use crate::config::{ConfigFile, SaveError, SecretStore};
    pub use crate::vault::Vault;
}
// ==== end hub surface ===========================================================================
