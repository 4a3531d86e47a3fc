//! Browser tests of the review loop (issue 43): Debian's headless Chromium at 390×844 against a
//! real node over TCP — the phone opens Changes for an agent's session, sees the files and a
//! diff whose text equals `git diff` without sideways scrolling, comments on two lines and
//! sends (asserted at the agent's PTY); then an agent's `ui action=tab` opens a file view
//! (markdown rendered) and an editor whose save goes through the root-gated write route.

use serde_json::json;
use tuic_tests::bed::review::{
    call, comment_twice_and_send, pasted, phone_on_changes, s, setup_of, shown_diff, wide_lib,
};
use tuic_tests::bed::{git, login, phone_node, recording_shell};
use tuic_tests::progress::Mcp;
use tuic_tests::webdriver::{Browser, artifacts_dir};

/// Opens the phone's main page, waits for its event stream, and has an agent open `url` as a
/// tab.
async fn agent_tab(b: &Browser, base: &str, mcp: &Mcp, url: String) {
    b.goto(&format!("{base}/mobile")).await.unwrap();
    b.wait_for("document.body.dataset.events === 'open'", 10_000)
        .await
        .unwrap();
    let (err, v) = mcp.tool("ui", json!({"action": "tab", "url": url})).await;
    assert!(!err, "{v}");
}

#[tokio::test]
async fn phone_reviews_changes_and_opens_agent_tabs() {
    let (_d, node) = phone_node();
    let base = format!("http://{}", node.tcp.unwrap());

    // A repository and an agent's worktree with two commits, its lines wider than the phone.
    let work = tempfile::tempdir().unwrap();
    let (root, wt) = setup_of(work.path(), &wide_lib());
    let (st, v) = call(&node, "POST", "/repos", Some(json!({"path": s(&root)}))).await;
    assert_eq!(st, 200, "{v}");

    // The agent's terminal hands everything typed into it to a file.
    let received = work.path().join("received.bin");
    let id = recording_shell(&node, &wt, &received).await;

    let (b, files, commits) = phone_on_changes(&base, &id).await;
    assert!(files.contains("new.txt"), "{files}");
    assert!(
        commits.contains("agent: rename") && commits.contains("agent: add new.txt"),
        "{commits}"
    );
    assert!(
        b.text(&b.find("#delivery").await.unwrap())
            .await
            .unwrap()
            .contains("pty")
    );

    // The diff: the text equals `git diff`, wrapped (no sideways scrolling).
    let shown = shown_diff(&b, "lib.rs").await;
    let mb = git(&wt, &["merge-base", "main", "HEAD"]).trim().to_owned();
    assert_eq!(shown, git(&wt, &["diff", &mb, "HEAD", "--", "lib.rs"]));
    let widths = b
        .eval(
            "const m = document.querySelector('.changes'); return [document.documentElement.scrollWidth, innerWidth, m.scrollWidth, m.clientWidth];",
            json!([]),
        )
        .await
        .unwrap();
    assert!(
        widths[0].as_u64() <= widths[1].as_u64(),
        "page scrolls sideways: {widths}"
    );
    assert!(
        widths[2].as_u64() <= widths[3].as_u64(),
        "changes scroll sideways: {widths}"
    );
    assert!(
        b.eval(
            "return document.querySelectorAll('#diff .dl.add mark').length",
            json!([])
        )
        .await
        .unwrap()
        .as_u64()
            > Some(0),
        "word highlight"
    );
    b.screenshot(&artifacts_dir().join("review-diff-phone.png"))
        .await
        .unwrap();

    // Comment on two lines (an added one and a removed one), then send.
    comment_twice_and_send(&b).await;
    let text = pasted(&received).await;
    assert_eq!(
        text.matches("Review of your changes").count(),
        1,
        "{text:?}"
    );
    assert!(text.contains("lib.rs:3: call it line_three_fn"), "{text:?}");
    assert!(text.contains("lib.rs:20 (old): keep line 20"), "{text:?}");
    // The merge panel shows the proof state.
    b.wait_for("document.getElementById('proof') && document.getElementById('proof').textContent.includes('2 ahead')", 10_000)
        .await
        .unwrap();

    // ui action=tab from an MCP client: the attached page opens the file view.
    let mcp = Mcp::start(&node.socket, None).await;
    let notes = root.join("notes.md");
    agent_tab(&b, &base, &mcp, format!("tuic://open{}", s(&notes))).await;
    b.wait_for("document.querySelector('#file-view h1') && document.querySelector('#file-view h1').textContent === 'Notes'", 10_000)
        .await
        .unwrap();
    let view = b.text(&b.find("#file-view").await.unwrap()).await.unwrap();
    assert!(view.contains("Some text here."), "{view}");
    assert_eq!(
        b.eval(
            "return document.querySelector('#file-view em').textContent",
            json!([])
        )
        .await
        .unwrap(),
        "text"
    );
    b.screenshot(&artifacts_dir().join("review-tab-file-phone.png"))
        .await
        .unwrap();

    // An edit tab saves through the gate.
    agent_tab(&b, &base, &mcp, format!("tuic://edit{}", s(&notes))).await;
    b.wait_for("document.getElementById('editor') && document.getElementById('editor').value.startsWith('# Notes')", 10_000)
        .await
        .unwrap();
    let ed = b.find("#editor").await.unwrap();
    b.clear(&ed).await.unwrap();
    b.type_text(&ed, "# Edited on the phone\n").await.unwrap();
    b.click(&b.find("#save").await.unwrap()).await.unwrap();
    b.wait_for(
        "document.getElementById('save-status').textContent === 'Saved'",
        10_000,
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(&notes).unwrap(),
        "# Edited on the phone\n"
    );

    // Refusals: a path outside the roots, another tuic:// action.
    let outside = work.path().join("outside.md");
    std::fs::write(&outside, "x").unwrap();
    let (err, v) = mcp
        .tool(
            "ui",
            json!({"action": "tab", "url": format!("tuic://edit{}", s(&outside))}),
        )
        .await;
    assert!(err && v.to_string().contains("outside"), "{v}");
    let (err, v) = mcp
        .tool(
            "ui",
            json!({"action": "tab", "url": format!("tuic://open-repo{}", s(&root))}),
        )
        .await;
    assert!(err && v.to_string().contains("repo action=add"), "{v}");
}

