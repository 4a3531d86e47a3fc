//! `bench review-diff [COMMITS] [CALLS]`: the change views of issue 43 on a big repository.
//!
//! A repository of COMMITS commits (default 20,000, written with `git fast-import` by
//! [`crate::bench_worktrees::build_repo`]) plus a 2,000-line `big.rs`; a linked worktree on
//! `feat` (branched 20 commits behind `main`) whose one commit changes every fifth line of
//! `big.rs` (a 2,400-line diff) and 20 small files, with one uncommitted file. Then, CALLS
//! times each, interleaved: the node's `GET /repo/diff-summary` against bare
//! `git diff --stat main...HEAD`, and `GET /repo/diff-file` of `big.rs` against bare
//! `git diff main...HEAD -- big.rs`, all in the worktree; p50/p99 and the ratios. The file's
//! diff text is checked equal to git's once before timing.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;

use crate::bench_worktrees::{build_repo, pct};
use crate::{NodeProc, config_dir, enc, ipc};

/// Lines of the big file.
const BIG_LINES: usize = 2_000;

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
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn big(changed: bool) -> String {
    (1..=BIG_LINES)
        .map(|i| {
            if changed && i % 5 == 0 {
                format!("    let value_{i} = compute({i}, \"changed by the agent\");\n")
            } else {
                format!("    let value_{i} = compute({i}, \"original text of line\");\n")
            }
        })
        .collect()
}

/// `bench review-diff`.
pub async fn review_diff(commits: usize, calls: usize) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let t0 = Instant::now();
    let root = build_repo(work.path(), commits)?;
    std::fs::write(root.join("big.rs"), big(false))?;
    git(&root, &["add", "big.rs"])?;
    git(&root, &["commit", "-qm", "add big.rs"])?;
    let wt = work.path().join("wt");
    git(
        &root,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "feat",
            wt.to_str().context("utf-8")?,
        ],
    )?;
    for i in 0..20 {
        git(
            &root,
            &[
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                &format!("main moves {i}"),
            ],
        )?;
    }
    std::fs::write(wt.join("big.rs"), big(true))?;
    for i in 0..20 {
        std::fs::write(
            wt.join(format!("f{:03}.txt", i * 7)),
            format!("agent edit {i}\n"),
        )?;
    }
    git(
        &wt,
        &["commit", "-qam", "agent: rework big.rs and 20 files"],
    )?;
    std::fs::write(wt.join("scratch.txt"), "not committed\n")?;
    let wt = wt.canonicalize()?;
    println!(
        "review-diff commits={commits} calls={calls} big.rs={BIG_LINES} lines (repo built in {:.1} s)",
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
    let ws = wt.to_string_lossy().into_owned();
    let summary = format!("/repo/diff-summary?path={}", enc(&ws));
    let file = format!("/repo/diff-file?path={}&file=big.rs", enc(&ws));

    // Correctness once: the same files and the same diff text as git.
    let s = ipc(&node.socket, "GET", &summary, None).await?.json();
    if s["total_files"] != 21 || s["uncommitted"].as_array().map(Vec::len) != Some(1) {
        bail!("summary: {s}");
    }
    let bare_file = git(&wt, &["diff", "main...HEAD", "--", "big.rs"])?;
    let f = ipc(&node.socket, "GET", &file, None).await?.json();
    if f["text"].as_str() != Some(bare_file.as_str()) {
        bail!("diff-file text differs from git diff");
    }
    println!(
        "  big.rs diff: {} lines, {} bytes",
        f["total_lines"],
        bare_file.len()
    );

    let (mut ns, mut bs, mut nf, mut bf) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..calls {
        let t = Instant::now();
        let r = ipc(&node.socket, "GET", &summary, None).await?;
        ns.push(t.elapsed().as_secs_f64() * 1e3);
        if r.status != 200 {
            bail!("summary {}", r.status);
        }
        let t = Instant::now();
        git(&wt, &["diff", "--stat", "main...HEAD"])?;
        bs.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let r = ipc(&node.socket, "GET", &file, None).await?;
        nf.push(t.elapsed().as_secs_f64() * 1e3);
        if r.status != 200 {
            bail!("file {}", r.status);
        }
        let t = Instant::now();
        git(&wt, &["diff", "main...HEAD", "--", "big.rs"])?;
        bf.push(t.elapsed().as_secs_f64() * 1e3);
    }
    for (what, node_ms, bare_what, bare_ms) in [
        (
            "GET /repo/diff-summary",
            &mut ns,
            "git diff --stat main...HEAD",
            &mut bs,
        ),
        (
            "GET /repo/diff-file big.rs",
            &mut nf,
            "git diff main...HEAD -- big.rs",
            &mut bf,
        ),
    ] {
        let (n50, n99) = (pct(node_ms, 0.5), pct(node_ms, 0.99));
        let (b50, b99) = (pct(bare_ms, 0.5), pct(bare_ms, 0.99));
        println!("  {what}: p50 {n50:.1} ms  p99 {n99:.1} ms");
        println!("  bare {bare_what}: p50 {b50:.1} ms  p99 {b99:.1} ms");
        println!(
            "  ratio node/bare: p50 {:.2}x  p99 {:.2}x",
            n50 / b50.max(1e-9),
            n99 / b99.max(1e-9)
        );
    }
    Ok(())
}
