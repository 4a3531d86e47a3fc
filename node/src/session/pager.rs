//! Retained-output paging: which slice of a retained window a request gets, and the paging
//! fields that describe it (`start_offset`, `oldest_offset`, `has_more`, `next_cursor`,
//! `truncated`, `missed_count`).
//!
//! Pure and unit-agnostic: offsets are rows for text and source bytes for raw. It does not
//! read buffers, redact or serialize; the session's output route does that around it.

use crate::session::utf8;

/// One page of a retained window `[oldest, total)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// First offset in the page.
    pub start_offset: u64,
    /// One past the last offset in the page (the raw `cursor`).
    pub end: u64,
    /// Oldest offset still retained.
    pub oldest_offset: u64,
    /// Everything ever written (bytes) or logged (rows).
    pub total: u64,
    /// More retained output follows this page.
    pub has_more: bool,
    /// Where the next page starts; `None` at the end.
    pub next_cursor: Option<u64>,
    /// Rows or bytes the caller asked for that were already evicted.
    pub missed_count: u64,
    /// A tail page that left older retained output out.
    pub tail_omitted: bool,
}

impl Window {
    /// Whether the response is partial (more after it, or older output left out).
    pub fn truncated(&self) -> bool {
        self.has_more || self.tail_omitted
    }

    /// The offset the continuation request should start from, when truncated.
    pub fn continue_from(&self) -> Option<u64> {
        if self.has_more {
            self.next_cursor
        } else if self.tail_omitted {
            Some(self.oldest_offset)
        } else {
            None
        }
    }
}

/// Chooses the page: `from = None` is the tail of `limit`; otherwise `limit` from `from`.
pub fn window(oldest: u64, total: u64, from: Option<u64>, limit: u64) -> Window {
    let oldest = oldest.min(total);
    let limit = limit.max(1);
    match from {
        None => {
            let start = total.saturating_sub(limit).max(oldest);
            Window {
                start_offset: start,
                end: total,
                oldest_offset: oldest,
                total,
                has_more: false,
                next_cursor: None,
                missed_count: 0,
                tail_omitted: start > oldest,
            }
        }
        Some(f) => {
            let missed = oldest.saturating_sub(f);
            let start = f.max(oldest).min(total);
            let end = start.saturating_add(limit).min(total);
            let has_more = end < total;
            Window {
                start_offset: start,
                end,
                oldest_offset: oldest,
                total,
                has_more,
                next_cursor: has_more.then_some(end),
                missed_count: missed,
                tail_omitted: false,
            }
        }
    }
}

/// A byte page: `retained` holds `[oldest, total)`. The start rounds down and the end extends
/// to whole characters (never outside the retained window); the data is decoded lossily
/// without moving the byte offsets.
pub fn raw_page(retained: &[u8], total: u64, from: Option<u64>, limit: u64) -> (Window, String) {
    let oldest = total - retained.len() as u64;
    let mut w = window(oldest, total, from, limit);
    let s = (w.start_offset - oldest) as usize;
    let e = (w.end - oldest) as usize;
    let s2 = utf8::round_start_down(retained, s);
    let e2 = utf8::extend_end(retained, e.max(s2));
    w.start_offset = oldest + s2 as u64;
    w.end = oldest + e2 as u64;
    w.has_more = w.end < total && (from.is_some());
    w.next_cursor = w.has_more.then_some(w.end);
    if from.is_none() {
        w.tail_omitted = w.start_offset > oldest;
    }
    let data = String::from_utf8_lossy(&retained[s2..e2]).into_owned();
    (w, data)
}

/// A row page: `retained` holds rows `[oldest, total)`.
pub fn row_page<'a>(
    retained: impl ExactSizeIterator<Item = &'a str> + Clone,
    total: u64,
    from: Option<u64>,
    limit: u64,
) -> (Window, Vec<String>) {
    let oldest = total - retained.len() as u64;
    let w = window(oldest, total, from, limit);
    let rows = retained
        .skip((w.start_offset - oldest) as usize)
        .take((w.end - w.start_offset) as usize)
        .map(str::to_owned)
        .collect();
    (w, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_and_forward_pages() {
        let w = window(10, 100, None, 30);
        assert_eq!((w.start_offset, w.end, w.tail_omitted), (70, 100, true));
        assert_eq!(w.continue_from(), Some(10));
        let w = window(10, 100, Some(10), 30);
        assert_eq!((w.start_offset, w.end, w.next_cursor), (10, 40, Some(40)));
        assert!(w.truncated());
        let w = window(10, 100, Some(90), 30);
        assert_eq!((w.end, w.has_more, w.next_cursor), (100, false, None));
        assert!(!w.truncated());
    }

    #[test]
    fn evicted_and_future_cursors() {
        let w = window(10, 100, Some(4), 5);
        assert_eq!((w.start_offset, w.missed_count), (10, 6));
        let w = window(10, 100, Some(500), 5);
        assert_eq!((w.start_offset, w.end, w.has_more), (100, 100, false));
    }

    #[test]
    fn raw_pages_round_to_characters_and_cover_everything_once() {
        let text = "héllo €uro 😀!";
        let b = text.as_bytes();
        let total = 1000 + b.len() as u64;
        let mut from = 1000;
        let mut out = String::new();
        let mut pages = 0;
        loop {
            let (w, data) = raw_page(b, total, Some(from), 1);
            assert_eq!(w.start_offset, from);
            out.push_str(&data);
            pages += 1;
            match w.next_cursor {
                Some(n) => from = n,
                None => break,
            }
            assert!(pages < 100);
        }
        assert_eq!(out, text);
        // A start inside a character rounds down.
        let (w, data) = raw_page(b, total, Some(1002), 1);
        assert_eq!((w.start_offset, data.as_str()), (1001, "é"));
    }

    #[test]
    fn invalid_bytes_keep_source_offsets() {
        let b = b"a\xffb";
        let (w, data) = raw_page(b, 3, Some(0), 10);
        assert_eq!((w.end, data.as_str()), (3, "a\u{fffd}b"));
    }
}
