//! What goes into a PTY besides raw bytes: named special keys, the composer tracker that tells
//! a half-typed line from an empty one, and the write plans of MCP `session action=input` and
//! the spec's atomic `session action=submit` (Ctrl-U, gap, text, gap, Enter under one lock).
//!
//! Pure: it builds plans and tracks bytes; `Session::write_parts` performs them.

use std::time::Duration;

/// The spec's scheduling gap between the parts of one locked write.
pub const GAP: Duration = Duration::from_millis(50);

/// One step of a locked write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Bytes written and flushed.
    Bytes(Vec<u8>),
    /// A pause with the writer lock still held.
    Gap(Duration),
}

/// The bytes of a named key (`session action=input special_key=`).
pub fn special_key(name: &str) -> Option<&'static [u8]> {
    Some(match name {
        "enter" => b"\r",
        "tab" => b"\t",
        "escape" => b"\x1b",
        "ctrl-c" => b"\x03",
        "ctrl-d" => b"\x04",
        "ctrl-u" => b"\x15",
        "up" => b"\x1b[A",
        "down" => b"\x1b[B",
        "right" => b"\x1b[C",
        "left" => b"\x1b[D",
        "backspace" => b"\x7f",
        _ => return None,
    })
}

/// The plan of `input`: text then the key. For an identified agent, text followed by Enter
/// keeps one lock with the agent Enter gap (and Codex/OpenCode get the framed injection);
/// everything else is a raw pair of writes.
pub fn input_plan(text: &str, key: Option<&'static [u8]>, agent: Option<&str>) -> Vec<Part> {
    let enter = key == Some(b"\r".as_slice());
    if enter && !text.is_empty() {
        match agent {
            Some("codex" | "opencode") => return submit_plan(text),
            Some(_) => {
                return vec![
                    Part::Bytes(text.as_bytes().to_vec()),
                    Part::Gap(GAP),
                    Part::Bytes(b"\r".to_vec()),
                ];
            }
            None => {}
        }
    }
    let mut parts = Vec::new();
    if !text.is_empty() {
        parts.push(Part::Bytes(text.as_bytes().to_vec()));
    }
    if let Some(k) = key {
        parts.push(Part::Bytes(k.to_vec()));
    }
    parts
}

/// The plan of `submit`: Ctrl-U alone, a gap, the text (bracketed paste when multiline), a
/// second gap, Enter. Ctrl-U travels alone because Claude Code strips it from a long text it
/// treats as a paste and then refuses the Enter.
pub fn submit_plan(text: &str) -> Vec<Part> {
    let body = if text.contains('\n') {
        let mut b = b"\x1b[200~".to_vec();
        b.extend_from_slice(text.as_bytes());
        b.extend_from_slice(b"\x1b[201~");
        b
    } else {
        text.as_bytes().to_vec()
    };
    vec![
        Part::Bytes(b"\x15".to_vec()),
        Part::Gap(GAP),
        Part::Bytes(body),
        Part::Gap(GAP),
        Part::Bytes(b"\r".to_vec()),
    ]
}

/// Tracks whether the line being composed holds typed text. Enter (CR or LF), Ctrl-U and
/// Ctrl-C end or clear a line; escape sequences (arrows, paste brackets) are not text.
#[derive(Debug, Default, Clone)]
pub struct Composer {
    typed: usize,
    in_escape: bool,
}

impl Composer {
    /// Feeds bytes written to the PTY.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.in_escape {
                // CSI/SS3 sequences end with a byte in 0x40..=0x7e (after the introducer).
                if (0x40..=0x7e).contains(&b) && b != b'[' && b != b'O' {
                    self.in_escape = false;
                }
                continue;
            }
            match b {
                b'\r' | b'\n' | 0x15 | 0x03 => self.typed = 0,
                0x1b => self.in_escape = true,
                0x7f | 0x08 => self.typed = self.typed.saturating_sub(1),
                b if b < 0x20 => {}
                _ => self.typed += 1,
            }
        }
    }

    /// Whether typed text is waiting for Enter.
    pub fn dirty(&self) -> bool {
        self.typed > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composer_tracks_half_typed_lines() {
        let mut c = Composer::default();
        assert!(!c.dirty());
        c.feed(b"echo hi");
        assert!(c.dirty());
        c.feed(b"\r");
        assert!(!c.dirty());
        c.feed(b"ab\x7f\x7f");
        assert!(!c.dirty());
        c.feed(b"x\x15");
        assert!(!c.dirty());
        c.feed(b"\x1b[A\x1b[200~");
        assert!(!c.dirty());
        c.feed(b"\x1b[200~multi\nline\x1b[201~");
        assert!(c.dirty());
    }

    #[test]
    fn plans() {
        assert_eq!(
            submit_plan("ls"),
            vec![
                Part::Bytes(b"\x15".to_vec()),
                Part::Gap(GAP),
                Part::Bytes(b"ls".to_vec()),
                Part::Gap(GAP),
                Part::Bytes(b"\r".to_vec())
            ]
        );
        assert_eq!(
            submit_plan("a\nb")[2],
            Part::Bytes(b"\x1b[200~a\nb\x1b[201~".to_vec())
        );
        let shell = input_plan("ls", special_key("enter"), None);
        assert_eq!(
            shell,
            vec![Part::Bytes(b"ls".to_vec()), Part::Bytes(b"\r".to_vec())]
        );
        assert_eq!(
            input_plan("ls", special_key("enter"), Some("claude")).len(),
            3
        );
        assert_eq!(
            input_plan("", special_key("ctrl-c"), Some("claude")).len(),
            1
        );
        assert!(special_key("f13").is_none());
    }
}

/// The bytes a paste of `text` writes: as is, or between bracketed-paste markers when the
/// program asked for them, with any end marker in the text taken out so the paste cannot end
/// early and have its rest read as typed keys.
pub fn paste_bytes(text: &str, bracketed: bool) -> Vec<u8> {
    if !bracketed {
        return text.as_bytes().to_vec();
    }
    let mut out = Vec::with_capacity(text.len() + 12);
    out.extend_from_slice(b"\x1b[200~");
    out.extend_from_slice(text.replace("\x1b[201~", "").as_bytes());
    out.extend_from_slice(b"\x1b[201~");
    out
}

#[cfg(test)]
mod paste_tests {
    use super::paste_bytes;

    #[test]
    fn a_paste_is_bracketed_only_when_asked_and_cannot_end_itself() {
        assert_eq!(paste_bytes("a\nb", false), b"a\nb");
        assert_eq!(paste_bytes("a\nb", true), b"\x1b[200~a\nb\x1b[201~");
        assert_eq!(
            paste_bytes("x\x1b[201~rm -rf ~\r", true),
            b"\x1b[200~xrm -rf ~\r\x1b[201~"
        );
    }
}
