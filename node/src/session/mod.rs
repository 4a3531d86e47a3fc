//! PTY sessions: one child process on a pseudo-terminal, its output feeds, and the registry
//! that names sessions by their three addresses.
//!
//! A session owns its PTY (or, run by the node binary, a connection to the holder process that
//! owns it: `holder`, `held`), one reader thread (off the async workers) and one waiter
//! thread (a held session's reader also receives the exit).
//! Each read feeds, in order: the raw backlog (ring + live subscribers), the emulator grid and
//! the clean log; then subscribers are woken. The PTY is never slowed by a reader of any feed.
//! This module does not serve HTTP (see `routes::sessions`) and does not know other hosts.

pub mod activity;
pub mod alias;
pub mod ansi;
pub mod backlog;
pub mod budget;
pub mod capture;
pub mod cleanlog;
pub mod drive;
pub mod env;
pub mod feed;
pub mod grid;
pub mod held;
pub mod holder;
pub mod input;
mod monitor;
pub mod output;
pub mod pager;
pub mod probe;
mod pty;
pub mod redact;
pub mod registry;
pub mod screen;
pub mod screensync;
pub mod stderr;
pub mod submit;
pub mod utf8;
pub mod valuemask;

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use portable_pty::PtySize;
use serde::Serialize;
use tokio::sync::watch;

/// Wall-clock milliseconds since the Unix epoch: the node's one wall clock, `logs::now_ms`
/// (activity times, and the `now` that mail and the peer link hand to `proto`'s cores).
pub use crate::logs::now_ms;
pub use env::SessionEnv;
pub use registry::{CreateError, CreateRequest, Registry};
pub use screen::Screen;

use self::backlog::Backlog;

/// Clean-log lines a session retains.
pub const LOG_LINES: usize = 10_000;

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// The exit status, when the process exited normally (absent when killed by a signal).
    pub code: Option<i32>,
}

/// Errors of writing to or resizing a session.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The process has exited; input has nowhere to go.
    #[error("session {id} has exited{}", code.map(|c| format!(" (exit code {c})")).unwrap_or_default())]
    Exited {
        /// Session id.
        id: String,
        /// Exit code, when known.
        code: Option<i32>,
    },
    /// The PTY refused the operation.
    #[error("pty: {0}")]
    Io(String),
    /// A size over the caps or the node's cell budget (`budget`); nothing changed.
    #[error("{0}")]
    Size(#[from] budget::SizeError),
}

