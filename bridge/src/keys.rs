//! tmux key names as the bytes a terminal sends for them (`tuic send-keys`, the detach key).
//!
//! A word that is a key name (`Enter`, `C-c`, `M-x`, `Up`, `F5`, …) becomes that key's bytes;
//! any other word is sent as text, as `tmux send-keys` does. Pure: no IO.

/// Bytes of a named key without modifiers, as xterm sends it in normal cursor mode.
fn named(name: &str) -> Option<&'static [u8]> {
    Some(match name.to_ascii_lowercase().as_str() {
        "enter" => b"\r",
        "escape" | "esc" => b"\x1b",
        "tab" => b"\t",
        "btab" => b"\x1b[Z",
        "bspace" | "backspace" => b"\x7f",
        "space" => b" ",
        "up" => b"\x1b[A",
        "down" => b"\x1b[B",
        "right" => b"\x1b[C",
        "left" => b"\x1b[D",
        "home" => b"\x1b[H",
        "end" => b"\x1b[F",
        "ic" | "insert" => b"\x1b[2~",
        "dc" | "delete" => b"\x1b[3~",
        "ppage" | "pageup" | "pgup" => b"\x1b[5~",
        "npage" | "pagedown" | "pgdn" => b"\x1b[6~",
        "f1" => b"\x1bOP",
        "f2" => b"\x1bOQ",
        "f3" => b"\x1bOR",
        "f4" => b"\x1bOS",
        "f5" => b"\x1b[15~",
        "f6" => b"\x1b[17~",
        "f7" => b"\x1b[18~",
        "f8" => b"\x1b[19~",
        "f9" => b"\x1b[20~",
        "f10" => b"\x1b[21~",
        "f11" => b"\x1b[23~",
        "f12" => b"\x1b[24~",
        _ => return None,
    })
}

/// The control character of `c` (`C-c` is 0x03, `C-Space`/`C-@` is NUL, `C-?` is DEL).
fn control(c: char) -> Option<u8> {
    match c {
        '@' | ' ' | '2' => Some(0),
        '?' | '8' => Some(0x7f),
        'a'..='z' => Some(c as u8 - b'a' + 1),
        'A'..='Z' => Some(c as u8 - b'A' + 1),
        '[' | '3' => Some(0x1b),
        '\\' | '4' => Some(0x1c),
        ']' | '5' => Some(0x1d),
        '^' | '6' => Some(0x1e),
        '_' | '7' | '/' => Some(0x1f),
        _ => None,
    }
}

/// One key name (`C-c`, `M-Enter`, `C-M-a`, `Up`, a single character) as bytes; `None` when
/// `word` is not a key name.
pub fn key(word: &str) -> Option<Vec<u8>> {
    let mut rest = word;
    let (mut ctrl, mut meta) = (false, false);
    // Modifier prefixes, in any order; a bare `C-` or `M-` is not a key.
    loop {
        if rest.len() > 2
            && let Some(r) = rest.strip_prefix("C-")
        {
            ctrl = true;
            rest = r;
        } else if rest.len() > 2
            && let Some(r) = rest.strip_prefix("M-")
        {
            meta = true;
            rest = r;
        } else if rest.len() > 1
            && let Some(r) = rest.strip_prefix('^')
        {
            ctrl = true;
            rest = r;
        } else {
            break;
        }
    }
    let mut out = Vec::new();
    if meta {
        out.push(0x1b);
    }
    let mut chars = rest.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if ctrl => out.push(control(c)?),
        (Some(c), None) if meta => {
            let mut b = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
        }
        _ => {
            let bytes = named(rest)?;
            if ctrl {
                // C-<named>: only the ones with a control form.
                match rest.to_ascii_lowercase().as_str() {
                    "space" => out.push(0),
                    _ => return None,
                }
            } else {
                out.extend_from_slice(bytes);
            }
        }
    }
    Some(out)
}

/// The bytes of `send-keys` words: key names as keys, other words as text. With `literal`,
/// every word is text (tmux's `-l`). Words are not joined by spaces (tmux sends `a b` as two
/// keys `a` and `b`; write `Space` or quote the text).
pub fn encode(words: &[String], literal: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for w in words {
        match (literal, key(w)) {
            (false, Some(k)) if w.chars().count() > 1 => out.extend(k),
            _ => out.extend_from_slice(w.as_bytes()),
        }
    }
    out
}

/// A detach key sequence: `C-b d` (a prefix, then a key) or a single key such as `C-\`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachKey {
    /// The prefix byte (or the only key).
    pub prefix: u8,
    /// The key after the prefix; `None` detaches on the prefix alone.
    pub then: Option<u8>,
}

