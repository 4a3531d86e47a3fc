//! The session registry: creates sessions, names them by their three addresses (PTY id,
//! `tuic_session`, alias), and keeps an exit tombstone that outlives the live entry.
//!
//! It publishes the lifecycle events on its environment's bus (`env::SessionEnv`, handed in
//! by the composition root). It does not serve HTTP.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde::Deserialize;
use tuic_proto::events::Event;

use super::alias::{self, Aliases};
use super::capture::{Capture, CaptureDir};
use super::env::SessionEnv;
use super::held::{self, AdoptError, HolderConfig};
use super::pty::{self, Spawn};
use super::{Session, SessionRow};

/// `POST /sessions` body.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// Rows (default 24).
    pub rows: Option<u16>,
    /// Columns (default 80).
    pub cols: Option<u16>,
    /// Program (default `$SHELL`, else `/bin/sh`).
    pub shell: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Working directory (default the node's home directory).
    pub cwd: Option<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: HashMap<String, String>,
    /// Display name.
    pub name: Option<String>,
    /// An alias to restore (kept only when well-formed and free).
    pub alias: Option<String>,
    /// A one-off command (`tuic run`): no alias is assigned, so it uses up no alias number;
    /// its row omits `alias` and it answers to its PTY id and `tuic_session`.
    #[serde(default)]
    pub no_alias: bool,
    /// The program's stderr goes to a file of its own instead of the terminal
    /// (`GET /sessions/{id}/stderr` reads it; `tuic run` asks for it so a script gets stdout
    /// and stderr apart). The program then sees a file, not a terminal, on fd 2.
    #[serde(default)]
    pub separate_stderr: bool,
    /// A stable identity to restore (a tab persisted it): kept only when it is a UUID no live
    /// session holds, else a fresh one is minted.
    #[serde(default)]
    pub tuic_session: Option<String>,
    /// The name was assigned by a spawning agent (`agent action=spawn`), not a person.
    #[serde(skip)]
    pub name_from_spawn: bool,
    /// The spawning agent's registered identity; set by `agent action=spawn` only, never
    /// from a request body.
    #[serde(skip)]
    pub parent_session: Option<String>,
}

/// Why a session was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The request is invalid (cwd, name).
    #[error("{0}")]
    Invalid(String),
    /// A size over the caps or the node's cell budget (`budget`).
    #[error("{0}")]
    Size(#[from] super::budget::SizeError),
    /// The process could not be started.
    #[error("starting the process: {0:#}")]
    Spawn(anyhow::Error),
}

#[derive(Debug, Default)]
struct Inner {
    live: HashMap<String, Arc<Session>>,
    by_tuic: HashMap<String, String>,
    by_alias: HashMap<String, String>,
    aliases: Aliases,
    /// Exited sessions whose buffers still answer output routes.
    tombstones: HashMap<String, Arc<Session>>,
}

/// All sessions of this node.
#[derive(Debug)]
pub struct Registry {
    inner: RwLock<Inner>,
    /// The raw capture tap.
    pub capture: Arc<Capture>,
    /// The runtime that expires tombstones (waiter threads run outside it).
    rt: std::sync::OnceLock<tokio::runtime::Handle>,
    /// Starts the state monitor with the first session.
    monitor: std::sync::Once,
    /// Bumped after each monitor round (every live session probed).
    ticks: tokio::sync::watch::Sender<u64>,
    /// Sessions created since start (`/metrics`, `/stats`).
    created: AtomicU64,
    /// Condition checks by `session action=wait` (see `submit::Waited::checks`).
    wait_checks: AtomicU64,
    /// PTY output bytes of sessions that left the live table (their totals are final).
    ended_output: AtomicU64,
    /// Declared worktree placement by stable identity (`crate::git::placement` keeps it in
    /// the repository records and mirrors it here): `tuic_session` → (path, branch). Keyed by
    /// identity, not PTY, so a session restored with its `tuic_session` shows it again.
    placements: RwLock<HashMap<String, (String, Option<String>)>>,
    /// Set by the node binary: sessions are started under holder processes (`held`), so they
    /// survive a restart of the node. Unset (tests in this crate), this process opens PTYs.
    holders: std::sync::OnceLock<HolderConfig>,
    /// What the registry uses of its node: bus, tasks, shutdown, child environment, tuning.
    env: SessionEnv,
    /// The local rows as the list last served them, with revisions (`GET /sessions?since=`):
    /// diffed against the rows at each list, which costs this host's own sessions only.
    pub feed: std::sync::Mutex<super::feed::RowFeed>,
}

