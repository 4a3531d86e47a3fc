//! Linked worktrees (spec "repo — Worktree List/Remove"): the lifecycle inspection behind
//! `worktree_list`, `worktree_lifecycle` and removal; removal with its safety gates
//! (`force`, `expected_fingerprint`, `override_lock`, `delete_branch`). Creation is in
//! `create.rs`. Worktrees live beside the repository in `<repo>__wt/<branch>`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tuic_proto::events::Event;

pub(crate) use super::create::CreateRequest;

use super::branch::{self, Targets};
use super::{Git, GitError, RepoRef, Runner};

/// Where the warm-artifacts report of a worktree is kept, inside its Git admin directory (it
/// goes when the worktree goes).
pub(super) const WARM_FILE: &str = "tuic-warm-artifacts.json";

/// One entry of `git worktree list --porcelain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Checkout path as Git records it.
    pub path: PathBuf,
    /// HEAD commit (absent for an unborn branch).
    pub head: Option<String>,
    /// Branch name (absent when detached).
    pub branch: Option<String>,
    /// The main checkout (the first entry).
    pub main: bool,
    /// Lock reason (empty string for a lock without reason).
    pub locked: Option<String>,
    /// Git considers it prunable (its checkout is gone).
    pub prunable: bool,
}

/// The repository's worktrees, main checkout first.
pub(crate) fn entries(git: &Runner, root: &Path) -> Result<Vec<Entry>, GitError> {
    let out = git.out(root, &["worktree", "list", "--porcelain", "-z"])?;
    let mut v = Vec::new();
    let mut cur: Option<Entry> = None;
    for field in out.split('\0') {
        if field.is_empty() {
            if let Some(e) = cur.take() {
                v.push(e);
            }
            continue;
        }
        let (k, val) = field.split_once(' ').unwrap_or((field, ""));
        match k {
            "worktree" => {
                if let Some(e) = cur.take() {
                    v.push(e);
                }
                cur = Some(Entry {
                    path: PathBuf::from(val),
                    head: None,
                    branch: None,
                    main: v.is_empty(),
                    locked: None,
                    prunable: false,
                });
            }
            _ => {
                let Some(e) = cur.as_mut() else { continue };
                match k {
                    "HEAD" => e.head = Some(val.to_owned()),
                    "branch" => {
                        e.branch = Some(val.strip_prefix("refs/heads/").unwrap_or(val).to_owned())
                    }
                    "locked" => e.locked = Some(val.to_owned()),
                    "prunable" => e.prunable = true,
                    _ => {}
                }
            }
        }
    }
    if let Some(e) = cur.take() {
        v.push(e);
    }
    Ok(v)
}

/// The `<repo>__wt` directory beside a repository root.
pub(crate) fn worktrees_dir(root: &Path) -> PathBuf {
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "repo".into());
    root.with_file_name(format!("{name}__wt"))
}

/// The directory name a branch gets (`/` flattened so every worktree is one level deep).
pub(crate) fn dir_name(branch: &str) -> String {
    branch.replace('/', "-")
}

