//! Registered repositories: the roots this node serves files from and copies into.
//!
//! `add` resolves a canonical absolute directory, reads real metadata (Git through the `git`
//! CLI; a non-Git directory is a shell workspace), persists the record in the store under the
//! registry lock, broadcasts `repositories-changed`, then starts a watcher. A repeat keeps the
//! existing record. It deliberately does not run git work on async workers: every call here is
//! blocking and async callers use `spawn_blocking`. The records are this module's own table in
//! the node's store (`repositories`); `crate::store` only opens the database.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use tuic_proto::events::Event;

use crate::events::Bus;
use crate::store::Store;

/// Repositories: canonical path → JSON record.
const REPOS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("repositories");

/// One registered repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repo {
    /// Canonical absolute path; the record's key and the root it grants.
    pub path: String,
    /// Directory name, for display.
    pub name: String,
    /// `git` or `shell`.
    pub kind: String,
    /// Current branch (Git only; absent when detached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Remotes (Git only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remotes: Vec<Remote>,
    /// When it was first registered, unix ms.
    pub added_ms: u64,
    /// Agent-declared worktree placement (`session action=declare_worktree`): the stable
    /// `TUIC_SESSION` of a tab → the linked worktree it belongs to. Written only through
    /// [`Repos::update`], under the registry lock.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub declared_worktrees: BTreeMap<String, DeclaredWorktree>,
}

/// One declared placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredWorktree {
    /// Canonical worktree path.
    pub worktree_path: String,
    /// Its branch when declared (absent when detached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree_branch: Option<String>,
}

/// A Git remote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remote {
    /// Remote name (`origin`).
    pub name: String,
    /// Fetch URL, with any credentials stripped.
    pub url: String,
}

/// What `add` did.
#[derive(Debug, Clone, Serialize)]
pub struct AddOutcome {
    /// The record (existing or new).
    pub repo: Repo,
    /// Whether this call created it.
    pub created: bool,
    /// A watcher failure, reported beside the success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// Why `add` failed.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    /// Not absolute, missing, or not a directory.
    #[error("invalid repository path: {0}")]
    InvalidPath(String),
    /// The store refused the write.
    #[error("could not persist the repository: {0:#}")]
    Persist(anyhow::Error),
}

/// The repository records in the store (the registry's own table).
#[derive(Debug, Clone)]
struct Table(Arc<Store>);

impl Table {
    /// All repositories, ordered by path.
    fn all(&self) -> anyhow::Result<Vec<Repo>> {
        let tx = self.0.database().begin_read()?;
        let t = tx.open_table(REPOS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (_, v) = row?;
            out.push(serde_json::from_slice(v.value())?);
        }
        Ok(out)
    }

    /// One repository by canonical path.
    fn get(&self, path: &str) -> anyhow::Result<Option<Repo>> {
        let tx = self.0.database().begin_read()?;
        let t = tx.open_table(REPOS)?;
        Ok(match t.get(path)? {
            Some(v) => Some(serde_json::from_slice(v.value())?),
            None => None,
        })
    }

    /// Inserts or replaces a repository record.
    fn put(&self, repo: &Repo) -> anyhow::Result<()> {
        let bytes = serde_json::to_vec(repo)?;
        let tx = self.0.database().begin_write()?;
        tx.open_table(REPOS)?
            .insert(repo.path.as_str(), bytes.as_slice())?;
        tx.commit()?;
        Ok(())
    }
}

/// The registry of repositories.
pub struct Repos {
    table: Table,
    /// Serializes read-modify-write of the registry (the spec's repositories lock); shared with
    /// the HEAD watchers, which rewrite records too.
    lock: Arc<Mutex<()>>,
    /// Running watchers by repository path; dropping one stops it.
    watchers: Mutex<HashMap<String, notify::RecommendedWatcher>>,
    /// Metadata re-reads the watchers ran (each forks three `git` processes).
    metadata_reads: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Repos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repos").finish_non_exhaustive()
    }
}

impl Repos {
    /// The registry over `store`, creating its table when missing.
    pub fn open(store: Arc<Store>) -> anyhow::Result<Self> {
        let tx = store.database().begin_write()?;
        tx.open_table(REPOS)?;
        tx.commit()?;
        Ok(Self {
            table: Table(store),
            lock: Arc::new(Mutex::new(())),
            watchers: Mutex::new(HashMap::new()),
            metadata_reads: Arc::default(),
        })
    }

    /// All registered repositories, by path.
    pub fn list(&self) -> anyhow::Result<Vec<Repo>> {
        self.table.all()
    }

    /// The canonical roots that gate file routes.
    pub fn roots(&self) -> Vec<PathBuf> {
        self.list()
            .unwrap_or_default()
            .into_iter()
            .map(|r| PathBuf::from(r.path))
            .collect()
    }

