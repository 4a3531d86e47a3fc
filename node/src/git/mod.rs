//! The git service: every Git operation of the node happens here, through the `git` CLI.
//!
//! It owns worktrees (`create.rs`; `worktree.rs`: list with lifecycle status, remove;
//! `orphans.rs`: the orphan cleanup dialog), branch integration proofs and safe local branch
//! deletion with archive refs (`branch.rs`, `query.rs`), and agent-declared worktree placement
//! (`placement.rs`). The MCP `repo` tool,
//! `session action=declare_worktree` and the `/worktrees`, `/repo/*` routes are thin adapters
//! over it. It deliberately does not register repositories (`crate::repos` does) and never runs
//! on an async worker: every function is blocking, and each `git` process takes one of a bounded
//! number of slots ([`Runner::run`]), so a burst of callers queues instead of forking without
//! limit.
//!
//! The service ([`Git`]) holds its [`GitEnv`], built by the composition root: the repository
//! registry it resolves against and records placements in, the session registry (shells it
//! spawns, sessions inside a worktree, the placement mirror) and the bus. It holds no node.

pub(crate) mod branch;
pub(crate) mod create;
pub(crate) mod diff;
pub(crate) mod orphans;
pub(crate) mod placement;
pub(crate) mod query;
pub(crate) mod worktree;

#[cfg(test)]
mod tests;

use std::path::{Component, Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};

use crate::events::Bus;
use crate::repos::Repos;
use crate::session::Registry;

/// Concurrent `git` processes per node. Git work is IO- and fork-bound; on the 2-core machines
/// the node targets, more than this only adds contention on the object store.
pub(crate) const GIT_CONCURRENCY: usize = 8;

/// Why a Git operation was refused or failed. Every variant names the problem in its message;
/// `code` is the stable machine-readable name the adapters answer with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GitError {
    /// The path is malformed (relative, `..`, NUL) or does not exist.
    #[error("{0}")]
    InvalidPath(String),
    /// The path is not (inside) a registered repository.
    #[error("{0}")]
    NotRegistered(String),
    /// The registered directory is not a Git repository root.
    #[error("{0}")]
    NotGit(String),
    /// A named ref (base branch, branch) does not exist.
    #[error("{0}")]
    UnknownRef(String),
    /// The worktree named is not one of the repository's worktrees.
    #[error("{0}")]
    UnknownWorktree(String),
    /// A branch name Git does not accept.
    #[error("{0}")]
    InvalidBranch(String),
    /// The current state forbids the operation (dirty, locked, stale fingerprint, checked out,
    /// unmerged, exists...); `code` says which.
    #[error("{message}")]
    Refused {
        /// Stable reason code.
        code: &'static str,
        /// Human message naming the problem and the way out.
        message: String,
    },
    /// A `git` command failed unexpectedly.
    #[error("git {args} failed: {stderr}")]
    Failed {
        /// The arguments, for the message.
        args: String,
        /// Git's own explanation (trimmed).
        stderr: String,
    },
    /// The filesystem or process spawn failed.
    #[error("{0}")]
    Io(String),
    /// A repository of another host (`ext::HostRouter::repo`): the owner refused, or the
    /// connection to it is down or unknown.
    #[error("{message}")]
    Remote {
        /// The connection the repository lives on.
        connection: String,
        /// The owner's code (or the hub's `owner_unavailable`, `unknown_connection`).
        code: &'static str,
        /// The owner's message, prefixed with the connection.
        message: String,
        /// The owner's HTTP status (503 when unreachable).
        status: u16,
    },
}

