//! Screen sync: the wire types of `WS /sessions/{id}/stream?mode=screen` and the pure logic
//! both ends share — the diff of two screen snapshots (server side) and applying frames to a
//! mirror (client side).
//!
//! The server emulates every session's terminal; a screen client receives that emulator's
//! screen instead of PTY bytes: first the whole screen ([`ServerFrame::Screen`]), then
//! [`ServerFrame::Diff`]s of changed rows, each numbered (`seq`, consecutive). A diff is always
//! relative to the previous frame sent, so a client that applies every frame in order holds the
//! server's screen. The client acknowledges frames ([`ClientFrame::Ack`]); the server keeps only a
//! few unacknowledged frames in flight and otherwise lets changes coalesce into the next frame,
//! so a slow link gets fewer, newer frames and never a backlog.
//!
//! A row is a list of [`Run`]s: consecutive cells of one style, trailing default blanks
//! trimmed. Colours are palette indices (0–255) or `"#rrggbb"`; absent means the terminal
//! default. No IO, no clock.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Attribute bits of a [`Run`].
pub mod attrs {
    /// Bold.
    pub const BOLD: u16 = 1;
    /// Italic.
    pub const ITALIC: u16 = 2;
    /// Underline (any style).
    pub const UNDERLINE: u16 = 4;
    /// Inverse video (swap foreground and background).
    pub const INVERSE: u16 = 8;
    /// Dim (faint).
    pub const DIM: u16 = 16;
    /// Strikethrough.
    pub const STRIKE: u16 = 32;
    /// Hidden (concealed): the text is present but not shown.
    pub const HIDDEN: u16 = 64;
}

/// A cell colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Color {
    /// A palette index: 0–7 normal, 8–15 bright, 16–255 the xterm 256-colour cube and greys.
    Index(u8),
    /// A 24-bit colour.
    Rgb(u8, u8, u8),
}

impl Serialize for Color {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Color::Index(i) => s.serialize_u8(i),
            Color::Rgb(r, g, b) => s.serialize_str(&format!("#{r:02x}{g:02x}{b:02x}")),
        }
    }
}

impl<'de> Deserialize<'de> for Color {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Index(u8),
            Rgb(String),
        }
        match Raw::deserialize(d)? {
            Raw::Index(i) => Ok(Color::Index(i)),
            Raw::Rgb(s) => {
                let hex = s
                    .strip_prefix('#')
                    .filter(|h| h.len() == 6 && h.bytes().all(|b| b.is_ascii_hexdigit()))
                    .ok_or_else(|| serde::de::Error::custom(format!("bad colour {s:?}")))?;
                let c = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0);
                Ok(Color::Rgb(c(0), c(2), c(4)))
            }
        }
    }
}

fn is_zero_u16(v: &u16) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

/// Consecutive cells of one row sharing one style.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The cells' characters (with any combining marks), one per cell; two columns per
    /// character when `wide`.
    pub text: String,
    /// Foreground; absent: default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fg: Option<Color>,
    /// Background; absent: default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bg: Option<Color>,
    /// [`attrs`] bits; absent: none.
    #[serde(default, skip_serializing_if = "is_zero_u16")]
    pub attrs: u16,
    /// Every character of the run is double-width.
    #[serde(default, skip_serializing_if = "is_false")]
    pub wide: bool,
}

impl Run {
    /// Columns the run occupies.
    pub fn width(&self) -> usize {
        let n = self.text.chars().filter(|c| !is_combining(*c)).count();
        if self.wide { n * 2 } else { n }
    }

    /// Whether `self` and `other` have the same style (and may be merged).
    pub fn same_style(&self, other: &Run) -> bool {
        self.fg == other.fg
            && self.bg == other.bg
            && self.attrs == other.attrs
            && self.wide == other.wide
    }
}

/// A rough test for characters that take no cell of their own (combining marks, ZWJ,
/// variation selectors); only used to count columns.
fn is_combining(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x200B..=0x200F | 0xFE00..=0xFE0F | 0x20D0..=0x20FF)
}

/// One screen row.
pub type Row = Vec<Run>;

/// The plain text of a row, trailing blanks trimmed (as `terminal/lines` returns rows).
pub fn row_text(row: &[Run]) -> String {
    let mut s: String = row.iter().map(|r| r.text.as_str()).collect();
    s.truncate(s.trim_end().len());
    s
}

/// The cursor: column and row on the screen (0-based, row 0 at the top of the view).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Column.
    pub x: u16,
    /// Row.
    pub y: u16,
    /// Shown (DECTCEM, and the view is at the bottom).
    pub visible: bool,
}

