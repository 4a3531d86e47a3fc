//! Redaction by value: the stored secrets' values (the secret tool's vault entries), masked
//! out of terminal output the moment it is read from the PTY, before the raw ring, the
//! screen, the capture or any subscriber sees it.
//!
//! [`Redactions`] is the set the secret service publishes (it adds a value when one is stored
//! and drops it when removed); a [`Masker`] per reader applies it. Each byte of a value is
//! replaced by `*` (line breaks kept), so byte offsets, cursors and the screen's layout are
//! unchanged, and every surface built from output (output pages, screen frames and
//! snapshots, the journal, logs, notifications) only ever holds the masked bytes.
//!
//! A value split across two reads: a read that ends with at least [`MIN_HOLD`] bytes of a
//! value's beginning keeps them back until the next read (or the end of output, where they
//! are masked); a shorter split (1–3 bytes) lets those few bytes through and masks the rest.
//! Values shorter than [`MIN_VALUE`] are not redacted (they would mask ordinary text).
//!
//! It deliberately does not find secrets by shape (`redact` does that, at serialization) and
//! does not know where values come from.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use zeroize::Zeroizing;

/// Shortest value redacted (6 bytes): shorter ones are not credentials, and masking them
/// would garble ordinary output.
pub const MIN_VALUE: usize = 6;

/// Bytes of a value's beginning at the end of a read that are held back for the next read.
pub const MIN_HOLD: usize = 4;

/// One pattern: a value as the terminal shows it.
type Pattern = Zeroizing<Vec<u8>>;

/// The values to mask, by secret name; shared by the secret service and every reader.
#[derive(Debug, Default)]
pub struct Redactions {
    by_name: RwLock<BTreeMap<String, Arc<Vec<Pattern>>>>,
    /// Every pattern, rebuilt on change, so a reader takes one `Arc` per read.
    all: RwLock<Arc<Vec<Pattern>>>,
}

impl Redactions {
    /// Masks `value` (stored as secret `name`) from now on, replacing that name's old value.
    pub fn set(&self, name: &str, value: &str) {
        let v = value.as_bytes();
        let mut pats = Vec::new();
        if v.len() >= MIN_VALUE {
            pats.push(Zeroizing::new(v.to_vec()));
            // The line discipline shows a newline as CR LF.
            if v.contains(&b'\n') {
                let crlf = value.replace("\r\n", "\n").replace('\n', "\r\n");
                pats.push(Zeroizing::new(crlf.into_bytes()));
            }
        }
        self.write(|m| {
            m.insert(name.to_owned(), Arc::new(pats));
        });
    }

    /// Stops masking secret `name`'s value.
    pub fn remove(&self, name: &str) {
        self.write(|m| {
            m.remove(name);
        });
    }

    fn write(&self, f: impl FnOnce(&mut BTreeMap<String, Arc<Vec<Pattern>>>)) {
        let mut m = self.by_name.write().unwrap_or_else(|p| p.into_inner());
        f(&mut m);
        let all: Vec<Pattern> = m.values().flat_map(|v| v.iter().cloned()).collect();
        *self.all.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(all);
    }

    fn patterns(&self) -> Arc<Vec<Pattern>> {
        self.all.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `bytes` with every whole value masked (no hold-back): for text that is complete, such as
    /// a ring adopted from a holder.
    pub fn mask_complete(&self, bytes: &mut [u8]) {
        for p in self.patterns().iter() {
            mask_occurrences(bytes, p);
        }
    }
}

/// One reader's masking state.
#[derive(Debug)]
pub struct Masker {
    set: Arc<Redactions>,
    /// The beginning of a value kept back from the last read (never ingested yet).
    held: Zeroizing<Vec<u8>>,
    /// The last bytes ingested, to mask the rest of a value whose first bytes went through.
    tail: Zeroizing<Vec<u8>>,
}

impl Masker {
    /// A masker over the published set.
    pub fn new(set: Arc<Redactions>) -> Self {
        Self {
            set,
            held: Zeroizing::new(Vec::new()),
            tail: Zeroizing::new(Vec::new()),
        }
    }

