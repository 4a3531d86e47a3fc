//! UTF-8 boundary logic for byte streams: a streaming decoder that keeps a split character
//! across reads, and the start/end rounding used by byte-addressed pages.
//!
//! Pure: no IO. It does not decide what a page is (see `pager`), only where characters start.

/// Decodes a byte stream chunk by chunk. A character split between two chunks is held back
/// until its remaining bytes arrive; invalid bytes become U+FFFD.
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    /// Decodes `bytes`, prefixed by any incomplete character left by the previous call.
    pub fn decode(&mut self, bytes: &[u8]) -> String {
        let mut buf;
        let input: &[u8] = if self.pending.is_empty() {
            bytes
        } else {
            buf = std::mem::take(&mut self.pending);
            buf.extend_from_slice(bytes);
            &buf
        };
        let keep = incomplete_tail(input);
        let (body, tail) = input.split_at(input.len() - keep);
        let out = String::from_utf8_lossy(body).into_owned();
        self.pending = tail.to_vec();
        out
    }

    /// Whatever is still held back, decoded lossily (at end of stream).
    pub fn finish(&mut self) -> String {
        let p = std::mem::take(&mut self.pending);
        String::from_utf8_lossy(&p).into_owned()
    }

    /// Forgets a held-back partial character (after a resynchronisation).
    pub fn reset(&mut self) {
        self.pending.clear();
    }
}

/// Length of a trailing sequence that is a valid but incomplete UTF-8 prefix (0..=3).
pub fn incomplete_tail(b: &[u8]) -> usize {
    let n = b.len();
    for back in 1..=3.min(n) {
        let c = b[n - back];
        if c & 0xC0 == 0x80 {
            continue;
        }
        let need = match c {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

/// Rounds a start index down to the first byte of the character it falls in (at most 3 back).
pub fn round_start_down(b: &[u8], mut i: usize) -> usize {
    i = i.min(b.len());
    let mut steps = 0;
    while i > 0 && i < b.len() && b[i] & 0xC0 == 0x80 && steps < 3 {
        i -= 1;
        steps += 1;
    }
    i
}

/// Extends an end index forward past the continuation bytes of the character it cuts (at most 3).
pub fn extend_end(b: &[u8], mut i: usize) -> usize {
    i = i.min(b.len());
    let mut steps = 0;
    while i < b.len() && b[i] & 0xC0 == 0x80 && steps < 3 {
        i += 1;
        steps += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_survive_every_split_point() {
        let text = "aé€😀z";
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let mut d = StreamDecoder::default();
            let mut out = d.decode(&bytes[..cut]);
            out.push_str(&d.decode(&bytes[cut..]));
            out.push_str(&d.finish());
            assert_eq!(out, text, "cut at {cut}");
        }
        // One byte at a time.
        let mut d = StreamDecoder::default();
        let out: String = bytes.iter().map(|b| d.decode(&[*b])).collect();
        assert_eq!(out, text);
    }

    #[test]
    fn invalid_bytes_become_replacement_and_do_not_stall() {
        let mut d = StreamDecoder::default();
        assert_eq!(d.decode(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(d.decode(b"\xe2\x82"), "");
        assert_eq!(d.decode(b"x"), "\u{fffd}x");
    }

    #[test]
    fn rounding_stays_on_character_boundaries() {
        let b = "a€b".as_bytes(); // a, e2 82 ac, b
        assert_eq!(round_start_down(b, 2), 1);
        assert_eq!(round_start_down(b, 1), 1);
        assert_eq!(extend_end(b, 2), 4);
        assert_eq!(extend_end(b, 4), 4);
        assert_eq!(extend_end(b, 9), 5);
        assert_eq!(incomplete_tail(&b[..3]), 2);
        assert_eq!(incomplete_tail(&b[..4]), 0);
    }
}