/// A whole screen as the server's emulator has it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Columns.
    pub cols: u16,
    /// Rows (`lines.len()`).
    pub rows: u16,
    /// The cursor.
    pub cursor: Cursor,
    /// The alternate screen is active (full-screen programs: vim, htop, less).
    pub alt_screen: bool,
    /// The window title the program set (OSC 0/2); empty when none.
    pub title: String,
    /// Rows of this view this client scrolled back from the bottom (0: the live screen).
    pub scroll: u32,
    /// History rows above the screen (how far `scroll` can go).
    pub history: u32,
    /// The rows, top first.
    pub lines: Vec<Row>,
}

impl Snapshot {
    /// Each row's text, trailing blanks trimmed.
    pub fn text_rows(&self) -> Vec<String> {
        self.lines.iter().map(|r| row_text(r)).collect()
    }
}

/// One changed row of a [`Diff`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowUpdate {
    /// Row index (0: top).
    pub y: u16,
    /// The row's new content.
    pub runs: Row,
}

/// What changed since the previous frame.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    /// Frame number: the previous frame's plus one.
    pub seq: u64,
    /// First shift every row up by this many rows (new rows at the bottom are blank).
    #[serde(default, skip_serializing_if = "is_zero_u16")]
    pub scroll_up: u16,
    /// Rows whose content differs after the shift.
    pub rows: Vec<RowUpdate>,
    /// The cursor (always sent; it is small).
    pub cursor: Cursor,
    /// Present when it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alt_screen: Option<bool>,
    /// Present when it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Present when it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scroll: Option<u32>,
    /// Present when it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<u32>,
}

impl Diff {
    /// Whether applying it changes nothing.
    pub fn is_empty(&self, prev: &Snapshot) -> bool {
        self.scroll_up == 0
            && self.rows.is_empty()
            && self.cursor == prev.cursor
            && self.alt_screen.is_none()
            && self.title.is_none()
            && self.scroll.is_none()
            && self.history.is_none()
    }
}

/// Where a stream starts: the first frame of every `WS /sessions/{id}/stream` mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// `output`, `text`, `log`, `binary` or `screen`.
    pub mode: String,
    /// Raw byte offset of the first byte the stream sends (for `screen`: the bytes the first
    /// screen reflects).
    pub offset: u64,
    /// Raw bytes the session had written when the stream started.
    pub total_written: u64,
    /// The oldest retained raw byte (`GET …/output?format=raw&from_byte=` can page the gap
    /// `[oldest_offset, offset)`).
    pub oldest_offset: u64,
}

/// A frame from the server (text frames, JSON with a `type`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// The first frame of every stream.
    Hello(Hello),
    /// The whole screen: the first screen frame, and after a resize.
    Screen {
        /// Frame number.
        seq: u64,
        /// The screen.
        #[serde(flatten)]
        screen: Snapshot,
    },
    /// Changed rows since the previous frame.
    Diff(Diff),
    /// A `pty-parsed` event of the session (question, agent state, …).
    Parsed {
        /// The event.
        event: serde_json::Value,
    },
    /// The process exited; the last screen frame came before this, then the socket closes.
    Exit {
        /// Exit status, when it exited normally.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    /// The node is shutting down.
    Closed,
    /// A client frame was refused (a resize over the size caps or the node's cell budget);
    /// nothing changed and the stream goes on.
    Refused {
        /// Stable code (`size_limit`, `cell_budget`).
        code: String,
        /// What was refused and why.
        message: String,
    },
}

/// A frame from a screen client (text frames, JSON with a `type`). Binary frames are input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientFrame {
    /// Every frame up to and including `seq` was applied.
    Ack {
        /// The newest applied frame.
        seq: u64,
    },
    /// Input for the PTY (UTF-8).
    Input {
        /// The bytes, as text.
        data: String,
    },
    /// Pasted text for the PTY: the node wraps it in bracketed-paste markers (`ESC[200~` …
    /// `ESC[201~`) when the program turned that mode on, after taking any end marker out of
    /// the text (a paste cannot end itself early and type the rest as keys).
    Paste {
        /// The text.
        data: String,
    },
    /// The client's viewport. Without `apply` it changes nothing on the node (the PTY keeps
    /// its size; the client scales or pans); with `apply: true` the PTY is resized to it.
    Resize {
        /// Rows.
        rows: u16,
        /// Columns.
        cols: u16,
        /// Resize the PTY.
        #[serde(default)]
        apply: bool,
    },
    /// View the screen `offset` rows back in the history (0: live).
    Scroll {
        /// Rows back from the bottom.
        offset: u32,
    },
}

