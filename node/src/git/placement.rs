//! Agent-declared worktree placement (spec "Agent-declared worktree placement"): which linked
//! worktree a tab belongs to, by the tab's stable `TUIC_SESSION`.
//!
//! The durable record is the owning repository's `declared_worktrees` map in the store,
//! changed only through `Repos::update` (the locked repository delta); the session registry
//! holds a mirror that `GET /sessions` rows read (`worktree_path`, `worktree_branch`). The
//! mirror is loaded at start, so a session restored with its identity shows its placement
//! after a restart. Declaration changes placement only: never the shell's cwd, never cleanup
//! ownership.

use std::path::Path;

use serde_json::{Value, json};
use tuic_proto::events::Event;

use super::branch::Targets;
use super::worktree::entries;
use super::{Git, GitError, RepoRef, check_path, main_checkout_of};
use crate::repos::DeclaredWorktree;

impl Git {
    /// Loads every stored declaration into the session registry's mirror (at node start).
    pub(crate) fn load_placements(&self) {
        for repo in self.env.repos.list().unwrap_or_default() {
            for (t, d) in repo.declared_worktrees {
                self.env
                    .sessions
                    .set_placement(&t, Some((d.worktree_path, d.worktree_branch)));
            }
        }
    }

    /// Records a placement durably and in the mirror.
    pub(crate) fn record_placement(
        &self,
        r: &RepoRef,
        tuic_session: &str,
        path: &str,
        branch: Option<&str>,
    ) -> Result<(), GitError> {
        let d = DeclaredWorktree {
            worktree_path: path.to_owned(),
            worktree_branch: branch.map(str::to_owned),
        };
        let updated = self
            .env
            .repos
            .update(&r.key, |repo| {
                repo.declared_worktrees
                    .insert(tuic_session.to_owned(), d.clone());
            })
            .map_err(|e| GitError::Io(format!("persisting the declaration: {e:#}")))?;
        if updated.is_none() {
            return Err(GitError::NotRegistered(format!(
                "{} is no longer a registered repository",
                r.key
            )));
        }
        self.env
            .sessions
            .set_placement(tuic_session, Some((d.worktree_path, d.worktree_branch)));
        Ok(())
    }

    /// Drops every placement naming a removed worktree.
    pub(crate) fn forget_placements(&self, r: &RepoRef, path: &str) {
        let gone = self
            .env
            .repos
            .update(&r.key, |repo| {
                let ids: Vec<String> = repo
                    .declared_worktrees
                    .iter()
                    .filter(|(_, d)| d.worktree_path == path)
                    .map(|(t, _)| t.clone())
                    .collect();
                for t in &ids {
                    repo.declared_worktrees.remove(t);
                }
                ids
            })
            .ok()
            .flatten()
            .unwrap_or_default();
        for t in gone {
            self.env.sessions.set_placement(&t, None);
        }
    }

    /// `session action=declare_worktree`: places the caller's own tab (identity `tuic_session`,
    /// launched in `launch_dir`) in an existing linked worktree of the repository that launch
    /// directory belongs to. The main checkout, unknown paths and other repositories' worktrees
    /// are refused before anything changes. Idempotent.
    pub(crate) fn declare(
        &self,
        tuic_session: &str,
        session_id: &str,
        launch_dir: &str,
        worktree_path: &str,
    ) -> Result<Value, GitError> {
        let git = self;
        let wanted = check_path(worktree_path, "worktree_path")?;
        let wanted = wanted
            .canonicalize()
            .map_err(|e| GitError::InvalidPath(format!("worktree_path {worktree_path}: {e}")))?;
        let main = main_checkout_of(git, Path::new(launch_dir)).ok_or_else(|| {
            GitError::NotRegistered(format!(
                "the caller's launch directory {launch_dir} is not inside a Git repository"
            ))
        })?;
        let key = main.to_string_lossy().into_owned();
        if !self.env.repos.is_root(&main) {
            return Err(GitError::NotRegistered(format!(
                "the caller's repository {key} is not registered; register it with repo action=add"
            )));
        }
        let r = RepoRef { root: main, key };
        let es = entries(git, &r.root)?;
        let e = es
        .iter()
        .find(|e| e.path.canonicalize().is_ok_and(|p| p == wanted))
        .ok_or_else(|| {
            GitError::UnknownWorktree(format!(
                "{worktree_path} is not a worktree of {} (the caller's repository); repo action=worktree_list shows them",
                r.key
            ))
        })?;
        if e.main {
            return Err(GitError::refused(
                "main_checkout",
                format!(
                    "{worktree_path} is the main checkout of {}; declare a linked worktree",
                    r.key
                ),
            ));
        }
        let path = e.path.to_string_lossy().into_owned();
        self.record_placement(&r, tuic_session, &path, e.branch.as_deref())?;
        let targets = Targets::resolve(git, &r.root);
        let mut v = self.payload(&r, e, &targets);
        v["creator_session"] = json!(tuic_session);
        v["session_id"] = json!(session_id);
        v["spawn_session"] = json!(false);
        self.env
            .bus
            .publish(Event::SessionWorktreeDeclared(v.clone()));
        v["ok"] = json!(true);
        Ok(v)
    }
}
