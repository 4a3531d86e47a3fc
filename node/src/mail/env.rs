//! What agent mail uses of its node ([`MailEnv`]), handed in by the composition root
//! (`state/envs.rs`): mail never holds the node, only these handles and readers.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Clients, PeerState};
use crate::config::Config;
use crate::events::Bus;
use crate::ext::Extensions;
use crate::upstream::hubtools::HubToolsEnv;

/// Reads the config in force at the moment a value is needed (the agents, the tuning).
pub(crate) type ConfigReader = Arc<dyn Fn() -> Arc<Config> + Send + Sync>;

/// Agent mail's environment: the handles of what it reaches besides its own state.
#[derive(Clone)]
pub(crate) struct MailEnv {
    /// The client layer above mail: pushes to an identity's streams, spawned children's task
    /// handles ([`Clients`], answered by the MCP endpoint).
    pub(crate) clients: Arc<dyn Clients>,
    /// The PTY sessions: wake targets, spawned children, identities that own a live PTY.
    pub(crate) sessions: Arc<crate::session::Registry>,
    /// The cross-host mail state (uplink outbox, dedupe rings, the hub's directory and link).
    pub(crate) peer: Arc<PeerState>,
    /// The event bus: a PTY's exit re-queues the mail it owned.
    pub(crate) bus: Arc<Bus>,
    /// Owner of mail's background tasks (wait timer, wake notices, spawned children's watch).
    pub(crate) tasks: TaskTracker,
    /// Fired once at shutdown; every mail task ends on it.
    pub(crate) shutdown: CancellationToken,
    /// The config in force: the agents a spawn composes from, the mail and peer tuning.
    pub(crate) config: ConfigReader,
    /// The binary's name, this node's identity on a link when the host name is unknown.
    pub(crate) name: &'static str,
    /// A token cancelled at shutdown or when the node token in force is rotated: a peer link
    /// authenticated with it ends on it.
    pub(crate) token_epoch: Arc<dyn Fn() -> CancellationToken + Send + Sync>,
    /// The installed extension hooks: a process's own [`crate::ext::MailRouter`], if any.
    pub(crate) ext: Arc<Extensions>,
    /// Messages delivered into this node's inboxes (shared with `ops`, which reports it).
    pub(crate) posted: Arc<AtomicU64>,
    /// What the hub's upstream tools, driven by the link task, use of the node.
    pub(crate) hub_tools: HubToolsEnv,
}

impl std::fmt::Debug for MailEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MailEnv")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}
