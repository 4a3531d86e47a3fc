//! Branch integration proofs and safe deletion, on the bare runner.

use super::{classify, commit, repo, sh_git};
use crate::git::branch;
use crate::git::worktree;
use crate::git::{GitError, Runner};

#[test]
fn every_proof_kind_positive_and_negative() {
    let git = Runner::default();
    let (_d, root) = repo();
    let r = root.as_path();
    // ancestry: an older point of main.
    sh_git(r, &["branch", "anc"]);
    commit(r, "m1.txt", "m1\n", "main moves on");
    // unmerged: a commit nobody has.
    sh_git(r, &["checkout", "-q", "-b", "un"]);
    commit(r, "un.txt", "unique\n", "unique work");
    // patch_equivalence: cherry-picked onto main.
    sh_git(r, &["checkout", "-q", "-b", "pe", "main"]);
    let pe = commit(r, "pe.txt", "pe\n", "pe change");
    // squash_message: two commits squashed into main with a listing message.
    sh_git(r, &["checkout", "-q", "-b", "sq", "main"]);
    commit(r, "s1.txt", "s1\n", "s1 subject");
    commit(r, "s2.txt", "s2\n", "s2 subject");
    // noop_merge: squashed into main under an unrelated message.
    sh_git(r, &["checkout", "-q", "-b", "nm", "main"]);
    commit(r, "n1.txt", "n1\n", "n1 subject");
    commit(r, "n2.txt", "n2\n", "n2 subject");
    // content_superset: a new file whose lines main has in a differently written file.
    sh_git(r, &["checkout", "-q", "-b", "cs", "main"]);
    commit(r, "shared.txt", "hello\nworld\n", "cs adds lines");
    // content_superset negative: a line main does not have, in a conflicting file.
    sh_git(r, &["checkout", "-q", "-b", "csneg", "main"]);
    commit(r, "other.txt", "bye\n", "csneg adds a line");
    // integration_ancestry: reachable from origin/main only.
    sh_git(r, &["checkout", "-q", "-b", "ia", "main"]);
    let ia = commit(r, "ia.txt", "ia\n", "ia change");
    sh_git(r, &["checkout", "-q", "main"]);
    // main moves first, so the pick is a new commit, not the same one fast-forwarded.
    commit(r, "m2.txt", "m2\n", "main moves again");
    sh_git(r, &["cherry-pick", &pe]);
    sh_git(r, &["merge", "-q", "--squash", "sq"]);
    sh_git(
        r,
        &[
            "commit",
            "-q",
            "-m",
            "Squashed (#1)\n\n* s1 subject\n* s2 subject",
        ],
    );
    sh_git(r, &["merge", "-q", "--squash", "nm"]);
    sh_git(r, &["commit", "-q", "-m", "an unrelated message"]);
    commit(
        r,
        "shared.txt",
        "header\nhello\nmiddle\nworld\nfooter\n",
        "main writes shared",
    );
    commit(r, "other.txt", "something else\n", "main writes other");
    sh_git(r, &["update-ref", "refs/remotes/origin/main", &ia]);
    // in_sync: the same tip as main.
    sh_git(r, &["branch", "same"]);

    let want = [
        ("same", "in_sync", Some("ancestry")),
        ("anc", "merged", Some("ancestry")),
        ("ia", "merged", Some("integration_ancestry")),
        ("pe", "merged", Some("patch_equivalence")),
        ("sq", "merged", Some("squash_message")),
        ("nm", "merged", Some("noop_merge")),
        ("cs", "merged", Some("content_superset")),
        ("csneg", "unmerged", None),
        ("un", "unmerged", None),
    ];
    for (b, status, proof) in want {
        let v = classify(&git, r, b);
        assert_eq!(v.error, None, "{b}");
        assert_eq!((v.commit_status, v.proof), (status, proof), "{b}: {v:?}");
        assert_eq!(v.integrated, proof.is_some(), "{b}");
        assert_eq!(v.archive_required, proof == Some("content_superset"), "{b}");
        assert_eq!(v.github_pr, "unavailable: no GitHub access");
        assert_eq!(v.default_branch.as_deref(), Some("main"));
    }
    // The query changed no ref.
    assert_eq!(
        sh_git(r, &["for-each-ref", "--format=%(refname)", "refs/archive"]),
        ""
    );
}

