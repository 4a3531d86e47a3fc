//! End-to-end: the review loop through the real `tuic-node` binary on a real repository — an
//! agent's worktree changes seen by session (`/sessions/{id}/changes`, diff text equal to
//! `git diff`), a review with two comments (one carrying terminal escapes) sent as one message
//! (asserted at the PTY, escapes neutralised; and as agent mail to a registered identity), a
//! squash landing one commit on main with the worktree's tree, worktree removal refused while
//! dirty, audited; MCP `repo action=diff_summary|diff_file` and `ui action=tab` with its
//! refusals.

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use tuic_tests::bed::review::{call, s, setup, wait_for};
use tuic_tests::bed::{git, recording_shell};
use tuic_tests::progress::{Events, Mcp};
use tuic_tests::{NodeProc, config_dir, enc};

#[tokio::test]
async fn changes_review_to_pty_and_mail_squash_merge_and_mcp() {
    let cfg = config_dir(json!({}));
    let node = NodeProc::start("tuic-node", &["--config-dir", &s(cfg.path())], &[]).unwrap();
    let work = tempfile::tempdir().unwrap();
    let (root, wt) = setup(work.path());
    let (st, v) = call(&node, "POST", "/repos", Some(json!({"path": s(&root)}))).await;
    assert_eq!(st, 200, "{v}");

    // The agent's PTY: a shell in the worktree that hands everything typed to a file.
    let received = work.path().join("received.bin");
    let id = recording_shell(&node, &wt, &received).await;

    // Changes by session: the right files, commits, and a diff equal to `git diff`.
    let (st, ch) = call(&node, "GET", &format!("/sessions/{id}/changes"), None).await;
    assert_eq!(st, 200, "{ch}");
    let files: Vec<(&str, &str, u64, u64)> = ch["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap(),
                f["status"].as_str().unwrap(),
                f["added"].as_u64().unwrap(),
                f["removed"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        files,
        vec![("lib.rs", "modified", 1, 2), ("new.txt", "added", 1, 0)]
    );
    assert_eq!(ch["commits"].as_array().unwrap().len(), 2);
    assert_eq!(ch["delivery"], "pty");
    let mb = git(&wt, &["merge-base", "main", "HEAD"]).trim().to_owned();
    let want = git(&wt, &["diff", &mb, "HEAD", "--", "lib.rs"]);
    let (st, fd) = call(
        &node,
        "GET",
        &format!("/sessions/{id}/changes/file?file=lib.rs"),
        None,
    )
    .await;
    assert_eq!(st, 200, "{fd}");
    assert_eq!(fd["text"].as_str().unwrap(), want);
    // The same by path, and a clear refusal for a branch deleted meanwhile.
    let (st, fd2) = call(
        &node,
        "GET",
        &format!("/repo/diff-file?path={}&file=lib.rs", enc(&s(&wt))),
        None,
    )
    .await;
    assert_eq!(st, 200, "{fd2}");
    assert_eq!(fd2["text"], fd["text"]);
    git(&root, &["branch", "doomed"]);
    git(&root, &["branch", "-D", "doomed"]);
    let (st, e) = call(
        &node,
        "GET",
        &format!("/repo/diff-summary?path={}&branch=doomed", enc(&s(&root))),
        None,
    )
    .await;
    assert_eq!(st, 400, "{e}");
    assert_eq!(e["code"], "unknown_ref");
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("doomed does not exist")
    );

    // A review: two comments (one with escape sequences), stored, then sent as one message.
    let (st, r) = call(
        &node,
        "POST",
        &format!("/sessions/{id}/reviews"),
        Some(json!({"comments": [{"file": "lib.rs", "line": 3, "text": "name it line_three_fn"}]})),
    )
    .await;
    assert_eq!(st, 200, "{r}");
    let rid = r["id"].as_str().unwrap().to_owned();
    assert_eq!(r["state"], "draft");
    let evil = "drop this\u{1b}]0;pwned\u{7}\u{1b}[201~ now";
    let (st, r) = call(
        &node,
        "POST",
        &format!("/sessions/{id}/reviews/{rid}/comments"),
        Some(json!({"file": "new.txt", "line": 1, "text": evil})),
    )
    .await;
    assert_eq!(st, 200, "{r}");
    let (st, bad) = call(
        &node,
        "POST",
        &format!("/sessions/{id}/reviews/{rid}/comments"),
        Some(json!({"file": "/etc/passwd", "line": 0, "text": "x"})),
    )
    .await;
    assert_eq!(st, 400, "{bad}");
    let (st, listed) = call(&node, "GET", &format!("/sessions/{id}/reviews"), None).await;
    assert_eq!(st, 200);
    assert_eq!(
        listed["reviews"][0]["comments"].as_array().unwrap().len(),
        2
    );
    assert_eq!(listed["delivery"], "pty");
    let (st, sent) = call(
        &node,
        "POST",
        &format!("/sessions/{id}/reviews/{rid}/send"),
        None,
    )
    .await;
    assert_eq!(st, 200, "{sent}");
    assert_eq!(sent["state"], "sent");
    assert_eq!(sent["delivered_via"], "pty");
    let (st, again) = call(
        &node,
        "POST",
        &format!("/sessions/{id}/reviews/{rid}/send"),
        None,
    )
    .await;
    assert_eq!(st, 409, "{again}");
    wait_for(
        "the review at the PTY",
        Duration::from_secs(10),
        async || {
            std::fs::read(&received)
                .map(|b| b.windows(7).any(|w| w == b"\x1b[201~\n"))
                .unwrap_or(false)
        },
    )
    .await;
    let got = std::fs::read(&received).unwrap();
    let text = String::from_utf8_lossy(&got);
    assert_eq!(
        text.matches("\u{1b}[200~").count(),
        1,
        "one paste: {text:?}"
    );
    assert_eq!(
        text.matches("\u{1b}[201~").count(),
        1,
        "one paste end: {text:?}"
    );
    assert!(text.contains("lib.rs:3: name it line_three_fn"), "{text:?}");
    assert!(text.contains("new.txt:1: drop this"), "{text:?}");
    assert!(
        !text.contains("\u{1b}]0;"),
        "title escape neutralised: {text:?}"
    );
    assert!(!text.contains('\u{7}'), "BEL neutralised: {text:?}");

    // Mail: a session whose identity registered for agent mail gets the review in its inbox.
    let (st, s2) = call(
        &node,
        "POST",
        "/sessions",
        Some(json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": s(&wt)})),
    )
    .await;
    assert_eq!(st, 200);
    let id2 = s2["session_id"].as_str().unwrap().to_owned();
    let tuic2 = s2["tuic_session"].as_str().unwrap().to_owned();
    let mcp2 = Mcp::start(&node.socket, Some(&tuic2)).await;
    let (err, reg) = mcp2
        .tool("agent", json!({"action": "register", "name": "fixer"}))
        .await;
    assert!(!err, "{reg}");
    let (st, r2) = call(
        &node,
        "POST",
        &format!("/sessions/{id2}/reviews"),
        Some(json!({"send": true, "comments": [
            {"file": "lib.rs", "line": 3, "text": "first"},
            {"file": "new.txt", "line": 1, "text": "second"}]})),
    )
    .await;
    assert_eq!(st, 200, "{r2}");
    assert_eq!(r2["delivered_via"], "mail");
    let (err, inbox) = mcp2.tool("agent", json!({"action": "inbox"})).await;
    assert!(!err, "{inbox}");
    let msgs = inbox["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "{inbox}");
    let m = msgs[0]["message"].as_str().unwrap();
    assert!(
        m.contains("lib.rs:3: first") && m.contains("new.txt:1: second"),
        "{m}"
    );

    // MCP change views.
    let mcp = Mcp::start(&node.socket, None).await;
    let (err, v) = mcp
        .tool("repo", json!({"action": "diff_summary", "path": s(&wt)}))
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["total_files"], 2);
    let (err, v) = mcp
        .tool(
            "repo",
            json!({"action": "diff_file", "path": s(&wt), "file": "lib.rs"}),
        )
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["text"].as_str().unwrap(), want);

    // Merge panel, then squash: one commit on main whose tree is the worktree's; audited.
    let (st, ms) = call(&node, "GET", &format!("/sessions/{id}/merge"), None).await;
    assert_eq!(st, 200, "{ms}");
    assert_eq!(ms["operations"]["squash"]["allowed"], true, "{ms}");
    assert_eq!(ms["integration"]["commit_status"], "unmerged");
    let before = git(&root, &["rev-parse", "main"]).trim().to_owned();
    let (st, landed) = call(
        &node,
        "POST",
        &format!("/sessions/{id}/merge"),
        Some(json!({"method": "squash", "message": "Land feat"})),
    )
    .await;
    assert_eq!(st, 200, "{landed}");
    assert_eq!(git(&root, &["rev-parse", "main^"]).trim(), before);
    assert_eq!(
        git(&root, &["rev-parse", "main^{tree}"]),
        git(&wt, &["rev-parse", "HEAD^{tree}"])
    );
    let (st, audit) = call(&node, "GET", "/audit?kind=branch_landed", None).await;
    assert_eq!(st, 200);
    let e = &audit["entries"][0];
    assert_eq!(e["detail"]["method"], "squash", "{audit}");
    assert_eq!(e["detail"]["commit_count"], 2);
    assert_eq!(e["via"], "ipc");

    // Worktree removal refuses while dirty.
    std::fs::write(wt.join("scratch.txt"), "unsaved\n").unwrap();
    let (st, e) = call(
        &node,
        "POST",
        "/worktrees/remove",
        Some(json!({"path": s(&root), "branch": "feat"})),
    )
    .await;
    assert_eq!(st, 409, "{e}");
    assert_eq!(e["code"], "dirty");
    assert!(wt.join("scratch.txt").is_file());

    // ui action=tab: a file view event to attached UIs; refusals per spec.
    let mut events = Events::subscribe(&node.socket, "mcp-tab").await;
    let notes = root.join("notes.md");
    let (err, v) = mcp
        .tool(
            "ui",
            json!({"action": "tab", "url": format!("tuic://open{}", s(&notes))}),
        )
        .await;
    assert!(!err, "{v}");
    let ev = events
        .next_matching("mcp-tab", Duration::from_secs(10), |e| {
            e["path"] == s(&notes)
        })
        .await
        .expect("mcp-tab");
    assert_eq!(ev["kind"], "file");
    assert_eq!(ev["switch_repo"], s(&root));
    let (err, v) = mcp
        .tool(
            "ui",
            json!({"action": "tab", "focus": false, "url": format!("tuic://edit{}", s(&notes))}),
        )
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["kind"], "edit");
    assert!(
        v.get("switch_repo").is_none(),
        "background tabs keep the repository: {v}"
    );
    let outside = work.path().join("outside.md");
    std::fs::write(&outside, "x").unwrap();
    for (url, says) in [
        (format!("tuic://open-repo{}", s(&root)), "repo action=add"),
        ("tuic://other/x".to_owned(), "tuic://other"),
        (format!("tuic://open{}", s(&outside)), "outside"),
        ("vscode://file/x".to_owned(), "custom URL schemes"),
    ] {
        let (err, v) = mcp.tool("ui", json!({"action": "tab", "url": url})).await;
        assert!(err, "{url}: {v}");
        assert!(v.to_string().contains(says), "{url}: {v}");
    }
}