/// One PTY session.
pub struct Session {
    /// The server-minted PTY id.
    pub id: String,
    /// The stable identity exported to the child as `TUIC_SESSION`.
    pub tuic_session: String,
    /// The human-friendly alias (`tu-1`).
    pub alias: String,
    /// Working directory the process started in.
    pub cwd: String,
    /// Program that was started.
    pub shell: String,
    /// Child process id.
    pub pid: Option<u32>,
    /// Display name and where it came from; set at create, by a spawn or by a rename.
    display_name: Mutex<Name>,
    /// The registered identity of the agent that spawned this session (never a pending
    /// placeholder); set at spawn, or when a spawner registers after spawning.
    parent_session: Mutex<Option<String>>,
    /// Raw ring and live subscribers.
    stream: Mutex<Backlog>,
    /// Output read while a screen reader held the screen, not yet fed to it (oldest first).
    deferred: Mutex<Vec<u8>>,
    /// Emulator and clean log.
    screen: Mutex<Screen>,
    /// Bumped after every fed read and at exit; subscribers wait on it.
    wake: watch::Sender<u64>,
    /// Bumped when the observed lifecycle changes (shell idle/busy, agent state; the monitor
    /// publishes those) and at exit; `session action=wait` sleeps on it.
    lifecycle: watch::Sender<u64>,
    /// PTY input. A blocking write: callers run off the async workers.
    writer: Mutex<Box<dyn Write + Send>>,
    /// PTY master, for resize and the foreground process group.
    master: Mutex<pty::Master>,
    /// Ends the child on `DELETE`.
    killer: Mutex<pty::Killer>,
    /// Set once, after every byte the process wrote has been fed.
    exit: OnceLock<Exit>,
    /// Wall-clock ms of the last output (0: none yet), for `shell_state`.
    last_output_ms: AtomicU64,
    /// Wall-clock ms of the last input.
    last_input_ms: AtomicU64,
    /// The agent detected in the foreground, and the last input time (ms) when it was first seen.
    agent: Mutex<Option<(&'static str, u64)>>,
    /// What the monitor last reported.
    seen: Mutex<monitor::Seen>,
    /// Viewers' "Fit" claims (screen sync's `resize` with `apply`) and the size before them.
    fits: Mutex<screensync::Fits>,
    /// The derived state (`/proc`, screen marks) last probed; the list reads it.
    probe: Mutex<Option<probe::Probe>>,
    /// Submitted turns: advanced exactly once after each complete `submit` write.
    turn_epoch: AtomicU64,
    /// Held by the one `submit` in flight; a second submit finds it taken and is refused. An
    /// owned (tokio) guard, since a submission holds it from its write on the blocking pool
    /// through its acknowledgement awaited on the async workers.
    submit_claim: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// What was typed since the last Enter, so a half-typed composer refuses `submit`.
    composer: Mutex<input::Composer>,
    /// The orchestrator's short description of the assigned work (`pty_description`).
    description: Mutex<Option<String>>,
    /// The durable record of a held session (`held`), kept current on rename, resize and
    /// parent changes; `None` for a PTY this process opened itself.
    persist: Option<std::sync::Arc<held::Persist>>,
    /// The screen cells this session holds in the node's budget (`budget`); taken at exit,
    /// when the screen is released.
    charge: Mutex<Option<budget::Charge>>,
    /// The file the program's stderr goes to, for a session created with `separate_stderr`
    /// (`stderr`); removed when the tombstone expires.
    stderr_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("alias", &self.alias)
            .field("exit", &self.exit.get())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A session's display name and its provenance (the session-list flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Name {
    /// The name, when one was given.
    pub text: Option<String>,
    /// A person chose it (a rename, or a name given at create).
    pub is_custom: bool,
    /// The spawning agent assigned it (`agent action=spawn name=`), and nobody renamed since.
    pub from_spawn: bool,
}

impl Name {
    /// A name given at create by a client (`POST /sessions`, `session action=create`).
    pub fn custom(text: Option<String>) -> Self {
        Self {
            is_custom: text.is_some(),
            text,
            from_spawn: false,
        }
    }

    /// A name assigned by a spawning agent.
    pub fn spawned(text: Option<String>) -> Self {
        Self {
            from_spawn: text.is_some(),
            text,
            is_custom: false,
        }
    }
}

/// A row of `GET /sessions`.
#[derive(Debug, Clone, Serialize)]
pub struct SessionRow {
    /// PTY id.
    pub session_id: String,
    /// Alias; omitted for a session created without one (`no_alias`, `tuic run`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub alias: String,
    /// Stable identity.
    pub tuic_session: String,
    /// Start directory.
    pub cwd: String,
    /// Display name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The display name was chosen by a person (rename or create), not derived.
    pub display_name_is_custom: bool,
    /// The display name was assigned by the spawning agent.
    pub display_name_from_spawn: bool,
    /// The spawning agent's registered identity, for parent-name resolution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    /// Detected coding agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
    /// The one state shown to a person (working, idle, needs input, done, exited; a hub adds
    /// host offline), from the observations below (`activity::session_state`).
    pub state: activity::SessionState,
    /// Busy/idle; absent before the first observation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell_state: Option<activity::ShellState>,
    /// Agent state, for detected agents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_state: Option<activity::AgentState>,
    /// A detected agent has a live descendant doing work (helpers excluded); present only
    /// when true. It keeps `agent_state` at `working` while the agent itself sits idle.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub background_work: bool,
    /// The foreground process is stopped (`session action=pause`, or SIGSTOP from anywhere)
    /// and holds the terminal on standby until resumed; present only when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub standby: bool,
    /// Name of the foreground process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub foreground_process: Option<String>,
    /// Exit code, once known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The orchestrator's description of the assigned work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pty_description: Option<String>,
    /// The linked worktree this tab is placed in (`session action=declare_worktree`); `cwd`
    /// stays the real shell directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree_path: Option<String>,
    /// That worktree's branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree_branch: Option<String>,
    /// The question waiting on screen now, with its choices: state of the session, not an
    /// event a page must have seen (kept until it is answered or scrolls away).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<activity::Question>,
}

impl Session {
    /// The exit, once the process ended and its output was fully fed.
    pub fn exit(&self) -> Option<Exit> {
        self.exit.get().copied()
    }

