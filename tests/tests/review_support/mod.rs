//! What the review tests (`review*.rs`) share: a registered-repository fixture with an agent's
//! worktree, and a bounded wait on an observable condition.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tuic_tests::bed::git;

pub(crate) fn s(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// Percent-encodes `s` for a query or path segment.
pub(crate) fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The 30-line `lib.rs` the fixtures start from.
pub(crate) fn base_lib() -> String {
    (1..=30).map(|i| format!("fn line_{i}() {{}}\n")).collect()
}

/// A repository `repo` on `main` (`lib.rs`, `notes.md`) and a linked worktree on `feat`,
/// nothing committed on `feat` yet.
pub(crate) fn repo_with_worktree(dir: &Path) -> (PathBuf, PathBuf) {
    let root = dir.join("repo");
    std::fs::create_dir(&root).unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("lib.rs"), base_lib()).unwrap();
    std::fs::write(root.join("notes.md"), "# Notes\n\nSome *text*.\n").unwrap();
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "base"]);
    let root = root.canonicalize().unwrap();
    let wt = dir.join("repo__wt").join("feat");
    git(&root, &["worktree", "add", "-q", "-b", "feat", &s(&wt)]);
    (root, wt.canonicalize().unwrap())
}

/// [`repo_with_worktree`] plus two commits on `feat`: line 3 renamed and line 20 dropped in
/// `lib.rs`, then `new.txt` added.
pub(crate) fn setup(dir: &Path) -> (PathBuf, PathBuf) {
    let (root, wt) = repo_with_worktree(dir);
    let changed = base_lib()
        .replace("fn line_3() {}", "fn line_three() -> u32 { 3 }")
        .replace("fn line_20() {}\n", "");
    std::fs::write(wt.join("lib.rs"), changed).unwrap();
    git(&wt, &["commit", "-qam", "agent: rename line 3"]);
    std::fs::write(wt.join("new.txt"), "fresh\n").unwrap();
    git(&wt, &["add", "new.txt"]);
    git(&wt, &["commit", "-qm", "agent: add new.txt"]);
    (root, wt)
}

/// Polls `f` every 50 ms until it holds; panics naming `what` after `limit`.
pub(crate) async fn wait_for(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `file` (what a recording shell received) holds a whole bracketed paste; its
/// text.
pub(crate) async fn pasted(file: &Path) -> String {
    wait_for(
        "the review at the PTY",
        Duration::from_secs(15),
        async || {
            std::fs::read(file)
                .map(|b| b.windows(6).any(|w| w == b"\x1b[201~"))
                .unwrap_or(false)
        },
    )
    .await;
    String::from_utf8_lossy(&std::fs::read(file).unwrap()).into_owned()
}
