//! The user's own terminal: whether stdin is one, its size, and raw mode for `tuic attach`
//! restored on every way out (drop, detach, error).

use std::io::Write;

use rustix::termios::{self, OptionalActions, Termios};

/// Whether stdin is a terminal.
pub fn stdin_is_tty() -> bool {
    termios::isatty(std::io::stdin())
}

/// Whether stdout is a terminal.
pub fn stdout_is_tty() -> bool {
    termios::isatty(std::io::stdout())
}

/// The terminal's rows and columns (stdout first, then stdin), when it reports a size.
pub fn size() -> Option<(u16, u16)> {
    [
        termios::tcgetwinsize(std::io::stdout()),
        termios::tcgetwinsize(std::io::stdin()),
    ]
    .into_iter()
    .flatten()
    .find(|w| w.ws_row > 0 && w.ws_col > 0)
    .map(|w| (w.ws_row, w.ws_col))
}

/// Raw mode on stdin while held: keys arrive one by one, unechoed, with no signals from
/// `C-c`/`C-z` (they go to the session, as in tmux).
pub struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// Puts stdin in raw mode.
    pub fn enter() -> std::io::Result<Self> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(&stdin)?;
        let mut raw = saved.clone();
        raw.make_raw();
        termios::tcsetattr(&stdin, OptionalActions::Now, &raw)?;
        Ok(Self { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin(), OptionalActions::Now, &self.saved);
    }
}

/// Echo off on stdin while held (a secret typed at a prompt is not shown); lines still
/// arrive whole and `C-c` still interrupts.
pub struct NoEcho {
    saved: Termios,
}

impl NoEcho {
    /// Turns echo off.
    pub fn enter() -> std::io::Result<Self> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(&stdin)?;
        let mut quiet = saved.clone();
        quiet.local_modes.remove(termios::LocalModes::ECHO);
        termios::tcsetattr(&stdin, OptionalActions::Now, &quiet)?;
        Ok(Self { saved })
    }
}

impl Drop for NoEcho {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin(), OptionalActions::Now, &self.saved);
    }
}

/// What `tuic attach` sends first, as tmux does: the alternate screen (saving the cursor and
/// leaving the user's screen and scrollback untouched underneath), so that [`RESET`] can give
/// them back exactly.
pub const ENTER: &str = "\x1b[?1049h";

/// What leaves the user's terminal as it was for their shell after showing a session: default
/// colours and the ASCII character set, no scroll region or origin mode (both move the cursor,
/// so they come before the screen switch), autowrap on, insert mode off, normal cursor and
/// keypad keys, no bracketed paste, mouse or focus reports; then the main screen, which brings
/// back the user's screen and the cursor saved by [`ENTER`]; then a visible cursor.
pub const RESET: &str = "\x1b[0m\x0f\x1b(B\x1b[r\x1b[?6l\x1b[?7h\x1b[4l\x1b[?1l\x1b>\x1b[?2004l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1004l\x1b[?1049l\x1b[?25h";

/// Writes `bytes` to stdout and flushes. A reader that went away (`tuic run … | head`) ends
/// the process quietly with status 0, as coreutils do; other errors are ignored (a terminal
/// that vanished ends the attachment through its stdin).
pub fn out(bytes: &[u8]) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_all(bytes).and_then(|()| o.flush()) {
        quit_on_broken_pipe(&e);
    }
}

/// Writes `bytes` to stderr and flushes (a `run` session's separate stderr); a closed
/// stderr is ignored.
pub fn err(bytes: &[u8]) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(bytes).and_then(|()| e.flush());
}

/// Writes the CLI's text output (line-buffered by std; what is left is flushed at exit, where
/// a broken pipe is ignored); see [`out`] for the broken-pipe rule.
pub fn stdout_text(s: &str) {
    if let Err(e) = std::io::stdout().lock().write_all(s.as_bytes()) {
        quit_on_broken_pipe(&e);
    }
}

fn quit_on_broken_pipe(e: &std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
}
