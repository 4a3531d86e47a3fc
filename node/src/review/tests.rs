//! The review service's pure parts: neutralising terminal escapes, the one message a review
//! becomes. Delivery and landing are tested end to end (`tests/tests/review.rs`) and on real
//! repositories (`land` tests below).

use super::*;

#[test]
fn escapes_and_controls_are_neutralised() {
    let evil = "fix\x1b]0;pwned\x07 this\x1b[201~\rrm -rf /\u{9b}2J\x7f";
    let n = neutralise(evil);
    assert!(!n.contains('\x1b'));
    assert!(!n.contains('\x07'));
    assert!(!n.contains('\r'));
    assert!(!n.contains('\x7f'));
    assert!(!n.contains('\u{9b}'));
    assert!(n.contains("fix\u{241b}]0;pwned"), "{n}");
    assert!(n.contains("\nrm -rf /"), "{n}");
    assert_eq!(neutralise("a\tb\nc"), "a\tb\nc");
}

#[test]
fn one_message_names_every_position() {
    let r = Review {
        id: "r".into(),
        session: "s".into(),
        path: "/p".into(),
        state: "draft".into(),
        summary: "Two things.".into(),
        comments: vec![
            Comment {
                file: "src/a.rs".into(),
                line: 3,
                side: "new".into(),
                text: "rename this".into(),
                excerpt: Some("let x = 1;".into()),
            },
            Comment {
                file: "b.txt".into(),
                line: 7,
                side: "old".into(),
                text: "why removed?".into(),
                excerpt: None,
            },
        ],
        created_ms: 0,
        updated_ms: 0,
        delivered_via: None,
        message_id: None,
        error: None,
    };
    let m = render(&r);
    assert!(m.contains("src/a.rs:3: rename this"), "{m}");
    assert!(m.contains("b.txt:7 (old): why removed?"), "{m}");
    assert!(m.contains("Two things."));
    assert!(m.starts_with("Review of your changes (2 comments)"));
}

mod landing {
    use std::path::Path;
    use std::sync::Arc;

    use crate::git::Runner as Git;
    use crate::git::diff::real_git::{commit_all, fixture, sh_git};
    use crate::review::land::{self, LandRequest, Method};

    fn audit(dir: &Path) -> crate::audit::Audit {
        let store = Arc::new(crate::store::Store::open(&dir.join("state.redb")).unwrap());
        crate::audit::create_tables(&store).unwrap();
        crate::audit::Audit::new(crate::audit::AuditEnv {
            store,
            bounds: Arc::new(|| crate::audit::Bounds {
                max_entries: 1000,
                max_age_ms: u64::MAX / 2,
            }),
        })
    }

    fn req(wt: &Path, m: Method) -> LandRequest {
        LandRequest {
            path: wt.to_string_lossy().into_owned(),
            method: m,
            message: Some("Land feat".into()),
        }
    }

    fn rev(dir: &Path, r: &str) -> String {
        sh_git(dir, &["rev-parse", r]).trim().to_owned()
    }