    /// Whether `path` is exactly a registered root.
    pub fn is_root(&self, path: &Path) -> bool {
        self.roots().iter().any(|r| r == path)
    }

    /// Applies `f` to one record under the registry lock and persists it (the locked
    /// repository delta: a concurrent edit of another field is never overwritten). `None`
    /// when no repository has that key.
    pub fn update<R>(
        &self,
        key: &str,
        f: impl FnOnce(&mut Repo) -> R,
    ) -> anyhow::Result<Option<R>> {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let Some(mut repo) = self.table.get(key)? else {
            return Ok(None);
        };
        let before = repo.clone();
        let r = f(&mut repo);
        if repo != before {
            self.table.put(&repo)?;
        }
        Ok(Some(r))
    }

    /// Registers `path` (blocking). Idempotent.
    pub fn add(&self, path: &str, bus: &Bus, now_ms: u64) -> Result<AddOutcome, AddError> {
        let raw = Path::new(path);
        if path.contains('\0') || !raw.is_absolute() {
            return Err(AddError::InvalidPath(format!(
                "{path} is not an absolute path"
            )));
        }
        let canon = raw
            .canonicalize()
            .map_err(|e| AddError::InvalidPath(format!("{path}: {e}")))?;
        if !canon.is_dir() {
            return Err(AddError::InvalidPath(format!(
                "{} is not a directory",
                canon.display()
            )));
        }
        let key = canon.to_string_lossy().into_owned();
        let (repo, created) = {
            let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            match self.table.get(&key).map_err(AddError::Persist)? {
                Some(existing) => (existing, false),
                None => {
                    let repo = read_metadata(&canon, now_ms);
                    self.table.put(&repo).map_err(AddError::Persist)?;
                    (repo, true)
                }
            }
        };
        if created {
            bus.publish(Event::RepositoriesChanged {
                repos: serde_json::json!([repo.path]),
            });
        }
        let warning = self
            .watch(&canon)
            .err()
            .map(|e| format!("repository watcher not started: {e}"));
        Ok(AddOutcome {
            repo,
            created,
            warning,
        })
    }

    /// Starts (once) a watcher on the repository's Git HEAD, so branch switches are seen.
    fn watch(&self, root: &Path) -> Result<(), String> {
        use notify::Watcher;
        let key = root.to_string_lossy().into_owned();
        let mut w = self.watchers.lock().unwrap_or_else(|p| p.into_inner());
        if w.contains_key(&key) {
            return Ok(());
        }
        let table = self.table.clone();
        let lock = self.lock.clone();
        let root_owned = root.to_path_buf();
        let reads = self.metadata_reads.clone();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            // Only a write of HEAD (a branch switch) or config (remotes) changes what the
            // record holds; everything else Git writes under `.git` (index, refs, worktrees)
            // would only fork `git` for nothing. Reads are not changes: every `git` command
            // opens HEAD and config, and reacting to those opens made each git command in the
            // repository (the change views', the metadata read's own) fork three more.
            let relevant = res.as_ref().is_ok_and(|ev| {
                !matches!(ev.kind, notify::EventKind::Access(_))
                    && ev
                        .paths
                        .iter()
                        .any(|p| p.file_name().is_some_and(|n| n == "HEAD" || n == "config"))
            });
            if !relevant {
                return;
            }
            let key = root_owned.to_string_lossy();
            let Ok(Some(seen)) = table.get(&key) else {
                return;
            };
            // Git runs outside the lock; the write re-reads under it, so a declaration made
            // meanwhile is kept.
            reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let fresh = read_metadata(&root_owned, seen.added_ms);
            let _g = lock.lock().unwrap_or_else(|p| p.into_inner());
            if let Ok(Some(mut repo)) = table.get(&key)
                && (fresh.branch != repo.branch || fresh.remotes != repo.remotes)
            {
                repo.branch = fresh.branch;
                repo.remotes = fresh.remotes;
                let _ = table.put(&repo);
            }
        })
        .map_err(|e| e.to_string())?;
        let git_dir = root.join(".git");
        let target = if git_dir.is_dir() {
            git_dir
        } else {
            root.to_path_buf()
        };
        watcher
            .watch(&target, notify::RecursiveMode::NonRecursive)
            .map_err(|e| e.to_string())?;
        w.insert(key, watcher);
        Ok(())
    }
}

