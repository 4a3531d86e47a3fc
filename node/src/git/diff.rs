//! Change views (issue 43): what a worktree or branch changed against its base, and one
//! file's unified diff.
//!
//! The base is the merge-base with the default branch (or a named base). Commits and
//! uncommitted work are answered separately: `files` are the committed changes
//! `merge-base..HEAD`, `uncommitted` the working tree against `HEAD` (tracked changes and
//! untracked files). A file diff follows renames, summarises binary files (`binary, N bytes`)
//! and files over [`HUGE_BYTES`] (counts only: the diff is never produced, so a 50 MB file
//! costs no memory here), carries word-level highlights for paired `-`/`+` lines, and is paged
//! by line. Every answer is bounded ([`MAX_FILES_PAGE`], [`MAX_LINES_PAGE`], [`MAX_COMMITS`]).
//!
//! It takes a [`DiffEnv`] (the bounded git runner and the registered roots), never the node.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{GitError, Runner as Git};

/// A file whose either side is bigger than this is summarised, not diffed.
pub(crate) const HUGE_BYTES: u64 = 4 * 1024 * 1024;
/// Files per summary page at most (default [`DEFAULT_FILES_PAGE`]).
pub(crate) const MAX_FILES_PAGE: usize = 5000;
/// Default files per summary page.
pub(crate) const DEFAULT_FILES_PAGE: usize = 1000;
/// Diff lines per page at most (default [`DEFAULT_LINES_PAGE`]).
pub(crate) const MAX_LINES_PAGE: usize = 20_000;
/// Default diff lines per page.
pub(crate) const DEFAULT_LINES_PAGE: usize = 5000;
/// How long a change view reuses the default branch it found for a repository (see
/// `Runner::view_defaults`): long enough for a phone's polling, short enough that a changed
/// `origin/HEAD` or `init.defaultBranch` shows within seconds.
pub(crate) const VIEW_DEFAULT_TTL: std::time::Duration = std::time::Duration::from_secs(10);
/// Repositories whose default branch the views remember at most (then forgotten at once).
const VIEW_DEFAULTS_MAX: usize = 256;
/// Commits listed at most in a summary.
pub(crate) const MAX_COMMITS: usize = 500;

/// What the change views use: the git runner and the registered repository roots.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DiffEnv<'a> {
    /// The bounded `git` runner.
    pub(crate) git: &'a Git,
    /// Registered repository roots (canonical).
    pub(crate) roots: &'a [PathBuf],
}

/// Which checkout or branch to look at.
#[derive(Debug, Clone, Default)]
pub(crate) struct Target {
    /// A worktree or repository root (absolute).
    pub(crate) path: String,
    /// A local branch of that repository to look at instead of the checkout's `HEAD`.
    pub(crate) branch: Option<String>,
    /// The base to compare against (default: the default branch; the merge-base is used).
    pub(crate) base: Option<String>,
}

/// A resolved target.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// Where git runs (the worktree, or the main checkout for a branch).
    pub(crate) dir: PathBuf,
    /// The repository's main checkout.
    pub(crate) root: PathBuf,
    /// The head commit.
    pub(crate) head: String,
    /// The branch looked at (the checkout's branch, or the named one).
    pub(crate) branch: Option<String>,
    /// The base ref name.
    pub(crate) base_ref: String,
    /// The merge-base of base and head.
    pub(crate) merge_base: String,
    /// Whether uncommitted changes apply (a checkout, not a named branch).
    pub(crate) checkout: bool,
}

/// One changed file.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct FileChange {
    /// Path (new side).
    pub(crate) path: String,
    /// The old path of a rename or copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) old_path: Option<String>,
    /// `added`, `modified`, `deleted`, `renamed`, `copied`, `type_changed`, `untracked`.
    pub(crate) status: &'static str,
    /// Added lines (0 for binary).
    pub(crate) added: u64,
    /// Removed lines (0 for binary).
    pub(crate) removed: u64,
    /// Git treats the file as binary.
    pub(crate) binary: bool,
    #[serde(skip)]
    old_blob: String,
    #[serde(skip)]
    new_blob: String,
}

