//! The emulator grid and clean log of one session, fed together, with a fast path for bulk
//! plain text.
//!
//! Plain text (printable ASCII, CR, LF) arriving while the escape parser is in its ground state,
//! on the primary screen, with a full scroll region, autowrap on and no synchronized update
//! pending, is not run through the emulator at once: it is appended to a pending window that is
//! applied when anyone reads the screen ([`Screen::settle`], which `Session::screen` calls) or
//! when other output arrives. Once the window holds more lines than can still be seen (the
//! grid's scrollback plus two screens, and the clean log's retention), its head is dropped
//! after simulating the two things it leaves behind: the cursor column (and pending wrap) and
//! the number of clean-log lines. Applying the rest gives the same rows, cursor, scroll
//! position and log as feeding every byte: every row the dropped head produced is scrolled out
//! of the scrollback by the window's own lines, and the log's old lines leave its retention.
//! The differential tests below hold the fast path to that, byte for byte.

use super::cleanlog::{CleanLog, MAX_LINE_CHARS};
use super::grid::Grid;

mod tracker;

use tracker::{Sim, Tracker};

/// A pending window larger than this is applied even when its lines are too long to drop a
/// head (bounds memory and the cost of one settle).
const MAX_PENDING_BYTES: usize = 2 * 1024 * 1024;

/// The window may grow past what it must keep by this fraction (plus a few lines) before a
/// head is dropped, so heads are dropped in batches, not per line.
const TRIM_SLACK_DIV: usize = 4;

/// A window that has grown this large gives its allocation back when applied.
const KEEP_ALLOC_BYTES: usize = 64 * 1024;

/// The grid and clean log of one session.
#[derive(Debug)]
pub struct Screen {
    /// The emulated terminal.
    pub grid: Grid,
    /// Lines that left the cursor row, cleaned.
    pub log: CleanLog,
    track: Tracker,
    pending: Pending,
    scrollback: usize,
    /// Output bytes fed so far: the raw stream offset this screen reflects.
    fed: u64,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    /// Line feeds in `bytes`.
    lfs: usize,
    /// Set once a head of the window was dropped.
    dropped: Option<Dropped>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("bytes", &self.bytes.len())
            .field("lfs", &self.lfs)
            .field("dropped", &self.dropped)
            .finish()
    }
}

/// What a dropped window head leaves behind.
#[derive(Debug, Clone, Copy)]
struct Dropped {
    /// Grid cursor column at the window start, and whether a wrap was pending there.
    col: usize,
    wrap: bool,
    /// Clean-log lines the head (and the line in progress before it) produced.
    log_lines: u64,
}

/// Whether `b` may go through the fast path.
fn is_plain(b: u8) -> bool {
    matches!(b, 0x20..=0x7E | b'\r' | b'\n')
}

/// Length of the run of plain bytes at the start of `b`, in blocks the compiler vectorizes.
fn plain_prefix(b: &[u8]) -> usize {
    const BLOCK: usize = 32;
    let mut n = 0;
    for c in b.chunks_exact(BLOCK) {
        if !c.iter().fold(true, |ok, &x| ok & is_plain(x)) {
            break;
        }
        n += BLOCK;
    }
    n + b[n..]
        .iter()
        .position(|&x| !is_plain(x))
        .unwrap_or(b.len() - n)
}

/// Screens larger than this (in cells) are compacted when their session ends
/// ([`Screen::release`]); 100,000 cells is four times a 100 × 250 terminal.
pub const COMPACT_ABOVE_CELLS: usize = 100_000;

impl Screen {
    /// A screen of `rows` × `cols` with the default scrollback and clean-log retention.
    pub fn new(rows: u16, cols: u16, log_lines: usize) -> Self {
        Self::with_scrollback(rows, cols, super::grid::SCROLLBACK_ROWS, log_lines)
    }

    /// A screen with explicit scrollback rows and clean-log retention.
    pub fn with_scrollback(rows: u16, cols: u16, scrollback: usize, log_lines: usize) -> Self {
        Self {
            grid: Grid::with_scrollback(rows, cols, scrollback),
            log: CleanLog::new(log_lines),
            track: Tracker::default(),
            pending: Pending::default(),
            scrollback,
            fed: 0,
        }
    }

