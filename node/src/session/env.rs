//! What the session layer uses of the node it runs in, handed to it by the composition root
//! (`state.rs`): the bus it publishes lifecycle and `pty-parsed` events on, the task tracker
//! and shutdown token its background tasks live under, what every child's environment names,
//! the tuning it reads at the moment it needs it, and one hook for what it observes.
//!
//! It deliberately holds no node: the session layer imports nothing from the layers above it
//! (MCP, mail, peer links, the node's state); those reach sessions through the registry and
//! learn what sessions observe through this environment's hook.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Session;
use crate::events::Bus;

/// The session layer's tuning, read afresh each time it is needed (a config reload changes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// How long an exited session still answers output routes (`tuning.tombstone_secs`).
    pub tombstone: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            tombstone: Duration::from_secs(300),
        }
    }
}

/// Reads the current tuning.
pub type TuningSource = Arc<dyn Fn() -> Tuning + Send + Sync>;

/// Told of each `intent:` marker the monitor reads on an agent's clean log (the progress
/// journal's observed kind). Called on a blocking thread.
pub type IntentHook = Arc<dyn Fn(&Session, &str) + Send + Sync>;

/// The session layer's environment. Cloning shares everything.
#[derive(Clone)]
pub struct SessionEnv {
    /// Lifecycle events (`session-created`, `term-alias-assigned`, `session-renamed`,
    /// `pty-exit`, `session-closed`) and the monitor's `pty-parsed` events go here; screen
    /// streams forward the latter.
    pub bus: Arc<Bus>,
    /// Owner of the monitor and tombstone tasks, so the node's shutdown waits for them.
    pub tasks: TaskTracker,
    /// Fired once at shutdown: the monitor stops, tombstones expire, screen streams close.
    pub shutdown: CancellationToken,
    /// The IPC socket every child finds in `TUIC_SOCKET`.
    pub socket: PathBuf,
    /// The named instance every child finds in `TUIC_APP_INSTANCE` (none for the default).
    pub instance: Option<String>,
    /// The current tuning.
    pub tuning: TuningSource,
    /// Observed `intent:` markers; `None` ignores them.
    pub on_intent: Option<IntentHook>,
    /// The screen cells all live sessions share (`budget`).
    pub cells: Arc<super::budget::CellBudget>,
    /// The stored secrets' values, masked out of output as it is read (`valuemask`); the
    /// secret service publishes them.
    pub redactions: Arc<super::valuemask::Redactions>,
}

impl SessionEnv {
    /// An environment of its own (fresh bus, tracker and token, default tuning, no hook), for a
    /// registry that runs outside a node (this crate's tests).
    pub fn standalone(socket: PathBuf) -> Self {
        Self {
            bus: Arc::new(Bus::default()),
            tasks: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            socket,
            instance: None,
            tuning: Arc::new(Tuning::default),
            on_intent: None,
            cells: Arc::default(),
            redactions: Arc::default(),
        }
    }

    /// The tuning in force now.
    pub fn tuning(&self) -> Tuning {
        (self.tuning)()
    }
}

impl std::fmt::Debug for SessionEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionEnv")
            .field("socket", &self.socket)
            .field("instance", &self.instance)
            .field("tuning", &self.tuning())
            .field("on_intent", &self.on_intent.is_some())
            .finish_non_exhaustive()
    }
}