    #[test]
    fn squash_lands_one_commit_with_the_worktrees_tree_and_refusals_keep_everything() {
        let git = Git::new(crate::git::GIT_CONCURRENCY);
        let (d, root, wt) = fixture();
        let roots = vec![root.clone()];
        let audit = audit(d.path());
        let actor = crate::audit::Actor {
            who: "login:phone".into(),
            via: "tcp".into(),
            address: Some("100.64.0.9".into()),
        };
        std::fs::write(wt.join("a.txt"), "changed\n").unwrap();
        commit_all(&wt, "one");
        std::fs::write(wt.join("b.txt"), "b\n").unwrap();
        commit_all(&wt, "two");

        // Dirty: refused, nothing moves.
        std::fs::write(wt.join("b.txt"), "dirty\n").unwrap();
        let main_before = rev(&root, "main");
        let e = land::land(&git, &roots, &audit, &actor, &req(&wt, Method::Squash)).unwrap_err();
        assert_eq!(e.code(), "dirty", "{e}");
        assert_eq!(rev(&root, "main"), main_before);
        sh_git(&wt, &["checkout", "--", "b.txt"]);

        // The default branch moved: squash and ff refuse (behind); the moved commit stays.
        std::fs::write(root.join("m.txt"), "m\n").unwrap();
        let moved = commit_all(&root, "main moved");
        for m in [Method::Squash, Method::Ff] {
            let e = land::land(&git, &roots, &audit, &actor, &req(&wt, m)).unwrap_err();
            assert_eq!(e.code(), "behind", "{e}");
            assert!(e.to_string().contains("rebase"), "{e}");
        }
        assert_eq!(rev(&root, "main"), moved);
        let st = land::state(&git, &roots, wt.to_str().unwrap()).unwrap();
        assert_eq!(st["behind"], 1);
        assert_eq!(st["ahead"], 2);
        assert_eq!(st["operations"]["squash"]["allowed"], false);
        assert_eq!(st["operations"]["rebase"]["allowed"], true);
        assert_eq!(st["integration"]["commit_status"], "unmerged");

        // Rebase-then-merge keeps the moved commit and lands the branch on top.
        let v = land::land(&git, &roots, &audit, &actor, &req(&wt, Method::Rebase)).unwrap();
        assert_eq!(v["method"], "rebase");
        let main_now = rev(&root, "main");
        assert_eq!(main_now, rev(&wt, "HEAD"));
        assert!(
            git.ok(&root, &["merge-base", "--is-ancestor", &moved, "main"])
                .unwrap(),
            "the moved commit is still reachable from main"
        );
        // The main checkout (on main, clean) follows.
        assert_eq!(std::fs::read_to_string(root.join("b.txt")).unwrap(), "b\n");
        assert!(sh_git(&root, &["status", "--porcelain"]).is_empty());

        // Nothing left to land.
        let e = land::land(&git, &roots, &audit, &actor, &req(&wt, Method::Ff)).unwrap_err();
        assert_eq!(e.code(), "nothing_to_land");

        // Squash: exactly one new commit on main whose tree is the worktree's.
        std::fs::write(wt.join("c.txt"), "c\n").unwrap();
        commit_all(&wt, "three");
        std::fs::write(wt.join("c.txt"), "c2\n").unwrap();
        commit_all(&wt, "four");
        let before = rev(&root, "main");
        let v = land::land(&git, &roots, &audit, &actor, &req(&wt, Method::Squash)).unwrap();
        let after = rev(&root, "main");
        assert_eq!(v["to"], after);
        assert_eq!(rev(&root, "main^"), before, "one commit on top of main");
        assert_eq!(rev(&root, "main^{tree}"), rev(&wt, "HEAD^{tree}"));
        assert_eq!(
            sh_git(&root, &["log", "-1", "--format=%s", "main"]).trim(),
            "Land feat"
        );
        assert_eq!(std::fs::read_to_string(root.join("c.txt")).unwrap(), "c2\n");

        // Audited: who, from where, which commits.
        let page = audit
            .page(&crate::audit::Query {
                kind: Some("branch_landed".into()),
                ..Default::default()
            })
            .unwrap();
        let es = &page.entries;
        assert_eq!(es.len(), 2, "{es:?}");
        let last = es.iter().find(|e| e.detail["method"] == "squash").unwrap();
        assert_eq!(last.actor.who, "login:phone");
        assert_eq!(last.actor.address.as_deref(), Some("100.64.0.9"));
        assert_eq!(last.detail["commit_count"], 2);
        assert_eq!(last.detail["to"], after);

        // The main checkout dirty (default branch checked out elsewhere with changes): refused.
        std::fs::write(wt.join("d.txt"), "d\n").unwrap();
        commit_all(&wt, "five");
        std::fs::write(root.join("a.txt"), "local edit\n").unwrap();
        let e = land::land(&git, &roots, &audit, &actor, &req(&wt, Method::Ff)).unwrap_err();
        assert_eq!(e.code(), "checked_out", "{e}");
        assert_eq!(rev(&root, "main"), after);
    }
}