    /// The bytes of this read to ingest now: masked, without a trailing value beginning that
    /// is held for the next read.
    pub fn pass<'a>(&mut self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let pats = self.set.patterns();
        if pats.is_empty() && self.held.is_empty() {
            return Cow::Borrowed(bytes);
        }
        let mut buf = std::mem::take(&mut *self.held);
        buf.extend_from_slice(bytes);
        let mut buf = Zeroizing::new(buf);
        for p in pats.iter() {
            // The rest of a value whose first (fewer than MIN_HOLD) bytes were ingested.
            for k in (1..p.len()).rev() {
                if self.tail.ends_with(&p[..k]) && buf.starts_with(&p[k..]) {
                    mask_range(&mut buf, 0..p.len() - k);
                    break;
                }
            }
            mask_occurrences(&mut buf, p);
        }
        // A value's beginning of MIN_HOLD bytes or more at the end — counting bytes already
        // ingested (a value typed out byte by byte) — keeps this read's part of it back.
        let mut joined = Zeroizing::new(Vec::with_capacity(self.tail.len() + buf.len()));
        joined.extend_from_slice(&self.tail);
        joined.extend_from_slice(&buf);
        let hold = pats
            .iter()
            .filter_map(|p| {
                (MIN_HOLD..p.len())
                    .rev()
                    .find(|k| joined.ends_with(&p[..*k]))
                    .map(|k| k.min(buf.len()))
            })
            .max()
            .unwrap_or(0);
        let keep = buf.len() - hold;
        self.held = Zeroizing::new(buf[keep..].to_vec());
        buf.truncate(keep);
        let longest = pats.iter().map(|p| p.len()).max().unwrap_or(0);
        let mut tail = std::mem::take(&mut *self.tail);
        tail.extend_from_slice(&buf);
        let cut = tail.len().saturating_sub(longest);
        tail.drain(..cut);
        self.tail = Zeroizing::new(tail);
        Cow::Owned(std::mem::take(&mut *buf))
    }

    /// At the end of output: the held bytes, masked (they began a value).
    pub fn finish(&mut self) -> Vec<u8> {
        let mut rest = std::mem::take(&mut *self.held);
        let n = rest.len();
        mask_range(&mut rest, 0..n);
        rest
    }
}

fn mask_occurrences(buf: &mut [u8], p: &[u8]) {
    if p.is_empty() {
        return;
    }
    let mut from = 0;
    while let Some(i) = memchr::memmem::find(&buf[from..], p) {
        let at = from + i;
        mask_range(buf, at..at + p.len());
        from = at + p.len();
    }
}

fn mask_range(buf: &mut [u8], r: std::ops::Range<usize>) {
    for b in &mut buf[r] {
        if *b != b'\n' && *b != b'\r' {
            *b = b'*';
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(set: &Arc<Redactions>, reads: &[&[u8]]) -> Vec<u8> {
        let mut m = Masker::new(set.clone());
        let mut out = Vec::new();
        for r in reads {
            out.extend_from_slice(&m.pass(r));
        }
        out.extend(m.finish());
        out
    }

    #[test]
    fn a_value_is_masked_in_place_whole_or_split_and_offsets_hold() {
        let set = Arc::new(Redactions::default());
        set.set("TOKEN", "s3cret-VALUE-42");
        let plain = b"x=s3cret-VALUE-42;\r\n";
        let want = b"x=***************;\r\n".to_vec();
        assert_eq!(run(&set, &[plain]), want);
        // Split at every point: never the whole value, at most MIN_HOLD-1 leading bytes.
        for cut in 1..plain.len() {
            let out = run(&set, &[&plain[..cut], &plain[cut..]]);
            assert_eq!(out.len(), plain.len(), "cut {cut}");
            let s = String::from_utf8_lossy(&out).into_owned();
            assert!(!s.contains("s3cr"), "cut {cut}: {s}");
            assert!(!s.contains("VALUE"), "cut {cut}: {s}");
        }
        // Byte by byte: the same.
        let bytes: Vec<&[u8]> = plain.chunks(1).collect();
        let out = run(&set, &bytes);
        assert!(!String::from_utf8_lossy(&out).contains("VALUE"));
        // Removed: no longer masked; short values never are.
        set.remove("TOKEN");
        set.set("PIN", "1234");
        assert_eq!(run(&set, &[plain]), plain.to_vec());
    }

    #[test]
    fn a_multiline_value_is_masked_as_the_terminal_shows_it() {
        let set = Arc::new(Redactions::default());
        set.set("KEY", "line-one\nline-two");
        let out = run(&set, &[b"a line-one\r\nline-two b"]);
        assert_eq!(out, b"a ********\r\n******** b".to_vec());
    }

    #[test]
    fn a_trailing_prefix_is_held_until_the_next_read() {
        let set = Arc::new(Redactions::default());
        set.set("T", "abcdefgh");
        let mut m = Masker::new(set);
        assert_eq!(&*m.pass(b"$ abcd"), b"$ ");
        assert_eq!(&*m.pass(b"x"), b"abcdx");
        assert_eq!(&*m.pass(b"abcde"), b"");
        assert_eq!(m.finish(), b"*****".to_vec());
    }
}