/// The tabs an agent opened with `ui action=tab` survive a page reload and a node restart: the
/// tab view lists every one (focused or background) in its strip and reads each from the node.
#[tokio::test]
async fn agent_tabs_survive_a_reload_and_a_node_restart() {
    let port = tuic_tests::bed::free_port().to_string();
    let (d, node) =
        tuic_tests::bed::remote_proc("tuic-node", json!({"secret_store": "file"}), &port, &[]);
    let mut node = node;
    let base = format!("http://{}", node.tcp.unwrap());
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("notes.md"), "# Notes\n\nSome *text* here.\n").unwrap();
    std::fs::write(root.join("lib.rs"), "fn kept() {}\n").unwrap();
    let root = root.canonicalize().unwrap();
    let (st, v) = call(&node, "POST", "/repos", Some(json!({"path": s(&root)}))).await;
    assert_eq!(st, 200, "{v}");
    let mcp = Mcp::start(&node.socket, None).await;

    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.wait_for("document.body.dataset.events === 'open'", 10_000)
        .await
        .unwrap();
    // A background tab first (offered in the banner), then a focused one (opened at once).
    let (err, v) = mcp
        .tool(
            "ui",
            json!({"action": "tab", "focus": false, "url": format!("tuic://edit{}", s(&root.join("lib.rs")))}),
        )
        .await;
    assert!(!err, "{v}");
    b.wait_for("!!document.querySelector('#banner a')", 10_000)
        .await
        .unwrap();
    let (err, v) = mcp
        .tool(
            "ui",
            json!({"action": "tab", "url": format!("tuic://open{}", s(&root.join("notes.md")))}),
        )
        .await;
    assert!(!err, "{v}");
    let notes_shown = "document.querySelector('#file-view h1') && document.querySelector('#file-view h1').textContent === 'Notes'";
    b.wait_for(notes_shown, 10_000).await.unwrap();
    let two = "document.querySelectorAll('#agent-tabs .agent-tab').length === 2";
    b.wait_for(two, 10_000).await.unwrap();

    // A reload keeps both tabs, the focused one current.
    b.eval("location.reload(); return 1;", json!([]))
        .await
        .unwrap();
    b.wait_for(&format!("({notes_shown}) && ({two})"), 10_000)
        .await
        .unwrap();
    let names = b
        .eval(
            "return Array.from(document.querySelectorAll('#agent-tabs .agent-tab')).map(a => [a.textContent, a.getAttribute('aria-current')]);",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(names, json!([["lib.rs", null], ["notes.md", "page"]]));

    // The node restarts on the same port: the tabs are still listed and read afresh.
    let _ = node.child.kill();
    let _ = node.child.wait();
    node = tuic_tests::bed::start_remote("tuic-node", &s(d.path()), &port, &[]);
    b.eval("location.reload(); return 1;", json!([]))
        .await
        .unwrap();
    b.wait_for(&format!("({notes_shown}) && ({two})"), 15_000)
        .await
        .unwrap();
    b.screenshot(&artifacts_dir().join("review-tabs-after-restart-phone.png"))
        .await
        .unwrap();
    // Switching to the background tab opens its editor; closing it leaves one tab.
    b.click(
        &b.find("#agent-tabs .agent-tab[data-href*='kind=edit']")
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    b.wait_for("document.getElementById('editor') && document.getElementById('editor').value === 'fn kept() {}\\n'", 15_000)
        .await
        .unwrap();
    b.click(
        &b.find("#agent-tabs .agent-tab[aria-current] + .tab-close")
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    b.wait_for(
        &format!(
            "({notes_shown}) && document.querySelectorAll('#agent-tabs .agent-tab').length === 1"
        ),
        15_000,
    )
    .await
    .unwrap();
    drop(node);
}