/// One commit of the range.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Commit {
    /// Full sha.
    pub(crate) sha: String,
    /// Subject line.
    pub(crate) subject: String,
    /// Author name.
    pub(crate) author: String,
    /// Author time, unix seconds.
    pub(crate) time: i64,
}

/// `diff_summary`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    /// The checkout (or main checkout for a branch).
    pub(crate) path: String,
    /// The repository's main checkout.
    pub(crate) repo: String,
    /// The branch looked at.
    pub(crate) branch: Option<String>,
    /// Head commit.
    pub(crate) head: String,
    /// Base ref.
    pub(crate) base: String,
    /// Merge-base commit.
    pub(crate) merge_base: String,
    /// Commits `merge_base..head`, newest first (at most [`MAX_COMMITS`]).
    pub(crate) commits: Vec<Commit>,
    /// More commits than listed.
    pub(crate) commits_truncated: bool,
    /// Committed changes, this page.
    pub(crate) files: Vec<FileChange>,
    /// All committed changed files.
    pub(crate) total_files: usize,
    /// Offset of the next page, when there is one.
    pub(crate) next_offset: Option<usize>,
    /// Totals over every committed file.
    pub(crate) added: u64,
    /// Totals over every committed file.
    pub(crate) removed: u64,
    /// Working tree against `HEAD` (tracked and untracked; none for a named branch).
    pub(crate) uncommitted: Vec<FileChange>,
}

/// One line of a parsed diff.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Line {
    /// `meta` (headers), `hunk` (`@@`), `ctx`, `add`, `del`, `note` (`\ No newline`).
    pub(crate) kind: &'static str,
    /// The text without its trailing newline.
    pub(crate) text: String,
    /// Old-side line number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) old: Option<u64>,
    /// New-side line number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) new: Option<u64>,
    /// Word-level highlights: `[start, end)` in characters of `text` (after the `+`/`-`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) hl: Vec<[usize; 2]>,
}

/// `diff_file`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FileDiff {
    /// The file (new side).
    pub(crate) file: String,
    /// The old path of a rename.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) old_path: Option<String>,
    /// Change status (see [`FileChange::status`]), `unchanged` when the file has none.
    pub(crate) status: &'static str,
    /// Whether this is the uncommitted view.
    pub(crate) uncommitted: bool,
    /// Head commit.
    pub(crate) head: String,
    /// Merge-base commit (the compared base).
    pub(crate) merge_base: String,
    /// Added lines.
    pub(crate) added: u64,
    /// Removed lines.
    pub(crate) removed: u64,
    /// `binary, N bytes` or `huge, N bytes, +A -R`: the diff was not produced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) summary: Option<String>,
    /// Binary file.
    pub(crate) binary: bool,
    /// Bigger than [`HUGE_BYTES`].
    pub(crate) huge: bool,
    /// Size of the larger side, bytes.
    pub(crate) bytes: u64,
    /// This page's diff text exactly as `git diff` prints it (the whole diff when it fits).
    pub(crate) text: String,
    /// This page's lines, parsed.
    pub(crate) lines: Vec<Line>,
    /// Lines in the whole diff.
    pub(crate) total_lines: usize,
    /// Offset of the next page.
    pub(crate) next_offset: Option<usize>,
}

fn status_name(c: u8) -> &'static str {
    match c {
        b'A' => "added",
        b'D' => "deleted",
        b'R' => "renamed",
        b'C' => "copied",
        b'T' => "type_changed",
        b'U' => "unmerged",
        _ => "modified",
    }
}

