//! The terminal grid of one session: a real emulator (alacritty_terminal) with scrollback,
//! cursor motion, erase, alternate screen, DEC 2026 synchronized updates and reflow on resize.
//!
//! It owns the emulator state and answers row queries by absolute index (oldest history row is
//! 0). It does not own the PTY: replies the emulator wants to send back (cursor position
//! reports, device attributes) are collected for the caller to write.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use alacritty_terminal::event::{Event, EventListener};
use alacritty_terminal::grid::{Dimensions, Scroll};
use alacritty_terminal::index::{Column, Line};
use alacritty_terminal::term::cell::Flags;
use alacritty_terminal::term::{Config, Term, TermMode};
use alacritty_terminal::vte::ansi::{Color, NamedColor, Processor, StdSyncHandler};
use tuic_proto::screen as wire;

/// Scrollback rows the grid keeps.
pub const SCROLLBACK_ROWS: usize = 10_000;

#[derive(Clone, Copy, Debug)]
struct Size {
    rows: usize,
    cols: usize,
}

impl Dimensions for Size {
    fn total_lines(&self) -> usize {
        self.rows
    }
    fn screen_lines(&self) -> usize {
        self.rows
    }
    fn columns(&self) -> usize {
        self.cols
    }
}

/// Collects what the emulator wants written back to the PTY, and the window title it set.
#[derive(Clone, Default)]
struct Replies(Arc<Mutex<Vec<u8>>>, Arc<Mutex<String>>);

impl EventListener for Replies {
    fn send_event(&self, event: Event) {
        match event {
            Event::PtyWrite(s) => self
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(s.as_bytes()),
            Event::Title(t) => *self.1.lock().unwrap_or_else(|p| p.into_inner()) = t,
            Event::ResetTitle => self.1.lock().unwrap_or_else(|p| p.into_inner()).clear(),
            _ => {}
        }
    }
}

/// The wire colour of a cell colour; `None` for the terminal's default colours.
fn wire_color(c: Color) -> Option<wire::Color> {
    match c {
        Color::Spec(rgb) => Some(wire::Color::Rgb(rgb.r, rgb.g, rgb.b)),
        Color::Indexed(i) => Some(wire::Color::Index(i)),
        Color::Named(n) => {
            let v = n as usize;
            let dim = NamedColor::DimBlack as usize;
            if v < 16 {
                Some(wire::Color::Index(v as u8))
            } else if (dim..dim + 8).contains(&v) {
                Some(wire::Color::Index((v - dim) as u8))
            } else {
                None
            }
        }
    }
}

fn wire_attrs(f: Flags) -> u16 {
    use tuic_proto::screen::attrs as a;
    let mut v = 0;
    for (flag, bit) in [
        (Flags::BOLD, a::BOLD),
        (Flags::ITALIC, a::ITALIC),
        (Flags::ALL_UNDERLINES, a::UNDERLINE),
        (Flags::INVERSE, a::INVERSE),
        (Flags::DIM, a::DIM),
        (Flags::STRIKEOUT, a::STRIKE),
        (Flags::HIDDEN, a::HIDDEN),
    ] {
        if f.intersects(flag) {
            v |= bit;
        }
    }
    v
}

/// Whether a blank cell of this style shows nothing (trailing ones are trimmed).
fn blank_is_invisible(r: &wire::Run) -> bool {
    use tuic_proto::screen::attrs as a;
    r.bg.is_none() && r.attrs & (a::INVERSE | a::UNDERLINE | a::STRIKE) == 0
}

/// Scroll position and size, as `terminal/scroll-info` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ScrollInfo {
    /// Rows the view is scrolled back from the bottom.
    pub display_offset: usize,
    /// History plus screen rows.
    pub total_lines: usize,
    /// Visible rows.
    pub screen_lines: usize,
}

/// One emulated terminal.
pub struct Grid {
    term: Term<Replies>,
    parser: Processor<StdSyncHandler>,
    replies: Replies,
}

impl std::fmt::Debug for Grid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grid")
            .field("info", &self.scroll_info())
            .finish()
    }
}

impl Grid {
    /// A blank grid of `rows` × `cols` (both ≥ 1).
    pub fn new(rows: u16, cols: u16) -> Self {
        Self::with_scrollback(rows, cols, SCROLLBACK_ROWS)
    }

