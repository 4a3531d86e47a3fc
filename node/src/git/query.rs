//! Repository-wide queries and the branch delete entry point over resolved repositories:
//! `branch_integrations` / `branch_integration`, `branch_delete`, `GET /repo/info`.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::branch::{self, Integration, Targets};
use super::worktree::{count_paths, entries, fan_out, status, worktrees_dir};
use super::{Git, GitError};

impl Git {
    /// `branch_integrations` (all local branches) or `branch_integration` (one).
    pub(crate) fn integrations(&self, repo: &str, only: Option<&str>) -> Result<Value, GitError> {
        let git = self;
        let r = self.resolve_repo(repo)?;
        let es = entries(git, &r.root)?;
        let mut paths: HashMap<String, Vec<String>> = HashMap::new();
        for e in &es {
            if let Some(b) = &e.branch {
                paths
                    .entry(b.clone())
                    .or_default()
                    .push(e.path.to_string_lossy().into_owned());
            }
        }
        let mut bs = branch::local_branches(git, &r.root)?;
        if let Some(b) = only {
            bs.retain(|(n, _)| n == b);
            if bs.is_empty() {
                return Err(GitError::UnknownRef(format!(
                    "branch {b} does not exist in {}",
                    r.key
                )));
            }
        }
        let targets = Targets::resolve(git, &r.root);
        let mut v: Vec<Integration> = fan_out(&bs, super::GIT_CONCURRENCY, |(b, tip)| {
            branch::classify(
                git,
                &r.root,
                b,
                tip,
                &targets,
                paths.get(b).cloned().unwrap_or_default(),
            )
        });
        self.github_pr(&r.root, &mut v);
        Ok(match only {
            Some(_) => json!(v[0]),
            None => json!(v),
        })
    }

    /// The `github_pr` proof: branches no structural proof integrated are asked of GitHub
    /// (at most [`crate::github::MAX_PR_BRANCHES`]); a merged pull request whose head is
    /// exactly the tip integrates the branch with proof `github_pr`.
    fn github_pr(&self, root: &std::path::Path, v: &mut [Integration]) {
        let Some(hook) = &self.env.github else {
            return;
        };
        let mut ask = Vec::new();
        for (i, x) in v.iter_mut().enumerate() {
            match x.proof {
                Some(p) => x.github_pr = format!("not needed: {p}"),
                None if x.commit_status == "in_sync" => x.github_pr = "not needed: in_sync".into(),
                None if x.error.is_none() && ask.len() < crate::github::MAX_PR_BRANCHES => {
                    ask.push(i);
                }
                None => {
                    x.github_pr = format!(
                        "unavailable: not asked (at most {} branches per query; query the branch alone)",
                        crate::github::MAX_PR_BRANCHES
                    )
                }
            }
        }
        if ask.is_empty() {
            return;
        }
        let pairs: Vec<(String, String)> = ask
            .iter()
            .map(|&i| (v[i].branch.clone(), v[i].tip.clone()))
            .collect();
        match hook.merged_prs(root, &pairs) {
            Ok(found) => {
                for (&i, pr) in ask.iter().zip(found) {
                    let x = &mut v[i];
                    match pr {
                        Some(n) => {
                            x.github_pr = format!("merged: #{n}");
                            x.proof = Some("github_pr");
                            x.integrated = true;
                            x.commit_status = "merged";
                        }
                        None => x.github_pr = "none".into(),
                    }
                }
            }
            Err(why) => {
                for &i in &ask {
                    v[i].github_pr = format!("unavailable: {why}");
                }
            }
        }
    }

    /// `branch_delete`.
    pub(crate) fn delete_branch(
        &self,
        repo: &str,
        b: &str,
        archive: bool,
    ) -> Result<Value, GitError> {
        let git = self;
        let r = self.resolve_repo(repo)?;
        let checkouts: Vec<(String, Option<String>)> = entries(git, &r.root)?
            .into_iter()
            .map(|e| (e.path.to_string_lossy().into_owned(), e.branch))
            .collect();
        let d = branch::delete(git, &r.root, b, archive, &checkouts)?;
        Ok(json!(d))
    }

    /// `GET /repo/info`: the repository's Git facts in one call.
    pub(crate) fn info(&self, repo: &str) -> Result<Value, GitError> {
        let git = self;
        let r = self.resolve_repo(repo)?;
        let targets = Targets::resolve(git, &r.root);
        let branch = git
            .out(&r.root, &["symbolic-ref", "--quiet", "--short", "HEAD"])
            .ok();
        let head = super::worktree::commit_of(git, &r.root, "HEAD");
        let st = status(git, &r.root)?;
        let es = entries(git, &r.root)?;
        let record = self
            .env
            .repos
            .list()
            .ok()
            .and_then(|l| l.into_iter().find(|x| x.path == r.key));
        Ok(json!({
            "path": r.key,
            "name": r.root.file_name().map(|n| n.to_string_lossy().into_owned()),
            "is_git_repo": true,
            "branch": branch,
            "head": head,
            "default_branch": targets.default_name(),
            "is_dirty": count_paths(&st.raw) > 0,
            "dirty_files": count_paths(&st.raw),
            "worktree_count": es.len().saturating_sub(1),
            "worktrees_dir": worktrees_dir(&r.root),
            "remotes": record.map(|x| x.remotes).unwrap_or_default(),
        }))
    }
}
