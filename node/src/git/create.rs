//! `worktree_create` = `POST /worktrees` (spec "repo — Worktree Create"): base_repo
//! validation, branch naming, stale-worktree recovery, best-effort warming of Git-ignored
//! directories, the setup script, placement of the creator or the spawned shell, and the
//! `worktree-created` event. The Claude Code hint is the MCP adapter's.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tuic_proto::events::Event;

use super::worktree::{
    WARM_FILE, admin_dir, commit_of, dir_name, entries, warm_report, worktrees_dir,
};
use super::{Git, GitError, RepoRef, Runner};

/// Ignored directories copied into a new worktree at most.
pub(crate) const MAX_WARM_DIRS: usize = 64;
/// A Git-ignored directory is fully copied (where the filesystem cannot reflink) only up to
/// this size; bigger ones are skipped and reported, so creation stays fast.
pub(crate) const WARM_COPY_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// How long a worktree setup script may run.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(120);
/// Output kept from a setup script (its tail).
const SETUP_OUTPUT_TAIL: usize = 4096;
/// The setup script, relative to the new worktree.
pub(crate) const SETUP_SCRIPT: &str = ".tuic/worktree-setup.sh";
/// A `worktree_create` request (the same for MCP and `POST /worktrees`).
#[derive(Debug, Clone, Default)]
pub(crate) struct CreateRequest {
    /// The registered repository (`path` over MCP, `base_repo` over HTTP).
    pub repo: String,
    /// The branch to create or check out; generated when absent.
    pub branch: Option<String>,
    /// The commit-ish a new branch starts from (default: the repository's HEAD).
    pub base: Option<String>,
    /// Start a bare shell PTY in the new worktree.
    pub spawn_session: bool,
    /// The caller's bound identity (from the MCP binding, never from a request body).
    pub creator_session: Option<String>,
}

/// Validates a branch name with Git's own rule.
pub(crate) fn check_branch(git: &Runner, root: &Path, b: &str) -> Result<(), GitError> {
    if b.is_empty() || b.starts_with('-') || !git.ok(root, &["check-ref-format", "--branch", b])? {
        return Err(GitError::InvalidBranch(format!(
            "{b:?} is not a valid branch name (git check-ref-format --branch)"
        )));
    }
    Ok(())
}

