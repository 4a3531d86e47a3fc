//! The visible screen of a grid as the escape sequences that redraw it on a real terminal:
//! what `tuic attach` paints first (the way tmux redraws a client it attaches), so a client
//! that connects after the prompt was printed sees the screen, not a blank page.
//!
//! The output homes and clears, sets the modes a client's keys depend on (application cursor
//! and keypad, bracketed paste, alternate screen), draws every row with its colours and
//! attributes (only changes of attribute are emitted), then puts the cursor where the grid
//! has it and shows or hides it. It never emits anything the grid did not hold: no titles,
//! no OSC sequences, no clipboard writes.

use std::fmt::Write as _;

use alacritty_terminal::event::EventListener;
use alacritty_terminal::grid::{Dimensions, Row};
use alacritty_terminal::index::{Column, Line};
use alacritty_terminal::term::cell::{Cell, Flags};
use alacritty_terminal::term::{Term, TermMode};
use alacritty_terminal::vte::ansi::{Color, NamedColor};

/// The attributes one cell is drawn with.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Pen {
    fg: Color,
    bg: Color,
    flags: Flags,
}

const DRAWN: Flags = Flags::BOLD
    .union(Flags::DIM)
    .union(Flags::ITALIC)
    .union(Flags::UNDERLINE)
    .union(Flags::DOUBLE_UNDERLINE)
    .union(Flags::UNDERCURL)
    .union(Flags::DOTTED_UNDERLINE)
    .union(Flags::DASHED_UNDERLINE)
    .union(Flags::INVERSE)
    .union(Flags::HIDDEN)
    .union(Flags::STRIKEOUT);

impl Pen {
    const DEFAULT: Pen = Pen {
        fg: Color::Named(NamedColor::Foreground),
        bg: Color::Named(NamedColor::Background),
        flags: Flags::empty(),
    };

    fn of(cell: &Cell) -> Pen {
        Pen {
            fg: cell.fg,
            bg: cell.bg,
            flags: cell.flags & DRAWN,
        }
    }

    /// The SGR sequence that sets this pen from a reset state.
    fn sgr(&self, out: &mut String) {
        out.push_str("\x1b[0");
        let f = self.flags;
        for (flag, code) in [
            (Flags::BOLD, "1"),
            (Flags::DIM, "2"),
            (Flags::ITALIC, "3"),
            (Flags::UNDERLINE, "4"),
            (Flags::DOUBLE_UNDERLINE, "21"),
            (Flags::UNDERCURL, "4:3"),
            (Flags::DOTTED_UNDERLINE, "4:4"),
            (Flags::DASHED_UNDERLINE, "4:5"),
            (Flags::INVERSE, "7"),
            (Flags::HIDDEN, "8"),
            (Flags::STRIKEOUT, "9"),
        ] {
            if f.contains(flag) {
                out.push(';');
                out.push_str(code);
            }
        }
        color(out, self.fg, true);
        color(out, self.bg, false);
        out.push('m');
    }
}

/// Appends `;<sgr>` for `c` as a foreground or background colour (nothing for the default).
fn color(out: &mut String, c: Color, fg: bool) {
    match c {
        Color::Spec(rgb) => {
            let _ = write!(
                out,
                ";{};2;{};{};{}",
                if fg { 38 } else { 48 },
                rgb.r,
                rgb.g,
                rgb.b
            );
        }
        Color::Indexed(i) => {
            let _ = write!(out, ";{};5;{i}", if fg { 38 } else { 48 });
        }
        Color::Named(n) => {
            let idx = match n {
                NamedColor::Foreground
                | NamedColor::Background
                | NamedColor::Cursor
                | NamedColor::BrightForeground
                | NamedColor::DimForeground => return,
                NamedColor::DimBlack => 0,
                NamedColor::DimRed => 1,
                NamedColor::DimGreen => 2,
                NamedColor::DimYellow => 3,
                NamedColor::DimBlue => 4,
                NamedColor::DimMagenta => 5,
                NamedColor::DimCyan => 6,
                NamedColor::DimWhite => 7,
                other => other as usize,
            };
            let base = match (fg, idx < 8) {
                (true, true) => 30,
                (true, false) => 90 - 8,
                (false, true) => 40,
                (false, false) => 100 - 8,
            };
            let _ = write!(out, ";{}", base + idx);
        }
    }
}

/// How many leading cells of `row` draw something: trailing default-pen blanks do not; a
/// wide character counts both of its cells.
pub(crate) fn drawn_end(row: &Row<Cell>) -> usize {
    (0..row.len())
        .rev()
        .find(|&c| {
            let cell = &row[Column(c)];
            cell.c != ' ' || Pen::of(cell) != Pen::DEFAULT || cell.zerowidth().is_some()
        })
        .map_or(0, |c| {
            if row[Column(c)].flags.contains(Flags::WIDE_CHAR) {
                (c + 2).min(row.len())
            } else {
                c + 1
            }
        })
}