    /// The file the program's stderr goes to, when the session was created with
    /// `separate_stderr`.
    pub fn stderr_file(&self) -> Option<&std::path::Path> {
        self.stderr_file.as_deref()
    }

    /// The display name.
    pub fn display_name(&self) -> Option<String> {
        lock(&self.display_name).text.clone()
    }

    /// The display name with its provenance.
    pub fn name(&self) -> Name {
        lock(&self.display_name).clone()
    }

    /// Replaces the display name with a person's choice (a rename).
    pub fn set_display_name(&self, name: String) {
        *lock(&self.display_name) = Name::custom(Some(name.clone()));
        if let Some(p) = &self.persist {
            p.update(|r| {
                r.name = Some(name);
                r.name_is_custom = true;
                r.name_from_spawn = false;
            });
        }
    }

    /// The spawning agent's registered identity.
    pub fn parent_session(&self) -> Option<String> {
        lock(&self.parent_session).clone()
    }

    /// Records the spawning agent's registered identity (a spawner that registered late, or
    /// moved to another identity).
    pub fn set_parent_session(&self, parent: Option<String>) {
        *lock(&self.parent_session) = parent.clone();
        if let Some(p) = &self.persist {
            p.update(|r| r.parent_session = parent);
        }
    }

    /// A receiver woken when the observed lifecycle changes and at exit.
    pub fn lifecycle(&self) -> watch::Receiver<u64> {
        self.lifecycle.subscribe()
    }

    /// Tells lifecycle waiters to look again (the monitor saw a state change).
    pub(crate) fn lifecycle_changed(&self) {
        self.lifecycle.send_modify(|v| *v += 1);
    }

    /// Writes input to the PTY. Blocking: call off the async workers.
    pub fn write(&self, data: &[u8], capture: &capture::Capture) -> Result<(), SessionError> {
        self.write_parts(&[input::Part::Bytes(data.to_vec())], capture, || {})
            .map_err(|(_, e)| e)
    }

    /// Writes several parts while holding the PTY writer lock across all of them, so no other
    /// writer interleaves (spec: submit and agent text+Enter hold one writer lock). `Gap`
    /// parts are the spec's scheduling gaps between writes. Blocking: call off the async
    /// workers. Returns how many parts were written completely before an error, if any.
    pub fn write_parts(
        &self,
        parts: &[input::Part],
        capture: &capture::Capture,
        before_last: impl FnOnce(),
    ) -> Result<(), (usize, SessionError)> {
        if let Some(e) = self.exit() {
            return Err((
                0,
                SessionError::Exited {
                    id: self.id.clone(),
                    code: e.code,
                },
            ));
        }
        let mut w = lock(&self.writer);
        let mut before_last = Some(before_last);
        let last = parts.len().saturating_sub(1);
        for (i, part) in parts.iter().enumerate() {
            if i == last
                && let Some(f) = before_last.take()
            {
                f();
            }
            match part {
                input::Part::Gap(d) => std::thread::sleep(*d),
                input::Part::Bytes(b) => {
                    if let Some(e) = self.exit() {
                        return Err((
                            i,
                            SessionError::Exited {
                                id: self.id.clone(),
                                code: e.code,
                            },
                        ));
                    }
                    capture.record(&self.id, capture::Direction::Input, b);
                    self.last_input_ms.store(now_ms(), Ordering::Relaxed);
                    lock(&self.composer).feed(b);
                    w.write_all(b)
                        .and_then(|()| w.flush())
                        .map_err(|e| (i, SessionError::Io(e.to_string())))?;
                }
            }
        }
        Ok(())
    }

    /// The coding agent last detected in the foreground (refreshed by [`Session::probe`]).
    pub fn agent(&self) -> Option<&'static str> {
        lock(&self.agent).map(|(a, _)| a)
    }

    /// The orchestrator's description of the work, when set.
    pub fn description(&self) -> Option<String> {
        lock(&self.description).clone()
    }

