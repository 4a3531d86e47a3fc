//! What the fast path steps over plain text without the emulator: the grid's cursor column
//! and the clean log's line state ([`Sim`]), and whether the escape parser is in its ground
//! state ([`Tracker`]).

use super::*;

/// The cursor column of the grid and the line state of the clean log, stepped over plain text.
pub(super) struct Sim {
    pub(super) gcol: usize,
    pub(super) gwrap: bool,
    pub(super) llen: usize,
    pub(super) lcol: usize,
    pub(super) lines: u64,
}

impl Sim {
    /// `n` printable characters in a row: the same as `n` calls of [`Sim::step`].
    pub(super) fn run(&mut self, mut n: usize, cols: usize) {
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

    pub(super) fn step(&mut self, b: u8, cols: usize) {
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
pub(super) enum St {
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
pub(super) struct Tracker {
    pub(super) st: St,
    /// The last byte seen in the ground state was ASCII (no partial UTF-8 character).
    pub(super) last_ascii: bool,
    /// The scroll region is the whole screen (as far as known; unknown counts as not).
    pub(super) region_full: bool,
    /// The CSI being parsed collected an intermediate or private marker.
    pub(super) csi_marked: bool,
    /// The CSI being parsed has a parameter this tracker does not model (subparameters).
    pub(super) csi_odd: bool,
    pub(super) csi_params: [u32; 2],
    pub(super) csi_n: usize,
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
    pub(super) fn clean(&self) -> bool {
        self.st == St::Ground && self.last_ascii
    }

    pub(super) fn feed(&mut self, bytes: &[u8], rows: usize) {
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

    pub(super) fn csi_start(&mut self) {
        self.csi_marked = false;
        self.csi_odd = false;
        self.csi_params = [0; 2];
        self.csi_n = 0;
    }

    pub(super) fn csi_digit(&mut self, b: u8) {
        if self.csi_n < 2 {
            let p = &mut self.csi_params[self.csi_n];
            *p = p.saturating_mul(10).saturating_add(u32::from(b - b'0'));
        }
    }

    pub(super) fn csi_dispatch(&mut self, b: u8, rows: usize) {
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
    pub(super) fn step(&mut self, b: u8, rows: usize) {
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
