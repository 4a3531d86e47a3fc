//! Benchmarks of the git service (`bench worktree-list`, `bench branch-integrations`).
//!
//! `worktree-list [WORKTREES] [COMMITS] [CALLS]`: a repository of COMMITS commits (default
//! 20,000, written with `git fast-import`) with WORKTREES linked worktrees (default 50, made with
//! `POST /worktrees`; half carry an own commit, a few are dirty), then `GET /worktrees` (every
//! worktree with its lifecycle status) p50/p99 against the bare floor of the same run: `git
//! worktree list --porcelain` plus `git status` in every worktree, sequentially.
//!
//! `branch-integrations [BRANCHES] [COMMITS] [CALLS]`: BRANCHES local branches (default 200; a
//! quarter with own commits) and `GET /repo/branch-integrations` p50/p99 against `git
//! for-each-ref` plus `git merge-base --is-ancestor` per branch.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;

use crate::{NodeProc, config_dir, enc, ipc};

/// The `p` quantile of `v` (sorted here).
pub(crate) fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=b", "-c", "user.email=b@example.com"])
        .args(args)
        .output()?;
    if !o.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

/// A repository of `commits` commits on `main` over 200 files, written with `git fast-import`
/// (seconds for 20,000 commits), checked out.
pub fn build_repo(parent: &Path, commits: usize) -> anyhow::Result<PathBuf> {
    let root = parent.join("repo");
    std::fs::create_dir_all(&root)?;
    git(&root, &["init", "-q", "-b", "main"])?;
    let mut fi = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .context("git fast-import")?;
    {
        let mut w = std::io::BufWriter::new(fi.stdin.take().context("stdin")?);
        for i in 1..=commits {
            let msg = format!("commit {i}\n");
            let body = format!("line of commit {i}\n");
            writeln!(w, "commit refs/heads/main\nmark :{i}")?;
            writeln!(w, "committer b <b@example.com> {} +0000", 1_700_000_000 + i)?;
            write!(w, "data {}\n{msg}", msg.len())?;
            if i > 1 {
                writeln!(w, "from :{}", i - 1)?;
            }
            writeln!(w, "M 100644 inline f{:03}.txt", i % 200)?;
            write!(w, "data {}\n{body}\n", body.len())?;
        }
    }
    if !fi.wait()?.success() {
        bail!("fast-import failed");
    }
    git(&root, &["reset", "-q", "--hard", "main"])?;
    Ok(root.canonicalize()?)
}

