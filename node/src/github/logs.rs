//! Trimming a GitHub Actions job log to its failing step, fed chunk by chunk as the log is
//! downloaded, in bounded memory whatever the log's size.
//!
//! A job log is one text: every line starts with an RFC 3339 timestamp; each `run` step
//! opens with `##[group]Run …`, and a failing step writes `##[error]…` (at least `Process
//! completed with exit code N.`). The trimmer keeps, for the step being read, its header and
//! the last `tail` bytes of its lines (a ring); the first step that writes `##[error]` is the
//! failing one and is kept when the next step begins. With no error marker at all, the log's
//! own last `tail` bytes are answered. Timestamps are dropped; a line longer than
//! [`MAX_LINE`] is cut.

use std::collections::VecDeque;

/// Longest line kept (4 KiB); the rest of a longer line is dropped and the cut marked.
pub const MAX_LINE: usize = 4096;

/// Bytes read of one log at most (64 MiB); the download stops there.
pub const MAX_READ: u64 = 64 * 1024 * 1024;

/// A failing step's log, trimmed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Trimmed {
    /// The failing step's `##[group]` header (`Run cargo test`), when the log named one.
    pub step: Option<String>,
    /// The kept lines, timestamps dropped.
    pub text: String,
    /// Bytes of the whole log read.
    pub log_bytes: u64,
    /// Whether lines of the step (or the log) were dropped to stay within the bound.
    pub truncated: bool,
    /// Whether an `##[error]` marker located the step (else `text` is the log's tail).
    pub error_found: bool,
}

/// Lines of one step: its header and a ring of its last lines.
#[derive(Debug, Default)]
struct Ring {
    header: Option<String>,
    lines: VecDeque<String>,
    bytes: usize,
    dropped: bool,
}

impl Ring {
    fn push(&mut self, line: String, cap: usize) {
        self.bytes += line.len() + 1;
        self.lines.push_back(line);
        while self.bytes > cap
            && let Some(old) = self.lines.pop_front()
        {
            self.bytes -= old.len() + 1;
            self.dropped = true;
        }
    }

    fn text(&self) -> String {
        let mut s = String::with_capacity(self.bytes);
        for l in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        s
    }
}

/// Feeds a log in chunks and answers its failing step.
#[derive(Debug)]
pub struct Trimmer {
    tail: usize,
    partial: Vec<u8>,
    partial_cut: bool,
    step: Ring,
    step_failed: bool,
    failing: Option<Ring>,
    whole: Ring,
    read: u64,
}

impl Trimmer {
    /// A trimmer keeping at most `tail` bytes of lines per ring.
    pub fn new(tail: usize) -> Self {
        Self {
            tail: tail.max(1024),
            partial: Vec::new(),
            partial_cut: false,
            step: Ring::default(),
            step_failed: false,
            failing: None,
            whole: Ring::default(),
            read: 0,
        }
    }

    /// Bytes fed so far.
    pub fn read(&self) -> u64 {
        self.read
    }

    /// Feeds the next chunk.
    pub fn feed(&mut self, chunk: &[u8]) {
        self.read += chunk.len() as u64;
        let mut rest = chunk;
        while let Some(i) = memchr::memchr(b'\n', rest) {
            self.take_partial(&rest[..i]);
            let line = std::mem::take(&mut self.partial);
            let cut = std::mem::take(&mut self.partial_cut);
            self.line(&line, cut);
            rest = &rest[i + 1..];
        }
        self.take_partial(rest);
    }