/// Counts of the registry for `/stats` and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegistryStats {
    /// Live sessions.
    pub live: usize,
    /// Exited sessions in their tombstone period.
    pub tombstoned: usize,
    /// Sessions created since start.
    pub created_total: u64,
    /// Bytes read from every PTY since start (live sessions' totals plus ended ones').
    pub output_bytes_total: u64,
    /// Condition checks by `session action=wait` since start.
    pub wait_checks_total: u64,
}

impl Registry {
    /// An empty registry in `env`. Reads `TUIC_CAPTURE_DIR` once, here.
    pub fn new(config_dir: &Path, env: SessionEnv) -> Self {
        let capture_dir = std::env::var("TUIC_CAPTURE_DIR").ok();
        Self {
            inner: RwLock::default(),
            capture: Arc::new(Capture::new(CaptureDir::resolve(
                capture_dir.as_deref(),
                config_dir,
            ))),
            rt: std::sync::OnceLock::new(),
            monitor: std::sync::Once::new(),
            ticks: tokio::sync::watch::Sender::new(0),
            created: AtomicU64::new(0),
            wait_checks: AtomicU64::new(0),
            ended_output: AtomicU64::new(0),
            placements: RwLock::default(),
            holders: std::sync::OnceLock::new(),
            env,
            feed: std::sync::Mutex::new(super::feed::RowFeed::stamped(super::now_ms())),
        }
    }

    /// The environment the registry runs in.
    pub fn env(&self) -> &SessionEnv {
        &self.env
    }

    /// Starts every later session under a holder process (the node binary calls this once).
    pub fn use_holders(&self, cfg: HolderConfig) {
        let _ = self.holders.set(cfg);
    }

    /// Sets (or with `None` clears) the declared worktree placement of an identity.
    pub fn set_placement(&self, tuic_session: &str, placement: Option<(String, Option<String>)>) {
        let mut g = self.placements.write().unwrap_or_else(|p| p.into_inner());
        match placement {
            Some(p) => {
                g.insert(tuic_session.to_owned(), p);
            }
            None => {
                g.remove(tuic_session);
            }
        }
    }

    /// One session's row observed now (a fresh probe; blocking) with its declared placement,
    /// as `GET /sessions` lists it.
    pub fn placed_row(&self, s: &Session) -> SessionRow {
        let mut r = s.row();
        if let Some((path, branch)) = self.placement(&r.tuic_session) {
            r.worktree_path = Some(path);
            r.worktree_branch = branch;
        }
        r
    }

