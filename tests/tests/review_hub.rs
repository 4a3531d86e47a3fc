//! End-to-end through a hub (issue 43's main acceptance): a hub and a node in their own
//! network namespaces, a real repository with a worktree on the node and an agent session in it
//! that commits its changes; the phone (headless Chromium, 390×844) opens the hub's page,
//! Changes for the remote session: the right files, a diff whose text equals `git diff`,
//! comments on two lines, sends (one paste at the agent's PTY naming both positions); Merge
//! with squash lands one commit on the node's main whose tree is the worktree's; the change
//! views and worktree removal of `<connection>:/path` through the hub's routes and MCP
//! (`hub/src/remote_git.rs`), removal refused while dirty.

use std::time::Duration;

use serde_json::json;
use tuic_tests::bed::review::{
    call, comment_twice_and_send, pasted, phone_on_changes, repo_with_worktree, s, shown_diff,
    wait_for,
};
use tuic_tests::bed::{PASSWORD, create, git};
use tuic_tests::enc;
use tuic_tests::fed::FedBed;
use tuic_tests::netns::Door;
use tuic_tests::progress::Mcp;
use tuic_tests::webdriver::artifacts_dir;

#[tokio::test]
async fn phone_reviews_and_squashes_a_remote_agent_s_worktree_through_the_hub() {
    let bed = FedBed::start_with_hub(1, json!({}), json!({}), Some(PASSWORD))
        .await
        .unwrap();
    let hub_port = bed.hub.tcp.expect("hub TCP").port();
    let door = Door::open(bed.net.hub(), ([127, 0, 0, 1], hub_port).into()).unwrap();
    let base = format!("http://{}", door.addr);
    let node = bed.nodes[0].proc();

    // On the remote node: a registered repository and the agent's worktree.
    let work = tempfile::tempdir().unwrap();
    let (root, wt) = repo_with_worktree(work.path());
    let (st, v) = call(node, "POST", "/repos", Some(json!({"path": s(&root)}))).await;
    assert_eq!(st, 200, "{v}");

    // The agent session edits and commits in its worktree, then hands every byte typed into
    // its terminal to a file (what the test reads as the agent's input).
    let received = work.path().join("received.bin");
    let id = create(
        node,
        json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": s(&wt)}),
    )
    .await;
    let agent = format!(
        "sed -i 's/fn line_3() {{}}/fn line_three() -> u32 {{ 3 }}/; /fn line_20() {{}}/d' lib.rs \
         && echo fresh > new.txt && git add -A \
         && git -c user.name=agent -c user.email=agent@example.com commit -qm 'agent: rename line 3, add new.txt' \
         && exec cat > {}\r",
        received.display()
    );
    let (st, v) = call(
        node,
        "POST",
        &format!("/sessions/{id}/write"),
        Some(json!({"data": agent})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    wait_for("the agent's commit", Duration::from_secs(20), async || {
        received.exists()
    })
    .await;
    assert_eq!(
        git(&root, &["rev-list", "--count", "main..feat"]).trim(),
        "1"
    );
    let address = format!("nodeb/{id}");
    bed.wait_listed(&address, Duration::from_secs(20))
        .await
        .unwrap();

    // The phone, on the hub's page: Changes of the remote session.
    let (b, files, commits) = phone_on_changes(&base, &address).await;
    assert!(
        files.contains("new.txt") && files.contains("+1 −0"),
        "{files}"
    );
    assert!(
        commits.contains("agent: rename line 3, add new.txt"),
        "{commits}"
    );
    let shown = shown_diff(&b, "lib.rs").await;
    let mb = git(&wt, &["merge-base", "main", "HEAD"]).trim().to_owned();
    let want = git(&wt, &["diff", &mb, "HEAD", "--", "lib.rs"]);
    assert_eq!(shown, want);

    // Two comments, one review, sent: one paste at the agent's PTY naming both positions.
    comment_twice_and_send(&b).await;
    let text = pasted(&received).await;
    assert_eq!(
        text.matches("\u{1b}[200~").count(),
        1,
        "one paste: {text:?}"
    );
    assert_eq!(
        text.matches("Review of your changes").count(),
        1,
        "{text:?}"
    );
    assert!(text.contains("lib.rs:3: call it line_three_fn"), "{text:?}");
    assert!(text.contains("lib.rs:20 (old): keep line 20"), "{text:?}");
    b.screenshot(&artifacts_dir().join("review-hub-diff-phone.png"))
        .await
        .unwrap();

    // The change views of `nodeb:/path` through the hub's routes and its MCP server.
    let hub = &bed.hub;
    let remote_wt = format!("nodeb:{}", s(&wt));
    let (st, v) = call(
        hub,
        "GET",
        &format!("/repo/diff-summary?path={}", enc(&remote_wt)),
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["total_files"], 2, "{v}");
    assert_eq!(v["connection_id"], "nodeb");
    let (st, v) = call(
        hub,
        "GET",
        &format!("/repo/diff-file?path={}&file=lib.rs", enc(&remote_wt)),
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["text"].as_str().unwrap(), want);
    // The owner's refusal keeps its status and code through the hub: a deleted branch.
    let (st, v) = call(
        hub,
        "GET",
        &format!(
            "/repo/diff-summary?path={}&branch=doomed",
            enc(&format!("nodeb:{}", s(&root)))
        ),
        None,
    )
    .await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["code"], "unknown_ref", "{v}");
    assert!(v["error"].as_str().unwrap().starts_with("nodeb: "), "{v}");
    let mcp = Mcp::start(&hub.socket, None).await;
    let (err, v) = mcp
        .tool(
            "repo",
            json!({"action": "diff_file", "path": remote_wt, "file": "lib.rs"}),
        )
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["text"].as_str().unwrap(), want);
    let (st, ms) = call(
        hub,
        "GET",
        &format!("/repo/merge?path={}", enc(&remote_wt)),
        None,
    )
    .await;
    assert_eq!(st, 200, "{ms}");
    assert_eq!(ms["operations"]["squash"]["allowed"], true, "{ms}");

    // Merge with squash from the phone: one commit on main whose tree is the worktree's.
    let before = git(&root, &["rev-parse", "main"]).trim().to_owned();
    b.wait_for(
        "!!document.getElementById('merge-squash') && !document.getElementById('merge-squash').disabled",
        15_000,
    )
    .await
    .unwrap();
    let msg = b.find("#merge-message").await.unwrap();
    b.type_text(&msg, "Land feat from the phone").await.unwrap();
    b.click(&b.find("#merge-squash").await.unwrap())
        .await
        .unwrap();
    b.wait_for(
        "document.getElementById('merge-status') && document.getElementById('merge-status').textContent.startsWith('Landed')",
        15_000,
    )
    .await
    .unwrap();
    let status = b
        .text(&b.find("#merge-status").await.unwrap())
        .await
        .unwrap();
    assert!(status.contains("Landed 1 commit(s) on main"), "{status}");
    assert_eq!(git(&root, &["rev-parse", "main^"]).trim(), before);
    assert_eq!(
        git(&root, &["rev-list", "--count", &format!("{before}..main")]).trim(),
        "1"
    );
    assert_eq!(
        git(&root, &["log", "-1", "--format=%s", "main"]).trim(),
        "Land feat from the phone"
    );
    assert_eq!(
        git(&root, &["rev-parse", "main^{tree}"]),
        git(&wt, &["rev-parse", "HEAD^{tree}"])
    );
    let (st, audit) = call(node, "GET", "/audit?kind=branch_landed", None).await;
    assert_eq!(st, 200, "{audit}");
    assert_eq!(audit["entries"][0]["detail"]["method"], "squash", "{audit}");
    b.screenshot(&artifacts_dir().join("review-hub-merged-phone.png"))
        .await
        .unwrap();

    // Worktree removal through the hub refuses while the worktree is dirty; nothing is lost.
    std::fs::write(wt.join("scratch.txt"), "unsaved\n").unwrap();
    let (err, v) = mcp
        .tool(
            "repo",
            json!({"action": "worktree_remove", "path": format!("nodeb:{}", s(&root)), "branch": "feat"}),
        )
        .await;
    assert!(err, "{v}");
    assert!(v.to_string().contains("dirty"), "{v}");
    assert!(wt.join("scratch.txt").is_file());
    assert!(wt.join("lib.rs").is_file());
}
