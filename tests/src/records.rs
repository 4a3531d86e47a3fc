//! Deterministic output streams shared by the `producer` helper binary and the tests that
//! check what the node retained.

/// A small deterministic PRNG (xorshift64*), so producer and test agree without a dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    /// Next value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo).max(1)
    }
}

/// The text of record `i` as it must appear on one grid row (≤ 44 columns).
pub fn record_text(i: usize) -> String {
    let pad = "abcdefghijklmnopqrstuvwxyz";
    format!("REC {i:05} x{}", &pad[..(i * 7) % 26])
}

/// The full byte stream for `n` records: CR-overwritten partial rows, DEC 2026 synchronized
/// frames and colors around each record, split into irregular fragments.
pub fn record_fragments(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let mut stream = Vec::new();
    for i in 0..n {
        let sync = rng.range(0, 3) == 0;
        if sync {
            stream.extend_from_slice(b"\x1b[?2026h");
        }
        if rng.range(0, 2) == 0 {
            // A partial row that is overwritten: a progress line, then erased.
            stream
                .extend_from_slice(format!("working on {i} ... {}%", rng.range(0, 100)).as_bytes());
            stream.extend_from_slice(b"\r\x1b[2K");
        }
        let text = record_text(i);
        let (a, b) = text.split_at(text.len() / 2);
        stream.extend_from_slice(a.as_bytes());
        stream.extend_from_slice(b"\x1b[32m");
        stream.extend_from_slice(b.as_bytes());
        stream.extend_from_slice(b"\x1b[0m");
        if sync {
            stream.extend_from_slice(b"\x1b[?2026l");
        }
        stream.extend_from_slice(b"\r\n");
    }
    let mut out = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        let len = match rng.range(0, 10) {
            0 => 1,
            1..=6 => rng.range(1, 40),
            _ => rng.range(40, 700),
        } as usize;
        let end = (at + len).min(stream.len());
        out.push(stream[at..end].to_vec());
        at = end;
    }
    out
}

/// A deterministic payload of `len` bytes: printable lines, optionally with multibyte UTF-8.
pub fn payload(len: usize, utf8: bool, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(len + 8);
    let words: &[&str] = if utf8 {
        &["alpha ", "βeta ", "gämma ", "δ€lta ", "😀 ", "línea\n", "x"]
    } else {
        &[
            "alpha ",
            "beta ",
            "gamma ",
            "delta ",
            "line\n",
            "0123456789 ",
        ]
    };
    while out.len() < len {
        let w = words[rng.range(0, words.len() as u64) as usize];
        out.extend_from_slice(w.as_bytes());
    }
    // Cut on a character boundary.
    let mut end = len;
    while end > 0 && out.get(end).is_some_and(|b| b & 0xC0 == 0x80) {
        end -= 1;
    }
    out.truncate(end);
    out
}
