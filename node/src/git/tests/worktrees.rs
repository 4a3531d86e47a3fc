//! Worktree creation, listing and removal with their safety gates, warming and bad input.

use std::path::Path;

use serde_json::json;

use super::{Bed, commit, repo, req, rm, sh_git};
use crate::git::worktree;

#[test]
fn worktree_create_list_remove_with_safety_gates() {
    let cfg = tempfile::tempdir().unwrap();
    let n = Bed::new(cfg.path());
    let (_d, root) = repo();
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    std::fs::create_dir_all(root.join(".tuic")).unwrap();
    std::fs::write(
        root.join(".tuic/worktree-setup.sh"),
        "echo set up in \"$PWD\"\ntouch setup-ran\n",
    )
    .unwrap();
    sh_git(&root, &["add", ".gitignore", ".tuic"]);
    sh_git(&root, &["commit", "-q", "-m", "setup script"]);
    std::fs::create_dir_all(root.join("target/debug")).unwrap();
    std::fs::write(root.join("target/debug/artifact"), "built").unwrap();
    n.repos.add(root.to_str().unwrap(), &n.bus, 1).unwrap();
    let mut bus = n.bus.subscribe();

    let v = n.git.create(&req(&root, "feat/one")).unwrap();
    let wt = root.with_file_name("repo__wt").join("feat-one");
    assert_eq!(v["worktree_path"], wt.to_str().unwrap());
    assert_eq!(v["branch"], "feat/one");
    assert_eq!(v["workspace_id"], "feat/one");
    assert_eq!(v["created"], true);
    assert_eq!(v["warm_artifacts"]["warmed_directories"], 1, "{v}");
    assert_eq!(v["instructions"]["warm_artifacts"]["warmed_directories"], 1);
    assert_eq!(
        std::fs::read_to_string(wt.join("target/debug/artifact")).unwrap(),
        "built"
    );
    assert_eq!(v["setup_script"]["ok"], true, "{v}");
    assert!(wt.join("setup-ran").exists());
    let ev = bus.try_recv().unwrap();
    assert_eq!(ev.event.name(), "worktree-created");
    assert_eq!(ev.event.payload()["worktree_path"], wt.to_str().unwrap());
    // A retry answers the same worktree.
    let again = n.git.create(&req(&root, "feat/one")).unwrap();
    assert_eq!(again["created"], false);

    let l = n.git.list(root.to_str().unwrap()).unwrap();
    assert_eq!(l["main"]["kind"], "main");
    let f = &l["feat/one"];
    assert_eq!(f["kind"], "worktree");
    assert_eq!(f["warm_artifacts"]["warmed_directories"], 1);
    // setup-ran is untracked: the worktree is dirty.
    assert_eq!(f["lifecycle_status"]["dirty_files"], 1, "{f}");
    assert_eq!(f["lifecycle_status"]["removal_safety"], "requires_force");
    assert_eq!(f["lifecycle_status"]["commit_status"], "in_sync");

    // Dirty: refused without force; force needs a fingerprint; a stale one is refused.
    let e = n.git.remove(&rm(&root, "feat/one")).unwrap_err();
    assert_eq!(e.code(), "dirty", "{e}");
    assert!(wt.is_dir());
    let mut forced = rm(&root, "feat/one");
    forced.force = true;
    assert_eq!(
        n.git.remove(&forced).unwrap_err().code(),
        "fingerprint_required"
    );
    let lc = n.git.lifecycle(root.to_str().unwrap(), "feat/one").unwrap();
    let fp = lc["lifecycle_status"]["fingerprint"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(wt.join("more"), "x").unwrap();
    forced.expected_fingerprint = Some(fp);
    assert_eq!(
        n.git.remove(&forced).unwrap_err().code(),
        "stale_fingerprint"
    );
    assert!(wt.is_dir());
    // Locked: refused even forced, until override_lock.
    sh_git(
        &root,
        &["worktree", "lock", "--reason", "busy", wt.to_str().unwrap()],
    );
    let lc = n.git.lifecycle(root.to_str().unwrap(), "feat/one").unwrap();
    assert_eq!(lc["lifecycle_status"]["locked"], true);
    forced.expected_fingerprint = lc["lifecycle_status"]["fingerprint"]
        .as_str()
        .map(str::to_owned);
    let e = n.git.remove(&forced).unwrap_err();
    assert_eq!(e.code(), "locked");
    assert!(e.to_string().contains("busy"), "{e}");
    forced.override_lock = true;
    let done = n.git.remove(&forced).unwrap();
    assert_eq!(done["ok"], true, "{done}");
    assert!(!wt.exists());
    // force defaults delete_branch to false: the branch stays.
    assert!(done.get("branch_deleted").is_none());
    assert!(
        n.git
            .ok(
                &root,
                &["rev-parse", "--verify", "--quiet", "refs/heads/feat/one"]
            )
            .unwrap()
    );

    // A clean, merged worktree is removed and its branch deleted with an archive ref.
    n.git.create(&req(&root, "clean")).unwrap();
    let cw = root.with_file_name("repo__wt").join("clean");
    std::fs::remove_file(cw.join("setup-ran")).unwrap();
    let done = n.git.remove(&rm(&root, "clean")).unwrap();
    assert_eq!(done["branch_deleted"], true, "{done}");
    assert_eq!(done["branch_delete"]["archive_ref"], "refs/archive/clean");

    // An unmerged branch is kept with a warning after its worktree goes.
    n.git.create(&req(&root, "work")).unwrap();
    let ww = root.with_file_name("repo__wt").join("work");
    std::fs::remove_file(ww.join("setup-ran")).unwrap();
    commit(&ww, "w.txt", "w\n", "own work");
    let done = n.git.remove(&rm(&root, "work")).unwrap();
    assert_eq!(done["branch_deleted"], false);
    assert!(
        done["branch_delete_warning"]
            .as_str()
            .unwrap()
            .contains("was kept"),
        "{done}"
    );
    assert!(
        done["warnings"][0]
            .as_str()
            .unwrap()
            .contains("not in main")
    );

    // Stale-worktree recovery: a checkout deleted behind Git's back is pruned on create.
    n.git.create(&req(&root, "stale")).unwrap();
    let sw = root.with_file_name("repo__wt").join("stale");
    std::fs::remove_dir_all(&sw).unwrap();
    let mut again = req(&root, "stale");
    again.base = Some("main".into());
    let v = n.git.create(&again).unwrap();
    assert_eq!(v["created"], true);
    assert_eq!(v["branch_existed"], true);
    assert!(
        v["warnings"][0].as_str().unwrap().contains("was not used"),
        "{v}"
    );
    assert!(sw.join("base.txt").is_file());
}

#[test]
fn bad_input_is_named_and_creates_nothing() {
    let cfg = tempfile::tempdir().unwrap();
    let n = Bed::new(cfg.path());
    let (d, root) = repo();
    n.repos.add(root.to_str().unwrap(), &n.bus, 1).unwrap();
    let shell = d.path().join("shell");
    std::fs::create_dir(&shell).unwrap();
    n.repos.add(shell.to_str().unwrap(), &n.bus, 1).unwrap();
    let (_d2, other) = repo();
    let link = root.join("escape");
    std::os::unix::fs::symlink(&other, &link).unwrap();
    let cases = [
        (
            other.to_string_lossy().into_owned(),
            "unknown_repository",
            "not a registered repository",
        ),
        (
            format!("{}/../repo", root.display()),
            "invalid_path",
            "`..`",
        ),
        (
            "relative/repo".into(),
            "invalid_path",
            "not an absolute path",
        ),
        (
            link.to_string_lossy().into_owned(),
            "unknown_repository",
            "symlink",
        ),
        (
            shell.to_string_lossy().into_owned(),
            "not_git",
            "not a Git repository",
        ),
        (
            root.join("nope").to_string_lossy().into_owned(),
            "invalid_path",
            "No such file",
        ),
    ];
    for (path, code, says) in cases {
        let mut r = req(Path::new(&path), "x");
        r.repo = path.clone();
        let e = n.git.create(&r).unwrap_err();
        assert_eq!(e.code(), code, "{path}: {e}");
        assert!(e.to_string().contains(says), "{path}: {e}");
    }
    let mut r = req(&root, "x");
    r.base = Some("no-such-base".into());
    let e = n.git.create(&r).unwrap_err();
    assert_eq!(e.code(), "unknown_ref");
    assert!(e.to_string().contains("no-such-base"), "{e}");
    let mut r = req(&root, "bad..name");
    r.base = None;
    assert_eq!(n.git.create(&r).unwrap_err().code(), "invalid_branch");
    // Nothing was created: no worktree dir, no branch, no worktree registration.
    assert!(!root.with_file_name("repo__wt").exists());
    assert_eq!(worktree::entries(&n.git, &root).unwrap().len(), 1);
    assert_eq!(
        sh_git(&root, &["branch", "--format=%(refname:short)"]),
        "main"
    );
    // A symlinked `__wt` directory is refused before Git runs.
    std::os::unix::fs::symlink(d.path(), root.with_file_name("repo__wt")).unwrap();
    assert_eq!(
        n.git.create(&req(&root, "y")).unwrap_err().code(),
        "path_escape"
    );
    // Removing a worktree that does not exist names it.
    assert_eq!(
        n.git.remove(&rm(&root, "ghost")).unwrap_err().code(),
        "unknown_worktree"
    );
}

#[test]
fn removal_preserves_initialized_submodule_refs() {
    let cfg = tempfile::tempdir().unwrap();
    let n = Bed::new(cfg.path());
    let (d, root) = repo();
    let lib = d.path().join("lib");
    std::fs::create_dir(&lib).unwrap();
    sh_git(&lib, &["init", "-q", "-b", "main"]);
    commit(&lib, "lib.txt", "v1\n", "lib v1");
    sh_git(
        &root,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            lib.to_str().unwrap(),
            "lib",
        ],
    );
    sh_git(&root, &["commit", "-q", "-m", "add lib"]);
    n.repos.add(root.to_str().unwrap(), &n.bus, 1).unwrap();
    n.git.create(&req(&root, "sub")).unwrap();
    let wt = root.with_file_name("repo__wt").join("sub");
    sh_git(
        &wt,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "update",
            "-q",
            "--init",
        ],
    );
    // A submodule commit that exists only inside this worktree's checkout.
    let only_here = commit(&wt.join("lib"), "lib.txt", "v2\n", "lib v2 in the worktree");
    let lc = n.git.lifecycle(root.to_str().unwrap(), "sub").unwrap();
    assert_eq!(
        lc["lifecycle_status"]["removal_safety"], "requires_force",
        "{lc}"
    );
    let mut r = rm(&root, "sub");
    r.force = true;
    r.expected_fingerprint = lc["lifecycle_status"]["fingerprint"]
        .as_str()
        .map(str::to_owned);
    let v = n.git.remove(&r).unwrap();
    assert_eq!(
        v["preserved_submodules"][0]["commit"],
        only_here.as_str(),
        "{v}"
    );
    assert!(!wt.exists());
    assert_eq!(
        sh_git(&root, &["rev-parse", "refs/tuic/submodules/sub/lib"]),
        only_here
    );
    assert_eq!(
        sh_git(&root, &["cat-file", "-t", &only_here]),
        "commit",
        "the object is kept in the parent"
    );
}