/// Upward shifts tried when looking for a scroll.
const MAX_SCROLL_CANDIDATES: usize = 64;

/// The diff from `prev` to `next`, numbered `seq`; `None` when the size differs (send the whole
/// screen instead). It may be empty ([`Diff::is_empty`]).
pub fn diff(prev: &Snapshot, next: &Snapshot, seq: u64) -> Option<Diff> {
    if prev.cols != next.cols || prev.lines.len() != next.lines.len() || prev.rows != next.rows {
        return None;
    }
    let n = next.lines.len();
    let blank: Row = Vec::new();
    let changed_after = |k: usize, limit: usize| {
        let mut changed = 0;
        for (i, new) in next.lines.iter().enumerate() {
            let old = prev.lines.get(i + k).unwrap_or(&blank);
            if old != new {
                changed += 1;
                if changed >= limit {
                    break;
                }
            }
        }
        changed
    };
    let mut best = (0, changed_after(0, usize::MAX));
    if best.1 > 1 {
        // Output that scrolls moves rows up: find the shift that leaves the fewest rows to
        // send. Candidates are the shifts that line the new top row up with an old one.
        let candidates = (1..n)
            .filter(|&k| prev.lines[k] == next.lines[0] && !next.lines[0].is_empty())
            .take(MAX_SCROLL_CANDIDATES);
        for k in candidates {
            let c = changed_after(k, best.1);
            if c < best.1 {
                best = (k, c);
            }
        }
    }
    let k = best.0;
    let rows = next
        .lines
        .iter()
        .enumerate()
        .filter(|(i, new)| prev.lines.get(i + k).unwrap_or(&blank) != *new)
        .map(|(i, new)| RowUpdate {
            y: i as u16,
            runs: new.clone(),
        })
        .collect();
    Some(Diff {
        seq,
        scroll_up: k as u16,
        rows,
        cursor: next.cursor,
        alt_screen: (prev.alt_screen != next.alt_screen).then_some(next.alt_screen),
        title: (prev.title != next.title).then(|| next.title.clone()),
        scroll: (prev.scroll != next.scroll).then_some(next.scroll),
        history: (prev.history != next.history).then_some(next.history),
    })
}

/// Why a frame could not be applied to a [`Mirror`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// A diff arrived before any whole screen.
    #[error("a diff before the first screen")]
    NoScreen,
    /// A frame was skipped or repeated.
    #[error("frame {got} after {had}")]
    OutOfOrder {
        /// The mirror's frame number.
        had: u64,
        /// The frame's number.
        got: u64,
    },
    /// A row index past the screen.
    #[error("row {0} is off the screen")]
    BadRow(u16),
}

/// A client's copy of the server's screen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mirror {
    /// The last applied frame.
    pub seq: u64,
    /// The screen, once the first screen frame arrived.
    pub screen: Option<Snapshot>,
}

impl Mirror {
    /// Applies a frame; returns the frame number to acknowledge, when it was a screen frame.
    pub fn apply(&mut self, f: &ServerFrame) -> Result<Option<u64>, ApplyError> {
        match f {
            ServerFrame::Screen { seq, screen } => {
                if self.screen.is_some() && *seq != self.seq + 1 {
                    return Err(ApplyError::OutOfOrder {
                        had: self.seq,
                        got: *seq,
                    });
                }
                self.seq = *seq;
                self.screen = Some(screen.clone());
                Ok(Some(*seq))
            }
            ServerFrame::Diff(d) => {
                let s = self.screen.as_mut().ok_or(ApplyError::NoScreen)?;
                if d.seq != self.seq + 1 {
                    return Err(ApplyError::OutOfOrder {
                        had: self.seq,
                        got: d.seq,
                    });
                }
                apply_diff(s, d)?;
                self.seq = d.seq;
                Ok(Some(d.seq))
            }
            _ => Ok(None),
        }
    }
}

