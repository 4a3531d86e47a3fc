//! The clean log: lines that left the cursor row with escape sequences stripped, carriage-return
//! overwrites applied and alternate-screen (TUI) repaint suppressed; plus the plain ANSI
//! stripper used by `?format=text` streams.
//!
//! Pure: bytes in, lines out. It is deliberately not an emulator (the grid is); it keeps only a
//! line discipline good enough for logs and AI consumption, with bounded memory.

use std::collections::VecDeque;

use alacritty_terminal::vte::{Params, Parser, Perform};

/// Longest line kept before it is broken, so output without newlines stays bounded.
pub const MAX_LINE_CHARS: usize = 16 * 1024;

/// Retained clean-log lines, oldest first, with a monotonic line counter.
pub struct CleanLog {
    parser: Parser,
    state: LineState,
    lines: VecDeque<String>,
    /// Lines ever logged (the `cursor`/`total_lines` of the log).
    total: u64,
    /// Retention bound in lines.
    cap: usize,
}

impl std::fmt::Debug for CleanLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CleanLog")
            .field("total", &self.total)
            .field("retained", &self.lines.len())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct LineState {
    line: Vec<char>,
    col: usize,
    alt_screen: bool,
    done: Vec<String>,
}

impl CleanLog {
    /// A log retaining at most `cap` lines.
    pub fn new(cap: usize) -> Self {
        Self {
            parser: Parser::new(),
            state: LineState::default(),
            lines: VecDeque::new(),
            total: 0,
            cap: cap.max(1),
        }
    }

    /// Feeds output bytes; returns how many lines were appended.
    pub fn feed(&mut self, bytes: &[u8]) -> usize {
        self.parser.advance(&mut self.state, bytes);
        self.take_done()
    }

    /// Feeds bytes that are all printable ASCII, CR or LF while the parser is in its ground
    /// state on the primary screen: the same result as [`CleanLog::feed`] without the parser.
    pub fn feed_plain(&mut self, bytes: &[u8]) {
        debug_assert!(!self.state.alt_screen);
        for &b in bytes {
            match b {
                b'\n' => self.state.emit(),
                b'\r' => self.state.col = 0,
                _ => self.state.put(b as char),
            }
        }
        self.take_done();
    }

    /// Accounts `n` lines logged without their text, which the caller guarantees are all
    /// evicted by what it feeds next; the line in progress is dropped with them.
    pub fn skip_lines(&mut self, n: u64) {
        self.lines.clear();
        self.state.line.clear();
        self.state.col = 0;
        self.total += n;
    }

    /// The retention bound in lines.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Length (chars) and cursor column of the line in progress.
    pub fn line_state(&self) -> (usize, usize) {
        (self.state.line.len(), self.state.col)
    }

    fn take_done(&mut self) -> usize {
        let n = self.state.done.len();
        for l in self.state.done.drain(..) {
            if self.lines.len() == self.cap {
                self.lines.pop_front();
            }
            self.lines.push_back(l);
        }
        self.total += n as u64;
        n
    }

    /// Lines ever appended.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The oldest retained line number.
    pub fn oldest(&self) -> u64 {
        self.total - self.lines.len() as u64
    }

    /// The retained lines, oldest first.
    pub fn lines(&self) -> &VecDeque<String> {
        &self.lines
    }

    /// Retained lines from absolute line `from` (clamped to the retained window).
    pub fn since(&self, from: u64) -> (u64, Vec<String>) {
        let start = from.max(self.oldest()).min(self.total);
        let skip = (start - self.oldest()) as usize;
        (start, self.lines.iter().skip(skip).cloned().collect())
    }

    /// Whether output is currently on the alternate screen (a TUI is drawing).
    pub fn alt_screen(&self) -> bool {
        self.state.alt_screen
    }
}

impl LineState {
    fn emit(&mut self) {
        let mut s: String = self.line.iter().collect();
        s.truncate(s.trim_end().len());
        self.done.push(s);
        self.line.clear();
        self.col = 0;
    }

    fn put(&mut self, c: char) {
        if self.col < self.line.len() {
            self.line[self.col] = c;
        } else {
            while self.line.len() < self.col {
                self.line.push(' ');
            }
            self.line.push(c);
        }
        self.col += 1;
        if self.line.len() >= MAX_LINE_CHARS {
            self.emit();
        }
    }
}

fn param(params: &Params, i: usize, default: usize) -> usize {
    params
        .iter()
        .nth(i)
        .and_then(|p| p.first().copied())
        .filter(|v| *v != 0)
        .map_or(default, usize::from)
}

