//! Branch integration proofs and safe local branch deletion (spec "Branch Integration Proofs",
//! "Local Branch Delete").
//!
//! One classifier answers for `repo action=branch_integrations|branch_integration`, the
//! worktree lifecycle (`commit_status`) and `branch_delete`. Structural proofs, strongest
//! first: `ancestry` (the tip is in the default branch), `integration_ancestry` (in the
//! integration branch or the default branch's upstream), `patch_equivalence` (`git cherry`:
//! every own commit has an equivalent upstream; never with merge commits), `squash_message` (a
//! target commit lists every own subject and a virtual merge leaves the target tree unchanged),
//! `noop_merge` (`git merge-tree` merges cleanly to the target's own tree). The heuristic
//! `content_superset` (same-subject twin patches ignoring context and hunk coordinates, or every
//! added line present with its multiplicity in the same regular files at the target tip) needs
//! an archive ref at the exact tip before deletion. `github_pr` (a merged pull request whose
//! head is exactly the tip) is added by `query.rs` through the GitHub hook. A query changes no refs, index or working
//! files (virtual merges may write unreachable objects).

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

use super::{GitError, Runner};

/// How `github_pr` evidence is answered without the GitHub hook.
pub(crate) const GITHUB_PR_UNAVAILABLE: &str = "unavailable: no GitHub access";

/// Target commits scanned for squash messages and twin patches, newest first.
const TARGET_SCAN: usize = 500;

/// The branches a branch is proved against, resolved once per query.
#[derive(Debug, Clone, Default)]
pub(crate) struct Targets {
    /// The default branch and its tip.
    pub default: Option<(String, String)>,
    /// The integration branch (the main checkout's branch, when it is not the default).
    pub integration: Option<(String, String)>,
    /// The default branch's remote-tracking twin (`origin/<default>`), when it differs.
    pub upstream: Option<(String, String)>,
    /// The default branch's tree (a no-op merge leaves exactly this).
    pub default_tree: Option<String>,
    /// Every archive ref → the commit it holds, read once per query.
    pub archives: HashMap<String, String>,
}

/// The repository's default branch and its tip — one rule for every view (integration proofs,
/// worktree lifecycle, change views, landing): `origin/HEAD`'s branch, else
/// `init.defaultBranch`, else `main`, `master`, `trunk`, else the checked-out branch; each only
/// when it exists locally.
pub(crate) fn default_branch(git: &Runner, root: &Path) -> Option<(String, String)> {
    let local = |b: &str| {
        git.out(
            root,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{b}^{{commit}}"),
            ],
        )
        .ok()
        .filter(|s| !s.is_empty())
        .map(|t| (b.to_owned(), t))
    };
    git.out(
        root,
        &["symbolic-ref", "--quiet", "refs/remotes/origin/HEAD"],
    )
    .ok()
    .and_then(|r| r.strip_prefix("refs/remotes/origin/").map(str::to_owned))
    .and_then(|b| local(&b))
    .or_else(|| {
        git.out(root, &["config", "--get", "init.defaultBranch"])
            .ok()
            .and_then(|b| local(&b))
    })
    .or_else(|| ["main", "master", "trunk"].iter().find_map(|b| local(b)))
    .or_else(|| {
        git.out(root, &["symbolic-ref", "--quiet", "--short", "HEAD"])
            .ok()
            .and_then(|b| local(&b))
    })
}

impl Targets {
    /// Resolves the targets of the repository at `root`.
    pub(crate) fn resolve(git: &Runner, root: &Path) -> Self {
        let tip = |r: &str| {
            git.out(
                root,
                &[
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    &format!("{r}^{{commit}}"),
                ],
            )
            .ok()
            .filter(|s| !s.is_empty())
        };
        let default = default_branch(git, root);
        let current = git
            .out(root, &["symbolic-ref", "--quiet", "--short", "HEAD"])
            .ok()
            .and_then(|b| tip(&format!("refs/heads/{b}")).map(|t| (b, t)));
        let integration = current.filter(|c| default.as_ref().is_none_or(|d| d.0 != c.0));
        let upstream = default.as_ref().and_then(|(b, t)| {
            tip(&format!("refs/remotes/origin/{b}"))
                .filter(|u| u != t)
                .map(|u| (format!("origin/{b}"), u))
        });
        let default_tree = default
            .as_ref()
            .and_then(|(_, t)| git.out(root, &["rev-parse", &format!("{t}^{{tree}}")]).ok());
        let archives = git
            .out(
                root,
                &[
                    "for-each-ref",
                    "--format=%(refname)%00%(objectname)",
                    "refs/archive",
                ],
            )
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once('\0'))
            .map(|(r, t)| (r.to_owned(), t.to_owned()))
            .collect();
        Self {
            default,
            integration,
            upstream,
            default_tree,
            archives,
        }
    }

    /// The default branch's name.
    pub(crate) fn default_name(&self) -> Option<&str> {
        self.default.as_ref().map(|d| d.0.as_str())
    }
}

