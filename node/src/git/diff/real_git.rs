//! Change views on real repositories: the diff text equals `git diff`, renames followed,
//! uncommitted work apart from commits, binary and huge files summarised with bounded memory,
//! a branch deleted meanwhile and a removed worktree named clearly, unregistered paths refused.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

pub(crate) fn sh_git(dir: &Path, args: &[&str]) -> String {
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
            "-c",
            "core.quotepath=off",
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
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn commit_all(dir: &Path, msg: &str) -> String {
    sh_git(dir, &["add", "-A"]);
    sh_git(dir, &["commit", "-q", "-m", msg]);
    sh_git(dir, &["rev-parse", "HEAD"]).trim().to_owned()
}

/// `repo` on `main` with a few files, and a linked worktree `repo__wt/feat` on `feat`.
pub(crate) fn fixture() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    sh_git(&root, &["init", "-q", "-b", "main"]);
    let body: String = (1..=40)
        .map(|i| format!("line {i} of the file\n"))
        .collect();
    std::fs::write(root.join("a.txt"), &body).unwrap();
    std::fs::write(root.join("old_name.txt"), "keep me\nand me\nand me too\n").unwrap();
    std::fs::write(root.join("gone.txt"), "bye\n").unwrap();
    commit_all(&root, "base");
    let root = root.canonicalize().unwrap();
    let wt = d.path().join("repo__wt").join("feat");
    sh_git(
        &root,
        &["worktree", "add", "-q", "-b", "feat", wt.to_str().unwrap()],
    );
    let wt = wt.canonicalize().unwrap();
    (d, root, wt)
}

fn target(p: &Path) -> Target {
    Target {
        path: p.to_string_lossy().into_owned(),
        ..Default::default()
    }
}

