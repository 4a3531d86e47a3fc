//! Issue 47's audit of branch deletions through the real `tuic-node`: over HTTP
//! (`POST /repo/branch-delete`) and over MCP (`repo action=branch_delete`), each deletion
//! writes one `branch_deleted` entry with who, from where, the repository, the branch and
//! the archive flag; a refused deletion writes none. (Landings, `branch_landed`, are
//! asserted field by field in `review.rs` and `node/src/review/tests.rs`.)

use std::path::Path;

use serde_json::{Value, json};
use tuic_tests::agent::Agent;
use tuic_tests::bed::git;
use tuic_tests::{NodeProc, config_dir, ipc};

async fn deleted(socket: &Path) -> Vec<Value> {
    let r = ipc(socket, "GET", "/audit?kind=branch_deleted&limit=1000", None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    r.json()["entries"].as_array().unwrap().clone()
}

#[tokio::test]
async fn each_branch_deletion_is_audited_with_its_fields_and_a_refusal_is_not() {
    let d = config_dir(json!({}));
    let n = NodeProc::start(
        "tuic-node",
        &["--config-dir", d.path().to_str().unwrap()],
        &[],
    )
    .unwrap();
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    let r = root.to_str().unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    git(&root, &["config", "user.email", "t@example.com"]);
    git(&root, &["config", "user.name", "t"]);
    std::fs::write(root.join("a.txt"), "a\n").unwrap();
    git(&root, &["add", "."]);
    git(&root, &["commit", "-qm", "one"]);
    git(&root, &["branch", "merged-http"]);
    git(&root, &["branch", "merged-mcp"]);

    let reg = ipc(&n.socket, "POST", "/repos", Some(json!({"path": r})))
        .await
        .unwrap();
    assert_eq!(reg.status, 200, "{}", String::from_utf8_lossy(&reg.body));

    // HTTP, over IPC.
    let ok = ipc(
        &n.socket,
        "POST",
        "/repo/branch-delete",
        Some(json!({"path": r, "branch": "merged-http"})),
    )
    .await
    .unwrap();
    assert_eq!(ok.status, 200, "{}", String::from_utf8_lossy(&ok.body));
    let es = deleted(&n.socket).await;
    assert_eq!(es.len(), 1, "{es:#?}");
    let e = &es[0];
    assert_eq!(e["who"], "local");
    assert_eq!(e["via"], "ipc");
    assert_eq!(e["detail"]["path"], r);
    assert_eq!(e["detail"]["branch"], "merged-http");
    assert_eq!(e["detail"]["archive"], false);

    // Refused (no such branch; the checked-out branch): no entry.
    for b in ["no-such-branch", "main"] {
        let refused = ipc(
            &n.socket,
            "POST",
            "/repo/branch-delete",
            Some(json!({"path": r, "branch": b})),
        )
        .await
        .unwrap();
        assert_ne!(refused.status, 200, "{b}");
    }
    assert_eq!(deleted(&n.socket).await.len(), 1);

    // MCP, from a registered agent.
    let (mut agent, _me) = Agent::new(&n.socket, "cleaner").await;
    let (err, v) = agent
        .tool(
            "repo",
            json!({"action": "branch_delete", "path": r, "branch": "merged-mcp"}),
        )
        .await;
    assert!(!err, "{v}");
    let (err, _) = agent
        .tool(
            "repo",
            json!({"action": "branch_delete", "path": r, "branch": "no-such-branch"}),
        )
        .await;
    assert!(err);
    let es = deleted(&n.socket).await;
    assert_eq!(es.len(), 2, "{es:#?}");
    let e = &es[0];
    assert!(e["who"].as_str().unwrap().starts_with("agent:"), "{e}");
    assert_eq!(e["via"], "ipc");
    assert_eq!(e["detail"]["branch"], "merged-mcp");
    assert_eq!(e["detail"]["path"], r);
    assert!(
        git(&root, &["branch", "--list", "merged-*"])
            .trim()
            .is_empty(),
        "both branches are gone"
    );
}