    /// Feeds output; returns bytes the emulator wants written back to the PTY.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.fed += bytes.len() as u64;
        let mut replies = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.plain_ok() {
                let n = plain_prefix(rest);
                if n > 0 {
                    self.push_plain(&rest[..n]);
                    rest = &rest[n..];
                    continue;
                }
            }
            self.settle();
            // Everything through the last byte the fast path cannot take goes the full way.
            let end = rest
                .iter()
                .rposition(|&b| !is_plain(b))
                .map_or(rest.len(), |i| i + 1);
            let seg = &rest[..end];
            self.log.feed(seg);
            replies.extend(self.grid.feed(seg));
            let rows = self.grid.size().0;
            self.track.feed(seg, rows);
            rest = &rest[end..];
        }
        replies
    }

    /// Applies pending plain text, so `grid` and `log` reflect every byte fed.
    pub fn settle(&mut self) {
        if self.pending.bytes.is_empty() {
            return;
        }
        let mut bytes = std::mem::take(&mut self.pending.bytes);
        if let Some(d) = self.pending.dropped.take() {
            self.grid.set_cursor_col(d.col, d.wrap);
            self.log.skip_lines(d.log_lines);
        }
        self.log.feed_plain(&bytes);
        self.grid.feed(&bytes);
        self.pending.lfs = 0;
        if bytes.capacity() <= KEEP_ALLOC_BYTES {
            bytes.clear();
            self.pending.bytes = bytes;
        }
    }

    /// Starts counting fed bytes at `offset`: a re-adopted session's screen is rebuilt from
    /// its holder's ring, whose first byte is at that stream offset.
    pub fn start_at(&mut self, offset: u64) {
        self.fed = offset;
    }

    /// Output bytes fed so far. Every byte reaches the raw stream before the screen, so a
    /// stream subscribed at this offset continues exactly where this screen stands.
    pub fn fed(&self) -> u64 {
        self.fed
    }

    /// Whether plain text is waiting to be applied.
    pub fn has_pending(&self) -> bool {
        !self.pending.bytes.is_empty()
    }

    /// Resizes the grid (reflowing it), after applying pending text.
    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.settle();
        let before = self.grid.size();
        self.grid.resize(rows, cols);
        if self.grid.size() != before {
            // The emulator resets the scroll region on a real resize.
            self.track.region_full = true;
        }
    }

    /// Gives back the memory of a large screen whose session ended: its grid is replaced by a
    /// compact copy of the same rows (`Grid::compacted`). Screens of up to
    /// [`COMPACT_ABOVE_CELLS`] keep their emulator whole: they cost little, and their readers
    /// keep every detail (tabs, soft wraps, modes).
    pub fn release(&mut self) {
        self.settle();
        let (rows, cols) = self.grid.size();
        if rows * cols > COMPACT_ABOVE_CELLS {
            self.grid = self.grid.compacted();
            self.track = Tracker::default();
        }
    }

    /// Expires a synchronized update whose deadline passed.
    pub fn expire_sync(&mut self, now: std::time::Instant) {
        self.settle();
        self.grid.expire_sync(now);
    }

    fn plain_ok(&self) -> bool {
        if !self.pending.bytes.is_empty() {
            // Plain text changes none of the conditions below.
            return true;
        }
        self.track.clean()
            && self.track.region_full
            && !self.grid.alt_screen()
            && !self.log.alt_screen()
            && self.grid.sync_deadline().is_none()
            && self.grid.line_wrap()
    }

    /// Lines the window must keep so that nothing its dropped head produced can still show.
    fn keep_lines(&self) -> usize {
        let rows = self.grid.size().0;
        (self.scrollback + 2 * rows + 2).max(self.log.cap() + 1)
    }

    fn push_plain(&mut self, bytes: &[u8]) {
        self.pending.bytes.extend_from_slice(bytes);
        self.pending.lfs += bytes.iter().filter(|&&b| b == b'\n').count();
        let keep = self.keep_lines();
        if self.pending.lfs > keep + keep / TRIM_SLACK_DIV + 16
            || (self.pending.bytes.len() > MAX_PENDING_BYTES && self.pending.lfs > keep)
        {
            self.drop_head(keep);
        }
        if self.pending.bytes.len() > MAX_PENDING_BYTES {
            self.settle();
        }
    }

    /// Drops the window's head so that `keep` line feeds remain, recording what it leaves.
    fn drop_head(&mut self, keep: usize) {
        let drop_lfs = self.pending.lfs - keep;
        let mut sim = match self.pending.dropped {
            Some(d) => Sim {
                gcol: d.col,
                gwrap: d.wrap,
                llen: 0,
                lcol: 0,
                lines: d.log_lines,
            },
            None => {
                let (gcol, gwrap) = self.grid.cursor_col();
                let (llen, lcol) = self.log.line_state();
                Sim {
                    gcol,
                    gwrap,
                    llen,
                    lcol,
                    lines: 0,
                }
            }
        };
        let cols = self.grid.size().1;
        let bytes = &self.pending.bytes;
        let mut lfs = 0;
        let mut cut = 0;
        let mut at = 0;
        for i in memchr::memchr2_iter(b'\n', b'\r', bytes) {
            sim.run(i - at, cols);
            at = i + 1;
            sim.step(bytes[i], cols);
            if bytes[i] == b'\n' {
                lfs += 1;
                if lfs == drop_lfs {
                    cut = i + 1;
                    break;
                }
            }
        }
        // The emulator remembers the last printed character (for REP); the kept window must
        // print one of its own so that memory does not depend on the dropped head.
        if cut == 0 || !bytes[cut..].iter().any(|&b| b >= 0x20) {
            return;
        }
        self.pending.dropped = Some(Dropped {
            col: sim.gcol,
            wrap: sim.gwrap,
            log_lines: sim.lines,
        });
        self.pending.bytes.drain(..cut);
        self.pending.lfs -= drop_lfs;
    }
}

#[cfg(test)]
mod tests;
