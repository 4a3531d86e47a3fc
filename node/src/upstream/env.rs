//! What the upstream service uses of the node it runs in, handed to it by the composition root
//! (`state.rs`): the vault its credentials live in, the task tracker and shutdown token its
//! supervisors and OAuth callback servers live under, and the tuning it reads at the moment it
//! needs it.
//!
//! It deliberately holds no node: nothing under `upstream/` imports the node's state. The MCP
//! side of the service (the registry's `ToolSource`) lives in `mcp/upstreams.rs`.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Tuning;
use crate::vault::Vault;

/// Reads the current tuning (a config reload changes it).
pub type TuningSource = Arc<dyn Fn() -> Tuning + Send + Sync>;

/// The upstream service's environment. Cloning shares everything.
#[derive(Clone)]
pub struct UpstreamEnv {
    /// Bearer tokens and OAuth token sets (`vault_key(id)`).
    pub vault: Arc<Vault>,
    /// Owner of the supervisors, the health tick and the OAuth callback servers.
    pub tasks: TaskTracker,
    /// Fired once at shutdown: every supervisor and callback server stops.
    pub shutdown: CancellationToken,
    /// The current tuning.
    pub tuning: TuningSource,
}

impl UpstreamEnv {
    /// The current tuning.
    pub fn tuning(&self) -> Tuning {
        (self.tuning)()
    }

    /// An environment of its own (a file vault under `dir`, fresh tracker and token, default
    /// tuning), for a service that runs outside a node (this crate's tests).
    pub fn standalone(dir: &std::path::Path) -> Self {
        Self {
            vault: Arc::new(Vault::open(dir, dir.join("secrets.json"), false)),
            tasks: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            tuning: Arc::new(Tuning::default),
        }
    }
}

impl std::fmt::Debug for UpstreamEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamEnv").finish_non_exhaustive()
    }
}