impl DetachKey {
    /// Parses `"C-b d"`, `"C-a C-d"`, `"C-\\"`; each key must be one byte.
    pub fn parse(s: &str) -> Result<Self, String> {
        let one = |w: &str| -> Result<u8, String> {
            let k = key(w).unwrap_or_else(|| w.as_bytes().to_vec());
            match k.as_slice() {
                [b] => Ok(*b),
                _ => Err(format!(
                    "detach key {w:?} is not a single-byte key (use e.g. \"C-b d\" or \"C-\\\\\")"
                )),
            }
        };
        let words: Vec<&str> = s.split_whitespace().collect();
        match words.as_slice() {
            [p] => Ok(Self {
                prefix: one(p)?,
                then: None,
            }),
            [p, t] => Ok(Self {
                prefix: one(p)?,
                then: Some(one(t)?),
            }),
            _ => Err(format!(
                "detach key {s:?}: give a prefix and a key (\"C-b d\") or one key"
            )),
        }
    }
}

/// Watches typed bytes for the detach key. Bytes that are not part of it pass through in
/// order; the prefix typed twice sends one prefix (as tmux's `C-b C-b`).
#[derive(Debug)]
pub struct DetachWatch {
    key: DetachKey,
    armed: bool,
}

/// What a chunk of typed input amounts to.
#[derive(Debug, PartialEq, Eq)]
pub struct Typed {
    /// Bytes for the session.
    pub send: Vec<u8>,
    /// The detach key was completed.
    pub detach: bool,
}

impl DetachWatch {
    /// Watches for `key`.
    pub fn new(key: DetachKey) -> Self {
        Self { key, armed: false }
    }

    /// Feeds typed bytes; bytes after a completed detach key are dropped.
    pub fn feed(&mut self, input: &[u8]) -> Typed {
        let mut send = Vec::with_capacity(input.len());
        for &b in input {
            if self.armed {
                self.armed = false;
                if Some(b) == self.key.then {
                    return Typed { send, detach: true };
                }
                send.push(self.key.prefix);
                if b != self.key.prefix {
                    send.push(b);
                }
                continue;
            }
            if b == self.key.prefix {
                if self.key.then.is_none() {
                    return Typed { send, detach: true };
                }
                self.armed = true;
                continue;
            }
            send.push(b);
        }
        Typed {
            send,
            detach: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn key_names_become_their_bytes() {
        let cases: [(&str, &[u8]); 14] = [
            ("Enter", b"\r"),
            ("C-c", b"\x03"),
            ("C-M-a", b"\x1b\x01"),
            ("M-x", b"\x1bx"),
            ("Escape", b"\x1b"),
            ("Up", b"\x1b[A"),
            ("PageDown", b"\x1b[6~"),
            ("F5", b"\x1b[15~"),
            ("BSpace", b"\x7f"),
            ("C-Space", b"\x00"),
            ("^D", b"\x04"),
            ("C-\\", b"\x1c"),
            ("Tab", b"\t"),
            ("BTab", b"\x1b[Z"),
        ];
        for (name, bytes) in cases {
            assert_eq!(key(name).as_deref(), Some(bytes), "{name}");
        }
        assert_eq!(key("hello"), None);
        assert_eq!(key("C-"), None);
    }

    #[test]
    fn words_that_are_not_keys_are_text() {
        assert_eq!(encode(&w(&["echo hi", "Enter"]), false), b"echo hi\r");
        assert_eq!(encode(&w(&["C-c", "ls", "Enter"]), false), b"\x03ls\r");
        assert_eq!(encode(&w(&["Enter"]), true), b"Enter");
        // A single character is itself, even when it could be read as a name.
        assert_eq!(encode(&w(&["q"]), false), b"q");
    }

    #[test]
    fn detach_key_parses_and_is_watched() {
        let k = DetachKey::parse("C-b d").unwrap();
        assert_eq!(
            k,
            DetachKey {
                prefix: 2,
                then: Some(b'd')
            }
        );
        let mut d = DetachWatch::new(k.clone());
        assert_eq!(
            d.feed(b"ab"),
            Typed {
                send: b"ab".to_vec(),
                detach: false
            }
        );
        // Prefix then another key: both go through; prefix twice sends one prefix.
        assert_eq!(d.feed(b"\x02x\x02\x02").send, b"\x02x\x02");
        // Split across reads.
        assert!(!d.feed(b"z\x02").detach);
        let t = d.feed(b"d rest");
        assert!(t.detach);
        assert!(t.send.is_empty());
        let mut single = DetachWatch::new(DetachKey::parse("C-\\").unwrap());
        let t = single.feed(b"ls\x1c");
        assert_eq!((t.send.as_slice(), t.detach), (&b"ls"[..], true));
        assert!(DetachKey::parse("Up").is_err());
        assert!(DetachKey::parse("a b c").is_err());
    }
}