    /// Replaces (`Some`) or clears (`None`) the orchestrator's description of the work;
    /// whether it changed. Callers publish `pty-description-changed` through
    /// [`registry::Registry::describe`].
    pub(crate) fn set_description(&self, d: Option<String>) -> bool {
        let d = d.filter(|d| !d.is_empty());
        {
            let mut cur = lock(&self.description);
            if *cur == d {
                return false;
            }
            cur.clone_from(&d);
        }
        if let Some(p) = &self.persist {
            p.update(|r| r.description = d);
        }
        true
    }

    /// The current turn epoch.
    pub fn turn_epoch(&self) -> u64 {
        self.turn_epoch.load(Ordering::SeqCst)
    }

    /// Advances the turn epoch once; returns the new value.
    pub fn advance_turn(&self) -> u64 {
        self.turn_epoch.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Claims the session for one submission; `None` while another submission holds it.
    pub fn try_claim_submit(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        self.submit_claim.clone().try_lock_owned().ok()
    }

    /// Whether something was typed since the last Enter (a half-typed composer).
    pub fn composer_dirty(&self) -> bool {
        lock(&self.composer).dirty()
    }

    /// Wall-clock ms of the last output (`None` before any output).
    pub fn last_output_ms(&self) -> Option<u64> {
        let v = self.last_output_ms.load(Ordering::Relaxed);
        (v > 0).then_some(v)
    }

    /// Wall-clock ms of the last input (`None` before any input).
    pub fn last_input_ms(&self) -> Option<u64> {
        let v = self.last_input_ms.load(Ordering::Relaxed);
        (v > 0).then_some(v)
    }

    /// Whether a job other than the session's own process holds the terminal's foreground
    /// (a plain shell running a command). `None` when the foreground is unknown.
    pub fn foreground_job_running(&self) -> Option<bool> {
        let pgid = lock(&self.master).process_group_leader()?;
        Some(self.pid.is_some_and(|p| p as i32 != pgid))
    }

    /// Sends a signal to the terminal's foreground process group (pause: SIGSTOP, resume:
    /// SIGCONT). The session's own process is always included.
    pub fn signal_foreground(&self, sig: rustix::process::Signal) -> Result<(), SessionError> {
        if let Some(e) = self.exit() {
            return Err(SessionError::Exited {
                id: self.id.clone(),
                code: e.code,
            });
        }
        let fg = lock(&self.master).process_group_leader();
        let mut groups: Vec<i32> = fg.into_iter().collect();
        if let Some(p) = self.pid.map(|p| p as i32)
            && !groups.contains(&p)
        {
            groups.push(p);
        }
        for g in groups {
            let Some(pid) = rustix::process::Pid::from_raw(g) else {
                continue;
            };
            rustix::process::kill_process_group(pid, sig)
                .map_err(|e| SessionError::Io(format!("signalling process group {g}: {e}")))?;
        }
        Ok(())
    }

    /// Ends the session if it still runs (the shared close of `DELETE /sessions/{id}` and
    /// MCP `session action=close|kill`). Returns whether it was live.
    pub fn close(&self) -> bool {
        let live = self.exit().is_none();
        if live {
            self.kill();
        }
        live
    }

    /// Returns an ended session's screen cells to the node's budget and compacts a large
    /// screen (`Screen::release`). Called once the exit is recorded.
    pub(crate) fn release_screen(&self) {
        drop(lock(&self.charge).take());
        self.screen().release();
    }

    /// Resizes the PTY and the grid (reflowing it).
    pub fn resize(&self, rows: u16, cols: u16) -> Result<(), SessionError> {
        // An explicit size (the REST route, an attached terminal) is the size from now on: no
        // viewer leaving puts an older one back.
        lock(&self.fits).base = None;
        self.set_size(rows, cols)
    }

    /// Resizes the PTY and the screen (a viewer's Fit goes through here, keeping its claim).
    pub(super) fn set_size(&self, rows: u16, cols: u16) -> Result<(), SessionError> {
        if let Some(e) = self.exit() {
            return Err(SessionError::Exited {
                id: self.id.clone(),
                code: e.code,
            });
        }
        // The caps and the node's budget first: a refused size changes nothing.
        match lock(&self.charge).as_mut() {
            Some(c) => c.resize(rows, cols)?,
            None => drop(budget::check(rows, cols)?),
        }
        self.screen().resize(rows, cols);
        self.screen_changed();
        lock(&self.master)
            .resize(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(SessionError::Io)?;
        if let Some(p) = &self.persist {
            p.update(|r| {
                r.rows = rows;
                r.cols = cols;
            });
        }
        // The screen changed without output (a quiet shell redraws nothing on SIGWINCH): wake
        // every screen client, so each sends its whole screen at the new size, not only the
        // client that asked.
        self.wake.send_modify(|v| *v += 1);
        Ok(())
    }

    /// Ends the process (SIGHUP, as a closing terminal does).
    pub fn kill(&self) {
        lock(&self.killer).kill();
    }

    /// Whether a holder process keeps this session's PTY (it survives a restart of the node).
    pub fn is_held(&self) -> bool {
        self.persist.is_some()
    }

    /// Graceful node shutdown: ends the process and lets its holder exit without waiting for
    /// a node; forgets the record. A session this process opened itself just ends.
    pub(crate) fn end_with_node(&self) {
        if let Some(p) = &self.persist {
            p.remove();
        }
        lock(&self.killer).quit();
    }

    /// The raw backlog, locked.
    pub fn stream(&self) -> MutexGuard<'_, Backlog> {
        lock(&self.stream)
    }

    /// The grid and clean log, locked, with every byte read so far applied.
    pub fn screen(&self) -> MutexGuard<'_, Screen> {
        let mut g = lock(&self.screen);
        self.feed_deferred(&mut g);
        g.settle();
        g
    }