/// Parses `git diff -z --raw --numstat` output: raw records first, then numstat records.
fn parse_raw_numstat(out: &[u8]) -> Vec<FileChange> {
    let mut fields = out.split(|b| *b == 0).peekable();
    let mut v: Vec<FileChange> = Vec::new();
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    // Raw records: ":old new oldsha newsha STATUS\0path\0[path2\0]"
    while let Some(f) = fields.peek() {
        if !f.starts_with(b":") {
            break;
        }
        let f = fields.next().unwrap_or_default();
        let meta = String::from_utf8_lossy(&f[1..]).into_owned();
        let parts: Vec<&str> = meta.split(' ').collect();
        let st = parts.get(4).and_then(|x| x.bytes().next()).unwrap_or(b'M');
        let a = fields.next().map(s).unwrap_or_default();
        let (path, old_path) = if st == b'R' || st == b'C' {
            (fields.next().map(s).unwrap_or_default(), Some(a))
        } else {
            (a, None)
        };
        v.push(FileChange {
            path,
            old_path,
            status: status_name(st),
            added: 0,
            removed: 0,
            binary: false,
            old_blob: parts.get(2).map(|x| (*x).to_owned()).unwrap_or_default(),
            new_blob: parts.get(3).map(|x| (*x).to_owned()).unwrap_or_default(),
        });
    }
    // Numstat records, same order: "A\tR\tpath\0" or "A\tR\t\0old\0new\0" for renames.
    let mut i = 0;
    while let Some(f) = fields.next() {
        if f.is_empty() {
            continue;
        }
        let t = String::from_utf8_lossy(f);
        let mut it = t.splitn(3, '\t');
        let (a, r, p) = (
            it.next().unwrap_or(""),
            it.next().unwrap_or(""),
            it.next().unwrap_or(""),
        );
        if p.is_empty() {
            fields.next();
            fields.next();
        }
        if let Some(c) = v.get_mut(i) {
            c.binary = a == "-";
            c.added = a.parse().unwrap_or(0);
            c.removed = r.parse().unwrap_or(0);
        }
        i += 1;
    }
    v
}

fn run_bytes(git: &Git, dir: &Path, args: &[&str]) -> Result<Vec<u8>, GitError> {
    let o = git.run(dir, args)?;
    if o.status.success() {
        Ok(o.stdout)
    } else {
        Err(super::failed(args, &o))
    }
}

fn changes(
    git: &Git,
    dir: &Path,
    range: &[&str],
    file: &[&str],
) -> Result<Vec<FileChange>, GitError> {
    let mut args = vec![
        "diff",
        "--no-color",
        "--no-ext-diff",
        "-z",
        "--raw",
        "--numstat",
        "-M",
        "--abbrev=40",
    ];
    args.extend_from_slice(range);
    args.push("--");
    args.extend_from_slice(file);
    Ok(parse_raw_numstat(&run_bytes(git, dir, &args)?))
}

fn untracked(git: &Git, dir: &Path) -> Result<Vec<String>, GitError> {
    let out = run_bytes(
        git,
        dir,
        &["ls-files", "--others", "--exclude-standard", "-z"],
    )?;
    Ok(out
        .split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect())
}

/// A scoped reader's answer; a panic in it is an error, not a crash of the caller.
fn joined<T>(h: std::thread::ScopedJoinHandle<'_, Result<T, GitError>>) -> Result<T, GitError> {
    h.join()
        .unwrap_or_else(|_| Err(GitError::Io("a git reader panicked".into())))
}

/// The committed half of a summary: `merge_base..head`'s changed files and commits (two
/// reads side by side).
fn committed_range(git: &Git, r: &Resolved) -> Result<memo::Committed, GitError> {
    let range = format!("{}..{}", r.merge_base, r.head);
    let n = (MAX_COMMITS + 1).to_string();
    let (files, log) = std::thread::scope(|s| {
        let log = s.spawn(|| {
            run_bytes(
                git,
                &r.dir,
                &[
                    "log",
                    "-z",
                    "--no-color",
                    "--format=%H%x1f%s%x1f%an%x1f%at",
                    "-n",
                    &n,
                    &range,
                ],
            )
        });
        let files = changes(git, &r.dir, &[&r.merge_base, &r.head], &[]);
        (files, joined(log))
    });
    let mut commits: Vec<Commit> = log?
        .split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| {
            let t = String::from_utf8_lossy(f);
            let mut it = t.trim_start_matches('\n').split('\x1f');
            Commit {
                sha: it.next().unwrap_or("").to_owned(),
                subject: it.next().unwrap_or("").to_owned(),
                author: it.next().unwrap_or("").to_owned(),
                time: it.next().and_then(|x| x.parse().ok()).unwrap_or(0),
            }
        })
        .collect();
    let commits_truncated = commits.len() > MAX_COMMITS;
    commits.truncate(MAX_COMMITS);
    Ok(memo::Committed {
        files: files?,
        commits,
        commits_truncated,
    })
}