impl GitError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidPath(_) => "invalid_path",
            Self::NotRegistered(_) => "unknown_repository",
            Self::NotGit(_) => "not_git",
            Self::UnknownRef(_) => "unknown_ref",
            Self::UnknownWorktree(_) => "unknown_worktree",
            Self::InvalidBranch(_) => "invalid_branch",
            Self::Refused { code, .. } => code,
            Self::Failed { .. } => "git_failed",
            Self::Io(_) => "io_error",
            Self::Remote { code, .. } => code,
        }
    }

    /// The HTTP status class the routes answer with.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::InvalidPath(_)
            | Self::NotRegistered(_)
            | Self::NotGit(_)
            | Self::UnknownRef(_)
            | Self::InvalidBranch(_) => 400,
            Self::UnknownWorktree(_) => 404,
            Self::Refused { .. } => 409,
            Self::Failed { .. } | Self::Io(_) => 500,
            Self::Remote { status, .. } => *status,
        }
    }

    pub(crate) fn refused(code: &'static str, message: impl Into<String>) -> Self {
        Self::Refused {
            code,
            message: message.into(),
        }
    }
}

/// What the git service uses of the node. Cloning shares everything.
#[derive(Debug, Clone)]
pub struct GitEnv {
    /// The registered repositories: what `resolve_repo` accepts, where placements are stored.
    pub repos: Arc<Repos>,
    /// Live sessions: shells spawned into new worktrees, sessions inside a worktree (removal
    /// gates), the placement mirror `GET /sessions` reads.
    pub sessions: Arc<Registry>,
    /// `worktree-created`, `worktree-removed`, `session-worktree-declared` and the orphan
    /// dialog's events go here.
    pub bus: Arc<Bus>,
    /// The `github_pr` proof's evidence (the GitHub service); `None` answers it unavailable.
    pub github: Option<Arc<dyn PrEvidence>>,
}

/// GitHub pull-request evidence for the `github_pr` proof, answered by the GitHub service
/// (`crate::github`) through this hook, so the git service never holds it or the node.
pub trait PrEvidence: Send + Sync {
    /// Per `(branch, tip)` of the repository at `root`: the number of a merged pull request
    /// whose head was exactly `tip`, or `None`. `Err` says why GitHub cannot be asked.
    /// Blocking (called on the blocking pool).
    fn merged_prs(
        &self,
        root: &Path,
        branches: &[(String, String)],
    ) -> Result<Vec<Option<u64>>, String>;
}

impl std::fmt::Debug for dyn PrEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrEvidence")
    }
}

/// The git service: its bounded runner, open orphan dialogs, per-repository mutation locks and
/// its environment.
#[derive(Debug)]
pub struct Git {
    /// The bounded `git` process runner (also reached through `Deref`).
    runner: Runner,
    /// Open orphan cleanup dialogs.
    pub orphans: orphans::Orphans,
    /// Per repository, serializes the check-then-act of worktree creation and removal (two
    /// agents creating the same branch at once get one worktree and one clear refusal, not a
    /// half-made pair). Held only around the Git mutation, never across warming or the setup
    /// script; other repositories are never blocked by a long removal.
    mutate: Mutex<std::collections::HashMap<String, std::sync::Arc<Mutex<()>>>>,
    /// What the service uses of the node.
    env: GitEnv,
}

impl Git {
    /// The service over `env`, allowing [`GIT_CONCURRENCY`] concurrent `git` processes.
    pub fn new(env: GitEnv) -> Self {
        Self {
            runner: Runner::new(GIT_CONCURRENCY),
            orphans: orphans::Orphans::default(),
            mutate: Mutex::default(),
            env,
        }
    }

    /// The service's environment.
    pub fn env(&self) -> &GitEnv {
        &self.env
    }

    /// The mutation lock of one repository (see the `mutate` field).
    pub(crate) fn repo_lock(&self, key: &str) -> std::sync::Arc<Mutex<()>> {
        self.mutate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_owned())
            .or_default()
            .clone()
    }
}

/// The service runs `git` through its bounded runner: `git.out(..)`, and `&Git` wherever a
/// `&Runner` is asked for.
impl std::ops::Deref for Git {
    type Target = Runner;

    fn deref(&self) -> &Runner {
        &self.runner
    }
}

