//! PTY sessions: one child process on a pseudo-terminal, its output feeds, and the registry
//! that names sessions by their three addresses.
//!
//! A session owns its PTY, one reader thread (off the async workers) and one waiter thread.
//! Each read feeds, in order: the raw backlog (ring + live subscribers), the emulator grid and
//! the clean log; then subscribers are woken. The PTY is never slowed by a reader of any feed.
//! This module does not serve HTTP (see `routes::sessions`) and does not know other hosts.

pub mod activity;
pub mod alias;
pub mod backlog;
pub mod capture;
pub mod cleanlog;
pub mod grid;
mod monitor;
pub mod output;
pub mod pager;
mod pty;
pub mod redact;
pub mod registry;
pub mod utf8;

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use portable_pty::{ChildKiller, MasterPty, PtySize};
use serde::Serialize;
use tokio::sync::watch;

pub use registry::{CreateError, CreateRequest, Registry};

use self::backlog::Backlog;
use self::cleanlog::CleanLog;
use self::grid::Grid;

/// Clean-log lines a session retains.
pub const LOG_LINES: usize = 10_000;

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// The exit status, when the process exited normally (absent when killed by a signal).
    pub code: Option<i32>,
}

/// The emulator grid and clean log, fed together under one lock.
#[derive(Debug)]
pub struct Screen {
    /// The emulated terminal.
    pub grid: Grid,
    /// Lines that left the cursor row, cleaned.
    pub log: CleanLog,
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
    /// Display name; set at create or by a rename.
    display_name: Mutex<Option<String>>,
    /// Raw ring and live subscribers.
    stream: Mutex<Backlog>,
    /// Emulator and clean log.
    screen: Mutex<Screen>,
    /// Bumped after every fed read and at exit; subscribers wait on it.
    wake: watch::Sender<u64>,
    /// PTY input. A blocking write: callers run off the async workers.
    writer: Mutex<Box<dyn Write + Send>>,
    /// PTY master, for resize and the foreground process group.
    master: Mutex<Box<dyn MasterPty + Send>>,
    /// Ends the child on `DELETE`.
    killer: Mutex<Box<dyn ChildKiller + Send + Sync>>,
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

/// A row of `GET /sessions`.
#[derive(Debug, Clone, Serialize)]
pub struct SessionRow {
    /// PTY id.
    pub session_id: String,
    /// Alias.
    pub alias: String,
    /// Stable identity.
    pub tuic_session: String,
    /// Start directory.
    pub cwd: String,
    /// Display name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Detected coding agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
    /// Busy/idle; absent before the first observation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell_state: Option<activity::ShellState>,
    /// Agent state, for detected agents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_state: Option<activity::AgentState>,
    /// Name of the foreground process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub foreground_process: Option<String>,
    /// Exit code, once known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

impl Session {
    /// The exit, once the process ended and its output was fully fed.
    pub fn exit(&self) -> Option<Exit> {
        self.exit.get().copied()
    }

    /// The display name.
    pub fn display_name(&self) -> Option<String> {
        lock(&self.display_name).clone()
    }

    /// Replaces the display name.
    pub fn set_display_name(&self, name: String) {
        *lock(&self.display_name) = Some(name);
    }

    /// Writes input to the PTY. Blocking: call off the async workers.
    pub fn write(&self, data: &[u8], capture: &capture::Capture) -> Result<(), SessionError> {
        if let Some(e) = self.exit() {
            return Err(SessionError::Exited {
                id: self.id.clone(),
                code: e.code,
            });
        }
        capture.record(&self.id, capture::Direction::Input, data);
        self.last_input_ms.store(now_ms(), Ordering::Relaxed);
        let mut w = lock(&self.writer);
        w.write_all(data)
            .and_then(|()| w.flush())
            .map_err(|e| SessionError::Io(e.to_string()))
    }

    /// Resizes the PTY and the grid (reflowing it).
    pub fn resize(&self, rows: u16, cols: u16) -> Result<(), SessionError> {
        if let Some(e) = self.exit() {
            return Err(SessionError::Exited {
                id: self.id.clone(),
                code: e.code,
            });
        }
        lock(&self.screen).grid.resize(rows, cols);
        lock(&self.master)
            .resize(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|e| SessionError::Io(e.to_string()))
    }

    /// Ends the process (SIGHUP, as a closing terminal does).
    pub fn kill(&self) {
        let _ = lock(&self.killer).kill();
    }

    /// The raw backlog, locked.
    pub fn stream(&self) -> MutexGuard<'_, Backlog> {
        lock(&self.stream)
    }

    /// The grid and clean log, locked.
    pub fn screen(&self) -> MutexGuard<'_, Screen> {
        lock(&self.screen)
    }

    /// A receiver woken after each fed read and at exit.
    pub fn wake(&self) -> watch::Receiver<u64> {
        self.wake.subscribe()
    }

    /// The foreground process group leader's name and arguments.
    fn foreground(&self) -> Option<(String, Vec<String>)> {
        let pgid = lock(&self.master).process_group_leader()?;
        activity::foreground_process(pgid)
    }

    /// The list row, with the observed state.
    pub fn row(&self) -> SessionRow {
        let now = now_ms();
        let last = self.last_output_ms.load(Ordering::Relaxed);
        let shell_state = activity::shell_state(now, (last > 0).then_some(last));
        let fg = if self.exit().is_none() {
            self.foreground()
        } else {
            None
        };
        let detected = fg
            .as_ref()
            .and_then(|(comm, argv)| activity::detect_agent(comm, argv));
        let agent = {
            let mut a = lock(&self.agent);
            match (detected, *a) {
                (Some(name), Some((prev, _))) if prev == name => {}
                // Output after the input that launched the agent (or any output, when the
                // agent is the session's own program) shows it has started.
                (Some(name), _) => *a = Some((name, self.last_input_ms.load(Ordering::Relaxed))),
                (None, _) => {}
            }
            *a
        };
        let agent_state = agent.map(|(_, since)| {
            let tail = {
                let s = self.screen();
                s.grid.screen().join("\n")
            };
            activity::agent_state(shell_state, &tail, last > since)
        });
        SessionRow {
            session_id: self.id.clone(),
            alias: self.alias.clone(),
            tuic_session: self.tuic_session.clone(),
            cwd: self.cwd.clone(),
            display_name: self.display_name(),
            agent_type: agent.map(|(n, _)| n.to_owned()),
            shell_state,
            agent_state,
            foreground_process: fg.map(|(comm, _)| comm),
            exit_code: self.exit().and_then(|e| e.code),
        }
    }
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