/// `bench worktree-list`.
pub async fn worktree_list(worktrees: usize, commits: usize, calls: usize) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let t0 = Instant::now();
    let root = build_repo(work.path(), commits)?;
    println!(
        "worktree-list commits={commits} worktrees={worktrees} calls={calls} (repo built in {:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    let cfg = config_dir(json!({}));
    let node = NodeProc::start(
        "tuic-node",
        &["--config-dir", cfg.path().to_str().context("utf-8")?],
        &[],
    )?;
    let rs = root.to_string_lossy().into_owned();
    let r = ipc(&node.socket, "POST", "/repos", Some(json!({"path": rs}))).await?;
    if r.status != 200 {
        bail!("repo add {}", r.status);
    }
    let mut create = Vec::new();
    for i in 0..worktrees {
        let t = Instant::now();
        let r = ipc(
            &node.socket,
            "POST",
            "/worktrees",
            Some(json!({"base_repo": rs, "branch": format!("wt-{i}"), "base": format!("main~{}", i * 3)})),
        )
        .await?;
        create.push(t.elapsed().as_secs_f64() * 1e3);
        if r.status != 200 {
            bail!("create {i}: {}", String::from_utf8_lossy(&r.body));
        }
        let path = r.json()["worktree_path"]
            .as_str()
            .context("worktree_path")?
            .to_owned();
        let p = Path::new(&path);
        if i % 2 == 1 {
            std::fs::write(p.join("own.txt"), format!("own {i}\n"))?;
            git(p, &["add", "own.txt"])?;
            git(p, &["commit", "-q", "-m", &format!("own work {i}")])?;
        }
        if i % 10 == 0 {
            std::fs::write(p.join("scratch.txt"), "dirty")?;
        }
    }
    println!(
        "  POST /worktrees: p50 {:.1} ms  p99 {:.1} ms",
        pct(&mut create, 0.5),
        pct(&mut create, 0.99)
    );
    let list = format!("/worktrees?path={}", enc(&rs));
    let mut node_ms = Vec::new();
    let mut bare_ms = Vec::new();
    for _ in 0..calls {
        let t = Instant::now();
        let r = ipc(&node.socket, "GET", &list, None).await?;
        node_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let v = r.json();
        if r.status != 200 || v.as_object().map(|m| m.len()) != Some(worktrees + 1) {
            bail!("list: {} {v}", r.status);
        }
        let t = Instant::now();
        let porcelain = git(&root, &["worktree", "list", "--porcelain"])?;
        for line in porcelain.lines() {
            if let Some(p) = line.strip_prefix("worktree ") {
                git(Path::new(p), &["status", "--porcelain=v2"])?;
            }
        }
        bare_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (n50, n99) = (pct(&mut node_ms, 0.5), pct(&mut node_ms, 0.99));
    let (b50, b99) = (pct(&mut bare_ms, 0.5), pct(&mut bare_ms, 0.99));
    println!("  GET /worktrees (lifecycle_status each): p50 {n50:.1} ms  p99 {n99:.1} ms");
    println!("  bare git worktree list + git status each: p50 {b50:.1} ms  p99 {b99:.1} ms");
    println!(
        "  ratio node/bare: p50 {:.2}x  p99 {:.2}x",
        n50 / b50.max(1e-9),
        n99 / b99.max(1e-9)
    );
    Ok(())
}

/// `bench branch-integrations`.
pub async fn branch_integrations(
    branches: usize,
    commits: usize,
    calls: usize,
) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let root = build_repo(work.path(), commits)?;
    println!("branch-integrations branches={branches} commits={commits} calls={calls}");
    let mut own = Vec::new();
    for i in 0..branches {
        let b = format!("b-{i}");
        git(
            &root,
            &["branch", &b, &format!("main~{}", i % commits.max(1))],
        )?;
        if i % 4 == 3 {
            own.push((b.clone(), git(&root, &["rev-parse", &b])?));
        }
    }
    // A quarter get an own commit adding a file, all in one fast-import stream.
    let mut fi = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["fast-import", "--quiet", "--force"])
        .stdin(Stdio::piped())
        .spawn()?;
    {
        let mut w = std::io::BufWriter::new(fi.stdin.take().context("stdin")?);
        for (b, tip) in &own {
            let msg = format!("own work on {b}\n");
            let body = format!("own content of {b}\n");
            writeln!(w, "commit refs/heads/{b}")?;
            writeln!(w, "committer b <b@example.com> 1800000000 +0000")?;
            write!(w, "data {}\n{msg}", msg.len())?;
            writeln!(w, "from {tip}")?;
            writeln!(w, "M 100644 inline own-{b}.txt")?;
            write!(w, "data {}\n{body}\n", body.len())?;
        }
    }
    if !fi.wait()?.success() {
        bail!("fast-import of own commits failed");
    }
    let cfg = config_dir(json!({}));
    let node = NodeProc::start(
        "tuic-node",
        &["--config-dir", cfg.path().to_str().context("utf-8")?],
        &[],
    )?;
    let rs = root.to_string_lossy().into_owned();
    ipc(&node.socket, "POST", "/repos", Some(json!({"path": rs}))).await?;
    let route = format!("/repo/branch-integrations?path={}", enc(&rs));
    let mut node_ms = Vec::new();
    let mut bare_ms = Vec::new();
    for _ in 0..calls {
        let t = Instant::now();
        let r = ipc(&node.socket, "GET", &route, None).await?;
        node_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let v = r.json();
        if r.status != 200 || v.as_array().map(Vec::len) != Some(branches + 1) {
            bail!("integrations: {} {v}", r.status);
        }
        let t = Instant::now();
        let refs = git(
            &root,
            &["for-each-ref", "--format=%(objectname)", "refs/heads"],
        )?;
        for tip in refs.lines() {
            let _ = Command::new("git")
                .arg("-C")
                .arg(&root)
                .args(["merge-base", "--is-ancestor", tip, "main"])
                .output()?;
        }
        bare_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (n50, n99) = (pct(&mut node_ms, 0.5), pct(&mut node_ms, 0.99));
    let (b50, b99) = (pct(&mut bare_ms, 0.5), pct(&mut bare_ms, 0.99));
    println!("  GET /repo/branch-integrations: p50 {n50:.1} ms  p99 {n99:.1} ms");
    println!(
        "  bare for-each-ref + merge-base --is-ancestor each: p50 {b50:.1} ms  p99 {b99:.1} ms"
    );
    println!(
        "  ratio node/bare: p50 {:.2}x  p99 {:.2}x",
        n50 / b50.max(1e-9),
        n99 / b99.max(1e-9)
    );
    Ok(())
}