impl Git {
    /// `worktree_create` = `POST /worktrees`.
    pub(crate) fn create(&self, req: &CreateRequest) -> Result<Value, GitError> {
        let git = self;
        let r = self.resolve_repo(&req.repo)?;
        let branch = match &req.branch {
            Some(b) => {
                check_branch(git, &r.root, b)?;
                b.clone()
            }
            None => generated_branch(git, &r.root),
        };
        let base_commit = match &req.base {
            Some(b) => {
                if b.starts_with('-') {
                    return Err(GitError::UnknownRef(format!("base {b:?} is not a ref")));
                }
                commit_of(git, &r.root, b).ok_or_else(|| {
                    GitError::UnknownRef(format!(
                        "base branch {b} does not exist in {}; nothing was created",
                        r.key
                    ))
                })?
            }
            None => commit_of(git, &r.root, "HEAD").ok_or_else(|| {
                GitError::UnknownRef(format!(
                    "{} has no commits yet: a worktree needs a base commit",
                    r.key
                ))
            })?,
        };
        let parent = worktrees_dir(&r.root);
        if let Ok(m) = std::fs::symlink_metadata(&parent)
            && !m.is_dir()
        {
            return Err(GitError::refused(
                "path_escape",
                format!(
                    "{} exists and is not a plain directory (a symlink would place worktrees outside the repository's parent)",
                    parent.display()
                ),
            ));
        }
        let target = parent.join(dir_name(&branch));
        let lock = git.repo_lock(&r.key);
        let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut es = entries(git, &r.root)?;
        // Stale-worktree recovery: a registration whose checkout is gone is pruned first.
        if es.iter().any(|e| e.prunable && e.locked.is_none()) {
            git.out(&r.root, &["worktree", "prune"])?;
            es = entries(git, &r.root)?;
        }
        if let Some(e) = es
            .iter()
            .find(|e| e.branch.as_deref() == Some(branch.as_str()))
        {
            if e.path == target && target.is_dir() {
                // A retry of the same creation answers the existing worktree.
                drop(guard);
                return self.finish(&r, &branch, &target, req, false, None, None);
            }
            return Err(GitError::refused(
                "checked_out",
                format!(
                    "branch {branch} is already checked out at {}",
                    e.path.display()
                ),
            ));
        }
        if let Some(e) = es.iter().find(|e| e.path == target) {
            return Err(GitError::refused(
                "path_exists",
                format!(
                    "{} is already the worktree of {}",
                    target.display(),
                    e.branch.as_deref().unwrap_or("a detached HEAD")
                ),
            ));
        }
        if target.exists() {
            // A leftover empty directory (a crashed earlier create) is recovered; content never is.
            let empty = std::fs::read_dir(&target)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
            if empty && std::fs::symlink_metadata(&target).is_ok_and(|m| m.is_dir()) {
                std::fs::remove_dir(&target).map_err(|e| GitError::Io(e.to_string()))?;
            } else {
                return Err(GitError::refused(
                    "path_exists",
                    format!(
                        "{} exists and is not a worktree; move it away first",
                        target.display()
                    ),
                ));
            }
        }
        let made_parent = !parent.exists();
        let exists = commit_of(git, &r.root, &format!("refs/heads/{branch}")).is_some();
        let t = target.to_string_lossy().into_owned();
        let res = if exists {
            git.out(&r.root, &["worktree", "add", "--quiet", &t, &branch])
        } else {
            git.out(
                &r.root,
                &[
                    "worktree",
                    "add",
                    "--quiet",
                    "-b",
                    &branch,
                    &t,
                    &base_commit,
                ],
            )
        };
        if let Err(e) = res {
            if made_parent {
                let _ = std::fs::remove_dir(&parent);
            }
            return Err(e);
        }
        drop(guard);
        let warm = warm_artifacts(git, &r.root, &target);
        let setup = run_setup(&target, &r.root);
        let mut v = self.finish(&r, &branch, &target, req, true, Some((warm, exists)), setup)?;
        if exists && let Some(b) = &req.base {
            v["warnings"] = json!([format!(
                "branch {branch} already existed and was checked out as it is; base {b} was not used"
            )]);
        }
        Ok(v)
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        r: &RepoRef,
        branch: &str,
        target: &Path,
        req: &CreateRequest,
        created: bool,
        fresh: Option<(Value, bool)>,
        setup: Option<Value>,
    ) -> Result<Value, GitError> {
        let path = target.to_string_lossy().into_owned();
        let head = commit_of(self, target, "HEAD");
        let warm = match &fresh {
            Some((w, _)) => w.clone(),
            None => warm_report(self, target).unwrap_or(json!({"warmed_directories": 0})),
        };
        let mut spawned = None;
        if created && req.spawn_session {
            let s = self
                .env
                .sessions
                .create(crate::session::CreateRequest {
                    cwd: Some(path.clone()),
                    ..Default::default()
                })
                .map_err(|e| {
                    GitError::Io(format!(
                        "the worktree was created but its shell did not start: {e}"
                    ))
                })?;
            spawned = Some(s);
        }
        // Only the creator, when it already works in this repository, moves into the new workspace.
        let creator_moves = req.creator_session.as_deref().and_then(|t| {
            let own = self.env.sessions.live(t)?;
            Path::new(&own.cwd).starts_with(&r.root).then_some(t)
        });
        if created
            && !req.spawn_session
            && let Some(t) = creator_moves
        {
            let _ = self.record_placement(r, t, &path, Some(branch));
        }
        if let Some(s) = &spawned {
            let _ = self.record_placement(r, &s.tuic_session, &path, Some(branch));
        }
        let mut v = json!({
            "ok": true,
            "created": created,
            "worktree_path": path,
            "branch": branch,
            "workspace_id": branch,
            "base_repo": r.key,
            "head": head,
            "spawn_session": req.spawn_session,
            "warm_artifacts": warm,
            "instructions": {
                "cd": format!("cd {path}"),
                "note": "Work in the worktree with absolute paths; Git refs and objects are shared with the parent repository, the parent's uncommitted changes are not copied.",
                "warm_artifacts": warm,
            },
        });
        if let Some((_, existed)) = fresh {
            v["branch_existed"] = json!(existed);
        }
        if let Some(s) = setup {
            v["setup_script"] = s;
        }
        if let Some(s) = &spawned {
            v["session_id"] = json!(s.id);
            v["tuic_session"] = json!(s.tuic_session);
        }
        if created {
            let mut ev = json!({
                "repo_path": r.key,
                "branch": branch,
                "worktree_path": path,
                "kind": "worktree",
                "spawn_session": req.spawn_session,
            });
            if let Some(c) = &req.creator_session {
                ev["creator_session"] = json!(c);
            }
            if let Some(s) = &spawned {
                ev["session_id"] = json!(s.id);
            }
            self.env.bus.publish(Event::WorktreeCreated(ev));
        }
        Ok(v)
    }
}

fn generated_branch(git: &Runner, root: &Path) -> String {
    loop {
        let b = format!("wt-{:06x}", rand::random::<u32>() & 0xff_ffff);
        if commit_of(git, root, &format!("refs/heads/{b}")).is_none() {
            return b;
        }
    }
}