/// Appends the first `end` cells of `row` as text with their attribute changes, then resets
/// the pen.
pub(crate) fn draw_row(row: &Row<Cell>, end: usize, out: &mut String) {
    let mut pen = Pen::DEFAULT;
    for c in 0..end {
        let cell = &row[Column(c)];
        if cell
            .flags
            .intersects(Flags::WIDE_CHAR_SPACER | Flags::LEADING_WIDE_CHAR_SPACER)
        {
            continue;
        }
        let p = Pen::of(cell);
        if p != pen {
            p.sgr(out);
            pen = p;
        }
        // Control characters never reach a cell; a stray one is drawn as a blank.
        out.push(if cell.c.is_control() { ' ' } else { cell.c });
        if let Some(z) = cell.zerowidth() {
            out.extend(z.iter().filter(|ch| !ch.is_control()));
        }
    }
    out.push_str("\x1b[0m");
}

/// The escape sequences that redraw `term`'s visible screen (the bottom of the grid) on a
/// terminal of the same size.
pub fn render<T: EventListener>(term: &Term<T>) -> String {
    let g = term.grid();
    let (rows, cols) = (g.screen_lines(), g.columns());
    let mode = term.mode();
    let mut out = String::with_capacity(rows * (cols + 16));
    // Screen choice first: switching screens after drawing would hide what was drawn.
    out.push_str(if mode.contains(TermMode::ALT_SCREEN) {
        "\x1b[?1049h"
    } else {
        "\x1b[?1049l"
    });
    out.push_str("\x1b[0m\x1b[H\x1b[2J");
    for r in 0..rows {
        let row = &g[Line(r as i32)];
        // Trailing cells that draw nothing (default-pen blanks) are left to the clear.
        let end = drawn_end(row);
        if end == 0 {
            continue;
        }
        let _ = write!(out, "\x1b[{};1H", r + 1);
        draw_row(row, end, &mut out);
    }
    // Modes the keyboard depends on.
    out.push_str(if mode.contains(TermMode::APP_CURSOR) {
        "\x1b[?1h"
    } else {
        "\x1b[?1l"
    });
    out.push_str(if mode.contains(TermMode::APP_KEYPAD) {
        "\x1b="
    } else {
        "\x1b>"
    });
    out.push_str(if mode.contains(TermMode::BRACKETED_PASTE) {
        "\x1b[?2004h"
    } else {
        "\x1b[?2004l"
    });
    let cur = g.cursor.point;
    let _ = write!(
        out,
        "\x1b[{};{}H",
        cur.line.0.max(0) + 1,
        cur.column.0.min(cols.saturating_sub(1)) + 1
    );
    out.push_str(if mode.contains(TermMode::SHOW_CURSOR) {
        "\x1b[?25h"
    } else {
        "\x1b[?25l"
    });
    out
}

#[cfg(test)]
mod tests {
    use crate::session::grid::Grid;

    /// Feeding a grid's own rendering into a fresh grid of the same size gives the same rows,
    /// cursor and modes: the rendering loses nothing the screen shows.
    fn round_trip(script: &[u8]) -> (Grid, Grid) {
        let mut a = Grid::new(6, 20);
        a.feed(script);
        let mut b = Grid::new(6, 20);
        b.feed(a.render_ansi().as_bytes());
        (a, b)
    }

    #[test]
    fn rendering_redraws_rows_colours_and_cursor() {
        let (a, b) = round_trip(
            b"plain\r\n\x1b[1;31mbold red\x1b[0m \x1b[44mon blue\x1b[0m\r\n\
              \x1b[38;2;1;2;3mrgb\x1b[38;5;200m idx\x1b[0m\r\nwide \xe4\xb8\xad\xe6\x96\x87!\
              \x1b[2;4H",
        );
        assert_eq!(a.screen(), b.screen());
        assert_eq!(a.cursor(), b.cursor());
        assert_eq!(a.cell_styles(), b.cell_styles());
        assert_eq!(b.cursor(), (1, 3, true));
    }

    #[test]
    fn rendering_keeps_alternate_screen_and_hidden_cursor() {
        let (a, b) = round_trip(b"shell\r\n\x1b[?1049h\x1b[?25l\x1b[?1h\x1b[3;5Hvim-ish");
        assert!(b.alt_screen());
        assert_eq!(a.screen(), b.screen());
        assert_eq!(b.cursor(), (2, 11, false));
        assert!(b.app_cursor());
    }

    #[test]
    fn rendering_never_carries_title_or_clipboard_sequences() {
        let mut a = Grid::new(3, 20);
        a.feed(b"\x1b]0;spoofed title\x07\x1b]52;c;aGVsbG8=\x07ok");
        let s = a.render_ansi();
        assert!(!s.contains("\x1b]"), "{s:?}");
        assert!(s.contains("ok"));
    }
}