/// Applies `d` to `s` (the frame number is the caller's business).
pub fn apply_diff(s: &mut Snapshot, d: &Diff) -> Result<(), ApplyError> {
    if let Some(bad) = d.rows.iter().find(|r| r.y as usize >= s.lines.len()) {
        return Err(ApplyError::BadRow(bad.y));
    }
    let k = (d.scroll_up as usize).min(s.lines.len());
    s.lines.drain(..k);
    s.lines.extend(std::iter::repeat_n(Vec::new(), k));
    for r in &d.rows {
        s.lines[r.y as usize] = r.runs.clone();
    }
    s.cursor = d.cursor;
    if let Some(a) = d.alt_screen {
        s.alt_screen = a;
    }
    if let Some(t) = &d.title {
        s.title = t.clone();
    }
    if let Some(v) = d.scroll {
        s.scroll = v;
    }
    if let Some(h) = d.history {
        s.history = h;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn plain(t: &str) -> Row {
        if t.is_empty() {
            return Vec::new();
        }
        vec![Run {
            text: t.into(),
            ..Run::default()
        }]
    }

    fn snap(rows: &[&str]) -> Snapshot {
        Snapshot {
            cols: 10,
            rows: rows.len() as u16,
            cursor: Cursor {
                x: 0,
                y: 0,
                visible: true,
            },
            lines: rows.iter().map(|r| plain(r)).collect(),
            ..Snapshot::default()
        }
    }

    fn golden(name: &str) -> Value {
        let text = match name {
            "screen" => include_str!("../golden/screen/screen.json"),
            "diff" => include_str!("../golden/screen/diff.json"),
            "hello" => include_str!("../golden/screen/hello.json"),
            "client" => include_str!("../golden/screen/client.json"),
            _ => unreachable!(),
        };
        serde_json::from_str(text).unwrap()
    }

    fn sample_screen() -> ServerFrame {
        ServerFrame::Screen {
            seq: 1,
            screen: Snapshot {
                cols: 12,
                rows: 3,
                cursor: Cursor {
                    x: 2,
                    y: 1,
                    visible: true,
                },
                alt_screen: true,
                title: "vim a.txt".into(),
                scroll: 0,
                history: 40,
                lines: vec![
                    vec![
                        Run {
                            text: "ab".into(),
                            fg: Some(Color::Index(1)),
                            attrs: attrs::BOLD | attrs::UNDERLINE,
                            ..Run::default()
                        },
                        Run {
                            text: "c".into(),
                            bg: Some(Color::Rgb(0x12, 0xab, 0xff)),
                            attrs: attrs::INVERSE,
                            ..Run::default()
                        },
                    ],
                    vec![Run {
                        text: "日本".into(),
                        wide: true,
                        ..Run::default()
                    }],
                    Vec::new(),
                ],
            },
        }
    }

    #[test]
    fn golden_samples_round_trip() {
        let cases = [
            ("screen", sample_screen()),
            (
                "diff",
                ServerFrame::Diff(Diff {
                    seq: 2,
                    scroll_up: 1,
                    rows: vec![RowUpdate {
                        y: 2,
                        runs: plain("$ ls"),
                    }],
                    cursor: Cursor {
                        x: 4,
                        y: 2,
                        visible: false,
                    },
                    alt_screen: Some(false),
                    title: None,
                    scroll: None,
                    history: Some(41),
                }),
            ),
            (
                "hello",
                ServerFrame::Hello(Hello {
                    mode: "screen".into(),
                    offset: 1200,
                    total_written: 1200,
                    oldest_offset: 0,
                }),
            ),
        ];
        for (name, frame) in cases {
            let want = golden(name);
            assert_eq!(serde_json::to_value(&frame).unwrap(), want, "{name}");
            let back: ServerFrame = serde_json::from_value(want).unwrap();
            assert_eq!(back, frame, "{name}");
        }
        let client: Vec<ClientFrame> = serde_json::from_value(golden("client")).unwrap();
        assert_eq!(
            client,
            vec![
                ClientFrame::Ack { seq: 7 },
                ClientFrame::Input {
                    data: "ls\r".into()
                },
                ClientFrame::Resize {
                    rows: 40,
                    cols: 50,
                    apply: false
                },
                ClientFrame::Scroll { offset: 12 },
            ]
        );
        assert_eq!(
            serde_json::to_value(&client).unwrap()[2],
            json!({"type": "resize", "rows": 40, "cols": 50, "apply": false})
        );
    }

    #[test]
    fn client_frames_reject_unknown_fields_and_bad_colours() {
        assert!(
            serde_json::from_value::<ClientFrame>(json!({"type": "ack", "seq": 1, "x": 2}))
                .is_err()
        );
        assert!(serde_json::from_value::<ClientFrame>(json!({"type": "boom"})).is_err());
        assert!(serde_json::from_value::<Color>(json!("#12345")).is_err());
        assert!(serde_json::from_value::<Color>(json!("red")).is_err());
        assert_eq!(
            serde_json::from_value::<Color>(json!("#00ff10")).unwrap(),
            Color::Rgb(0, 255, 16)
        );
    }

    #[test]
    fn diff_sends_only_changed_rows_and_apply_reproduces_the_screen() {
        let a = snap(&["one", "two", "three", ""]);
        let mut b = a.clone();
        b.lines[1] = plain("TWO");
        b.cursor.x = 3;
        let d = diff(&a, &b, 2).unwrap();
        assert_eq!(d.scroll_up, 0);
        assert_eq!(d.rows.len(), 1);
        assert_eq!(d.rows[0].y, 1);
        let mut m = a.clone();
        apply_diff(&mut m, &d).unwrap();
        assert_eq!(m, b);
        // Nothing changed: an empty diff.
        let same = diff(&b, &b, 3).unwrap();
        assert!(same.is_empty(&b));
    }

    #[test]
    fn scrolling_output_is_a_shift_plus_the_new_rows() {
        let a = snap(&["l1", "l2", "l3", "l4", "l5"]);
        let b = snap(&["l3", "l4", "l5", "l6", "l7"]);
        let d = diff(&a, &b, 2).unwrap();
        assert_eq!(d.scroll_up, 2);
        assert_eq!(
            d.rows.iter().map(|r| r.y).collect::<Vec<_>>(),
            vec![3, 4],
            "{d:?}"
        );
        let mut m = a.clone();
        apply_diff(&mut m, &d).unwrap();
        assert_eq!(m, b);
    }

    #[test]
    fn a_size_change_needs_a_whole_screen() {
        let a = snap(&["a", "b"]);
        let mut b = snap(&["a", "b", "c"]);
        assert!(diff(&a, &b, 2).is_none());
        b = snap(&["a", "b"]);
        b.cols = 11;
        assert!(diff(&a, &b, 2).is_none());
    }

    #[test]
    fn mirror_applies_frames_in_order_and_refuses_gaps() {
        let mut m = Mirror::default();
        let a = snap(&["a", "b"]);
        let b = snap(&["a", "c"]);
        let d = diff(&a, &b, 2).unwrap();
        assert_eq!(
            m.apply(&ServerFrame::Diff(d.clone())),
            Err(ApplyError::NoScreen)
        );
        assert_eq!(
            m.apply(&ServerFrame::Screen {
                seq: 1,
                screen: a.clone()
            }),
            Ok(Some(1))
        );
        assert_eq!(m.apply(&ServerFrame::Diff(d.clone())), Ok(Some(2)));
        assert_eq!(m.screen.as_ref().unwrap(), &b);
        assert_eq!(
            m.apply(&ServerFrame::Diff(d)),
            Err(ApplyError::OutOfOrder { had: 2, got: 2 })
        );
        let bad = Diff {
            seq: 3,
            rows: vec![RowUpdate {
                y: 9,
                runs: Vec::new(),
            }],
            ..Diff::default()
        };
        assert_eq!(m.apply(&ServerFrame::Diff(bad)), Err(ApplyError::BadRow(9)));
    }

    #[test]
    fn random_edits_always_round_trip() {
        // A small deterministic generator: rows edited, inserted at the bottom (scroll) and
        // cleared; every diff applied to the previous screen gives the next.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut cur = snap(&["", "", "", "", "", "", "", ""]);
        for step in 0..2000u64 {
            let mut next = cur.clone();
            match rnd(4) {
                0 => {
                    let y = rnd(8) as usize;
                    next.lines[y] = plain(&format!("r{}", rnd(5)));
                }
                1 => {
                    let k = 1 + rnd(3) as usize;
                    next.lines.drain(..k);
                    for _ in 0..k {
                        next.lines.push(plain(&format!("n{step}")));
                    }
                }
                2 => next.lines[rnd(8) as usize] = Vec::new(),
                _ => next.cursor.y = rnd(8) as u16,
            }
            let d = diff(&cur, &next, step + 2).unwrap();
            let mut m = cur.clone();
            apply_diff(&mut m, &d).unwrap();
            assert_eq!(m, next, "step {step}: {d:?}");
            cur = next;
        }
    }

    #[test]
    fn run_width_counts_wide_characters_twice() {
        let r = Run {
            text: "日本".into(),
            wide: true,
            ..Run::default()
        };
        assert_eq!(r.width(), 4);
        assert_eq!(
            row_text(&[
                r,
                Run {
                    text: "  ".into(),
                    ..Run::default()
                }
            ]),
            "日本"
        );
    }
}