/// One branch's integration verdict.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Integration {
    /// Local branch name.
    pub branch: String,
    /// Its tip.
    pub tip: String,
    /// The branch proofs are made against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_branch: Option<String>,
    /// `merged`, `unmerged`, `in_sync` or `unknown`.
    pub commit_status: &'static str,
    /// Whether a proof established integration.
    pub integrated: bool,
    /// The proof kind, when integrated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proof: Option<&'static str>,
    /// Own commits not in the default branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ahead: Option<u64>,
    /// The proof is content-based: deletion needs an archive ref at the exact tip.
    pub archive_required: bool,
    /// An archive ref holds the exact tip.
    pub archived: bool,
    /// The primary archive ref name (`refs/archive/<branch>`), or the ref holding the tip.
    pub archive_ref: String,
    /// Every checkout of the branch, the main checkout included.
    pub worktree_paths: Vec<String>,
    /// GitHub PR evidence (`merged: #N`, `none`, `not needed: <proof>`, `unavailable: …`).
    pub github_pr: String,
    /// Why no verdict could be established.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The archive ref names for a branch: the primary, and the tip-suffixed variant used when the
/// primary already holds another tip.
pub(crate) fn archive_refs(branch: &str, tip: &str) -> (String, String) {
    let short = &tip[..tip.len().min(12)];
    (
        format!("refs/archive/{branch}"),
        format!("refs/archive/{branch}--{short}"),
    )
}

/// The archive ref holding `tip` exactly, if any.
pub(crate) fn archived_at(git: &Runner, root: &Path, branch: &str, tip: &str) -> Option<String> {
    let (primary, variant) = archive_refs(branch, tip);
    [primary, variant].into_iter().find(|r| {
        git.out(root, &["rev-parse", "--verify", "--quiet", r])
            .is_ok_and(|t| t == tip)
    })
}

/// Local branches and their tips, by name.
pub(crate) fn local_branches(git: &Runner, root: &Path) -> Result<Vec<(String, String)>, GitError> {
    let out = git.out(
        root,
        &[
            "for-each-ref",
            "--format=%(refname:short)%00%(objectname)",
            "refs/heads",
        ],
    )?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_once('\0'))
        .map(|(b, t)| (b.to_owned(), t.to_owned()))
        .collect())
}

/// Classifies one branch against the targets; never fails (an error is a verdict of
/// `unknown` with `error` set).
pub(crate) fn classify(
    git: &Runner,
    root: &Path,
    branch: &str,
    tip: &str,
    targets: &Targets,
    worktree_paths: Vec<String>,
) -> Integration {
    let (archive_ref, _) = archive_refs(branch, tip);
    let mut out = Integration {
        branch: branch.to_owned(),
        tip: tip.to_owned(),
        default_branch: targets.default_name().map(str::to_owned),
        commit_status: "unknown",
        integrated: false,
        proof: None,
        ahead: None,
        archive_required: false,
        archived: false,
        archive_ref,
        worktree_paths,
        github_pr: GITHUB_PR_UNAVAILABLE.into(),
        error: None,
    };
    let (primary, variant) = archive_refs(branch, tip);
    if let Some(held) = [primary, variant]
        .into_iter()
        .find(|r| targets.archives.get(r).is_some_and(|t| t == tip))
    {
        out.archived = true;
        out.archive_ref = held;
    }
    match prove(git, root, tip, targets) {
        Ok(v) => {
            out.commit_status = v.status;
            out.proof = v.proof;
            out.integrated = v.proof.is_some();
            out.ahead = v.ahead;
            out.archive_required = v.proof == Some("content_superset");
        }
        Err(e) => out.error = Some(e.to_string()),
    }
    out
}

struct Verdict {
    status: &'static str,
    proof: Option<&'static str>,
    ahead: Option<u64>,
}

fn is_ancestor(git: &Runner, root: &Path, a: &str, b: &str) -> Result<bool, GitError> {
    let o = git.run(root, &["merge-base", "--is-ancestor", a, b])?;
    match o.status.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => Err(super::failed(&["merge-base", "--is-ancestor", a, b], &o)),
    }
}