fn tuic(node: &NodeProc, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let o = Command::new(tuic_tests::bin("tuic"))
        .args(args)
        .env("TUIC_SOCKET", &node.socket)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[tokio::test]
async fn cli_diff_review_and_merge() {
    let cfg = config_dir(json!({}));
    let node = NodeProc::start("tuic-node", &["--config-dir", &s(cfg.path())], &[]).unwrap();
    let work = tempfile::tempdir().unwrap();
    let (root, wt) = setup(work.path());
    let (st, v) = call(&node, "POST", "/repos", Some(json!({"path": s(&root)}))).await;
    assert_eq!(st, 200, "{v}");
    let received = work.path().join("received.bin");
    let id = recording_shell(&node, &wt, &received).await;

    // diff: the list, then one file — plain when piped, equal to `git diff`.
    let (code, out, err) = tuic(&node, &["diff", &s(&wt)], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("lib.rs  +1 -2") && out.contains("new.txt  +1 -0"),
        "{out}"
    );
    assert!(out.contains("agent: rename line 3"), "{out}");
    let mb = git(&wt, &["merge-base", "main", "HEAD"]).trim().to_owned();
    let (code, out, err) = tuic(&node, &["diff", &id, "lib.rs"], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, git(&wt, &["diff", &mb, "HEAD", "--", "lib.rs"]));
    assert!(!out.contains('\u{1b}'), "no colour when piped");
    let (code, _, err) = tuic(&node, &["diff", "no-such-session"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("no session"), "{err}");

    // review: $EDITOR writes the review file; every comment goes as one message.
    let editor = work.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nprintf 'Looks close.\\nlib.rs:3: return a u64\\nlib.rs:-20: keep line 20\\n' >> \"$1\"\n",
    )
    .unwrap();
    let mut perm = std::fs::metadata(&editor).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&editor, perm).unwrap();
    let (code, out, err) = tuic(&node, &["review", &id], &[("EDITOR", &s(&editor))]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sent via pty (2 comment(s))"), "{out}");
    wait_for(
        "the review at the PTY",
        Duration::from_secs(10),
        async || {
            std::fs::read(&received)
                .map(|b| b.windows(7).any(|w| w == b"\x1b[201~\n"))
                .unwrap_or(false)
        },
    )
    .await;
    let text = String::from_utf8_lossy(&std::fs::read(&received).unwrap()).into_owned();
    assert!(text.contains("lib.rs:3: return a u64"), "{text:?}");
    assert!(text.contains("lib.rs:20 (old): keep line 20"), "{text:?}");
    assert!(text.contains("Looks close."), "{text:?}");

    // merge: needs a method; squash lands one commit with the worktree's tree.
    let (code, _, err) = tuic(&node, &["merge", &s(&wt)], &[]);
    assert_eq!(code, 2, "{err}");
    let before = git(&root, &["rev-parse", "main"]).trim().to_owned();
    let (code, out, err) = tuic(&node, &["merge", &s(&wt), "--squash", "-m", "Land it"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("landed 2 commit(s) of feat on main by squash"),
        "{out}"
    );
    assert_eq!(git(&root, &["rev-parse", "main^"]).trim(), before);
    assert_eq!(
        git(&root, &["rev-parse", "main^{tree}"]),
        git(&wt, &["rev-parse", "HEAD^{tree}"])
    );
    let (code, _, err) = tuic(&node, &["merge", &s(&wt), "--ff"], &[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("nothing_to_land") || err.contains("behind"),
        "{err}"
    );
}

#[tokio::test]
async fn a_50_mb_file_diff_is_summarised_with_bounded_node_memory() {
    let cfg = config_dir(json!({}));
    let node = NodeProc::start("tuic-node", &["--config-dir", &s(cfg.path())], &[]).unwrap();
    let work = tempfile::tempdir().unwrap();
    let (root, wt) = setup(work.path());
    let (st, v) = call(&node, "POST", "/repos", Some(json!({"path": s(&root)}))).await;
    assert_eq!(st, 200, "{v}");
    let summary = format!("/repo/diff-summary?path={}", enc(&s(&wt)));
    let (st, v) = call(&node, "GET", &summary, None).await;
    assert_eq!(st, 200, "{v}");

    // 50 MB of text generated here (never part of tuic's own repository): committed on the
    // agent's branch, and a copy left untracked.
    const SIZE: u64 = 50 * 1024 * 1024;
    let mut lines = 0u64;
    {
        use std::io::Write;
        let mut w = std::io::BufWriter::new(std::fs::File::create(wt.join("huge.txt")).unwrap());
        let mut written = 0u64;
        while written < SIZE {
            let l = format!("line {lines:08} of a generated fifty megabyte file\n");
            w.write_all(l.as_bytes()).unwrap();
            written += l.len() as u64;
            lines += 1;
        }
    }
    let bytes = std::fs::metadata(wt.join("huge.txt")).unwrap().len();
    git(&wt, &["add", "huge.txt"]);
    git(&wt, &["commit", "-qm", "agent: a generated 50 MB file"]);
    std::fs::copy(wt.join("huge.txt"), wt.join("huge-copy.log")).unwrap();

    let pid = node.child.id();
    let before = tuic_tests::rss_bytes(pid);
    let (st, sm) = call(&node, "GET", &summary, None).await;
    assert_eq!(st, 200, "{sm}");
    let huge = sm["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "huge.txt")
        .unwrap_or_else(|| panic!("{sm}"));
    assert_eq!(huge["added"], lines, "{huge}");
    let copy = sm["uncommitted"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "huge-copy.log")
        .unwrap_or_else(|| panic!("{sm}"));
    assert_eq!(copy["status"], "untracked", "{copy}");
    let (st, f) = call(
        &node,
        "GET",
        &format!("/repo/diff-file?path={}&file=huge.txt", enc(&s(&wt))),
        None,
    )
    .await;
    assert_eq!(st, 200, "{f}");
    assert_eq!(f["huge"], true, "{f}");
    assert_eq!(f["bytes"], bytes);
    assert_eq!(
        f["summary"],
        format!("huge, {bytes} bytes, +{lines} -0: the diff is not shown")
    );
    assert_eq!(f["text"], "");
    assert!(f["lines"].as_array().unwrap().is_empty());
    let (st, f) = call(
        &node,
        "GET",
        &format!(
            "/repo/diff-file?path={}&file=huge-copy.log&uncommitted=true",
            enc(&s(&wt))
        ),
        None,
    )
    .await;
    assert_eq!(st, 200, "{f}");
    assert_eq!(f["huge"], true, "{f}");
    assert_eq!(f["status"], "untracked");
    assert!(
        f["summary"]
            .as_str()
            .unwrap()
            .starts_with(&format!("huge, {bytes} bytes")),
        "{f}"
    );
    // The node never held the file: its peak resident set (`VmHWM`, so a read freed again
    // still counts) stayed far below the file's size above where it started.
    let grown = peak_rss_bytes(pid).saturating_sub(before);
    assert!(
        grown < 16 * 1024 * 1024,
        "node peak RSS grew by {grown} bytes over a {bytes}-byte file"
    );
}

/// A process's peak resident set in bytes (`VmHWM` of `/proc/<pid>/status`).
fn peak_rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM")
        * 1024
}