impl Perform for LineState {
    fn print(&mut self, c: char) {
        if !self.alt_screen {
            self.put(c);
        }
    }

    fn execute(&mut self, byte: u8) {
        if self.alt_screen {
            return;
        }
        match byte {
            b'\n' | 0x0b | 0x0c => self.emit(),
            b'\r' => self.col = 0,
            0x08 => self.col = self.col.saturating_sub(1),
            b'\t' => {
                let next = (self.col / 8 + 1) * 8;
                while self.col < next {
                    self.put(' ');
                }
            }
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &Params, intermediates: &[u8], _ignore: bool, action: char) {
        if intermediates == b"?" && matches!(action, 'h' | 'l') {
            for p in params.iter() {
                if matches!(p.first(), Some(1049 | 1047 | 47)) {
                    let enter = action == 'h';
                    if enter && !self.alt_screen && !self.line.is_empty() {
                        self.emit();
                    }
                    self.alt_screen = enter;
                    self.line.clear();
                    self.col = 0;
                }
            }
            return;
        }
        if self.alt_screen || !intermediates.is_empty() {
            return;
        }
        match action {
            'K' => match param(params, 0, 0) {
                0 => self.line.truncate(self.col),
                1 => {
                    for c in self.line.iter_mut().take(self.col + 1) {
                        *c = ' ';
                    }
                }
                _ => self.line.clear(),
            },
            'G' | '`' => self.col = param(params, 0, 1) - 1,
            'C' => self.col += param(params, 0, 1),
            'D' => self.col = self.col.saturating_sub(param(params, 0, 1)),
            'P' => {
                let n = param(params, 0, 1);
                let end = (self.col + n).min(self.line.len());
                if self.col < end {
                    self.line.drain(self.col..end);
                }
            }
            _ => {}
        }
    }
}

/// Strips escape sequences from a stream, keeping printable text, newlines, CR and tabs.
#[derive(Default)]
pub struct Stripper {
    parser: Parser,
    out: StripOut,
}

impl std::fmt::Debug for Stripper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stripper").finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct StripOut(String);

impl Perform for StripOut {
    fn print(&mut self, c: char) {
        self.0.push(c);
    }
    fn execute(&mut self, byte: u8) {
        if matches!(byte, b'\n' | b'\r' | b'\t') {
            self.0.push(byte as char);
        }
    }
}

impl Stripper {
    /// Strips `bytes`, keeping parser state (and split characters) for the next call.
    pub fn strip(&mut self, bytes: &[u8]) -> String {
        self.parser.advance(&mut self.out, bytes);
        std::mem::take(&mut self.out.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(chunks: &[&[u8]]) -> Vec<String> {
        let mut l = CleanLog::new(100);
        for c in chunks {
            l.feed(c);
        }
        l.lines().iter().cloned().collect()
    }

    #[test]
    fn cr_overwrite_erase_and_colors() {
        assert_eq!(
            log_of(&[b"progress 10%\rprogress 99%\r\x1b[2Kdone \x1b[31mred\x1b[0m\r\n"]),
            vec!["done red"]
        );
        assert_eq!(log_of(&[b"abcdef\rxy\n"]), vec!["xycdef"]);
        assert_eq!(log_of(&[b"abcdef\rxy\x1b[K\n"]), vec!["xy"]);
    }

    #[test]
    fn alternate_screen_repaint_is_suppressed() {
        assert_eq!(
            log_of(&[
                b"before\n\x1b[?1049h",
                b"tui frame\nmore\n",
                b"\x1b[?1049lafter\n"
            ]),
            vec!["before", "after"]
        );
    }

    #[test]
    fn fragmented_utf8_and_escapes() {
        let s = "héllo \x1b[1mwörld\x1b[0m\n".as_bytes();
        let chunks: Vec<&[u8]> = s.chunks(1).collect();
        assert_eq!(log_of(&chunks), vec!["héllo wörld"]);
    }

    #[test]
    fn retention_is_bounded_and_counted() {
        let mut l = CleanLog::new(3);
        for i in 0..10 {
            l.feed(format!("{i}\n").as_bytes());
        }
        assert_eq!((l.total(), l.oldest()), (10, 7));
        assert_eq!(l.since(8), (8, vec!["8".to_owned(), "9".to_owned()]));
    }

    #[test]
    fn stripper_keeps_text_only() {
        let mut s = Stripper::default();
        let mut out = s.strip(b"a\x1b[3");
        out.push_str(&s.strip(b"1mb\x1b]0;title\x07c\r\n"));
        assert_eq!(out, "abc\r\n");
    }
}