#[test]
fn branch_delete_refuses_unsafe_and_archives_restorably() {
    let git = Runner::default();
    let (_d, root) = repo();
    let r = root.as_path();
    sh_git(r, &["checkout", "-q", "-b", "un"]);
    let un_tip = commit(r, "un.txt", "unique\n", "unique work");
    sh_git(r, &["checkout", "-q", "-b", "merged", "main"]);
    sh_git(r, &["checkout", "-q", "main"]);
    let wt = r.with_file_name("elsewhere");
    sh_git(
        r,
        &["worktree", "add", "-q", "-b", "busy", wt.to_str().unwrap()],
    );
    let checkouts = |git: &Runner| -> Vec<(String, Option<String>)> {
        worktree::entries(git, r)
            .unwrap()
            .into_iter()
            .map(|e| (e.path.to_string_lossy().into_owned(), e.branch))
            .collect()
    };
    let code = |e: GitError| e.code();
    // Checked out elsewhere.
    let e = branch::delete(&git, r, "busy", false, &checkouts(&git)).unwrap_err();
    assert_eq!(code(e.clone()), "checked_out", "{e}");
    assert!(e.to_string().contains(wt.to_str().unwrap()), "{e}");
    // The default branch (also the main checkout's).
    let e = branch::delete(&git, r, "main", false, &[]).unwrap_err();
    assert_eq!(code(e), "default_branch");
    // Unknown.
    let e = branch::delete(&git, r, "nope", false, &[]).unwrap_err();
    assert_eq!(code(e), "unknown_ref");
    // Unmerged without the archive opt-in: refused, branch intact.
    let e = branch::delete(&git, r, "un", false, &checkouts(&git)).unwrap_err();
    assert_eq!(code(e), "unmerged");
    assert_eq!(sh_git(r, &["rev-parse", "refs/heads/un"]), un_tip);
    // Integrated: deleted, its tip archived.
    let d = branch::delete(&git, r, "merged", false, &checkouts(&git)).unwrap();
    assert_eq!(d.proof, "ancestry");
    assert_eq!(d.archive_ref, "refs/archive/merged");
    // Unmerged with archive=true: the archived recovery rule.
    let d = branch::delete(&git, r, "un", true, &checkouts(&git)).unwrap();
    assert_eq!(d.proof, "archived");
    assert_eq!(d.archive_ref, "refs/archive/un");
    assert_eq!(sh_git(r, &["rev-parse", &d.archive_ref]), un_tip);
    assert!(
        !git.ok(r, &["rev-parse", "--verify", "--quiet", "refs/heads/un"])
            .unwrap()
    );
    // Restorable from the archive ref.
    sh_git(r, &["branch", "un", &d.archive_ref]);
    assert_eq!(sh_git(r, &["rev-parse", "refs/heads/un"]), un_tip);
    // Deleting a new tip of the same name keeps the old archive and uses the suffixed ref.
    sh_git(r, &["checkout", "-q", "un"]);
    let tip2 = commit(r, "un2.txt", "more\n", "more work");
    sh_git(r, &["checkout", "-q", "main"]);
    let d = branch::delete(&git, r, "un", true, &checkouts(&git)).unwrap();
    assert_eq!(d.archive_ref, format!("refs/archive/un--{}", &tip2[..12]));
    assert_eq!(sh_git(r, &["rev-parse", "refs/archive/un"]), un_tip);
}

#[test]
fn an_unknown_verdict_never_authorizes_deletion() {
    let git = Runner::default();
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    sh_git(r, &["init", "-q", "-b", "weird"]);
    commit(r, "a.txt", "a\n", "a");
    sh_git(r, &["branch", "x"]);
    // No origin/HEAD, no main/master/trunk, a detached main checkout: no default branch.
    sh_git(r, &["checkout", "-q", "--detach"]);
    let v = classify(&git, r, "x");
    assert_eq!(v.commit_status, "unknown");
    assert!(
        v.error.as_deref().unwrap().contains("no default branch"),
        "{v:?}"
    );
    let e = branch::delete(&git, r, "x", true, &[]).unwrap_err();
    assert_eq!(e.code(), "unknown_verdict", "{e}");
    assert!(
        git.ok(r, &["rev-parse", "--verify", "--quiet", "refs/heads/x"])
            .unwrap()
    );
}