/// Reads Git metadata with the `git` CLI; anything that is not a work tree root is a shell
/// workspace.
fn read_metadata(root: &Path, now_ms: u64) -> Repo {
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".into());
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let top = git(&["rev-parse", "--show-toplevel"]).map(PathBuf::from);
    let is_git = top
        .and_then(|t| t.canonicalize().ok())
        .is_some_and(|t| t == root);
    if !is_git {
        return Repo {
            path: root.to_string_lossy().into_owned(),
            name,
            kind: "shell".into(),
            branch: None,
            remotes: vec![],
            added_ms: now_ms,
            declared_worktrees: BTreeMap::new(),
        };
    }
    let branch = git(&["symbolic-ref", "--quiet", "--short", "HEAD"]).filter(|b| !b.is_empty());
    let remotes = git(&["remote", "-v"])
        .unwrap_or_default()
        .lines()
        .filter(|l| l.ends_with("(fetch)"))
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            Some(Remote {
                name: parts.next()?.to_owned(),
                url: strip_credentials(parts.next()?),
            })
        })
        .collect();
    Repo {
        path: root.to_string_lossy().into_owned(),
        name,
        kind: "git".into(),
        branch,
        remotes,
        added_ms: now_ms,
        declared_worktrees: BTreeMap::new(),
    }
}

/// Removes `user:pass@` from a URL so a remote's credentials never leave the node.
fn strip_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://{host}{path}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn add_is_idempotent_reads_git_and_rejects_bad_paths() {
        let d = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&d.path().join("s.redb")).unwrap());
        let repos = Repos::open(store).unwrap();
        let bus = Bus::default();
        let mut rx = bus.subscribe();

        let work = tempfile::tempdir().unwrap();
        git(work.path(), &["init", "-q", "-b", "trunk"]);
        git(
            work.path(),
            &[
                "remote",
                "add",
                "origin",
                "https://user:secret@example.com/r.git",
            ],
        );
        let p = work.path().to_str().unwrap();
        let first = repos.add(p, &bus, 1).unwrap();
        assert!(first.created);
        assert_eq!(first.repo.kind, "git");
        assert_eq!(first.repo.branch.as_deref(), Some("trunk"));
        assert_eq!(first.repo.remotes[0].url, "https://example.com/r.git");
        assert!(rx.try_recv().is_ok(), "repositories-changed published");
        let again = repos.add(&format!("{p}/."), &bus, 2).unwrap();
        assert!(!again.created);
        assert_eq!(again.repo.added_ms, 1);
        assert!(rx.try_recv().is_err(), "a repeat publishes nothing");

        let shell = tempfile::tempdir().unwrap();
        assert_eq!(
            repos
                .add(shell.path().to_str().unwrap(), &bus, 3)
                .unwrap()
                .repo
                .kind,
            "shell"
        );
        assert_eq!(repos.list().unwrap().len(), 2);

        assert!(matches!(
            repos.add("relative/dir", &bus, 4),
            Err(AddError::InvalidPath(_))
        ));
        assert!(matches!(
            repos.add("/definitely/not/here", &bus, 4),
            Err(AddError::InvalidPath(_))
        ));
        let file = work.path().join("f");
        std::fs::write(&file, "x").unwrap();
        assert!(matches!(
            repos.add(file.to_str().unwrap(), &bus, 4),
            Err(AddError::InvalidPath(_))
        ));
    }

    /// Git commands that only read (every one opens HEAD and config) cause no metadata
    /// re-read; a branch switch does.
    #[test]
    fn git_reads_in_a_repository_fork_no_metadata_reads() {
        let d = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&d.path().join("s.redb")).unwrap());
        let repos = Repos::open(store).unwrap();
        let bus = Bus::default();
        let work = tempfile::tempdir().unwrap();
        git(work.path(), &["init", "-q", "-b", "trunk"]);
        git(
            work.path(),
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@e",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "x",
            ],
        );
        let p = work.path().to_str().unwrap();
        repos.add(p, &bus, 1).unwrap();
        for _ in 0..20 {
            git(work.path(), &["rev-parse", "HEAD"]);
            git(work.path(), &["remote", "-v"]);
        }
        // The switch comes after the reads on the watcher's one ordered event stream: once
        // the record shows it, every earlier event has been handled.
        git(work.path(), &["checkout", "-q", "-b", "other"]);
        let key = work
            .path()
            .canonicalize()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while repos
            .table
            .get(&key)
            .unwrap()
            .and_then(|r| r.branch)
            .as_deref()
            != Some("other")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the branch switch never showed"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let reads = repos
            .metadata_reads
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            (1..=4).contains(&reads),
            "{reads} metadata reads for 40 git reads and one switch"
        );
    }

    #[test]
    fn credentials_are_stripped() {
        assert_eq!(strip_credentials("https://u:p@h/x"), "https://h/x");
        assert_eq!(
            strip_credentials("git@github.com:a/b.git"),
            "git@github.com:a/b.git"
        );
        assert_eq!(strip_credentials("https://h/x@y"), "https://h/x@y");
    }
}