/// A worktree's lifecycle status (spec "repo — Worktree List").
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Lifecycle {
    /// Staged, unstaged, untracked and conflicted paths together.
    pub dirty_files: u64,
    /// Staged paths.
    pub staged: u64,
    /// Unstaged changes to tracked paths.
    pub unstaged: u64,
    /// Untracked paths.
    pub untracked: u64,
    /// Paths with unresolved conflicts.
    pub conflicted: u64,
    /// The checkout directory is gone (Git calls the worktree prunable).
    pub missing_checkout: bool,
    /// `merged`, `unmerged`, `in_sync` or `unknown`.
    pub commit_status: &'static str,
    /// `safe`, `requires_force` or `unknown`.
    pub removal_safety: &'static str,
    /// The worktree is locked (`git worktree lock`).
    pub locked: bool,
    /// The lock reason, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_reason: Option<String>,
    /// The integration proof, when merged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proof: Option<&'static str>,
    /// Own commits not in the default branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ahead: Option<u64>,
    /// HEAD commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// Binds a forced removal to this snapshot: sha256 of HEAD, checkout status and
    /// submodule refs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// Why inspection failed (the verdicts are then `unknown`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

pub(super) struct Status {
    staged: u64,
    unstaged: u64,
    untracked: u64,
    conflicted: u64,
    pub(super) raw: Vec<u8>,
}

pub(super) fn status(git: &Runner, wt: &Path) -> Result<Status, GitError> {
    let args = [
        "status",
        "--porcelain=v2",
        "-z",
        "--untracked-files=normal",
        "--ignore-submodules=none",
    ];
    let o = git.run(wt, &args)?;
    if !o.status.success() {
        return Err(super::failed(&args, &o));
    }
    let mut s = Status {
        staged: 0,
        unstaged: 0,
        untracked: 0,
        conflicted: 0,
        raw: o.stdout.clone(),
    };
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut fields = text.split('\0');
    while let Some(f) = fields.next() {
        let mut parts = f.splitn(3, ' ');
        match parts.next() {
            Some("1") | Some("2") => {
                let xy = parts.next().unwrap_or("..").as_bytes();
                if xy.first().is_some_and(|c| *c != b'.') {
                    s.staged += 1;
                }
                if xy.get(1).is_some_and(|c| *c != b'.') {
                    s.unstaged += 1;
                }
                if f.starts_with('2') {
                    // A rename carries its original path as the next field.
                    fields.next();
                }
            }
            Some("u") => s.conflicted += 1,
            Some("?") => s.untracked += 1,
            _ => {}
        }
    }
    Ok(s)
}

/// Initialized submodules of a checkout: `(path, HEAD)`.
fn submodules(git: &Runner, wt: &Path) -> Vec<(String, String)> {
    if !wt.join(".gitmodules").is_file() {
        return vec![];
    }
    git.out(wt, &["submodule", "status", "--recursive"])
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('-'))
        .filter_map(|l| {
            let mut p = l[1.min(l.len())..].split_whitespace();
            let sha = p.next()?.to_owned();
            Some((p.next()?.to_owned(), sha))
        })
        .collect()
}

/// Inspects one worktree (the function behind `lifecycle_status` and `worktree_lifecycle`).
/// Never fails: an error leaves `unknown` verdicts and sets `error`.
pub(crate) fn inspect(git: &Runner, root: &Path, e: &Entry, targets: &Targets) -> Lifecycle {
    let mut l = Lifecycle {
        dirty_files: 0,
        staged: 0,
        unstaged: 0,
        untracked: 0,
        conflicted: 0,
        missing_checkout: e.prunable || !e.path.is_dir(),
        commit_status: "unknown",
        removal_safety: "unknown",
        locked: e.locked.is_some(),
        lock_reason: e.locked.clone().filter(|r| !r.is_empty()),
        proof: None,
        ahead: None,
        head: e.head.clone(),
        fingerprint: None,
        error: None,
    };
    if l.missing_checkout {
        l.removal_safety = if l.locked { "requires_force" } else { "safe" };
        l.error = Some(format!("the checkout {} is missing", e.path.display()));
        return l;
    }
    let st = match status(git, &e.path) {
        Ok(s) => s,
        Err(err) => {
            l.error = Some(err.to_string());
            return l;
        }
    };
    l.staged = st.staged;
    l.unstaged = st.unstaged;
    l.untracked = st.untracked;
    // A path can be both staged and unstaged: each changed path counts once.
    l.dirty_files = count_paths(&st.raw);
    l.conflicted = st.conflicted;
    let subs = submodules(git, &e.path);
    let mut h = Sha256::new();
    h.update(e.head.as_deref().unwrap_or("unborn"));
    h.update([0]);
    h.update(&st.raw);
    h.update([0]);
    for (p, s) in &subs {
        h.update(format!("{p} {s}\n"));
    }
    l.fingerprint = Some(hex::encode(&h.finalize()[..16]));
    match (&e.branch, &e.head) {
        (Some(b), Some(tip)) => {
            let v = branch::classify(git, root, b, tip, targets, vec![]);
            l.commit_status = v.commit_status;
            l.proof = v.proof;
            l.ahead = v.ahead;
            if let Some(err) = v.error {
                l.error = Some(err);
            }
        }
        _ => {
            l.commit_status = "unknown";
            l.error = Some("detached HEAD: no branch to classify".into());
        }
    }
    l.removal_safety = if l.dirty_files > 0 || l.locked {
        "requires_force"
    } else {
        "safe"
    };
    l
}

