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