fn prove(git: &Runner, root: &Path, tip: &str, targets: &Targets) -> Result<Verdict, GitError> {
    let Some((_, dtip)) = &targets.default else {
        return Err(GitError::UnknownRef(
            "the repository has no default branch to prove integration against".into(),
        ));
    };
    let merged = |proof, ahead| Verdict {
        status: "merged",
        proof: Some(proof),
        ahead: Some(ahead),
    };
    if tip == dtip {
        return Ok(Verdict {
            status: "in_sync",
            proof: Some("ancestry"),
            ahead: Some(0),
        });
    }
    // One walk answers ancestry (no own commits), the own commits' count, merges and subjects.
    let range = format!("{dtip}..{tip}");
    let own: Vec<OwnCommit> = git
        .out(root, &["log", "--format=%H %P%x00%s", &range])?
        .lines()
        .filter_map(|l| {
            let (ids, subject) = l.split_once('\0')?;
            let mut ids = ids.split(' ');
            Some(OwnCommit {
                sha: ids.next()?.to_owned(),
                merge: ids.count() > 1,
                subject: subject.trim().to_owned(),
            })
        })
        .collect();
    let ahead = own.len() as u64;
    if own.is_empty() {
        return Ok(merged("ancestry", 0));
    }
    for (_, t) in targets.integration.iter().chain(targets.upstream.iter()) {
        if is_ancestor(git, root, tip, t)? {
            return Ok(merged("integration_ancestry", ahead));
        }
    }
    // `git cherry` compares patch ids of single-parent commits; a merge's resolution is
    // invisible to it, so branches with merges never get the patch proofs.
    let has_merges = own.iter().any(|c| c.merge);
    if !has_merges {
        let cherry = git.out(root, &["cherry", dtip, tip])?;
        let lines: Vec<&str> = cherry.lines().filter(|l| !l.is_empty()).collect();
        if !lines.is_empty() && lines.iter().all(|l| l.starts_with('-')) {
            return Ok(merged("patch_equivalence", ahead));
        }
    }
    let base = git
        .out(root, &["merge-base", dtip, tip])
        .unwrap_or_default();
    let mut theirs: Option<Vec<(String, String, String)>> = None;
    let mut target_log = |git: &Runner| -> Result<Vec<(String, String, String)>, GitError> {
        if theirs.is_none() {
            theirs = Some(target_commits(git, root, dtip, &base)?);
        }
        Ok(theirs.clone().unwrap_or_default())
    };
    if noop_merge(git, root, dtip, tip, targets.default_tree.as_deref())? {
        let subjects: Vec<&str> = own
            .iter()
            .filter(|c| !c.merge && !c.subject.is_empty())
            .map(|c| c.subject.as_str())
            .collect();
        let proof = if !subjects.is_empty() && squash_listed(&target_log(git)?, &subjects) {
            "squash_message"
        } else {
            "noop_merge"
        };
        return Ok(merged(proof, ahead));
    }
    if (!has_merges && twin_patches(git, root, &own, &target_log(git)?)?)
        || (!base.is_empty() && added_lines_present(git, root, dtip, &base, tip)?)
    {
        return Ok(merged("content_superset", ahead));
    }
    Ok(Verdict {
        status: "unmerged",
        proof: None,
        ahead: Some(ahead),
    })
}

/// One own commit of a branch (not in the default branch).
struct OwnCommit {
    sha: String,
    merge: bool,
    subject: String,
}

/// A virtual merge of `tip` into `target` is clean and its tree is the target's own tree.
fn noop_merge(
    git: &Runner,
    root: &Path,
    target: &str,
    tip: &str,
    target_tree: Option<&str>,
) -> Result<bool, GitError> {
    let o = git.run(root, &["merge-tree", "--write-tree", target, tip])?;
    if o.status.code() != Some(0) {
        // 1 is a conflicted merge: not a no-op. Anything else is a failure.
        return if o.status.code() == Some(1) {
            Ok(false)
        } else {
            Err(super::failed(&["merge-tree", "--write-tree"], &o))
        };
    }
    let tree = String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned();
    let target_tree = match target_tree {
        Some(t) => t.to_owned(),
        None => git.out(root, &["rev-parse", &format!("{target}^{{tree}}")])?,
    };
    Ok(!tree.is_empty() && tree == target_tree)
}

