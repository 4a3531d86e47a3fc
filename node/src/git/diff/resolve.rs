//! Resolving a change view's target: the checkout or named branch, its head, the base and
//! their merge-base, in as few `git` processes as the common case allows (a slow path names
//! what is missing). It does not read any diff.

use std::path::Path;

use super::super::{GitError, Runner as Git, check_path};
use super::{DiffEnv, Resolved, Target};

fn unknown_ref(msg: String) -> GitError {
    GitError::UnknownRef(msg)
}

/// Resolves a target: the path must be a registered repository root or one of its linked
/// worktrees; a named branch must still exist; the base must exist.
pub(crate) fn resolve(env: DiffEnv<'_>, t: &Target) -> Result<Resolved, GitError> {
    let git = env.git;
    let p = check_path(&t.path, "path")?;
    let canon = p.canonicalize().map_err(|e| {
        GitError::InvalidPath(format!(
            "path {} does not exist (a worktree removed meanwhile?): {e}",
            t.path
        ))
    })?;
    let dot = canon.join(".git");
    let meta = std::fs::symlink_metadata(&dot).map_err(|_| {
        GitError::InvalidPath(format!(
            "path {} is not a worktree or repository root (no .git)",
            t.path
        ))
    })?;
    let root = if meta.is_dir() {
        canon.clone()
    } else {
        super::super::main_checkout_of_worktree(&canon)
            .and_then(|m| m.canonicalize().ok())
            .ok_or_else(|| {
                GitError::InvalidPath(format!(
                    "path {} is not a linked worktree of a repository",
                    t.path
                ))
            })?
    };
    if !env.roots.contains(&root) {
        return Err(GitError::NotRegistered(format!(
            "path {} does not belong to a registered repository; register it with repo action=add (POST /repos)",
            t.path
        )));
    }
    let verify = |dir: &Path, r: &str| -> Option<String> {
        git.out(
            dir,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &format!("{r}^{{commit}}"),
            ],
        )
        .ok()
        .filter(|s| !s.is_empty())
    };
    let (dir, head, branch, checkout) = match t.branch.as_deref().filter(|b| !b.is_empty()) {
        Some(b) => {
            if b.starts_with('-') || b.contains("..") {
                return Err(GitError::InvalidBranch(format!("branch {b} is not valid")));
            }
            let head = verify(&root, &format!("refs/heads/{b}")).ok_or_else(|| {
                unknown_ref(format!(
                    "branch {b} does not exist in {} (deleted meanwhile?)",
                    root.display()
                ))
            })?;
            (root.clone(), head, Some(b.to_owned()), false)
        }
        None => {
            if let Some((head, branch)) = head_and_branch(git, &canon) {
                (canon.clone(), head, branch, true)
            } else {
                let branch = git
                    .out(&canon, &["symbolic-ref", "--quiet", "--short", "HEAD"])
                    .ok()
                    .filter(|s| !s.is_empty());
                let head = verify(&canon, "HEAD").ok_or_else(|| {
                    unknown_ref(match &branch {
                        Some(b) => format!(
                            "the branch {b} of {} has no commit (deleted meanwhile?)",
                            canon.display()
                        ),
                        None => format!("{} has no HEAD commit", canon.display()),
                    })
                })?;
                (canon.clone(), head, branch, true)
            }
        }
    };
    let (mut base_ref, remembered) = match t.base.as_deref().filter(|b| !b.is_empty()) {
        Some(b) => {
            if b.starts_with('-') {
                return Err(GitError::UnknownRef(format!("base {b} is not a ref")));
            }
            (b.to_owned(), false)
        }
        None => view_default_branch(git, &root)?,
    };
    // One process for the common case; the slow path below names what is missing.
    if let Ok(mb) = git.out(
        &dir,
        &["merge-base", &format!("{base_ref}^{{commit}}"), &head],
    ) && !mb.is_empty()
    {
        return Ok(Resolved {
            dir,
            root,
            head,
            branch,
            base_ref,
            merge_base: mb,
            checkout,
        });
    }
    if remembered {
        // The remembered default branch may be gone: the rule again, then the slow path.
        forget_default(git, &root);
        base_ref = default_branch(git, &root)?;
    }
    let base_commit = verify(&dir, &base_ref).ok_or_else(|| {
        unknown_ref(format!(
            "base {base_ref} does not exist in {}",
            root.display()
        ))
    })?;
    let merge_base = if base_commit == head {
        head.clone()
    } else {
        git.out(&dir, &["merge-base", &base_commit, &head])
            .map_err(|_| {
                unknown_ref(format!(
                    "{} and {base_ref} share no history",
                    branch.as_deref().unwrap_or("HEAD")
                ))
            })?
    };
    Ok(Resolved {
        dir,
        root,
        head,
        branch,
        base_ref,
        merge_base,
        checkout,
    })
}

/// A checkout's `HEAD` commit and its branch (`None` when detached) in one process; `None`
/// when `HEAD` has no commit (the caller's slow path says why).
fn head_and_branch(git: &Git, dir: &Path) -> Option<(String, Option<String>)> {
    let out = git
        .out(
            dir,
            &["rev-parse", "HEAD^{commit}", "--symbolic-full-name", "HEAD"],
        )
        .ok()?;
    let mut it = out.lines();
    let head = it.next().filter(|h| h.len() >= 40)?.to_owned();
    let branch = it
        .next()
        .and_then(|r| r.strip_prefix("refs/heads/"))
        .map(str::to_owned);
    Some((head, branch))
}

/// The default branch for a view: the one a view found for `root` within
/// [`super::VIEW_DEFAULT_TTL`] (then `true`), else the rule afresh (remembered).
fn view_default_branch(git: &Git, root: &Path) -> Result<(String, bool), GitError> {
    let now = std::time::Instant::now();
    {
        let memo = git.view_defaults.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, b)) = memo.get(root)
            && now.duration_since(*at) < super::VIEW_DEFAULT_TTL
        {
            return Ok((b.clone(), true));
        }
    }
    let b = default_branch(git, root)?;
    let mut memo = git.view_defaults.lock().unwrap_or_else(|p| p.into_inner());
    if memo.len() >= super::VIEW_DEFAULTS_MAX {
        memo.clear();
    }
    memo.insert(root.to_owned(), (now, b.clone()));
    Ok((b, false))
}

fn forget_default(git: &Git, root: &Path) {
    git.view_defaults
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(root);
}

/// The default branch, by the git service's one rule ([`super::super::branch::default_branch`]).
pub(crate) fn default_branch(git: &Git, root: &Path) -> Result<String, GitError> {
    super::super::branch::default_branch(git, root)
        .map(|(b, _)| b)
        .ok_or_else(|| {
            unknown_ref(format!(
                "{} has no default branch (main, master, trunk or origin/HEAD); pass base",
                root.display()
            ))
        })
}