pub(super) fn count_paths(raw: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(raw);
    let mut n = 0;
    let mut fields = text.split('\0');
    while let Some(f) = fields.next() {
        if f.starts_with("2 ") {
            fields.next();
        }
        if ["1 ", "2 ", "u ", "? "].iter().any(|p| f.starts_with(p)) {
            n += 1;
        }
    }
    n
}

/// Runs `f` over `items` on at most `bound` scoped threads, keeping the order. The threads are
/// the caller's own (already off the async workers), so a saturated blocking pool cannot
/// starve the fan-out that one of its threads waits for.
pub(crate) fn fan_out<T: Sync, R: Send>(
    items: &[T],
    bound: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    if items.len() <= 1 || bound <= 1 {
        return items.iter().map(&f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..bound.min(items.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(r);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}

fn kind(e: &Entry) -> &'static str {
    if e.main { "main" } else { "worktree" }
}

fn key_of(e: &Entry) -> String {
    e.branch
        .clone()
        .unwrap_or_else(|| e.path.to_string_lossy().into_owned())
}

/// A linked worktree's Git admin directory, from its `.git` file (no process), else Git.
pub(super) fn admin_dir(git: &Runner, wt: &Path) -> Option<PathBuf> {
    if let Ok(text) = std::fs::read_to_string(wt.join(".git"))
        && let Some(p) = text.trim().strip_prefix("gitdir: ")
    {
        let p = Path::new(p);
        return Some(if p.is_absolute() {
            p.to_path_buf()
        } else {
            wt.join(p)
        });
    }
    git.out(wt, &["rev-parse", "--absolute-git-dir"])
        .ok()
        .map(PathBuf::from)
}

pub(super) fn warm_report(git: &Runner, wt: &Path) -> Option<Value> {
    let bytes = std::fs::read(admin_dir(git, wt)?.join(WARM_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// One listed worktree with its lifecycle payload.
fn listed(git: &Runner, root: &Path, e: &Entry, targets: &Targets) -> Value {
    let mut v = json!({
        "branch": e.branch,
        "path": e.path.to_string_lossy(),
        "kind": kind(e),
        "lifecycle_status": inspect(git, root, e, targets),
    });
    if e.branch.is_none() {
        v.as_object_mut().unwrap().remove("branch");
    }
    if !e.main
        && e.path.is_dir()
        && let Some(w) = warm_report(git, &e.path)
    {
        v["warm_artifacts"] = w;
    }
    v
}

impl Git {
    /// `worktree_list`: every worktree of the repository keyed by branch (a detached one by its
    /// path), each with its lifecycle status, inspected concurrently within the git bound.
    pub(crate) fn list(&self, repo: &str) -> Result<Value, GitError> {
        let r = self.resolve_repo(repo)?;
        list_at(self, &r.root)
    }

    /// `worktree_lifecycle`: the fresh verdict of one branch's worktree, with its fingerprint.
    pub(crate) fn lifecycle(&self, repo: &str, branch: &str) -> Result<Value, GitError> {
        let r = self.resolve_repo(repo)?;
        let (e, _) = find_linked(self, &r, branch)?;
        let targets = Targets::resolve(self, &r.root);
        Ok(self.payload(&r, &e, &targets))
    }

    /// The worktree lifecycle payload shared by the events and `declare_worktree`.
    pub(crate) fn payload(&self, r: &RepoRef, e: &Entry, targets: &Targets) -> Value {
        let mut v = listed(self, &r.root, e, targets);
        v["repo_path"] = json!(r.key);
        v["worktree_path"] = json!(e.path.to_string_lossy());
        v["live_sessions"] = json!(self.sessions_inside(&e.path));
        v
    }

    /// Live sessions whose start directory or declared placement lies inside `dir`.
    pub(crate) fn sessions_inside(&self, dir: &Path) -> Vec<String> {
        self.env
            .sessions
            .rows()
            .into_iter()
            .filter(|r| {
                Path::new(&r.cwd).starts_with(dir)
                    || r.worktree_path
                        .as_deref()
                        .is_some_and(|p| Path::new(p).starts_with(dir))
            })
            .map(|r| r.session_id)
            .collect()
    }

    /// `worktree_remove`.
    pub(crate) fn remove(&self, req: &RemoveRequest) -> Result<Value, GitError> {
        let git = self;
        let r = self.resolve_repo(&req.repo)?;
        if req.branch.is_empty() {
            return Err(GitError::InvalidBranch("branch is required".into()));
        }
        let lock = git.repo_lock(&r.key);
        let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        let (e, es) = find_linked(git, &r, &req.branch)?;
        let targets = Targets::resolve(git, &r.root);
        let l = inspect(git, &r.root, &e, &targets);
        if req.force && req.expected_fingerprint.is_none() && !l.missing_checkout {
            return Err(GitError::refused(
                "fingerprint_required",
                "force=true needs expected_fingerprint from a fresh repo action=worktree_lifecycle, so only the state you saw is discarded",
            ));
        }
        if let Some(want) = &req.expected_fingerprint
            && l.fingerprint.as_deref() != Some(want.as_str())
        {
            return Err(GitError::refused(
                "stale_fingerprint",
                format!(
                    "the worktree of {} changed since the fingerprint {want} (now {}): its status, HEAD or a submodule ref moved; inspect it again",
                    req.branch,
                    l.fingerprint.as_deref().unwrap_or("unavailable")
                ),
            ));
        }
        if l.locked && !req.override_lock {
            return Err(GitError::refused(
                "locked",
                format!(
                    "the worktree {} is locked{}; removing it needs override_lock=true (confirmed by the user)",
                    e.path.display(),
                    l.lock_reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ),
            ));
        }
        if l.dirty_files > 0 && !req.force {
            return Err(GitError::refused(
                "dirty",
                format!(
                    "the worktree {} has {} changed path(s) ({} staged, {} unstaged, {} untracked); commit or stash them, or pass force=true with expected_fingerprint to discard them",
                    e.path.display(),
                    l.dirty_files,
                    l.staged,
                    l.unstaged,
                    l.untracked
                ),
            ));
        }
        let mut warnings = Vec::new();
        let live = self.sessions_inside(&e.path);
        if !live.is_empty() {
            warnings.push(format!(
                "{} live session(s) run inside the worktree: {}",
                live.len(),
                live.join(", ")
            ));
        }
        if l.commit_status == "unmerged" {
            warnings.push(format!(
                "branch {} has {} commit(s) not in {}",
                req.branch,
                l.ahead.unwrap_or(0),
                targets.default_name().unwrap_or("the default branch")
            ));
        }
        let ignored = if e.path.is_dir() {
            git.out(
                &e.path,
                &["status", "--porcelain", "--ignored=matching", "-z"],
            )
            .map(|s| s.split('\0').filter(|f| f.starts_with("!! ")).count())
            .unwrap_or(0)
        } else {
            0
        };
        if ignored > 0 {
            warnings.push(format!(
                "{ignored} ignored local file(s) or folder(s) are deleted with the worktree"
            ));
        }
        // Initialized submodule refs are kept in the parent repository before Git removes the
        // checkout that holds their only copy.
        let subs = if e.path.is_dir() {
            submodules(git, &e.path)
        } else {
            vec![]
        };
        let mut preserved = Vec::new();
        for (p, sha) in &subs {
            let name = format!(
                "refs/tuic/submodules/{}/{}",
                dir_name(&req.branch),
                p.trim_matches('/')
            );
            let root_s = r.root.to_string_lossy().into_owned();
            let pushed = git
                .ok(
                    &e.path.join(p),
                    &[
                        "push",
                        "--quiet",
                        "--no-verify",
                        &root_s,
                        &format!("{sha}:{name}"),
                    ],
                )
                .unwrap_or(false);
            if pushed {
                preserved.push(json!({"path": p, "commit": sha, "ref": name}));
            } else {
                warnings.push(format!("submodule {p} at {sha} could not be preserved"));
            }
        }
        let path = e.path.to_string_lossy().into_owned();
        let mut args = vec!["worktree", "remove"];
        if req.override_lock && l.locked {
            args.extend(["--force", "--force"]);
        } else if req.force || !subs.is_empty() || l.missing_checkout {
            args.push("--force");
        }
        args.push(&path);
        if l.missing_checkout {
            git.out(&r.root, &["worktree", "prune"])?;
            if entries(git, &r.root)?.iter().any(|x| x.path == e.path) {
                git.out(&r.root, &args)?;
            }
        } else {
            git.out(&r.root, &args)?;
        }
        let parent = worktrees_dir(&r.root);
        let _ = std::fs::remove_dir(&parent);
        self.forget_placements(&r, &path);
        let mut v =
            json!({"ok": true, "warnings": warnings, "worktree_path": path, "branch": req.branch});
        if !preserved.is_empty() {
            v["preserved_submodules"] = json!(preserved);
        }
        let delete_branch = req.delete_branch.unwrap_or(!req.force);
        if delete_branch {
            let checkouts: Vec<(String, Option<String>)> = es
                .iter()
                .filter(|x| x.path != e.path)
                .map(|x| (x.path.to_string_lossy().into_owned(), x.branch.clone()))
                .collect();
            match branch::delete(git, &r.root, &req.branch, false, &checkouts) {
                Ok(d) => {
                    v["branch_deleted"] = json!(true);
                    v["branch_delete"] = json!(d);
                }
                Err(err) => {
                    v["branch_deleted"] = json!(false);
                    v["branch_delete_warning"] = json!(format!(
                        "the worktree was removed but branch {} was kept: {err}",
                        req.branch
                    ));
                }
            }
        }
        self.env.bus.publish(Event::WorktreeRemoved(json!({
            "repo_path": r.key, "branch": req.branch, "worktree_path": path,
        })));
        Ok(v)
    }
}

/// [`list`] on a resolved root (the bench and tests call it directly).
pub(crate) fn list_at(git: &Runner, root: &Path) -> Result<Value, GitError> {
    let es = entries(git, root)?;
    let targets = Targets::resolve(git, root);
    let rows = fan_out(&es, super::GIT_CONCURRENCY, |e| {
        listed(git, root, e, &targets)
    });
    let mut m = serde_json::Map::new();
    for (e, v) in es.iter().zip(rows) {
        m.insert(key_of(e), v);
    }
    Ok(Value::Object(m))
}

/// The linked worktree of `branch` (never the main checkout).
fn find_linked(git: &Runner, r: &RepoRef, branch: &str) -> Result<(Entry, Vec<Entry>), GitError> {
    let es = entries(git, &r.root)?;
    match es.iter().find(|e| e.branch.as_deref() == Some(branch)) {
        Some(e) if e.main => Err(GitError::refused(
            "main_checkout",
            format!(
                "branch {branch} is checked out in the main checkout {}; only linked worktrees are managed here",
                r.key
            ),
        )),
        Some(e) => Ok((e.clone(), es)),
        None => Err(GitError::UnknownWorktree(format!(
            "no worktree of {} has branch {branch}; repo action=worktree_list shows them",
            r.key
        ))),
    }
}

/// A `worktree_remove` request.
#[derive(Debug, Clone, Default)]
pub(crate) struct RemoveRequest {
    /// The registered repository.
    pub repo: String,
    /// The branch whose linked worktree goes.
    pub branch: String,
    /// Discard staged, unstaged and untracked work (needs `expected_fingerprint`).
    pub force: bool,
    /// The lifecycle fingerprint the caller decided on.
    pub expected_fingerprint: Option<String>,
    /// Delete the branch afterwards (default: true, false when forced).
    pub delete_branch: Option<bool>,
    /// Remove a locked worktree (Git gets two `--force`).
    pub override_lock: bool,
}

pub(super) fn commit_of(git: &Runner, root: &Path, rev: &str) -> Option<String> {
    git.out(
        root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .ok()
    .filter(|s| !s.is_empty())
}
