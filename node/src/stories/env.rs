//! What the planning layer (stories, workflow definitions and runs, the runner and the
//! coordinator's tools) uses of the node it runs in, handed to it by the composition root
//! (`state/envs.rs`): its own two services, the session registry its workers' PTYs live in,
//! the services beside it it really asks (mail: identities, spawn and system messages;
//! progress: projects and the journal; git: linked worktrees), the bus it watches for worker
//! exits, and the task tracker and shutdown token its executor lives under.
//!
//! It deliberately holds no node: nothing under `stories/` imports the node's state. None of
//! the handles reaches back to the planning layer, so holding them strongly makes no cycle.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Stories;
use super::workflow::Workflows;
use crate::events::Bus;

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
    /// The live terminals (workers and coordinators are PTYs).
    pub sessions: Arc<crate::session::Registry>,
    /// Agent mail: registered identities, the managed spawn path, system messages.
    pub mail: Arc<crate::mail::Mail>,
    /// The progress journal: which registered project a directory lies in, report entries.
    pub progress: Arc<crate::progress::Progress>,
    /// The git service: the linked worktrees a coordinator may launch into.
    pub git: Arc<crate::git::Git>,
    /// Worker exits (`pty-exit`) are read from here.
    pub bus: Arc<Bus>,
    /// Owner of the executor, the attempt timer and the launches, so shutdown waits for them.
    pub tasks: TaskTracker,
    /// Fired once at shutdown: the executor and the timer stop.
    pub shutdown: CancellationToken,
}

/// What the planning layer asks of the services beside it. Every call is blocking-safe (the
/// callers already run on the blocking pool).
impl StoriesEnv {
    /// The live session (PTY) with this id or TUIC identity.
    pub fn live_session(&self, id: &str) -> Option<Arc<crate::session::Session>> {
        self.sessions.live(id)
    }

    /// Whether the TUIC identity owns a live PTY.
    pub fn owns_live_pty(&self, tuic: &str) -> bool {
        self.sessions.owns_live_pty(tuic)
    }

    /// The working directory a mail identity registered (`agent action=register path`).
    pub fn identity_path(&self, tuic: &str) -> Option<String> {
        self.mail
            .lock()
            .peers
            .get(tuic)
            .and_then(|p| p.path.clone())
    }

    /// Whether a mail identity is a managed agent (spawned by `tuic`).
    pub fn is_managed(&self, tuic: &str) -> bool {
        self.mail.lock().peers.get(tuic).is_some_and(|p| p.managed)
    }

    /// The registered repository `dir` lies in (`progress::project_of`).
    pub fn project_of(&self, dir: &str) -> Option<String> {
        self.progress.project_of(dir)
    }

    /// The paths of the linked worktrees (not the main checkout) of the repository at `main`.
    pub fn linked_worktrees(&self, main: &Path) -> Result<Vec<PathBuf>, String> {
        let entries = crate::git::worktree::entries(&self.git, main).map_err(|e| e.to_string())?;
        Ok(entries
            .into_iter()
            .filter(|e| !e.main)
            .map(|e| e.path)
            .collect())
    }

    /// Spawns a managed agent through the mail layer's spawn path; the value is its answer
    /// (`session_id`, `tuic_session`, `task_id`).
    pub fn spawn_agent(&self, w: WorkerSpawn) -> Result<Value, String> {
        let owners = w.parent.iter().cloned().collect();
        crate::mail::spawn::spawn(
            &self.mail,
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

    /// Appends to the progress journal.
    pub fn journal(&self, entry: crate::progress::NewEntry) -> Result<(), String> {
        self.progress
            .append(entry)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// Posts a system message from `tuic` to `recipient`'s inbox (registered first if new).
    pub fn post_system(
        &self,
        recipient: &str,
        from_name: &str,
        body: String,
        kind: &str,
    ) -> Result<(), String> {
        {
            let mut g = self.mail.lock();
            self.mail.ensure(&mut g, recipient);
        }
        self.mail
            .post(
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

impl std::fmt::Debug for StoriesEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoriesEnv").finish_non_exhaustive()
    }
}
