//! Landing a worktree's branch on the default branch (issue 43): fast-forward, squash (one
//! commit whose tree is the branch's) or rebase-then-merge.
//!
//! Refused with a clear reason, before anything changes, when the worktree is dirty or
//! conflicted, when the default branch moved past the branch (`behind`: choose rebase), when
//! the default branch is checked out elsewhere with uncommitted changes, or when there is
//! nothing to land. The default branch moves by compare-and-swap (`update-ref NEW OLD`, or
//! `merge --ff-only` in the checkout that has it), so a commit that lands on it meanwhile is
//! never lost. Every landing is audited (`branch_landed`: who, from where, which commits).
//! The merge panel's state ([`state`]) carries the branch's integration proof.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::git::diff::{self, DiffEnv, Target};
use crate::git::{GitError, Runner as Git};

/// Commits named in an audit entry at most.
const AUDIT_COMMITS: usize = 50;

/// How to land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Fast-forward the default branch to the branch.
    Ff,
    /// One new commit on the default branch with the branch's tree.
    Squash,
    /// Rebase the branch onto the default branch, then fast-forward.
    Rebase,
}

impl Method {
    /// Parses `ff`, `squash`, `rebase`.
    pub fn parse(s: &str) -> Result<Self, GitError> {
        match s {
            "ff" | "fast-forward" | "fast_forward" => Ok(Self::Ff),
            "squash" => Ok(Self::Squash),
            "rebase" => Ok(Self::Rebase),
            o => Err(GitError::refused(
                "bad_request",
                format!("unknown merge method {o}; one of ff, squash, rebase"),
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Ff => "ff",
            Self::Squash => "squash",
            Self::Rebase => "rebase",
        }
    }
}

/// A landing request.
#[derive(Debug, Clone)]
pub struct LandRequest {
    /// The worktree whose branch lands.
    pub path: String,
    /// How.
    pub method: Method,
    /// The squash commit's message (default: the branch and its commit subjects).
    pub message: Option<String>,
}

struct Facts {
    dir: PathBuf,
    root: PathBuf,
    branch: String,
    default: String,
    head: String,
    old: String,
    ahead: u64,
    behind: u64,
    dirty: usize,
    conflicted: usize,
    /// Where the default branch is checked out, and whether that checkout is dirty.
    default_checkout: Option<(PathBuf, bool)>,
}

fn status_counts(git: &Git, dir: &Path) -> Result<(usize, usize), GitError> {
    let o = git.run(dir, &["status", "--porcelain", "-z"])?;
    if !o.status.success() {
        return Err(crate::git::failed(&["status"], &o));
    }
    let mut dirty = 0;
    let mut conflicted = 0;
    let mut skip = false;
    for f in o.stdout.split(|b| *b == 0) {
        if skip {
            skip = false;
            continue;
        }
        if f.len() < 3 {
            continue;
        }
        let xy = &f[..2];
        dirty += 1;
        if matches!(xy, b"UU" | b"AA" | b"DD" | b"AU" | b"UA" | b"DU" | b"UD") {
            conflicted += 1;
        }
        if xy[0] == b'R' || xy[0] == b'C' {
            skip = true;
        }
    }
    Ok((dirty, conflicted))
}

fn count(git: &Git, dir: &Path, range: &str) -> u64 {
    git.out(dir, &["rev-list", "--count", range])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn facts(git: &Git, roots: &[PathBuf], path: &str) -> Result<Facts, GitError> {
    let r = diff::resolve(
        DiffEnv { git, roots },
        &Target {
            path: path.to_owned(),
            branch: None,
            base: None,
        },
    )?;
    let branch = r.branch.clone().ok_or_else(|| {
        GitError::refused(
            "detached",
            format!(
                "{} has a detached HEAD; check out a branch to land it",
                r.dir.display()
            ),
        )
    })?;
    let default = r.base_ref.clone();
    let old = git.out(
        &r.root,
        &["rev-parse", "--verify", &format!("refs/heads/{default}")],
    )?;
    let (dirty, conflicted) = status_counts(git, &r.dir)?;
    let default_checkout = crate::git::worktree::entries(git, &r.root)?
        .into_iter()
        .find(|e| e.branch.as_deref() == Some(default.as_str()) && e.path.is_dir())
        .map(|e| {
            let d = status_counts(git, &e.path).map(|c| c.0 > 0).unwrap_or(true);
            (e.path, d)
        });
    Ok(Facts {
        ahead: count(git, &r.dir, &format!("{old}..{}", r.head)),
        behind: count(git, &r.dir, &format!("{}..{old}", r.head)),
        dir: r.dir,
        root: r.root,
        branch,
        default,
        head: r.head,
        old,
        dirty,
        conflicted,
        default_checkout,
    })
}

/// Why landing by `m` is refused now, if it is.
fn refusal(f: &Facts, m: Method) -> Option<GitError> {
    if f.branch == f.default {
        return Some(GitError::refused(
            "default_branch",
            format!("{} is the default branch itself", f.branch),
        ));
    }
    if f.conflicted > 0 {
        return Some(GitError::refused(
            "conflicted",
            format!(
                "the worktree {} has {} conflicted path(s); resolve them first",
                f.dir.display(),
                f.conflicted
            ),
        ));
    }
    if f.dirty > 0 {
        return Some(GitError::refused(
            "dirty",
            format!(
                "the worktree {} has {} uncommitted path(s); commit or stash them first",
                f.dir.display(),
                f.dirty
            ),
        ));
    }
    if let Some((p, true)) = &f.default_checkout {
        return Some(GitError::refused(
            "checked_out",
            format!(
                "{} is checked out in {} with uncommitted changes; landing would change files under them",
                f.default,
                p.display()
            ),
        ));
    }
    if f.ahead == 0 {
        return Some(GitError::refused(
            "nothing_to_land",
            format!("{} has no commits that {} lacks", f.branch, f.default),
        ));
    }
    if f.behind > 0 && m != Method::Rebase {
        return Some(GitError::refused(
            "behind",
            format!(
                "{} moved {} commit(s) since {} branched off; choose rebase (rebase-then-merge) to land on top of them",
                f.default, f.behind, f.branch
            ),
        ));
    }
    None
}

/// The merge panel: proof state and which operations are allowed now (with reasons).
pub fn state(git: &Git, roots: &[PathBuf], path: &str) -> Result<Value, GitError> {
    let f = facts(git, roots, path)?;
    let targets = crate::git::branch::Targets::resolve(git, &f.root);
    let proof = crate::git::branch::classify(
        git,
        &f.root,
        &f.branch,
        &f.head,
        &targets,
        vec![f.dir.to_string_lossy().into_owned()],
    );
    let op = |m: Method| match refusal(&f, m) {
        None => json!({"allowed": true}),
        Some(e) => json!({"allowed": false, "code": e.code(), "reason": e.to_string()}),
    };
    Ok(json!({
        "path": f.dir.to_string_lossy(),
        "repo": f.root.to_string_lossy(),
        "branch": f.branch,
        "default_branch": f.default,
        "head": f.head,
        "default_tip": f.old,
        "ahead": f.ahead,
        "behind": f.behind,
        "dirty": f.dirty,
        "conflicted": f.conflicted,
        "integration": proof,
        "operations": {"ff": op(Method::Ff), "squash": op(Method::Squash), "rebase": op(Method::Rebase)},
    }))
}

/// `-c user.name/-c user.email` when the repository has no identity (commit-tree and rebase
/// need one).
fn identity(git: &Git, dir: &Path) -> Vec<String> {
    let has = git
        .out(dir, &["config", "user.email"])
        .is_ok_and(|s| !s.is_empty());
    if has {
        vec![]
    } else {
        vec![
            "-c".into(),
            "user.name=tuic".into(),
            "-c".into(),
            "user.email=tuic@localhost".into(),
        ]
    }
}

fn run_with(git: &Git, dir: &Path, pre: &[String], args: &[&str]) -> Result<String, GitError> {
    let mut all: Vec<&str> = pre.iter().map(String::as_str).collect();
    all.extend_from_slice(args);
    git.out(dir, &all)
}

/// Lands the worktree's branch; audited as `branch_landed`.
pub fn land(
    git: &Git,
    roots: &[PathBuf],
    audit: &crate::audit::Audit,
    actor: &crate::audit::Actor,
    req: &LandRequest,
) -> Result<Value, GitError> {
    let mut f = facts(git, roots, &req.path)?;
    if let Some(e) = refusal(&f, req.method) {
        return Err(e);
    }
    let id = identity(git, &f.dir);
    if req.method == Method::Rebase && f.behind > 0 {
        if let Err(e) = run_with(git, &f.dir, &id, &["rebase", "--no-autostash", &f.old]) {
            let _ = git.run(&f.dir, &["rebase", "--abort"]);
            return Err(GitError::refused(
                "conflicted",
                format!(
                    "rebasing {} onto {} conflicts; nothing changed (rebase aborted): {e}",
                    f.branch, f.default
                ),
            ));
        }
        f.head = git.out(&f.dir, &["rev-parse", "HEAD"])?;
    }
    let commits: Vec<String> = git
        .out(
            &f.dir,
            &["rev-list", "--reverse", &format!("{}..{}", f.old, f.head)],
        )?
        .lines()
        .map(str::to_owned)
        .collect();
    let new = match req.method {
        Method::Ff | Method::Rebase => f.head.clone(),
        Method::Squash => {
            let message = match req
                .message
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
            {
                Some(m) => m.to_owned(),
                None => {
                    let subjects = git.out(
                        &f.dir,
                        &[
                            "log",
                            "--reverse",
                            "--format=- %s",
                            &format!("{}..{}", f.old, f.head),
                        ],
                    )?;
                    format!(
                        "Squash {} ({} commit{})\n\n{subjects}",
                        f.branch,
                        commits.len(),
                        if commits.len() == 1 { "" } else { "s" }
                    )
                }
            };
            let tree = git.out(&f.dir, &["rev-parse", &format!("{}^{{tree}}", f.head)])?;
            run_with(
                git,
                &f.dir,
                &id,
                &["commit-tree", &tree, "-p", &f.old, "-m", &message],
            )?
        }
    };
    let moved = |e: GitError| {
        GitError::refused(
            "ref_moved",
            format!(
                "{} moved while landing; nothing was overwritten, try again: {e}",
                f.default
            ),
        )
    };
    match &f.default_checkout {
        Some((p, _)) => {
            // The checkout that has the default branch moves with it, or not at all.
            let tip = git.out(p, &["rev-parse", "HEAD"])?;
            if tip != f.old {
                return Err(moved(GitError::Io(format!("{} is at {tip}", f.default))));
            }
            run_with(git, p, &id, &["merge", "--ff-only", "--quiet", &new]).map_err(moved)?;
        }
        None => {
            git.out(
                &f.root,
                &[
                    "update-ref",
                    "-m",
                    "tuic land",
                    &format!("refs/heads/{}", f.default),
                    &new,
                    &f.old,
                ],
            )
            .map_err(moved)?;
        }
    }
    audit.record_or_warn(
        crate::audit::Event::new("branch_landed", actor)
            .with("repo", f.root.to_string_lossy().into_owned())
            .with("branch", f.branch.clone())
            .with("default_branch", f.default.clone())
            .with("method", req.method.name())
            .with("from", f.old.clone())
            .with("to", new.clone())
            .with("commit_count", commits.len())
            .with(
                "commits",
                commits
                    .iter()
                    .take(AUDIT_COMMITS)
                    .cloned()
                    .collect::<Vec<_>>(),
            ),
    );
    Ok(json!({
        "ok": true,
        "method": req.method.name(),
        "branch": f.branch,
        "default_branch": f.default,
        "from": f.old,
        "to": new,
        "commits": commits,
        "worktree_path": f.dir.to_string_lossy(),
        "repo": f.root.to_string_lossy(),
        "next": "remove the worktree and branch with POST /worktrees/remove {path: repo, branch} (its safety gates apply)",
    }))
}
