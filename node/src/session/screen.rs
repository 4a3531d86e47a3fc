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

/// The cursor column of the grid and the line state of the clean log, stepped over plain text.
struct Sim {
    gcol: usize,
    gwrap: bool,
    llen: usize,
    lcol: usize,
    lines: u64,
}

impl Sim {
    /// `n` printable characters in a row: the same as `n` calls of [`Sim::step`].
    fn run(&mut self, mut n: usize, cols: usize) {
        if n == 0 {
            return;
        }
        // Grid: characters land on consecutive cells, wrapping after the last column.
        if self.gwrap {
            self.gcol = 0;
            self.gwrap = false;
        }
        let last = (self.gcol + n - 1) % cols;
        if last + 1 < cols {
            self.gcol = last + 1;
        } else {
            self.gcol = cols - 1;
            self.gwrap = true;
        }
        // Log: overwrite up to the line's end, then extend it, breaking overlong lines.
        while n > 0 {
            if self.lcol < self.llen {
                let k = n.min(self.llen - self.lcol);
                self.lcol += k;
                n -= k;
                continue;
            }
            let k = n.min(MAX_LINE_CHARS.saturating_sub(self.lcol).max(1));
            self.lcol += k;
            self.llen = self.lcol;
            n -= k;
            if self.llen >= MAX_LINE_CHARS {
                self.lines += 1;
                self.llen = 0;
                self.lcol = 0;
            }
        }
    }

    fn step(&mut self, b: u8, cols: usize) {
        match b {
            b'\r' => {
                self.gcol = 0;
                self.gwrap = false;
                self.lcol = 0;
            }
            // A line feed moves the grid cursor down, not across (the column stays).
            b'\n' => {
                self.lines += 1;
                self.llen = 0;
                self.lcol = 0;
            }
            _ => {
                if self.gwrap {
                    self.gcol = 0;
                    self.gwrap = false;
                }
                if self.gcol + 1 < cols {
                    self.gcol += 1;
                } else {
                    self.gwrap = true;
                }
                if self.lcol >= self.llen {
                    self.llen = self.lcol + 1;
                }
                self.lcol += 1;
                if self.llen >= MAX_LINE_CHARS {
                    self.lines += 1;
                    self.llen = 0;
                    self.lcol = 0;
                }
            }
        }
    }
}

/// The escape parser's state (mirroring vte's), as far as the fast path needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Ground,
    Esc,
    EscInt,
    CsiEntry,
    CsiParam,
    CsiInt,
    CsiIgnore,
    DcsEntry,
    DcsParam,
    DcsInt,
    DcsIgnore,
    DcsPass,
    Osc,
    SosPmApc,
}

/// Follows the bytes fed to the emulator: whether its parser is in the ground state with no
/// partial UTF-8 character, and whether the scroll region is the whole screen.
#[derive(Debug)]
struct Tracker {
    st: St,
    /// The last byte seen in the ground state was ASCII (no partial UTF-8 character).
    last_ascii: bool,
    /// The scroll region is the whole screen (as far as known; unknown counts as not).
    region_full: bool,
    /// The CSI being parsed collected an intermediate or private marker.
    csi_marked: bool,
    /// The CSI being parsed has a parameter this tracker does not model (subparameters).
    csi_odd: bool,
    csi_params: [u32; 2],
    csi_n: usize,
}

impl Default for Tracker {
    fn default() -> Self {
        Self {
            st: St::Ground,
            last_ascii: true,
            region_full: true,
            csi_marked: false,
            csi_odd: false,
            csi_params: [0; 2],
            csi_n: 0,
        }
    }
}

impl Tracker {
    fn clean(&self) -> bool {
        self.st == St::Ground && self.last_ascii
    }

    fn feed(&mut self, bytes: &[u8], rows: usize) {
        let mut i = 0;
        while i < bytes.len() {
            if self.st == St::Ground {
                let rest = &bytes[i..];
                match memchr::memchr(0x1B, rest) {
                    None => {
                        self.last_ascii = rest[rest.len() - 1] < 0x80;
                        return;
                    }
                    Some(k) => {
                        if k > 0 {
                            self.last_ascii = rest[k - 1] < 0x80;
                        }
                        i += k;
                    }
                }
            }
            self.step(bytes[i], rows);
            i += 1;
        }
    }

    fn csi_start(&mut self) {
        self.csi_marked = false;
        self.csi_odd = false;
        self.csi_params = [0; 2];
        self.csi_n = 0;
    }