/// `diff_summary`: committed changes against the merge-base (paged), the commits, and the
/// uncommitted changes of a checkout.
pub(crate) fn summary(
    env: DiffEnv<'_>,
    t: &Target,
    offset: usize,
    limit: Option<usize>,
) -> Result<Summary, GitError> {
    let git = env.git;
    let r = resolve(env, t)?;
    let remembered = git.view_memo.range(&r.root, &r.merge_base, &r.head);
    // The reads are independent: run side by side (each in a runner slot), so the answer
    // costs about the slowest of them rather than their sum. The committed half is fixed by
    // the two commit ids, so it is read once ([`memo`]); uncommitted work every time.
    let (committed, tracked, untracked_files) = std::thread::scope(|s| {
        let committed = remembered
            .is_none()
            .then(|| s.spawn(|| committed_range(git, &r)));
        let untracked_files = r.checkout.then(|| s.spawn(|| untracked(git, &r.dir)));
        let tracked = r.checkout.then(|| changes(git, &r.dir, &["HEAD"], &[]));
        (committed.map(joined), tracked, untracked_files.map(joined))
    });
    let committed = match remembered {
        Some(c) => c,
        None => {
            // Read above whenever it was not remembered.
            let c = committed.unwrap_or_else(|| committed_range(git, &r));
            let c = std::sync::Arc::new(c?);
            git.view_memo
                .put_range(&r.root, &r.merge_base, &r.head, c.clone());
            c
        }
    };
    let total_files = committed.files.len();
    let added = committed.files.iter().map(|f| f.added).sum();
    let removed = committed.files.iter().map(|f| f.removed).sum();
    let limit = limit.unwrap_or(DEFAULT_FILES_PAGE).clamp(1, MAX_FILES_PAGE);
    let end = offset.saturating_add(limit).min(total_files);
    let page: Vec<FileChange> = if offset < total_files {
        committed.files[offset..end].to_vec()
    } else {
        vec![]
    };
    let commits = committed.commits.clone();
    let commits_truncated = committed.commits_truncated;
    let mut uncommitted = Vec::new();
    if let (Some(tracked), Some(untracked_files)) = (tracked, untracked_files) {
        uncommitted = tracked?;
        for p in untracked_files? {
            // Sized before read: a huge untracked file is listed without its counts, never
            // read into memory.
            let f = r.dir.join(&p);
            let lines = std::fs::symlink_metadata(&f)
                .ok()
                .filter(|m| m.is_file() && m.len() <= HUGE_BYTES)
                .and_then(|_| std::fs::read(&f).ok())
                .map(|b| (b.contains(&0), bytecount_lines(&b)));
            uncommitted.push(FileChange {
                path: p,
                old_path: None,
                status: "untracked",
                added: lines.map(|l| l.1).unwrap_or(0),
                removed: 0,
                binary: lines.is_some_and(|l| l.0),
                old_blob: String::new(),
                new_blob: String::new(),
            });
        }
        uncommitted.truncate(MAX_FILES_PAGE);
    }
    Ok(Summary {
        path: r.dir.to_string_lossy().into_owned(),
        repo: r.root.to_string_lossy().into_owned(),
        branch: r.branch,
        head: r.head,
        base: r.base_ref,
        merge_base: r.merge_base,
        commits,
        commits_truncated,
        files: page,
        total_files,
        next_offset: (end < total_files).then_some(end),
        added,
        removed,
        uncommitted,
    })
}

fn bytecount_lines(b: &[u8]) -> u64 {
    let n = b.iter().filter(|c| **c == b'\n').count() as u64;
    if b.last().is_some_and(|c| *c != b'\n') {
        n + 1
    } else {
        n
    }
}

