//! Secret discovery and masking over retained terminal output.
//!
//! Secrets are found in the *whole* retained context (raw ring, or clean log plus screen) and
//! masked before any page is sliced out of it, so no page size — down to one byte — can
//! reconstruct a secret. Pure: it does not know what a page or a session is.
//!
//! Found: private-key blocks (`-----BEGIN … PRIVATE KEY-----` to the matching END, or to the end
//! of the context while the key is still being written; a body whose header already left the
//! context is found by walking back from its END line over base64 lines), and common token
//! shapes (`ghp_…` and friends, `github_pat_…`, `sk-…`, `AKIA…`/`ASIA…`, `xox?-…`).

use std::ops::Range;

const MASK: u8 = b'*';

/// Byte ranges of `ctx` that hold secrets, sorted and non-overlapping.
pub fn secret_spans(ctx: &[u8]) -> Vec<Range<usize>> {
    let mut spans = key_spans(ctx);
    token_spans(ctx, &mut spans);
    spans.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(spans.len());
    for r in spans {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// Replaces every byte of the spans with `*`, keeping line breaks so layout and offsets hold.
pub fn mask_in_place(buf: &mut [u8], spans: &[Range<usize>]) {
    mask_with(buf, spans, MASK);
}

/// Replaces every byte of the spans except line breaks with `with`.
pub fn mask_with(buf: &mut [u8], spans: &[Range<usize>], with: u8) {
    let len = buf.len();
    for r in spans {
        for b in &mut buf[r.start.min(r.end)..r.end.min(len)] {
            if *b != b'\n' && *b != b'\r' {
                *b = with;
            }
        }
    }
}

/// Marker byte for [`mask_with`] when the caller will turn masked runs into `[REDACTED]`.
pub const SENTINEL: u8 = 0;

/// Turns each run of [`SENTINEL`] bytes into `[REDACTED]`.
pub fn sentinel_runs_to_redacted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_run = false;
    for c in s.chars() {
        if c == SENTINEL as char {
            if !in_run {
                out.push_str("[REDACTED]");
            }
            in_run = true;
        } else {
            in_run = false;
            out.push(c);
        }
    }
    out
}

/// Masks secrets found in `buf` itself; returns whether anything was masked.
pub fn mask_all(buf: &mut [u8]) -> bool {
    let spans = secret_spans(buf);
    mask_in_place(buf, &spans);
    !spans.is_empty()
}

/// Replaces each secret with `[REDACTED]` (the tail-snapshot format).
pub fn replace_redacted(text: &str) -> String {
    let spans = secret_spans(text.as_bytes());
    if spans.is_empty() {
        return text.to_owned();
    }
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut at = 0;
    for r in spans {
        out.extend_from_slice(&b[at..r.start]);
        out.extend_from_slice(b"[REDACTED]");
        at = r.end;
    }
    out.extend_from_slice(&b[at..]);
    String::from_utf8_lossy(&out).into_owned()
}

fn key_spans(ctx: &[u8]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    // Everything before the first BEGIN may hold the body and END of a key whose header left.
    let first_begin = find_begin(ctx, 0).map(|(s, _)| s).unwrap_or(ctx.len());
    if let Some(end) = find_end(&ctx[..first_begin], 0) {
        let body_start = walk_back_base64(ctx, line_start(ctx, end.start));
        out.push(body_start..end.end);
        at = end.end;
    }
    while let Some((s, hdr_end)) = find_begin(ctx, at) {
        match find_end(ctx, hdr_end) {
            Some(e) => {
                out.push(s..e.end);
                at = e.end;
            }
            None => {
                out.push(s..ctx.len());
                break;
            }
        }
    }
    out
}

/// Finds `-----BEGIN ...PRIVATE KEY-----` at or after `from`: (start, end of header).
fn find_begin(ctx: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut at = from;
    while let Some(i) = memchr::memmem::find(&ctx[at..], b"-----BEGIN ") {
        let s = at + i;
        let line_end = memchr::memchr(b'\n', &ctx[s..]).map_or(ctx.len(), |j| s + j);
        let line = &ctx[s..line_end];
        if memchr::memmem::find(line, b"PRIVATE KEY").is_some() {
            let hdr_end =
                memchr::memmem::find(&line[11..], b"-----").map_or(line_end, |k| s + 11 + k + 5);
            return Some((s, hdr_end));
        }
        // A header still arriving (no newline yet) may become a private key header: mask it.
        if line_end == ctx.len() {
            return Some((s, line_end));
        }
        at = s + 11;
    }
    // A header cut mid-marker at the very end of the context.
    let tail_start = ctx.len().saturating_sub(10).max(from);
    for k in tail_start..ctx.len() {
        if b"-----BEGIN ".starts_with(&ctx[k..]) && ctx.len() - k >= 3 {
            return Some((k, ctx.len()));
        }
    }
    None
}

/// Finds `-----END ...PRIVATE KEY-----` at or after `from`.
fn find_end(ctx: &[u8], from: usize) -> Option<Range<usize>> {
    let mut at = from;
    while let Some(i) = memchr::memmem::find(&ctx[at..], b"-----END ") {
        let s = at + i;
        let line_end = memchr::memchr(b'\n', &ctx[s..]).map_or(ctx.len(), |j| s + j);
        let line = &ctx[s..line_end];
        if memchr::memmem::find(line, b"PRIVATE KEY").is_some() {
            let e = memchr::memmem::find(&line[9..], b"-----").map_or(line_end, |k| s + 9 + k + 5);
            return Some(s..e);
        }
        at = s + 9;
    }
    None
}

fn line_start(ctx: &[u8], i: usize) -> usize {
    memchr::memrchr(b'\n', &ctx[..i]).map_or(0, |j| j + 1)
}

/// Walks back from the line starting at `start` over lines that look like key body.
fn walk_back_base64(ctx: &[u8], mut start: usize) -> usize {
    while start > 0 {
        let prev_end = start - 1; // the '\n'
        let prev_start = line_start(ctx, prev_end);
        let line = trim_cr(&ctx[prev_start..prev_end]);
        let body = !line.is_empty()
            && line
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='));
        let pem_header = line.starts_with(b"Proc-Type:") || line.starts_with(b"DEK-Info:");
        if !(body || pem_header) {
            break;
        }
        start = prev_start;
    }
    start
}

fn trim_cr(l: &[u8]) -> &[u8] {
    l.strip_suffix(b"\r").unwrap_or(l)
}

/// A token shape: prefix, allowed body byte, minimum body length.
type TokenShape = (&'static [u8], fn(u8) -> bool, usize);

/// The token shapes masked.
const TOKENS: &[TokenShape] = &[
    (b"ghp_", alnum, 20),
    (b"gho_", alnum, 20),
    (b"ghu_", alnum, 20),
    (b"ghs_", alnum, 20),
    (b"ghr_", alnum, 20),
    (b"github_pat_", alnum_us, 20),
    (b"sk-", alnum_us_dash, 20),
    (b"AKIA", upper_digit, 16),
    (b"ASIA", upper_digit, 16),
    (b"xoxb-", alnum_dash, 10),
    (b"xoxa-", alnum_dash, 10),
    (b"xoxp-", alnum_dash, 10),
    (b"xoxr-", alnum_dash, 10),
    (b"xoxs-", alnum_dash, 10),
];

fn alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}
fn alnum_us(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}
fn alnum_us_dash(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}
fn alnum_dash(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}
fn upper_digit(c: u8) -> bool {
    c.is_ascii_uppercase() || c.is_ascii_digit()
}

fn token_spans(ctx: &[u8], out: &mut Vec<Range<usize>>) {
    for (prefix, ok, min) in TOKENS {
        let mut at = 0;
        while let Some(i) = memchr::memmem::find(&ctx[at..], prefix) {
            let s = at + i;
            at = s + 1;
            if s > 0 && (ctx[s - 1].is_ascii_alphanumeric() || ctx[s - 1] == b'_') {
                continue;
            }
            let body_start = s + prefix.len();
            let mut e = body_start;
            while e < ctx.len() && ok(ctx[e]) {
                e += 1;
            }
            // A token still being written at the end of the context is masked early: a later
            // page must not be able to reveal what this one withheld, nor the reverse.
            let at_end = e == ctx.len() && e > body_start;
            if e - body_start >= *min || at_end {
                out.push(s..e);
                at = e;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\r\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\r\nQyNTUxOQAAACDAbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefAAAA\r\n-----END OPENSSH PRIVATE KEY-----\r\n";

    fn masked(s: &str) -> String {
        let mut b = s.as_bytes().to_vec();
        mask_all(&mut b);
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn whole_key_block_is_masked_and_surroundings_kept() {
        let s = format!("$ cat id\r\n{KEY}$ ");
        let m = masked(&s);
        assert!(m.starts_with("$ cat id\r\n"));
        assert!(m.ends_with("\r\n$ "));
        assert!(!m.contains("b3Bl") && !m.contains("PRIVATE"));
        assert_eq!(m.len(), s.len());
    }

    #[test]
    fn key_still_arriving_is_masked_to_the_end() {
        for cut in 1..KEY.len() {
            let s = format!("x\n{}", &KEY[..cut]);
            let m = masked(&s);
            if cut >= 3 {
                assert!(
                    !m[2..].bytes().any(|c| c.is_ascii_alphanumeric()),
                    "cut {cut}: {m}"
                );
            }
        }
    }

    #[test]
    fn body_whose_header_left_the_context_stays_masked() {
        let start = KEY.find("\r\n").unwrap() + 2;
        let s = format!("{}$ ", &KEY[start..]);
        let m = masked(&s);
        assert!(!m.contains("b3Bl") && !m.contains("QyNT"), "{m}");
        assert!(m.ends_with("$ "));
    }

    #[test]
    fn token_shapes() {
        let cases = [
            "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 end",
            "key=sk-proj-abcdefghijklmnopqrstuvwx end",
            "AKIAABCDEFGHIJKLMNOP end",
            "xoxb-1234567890-abcdef end",
            "github_pat_11ABCDEFG0123456789_abcdefghijk end",
        ];
        for c in cases {
            let m = masked(c);
            assert!(m.contains("****"), "{c} -> {m}");
            assert!(m.ends_with(" end"), "{m}");
        }
        assert_eq!(masked("a task-list sk-1 ok"), "a task-list sk-1 ok");
        assert_eq!(
            replace_redacted("t ghp_abcdefghijklmnopqrstuvwxyz0123 z"),
            "t [REDACTED] z"
        );
    }
}
