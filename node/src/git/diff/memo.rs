//! What the change views remember between calls: only answers that are fixed by commit ids.
//!
//! A merge-base of two commits, the committed changes and commits of `merge_base..head`, and
//! one file's diff over that range never change once the two ids are known — so a phone
//! polling Changes, or opening the same file again, costs one `git rev-parse` (which names
//! the ids) instead of four to six processes. Uncommitted work is never remembered: it is read
//! afresh on every call. Bounded by entries and by diff bytes; when a bound is reached the
//! memo is emptied at once (the next call recomputes), like the default-branch memo.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{Commit, FileChange, FileDiff};

/// Remembered ranges (summaries) and merge-bases at most.
const MAX_RANGES: usize = 256;
/// Remembered file diffs at most.
const MAX_FILES: usize = 128;
/// Diff text kept at most over all remembered file diffs.
const MAX_FILE_BYTES: usize = 16 * 1024 * 1024;
/// A file diff bigger than this is not remembered.
const MAX_ONE_FILE_BYTES: usize = 2 * 1024 * 1024;

/// The committed half of a summary: every changed file and the listed commits.
#[derive(Debug)]
pub(crate) struct Committed {
    pub(crate) files: Vec<FileChange>,
    pub(crate) commits: Vec<Commit>,
    pub(crate) commits_truncated: bool,
}

/// `(repository root, merge-base, head)`.
type RangeKey = (PathBuf, String, String);

/// The memo (one per git runner).
#[derive(Debug, Default)]
pub(crate) struct ViewMemo {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    merge_bases: HashMap<(String, String), String>,
    ranges: HashMap<RangeKey, Arc<Committed>>,
    files: HashMap<(RangeKey, String), Arc<FileDiff>>,
    file_bytes: usize,
}

impl ViewMemo {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The merge-base of two commit ids, when remembered.
    pub(crate) fn merge_base(&self, base: &str, head: &str) -> Option<String> {
        self.lock()
            .merge_bases
            .get(&(base.to_owned(), head.to_owned()))
            .cloned()
    }

    /// Remembers a merge-base.
    pub(crate) fn put_merge_base(&self, base: &str, head: &str, mb: &str) {
        let mut m = self.lock();
        if m.merge_bases.len() >= MAX_RANGES {
            m.merge_bases.clear();
        }
        m.merge_bases
            .insert((base.to_owned(), head.to_owned()), mb.to_owned());
    }

    /// The committed half of a summary of `merge_base..head` in `root`, when remembered.
    pub(crate) fn range(&self, root: &Path, mb: &str, head: &str) -> Option<Arc<Committed>> {
        self.lock()
            .ranges
            .get(&(root.to_owned(), mb.to_owned(), head.to_owned()))
            .cloned()
    }

    /// Remembers the committed half of a summary.
    pub(crate) fn put_range(&self, root: &Path, mb: &str, head: &str, c: Arc<Committed>) {
        let mut m = self.lock();
        if m.ranges.len() >= MAX_RANGES {
            m.ranges.clear();
        }
        m.ranges
            .insert((root.to_owned(), mb.to_owned(), head.to_owned()), c);
    }

    /// One file's whole committed diff over `merge_base..head`, when remembered.
    pub(crate) fn file(
        &self,
        root: &Path,
        mb: &str,
        head: &str,
        name: &str,
    ) -> Option<Arc<FileDiff>> {
        self.lock()
            .files
            .get(&(
                (root.to_owned(), mb.to_owned(), head.to_owned()),
                name.to_owned(),
            ))
            .cloned()
    }

    /// Remembers one file's whole committed diff (not when it is big).
    pub(crate) fn put_file(&self, root: &Path, mb: &str, head: &str, name: &str, d: Arc<FileDiff>) {
        let bytes = weight(&d, name);
        if bytes > MAX_ONE_FILE_BYTES {
            return;
        }
        let mut m = self.lock();
        if m.files.len() >= MAX_FILES || m.file_bytes + bytes > MAX_FILE_BYTES {
            m.files.clear();
            m.file_bytes = 0;
        }
        let key = (
            (root.to_owned(), mb.to_owned(), head.to_owned()),
            name.to_owned(),
        );
        if let Some(old) = m.files.insert(key, d) {
            m.file_bytes -= weight(&old, name);
        }
        m.file_bytes += bytes;
    }
}

/// What a remembered file diff holds in memory: its text, and its parsed lines (each a copy of
/// its text plus the line's own fields).
fn weight(d: &FileDiff, name: &str) -> usize {
    d.text.len()
        + name.len()
        + d.lines
            .iter()
            .map(|l| l.text.len() + std::mem::size_of::<super::Line>())
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diff(text: &str) -> Arc<FileDiff> {
        Arc::new(FileDiff {
            file: "f".into(),
            old_path: None,
            status: "modified",
            uncommitted: false,
            head: "h".into(),
            merge_base: "m".into(),
            added: 1,
            removed: 0,
            summary: None,
            binary: false,
            huge: false,
            bytes: 0,
            text: text.into(),
            lines: vec![],
            total_lines: 0,
            next_offset: None,
        })
    }

    #[test]
    fn file_diffs_are_kept_within_their_byte_bound() {
        let m = ViewMemo::default();
        let root = Path::new("/r");
        let big = "x".repeat(MAX_ONE_FILE_BYTES);
        for i in 0..20 {
            m.put_file(root, "m", "h", &format!("f{i}"), diff(&big));
            let kept = m.lock().file_bytes;
            assert!(kept <= MAX_FILE_BYTES, "{kept}");
        }
        // Too big to keep at all.
        m.put_file(
            root,
            "m",
            "h",
            "huge",
            diff(&"y".repeat(MAX_ONE_FILE_BYTES + 1)),
        );
        assert!(m.file(root, "m", "h", "huge").is_none());
        // The same key again replaces, and the byte count follows.
        m.put_file(root, "m", "h", "f19", diff("short"));
        assert_eq!(m.file(root, "m", "h", "f19").unwrap().text, "short");
        let expect: usize = m.lock().files.iter().map(|((_, n), d)| weight(d, n)).sum();
        assert_eq!(m.lock().file_bytes, expect);
    }

    #[test]
    fn entries_are_keyed_by_commit_ids() {
        let m = ViewMemo::default();
        let root = Path::new("/r");
        m.put_merge_base("b1", "h1", "mb");
        assert_eq!(m.merge_base("b1", "h1").as_deref(), Some("mb"));
        assert!(m.merge_base("b1", "h2").is_none());
        m.put_file(root, "mb", "h1", "a.rs", diff("t"));
        assert!(m.file(root, "mb", "h2", "a.rs").is_none());
        assert!(m.file(Path::new("/other"), "mb", "h1", "a.rs").is_none());
    }
}