    /// Feeds output the reader set aside while the screen was held.
    pub(super) fn feed_deferred(&self, scr: &mut Screen) {
        let bytes = std::mem::take(&mut *lock(&self.deferred));
        if bytes.is_empty() {
            return;
        }
        let replies = scr.feed(&bytes);
        if !replies.is_empty() {
            let _ = lock(&self.writer).write_all(&replies);
        }
    }

    /// Whether the screen holds plain text back (bulk output is streaming); does not apply it.
    pub fn screen_pending(&self) -> bool {
        lock(&self.screen).has_pending()
    }

    /// A receiver woken after each fed read and at exit.
    pub fn wake(&self) -> watch::Receiver<u64> {
        self.wake.subscribe()
    }

    /// The list row, with the state observed now (a fresh [`Session::probe`]; blocking).
    pub fn row(&self) -> SessionRow {
        let p = self.probe();
        self.build_row(&p)
    }

    /// The pid leading the terminal's foreground process group (the agent, when one runs),
    /// while the session lives.
    pub fn foreground_pid(&self) -> Option<i32> {
        if self.exit().is_some() {
            return None;
        }
        lock(&self.master).process_group_leader()
    }

    /// A row from a probe; the time-derived state is computed now.
    fn build_row(&self, p: &probe::Probe) -> SessionRow {
        let now = now_ms();
        let last = self.last_output_ms.load(Ordering::Relaxed);
        let shell_state = activity::shell_state(now, (last > 0).then_some(last));
        let agent = *lock(&self.agent);
        let agent_state = agent.map(|(_, since)| self.agent_state_from(p, shell_state, since));
        let background_work = p.background_work;
        let state = activity::session_state(activity::StateInputs {
            exited: self.exit().is_some(),
            shell: shell_state,
            agent: agent_state,
            question: p.question,
            command_running: p.command_running,
            foreground_is_shell: p
                .foreground_process
                .as_deref()
                .is_none_or(activity::is_shell),
        });
        let name = self.name();
        SessionRow {
            session_id: self.id.clone(),
            alias: self.alias.clone(),
            tuic_session: self.tuic_session.clone(),
            cwd: self.cwd.clone(),
            display_name: name.text,
            display_name_is_custom: name.is_custom,
            display_name_from_spawn: name.from_spawn,
            parent_session: self.parent_session(),
            agent_type: agent.map(|(n, _)| n.to_owned()),
            background_work,
            standby: p.standby,
            state,
            shell_state,
            agent_state,
            foreground_process: p.foreground_process.clone(),
            exit_code: self.exit().and_then(|e| e.code),
            pty_description: lock(&self.description).clone(),
            worktree_path: None,
            worktree_branch: None,
            question: p.question_detail.clone(),
        }
    }
}