/// The bounded `git` runner.
#[derive(Debug)]
pub struct Runner {
    /// Free process slots.
    free: Mutex<usize>,
    /// Signalled when a slot is returned.
    returned: Condvar,
    /// The default branch a change view last found per repository root, with when: the rule
    /// costs three `git` processes and a phone polling Changes asks again within seconds, so a
    /// view reuses it for [`diff::VIEW_DEFAULT_TTL`] (and drops it when the branch is gone).
    /// Only the change views read it; landing and proofs apply the rule afresh.
    pub(crate) view_defaults:
        Mutex<std::collections::HashMap<PathBuf, (std::time::Instant, String)>>,
    /// What the change views remember by commit ids (merge-bases, committed ranges, file
    /// diffs): see [`diff::memo`].
    pub(crate) view_memo: diff::memo::ViewMemo,
}

impl Default for Runner {
    fn default() -> Self {
        Self::new(GIT_CONCURRENCY)
    }
}

/// A held process slot; returns itself on drop.
struct Slot<'a>(&'a Runner);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.0.returned.notify_one();
    }
}

impl Runner {
    /// A runner allowing `max` concurrent processes.
    pub fn new(max: usize) -> Self {
        Self {
            free: Mutex::new(max.max(1)),
            returned: Condvar::new(),
            view_defaults: Mutex::default(),
            view_memo: diff::memo::ViewMemo::default(),
        }
    }

    fn slot(&self) -> Slot<'_> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.returned.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
        Slot(self)
    }

    /// Runs `git -C dir args...` to completion in one slot. Blocking.
    pub fn run(&self, dir: &Path, args: &[&str]) -> Result<Output, GitError> {
        let _slot = self.slot();
        command(dir, args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| GitError::Io(format!("running git: {e}")))
    }

    /// Runs git and returns its stdout (trailing newline trimmed); a failure carries stderr.
    pub fn out(&self, dir: &Path, args: &[&str]) -> Result<String, GitError> {
        let o = self.run(dir, args)?;
        if o.status.success() {
            let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
            while s.ends_with('\n') {
                s.pop();
            }
            Ok(s)
        } else {
            Err(failed(args, &o))
        }
    }

    /// Runs git and answers whether it exited 0.
    pub fn ok(&self, dir: &Path, args: &[&str]) -> Result<bool, GitError> {
        Ok(self.run(dir, args)?.status.success())
    }
}

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("git");
    c.arg("-C")
        .arg(dir)
        .args(["-c", "core.quotepath=off"])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        // Reads (status) must not take the index lock a concurrent writer needs.
        .env("GIT_OPTIONAL_LOCKS", "0");
    c
}

pub(crate) fn failed(args: &[&str], o: &Output) -> GitError {
    GitError::Failed {
        args: args.join(" "),
        stderr: String::from_utf8_lossy(&o.stderr).trim().to_owned(),
    }
}

/// Checks a caller-supplied absolute path lexically: absolute, no NUL, no `..` component.
pub(crate) fn check_path(raw: &str, what: &str) -> Result<PathBuf, GitError> {
    if raw.is_empty() {
        return Err(GitError::InvalidPath(format!("{what} is required")));
    }
    if raw.contains('\0') {
        return Err(GitError::InvalidPath(format!("{what} contains a NUL byte")));
    }
    let p = Path::new(raw);
    if !p.is_absolute() {
        return Err(GitError::InvalidPath(format!(
            "{what} {raw} is not an absolute path"
        )));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(GitError::InvalidPath(format!(
            "{what} {raw} contains a `..` component"
        )));
    }
    Ok(p.to_path_buf())
}

/// A registered Git repository, resolved and validated for Git work.
#[derive(Debug, Clone)]
pub(crate) struct RepoRef {
    /// Canonical root (the main checkout).
    pub root: PathBuf,
    /// The registry key (`root` as a string).
    pub key: String,
}