    /// The declared worktree placement of an identity.
    pub fn placement(&self, tuic_session: &str) -> Option<(String, Option<String>)> {
        self.placements
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tuic_session)
            .cloned()
    }

    /// The counts, read in one critical section with the live table, so the output total
    /// never counts a session twice or skips one that is moving to the tombstones.
    pub fn stats(&self) -> RegistryStats {
        let g = self.read();
        let live_bytes: u64 = g.live.values().map(|s| s.stream().total()).sum();
        RegistryStats {
            live: g.live.len(),
            tombstoned: g.tombstones.len(),
            created_total: self.created.load(Ordering::Relaxed),
            output_bytes_total: live_bytes + self.ended_output.load(Ordering::Relaxed),
            wait_checks_total: self.wait_checks.load(Ordering::Relaxed),
        }
    }

    /// Adds a finished wait's condition checks to the total.
    pub fn count_wait_checks(&self, n: u64) {
        self.wait_checks.fetch_add(n, Ordering::Relaxed);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Live sessions.
    pub fn count(&self) -> usize {
        self.read().live.len()
    }

    /// The live session a reference names (PTY id, `tuic_session` or alias).
    pub fn live(&self, r: &str) -> Option<Arc<Session>> {
        let g = self.read();
        let id = if g.live.contains_key(r) {
            r
        } else if let Some(id) = g.by_tuic.get(r) {
            id
        } else {
            g.by_alias.get(r)?
        };
        g.live.get(id).cloned()
    }

    /// Whether `tuic_session` is the identity of a live PTY (not an alias or PTY id).
    pub fn owns_live_pty(&self, tuic_session: &str) -> bool {
        let g = self.read();
        g.by_tuic
            .get(tuic_session)
            .and_then(|id| g.live.get(id))
            .is_some_and(|s| s.exit().is_none())
    }

    /// A live session, or an exited one still in its tombstone period.
    pub fn resolve(&self, r: &str) -> Option<Arc<Session>> {
        if let Some(s) = self.live(r) {
            return Some(s);
        }
        let g = self.read();
        if let Some(s) = g.tombstones.get(r) {
            return Some(s.clone());
        }
        g.tombstones
            .values()
            .find(|s| s.tuic_session == r || s.alias == r)
            .cloned()
    }

    /// The live sessions.
    pub fn live_sessions(&self) -> Vec<Arc<Session>> {
        self.read().live.values().cloned().collect()
    }

    /// Completed monitor rounds: a receiver is woken after each.
    pub fn monitor_ticks(&self) -> tokio::sync::watch::Receiver<u64> {
        self.ticks.subscribe()
    }

    /// Records a completed monitor round.
    pub(super) fn monitor_ticked(&self) {
        self.ticks.send_modify(|t| *t += 1);
    }

    /// Rows of the live sessions, oldest alias first, from their ready state (see
    /// `session::probe`: the foreground and screen marks at most one monitor tick old, no
    /// `/proc` read here unless a session was never probed).
    pub fn rows(&self) -> Vec<SessionRow> {
        // A session whose exit is recorded but whose waiter has not unregistered it yet has
        // already left the list.
        let rows = self
            .listed_sessions()
            .iter()
            .map(|s| s.listed_row())
            .collect();
        self.placed(rows)
    }

    /// [`Self::rows`] when every live session has been probed by the monitor already, so the
    /// list reads only ready state and may run on an async worker; `None` when one still needs
    /// its first probe (`/proc` reads: call [`Self::rows`] on the blocking pool).
    pub fn ready_rows(&self) -> Option<Vec<SessionRow>> {
        let rows = self
            .listed_sessions()
            .iter()
            .map(|s| s.ready_row())
            .collect::<Option<Vec<_>>>()?;
        Some(self.placed(rows))
    }

    /// The live sessions whose exit is not recorded yet, taken under the table's lock (rows
    /// are built after it is released).
    fn listed_sessions(&self) -> Vec<Arc<Session>> {
        let mut live: Vec<Arc<Session>> = self
            .read()
            .live
            .values()
            .filter(|s| s.exit().is_none())
            .cloned()
            .collect();
        // Sorted by alias in natural order (`ro-8` before `ro-10`) here, as pointers, so the
        // (large) rows are built in order.
        live.sort_unstable_by(|a, b| tuic_proto::natural::cmp(&a.alias, &b.alias));
        live
    }

    /// Adds declared worktree placements (one read of the table for the whole list).
    fn placed(&self, mut rows: Vec<SessionRow>) -> Vec<SessionRow> {
        let placements = self.placements.read().unwrap_or_else(|p| p.into_inner());
        if placements.is_empty() {
            return rows;
        }
        for r in &mut rows {
            if let Some((path, branch)) = placements.get(&r.tuic_session) {
                r.worktree_path = Some(path.clone());
                r.worktree_branch = branch.clone();
            }
        }
        rows
    }

    /// Creates a session and publishes `session-created` then `term-alias-assigned`.
    /// Blocking (fork/exec, filesystem): call off the async workers.
    pub fn create(self: &Arc<Self>, req: CreateRequest) -> Result<Arc<Session>, CreateError> {
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            let _ = self.rt.get_or_init(|| h);
            self.monitor.call_once(|| super::monitor::start(self));
        }
        let rows = req.rows.unwrap_or(24);
        let cols = req.cols.unwrap_or(80);
        // The caps and the node's budget before anything is reserved or spawned; a failed
        // create drops the charge and so returns its cells.
        let charge = self.env.cells.reserve(rows, cols)?;
        if let Some(n) = &req.name {
            check_name(n).map_err(CreateError::Invalid)?;
        }
        let cwd = match req.cwd {
            Some(c) => PathBuf::from(c),
            None => std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from),
        };
        if !cwd.is_dir() {
            return Err(CreateError::Invalid(format!(
                "cwd {} is not a directory",
                cwd.display()
            )));
        }
        let shell = req
            .shell
            .filter(|s| !s.is_empty())
            .or_else(|| std::env::var("SHELL").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| "/bin/sh".into());
        // The program itself may be an agent CLI (a spawn, or `shell: "claude"`).
        let agent_type = super::activity::detect_agent(&shell, &req.args);
        let prefix = alias::prefix_for(&repo_name(&cwd));
        let id = mint_id();
        let (alias, tuic_session) = {
            let mut g = self.write();
            let tuic_session = req
                .tuic_session
                .as_deref()
                .and_then(|t| uuid::Uuid::parse_str(t).ok())
                .map(|u| u.to_string())
                .filter(|t| !g.by_tuic.contains_key(t))
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            // Reserve the identity with the alias, so a concurrent restore cannot take it.
            g.by_tuic.insert(tuic_session.clone(), id.clone());
            let Inner {
                aliases, by_alias, ..
            } = &mut *g;
            let a = if req.no_alias {
                String::new()
            } else {
                let a = aliases.assign(&prefix, req.alias.as_deref(), |x| by_alias.contains_key(x));
                // Reserve it now so a concurrent create cannot take it.
                by_alias.insert(a.clone(), id.clone());
                a
            };
            (a, tuic_session)
        };
        let mut env: Vec<(String, String)> = req.env.into_iter().collect();
        env.push(("TERM".into(), "xterm-256color".into()));
        env.push(("TUIC_SESSION".into(), tuic_session.clone()));
        env.push(("TUIC_SOCKET".into(), self.env.socket.display().to_string()));
        if let Some(inst) = &self.env.instance {
            env.push(("TUIC_APP_INSTANCE".into(), inst.clone()));
        }
        let stderr_file = if req.separate_stderr {
            match super::stderr::create_file(&self.env.socket, &id) {
                Ok(p) => Some(p),
                Err(e) => {
                    let mut g = self.write();
                    g.by_alias.remove(&alias);
                    g.by_tuic.remove(&tuic_session);
                    return Err(CreateError::Spawn(e));
                }
            }
        } else {
            None
        };
        let r2 = self.clone();
        let on_exit = move |s: &Arc<Session>| r2.on_exit(s);
        let spec = Spawn {
            stderr_file,
            id: id.clone(),
            tuic_session: tuic_session.clone(),
            alias: alias.clone(),
            cwd: cwd.display().to_string(),
            shell,
            args: req.args,
            env,
            rows,
            cols,
            name: if req.name_from_spawn {
                super::Name::spawned(req.name.clone())
            } else {
                super::Name::custom(req.name.clone())
            },
            parent_session: req.parent_session.clone(),
            charge,
            redactions: self.env.redactions.clone(),
        };
        let spawned = match self.holders.get() {
            Some(cfg) => pty::spawn_held(spec, cfg, self.capture.clone(), on_exit),
            None => pty::spawn(spec, self.capture.clone(), on_exit),
        };
        let session = match spawned {
            Ok(s) => s,
            Err(e) => {
                let mut g = self.write();
                g.by_alias.remove(&alias);
                g.by_tuic.remove(&tuic_session);
                return Err(CreateError::Spawn(e));
            }
        };
        self.created.fetch_add(1, Ordering::Relaxed);
        let inserted = {
            let mut g = self.write();
            // A process that exits at once finds no live entry in its waiter: tombstone it here.
            if session.exit().is_none() {
                g.live.insert(id.clone(), session.clone());
                g.by_tuic.insert(tuic_session.clone(), id.clone());
                true
            } else {
                g.by_alias.remove(&alias);
                g.by_tuic.remove(&tuic_session);
                g.tombstones.insert(id.clone(), session.clone());
                self.ended_output
                    .fetch_add(session.stream().total(), Ordering::Relaxed);
                false
            }
        };
        self.env.bus.publish(Event::SessionCreated {
            session_id: id.clone(),
            cwd: session.cwd.clone(),
            agent_type: agent_type.map(str::to_owned),
            display_name: req.name,
            parent_session: req.parent_session,
            tuic_session,
        });
        if !alias.is_empty() {
            self.env.bus.publish(Event::TermAliasAssigned {
                session_id: id,
                alias,
            });
        }
        if !inserted {
            self.tombstone(&session);
        }
        Ok(session)
    }

    /// Renames a live session and publishes `session-renamed`.
    pub fn rename(&self, s: &Session, name: String) -> Result<(), String> {
        check_name(&name)?;
        s.set_display_name(name.clone());
        self.env.bus.publish(Event::SessionRenamed {
            session_id: s.id.clone(),
            name,
            is_custom: true,
        });
        Ok(())
    }

    /// Sets or clears a session's `pty_description` and publishes `pty-description-changed`
    /// when it changed.
    pub fn describe(&self, s: &Session, d: Option<String>) {
        if s.set_description(d) {
            self.env.bus.publish(Event::PtyDescriptionChanged {
                session_id: s.id.clone(),
                pty_description: s.description(),
            });
        }
    }

    /// Called by the waiter once the exit is recorded and all output fed. The move from the
    /// live table to the tombstones is one step: no reader finds the session in neither.
    fn on_exit(self: &Arc<Self>, s: &Arc<Session>) {
        if let Some(p) = &s.persist {
            p.remove();
        }
        let was_live = {
            let mut g = self.write();
            let was = g.live.remove(&s.id).is_some();
            if was {
                g.by_tuic.remove(&s.tuic_session);
                if g.by_alias.get(&s.alias) == Some(&s.id) {
                    g.by_alias.remove(&s.alias);
                }
                g.tombstones.insert(s.id.clone(), s.clone());
                self.ended_output
                    .fetch_add(s.stream().total(), Ordering::Relaxed);
            }
            was
        };
        // A session that exited before registration is tombstoned by `create`.
        if was_live {
            self.tombstone(s);
        }
    }

    /// Re-adopts the held sessions a previous node left running (read from the store): each
    /// comes back under its PTY id, alias and `tuic_session`, its screen rebuilt from the
    /// holder's ring. A record whose holder is gone, not ours or not a holder is logged,
    /// forgotten and skipped. Blocking (socket handshakes): call before serving. Returns how
    /// many were re-adopted.
    pub fn readopt(self: &Arc<Self>) -> usize {
        let Some(cfg) = self.holders.get() else {
            return 0;
        };
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            let _ = self.rt.get_or_init(|| h);
        }
        let records = match cfg.store.held_sessions() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "reading held session records");
                return 0;
            }
        };
        let mut adopted = 0;
        for (id, json) in records {
            let forget = || {
                if let Err(e) = cfg.store.remove_held_session(&id) {
                    tracing::warn!(session = %id, error = %e, "removing a held session record");
                }
            };
            let rec: held::Record = match serde_json::from_slice(&json) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(session = %id, error = %e, "skipping a held session: unreadable record");
                    forget();
                    continue;
                }
            };
            let a = match held::connect(&rec.socket, &rec.id) {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(session = %id, socket = %rec.socket.display(), error = %e, "skipping a held session");
                    if matches!(e, AdoptError::Stale(_)) {
                        let _ = std::fs::remove_file(&rec.socket);
                    }
                    forget();
                    continue;
                }
            };
            match self.adopt_one(cfg, rec, a) {
                Ok(()) => adopted += 1,
                Err(e) => {
                    tracing::warn!(session = %id, error = %e, "skipping a held session");
                    forget();
                }
            }
        }
        if adopted > 0 {
            tracing::info!(sessions = adopted, "re-adopted held sessions");
            self.monitor.call_once(|| super::monitor::start(self));
        }
        adopted
    }

    fn adopt_one(
        self: &Arc<Self>,
        cfg: &HolderConfig,
        rec: held::Record,
        a: held::Adopted,
    ) -> anyhow::Result<()> {
        let prefix = alias::prefix_for(&repo_name(Path::new(&rec.cwd)));
        let alias = {
            let mut g = self.write();
            anyhow::ensure!(
                !g.live.contains_key(&rec.id) && !g.by_tuic.contains_key(&rec.tuic_session),
                "another live session already has its id or tuic_session"
            );
            g.by_tuic.insert(rec.tuic_session.clone(), rec.id.clone());
            let Inner {
                aliases, by_alias, ..
            } = &mut *g;
            let a = aliases.assign(&prefix, Some(&rec.alias), |x| by_alias.contains_key(x));
            by_alias.insert(a.clone(), rec.id.clone());
            a
        };
        let name = super::Name {
            text: rec.name.clone(),
            is_custom: rec.name_is_custom,
            from_spawn: rec.name_from_spawn,
        };
        let spec = Spawn {
            id: rec.id.clone(),
            tuic_session: rec.tuic_session.clone(),
            alias: alias.clone(),
            cwd: rec.cwd.clone(),
            shell: rec.shell.clone(),
            args: rec.args.clone(),
            env: Vec::new(),
            rows: rec.rows,
            cols: rec.cols,
            name,
            parent_session: rec.parent_session.clone(),
            // It exists already: counted, never refused.
            charge: self.env.cells.adopt(rec.rows, rec.cols),
            stderr_file: super::stderr::existing(&self.env.socket, &rec.id),
            redactions: self.env.redactions.clone(),
        };
        let mut rec = rec;
        rec.alias = alias.clone();
        let description = rec.description.clone();
        let persist = held::Persist::new(cfg.store.clone(), rec.clone())?;
        let r2 = self.clone();
        let session = match pty::adopt(
            spec,
            a,
            Some(persist),
            self.capture.clone(),
            move |s: &Arc<Session>| r2.on_exit(s),
        ) {
            Ok(s) => s,
            Err(e) => {
                let mut g = self.write();
                g.by_alias.remove(&alias);
                g.by_tuic.remove(&rec.tuic_session);
                return Err(e);
            }
        };
        *super::lock(&session.description) = description;
        let inserted = {
            let mut g = self.write();
            if session.exit().is_none() {
                g.live.insert(rec.id.clone(), session.clone());
                true
            } else {
                g.by_alias.remove(&alias);
                g.by_tuic.remove(&rec.tuic_session);
                g.tombstones.insert(rec.id.clone(), session.clone());
                self.ended_output
                    .fetch_add(session.stream().total(), Ordering::Relaxed);
                false
            }
        };
        tracing::info!(session = %rec.id, alias = %alias, "re-adopted a held session");
        self.env.bus.publish(Event::SessionCreated {
            session_id: rec.id.clone(),
            cwd: rec.cwd.clone(),
            agent_type: super::activity::detect_agent(&rec.shell, &rec.args).map(str::to_owned),
            display_name: rec.name.clone(),
            parent_session: rec.parent_session.clone(),
            tuic_session: rec.tuic_session.clone(),
        });
        self.env.bus.publish(Event::TermAliasAssigned {
            session_id: rec.id,
            alias,
        });
        if !inserted {
            self.tombstone(&session);
        }
        Ok(())
    }

    /// Graceful shutdown: ends every live session with the node, as a node without holders
    /// always did (its PTYs closed with it). Held sessions' holders end their child and exit;
    /// their records are forgotten. A restart for an update keeps them instead (`keep`), to be
    /// re-adopted by the new executable.
    pub fn end_with_node(&self, keep: bool) {
        if keep {
            return;
        }
        for s in self.live_sessions() {
            s.end_with_node();
        }
    }

    /// Announces a session already moved to the tombstones and expires its tombstone.
    fn tombstone(self: &Arc<Self>, s: &Arc<Session>) {
        self.env.bus.publish(Event::PtyExit {
            session_id: s.id.clone(),
            exit_code: s.exit().and_then(|e| e.code),
        });
        self.env.bus.publish(Event::SessionClosed {
            session_id: s.id.clone(),
        });
        let ttl = self.env.tuning().tombstone;
        let r = self.clone();
        let id = s.id.clone();
        let Some(rt) = tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.rt.get().cloned())
        else {
            return;
        };
        let _guard = rt.enter();
        self.env.tasks.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(ttl) => {}
                _ = r.env.shutdown.cancelled() => {}
            }
            let gone = r.write().tombstones.remove(&id);
            if let Some(path) = gone.as_ref().and_then(|s| s.stderr_file()) {
                let _ = std::fs::remove_file(path);
            }
        });
    }
}

/// Checks terminal dimensions against the per-session caps (`budget::check`).
pub fn check_size(rows: u16, cols: u16) -> Result<(), super::budget::SizeError> {
    super::budget::check(rows, cols).map(drop)
}

/// Checks a display name: one line, at most 256 characters, no control characters.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("name must not be empty".into());
    }
    if name.chars().count() > 256 {
        return Err("name must be at most 256 characters".into());
    }
    if name.chars().any(char::is_control) {
        return Err("name must be one line without control characters".into());
    }
    Ok(())
}

fn mint_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("pty-{}", &u[..12])
}

/// The repository directory name of `cwd` (nearest ancestor with `.git`), else its basename.
fn repo_name(cwd: &Path) -> String {
    let root = cwd
        .ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(cwd);
    root.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sizes() {
        assert!(check_name("build box").is_ok());
        assert!(check_name("a\nb").is_err());
        assert!(check_name(&"x".repeat(257)).is_err());
        assert!(check_size(0, 80).is_err());
        assert!(check_size(24, 80).is_ok());
    }
}