    fn csi_digit(&mut self, b: u8) {
        if self.csi_n < 2 {
            let p = &mut self.csi_params[self.csi_n];
            *p = p.saturating_mul(10).saturating_add(u32::from(b - b'0'));
        }
    }

    fn csi_dispatch(&mut self, b: u8, rows: usize) {
        if b != b'r' || self.csi_marked {
            return;
        }
        if self.csi_odd || self.csi_n > 30 {
            self.region_full = false;
            return;
        }
        // DECSTBM: top defaults to 1, bottom (0 or absent) to the last row.
        let top = self.csi_params[0].max(1) as usize;
        let bottom = if self.csi_n >= 1 && self.csi_params[1] != 0 {
            self.csi_params[1] as usize
        } else {
            rows
        };
        if top >= bottom {
            return;
        }
        self.region_full = top <= 1 && bottom >= rows;
    }

    /// One byte outside the ground state (or the ESC leaving it), as vte's state machine.
    fn step(&mut self, b: u8, rows: usize) {
        // Transitions from anywhere but the ground state.
        let anywhere = |t: &mut Self| match b {
            0x18 | 0x1A => t.st = St::Ground,
            0x1B => t.st = St::Esc,
            _ => {}
        };
        match self.st {
            St::Ground => {
                if b == 0x1B {
                    self.st = St::Esc;
                }
            }
            St::Esc => match b {
                0x00..=0x17 | 0x19 | 0x1C..=0x1F | 0x1B => {}
                0x20..=0x2F => self.st = St::EscInt,
                0x50 => self.st = St::DcsEntry,
                0x58 | 0x5E | 0x5F => self.st = St::SosPmApc,
                0x5B => {
                    self.csi_start();
                    self.st = St::CsiEntry;
                }
                0x5D => self.st = St::Osc,
                0x30..=0x7E => {
                    if b == b'c' {
                        // RIS resets the scroll region.
                        self.region_full = true;
                    }
                    self.st = St::Ground;
                    self.last_ascii = true;
                }
                0x18 | 0x1A => self.st = St::Ground,
                _ => {}
            },
            St::EscInt => match b {
                0x00..=0x17 | 0x19 | 0x1C..=0x1F | 0x20..=0x2F | 0x7F => {}
                0x30..=0x7E => {
                    self.st = St::Ground;
                    self.last_ascii = true;
                }
                _ => anywhere(self),
            },
            St::CsiEntry | St::CsiParam => match b {
                0x00..=0x17 | 0x19 | 0x1C..=0x1F => {}
                0x20..=0x2F => {
                    self.csi_marked = true;
                    self.st = St::CsiInt;
                }
                0x30..=0x39 => {
                    self.csi_digit(b);
                    self.st = St::CsiParam;
                }
                0x3A => {
                    self.csi_odd = true;
                    self.st = St::CsiParam;
                }
                0x3B => {
                    self.csi_n += 1;
                    self.st = St::CsiParam;
                }
                0x3C..=0x3F => {
                    if self.st == St::CsiEntry {
                        self.csi_marked = true;
                        self.st = St::CsiParam;
                    } else {
                        self.st = St::CsiIgnore;
                    }
                }
                0x40..=0x7E => {
                    self.csi_dispatch(b, rows);
                    self.st = St::Ground;
                    self.last_ascii = true;
                }
                0x7F => {}
                _ => anywhere(self),
            },
            St::CsiInt => match b {
                0x00..=0x17 | 0x19 | 0x1C..=0x1F | 0x20..=0x2F => {}
                0x30..=0x3F => self.st = St::CsiIgnore,
                0x40..=0x7E => {
                    self.st = St::Ground;
                    self.last_ascii = true;
                }
                _ => anywhere(self),
            },
            St::CsiIgnore => match b {
                0x00..=0x17 | 0x19 | 0x1C..=0x1F | 0x20..=0x3F | 0x7F => {}
                0x40..=0x7E => {
                    self.st = St::Ground;
                    self.last_ascii = true;
                }
                _ => anywhere(self),
            },
            St::DcsEntry | St::DcsParam => match b {
                0x00..=0x17 | 0x19 | 0x1C..=0x1F | 0x7F => {}
                0x20..=0x2F => self.st = St::DcsInt,
                0x30..=0x3B => self.st = St::DcsParam,
                0x3C..=0x3F => {
                    self.st = if self.st == St::DcsEntry {
                        St::DcsParam
                    } else {
                        St::DcsIgnore
                    }
                }
                0x40..=0x7E => self.st = St::DcsPass,
                _ => anywhere(self),
            },
            St::DcsInt => match b {
                0x00..=0x17 | 0x19 | 0x1C..=0x1F | 0x20..=0x2F | 0x7F => {}
                0x30..=0x3F => self.st = St::DcsIgnore,
                0x40..=0x7E => self.st = St::DcsPass,
                _ => anywhere(self),
            },
            St::DcsPass => match b {
                0x9C => self.st = St::Ground,
                _ => anywhere(self),
            },
            St::Osc => match b {
                0x07 => self.st = St::Ground,
                _ => anywhere(self),
            },
            St::DcsIgnore | St::SosPmApc => anywhere(self),
        }
        if self.st == St::Ground && b != 0x1B {
            // Leaving a sequence: no character is half-decoded.
            self.last_ascii = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alacritty_terminal::vte::{Params, Parser, Perform};

    /// A tiny deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Records parser callbacks.
    #[derive(Default)]
    struct Rec(Vec<String>);
    impl Perform for Rec {
        fn print(&mut self, c: char) {
            self.0.push(format!("p{c}"));
        }
        fn execute(&mut self, b: u8) {
            self.0.push(format!("x{b}"));
        }
        fn csi_dispatch(&mut self, _: &Params, _: &[u8], _: bool, a: char) {
            self.0.push(format!("c{a}"));
        }
        fn esc_dispatch(&mut self, _: &[u8], _: bool, b: u8) {
            self.0.push(format!("e{b}"));
        }
        fn put(&mut self, b: u8) {
            self.0.push(format!("u{b}"));
        }
        fn osc_dispatch(&mut self, _: &[&[u8]], _: bool) {
            self.0.push("o".into());
        }
    }

    const PIECES: &[&[u8]] = &[
        b"\x1b",
        b"[",
        b"]",
        b"P",
        b"X",
        b"^",
        b"\x07",
        b"\x18",
        b"\x9c",
        b"\xc3",
        b"\xa9",
        b"\xe2\x82",
        b"\xac",
        b"?",
        b";",
        b":",
        b"1",
        b"5",
        b" ",
        b"m",
        b"r",
        b"c",
        b"q",
        b"\\",
        b"\n",
        b"\r",
        b"\x7f",
        b"A",
    ];

    fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.extend_from_slice(PIECES[rng.below(PIECES.len() as u64) as usize]);
        }
        v
    }