/// Options of [`file`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FileOpts {
    /// The working tree against `HEAD` instead of the committed range.
    pub(crate) uncommitted: bool,
    /// First line of the page.
    pub(crate) offset: usize,
    /// Lines per page.
    pub(crate) limit: Option<usize>,
}

const NULL_BLOB: &str = "0000000000000000000000000000000000000000";

/// `diff_file`: one file's unified diff (renames followed), summarised when binary or huge.
pub(crate) fn file(
    env: DiffEnv<'_>,
    t: &Target,
    name: &str,
    o: FileOpts,
) -> Result<FileDiff, GitError> {
    let git = env.git;
    if name.is_empty() || name.contains('\0') || name.starts_with('/') {
        return Err(GitError::InvalidPath(
            "file must be a path relative to the repository root".into(),
        ));
    }
    if Path::new(name)
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(GitError::InvalidPath(format!(
            "file {name} contains a `..` component"
        )));
    }
    let r = resolve(env, t)?;
    if o.uncommitted && !r.checkout {
        return Err(GitError::InvalidPath(
            "uncommitted changes exist only for a checkout, not a named branch".into(),
        ));
    }
    if o.uncommitted {
        return Ok(page(&whole_file(git, &r, name, true)?, o));
    }
    // A committed file diff is fixed by the two commit ids: computed once ([`memo`]).
    let whole = match git.view_memo.file(&r.root, &r.merge_base, &r.head, name) {
        Some(d) => d,
        None => {
            let d = std::sync::Arc::new(whole_file(git, &r, name, false)?);
            git.view_memo
                .put_file(&r.root, &r.merge_base, &r.head, name, d.clone());
            d
        }
    };
    Ok(page(&whole, o))
}