#[test]
fn warm_copy_size_bound_stops_early() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("a/b")).unwrap();
    std::fs::write(d.path().join("a/b/f"), vec![0u8; 600]).unwrap();
    std::fs::write(d.path().join("a/g"), vec![0u8; 600]).unwrap();
    assert!(crate::git::create::tree_size_within(d.path(), 1200));
    assert!(!crate::git::create::tree_size_within(d.path(), 1199));
}

#[test]
fn concurrent_creates_of_one_branch_make_one_worktree() {
    let cfg = tempfile::tempdir().unwrap();
    let n = Bed::new(cfg.path());
    let (_d, root) = repo();
    n.repos.add(root.to_str().unwrap(), &n.bus, 1).unwrap();
    let results: Vec<serde_json::Value> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| n.git.create(&req(&root, "race")).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let created = results.iter().filter(|v| v["created"] == true).count();
    assert_eq!(created, 1, "{results:?}");
    assert!(
        results
            .iter()
            .all(|v| v["worktree_path"] == results[0]["worktree_path"])
    );
    assert_eq!(worktree::entries(&n.git, &root).unwrap().len(), 2);
}

/// A branch may track a symlink out of the repository where the parent checkout has an
/// ignored directory (`sub -> <outside>` vs `sub/cache/`): warming the new worktree must not
/// copy through it (issue 40, finding 2), while ordinary warming still works.
#[test]
fn warming_never_copies_through_a_tracked_symlink_out_of_the_worktree() {
    let cfg = tempfile::tempdir().unwrap();
    let n = Bed::new(cfg.path());
    let (_d, root) = repo();
    let out = tempfile::tempdir().unwrap();
    std::fs::write(root.join(".gitignore"), "cache/\n").unwrap();
    commit(&root, "sub/keep.txt", "k", "sub");
    sh_git(&root, &["add", ".gitignore"]);
    sh_git(&root, &["commit", "-q", "-m", "ignore"]);
    sh_git(&root, &["checkout", "-q", "-b", "evil"]);
    sh_git(&root, &["rm", "-r", "-q", "sub"]);
    std::os::unix::fs::symlink(out.path(), root.join("sub")).unwrap();
    sh_git(&root, &["add", "sub"]);
    sh_git(&root, &["commit", "-q", "-m", "sub is a link out"]);
    sh_git(&root, &["checkout", "-q", "main"]);
    std::fs::create_dir_all(root.join("sub/cache")).unwrap();
    std::fs::write(root.join("sub/cache/artifact"), "built").unwrap();
    std::fs::create_dir_all(root.join("cache")).unwrap();
    std::fs::write(root.join("cache/top"), "t").unwrap();
    n.repos.add(root.to_str().unwrap(), &n.bus, 1).unwrap();

    let v = n.git.create(&req(&root, "evil")).unwrap();
    let wt = root.with_file_name("repo__wt").join("evil");
    assert!(
        std::fs::symlink_metadata(wt.join("sub"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_dir(out.path()).unwrap().count(),
        0,
        "nothing written outside the worktree: {v}"
    );
    assert_eq!(v["warm_artifacts"]["skipped"], json!(["sub/cache"]), "{v}");
    // The directory that stays inside is still warmed.
    assert_eq!(v["warm_artifacts"]["warmed_directories"], 1, "{v}");
    assert_eq!(std::fs::read_to_string(wt.join("cache/top")).unwrap(), "t");
}
