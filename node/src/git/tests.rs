//! The git service on real repositories built in temp dirs: every proof kind positive and
//! negative, archived deletion and restore, worktree creation/removal gates, bad input, and
//! declared placement across a node restart.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::json;

use super::branch::{self, Targets};
use super::worktree::{self, CreateRequest, RemoveRequest};
use super::{Git, GitError, placement};
use crate::logs::LogRing;
use crate::paths::{LocationEnv, Paths};
use crate::state::{Node, RunOverrides};

fn sh_git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

fn commit(dir: &Path, file: &str, content: &str, msg: &str) -> String {
    let p = dir.join(file);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(p, content).unwrap();
    sh_git(dir, &["add", "--", file]);
    sh_git(dir, &["commit", "-q", "-m", msg]);
    sh_git(dir, &["rev-parse", "HEAD"])
}

/// A repository on `main` with one commit, in its own temp dir (so `<repo>__wt` is inside it).
fn repo() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    sh_git(&root, &["init", "-q", "-b", "main"]);
    commit(&root, "base.txt", "a\nb\nc\n", "base");
    let root = root.canonicalize().unwrap();
    (d, root)
}

fn classify(git: &Git, root: &Path, b: &str) -> branch::Integration {
    let tip = sh_git(root, &["rev-parse", &format!("refs/heads/{b}")]);
    branch::classify(git, root, b, &tip, &Targets::resolve(git, root), vec![])
}

