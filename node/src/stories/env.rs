//! What the planning layer (stories, workflow definitions and runs, the runner and the
//! coordinator's tools) uses of the node it runs in, handed to it by the composition root
//! (`state.rs`): its own two services, the session registry its workers' PTYs live in
//! (reached when needed), the bus it watches for worker exits, the task tracker and shutdown
//! token its executor lives under, and one [`Host`] for what it asks of the services beside it
//! (mail, progress, git).
//!
//! It deliberately holds no node: nothing under `stories/` imports the node's state.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Stories;
use super::workflow::Workflows;
use crate::events::Bus;

/// What the planning layer asks of the services beside it. The composition root implements it
/// over a weak reference to the node; every call is blocking-safe (the callers already run on
/// the blocking pool).
pub trait Host: Send + Sync {
    /// The working directory a mail identity registered (`agent action=register path`).
    fn identity_path(&self, tuic: &str) -> Option<String>;
    /// Whether a mail identity is a managed agent (spawned by `tuic`).
    fn is_managed(&self, tuic: &str) -> bool;
    /// The registered repository `dir` lies in (`progress::project_of`).
    fn project_of(&self, dir: &str) -> Option<String>;
    /// The paths of the linked worktrees (not the main checkout) of the repository at `main`.
    fn linked_worktrees(&self, main: &Path) -> Result<Vec<std::path::PathBuf>, String>;
    /// Spawns a managed agent through the mail layer's spawn path; the value is its answer
    /// (`session_id`, `tuic_session`, `task_id`).
    fn spawn_agent(&self, req: WorkerSpawn) -> Result<Value, String>;
    /// Appends to the progress journal.
    fn journal(&self, entry: crate::progress::NewEntry) -> Result<(), String>;
    /// Posts a system message from `tuic` to `recipient`'s inbox (registered first if new).
    fn post_system(
        &self,
        recipient: &str,
        from_name: &str,
        body: String,
        kind: &str,
    ) -> Result<(), String>;
}

/// The session registry, reached when needed.
pub type SessionsSource = Arc<dyn Fn() -> Option<Arc<crate::session::Registry>> + Send + Sync>;

/// A worker (or coordinator-launched agent) to spawn: what the runner and the coordinator's
/// `workflow_launch` decide; the rest of a managed spawn takes its defaults.
#[derive(Debug, Clone, Default)]
pub struct WorkerSpawn {
    /// The agent's executable.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The working directory.
    pub cwd: String,
    /// The rendered prompt.
    pub prompt: String,
    /// Extra environment (`TUIC_RUN_ID`, `TUIC_ATTEMPT_ID`, ...).
    pub env: std::collections::HashMap<String, String>,
    /// The terminal's name.
    pub name: String,
    /// The spawning identity (a coordinator), if any: parent and sole owner.
    pub parent: Option<String>,
}

/// The planning layer's environment. Cloning shares everything.
#[derive(Clone)]
pub struct StoriesEnv {
    /// Story records, reviews and the story event log.
    pub stories: Arc<Stories>,
    /// Workflow definitions and runs.
    pub workflows: Arc<Workflows>,
    /// The live terminals (workers and coordinators are PTYs); `None` once the node is gone.
    pub sessions: SessionsSource,
    /// Worker exits (`pty-exit`) are read from here.
    pub bus: Arc<Bus>,
    /// Owner of the executor, the attempt timer and the launches, so shutdown waits for them.
    pub tasks: TaskTracker,
    /// Fired once at shutdown: the executor and the timer stop.
    pub shutdown: CancellationToken,
    /// The services beside this one.
    pub host: Arc<dyn Host>,
}

impl StoriesEnv {
    /// The live session (PTY) with this id or TUIC identity.
    pub fn live_session(&self, id: &str) -> Option<Arc<crate::session::Session>> {
        (self.sessions)()?.live(id)
    }

    /// Whether the TUIC identity owns a live PTY.
    pub fn owns_live_pty(&self, tuic: &str) -> bool {
        (self.sessions)().is_some_and(|r| r.owns_live_pty(tuic))
    }
}

impl std::fmt::Debug for StoriesEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoriesEnv").finish_non_exhaustive()
    }
}
