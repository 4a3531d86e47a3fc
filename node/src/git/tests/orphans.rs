//! The orphan cleanup dialog.

use super::{Bed, repo, req, sh_git};

#[test]
fn orphan_cleanup_dialog_opens_rechecks_and_answers() {
    let cfg = tempfile::tempdir().unwrap();
    let n = Bed::new(cfg.path());
    let (_d, root) = repo();
    n.repos.add(root.to_str().unwrap(), &n.bus, 1).unwrap();
    let rs = root.to_str().unwrap();
    let e = n.git.orphan_answer(rs, "remove").unwrap_err();
    assert_eq!(e.code(), "no_open_dialog");
    n.git.create(&req(&root, "kept")).unwrap();
    n.git.create(&req(&root, "lost")).unwrap();
    let lost = root.with_file_name("repo__wt").join("lost");
    // A detached checkout is an orphan; a branch checkout is not.
    sh_git(&lost, &["checkout", "-q", "--detach"]);
    let mut bus = n.bus.subscribe();
    assert_eq!(
        n.git.orphan_scan(rs).unwrap(),
        vec![lost.to_string_lossy().into_owned()]
    );
    assert_eq!(
        bus.try_recv().unwrap().event.name(),
        "orphan-cleanup-requested"
    );
    // keep closes the dialog.
    let v = n.git.orphan_answer(rs, "keep").unwrap();
    assert_eq!(v["decision"], "keep");
    assert_eq!(
        bus.try_recv().unwrap().event.name(),
        "orphan-cleanup-resolved"
    );
    assert_eq!(
        n.git.orphan_answer(rs, "keep").unwrap_err().code(),
        "no_open_dialog"
    );
    // Reopened; a change inside makes the remove answer unsafe, and nothing goes.
    n.git.orphan_scan(rs).unwrap();
    std::fs::write(lost.join("wip"), "x").unwrap();
    let e = n.git.orphan_answer(rs, "remove").unwrap_err();
    assert_eq!(e.code(), "unsafe_cleanup");
    assert!(e.to_string().contains("changes"), "{e}");
    assert!(lost.is_dir());
    // Clean again: removed; the branch worktree stays.
    std::fs::remove_file(lost.join("wip")).unwrap();
    let v = n.git.orphan_answer(rs, "remove").unwrap();
    assert_eq!(v["removed"][0], lost.to_str().unwrap());
    assert!(!lost.exists());
    assert!(root.with_file_name("repo__wt").join("kept").is_dir());
    assert_eq!(
        n.git.orphan_answer(rs, "remove").unwrap_err().code(),
        "no_open_dialog"
    );
}
