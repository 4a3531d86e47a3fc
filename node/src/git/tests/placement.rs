//! Agent-declared worktree placement, and attribution of a linked worktree to its repository.

use std::path::Path;

use super::{Bed, repo, req, rm};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_placement_is_validated_stored_and_reloaded() {
    let cfg = tempfile::tempdir().unwrap();
    let (_d, root) = repo();
    let (_d2, other) = repo();
    {
        let n = Bed::new(cfg.path());
        n.repos.add(root.to_str().unwrap(), &n.bus, 1).unwrap();
        n.repos.add(other.to_str().unwrap(), &n.bus, 1).unwrap();
        n.git.create(&req(&root, "feat")).unwrap();
        n.git.create(&req(&other, "foreign")).unwrap();
        let wt = root.with_file_name("repo__wt").join("feat");
        let foreign = other.with_file_name("repo__wt").join("foreign");
        let s = n
            .sessions
            .create(crate::session::CreateRequest {
                shell: Some("/bin/sh".into()),
                cwd: Some(root.to_string_lossy().into_owned()),
                ..Default::default()
            })
            .unwrap();
        let mut bus = n.bus.subscribe();
        let decl = |p: &Path| {
            n.git
                .declare(&s.tuic_session, &s.id, &s.cwd, p.to_str().unwrap())
        };
        assert_eq!(decl(&root).unwrap_err().code(), "main_checkout");
        assert_eq!(decl(&foreign).unwrap_err().code(), "unknown_worktree");
        assert_eq!(
            decl(&root.join("..").join("x")).unwrap_err().code(),
            "invalid_path"
        );
        assert!(
            n.sessions.rows()[0].worktree_path.is_none(),
            "nothing changed"
        );
        let v = decl(&wt).unwrap();
        assert_eq!(v["branch"], "feat");
        assert_eq!(v["creator_session"], s.tuic_session.as_str());
        assert_eq!(v["spawn_session"], false);
        assert!(v["lifecycle_status"].is_object());
        let ev = bus.try_recv().unwrap();
        assert_eq!(ev.event.name(), "session-worktree-declared");
        // Idempotent.
        decl(&wt).unwrap();
        let row = &n.sessions.rows()[0];
        assert_eq!(row.worktree_path.as_deref(), wt.to_str());
        assert_eq!(row.worktree_branch.as_deref(), Some("feat"));
        assert_eq!(row.cwd, root.to_str().unwrap(), "cwd stays the shell's");
        let mut closed = n.bus.subscribe();
        s.close();
        // The identity is free once the session has left the live table.
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                let e = closed.recv().await.unwrap();
                if e.event.name() == "session-closed" {
                    break;
                }
            }
        })
        .await
        .expect("session-closed");
        // The durable record is the repository's declared map; the row mirror reloads from it
        // (what a restart does; the end-to-end test restarts the real binary).
        let rec = n
            .repos
            .list()
            .unwrap()
            .into_iter()
            .find(|r| r.path == root.to_str().unwrap())
            .unwrap();
        assert_eq!(
            rec.declared_worktrees[&s.tuic_session].worktree_path,
            wt.to_str().unwrap()
        );
        n.sessions.set_placement(&s.tuic_session, None);
        n.git.load_placements();
        // A session restored with its identity shows the placement.
        let restored = n
            .sessions
            .create(crate::session::CreateRequest {
                shell: Some("/bin/sh".into()),
                cwd: Some(root.to_string_lossy().into_owned()),
                tuic_session: Some(s.tuic_session.clone()),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(restored.tuic_session, s.tuic_session);
        let row = n
            .sessions
            .rows()
            .into_iter()
            .find(|r| r.tuic_session == s.tuic_session)
            .unwrap();
        assert_eq!(row.worktree_path.as_deref(), wt.to_str());
        restored.close();
        // Removing the worktree drops the placement.
        let mut forced = rm(&root, "feat");
        forced.delete_branch = Some(false);
        n.git.remove(&forced).unwrap();
        assert!(n.sessions.placement(&s.tuic_session).is_none());
    };
}

#[test]
fn a_linked_worktree_is_attributed_to_its_repository_without_git() {
    let cfg = tempfile::tempdir().unwrap();
    let n = Bed::new(cfg.path());
    let (d, root) = repo();
    n.repos.add(root.to_str().unwrap(), &n.bus, 1).unwrap();
    n.git.create(&req(&root, "attr")).unwrap();
    let wt = root.with_file_name("repo__wt").join("attr");
    std::fs::create_dir_all(wt.join("deep/er")).unwrap();
    assert_eq!(
        crate::git::main_checkout_of_worktree(&wt.join("deep/er")).as_deref(),
        Some(root.as_path())
    );
    assert_eq!(
        crate::git::main_checkout_of_worktree(&root),
        None,
        "a main checkout"
    );
    assert_eq!(
        crate::git::main_checkout_of_worktree(d.path()),
        None,
        "outside Git"
    );
    // Progress from a terminal in the worktree is the repository's.
    assert_eq!(
        n.progress()
            .project_of(wt.join("deep").to_str().unwrap())
            .as_deref(),
        root.to_str()
    );
}