/// One file's whole diff (every line; [`page`] cuts the asked page), summarised when binary
/// or huge.
fn whole_file(
    git: &Git,
    r: &Resolved,
    name: &str,
    uncommitted: bool,
) -> Result<FileDiff, GitError> {
    let o = FileOpts {
        uncommitted,
        ..FileOpts::default()
    };
    let range: Vec<&str> = if o.uncommitted {
        vec!["HEAD"]
    } else {
        vec![&r.merge_base, &r.head]
    };
    // The file alone first; an add or delete may be half of a rename, so then look at all.
    let mut found = changes(git, &r.dir, &range, &[name])?
        .into_iter()
        .find(|c| c.path == name);
    if found
        .as_ref()
        .is_none_or(|c| c.status == "added" || c.status == "deleted")
        && let Some(c) = changes(git, &r.dir, &range, &[])?
            .into_iter()
            .find(|c| c.path == name || c.old_path.as_deref() == Some(name))
    {
        found = Some(c);
    }
    let mut untracked_file = false;
    if found.is_none() && o.uncommitted && untracked(git, &r.dir)?.iter().any(|p| p == name) {
        untracked_file = true;
        found = Some(FileChange {
            path: name.to_owned(),
            old_path: None,
            status: "untracked",
            added: 0,
            removed: 0,
            binary: false,
            old_blob: NULL_BLOB.into(),
            new_blob: String::new(),
        });
    }
    let mut out = FileDiff {
        file: name.to_owned(),
        old_path: None,
        status: "unchanged",
        uncommitted: o.uncommitted,
        head: r.head.clone(),
        merge_base: r.merge_base.clone(),
        added: 0,
        removed: 0,
        summary: None,
        binary: false,
        huge: false,
        bytes: 0,
        text: String::new(),
        lines: vec![],
        total_lines: 0,
        next_offset: None,
    };
    let Some(c) = found else {
        return Ok(out);
    };
    out.file = c.path.clone();
    out.old_path = c.old_path.clone();
    out.status = c.status;
    out.added = c.added;
    out.removed = c.removed;
    // Sizes without reading contents: blobs through cat-file (both sides at once), the
    // working tree's side by stat.
    let size = |blob: &String, is_new: bool| -> Option<u64> {
        if blob == NULL_BLOB || blob.is_empty() {
            return (o.uncommitted && is_new)
                .then(|| std::fs::metadata(r.dir.join(&c.path)).ok().map(|m| m.len()))
                .flatten();
        }
        git.out(&r.dir, &["cat-file", "-s", blob])
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
    };
    let sizes: Vec<u64> = std::thread::scope(|s| {
        let old = s.spawn(|| size(&c.old_blob, false));
        let new = size(&c.new_blob, true);
        [old.join().ok().flatten(), new]
    })
    .into_iter()
    .flatten()
    .collect();
    out.bytes = sizes.iter().copied().max().unwrap_or(0);
    if out.bytes > HUGE_BYTES {
        out.huge = true;
        // Numstat of a huge file still costs git a diff: counts only when it is cheap enough.
        out.summary = Some(format!(
            "huge, {} bytes{}: the diff is not shown",
            out.bytes,
            if c.binary {
                String::new()
            } else {
                format!(", +{} -{}", c.added, c.removed)
            }
        ));
        out.binary = c.binary;
        return Ok(out);
    }
    let diff_args: Vec<String> = if untracked_file {
        vec![
            "diff".into(),
            "--no-color".into(),
            "--no-ext-diff".into(),
            "--no-index".into(),
            "--".into(),
            "/dev/null".into(),
            name.into(),
        ]
    } else {
        let mut a: Vec<String> = ["diff", "--no-color", "--no-ext-diff", "-M"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        a.extend(range.iter().map(|s| (*s).to_owned()));
        a.push("--".into());
        if let Some(op) = &c.old_path {
            a.push(op.clone());
        }
        a.push(c.path.clone());
        a
    };
    let refs: Vec<&str> = diff_args.iter().map(String::as_str).collect();
    let o2 = git.run(&r.dir, &refs)?;
    // `--no-index` exits 1 when the files differ.
    if !(o2.status.success() || (untracked_file && o2.status.code() == Some(1))) {
        return Err(super::failed(&refs, &o2));
    }
    let text = String::from_utf8_lossy(&o2.stdout).into_owned();
    if untracked_file {
        out.binary = text.contains("\nBinary files ");
        out.added = text
            .lines()
            .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
            .count() as u64;
    }
    if c.binary || out.binary || text.lines().any(|l| l.starts_with("Binary files ")) {
        out.binary = true;
        out.summary = Some(format!("binary, {} bytes", out.bytes));
        out.text = text;
        return Ok(out);
    }
    out.lines = parse_lines(&text);
    out.total_lines = out.lines.len();
    out.text = text;
    Ok(out)
}

/// The asked page of a whole file diff: the whole of it when it fits (text exactly as git
/// printed it), else the page's lines and their text.
fn page(d: &FileDiff, o: FileOpts) -> FileDiff {
    let n = d.lines.len();
    let limit = o
        .limit
        .unwrap_or(DEFAULT_LINES_PAGE)
        .clamp(1, MAX_LINES_PAGE);
    let end = o.offset.saturating_add(limit).min(n);
    if o.offset == 0 && end == n {
        return d.clone();
    }
    let mut out = FileDiff {
        file: d.file.clone(),
        old_path: d.old_path.clone(),
        status: d.status,
        uncommitted: d.uncommitted,
        head: d.head.clone(),
        merge_base: d.merge_base.clone(),
        added: d.added,
        removed: d.removed,
        summary: d.summary.clone(),
        binary: d.binary,
        huge: d.huge,
        bytes: d.bytes,
        text: String::new(),
        lines: vec![],
        total_lines: d.total_lines,
        next_offset: None,
    };
    if o.offset < n {
        out.lines = d.lines[o.offset..end].to_vec();
        for l in &out.lines {
            out.text.push_str(&l.text);
            out.text.push('\n');
        }
        out.next_offset = (end < n).then_some(end);
    }
    out
}

#[cfg(test)]
#[path = "diff/unit.rs"]
mod unit;

#[path = "diff/lines.rs"]
mod lines;
#[path = "diff/memo.rs"]
pub(crate) mod memo;
#[path = "diff/resolve.rs"]
mod resolve;
pub(crate) use lines::parse_lines;
pub(crate) use resolve::resolve;

#[cfg(test)]
#[path = "diff/real_git.rs"]
pub(crate) mod real_git;