    fn take_partial(&mut self, bytes: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.partial.len());
        if bytes.len() > room {
            self.partial.extend_from_slice(&bytes[..room]);
            self.partial_cut = true;
        } else {
            self.partial.extend_from_slice(bytes);
        }
    }

    fn line(&mut self, raw: &[u8], cut: bool) {
        let mut text = String::from_utf8_lossy(raw)
            .trim_end_matches('\r')
            .to_owned();
        text = strip_timestamp(&text).to_owned();
        if cut {
            text.push_str(" …[line cut]");
        }
        if let Some(h) = text.strip_prefix("##[group]Run ") {
            self.end_step();
            self.step.header = Some(format!("Run {h}"));
        }
        if text.starts_with("##[error]") && self.failing.is_none() {
            self.step_failed = true;
        }
        self.whole.push(text.clone(), self.tail);
        if self.failing.is_none() {
            self.step.push(text, self.tail);
        }
    }

    fn end_step(&mut self) {
        let done = std::mem::take(&mut self.step);
        if std::mem::take(&mut self.step_failed) && self.failing.is_none() {
            self.failing = Some(done);
        }
    }

    /// The failing step (or the log's tail when no step wrote an error).
    pub fn finish(mut self, cut_short: bool) -> Trimmed {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            let cut = self.partial_cut;
            self.line(&line, cut);
        }
        self.end_step();
        let (ring, error_found) = match self.failing.take() {
            Some(r) => (r, true),
            None => (std::mem::take(&mut self.whole), false),
        };
        Trimmed {
            step: ring.header.clone(),
            text: ring.text(),
            log_bytes: self.read,
            truncated: ring.dropped || cut_short,
            error_found,
        }
    }
}

/// `2024-05-01T10:00:00.1234567Z rest` → `rest`; other lines unchanged.
fn strip_timestamp(line: &str) -> &str {
    let b = line.as_bytes();
    if b.len() > 20
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[10] == b'T'
        && let Some(sp) = line.find(' ')
        && line[..sp].ends_with('Z')
    {
        return &line[sp + 1..];
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    const TS: &str = "2026-01-02T03:04:05.1234567Z ";

    fn log(lines: &[&str]) -> String {
        lines.iter().map(|l| format!("{TS}{l}\n")).collect()
    }

    #[test]
    fn github_log_keeps_the_failing_step_only() {
        let text = log(&[
            "##[group]Run actions/checkout@v4",
            "checked out",
            "##[endgroup]",
            "##[group]Run cargo test",
            "##[endgroup]",
            "test a ... ok",
            "test b ... FAILED",
            "##[error]Process completed with exit code 101.",
            "##[group]Run echo after",
            "after",
        ]);
        let mut t = Trimmer::new(4096);
        // Fed in awkward chunks: lines split across feeds.
        for c in text.as_bytes().chunks(7) {
            t.feed(c);
        }
        let out = t.finish(false);
        assert_eq!(out.step.as_deref(), Some("Run cargo test"));
        assert!(out.error_found);
        assert!(out.text.contains("test b ... FAILED"), "{}", out.text);
        assert!(out.text.contains("exit code 101"));
        assert!(!out.text.contains("checked out"));
        assert!(!out.text.contains("after"));
        assert!(!out.text.contains("2026-01-02T"), "timestamps dropped");
        assert_eq!(out.log_bytes, text.len() as u64);
        assert!(!out.truncated);
    }

    #[test]
    fn github_log_of_megabytes_is_trimmed_to_the_tail_bound() {
        let mut t = Trimmer::new(2048);
        t.feed(log(&["##[group]Run make", "##[endgroup]"]).as_bytes());
        let noise = format!("{TS}{}\n", "x".repeat(100));
        for _ in 0..50_000 {
            t.feed(noise.as_bytes());
        }
        t.feed(
            log(&[
                "the real failure",
                "##[error]Process completed with exit code 2.",
            ])
            .as_bytes(),
        );
        let out = t.finish(false);
        assert!(out.log_bytes > 5_000_000);
        assert!(out.truncated);
        assert!(out.text.len() <= 2048, "{}", out.text.len());
        assert!(
            out.text
                .ends_with("##[error]Process completed with exit code 2.\n")
        );
        assert!(out.text.contains("the real failure"));
        assert_eq!(out.step.as_deref(), Some("Run make"));
    }

    #[test]
    fn github_log_without_error_marker_answers_its_tail_and_cuts_long_lines() {
        let mut t = Trimmer::new(16 * 1024);
        let long = "y".repeat(MAX_LINE * 3);
        t.feed(format!("{TS}start\n{long}\nend").as_bytes());
        let out = t.finish(false);
        assert!(!out.error_found);
        assert!(out.text.contains("…[line cut]"));
        assert!(out.text.ends_with("end\n"));
    }
}
