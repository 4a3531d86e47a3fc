//! The review beds (`review*.rs`, the review benchmark's neighbours): a registered-repository
//! fixture with an agent's worktree, the phone's steps through Changes (the files, the diff
//! as shown, two comments sent), and a bounded wait on an observable condition.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::git;
use crate::webdriver::Browser;
use crate::{NodeProc, ipc};

/// How long a phone step may take before the test fails.
const STEP_MS: u64 = 15_000;

/// `p` as a string.
pub fn s(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// One IPC request to `node`: its status and JSON body.
pub async fn call(node: &NodeProc, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let r = ipc(&node.socket, method, path, body).await.unwrap();
    (r.status, r.json())
}

/// The 30-line `lib.rs` the fixtures start from.
pub fn base_lib() -> String {
    (1..=30).map(|i| format!("fn line_{i}() {{}}\n")).collect()
}

/// A 30-line `lib.rs` whose lines are wider than a phone: what the no-sideways-scrolling
/// check reads.
pub fn wide_lib() -> String {
    (1..=30)
        .map(|i| {
            format!(
                "fn line_{i}() {{ let value_{i} = \"a fairly long string literal number {i}\"; }}\n"
            )
        })
        .collect()
}

/// The `notes.md` the fixtures start from (a heading, emphasis, a list).
pub const NOTES: &str = "# Notes\n\nSome *text* here.\n\n- one\n- two\n";

/// A repository `repo` on `main` (`lib.rs` holding `lib`, [`NOTES`]) and a linked worktree on
/// `feat`, nothing committed on `feat` yet.
pub fn repo_with_worktree_of(dir: &Path, lib: &str) -> (PathBuf, PathBuf) {
    let root = dir.join("repo");
    std::fs::create_dir(&root).unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("lib.rs"), lib).unwrap();
    std::fs::write(root.join("notes.md"), NOTES).unwrap();
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "base"]);
    let root = root.canonicalize().unwrap();
    let wt = dir.join("repo__wt").join("feat");
    git(&root, &["worktree", "add", "-q", "-b", "feat", &s(&wt)]);
    (root, wt.canonicalize().unwrap())
}

/// [`repo_with_worktree_of`] over [`base_lib`].
pub fn repo_with_worktree(dir: &Path) -> (PathBuf, PathBuf) {
    repo_with_worktree_of(dir, &base_lib())
}

/// [`repo_with_worktree_of`] `lib` plus two commits on `feat`: line 3 renamed to
/// `line_three() -> u32` and line 20 dropped in `lib.rs`, then `new.txt` added.
pub fn setup_of(dir: &Path, lib: &str) -> (PathBuf, PathBuf) {
    let (root, wt) = repo_with_worktree_of(dir, lib);
    let changed: String = lib
        .replace("fn line_3() {}", "fn line_three() -> u32 { 3 }")
        .replace("fn line_3() {", "fn line_three() -> u32 {")
        .lines()
        .filter(|l| !l.starts_with("fn line_20() {"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(wt.join("lib.rs"), changed).unwrap();
    git(&wt, &["commit", "-qam", "agent: rename line 3"]);
    std::fs::write(wt.join("new.txt"), "fresh\n").unwrap();
    git(&wt, &["add", "new.txt"]);
    git(&wt, &["commit", "-qm", "agent: add new.txt"]);
    (root, wt)
}

/// [`setup_of`] over [`base_lib`].
pub fn setup(dir: &Path) -> (PathBuf, PathBuf) {
    setup_of(dir, &base_lib())
}

/// Polls `f` every 50 ms until it holds; panics naming `what` after `limit`.
pub async fn wait_for(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `file` (what a recording shell received) holds a whole bracketed paste; its
/// text.
pub async fn pasted(file: &Path) -> String {
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

/// A phone (390×844) logged in to `base` on the Changes page of `session` (an id, or a
/// hub's `<connection>/<id>` address): waits for [`setup_of`]'s two changed files, checks
/// `lib.rs` shows `+1 −2`, and returns the browser with the file list's and the commit
/// list's text.
pub async fn phone_on_changes(base: &str, session: &str) -> (Browser, String, String) {
    let b = Browser::launch(390, 844).await.unwrap();
    super::login(&b, base).await;
    b.goto(&format!("{base}/mobile#/changes/{}", crate::enc(session)))
        .await
        .unwrap();
    b.wait_for(
        "document.querySelectorAll('#files .file').length === 2",
        STEP_MS,
    )
    .await
    .unwrap();
    let files = b.text(&b.find("#files").await.unwrap()).await.unwrap();
    let commits = b.text(&b.find("#commits").await.unwrap()).await.unwrap();
    assert!(
        files.contains("lib.rs") && files.contains("+1 −2"),
        "{files}"
    );
    (b, files, commits)
}

/// Opens `file`'s diff on the Changes page and returns its lines as shown, one per line (what
/// `git diff` prints for it).
pub async fn shown_diff(b: &Browser, file: &str) -> String {
    b.click(
        &b.find(&format!("#files .file[data-file='{file}']"))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    b.wait_for("document.querySelectorAll('#diff .dl').length > 5", STEP_MS)
        .await
        .unwrap();
    let shown = b
        .eval(
            "return Array.from(document.querySelectorAll('#diff .dl .code')).map(e => e.textContent).join('\\n') + '\\n';",
            json!([]),
        )
        .await
        .unwrap();
    shown.as_str().unwrap().to_owned()
}

/// On the open `lib.rs` diff of [`setup_of`]'s change: comments on the added line 3 and the
/// removed line 20, sends the review and waits until the page says it went to the PTY.
pub async fn comment_twice_and_send(b: &Browser) {
    for (sel, text, n) in [
        (
            "#diff .dl.add[data-new='3']",
            "call it line_three_fn",
            "1 comment",
        ),
        ("#diff .dl.del[data-old='20']", "keep line 20", "2 comments"),
    ] {
        b.click(&b.find(sel).await.unwrap()).await.unwrap();
        let ta = b.find(".comment-form textarea").await.unwrap();
        b.type_text(&ta, text).await.unwrap();
        b.click(&b.find(".comment-add").await.unwrap())
            .await
            .unwrap();
        b.wait_for(
            &format!("document.getElementById('comment-count').textContent === '{n}'"),
            STEP_MS,
        )
        .await
        .unwrap();
    }
    b.click(&b.find("#send-review").await.unwrap())
        .await
        .unwrap();
    b.wait_for(
        "document.getElementById('review-status').textContent.includes('sent via pty')",
        STEP_MS,
    )
    .await
    .unwrap();
}