/// Target commits since the merge base (newest first, bounded): `(sha, subject, body)`.
fn target_commits(
    git: &Runner,
    root: &Path,
    target: &str,
    tip: &str,
) -> Result<Vec<(String, String, String)>, GitError> {
    let base = git
        .out(root, &["merge-base", target, tip])
        .unwrap_or_default();
    let range = if base.is_empty() {
        target.to_owned()
    } else {
        format!("{base}..{target}")
    };
    let out = git.out(
        root,
        &[
            "log",
            &format!("-n{TARGET_SCAN}"),
            "--format=%H%x00%s%x00%B%x1e",
            &range,
        ],
    )?;
    Ok(out
        .split('\x1e')
        .filter_map(|rec| {
            let mut p = rec.trim_start_matches('\n').splitn(3, '\0');
            Some((
                p.next()?.to_owned(),
                p.next()?.to_owned(),
                p.next().unwrap_or("").to_owned(),
            ))
        })
        .filter(|(h, _, _)| !h.is_empty())
        .collect())
}

/// Some target commit's message lists every own subject, as a line or a `* subject` bullet.
fn squash_listed(theirs: &[(String, String, String)], subjects: &[&str]) -> bool {
    theirs.iter().any(|(_, _, body)| {
        let lines: Vec<&str> = body
            .lines()
            .map(|l| {
                let t = l.trim();
                t.strip_prefix("* ")
                    .or_else(|| t.strip_prefix("- "))
                    .unwrap_or(t)
                    .trim()
            })
            .collect();
        subjects.iter().all(|s| lines.contains(s))
    })
}

/// The changed lines of one commit without context or hunk coordinates: file headers and
/// `+`/`-` lines only.
fn bare_patch(git: &Runner, root: &Path, sha: &str) -> Result<Vec<String>, GitError> {
    Ok(git
        .out(
            root,
            &[
                "show",
                "--format=",
                "--no-color",
                "--no-renames",
                "-U0",
                sha,
            ],
        )?
        .lines()
        .filter(|l| {
            l.starts_with("diff --git")
                || ((l.starts_with('+') || l.starts_with('-'))
                    && !l.starts_with("+++")
                    && !l.starts_with("---"))
        })
        .map(str::to_owned)
        .collect())
}