impl Git {
    /// Resolves `raw` to a registered Git repository root: the lexical checks of [`check_path`],
    /// canonicalisation (a symlink resolving outside every registered root is named as such),
    /// registration, and Git itself (the directory must be the main checkout of a repository).
    pub(crate) fn resolve_repo(&self, raw: &str) -> Result<RepoRef, GitError> {
        let p = check_path(raw, "path")?;
        let canon = p
            .canonicalize()
            .map_err(|e| GitError::InvalidPath(format!("path {raw}: {e}")))?;
        let roots = self.env.repos.roots();
        if !roots.contains(&canon) {
            let lexical_inside = roots.iter().any(|r| p.starts_with(r));
            return Err(GitError::NotRegistered(if canon != p && lexical_inside {
                format!(
                    "path {raw} resolves through a symlink to {}, outside the registered repositories",
                    canon.display()
                )
            } else if roots.iter().any(|r| canon.starts_with(r)) {
                format!(
                    "path {raw} is inside a registered repository but is not its root; pass the repository root"
                )
            } else {
                format!(
                    "path {raw} is not a registered repository; register it with repo action=add (POST /repos)"
                )
            }));
        }
        let key = canon.to_string_lossy().into_owned();
        check_main_checkout(self, &canon)?;
        Ok(RepoRef { root: canon, key })
    }
}

/// The directory must be the main checkout of a Git repository (not a shell workspace, not a
/// subdirectory, not a linked worktree).
pub(crate) fn check_main_checkout(git: &Runner, root: &Path) -> Result<(), GitError> {
    let not_git = || {
        GitError::NotGit(format!(
            "{} is not a Git repository (registered as a shell workspace); worktrees and branches need Git",
            root.display()
        ))
    };
    let top = git
        .out(root, &["rev-parse", "--show-toplevel"])
        .map_err(|_| not_git())?;
    let top = PathBuf::from(top).canonicalize().map_err(|_| not_git())?;
    if top != root {
        return Err(not_git());
    }
    let common = git.out(
        root,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )?;
    let common = PathBuf::from(common)
        .canonicalize()
        .map_err(|e| GitError::Io(e.to_string()))?;
    if common != root.join(".git") {
        return Err(GitError::NotGit(format!(
            "{} is a linked worktree, not a repository's main checkout; pass the main checkout",
            root.display()
        )));
    }
    Ok(())
}

/// The main checkout owning the linked worktree that holds `dir`, read from the worktree's
/// `.git` file (`gitdir: <main>/.git/worktrees/<name>`) without running Git, so hot paths
/// (progress attribution, the session monitor) can use it. `None` when the nearest `.git` is
/// a directory (a main checkout) or there is none.
pub(crate) fn main_checkout_of_worktree(dir: &Path) -> Option<PathBuf> {
    let mut cur = Some(dir);
    while let Some(d) = cur {
        let dot = d.join(".git");
        if let Ok(m) = std::fs::symlink_metadata(&dot) {
            if !m.is_file() {
                return None;
            }
            let text = std::fs::read_to_string(&dot).ok()?;
            let gitdir = PathBuf::from(text.trim().strip_prefix("gitdir: ")?);
            let gitdir = if gitdir.is_absolute() {
                gitdir
            } else {
                d.join(gitdir)
            };
            let worktrees = gitdir.parent()?;
            let common = worktrees.parent()?;
            return (worktrees.file_name()? == "worktrees" && common.file_name()? == ".git")
                .then(|| common.parent().map(Path::to_path_buf))
                .flatten();
        }
        cur = d.parent();
    }
    None
}

/// The main checkout of the repository holding `dir` (through Git's common dir), if `dir` is
/// inside a Git work tree.
pub(crate) fn main_checkout_of(git: &Runner, dir: &Path) -> Option<PathBuf> {
    let common = git
        .out(
            dir,
            &["rev-parse", "--path-format=absolute", "--git-common-dir"],
        )
        .ok()?;
    let common = PathBuf::from(common).canonicalize().ok()?;
    (common.file_name()? == ".git").then(|| common.parent().map(Path::to_path_buf))?
}