#[test]
fn every_proof_kind_positive_and_negative() {
    let git = Git::default();
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
    let git = Git::default();
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
    let checkouts = |git: &Git| -> Vec<(String, Option<String>)> {
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

fn node(dir: &Path) -> Arc<Node> {
    std::fs::write(
        dir.join("config.json"),
        json!({"secret_store": "file"}).to_string(),
    )
    .unwrap();
    let paths = Paths::resolve(Some(dir), None, &LocationEnv::default()).unwrap();
    Node::open(
        "tuic-node",
        paths,
        RunOverrides::default(),
        LogRing::default(),
    )
    .unwrap()
}

fn req(root: &Path, branch: &str) -> CreateRequest {
    CreateRequest {
        repo: root.to_string_lossy().into_owned(),
        branch: Some(branch.into()),
        ..Default::default()
    }
}

fn rm(root: &Path, branch: &str) -> RemoveRequest {
    RemoveRequest {
        repo: root.to_string_lossy().into_owned(),
        branch: branch.into(),
        ..Default::default()
    }
}

#[test]
fn worktree_create_list_remove_with_safety_gates() {
    let cfg = tempfile::tempdir().unwrap();
    let n = node(cfg.path());
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

    let v = worktree::create(&n, &req(&root, "feat/one")).unwrap();
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
    let again = worktree::create(&n, &req(&root, "feat/one")).unwrap();
    assert_eq!(again["created"], false);

    let l = worktree::list(&n, root.to_str().unwrap()).unwrap();
    assert_eq!(l["main"]["kind"], "main");
    let f = &l["feat/one"];
    assert_eq!(f["kind"], "worktree");
    assert_eq!(f["warm_artifacts"]["warmed_directories"], 1);
    // setup-ran is untracked: the worktree is dirty.
    assert_eq!(f["lifecycle_status"]["dirty_files"], 1, "{f}");
    assert_eq!(f["lifecycle_status"]["removal_safety"], "requires_force");
    assert_eq!(f["lifecycle_status"]["commit_status"], "in_sync");

    // Dirty: refused without force; force needs a fingerprint; a stale one is refused.
    let e = worktree::remove(&n, &rm(&root, "feat/one")).unwrap_err();
    assert_eq!(e.code(), "dirty", "{e}");
    assert!(wt.is_dir());
    let mut forced = rm(&root, "feat/one");
    forced.force = true;
    assert_eq!(
        worktree::remove(&n, &forced).unwrap_err().code(),
        "fingerprint_required"
    );
    let lc = worktree::lifecycle(&n, root.to_str().unwrap(), "feat/one").unwrap();
    let fp = lc["lifecycle_status"]["fingerprint"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(wt.join("more"), "x").unwrap();
    forced.expected_fingerprint = Some(fp);
    assert_eq!(
        worktree::remove(&n, &forced).unwrap_err().code(),
        "stale_fingerprint"
    );
    assert!(wt.is_dir());
    // Locked: refused even forced, until override_lock.
    sh_git(
        &root,
        &["worktree", "lock", "--reason", "busy", wt.to_str().unwrap()],
    );
    let lc = worktree::lifecycle(&n, root.to_str().unwrap(), "feat/one").unwrap();
    assert_eq!(lc["lifecycle_status"]["locked"], true);
    forced.expected_fingerprint = lc["lifecycle_status"]["fingerprint"]
        .as_str()
        .map(str::to_owned);
    let e = worktree::remove(&n, &forced).unwrap_err();
    assert_eq!(e.code(), "locked");
    assert!(e.to_string().contains("busy"), "{e}");
    forced.override_lock = true;
    let done = worktree::remove(&n, &forced).unwrap();
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
    worktree::create(&n, &req(&root, "clean")).unwrap();
    let cw = root.with_file_name("repo__wt").join("clean");
    std::fs::remove_file(cw.join("setup-ran")).unwrap();
    let done = worktree::remove(&n, &rm(&root, "clean")).unwrap();
    assert_eq!(done["branch_deleted"], true, "{done}");
    assert_eq!(done["branch_delete"]["archive_ref"], "refs/archive/clean");

    // An unmerged branch is kept with a warning after its worktree goes.
    worktree::create(&n, &req(&root, "work")).unwrap();
    let ww = root.with_file_name("repo__wt").join("work");
    std::fs::remove_file(ww.join("setup-ran")).unwrap();
    commit(&ww, "w.txt", "w\n", "own work");
    let done = worktree::remove(&n, &rm(&root, "work")).unwrap();
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
    worktree::create(&n, &req(&root, "stale")).unwrap();
    let sw = root.with_file_name("repo__wt").join("stale");
    std::fs::remove_dir_all(&sw).unwrap();
    let mut again = req(&root, "stale");
    again.base = Some("main".into());
    let v = worktree::create(&n, &again).unwrap();
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
    let n = node(cfg.path());
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
        let e = worktree::create(&n, &r).unwrap_err();
        assert_eq!(e.code(), code, "{path}: {e}");
        assert!(e.to_string().contains(says), "{path}: {e}");
    }
    let mut r = req(&root, "x");
    r.base = Some("no-such-base".into());
    let e = worktree::create(&n, &r).unwrap_err();
    assert_eq!(e.code(), "unknown_ref");
    assert!(e.to_string().contains("no-such-base"), "{e}");
    let mut r = req(&root, "bad..name");
    r.base = None;
    assert_eq!(
        worktree::create(&n, &r).unwrap_err().code(),
        "invalid_branch"
    );
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
        worktree::create(&n, &req(&root, "y")).unwrap_err().code(),
        "path_escape"
    );
    // Removing a worktree that does not exist names it.
    assert_eq!(
        worktree::remove(&n, &rm(&root, "ghost"))
            .unwrap_err()
            .code(),
        "unknown_worktree"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_placement_is_validated_stored_and_reloaded() {
    let cfg = tempfile::tempdir().unwrap();
    let (_d, root) = repo();
    let (_d2, other) = repo();
    {
        let n = node(cfg.path());
        n.repos.add(root.to_str().unwrap(), &n.bus, 1).unwrap();
        n.repos.add(other.to_str().unwrap(), &n.bus, 1).unwrap();
        worktree::create(&n, &req(&root, "feat")).unwrap();
        worktree::create(&n, &req(&other, "foreign")).unwrap();
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
        let decl =
            |p: &Path| placement::declare(&n, &s.tuic_session, &s.id, &s.cwd, p.to_str().unwrap());
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
        placement::load(&n);
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
        worktree::remove(&n, &forced).unwrap();
        assert!(n.sessions.placement(&s.tuic_session).is_none());
    };
}

#[test]
fn orphan_cleanup_dialog_opens_rechecks_and_answers() {
    let cfg = tempfile::tempdir().unwrap();
    let n = node(cfg.path());
    let (_d, root) = repo();
    n.repos.add(root.to_str().unwrap(), &n.bus, 1).unwrap();
    let rs = root.to_str().unwrap();
    let e = super::orphans::answer(&n, rs, "remove").unwrap_err();
    assert_eq!(e.code(), "no_open_dialog");
    worktree::create(&n, &req(&root, "kept")).unwrap();
    worktree::create(&n, &req(&root, "lost")).unwrap();
    let lost = root.with_file_name("repo__wt").join("lost");
    // A detached checkout is an orphan; a branch checkout is not.
    sh_git(&lost, &["checkout", "-q", "--detach"]);
    let mut bus = n.bus.subscribe();
    assert_eq!(
        super::orphans::scan(&n, rs).unwrap(),
        vec![lost.to_string_lossy().into_owned()]
    );
    assert_eq!(
        bus.try_recv().unwrap().event.name(),
        "orphan-cleanup-requested"
    );
    // keep closes the dialog.
    let v = super::orphans::answer(&n, rs, "keep").unwrap();
    assert_eq!(v["decision"], "keep");
    assert_eq!(
        bus.try_recv().unwrap().event.name(),
        "orphan-cleanup-resolved"
    );
    assert_eq!(
        super::orphans::answer(&n, rs, "keep").unwrap_err().code(),
        "no_open_dialog"
    );
    // Reopened; a change inside makes the remove answer unsafe, and nothing goes.
    super::orphans::scan(&n, rs).unwrap();
    std::fs::write(lost.join("wip"), "x").unwrap();
    let e = super::orphans::answer(&n, rs, "remove").unwrap_err();
    assert_eq!(e.code(), "unsafe_cleanup");
    assert!(e.to_string().contains("changes"), "{e}");
    assert!(lost.is_dir());
    // Clean again: removed; the branch worktree stays.
    std::fs::remove_file(lost.join("wip")).unwrap();
    let v = super::orphans::answer(&n, rs, "remove").unwrap();
    assert_eq!(v["removed"][0], lost.to_str().unwrap());
    assert!(!lost.exists());
    assert!(root.with_file_name("repo__wt").join("kept").is_dir());
    assert_eq!(
        super::orphans::answer(&n, rs, "remove").unwrap_err().code(),
        "no_open_dialog"
    );
}

#[test]
fn removal_preserves_initialized_submodule_refs() {
    let cfg = tempfile::tempdir().unwrap();
    let n = node(cfg.path());
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
    worktree::create(&n, &req(&root, "sub")).unwrap();
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
    let lc = worktree::lifecycle(&n, root.to_str().unwrap(), "sub").unwrap();
    assert_eq!(
        lc["lifecycle_status"]["removal_safety"], "requires_force",
        "{lc}"
    );
    let mut r = rm(&root, "sub");
    r.force = true;
    r.expected_fingerprint = lc["lifecycle_status"]["fingerprint"]
        .as_str()
        .map(str::to_owned);
    let v = worktree::remove(&n, &r).unwrap();
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
    assert!(super::create::tree_size_within(d.path(), 1200));
    assert!(!super::create::tree_size_within(d.path(), 1199));
}

#[test]
fn a_linked_worktree_is_attributed_to_its_repository_without_git() {
    let cfg = tempfile::tempdir().unwrap();
    let n = node(cfg.path());
    let (d, root) = repo();
    n.repos.add(root.to_str().unwrap(), &n.bus, 1).unwrap();
    worktree::create(&n, &req(&root, "attr")).unwrap();
    let wt = root.with_file_name("repo__wt").join("attr");
    std::fs::create_dir_all(wt.join("deep/er")).unwrap();
    assert_eq!(
        super::main_checkout_of_worktree(&wt.join("deep/er")).as_deref(),
        Some(root.as_path())
    );
    assert_eq!(
        super::main_checkout_of_worktree(&root),
        None,
        "a main checkout"
    );
    assert_eq!(
        super::main_checkout_of_worktree(d.path()),
        None,
        "outside Git"
    );
    // Progress from a terminal in the worktree is the repository's.
    assert_eq!(
        crate::progress::project_of(&n, wt.join("deep").to_str().unwrap()).as_deref(),
        root.to_str()
    );
}

#[test]
fn concurrent_creates_of_one_branch_make_one_worktree() {
    let cfg = tempfile::tempdir().unwrap();
    let n = node(cfg.path());
    let (_d, root) = repo();
    n.repos.add(root.to_str().unwrap(), &n.bus, 1).unwrap();
    let results: Vec<serde_json::Value> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| worktree::create(&n, &req(&root, "race")).unwrap()))
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

#[test]
fn an_unknown_verdict_never_authorizes_deletion() {
    let git = Git::default();
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

/// A branch may track a symlink out of the repository where the parent checkout has an
/// ignored directory (`sub -> <outside>` vs `sub/cache/`): warming the new worktree must not
/// copy through it (issue 40, finding 2), while ordinary warming still works.
#[test]
fn warming_never_copies_through_a_tracked_symlink_out_of_the_worktree() {
    let cfg = tempfile::tempdir().unwrap();
    let n = node(cfg.path());
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

    let v = worktree::create(&n, &req(&root, "evil")).unwrap();
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