/// Every own commit has a target commit with the same subject and the same bare patch.
fn twin_patches(
    git: &Runner,
    root: &Path,
    own: &[OwnCommit],
    theirs: &[(String, String, String)],
) -> Result<bool, GitError> {
    // Subjects first: a commit without a same-subject candidate ends the proof without a diff.
    if own.is_empty()
        || !own
            .iter()
            .all(|c| theirs.iter().any(|(_, s, _)| *s == c.subject))
    {
        return Ok(false);
    }
    for c in own {
        let mine = bare_patch(git, root, &c.sha)?;
        let mut found = false;
        for (t, _, _) in theirs.iter().filter(|(_, s, _)| *s == c.subject) {
            if bare_patch(git, root, t)? == mine {
                found = true;
                break;
            }
        }
        if !found {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Every line the branch adds since the merge base is present, with its multiplicity, in the
/// same regular file at the target tip. Deletions, mode changes, binary files and incomplete
/// final lines disqualify.
fn added_lines_present(
    git: &Runner,
    root: &Path,
    target: &str,
    base: &str,
    tip: &str,
) -> Result<bool, GitError> {
    let diff = git.out(
        root,
        &[
            "diff",
            "--no-color",
            "--no-renames",
            "--no-ext-diff",
            "-U0",
            base,
            tip,
        ],
    )?;
    let mut added: HashMap<String, HashMap<String, usize>> = HashMap::new();
    let mut file: Option<String> = None;
    for l in diff.lines() {
        if l.starts_with("diff --git") {
            file = None;
        } else if let Some(p) = l.strip_prefix("+++ b/") {
            file = Some(p.to_owned());
        } else if l.starts_with("+++ /dev/null")
            || l.starts_with("old mode")
            || l.starts_with("new mode")
            || l.starts_with("deleted file mode")
            || l.starts_with("Binary files")
            || l.starts_with("GIT binary patch")
            || l.starts_with("\\ No newline")
            || (l.starts_with('-') && !l.starts_with("---"))
        {
            return Ok(false);
        } else if let Some(text) = l.strip_prefix('+')
            && let Some(f) = &file
        {
            *added
                .entry(f.clone())
                .or_default()
                .entry(text.to_owned())
                .or_default() += 1;
        }
    }
    if added.is_empty() {
        return Ok(false);
    }
    for (f, lines) in added {
        let spec = format!("{target}:{f}");
        let mode = git
            .out(root, &["ls-tree", target, "--", &f])
            .unwrap_or_default();
        if !(mode.starts_with("100644 blob") || mode.starts_with("100755 blob")) {
            return Ok(false);
        }
        let content = git.out(root, &["cat-file", "blob", &spec])?;
        let mut have: HashMap<&str, usize> = HashMap::new();
        for l in content.lines() {
            *have.entry(l).or_default() += 1;
        }
        if lines
            .iter()
            .any(|(l, n)| have.get(l.as_str()).copied().unwrap_or(0) < *n)
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What a successful `branch_delete` did.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Deleted {
    /// Always true.
    pub ok: bool,
    /// The branch.
    pub branch: String,
    /// The proof that authorized deletion (`archived` for the archived recovery rule).
    pub proof: String,
    /// The deleted tip.
    pub tip: String,
    /// The ref holding the deleted tip, captured before deletion.
    pub archive_ref: String,
}

/// Deletes a local branch ref after a fresh safety check: absent from every checkout, not the
/// default or integration branch, integrated (or archived under the recovery rule, which
/// `archive` opts into), and unmoved since the proof. The tip is always captured under an
/// archive ref first, so every deletion is restorable (`git branch <name> <archive_ref>`).
pub(crate) fn delete(
    git: &Runner,
    root: &Path,
    branch: &str,
    archive: bool,
    checkouts: &[(String, Option<String>)],
) -> Result<Deleted, GitError> {
    let tip = git
        .out(
            root,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}^{{commit}}"),
            ],
        )
        .ok()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            GitError::UnknownRef(format!(
                "branch {branch} does not exist in {}",
                root.display()
            ))
        })?;
    if let Some((path, _)) = checkouts.iter().find(|(_, b)| b.as_deref() == Some(branch)) {
        return Err(GitError::refused(
            "checked_out",
            format!(
                "branch {branch} is checked out at {path}; remove that worktree (repo action=worktree_remove) or switch it first"
            ),
        ));
    }
    let targets = Targets::resolve(git, root);
    if targets.default_name() == Some(branch) {
        return Err(GitError::refused(
            "default_branch",
            format!("branch {branch} is the default branch and is never deleted"),
        ));
    }
    if targets.integration.as_ref().is_some_and(|i| i.0 == branch) {
        return Err(GitError::refused(
            "integration_branch",
            format!("branch {branch} is the current integration branch and is never deleted"),
        ));
    }
    let v = classify(git, root, branch, &tip, &targets, vec![]);
    if let Some(e) = &v.error {
        return Err(GitError::refused(
            "unknown_verdict",
            format!(
                "branch {branch}: no integration verdict ({e}); an unknown verdict never authorizes deletion"
            ),
        ));
    }
    let proof = match v.proof {
        Some(p) => p.to_owned(),
        None if v.archived || archive => "archived".to_owned(),
        None => {
            return Err(GitError::refused(
                "unmerged",
                format!(
                    "branch {branch} has {} commit(s) not integrated into {}; pass archive=true to keep its tip under refs/archive/{branch} and delete it recoverably",
                    v.ahead.unwrap_or(0),
                    v.default_branch.as_deref().unwrap_or("the default branch")
                ),
            ));
        }
    };
    let archive_ref = ensure_archive(git, root, branch, &tip)?;
    // The final delete names the proved tip: a ref that moved since is refused by Git itself.
    let o = git.run(
        root,
        &["update-ref", "-d", &format!("refs/heads/{branch}"), &tip],
    )?;
    if !o.status.success() {
        return Err(GitError::refused(
            "ref_moved",
            format!(
                "branch {branch} moved since its tip {tip} was proved; query again and retry ({})",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        ));
    }
    Ok(Deleted {
        ok: true,
        branch: branch.to_owned(),
        proof,
        tip,
        archive_ref,
    })
}

/// An archive ref at exactly `tip`: an existing one, else the primary when free, else the
/// tip-suffixed variant.
pub(crate) fn ensure_archive(
    git: &Runner,
    root: &Path,
    branch: &str,
    tip: &str,
) -> Result<String, GitError> {
    if let Some(r) = archived_at(git, root, branch, tip) {
        return Ok(r);
    }
    let (primary, variant) = archive_refs(branch, tip);
    let free = git
        .out(root, &["rev-parse", "--verify", "--quiet", &primary])
        .map_or(true, |s| s.is_empty());
    let name = if free { primary } else { variant };
    // The empty old value makes Git refuse to overwrite a ref created meanwhile.
    git.out(root, &["update-ref", &name, tip, ""])?;
    Ok(name)
}
