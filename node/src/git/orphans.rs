//! The orphan cleanup dialog (spec `orphan_cleanup_answer`): linked worktrees in the
//! repository's `__wt` directory that nothing owns any more, the open dialog per repository,
//! and its answer. A headless node opens the dialog itself when a listing finds orphans.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{Value, json};
use tuic_proto::events::Event;

use super::worktree::{Entry, count_paths, entries, status, worktrees_dir};
use super::{Git, GitError, Runner};

/// Pending orphan cleanup dialogs: repository → the orphaned worktree paths it listed.
#[derive(Debug, Default)]
pub struct Orphans(Mutex<BTreeMap<String, Vec<String>>>);

/// Linked worktrees inside the repository's `__wt` directory that nothing owns any more: the
/// checkout is gone, or HEAD is detached.
fn orphans_of(git: &Runner, root: &Path) -> Result<Vec<Entry>, GitError> {
    let dir = worktrees_dir(root);
    Ok(entries(git, root)?
        .into_iter()
        .filter(|e| !e.main && e.path.starts_with(&dir) && e.locked.is_none())
        .filter(|e| e.prunable || !e.path.is_dir() || e.branch.is_none())
        .collect())
}

impl Git {
    /// Looks for orphaned worktrees and opens (or refreshes) the cleanup dialog when there are
    /// some, publishing `orphan-cleanup-requested`. Returns the pending paths.
    pub(crate) fn orphan_scan(&self, repo: &str) -> Result<Vec<String>, GitError> {
        let r = self.resolve_repo(repo)?;
        let found: Vec<String> = orphans_of(self, &r.root)?
            .into_iter()
            .map(|e| e.path.to_string_lossy().into_owned())
            .collect();
        let mut g = self.orphans.0.lock().unwrap_or_else(|p| p.into_inner());
        if found.is_empty() {
            g.remove(&r.key);
        } else if g.get(&r.key) != Some(&found) {
            g.insert(r.key.clone(), found.clone());
            self.env.bus.publish(Event::OrphanCleanupRequested(
                json!({"repo_path": r.key, "worktrees": found}),
            ));
        }
        Ok(found)
    }

    /// `orphan_cleanup_answer`: `keep` closes the dialog; `remove` rechecks every pending worktree
    /// (no tracked or untracked changes, a HEAD reachable from a branch, no live session inside,
    /// still an orphan) and removes them all, or refuses the whole answer.
    pub(crate) fn orphan_answer(&self, repo: &str, decision: &str) -> Result<Value, GitError> {
        let git = self;
        let r = self.resolve_repo(repo)?;
        let pending = {
            let g = self.orphans.0.lock().unwrap_or_else(|p| p.into_inner());
            g.get(&r.key).cloned()
        };
        let Some(pending) = pending else {
            return Err(GitError::refused(
                "no_open_dialog",
                format!(
                    "no orphan cleanup dialog is open for {} (repo action=worktree_list opens one when it finds orphaned worktrees)",
                    r.key
                ),
            ));
        };
        let close = |decision: &str, removed: &[String]| {
            self.orphans
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&r.key);
            self.env.bus.publish(Event::OrphanCleanupResolved(json!({
                "repo_path": r.key, "decision": decision, "removed": removed,
            })));
        };
        match decision {
            "keep" => {
                close("keep", &[]);
                Ok(json!({"ok": true, "decision": "keep", "kept": pending}))
            }
            "remove" => {
                let current = orphans_of(git, &r.root)?;
                let mut unsafe_ = Vec::new();
                let mut to_remove = Vec::new();
                for p in &pending {
                    let Some(e) = current.iter().find(|e| e.path.to_string_lossy() == *p) else {
                        unsafe_.push(format!(
                            "{p}: no longer an orphaned worktree (stale dialog)"
                        ));
                        continue;
                    };
                    if e.path.is_dir() {
                        match status(git, &e.path) {
                            Ok(s) if count_paths(&s.raw) > 0 => {
                                unsafe_.push(format!("{p}: has tracked or untracked changes"));
                                continue;
                            }
                            Err(err) => {
                                unsafe_.push(format!("{p}: {err}"));
                                continue;
                            }
                            Ok(_) => {}
                        }
                        let reachable = e.head.as_deref().is_some_and(|h| {
                            git.out(
                                &r.root,
                                &["for-each-ref", "--count=1", "--contains", h, "refs/heads"],
                            )
                            .is_ok_and(|s| !s.is_empty())
                        });
                        if !reachable {
                            unsafe_.push(format!("{p}: its HEAD is not reachable from any branch"));
                            continue;
                        }
                        let live = self.sessions_inside(&e.path);
                        if !live.is_empty() {
                            unsafe_
                                .push(format!("{p}: live sessions inside ({})", live.join(", ")));
                            continue;
                        }
                    }
                    to_remove.push(e.clone());
                }
                if !unsafe_.is_empty() {
                    return Err(GitError::refused(
                        "unsafe_cleanup",
                        format!(
                            "orphan cleanup refused, nothing removed: {}",
                            unsafe_.join("; ")
                        ),
                    ));
                }
                let mut removed = Vec::new();
                for e in &to_remove {
                    let p = e.path.to_string_lossy().into_owned();
                    if e.path.is_dir() {
                        git.out(&r.root, &["worktree", "remove", &p])?;
                    }
                    removed.push(p);
                }
                git.out(&r.root, &["worktree", "prune"])?;
                close("remove", &removed);
                Ok(json!({"ok": true, "decision": "remove", "removed": removed}))
            }
            other => Err(GitError::refused(
                "invalid_decision",
                format!("decision must be remove or keep, not {other:?}"),
            )),
        }
    }
}