/// Copies the parent checkout's Git-ignored directories into the new worktree, reflinking where
/// the filesystem can (`cp --reflink=auto`), best effort and bounded. Tracked changes are never
/// copied. The report is kept in the worktree's Git admin directory for `worktree_list`.
fn warm_artifacts(git: &Runner, root: &Path, wt: &Path) -> Value {
    let listed = git
        .out(
            root,
            &[
                "ls-files",
                "--others",
                "--ignored",
                "--exclude-standard",
                "--directory",
                "-z",
            ],
        )
        .unwrap_or_default();
    let mut reflinked = 0u64;
    let mut copied = 0u64;
    let mut skipped = Vec::new();
    let root_dir = crate::beneath::open_root(root).ok();
    let wt_dir = crate::beneath::open_root(wt).ok();
    let cp = |mode: &str, src: &Path, dst: &Path| {
        std::process::Command::new("cp")
            .args(["-a", mode])
            .arg(src)
            .arg(dst)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success())
    };
    for rel in listed
        .split('\0')
        .filter(|p| p.ends_with('/'))
        .map(|p| p.trim_end_matches('/'))
        .filter(|p| !p.is_empty() && !p.split('/').any(|c| c == ".." || c == ".git"))
        .take(MAX_WARM_DIRS)
    {
        let src = root.join(rel);
        let dst = wt.join(rel);
        // Both ends resolved beneath their checkouts: the new worktree is a checkout of a
        // branch that may track a symlink where the parent has an ignored directory
        // (`sub -> /anywhere`), and copying through it would write outside the worktree.
        let (Some(from), Some(into)) = (root_dir.as_ref(), wt_dir.as_ref()) else {
            break;
        };
        let plain_dir = from.symlink_metadata(rel).is_ok_and(|m| m.is_dir());
        if !plain_dir {
            continue;
        }
        match into.symlink_metadata(rel) {
            Ok(_) => continue,
            Err(e) if crate::beneath::is_escape(&e) => {
                skipped.push(rel.to_owned());
                continue;
            }
            Err(_) => {}
        }
        // Parents are created beneath the worktree; one that is (or passes through) a symlink
        // out of it is refused here, so `cp` below only ever writes inside the worktree. No
        // one else writes to the worktree yet: it was created under the lock and is handed
        // out only after warming.
        if let Some(p) = Path::new(rel)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            && into.create_dir_all(p).is_err()
        {
            skipped.push(rel.to_owned());
            continue;
        }
        // Copy-on-write first; a full copy only for directories small enough not to turn a
        // worktree creation into a disk-filling minutes-long copy.
        if cp("--reflink=always", &src, &dst) {
            reflinked += 1;
            continue;
        }
        let _ = std::fs::remove_dir_all(&dst);
        if tree_size_within(&src, WARM_COPY_MAX_BYTES) && cp("--reflink=never", &src, &dst) {
            copied += 1;
        } else {
            let _ = std::fs::remove_dir_all(&dst);
            skipped.push(rel.to_owned());
        }
    }
    let mut v = json!({
        "warmed_directories": reflinked + copied,
        "reflinked": reflinked,
        "copied": copied,
    });
    if !skipped.is_empty() {
        v["skipped"] = json!(skipped);
    }
    if let Some(dir) = admin_dir(git, wt) {
        let _ = std::fs::write(dir.join(WARM_FILE), v.to_string());
    }
    v
}

/// Whether the regular files under `dir` (symlinks not followed) total at most `max` bytes;
/// the walk stops as soon as the bound is passed.
pub(super) fn tree_size_within(dir: &Path, max: u64) -> bool {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                total += m.len();
                if total > max {
                    return false;
                }
            }
        }
    }
    true
}

/// Runs the worktree's `.tuic/worktree-setup.sh`, if it has one, bounded in time; its result
/// is reported, never fatal (the worktree exists either way).
fn run_setup(wt: &Path, root: &Path) -> Option<Value> {
    let script = wt.join(SETUP_SCRIPT);
    if !script.is_file() {
        return None;
    }
    let child = std::process::Command::new("sh")
        .arg(&script)
        .current_dir(wt)
        .env("TUIC_WORKTREE_PATH", wt)
        .env("TUIC_BASE_REPO", root)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            return Some(json!({"ran": false, "script": SETUP_SCRIPT, "error": e.to_string()}));
        }
    };
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(SETUP_TIMEOUT) {
        Ok(o) => o,
        Err(_) => {
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            return Some(
                json!({"ran": true, "script": SETUP_SCRIPT, "ok": false, "timed_out": true,
                               "timeout_secs": SETUP_TIMEOUT.as_secs()}),
            );
        }
    };
    Some(match out {
        Ok(o) => {
            let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&o.stderr));
            let tail: String = {
                let start = text.len().saturating_sub(SETUP_OUTPUT_TAIL);
                let mut s = start;
                while !text.is_char_boundary(s) {
                    s += 1;
                }
                text[s..].to_owned()
            };
            json!({"ran": true, "script": SETUP_SCRIPT, "ok": o.status.success(),
                   "exit_code": o.status.code(), "output_tail": tail})
        }
        Err(e) => json!({"ran": false, "script": SETUP_SCRIPT, "error": e.to_string()}),
    })
}