#[test]
fn summary_and_file_diff_match_git() {
    let git = Git::new(crate::git::GIT_CONCURRENCY);
    let (_d, root, wt) = fixture();
    let roots = vec![root.clone()];
    let env = DiffEnv {
        git: &git,
        roots: &roots,
    };
    let mut a = std::fs::read_to_string(wt.join("a.txt")).unwrap();
    a = a
        .replace("line 3 of", "line three of")
        .replace("line 30 of the file\n", "");
    a.push_str("appended\n");
    std::fs::write(wt.join("a.txt"), &a).unwrap();
    std::fs::rename(wt.join("old_name.txt"), wt.join("new_name.txt")).unwrap();
    std::fs::remove_file(wt.join("gone.txt")).unwrap();
    std::fs::write(wt.join("fresh.txt"), "new\n").unwrap();
    commit_all(&wt, "agent work");
    // main moves on: the merge-base stays the fork point.
    std::fs::write(root.join("main_only.txt"), "m\n").unwrap();
    commit_all(&root, "main moves");
    // Uncommitted work, kept apart.
    std::fs::write(wt.join("fresh.txt"), "new\nmore\n").unwrap();
    std::fs::write(wt.join("scratch.txt"), "s\n").unwrap();

    let s = summary(env, &target(&wt), 0, None).unwrap();
    assert_eq!(s.branch.as_deref(), Some("feat"));
    assert_eq!(s.base, "main");
    assert_eq!(s.commits.len(), 1);
    assert_eq!(s.commits[0].subject, "agent work");
    let by = |p: &str| s.files.iter().find(|f| f.path == p).cloned().unwrap();
    assert_eq!(s.total_files, 4, "{:?}", s.files);
    assert_eq!(by("a.txt").status, "modified");
    assert_eq!((by("a.txt").added, by("a.txt").removed), (2, 2));
    assert_eq!(by("new_name.txt").status, "renamed");
    assert_eq!(by("new_name.txt").old_path.as_deref(), Some("old_name.txt"));
    assert_eq!(by("gone.txt").status, "deleted");
    assert_eq!(by("fresh.txt").status, "added");
    assert!(
        !s.files.iter().any(|f| f.path == "main_only.txt"),
        "main's own work is not the branch's"
    );
    let un: Vec<(&str, &str)> = s
        .uncommitted
        .iter()
        .map(|f| (f.path.as_str(), f.status))
        .collect();
    assert_eq!(
        un,
        vec![("fresh.txt", "modified"), ("scratch.txt", "untracked")]
    );

    // The file's diff text is exactly `git diff <merge-base> HEAD -- file`.
    let mb = sh_git(&wt, &["merge-base", "main", "HEAD"])
        .trim()
        .to_owned();
    let want = sh_git(&wt, &["diff", &mb, "HEAD", "--", "a.txt"]);
    let f = file(env, &target(&wt), "a.txt", FileOpts::default()).unwrap();
    assert_eq!(f.text, want);
    assert_eq!(f.status, "modified");
    assert!(f.summary.is_none());
    let changed = f
        .lines
        .iter()
        .find(|l| l.kind == "add" && l.text.contains("three"))
        .unwrap();
    assert_eq!(changed.new, Some(3));
    assert!(!changed.hl.is_empty(), "word highlight on the changed line");

    // Renames followed, by either name.
    let want = sh_git(
        &wt,
        &[
            "diff",
            "-M",
            &mb,
            "HEAD",
            "--",
            "old_name.txt",
            "new_name.txt",
        ],
    );
    for name in ["new_name.txt", "old_name.txt"] {
        let f = file(env, &target(&wt), name, FileOpts::default()).unwrap();
        assert_eq!(f.status, "renamed");
        assert_eq!(f.old_path.as_deref(), Some("old_name.txt"));
        assert_eq!(f.text, want);
    }

    // Uncommitted, separately.
    let want = sh_git(&wt, &["diff", "HEAD", "--", "fresh.txt"]);
    let f = file(
        env,
        &target(&wt),
        "fresh.txt",
        FileOpts {
            uncommitted: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(f.text, want);
    let f = file(
        env,
        &target(&wt),
        "scratch.txt",
        FileOpts {
            uncommitted: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(f.status, "untracked");
    assert!(f.text.contains("+s"), "{}", f.text);

    // Paged: two pages put together are the whole diff.
    let whole = file(env, &target(&wt), "a.txt", FileOpts::default()).unwrap();
    let p1 = file(
        env,
        &target(&wt),
        "a.txt",
        FileOpts {
            offset: 0,
            limit: Some(5),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(p1.lines.len(), 5);
    assert_eq!(p1.next_offset, Some(5));
    let p2 = file(
        env,
        &target(&wt),
        "a.txt",
        FileOpts {
            offset: 5,
            limit: Some(10_000),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(format!("{}{}", p1.text, p2.text), whole.text);
    assert_eq!(p2.next_offset, None);

    // The branch by name from the main checkout: same files, no uncommitted part.
    let s2 = summary(
        env,
        &Target {
            path: root.to_string_lossy().into_owned(),
            branch: Some("feat".into()),
            base: None,
        },
        0,
        Some(2),
    )
    .unwrap();
    assert_eq!(s2.total_files, 4);
    assert_eq!(s2.files.len(), 2);
    assert_eq!(s2.next_offset, Some(2));
    assert!(s2.uncommitted.is_empty());
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn binary_huge_deleted_branch_and_bad_input() {
    let git = Git::new(crate::git::GIT_CONCURRENCY);
    let (d, root, wt) = fixture();
    let roots = vec![root.clone()];
    let env = DiffEnv {
        git: &git,
        roots: &roots,
    };
    let bin: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(wt.join("blob.bin"), &bin).unwrap();
    // A text file over the huge bound (CI payloads stay ≤ 8 MiB; the path is the same for
    // 50 MB: only sizes and counts are read, never the contents).
    {
        let mut w = std::io::BufWriter::new(std::fs::File::create(wt.join("huge.txt")).unwrap());
        let line = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n";
        for _ in 0..(6 * 1024 * 1024 / line.len()) {
            w.write_all(line.as_bytes()).unwrap();
        }
    }
    let huge_len = std::fs::metadata(wt.join("huge.txt")).unwrap().len();
    commit_all(&wt, "binary and huge");

    let f = file(env, &target(&wt), "blob.bin", FileOpts::default()).unwrap();
    assert!(f.binary);
    assert_eq!(f.summary.as_deref(), Some("binary, 3000 bytes"));
    assert!(f.lines.is_empty());

    let before = vm_hwm_kib();
    let f = file(env, &target(&wt), "huge.txt", FileOpts::default()).unwrap();
    let grew_kib = vm_hwm_kib().saturating_sub(before);
    assert!(f.huge);
    assert_eq!(f.bytes, huge_len);
    assert!(f.text.is_empty() && f.lines.is_empty());
    let sum = f.summary.unwrap();
    assert!(sum.starts_with(&format!("huge, {huge_len} bytes")), "{sum}");
    assert!(
        grew_kib * 1024 < huge_len / 4,
        "peak memory grew {grew_kib} KiB for a {huge_len}-byte file"
    );

    // A branch deleted meanwhile: a clear error naming it.
    sh_git(&root, &["branch", "gone-branch"]);
    sh_git(&root, &["branch", "-D", "gone-branch"]);
    let e = summary(
        env,
        &Target {
            path: root.to_string_lossy().into_owned(),
            branch: Some("gone-branch".into()),
            base: None,
        },
        0,
        None,
    )
    .unwrap_err();
    assert_eq!(e.code(), "unknown_ref");
    assert!(e.to_string().contains("gone-branch does not exist"), "{e}");
    assert!(e.to_string().contains("deleted meanwhile"), "{e}");

    // An unknown base, an unregistered path, a relative file, a removed worktree.
    let e = summary(
        env,
        &Target {
            base: Some("nope".into()),
            ..target(&wt)
        },
        0,
        None,
    )
    .unwrap_err();
    assert_eq!(e.code(), "unknown_ref");
    let e = summary(
        DiffEnv {
            git: &git,
            roots: &[],
        },
        &target(&wt),
        0,
        None,
    )
    .unwrap_err();
    assert_eq!(e.code(), "unknown_repository");
    let e = file(env, &target(&wt), "../etc/passwd", FileOpts::default()).unwrap_err();
    assert_eq!(e.code(), "invalid_path");
    let e = file(env, &target(&wt), "/etc/passwd", FileOpts::default()).unwrap_err();
    assert_eq!(e.code(), "invalid_path");
    sh_git(
        &root,
        &["worktree", "remove", "--force", wt.to_str().unwrap()],
    );
    let e = summary(env, &target(&wt), 0, None).unwrap_err();
    assert_eq!(e.code(), "invalid_path");
    assert!(e.to_string().contains("does not exist"), "{e}");
    drop(d);
}

/// What the views remember is keyed by commit ids: a new commit, a moved base and new
/// uncommitted work all show on the next call, and a remembered file diff pages like a fresh one.
#[test]
fn remembered_views_follow_new_commits_and_fresh_uncommitted_work() {
    let git = Git::new(crate::git::GIT_CONCURRENCY);
    let (_d, root, wt) = fixture();
    let roots = vec![root.clone()];
    let env = DiffEnv {
        git: &git,
        roots: &roots,
    };
    std::fs::write(wt.join("a.txt"), "first\n").unwrap();
    let head1 = commit_all(&wt, "one");
    let s1 = summary(env, &target(&wt), 0, None).unwrap();
    assert_eq!(s1.commits.len(), 1);
    assert!(git.view_memo.range(&root, &s1.merge_base, &head1).is_some());
    let f1 = file(env, &target(&wt), "a.txt", FileOpts::default()).unwrap();
    assert!(
        git.view_memo
            .file(&root, &s1.merge_base, &head1, "a.txt")
            .is_some()
    );
    // Asked again: the same answer, and a page of it equals git's lines.
    let again = file(env, &target(&wt), "a.txt", FileOpts::default()).unwrap();
    assert_eq!(again.text, f1.text);
    let paged = file(
        env,
        &target(&wt),
        "a.txt",
        FileOpts {
            offset: 1,
            limit: Some(2),
            ..FileOpts::default()
        },
    )
    .unwrap();
    assert_eq!(paged.lines.len(), 2);
    assert_eq!(paged.next_offset, Some(3));
    let want: String = f1
        .text
        .lines()
        .skip(1)
        .take(2)
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(paged.text, want);

    // Uncommitted work is read afresh each time.
    std::fs::write(wt.join("scratch.txt"), "s\n").unwrap();
    let s2 = summary(env, &target(&wt), 0, None).unwrap();
    assert_eq!(s2.uncommitted.len(), 1);
    assert_eq!(s2.commits.len(), 1);

    // A new commit: a new head, so new answers.
    std::fs::write(wt.join("a.txt"), "second\n").unwrap();
    let head2 = commit_all(&wt, "two");
    let s3 = summary(env, &target(&wt), 0, None).unwrap();
    assert_eq!(s3.head, head2);
    assert_eq!(s3.commits.len(), 2);
    assert!(s3.uncommitted.is_empty());
    let f3 = file(env, &target(&wt), "a.txt", FileOpts::default()).unwrap();
    assert!(f3.text.contains("+second"), "{}", f3.text);

    // The base moves and the branch merges it: a new merge-base.
    std::fs::write(root.join("main_only.txt"), "m\n").unwrap();
    commit_all(&root, "main moves");
    sh_git(&wt, &["merge", "-q", "--no-edit", "main"]);
    let s4 = summary(env, &target(&wt), 0, None).unwrap();
    assert_ne!(s4.merge_base, s3.merge_base);
    assert!(
        !s4.files.iter().any(|f| f.path == "main_only.txt"),
        "{:?}",
        s4.files
    );
}
