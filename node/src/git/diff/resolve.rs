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
    let named = t.branch.as_deref().filter(|b| !b.is_empty());
    if let Some(b) = named
        && (b.starts_with('-') || b.contains(".."))
    {
        return Err(GitError::InvalidBranch(format!("branch {b} is not valid")));
    }
    // A base error is reported after the branch's own (the slow path), as before.
    let base = match t.base.as_deref().filter(|b| !b.is_empty()) {
        Some(b) if b.starts_with('-') => {
            Err(GitError::UnknownRef(format!("base {b} is not a ref")))
        }
        Some(b) => Ok((b.to_owned(), false)),
        None => view_default_branch(git, &root),
    };
    // The common case in one process: head, branch and the base's commit; the merge-base of
    // two commit ids is remembered. Anything missing takes the slow path below, which names it.
    if let Ok((base_ref, _)) = &base
        && let Some((dir, head, branch, checkout, base_commit)) =
            heads(git, &canon, &root, named, base_ref)
        && let Some(merge_base) = merge_base(git, &dir, &base_commit, &head)
    {
        return Ok(Resolved {
            dir,
            root,
            head,
            branch,
            base_ref: base_ref.clone(),
            merge_base,
            checkout,
        });
    }
    let (dir, head, branch, checkout) = match named {
        Some(b) => {
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
    // Slow path: one merge-base by name, then each piece on its own to name what is missing.
    let (mut base_ref, remembered) = base?;
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

/// Head, branch, the base's commit (and where git runs) in one `rev-parse`: for a named
/// branch its tip in the main checkout, else the checkout's `HEAD`. `None` when any is
/// missing (the slow path says which).
fn heads(
    git: &Git,
    canon: &Path,
    root: &Path,
    named: Option<&str>,
    base_ref: &str,
) -> Option<(std::path::PathBuf, String, Option<String>, bool, String)> {
    let base = format!("{base_ref}^{{commit}}");
    match named {
        Some(b) => {
            let tip = format!("refs/heads/{b}^{{commit}}");
            let out = git.out(root, &["rev-parse", &tip, &base]).ok()?;
            let mut it = out.lines();
            let head = it.next().filter(|h| h.len() >= 40)?.to_owned();
            let base = it.next().filter(|h| h.len() >= 40)?.to_owned();
            Some((root.to_owned(), head, Some(b.to_owned()), false, base))
        }
        None => {
            let out = git
                .out(
                    canon,
                    &[
                        "rev-parse",
                        "HEAD^{commit}",
                        &base,
                        "--symbolic-full-name",
                        "HEAD",
                    ],
                )
                .ok()?;
            let mut it = out.lines();
            let head = it.next().filter(|h| h.len() >= 40)?.to_owned();
            let base = it.next().filter(|h| h.len() >= 40)?.to_owned();
            let branch = it
                .next()
                .and_then(|r| r.strip_prefix("refs/heads/"))
                .map(str::to_owned);
            Some((canon.to_owned(), head, branch, true, base))
        }
    }
}

/// The merge-base of two commit ids (remembered: it never changes); `None` when they share
/// no history.
fn merge_base(git: &Git, dir: &Path, base: &str, head: &str) -> Option<String> {
    if base == head {
        return Some(head.to_owned());
    }
    if let Some(mb) = git.view_memo.merge_base(base, head) {
        return Some(mb);
    }
    let mb = git
        .out(dir, &["merge-base", base, head])
        .ok()
        .filter(|s| !s.is_empty())?;
    git.view_memo.put_merge_base(base, head, &mb);
    Some(mb)
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
