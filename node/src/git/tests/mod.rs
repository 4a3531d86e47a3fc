//! The git service on real repositories built in temp dirs: every proof kind positive and
//! negative, archived deletion and restore, worktree creation/removal gates, bad input, and
//! declared placement across a registry reload. The service runs over a real store, repository
//! registry, session registry and bus ([`Bed`]), not a node.

mod branches;
mod orphans;
mod placement;
mod worktrees;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use super::branch::{self, Targets};
use super::worktree::{CreateRequest, RemoveRequest};
use super::{Git, GitEnv, Runner};
use crate::events::Bus;
use crate::progress::{Progress, ProgressEnv};
use crate::repos::Repos;
use crate::session::{Registry, SessionEnv};
use crate::store::Store;

pub(super) fn sh_git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

pub(super) fn commit(dir: &Path, file: &str, content: &str, msg: &str) -> String {
    let p = dir.join(file);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(p, content).unwrap();
    sh_git(dir, &["add", "--", file]);
    sh_git(dir, &["commit", "-q", "-m", msg]);
    sh_git(dir, &["rev-parse", "HEAD"])
}

/// A repository on `main` with one commit, in its own temp dir (so `<repo>__wt` is inside it).
pub(super) fn repo() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    sh_git(&root, &["init", "-q", "-b", "main"]);
    commit(&root, "base.txt", "a\nb\nc\n", "base");
    let root = root.canonicalize().unwrap();
    (d, root)
}

pub(super) fn classify(git: &Runner, root: &Path, b: &str) -> branch::Integration {
    let tip = sh_git(root, &["rev-parse", &format!("refs/heads/{b}")]);
    branch::classify(git, root, b, &tip, &Targets::resolve(git, root), vec![])
}

pub(super) fn req(root: &Path, branch: &str) -> CreateRequest {
    CreateRequest {
        repo: root.to_string_lossy().into_owned(),
        branch: Some(branch.into()),
        ..Default::default()
    }
}

pub(super) fn rm(root: &Path, branch: &str) -> RemoveRequest {
    RemoveRequest {
        repo: root.to_string_lossy().into_owned(),
        branch: branch.into(),
        ..Default::default()
    }
}

/// The git service over its real environment in a temp dir: the store, the repository
/// registry, the session registry and the bus it publishes on.
pub(super) struct Bed {
    _store_dir: tempfile::TempDir,
    pub(super) store: Arc<Store>,
    pub(super) repos: Arc<Repos>,
    pub(super) sessions: Arc<Registry>,
    pub(super) bus: Arc<Bus>,
    pub(super) git: Git,
}

impl Bed {
    /// A bed whose sessions keep their files under `config_dir`.
    pub(super) fn new(config_dir: &Path) -> Self {
        let store_dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&store_dir.path().join("state.redb")).unwrap());
        let repos = Arc::new(Repos::open(store.clone()).unwrap());
        let bus = Arc::new(Bus::default());
        let mut env = SessionEnv::standalone(config_dir.join("tuic.sock"));
        env.bus = bus.clone();
        let sessions = Arc::new(Registry::new(config_dir, env));
        let git = Git::new(GitEnv {
            repos: repos.clone(),
            sessions: sessions.clone(),
            bus: bus.clone(),
            github: None,
        });
        Self {
            _store_dir: store_dir,
            store,
            repos,
            sessions,
            bus,
            git,
        }
    }

    /// The progress service over the same registries (what attributes a terminal's project).
    pub(super) fn progress(&self) -> Progress {
        Progress::open(
            self.store.clone(),
            ProgressEnv {
                repos: self.repos.clone(),
                sessions: self.sessions.clone(),
                bus: self.bus.clone(),
                config: Arc::new(Arc::default),
                peers: Arc::new(|_| None),
            },
        )
        .unwrap()
    }
}