    #[test]
    fn tracker_clean_means_the_parser_prints_the_next_ascii_byte() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut clean_seen = 0;
        for _ in 0..100_000 {
            let n = 1 + rng.below(16) as usize;
            let bytes = random_bytes(&mut rng, n);
            // Split arbitrarily: the tracker, like the parser, keeps state across calls.
            let at = rng.below(bytes.len() as u64 + 1) as usize;
            let mut t = Tracker::default();
            t.feed(&bytes[..at], 24);
            t.feed(&bytes[at..], 24);
            if !t.clean() {
                continue;
            }
            clean_seen += 1;
            let mut p = Parser::new();
            let mut r = Rec::default();
            p.advance(&mut r, &bytes);
            r.0.clear();
            p.advance(&mut r, b"A");
            assert_eq!(r.0, vec!["pA".to_owned()], "after {bytes:?}");
        }
        assert!(clean_seen > 10_000, "{clean_seen}");
    }

    #[test]
    fn tracker_follows_the_scroll_region() {
        let mut t = Tracker::default();
        t.feed(b"\x1b[2;10r", 24);
        assert!(!t.region_full);
        t.feed(b"\x1b[r", 24);
        assert!(t.region_full);
        t.feed(b"\x1b[1;20r", 24);
        assert!(!t.region_full);
        t.feed(b"\x1b[1;24r", 24);
        assert!(t.region_full);
        t.feed(b"\x1b[5;3r", 24); // invalid: ignored
        assert!(t.region_full);
        t.feed(b"\x1b[3r", 24);
        assert!(!t.region_full);
        t.feed(b"\x1bc", 24);
        assert!(t.region_full);
        t.feed(b"\x1b[?1;3r", 24); // private: not DECSTBM
        assert!(t.region_full);
    }

    /// Everything observable about a screen.
    fn snapshot(
        s: &mut Screen,
    ) -> (
        Vec<String>,
        (usize, bool),
        super::super::grid::ScrollInfo,
        Vec<String>,
        u64,
    ) {
        s.settle();
        let info = s.grid.scroll_info();
        (
            s.grid.lines(0, info.total_lines),
            s.grid.cursor_col(),
            info,
            s.log.lines().iter().cloned().collect(),
            s.log.total(),
        )
    }

    /// The reference: every byte through the emulator and the clean log's parser.
    struct Reference {
        grid: Grid,
        log: CleanLog,
    }

    impl Reference {
        fn feed(&mut self, b: &[u8]) {
            self.log.feed(b);
            self.grid.feed(b);
        }
        fn snapshot(
            &self,
        ) -> (
            Vec<String>,
            (usize, bool),
            super::super::grid::ScrollInfo,
            Vec<String>,
            u64,
        ) {
            let info = self.grid.scroll_info();
            (
                self.grid.lines(0, info.total_lines),
                self.grid.cursor_col(),
                info,
                self.log.lines().iter().cloned().collect(),
                self.log.total(),
            )
        }
    }

    fn plain_lines(rng: &mut Rng, n: usize, crlf: bool, long: bool) -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..n {
            let len = if long { rng.below(60) } else { rng.below(14) } as usize;
            for j in 0..len {
                v.push(b'a' + ((i + j) % 26) as u8);
            }
            if rng.below(7) == 0 {
                v.extend_from_slice(b"\rXY");
            }
            v.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
        }
        v
    }

    const NOISE: &[&[u8]] = &[
        b"\x1b[31mred\x1b[0m",
        b"\x1b[2Kcleared",
        b"\x1b[5;3H",
        b"\x1b[3;8r",
        b"\x1b[r",
        b"\x1b[?1049hALT\x1b[?1049l",
        b"\x1b[?7l",
        b"\x1b[?7h",
        b"\x1b]0;title\x07",
        b"\x1b[?2026hsync\x1b[?2026l",
        b"h\xc3\xa9llo",
        b"\xe2\x82",
        b"\xac",
        b"\x1b[",
        b"4",
        b"0m",
        b"\t",
        b"\x1b[4h",
        b"\x1b[4l",
        b"\x1b[b",
        b"\x1b[10C",
        b"\x1bc",
    ];

    fn run_differential(seed: u64, rows: u16, cols: u16, scrollback: usize, log_cap: usize) {
        let mut rng = Rng(seed);
        let mut fast = Screen::with_scrollback(rows, cols, scrollback, log_cap);
        let mut reference = Reference {
            grid: Grid::with_scrollback(rows, cols, scrollback),
            log: CleanLog::new(log_cap),
        };
        let mut dropped_any = false;
        for step in 0..120 {
            let mut chunk = Vec::new();
            match rng.below(6) {
                0 => chunk.extend_from_slice(NOISE[rng.below(NOISE.len() as u64) as usize]),
                1 => {
                    let n = 200 + rng.below(400) as usize;
                    let (crlf, long) = (rng.below(2) == 0, rng.below(3) == 0);
                    chunk = plain_lines(&mut rng, n, crlf, long);
                }
                _ => {
                    let n = rng.below(40) as usize;
                    let (crlf, long) = (rng.below(2) == 0, rng.below(4) == 0);
                    chunk = plain_lines(&mut rng, n, crlf, long);
                    if rng.below(3) == 0 {
                        chunk.extend_from_slice(NOISE[rng.below(NOISE.len() as u64) as usize]);
                    }
                }
            }
            // Feed in random fragments.
            let mut rest = &chunk[..];
            while !rest.is_empty() {
                let k = (1 + rng.below(300) as usize).min(rest.len());
                fast.feed(&rest[..k]);
                reference.feed(&rest[..k]);
                dropped_any |= fast.pending.dropped.is_some();
                rest = &rest[k..];
            }
            if rng.below(25) == 0 {
                let (r, c) = (rows + rng.below(3) as u16, cols - rng.below(3) as u16);
                fast.resize(r, c);
                reference.grid.resize(r, c);
            }
            if rng.below(4) == 0 || step == 119 {
                assert_eq!(
                    snapshot(&mut fast),
                    reference.snapshot(),
                    "seed {seed} step {step}"
                );
            }
        }
        assert!(
            dropped_any,
            "seed {seed}: the fast path never dropped a head"
        );
    }

    #[test]
    fn fast_path_matches_feeding_every_byte() {
        for seed in 1..=12u64 {
            run_differential(seed.wrapping_mul(0x2545_f491_4f6c_dd1d), 6, 13, 40, 30);
        }
    }

    #[test]
    fn fast_path_matches_with_a_wide_log_and_scrolled_view() {
        let mut rng = Rng(77);
        let mut fast = Screen::with_scrollback(5, 20, 30, 100);
        let mut reference = Reference {
            grid: Grid::with_scrollback(5, 20, 30),
            log: CleanLog::new(100),
        };
        fast.feed(b"start\r\n");
        reference.feed(b"start\r\n");
        fast.grid.scroll_to_offset(1);
        reference.grid.scroll_to_offset(1);
        for _ in 0..10 {
            let c = plain_lines(&mut rng, 500, false, true);
            fast.feed(&c);
            reference.feed(&c);
        }
        assert!(fast.has_pending());
        assert_eq!(snapshot(&mut fast), reference.snapshot());
    }

    /// Raw-mode output: line feeds without carriage returns, so the cursor column carries from
    /// line to line (a staircase that wraps), including lines ending exactly on the last column.
    #[test]
    fn staircase_without_carriage_returns_matches() {
        for seed in 1..=6u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let cols = 7 + seed as u16;
            let mut fast = Screen::with_scrollback(4, cols, 25, 20);
            let mut reference = Reference {
                grid: Grid::with_scrollback(4, cols, 25),
                log: CleanLog::new(20),
            };
            let mut dropped = 0;
            for _ in 0..40 {
                let mut chunk = Vec::new();
                for _ in 0..rng.below(80) {
                    let len = match rng.below(4) {
                        0 => cols as u64,
                        1 => 2 * cols as u64,
                        _ => rng.below(3 * cols as u64),
                    };
                    chunk.extend((0..len).map(|j| b'a' + (j % 26) as u8));
                    chunk.push(b'\n');
                }
                fast.feed(&chunk);
                reference.feed(&chunk);
                dropped += usize::from(fast.pending.dropped.is_some());
                if rng.below(5) == 0 {
                    assert_eq!(snapshot(&mut fast), reference.snapshot(), "seed {seed}");
                }
            }
            assert!(dropped > 0, "seed {seed}");
            assert_eq!(snapshot(&mut fast), reference.snapshot(), "seed {seed}");
        }
    }

    #[test]
    fn a_run_of_printables_steps_like_single_characters() {
        let mut rng = Rng(5);
        for _ in 0..5_000 {
            let cols = 1 + rng.below(12) as usize;
            let start = |rng: &mut Rng| Sim {
                gcol: rng.below(cols as u64) as usize,
                gwrap: rng.below(3) == 0,
                llen: rng.below(MAX_LINE_CHARS as u64) as usize,
                lcol: rng.below(MAX_LINE_CHARS as u64 + 50) as usize,
                lines: 0,
            };
            let mut a = start(&mut rng);
            if a.gwrap {
                a.gcol = cols - 1;
            }
            let mut b = Sim { ..a };
            let n = match rng.below(3) {
                0 => rng.below(40) as usize,
                1 => rng.below(3 * MAX_LINE_CHARS as u64) as usize,
                _ => MAX_LINE_CHARS - a.lcol.min(MAX_LINE_CHARS),
            };
            a.run(n, cols);
            for _ in 0..n {
                b.step(b'x', cols);
            }
            assert_eq!(
                (a.gcol, a.gwrap, a.llen, a.lcol, a.lines),
                (b.gcol, b.gwrap, b.llen, b.lcol, b.lines)
            );
        }
    }

    #[test]
    fn plain_prefix_stops_at_the_first_other_byte() {
        let mut v = vec![b'a'; 100];
        assert_eq!(plain_prefix(&v), 100);
        for at in [0, 5, 31, 32, 33, 64, 99] {
            v[at] = 0x1b;
            assert_eq!(plain_prefix(&v), at);
            v[at] = b'\n';
        }
    }

    #[test]
    fn long_lines_without_newlines_stay_bounded_and_exact() {
        let mut fast = Screen::with_scrollback(4, 10, 20, 10);
        let mut reference = Reference {
            grid: Grid::with_scrollback(4, 10, 20),
            log: CleanLog::new(10),
        };
        let line = vec![b'z'; MAX_LINE_CHARS * 2 + 17];
        for _ in 0..3 {
            fast.feed(&line);
            reference.feed(&line);
            fast.feed(b"\n");
            reference.feed(b"\n");
        }
        assert_eq!(snapshot(&mut fast), reference.snapshot());
    }
}