    /// A blank grid keeping `scrollback` history rows.
    pub fn with_scrollback(rows: u16, cols: u16, scrollback: usize) -> Self {
        let replies = Replies::default();
        let config = Config {
            scrolling_history: scrollback,
            ..Config::default()
        };
        let size = Size {
            rows: rows.max(1).into(),
            cols: cols.max(1).into(),
        };
        Self {
            term: Term::new(config, &size, replies.clone()),
            parser: Processor::new(),
            replies,
        }
    }

    /// Feeds output; returns bytes the emulator wants written back to the PTY.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.expire_sync(Instant::now());
        self.parser.advance(&mut self.term, bytes);
        std::mem::take(&mut *self.replies.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Ends a synchronized update whose deadline passed (the emulator's own bound, 150 ms),
    /// so a frame that never closes cannot hide output forever.
    pub fn expire_sync(&mut self, now: Instant) {
        if self
            .parser
            .sync_timeout()
            .sync_timeout()
            .is_some_and(|t| t <= now)
        {
            self.parser.stop_sync(&mut self.term);
        }
    }

    /// When a synchronized update is pending, its deadline.
    pub fn sync_deadline(&self) -> Option<Instant> {
        self.parser.sync_timeout().sync_timeout()
    }

    /// Resizes, reflowing soft-wrapped rows.
    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.term.resize(Size {
            rows: rows.max(1).into(),
            cols: cols.max(1).into(),
        });
    }

    /// The same rows in the least memory, for a session that ended: every history and screen
    /// row redrawn with its colours into a grid as wide as the widest drawn row, so an exited
    /// session's readers (output, lines, snapshot, screen sync) still see its rows while the
    /// full-width grid is freed (the emulator keeps every row at full capacity, even after a
    /// shrink). Not kept: modes, the cursor, the scroll position, soft-wrap marks (a wrapped
    /// row stays its own row) and the primary screen's history when the alternate screen
    /// was showing (the copy is what a reader saw: the alternate screen).
    pub fn compacted(&self) -> Grid {
        let g = self.term.grid();
        let rows = g.screen_lines();
        let history = g.history_size();
        let lines: Vec<_> = (-(history as i32)..rows as i32)
            .map(|r| &g[Line(r)])
            .collect();
        let ends: Vec<usize> = lines.iter().map(|r| super::ansi::drawn_end(r)).collect();
        let width = ends
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .clamp(1, usize::from(u16::MAX));
        let mut text = String::new();
        for (i, (row, end)) in lines.iter().zip(&ends).enumerate() {
            if i > 0 {
                text.push_str("\r\n");
            }
            super::ansi::draw_row(row, *end, &mut text);
        }
        let mut out = Grid::with_scrollback(rows as u16, width as u16, history);
        *out.replies.1.lock().unwrap_or_else(|p| p.into_inner()) = self.title();
        out.feed(text.as_bytes());
        out
    }

    /// Scroll position and size.
    pub fn scroll_info(&self) -> ScrollInfo {
        let g = self.term.grid();
        ScrollInfo {
            display_offset: g.display_offset(),
            total_lines: g.total_lines(),
            screen_lines: g.screen_lines(),
        }
    }

    /// Scrolls the view to `offset` rows back from the bottom (clamped).
    pub fn scroll_to_offset(&mut self, offset: usize) {
        let cur = self.term.grid().display_offset() as i64;
        let delta = offset as i64 - cur;
        self.term.scroll_display(Scroll::Delta(
            delta.clamp(i32::MIN as i64, i32::MAX as i64) as i32
        ));
    }

    /// Rows `start..end` (absolute; 0 is the oldest history row), trailing blanks trimmed.
    pub fn lines(&self, start: usize, end: usize) -> Vec<String> {
        let g = self.term.grid();
        let history = g.history_size();
        let end = end.min(g.total_lines());
        (start.min(end)..end)
            .map(|r| self.row_text(Line(r as i32 - history as i32)))
            .collect()
    }

    /// The visible screen rows (bottom of the grid, ignoring the scroll position).
    pub fn screen(&self) -> Vec<String> {
        let g = self.term.grid();
        (0..g.screen_lines())
            .map(|r| self.row_text(Line(r as i32)))
            .collect()
    }

    /// Visible rows and columns.
    pub fn size(&self) -> (usize, usize) {
        let g = self.term.grid();
        (g.screen_lines(), g.columns())
    }

    /// The cursor column and whether the next printed character wraps first (the cursor sits
    /// past the last column).
    pub fn cursor_col(&self) -> (usize, bool) {
        let c = &self.term.grid().cursor;
        (c.point.column.0, c.input_needs_wrap)
    }

    /// Moves the cursor to `col` on its row; `wrap` leaves it pending a wrap there (only
    /// meaningful on the last column, and it writes a blank into that cell).
    pub fn set_cursor_col(&mut self, col: usize, wrap: bool) {
        self.feed(format!("\x1b[{}G", col + 1).as_bytes());
        if wrap {
            self.feed(b" ");
        }
    }

    /// Whether printing past the last column wraps (DECAWM).
    pub fn line_wrap(&self) -> bool {
        self.term.mode().contains(TermMode::LINE_WRAP)
    }

    /// Whether the program asked for bracketed paste (DECSET 2004).
    pub fn bracketed_paste(&self) -> bool {
        self.term.mode().contains(TermMode::BRACKETED_PASTE)
    }

    /// Whether the alternate screen is active.
    pub fn alt_screen(&self) -> bool {
        self.term.mode().contains(TermMode::ALT_SCREEN)
    }

    /// The window title the program set (OSC 0/2); empty when none.
    pub fn title(&self) -> String {
        self.replies
            .1
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The screen as a screen-sync snapshot, viewed `view_offset` rows back in the history
    /// (clamped; 0 is the live screen). The grid's own scroll position is not used or changed.
    pub fn snapshot(&self, view_offset: usize) -> wire::Snapshot {
        let g = self.term.grid();
        let history = g.history_size();
        let off = view_offset.min(history);
        let rows = g.screen_lines();
        let lines = (0..rows)
            .map(|r| self.row_runs(Line(r as i32 - off as i32)))
            .collect();
        let c = g.cursor.point;
        let y = c.line.0 + off as i32;
        let visible =
            self.term.mode().contains(TermMode::SHOW_CURSOR) && (0..rows as i32).contains(&y);
        wire::Snapshot {
            cols: g.columns() as u16,
            rows: rows as u16,
            cursor: wire::Cursor {
                x: c.column.0.min(g.columns().saturating_sub(1)) as u16,
                y: y.clamp(0, rows as i32 - 1) as u16,
                visible,
            },
            alt_screen: self.alt_screen(),
            title: self.title(),
            scroll: off as u32,
            history: history as u32,
            lines,
        }
    }

    /// One row as runs of equally styled cells, trailing invisible blanks trimmed.
    fn row_runs(&self, line: Line) -> wire::Row {
        let row = &self.term.grid()[line];
        let mut runs: Vec<wire::Run> = Vec::new();
        for col in 0..row.len() {
            let cell = &row[Column(col)];
            if cell
                .flags
                .intersects(Flags::WIDE_CHAR_SPACER | Flags::LEADING_WIDE_CHAR_SPACER)
            {
                continue;
            }
            let style = wire::Run {
                text: String::new(),
                fg: wire_color(cell.fg),
                bg: wire_color(cell.bg),
                attrs: wire_attrs(cell.flags),
                wide: cell.flags.contains(Flags::WIDE_CHAR),
            };
            let run = match runs.last_mut() {
                Some(r) if r.same_style(&style) => r,
                _ => {
                    runs.push(style);
                    runs.last_mut().expect("just pushed")
                }
            };
            run.text.push(if cell.c == '\t' { ' ' } else { cell.c });
            if let Some(z) = cell.zerowidth() {
                run.text.extend(z);
            }
        }
        while let Some(r) = runs.last_mut() {
            if !blank_is_invisible(r) {
                break;
            }
            r.text.truncate(r.text.trim_end_matches(' ').len());
            if !r.text.is_empty() {
                break;
            }
            runs.pop();
        }
        runs
    }

    /// The escape sequences that redraw the visible screen (see `session::ansi`).
    pub fn render_ansi(&self) -> String {
        super::ansi::render(&self.term)
    }

    /// Cursor row and column on the visible screen, and whether it is shown.
    pub fn cursor(&self) -> (usize, usize, bool) {
        let p = self.term.grid().cursor.point;
        (
            p.line.0.max(0) as usize,
            p.column.0,
            self.term.mode().contains(TermMode::SHOW_CURSOR),
        )
    }

    /// Whether the application cursor-keys mode (DECCKM) is on.
    pub fn app_cursor(&self) -> bool {
        self.term.mode().contains(TermMode::APP_CURSOR)
    }

    /// Every visible cell's character, colours and attributes (for tests comparing screens).
    #[cfg(test)]
    pub fn cell_styles(&self) -> Vec<String> {
        let g = self.term.grid();
        let mut out = Vec::new();
        for r in 0..g.screen_lines() {
            let row = &g[Line(r as i32)];
            for c in 0..row.len() {
                let cell = &row[Column(c)];
                out.push(format!(
                    "{:?}{:?}{:?}{:?}",
                    cell.c, cell.fg, cell.bg, cell.flags
                ));
            }
        }
        out
    }

    fn row_text(&self, line: Line) -> String {
        let row = &self.term.grid()[line];
        let mut s = String::with_capacity(row.len());
        for col in 0..row.len() {
            let cell = &row[Column(col)];
            if cell
                .flags
                .intersects(Flags::WIDE_CHAR_SPACER | Flags::LEADING_WIDE_CHAR_SPACER)
            {
                continue;
            }
            s.push(cell.c);
            if let Some(z) = cell.zerowidth() {
                s.extend(z);
            }
        }
        s.truncate(s.trim_end().len());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(g: &Grid) -> Vec<String> {
        let n = g.scroll_info().total_lines;
        g.lines(0, n)
    }

    #[test]
    fn compacted_keeps_every_row_colour_and_title_in_a_narrow_grid() {
        let mut g = Grid::with_scrollback(5, 200, 100);
        g.feed(b"\x1b]0;the title\x07");
        for i in 0..12 {
            g.feed(format!("line {i}\r\n").as_bytes());
        }
        g.feed("\x1b[31mred\x1b[0m tail \x1b[44m  \x1b[0m 界".as_bytes());
        let c = g.compacted();
        assert_eq!(all(&c), all(&g));
        assert_eq!(c.scroll_info().total_lines, g.scroll_info().total_lines);
        // As wide as the widest drawn row ("red tail " + two blue cells + " " + a wide char).
        assert_eq!(c.size(), (5, 14));
        assert_eq!(c.title(), "the title");
        assert_eq!(c.snapshot(0).lines, g.snapshot(0).lines);
        assert_eq!(c.snapshot(3).lines, g.snapshot(3).lines);
    }

    #[test]
    fn cr_overwrite_erase_and_scrollback() {
        let mut g = Grid::new(4, 20);
        for i in 0..10 {
            g.feed(format!("junk junk\r\x1b[2Krec {i}\r\n").as_bytes());
        }
        let rows: Vec<String> = all(&g).into_iter().filter(|r| !r.is_empty()).collect();
        let want: Vec<String> = (0..10).map(|i| format!("rec {i}")).collect();
        assert_eq!(rows, want);
    }

    #[test]
    fn synchronized_update_applies_whole_frame() {
        let mut g = Grid::new(3, 20);
        g.feed(b"\x1b[?2026hframe");
        assert!(g.sync_deadline().is_some());
        g.feed(b" one\x1b[?2026l");
        assert_eq!(g.lines(0, 1), vec!["frame one"]);
    }

    #[test]
    fn resize_reflows_soft_wrapped_rows() {
        let mut g = Grid::new(5, 10);
        g.feed(b"0123456789abcde\r\n");
        assert_eq!(&all(&g)[..2], ["0123456789", "abcde"]);
        g.resize(5, 20);
        assert_eq!(all(&g)[0], "0123456789abcde");
    }

    #[test]
    fn replies_to_cursor_position_queries() {
        let mut g = Grid::new(5, 10);
        assert_eq!(g.feed(b"ab\x1b[6n"), b"\x1b[1;3R");
    }

    #[test]
    fn scroll_to_offset_moves_the_view() {
        let mut g = Grid::new(3, 10);
        for i in 0..10 {
            g.feed(format!("{i}\r\n").as_bytes());
        }
        g.scroll_to_offset(4);
        assert_eq!(g.scroll_info().display_offset, 4);
        g.scroll_to_offset(1000);
        assert_eq!(g.scroll_info().display_offset, 8);
    }

    #[test]
    fn snapshot_follows_a_vim_like_program() {
        use tuic_proto::screen::{Mirror, ServerFrame, attrs, diff};
        let mut g = Grid::new(5, 20);
        g.feed(b"$ vim notes\r\n");
        let before = g.snapshot(0);
        assert!(!before.alt_screen);
        assert_eq!(before.text_rows()[0], "$ vim notes");
        // Enter the alternate screen, set a title, clear, draw with cursor motion and colour.
        g.feed(b"\x1b]2;vim notes\x07\x1b[?1049h\x1b[H\x1b[2J");
        g.feed(b"\x1b[1;1H\x1b[1;31mhello\x1b[0m\x1b[5;1H-- INSERT --\x1b[2;3H\x1b[7mX\x1b[0m");
        g.feed("\x1b[3;1H日本".as_bytes());
        g.feed(b"\x1b[2;4H");
        let s = g.snapshot(0);
        assert!(s.alt_screen);
        assert_eq!(s.title, "vim notes");
        assert_eq!(
            s.text_rows(),
            vec!["hello", "  X", "日本", "", "-- INSERT --"]
        );
        assert_eq!((s.cursor.x, s.cursor.y, s.cursor.visible), (3, 1, true));
        let hello = &s.lines[0][0];
        assert_eq!(hello.fg, Some(tuic_proto::screen::Color::Index(1)));
        assert_eq!(hello.attrs, attrs::BOLD);
        assert!(
            s.lines[1]
                .iter()
                .any(|r| r.text == "X" && r.attrs == attrs::INVERSE)
        );
        assert!(s.lines[2][0].wide && s.lines[2][0].width() == 4);
        // The rows agree with the text rows the lines route returns.
        assert_eq!(s.text_rows(), g.screen());
        // A diff from the previous screen reproduces this one.
        let d = diff(&before, &s, 2).unwrap();
        let mut m = Mirror::default();
        m.apply(&ServerFrame::Screen {
            seq: 1,
            screen: before.clone(),
        })
        .unwrap();
        m.apply(&ServerFrame::Diff(d)).unwrap();
        assert_eq!(m.screen.as_ref().unwrap(), &s);
        // Hiding the cursor and leaving the alternate screen restore the shell's rows.
        g.feed(b"\x1b[?25l");
        assert!(!g.snapshot(0).cursor.visible);
        g.feed(b"\x1b[?25h\x1b[?1049l");
        let after = g.snapshot(0);
        assert!(!after.alt_screen);
        assert_eq!(after.text_rows()[0], "$ vim notes");
        let d = diff(&s, &after, 3).unwrap();
        assert_eq!(d.alt_screen, Some(false));
    }

    #[test]
    fn snapshot_views_history_without_moving_the_grid() {
        let mut g = Grid::new(3, 10);
        for i in 0..10 {
            g.feed(format!("{i}\r\n").as_bytes());
        }
        let live = g.snapshot(0);
        assert_eq!(live.text_rows(), vec!["8", "9", ""]);
        assert_eq!(live.history, 8);
        let back = g.snapshot(4);
        assert_eq!(back.text_rows(), vec!["4", "5", "6"]);
        assert_eq!(back.scroll, 4);
        assert!(!back.cursor.visible, "the cursor row is below this view");
        assert_eq!(g.snapshot(1000).scroll, 8);
        assert_eq!(g.scroll_info().display_offset, 0);
    }

    #[test]
    fn snapshot_keeps_coloured_trailing_blanks_and_trims_plain_ones() {
        let mut g = Grid::new(2, 10);
        g.feed(b"ab   \x1b[44m  \x1b[0m\r\ncd    ");
        let s = g.snapshot(0);
        let last = s.lines[0].last().unwrap();
        assert_eq!(last.text, "  ");
        assert_eq!(last.bg, Some(tuic_proto::screen::Color::Index(4)));
        assert_eq!(s.lines[1].len(), 1);
        assert_eq!(s.lines[1][0].text, "cd");
    }
}
