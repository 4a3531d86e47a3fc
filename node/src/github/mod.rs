//! The GitHub service: pull requests, issues, CI failure logs and the `github_pr` integration
//! proof, through the GitHub REST API (`GET /repo/prs`, `GET /repo/issues`,
//! `POST /repo/issues/close|reopen`, `GET /repo/ci-failure-logs`, `branch_integrations`).
//!
//! The repository is named by the `origin` remote of a registered repository (https and ssh
//! forms); the API base is configurable (`github.api_base`, GitHub Enterprise:
//! `https://HOST/api/v3`); the token is the vault's [`env::TOKEN_NAME`], else what
//! `gh auth token --hostname HOST` prints when `gh` is installed. Without a token, or with
//! the API out of reach, every call answers [`GithubError::Unavailable`] with the reason.
//! The token goes only into the `Authorization` header of requests to the API base's origin
//! (a `Link` page on another origin is refused; redirects to log storage drop it): it never
//! reaches a log, an error or an answer.
//!
//! It holds no node: the composition root gives it a [`GithubEnv`].

pub mod env;
mod error;
pub mod logs;
mod remote;
mod wire;

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, USER_AGENT};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use zeroize::Zeroizing;

pub use env::{GithubEnv, Settings};
pub use error::GithubError;
use error::iso;
pub use remote::parse_remote;
use wire::*;

/// Pages followed at most for one listing (10 × 100 items).
pub const MAX_PAGES: usize = 10;

/// Items a listing answers at most.
pub const MAX_ITEMS: usize = 1000;

/// Failed jobs whose logs one `ci-failure-logs` call downloads at most.
pub const MAX_JOBS: usize = 5;

/// Unproved branches one `branch_integrations` query asks GitHub about at most.
pub const MAX_PR_BRANCHES: usize = 20;

/// A token, wiped when dropped; its `Debug` shows nothing of it.
struct Token(Zeroizing<String>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

/// One call's settings and token.
#[derive(Debug)]
struct Call {
    settings: Settings,
    token: Token,
}

/// A GitHub repository named by a local checkout's `origin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoRef {
    /// The local checkout.
    pub dir: PathBuf,
    /// `owner`.
    pub owner: String,
    /// `name`.
    pub name: String,
}

impl RepoRef {
    fn slug(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
}

/// The GitHub service.
#[derive(Debug)]
pub struct Github {
    env: GithubEnv,
    http: reqwest::Client,
}

impl Github {
    /// The service over `env`.
    pub fn new(env: GithubEnv) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::limited(5))
            .build()
            .unwrap_or_default();
        Self { env, http }
    }

    /// The service's environment.
    pub fn env(&self) -> &GithubEnv {
        &self.env
    }

    /// Stores (or, with an empty value, removes) the token in the vault. Blocking.
    pub fn set_token(&self, token: &str) -> anyhow::Result<()> {
        let t = token.trim();
        if t.is_empty() {
            self.env.vault.remove(env::TOKEN_NAME).map(drop)
        } else {
            self.env.vault.set(env::TOKEN_NAME, t)
        }
    }

    /// The settings and token of one call, or why GitHub cannot be asked.
    async fn call(&self) -> Result<Call, GithubError> {
        let settings = (self.env.settings)();
        let vault = self.env.vault.clone();
        let stored = tokio::task::spawn_blocking(move || vault.get(env::TOKEN_NAME))
            .await
            .map_err(|e| GithubError::unavailable(format!("reading the GitHub token: {e}")))?
            .map_err(|e| {
                GithubError::unavailable(format!("reading the GitHub token from the vault: {e:#}"))
            })?
            .filter(|t| !t.trim().is_empty());
        if let Some(t) = stored {
            return Ok(Call {
                settings,
                token: Token(Zeroizing::new(t.trim().to_owned())),
            });
        }
        let why_gh = if settings.gh_fallback {
            match gh_token(&settings).await {
                Ok(t) => return Ok(Call { settings, token: t }),
                Err(why) => why,
            }
        } else {
            "the gh fallback is off (github.gh_fallback: false)".to_owned()
        };
        Err(GithubError::unavailable(format!(
            "no GitHub token: none is stored in the vault (PUT /repo/github-token over the IPC socket) and {why_gh}"
        )))
    }

    /// The GitHub repository of a registered checkout at `path` (or inside one, or one of its
    /// linked worktrees), named by its `origin` remote.
    pub async fn repo(&self, path: &str) -> Result<RepoRef, GithubError> {
        let p = Path::new(path);
        if path.is_empty() || !p.is_absolute() {
            return Err(GithubError::BadRequest(format!(
                "path must be an absolute path of a registered repository (got {path:?})"
            )));
        }
        let dir = std::fs::canonicalize(p)
            .map_err(|e| GithubError::BadRequest(format!("{path}: {e}")))?;
        let roots = self.env.repos.roots();
        let registered = roots.iter().any(|r| {
            dir.starts_with(r) || {
                let wt = PathBuf::from(format!("{}__wt", r.display()));
                dir.starts_with(wt)
            }
        });
        if !registered {
            return Err(GithubError::BadRequest(format!(
                "{} is not a registered repository (register it with POST /repos)",
                dir.display()
            )));
        }
        let url = git(&dir, &["remote", "get-url", "origin"])
            .await
            .map_err(|e| {
                GithubError::BadRequest(format!("{}: no origin remote ({e})", dir.display()))
            })?;
        let (owner, name) = parse_remote(&url).ok_or_else(|| {
            GithubError::BadRequest(format!(
                "{}: the origin remote does not name a GitHub owner/repository",
                dir.display()
            ))
        })?;
        Ok(RepoRef { dir, owner, name })
    }

    /// One GET (or other method) to the API, mapped to typed JSON and the next page's URL.
    async fn send(
        &self,
        c: &Call,
        method: reqwest::Method,
        url: &str,
        body: Option<Value>,
    ) -> Result<reqwest::Response, GithubError> {
        same_origin(&c.settings.api_base, url)?;
        let mut headers = HeaderMap::new();
        headers.insert(
            ACCEPT,
            "application/vnd.github+json".parse().expect("static"),
        );
        headers.insert(USER_AGENT, "tuic-node".parse().expect("static"));
        headers.insert(
            "x-github-api-version",
            "2022-11-28".parse().expect("static"),
        );
        let mut auth = reqwest::header::HeaderValue::from_str(&format!("Bearer {}", &*c.token.0))
            .map_err(|_| {
            GithubError::unavailable("the stored GitHub token is not a valid header value")
        })?;
        auth.set_sensitive(true);
        headers.insert(AUTHORIZATION, auth);
        let mut req = self
            .http
            .request(method, url)
            .headers(headers)
            .timeout(c.settings.timeout);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.map_err(|e| {
            GithubError::unavailable(format!(
                "the GitHub API at {} is unreachable: {}",
                c.settings.api_base,
                e.without_url()
            ))
        })?;
        if r.status().is_success() {
            return Ok(r);
        }
        Err(map_refusal(r).await)
    }

    async fn get<T: DeserializeOwned>(
        &self,
        c: &Call,
        url: &str,
    ) -> Result<(T, Option<String>), GithubError> {
        let r = self.send(c, reqwest::Method::GET, url, None).await?;
        let next = next_link(r.headers());
        let v = r.json::<T>().await.map_err(|e| GithubError::Upstream {
            status: 200,
            message: format!("GitHub's answer could not be read: {}", e.without_url()),
        })?;
        Ok((v, next))
    }

    /// A listing, `Link: rel="next"` followed up to `limit` items and [`MAX_PAGES`].
    async fn paged<T: DeserializeOwned>(
        &self,
        c: &Call,
        first: String,
        limit: usize,
    ) -> Result<(Vec<T>, bool), GithubError> {
        let mut out = Vec::new();
        let mut url = Some(first);
        let mut pages = 0;
        while let Some(u) = url.take() {
            let (items, next) = self.get::<Vec<T>>(c, &u).await?;
            out.extend(items);
            pages += 1;
            if out.len() >= limit {
                let more = next.is_some() || out.len() > limit;
                out.truncate(limit);
                return Ok((out, more));
            }
            if pages >= MAX_PAGES {
                return Ok((out, next.is_some()));
            }
            url = next;
        }
        Ok((out, false))
    }

    /// `GET /repo/prs`: pull requests in `state` (open, closed, all), newest first.
    pub async fn prs(&self, path: &str, state: &str, limit: usize) -> Result<Value, GithubError> {
        let state = list_state(state)?;
        let c = self.call().await?;
        let r = self.repo(path).await?;
        let url = format!(
            "{}/repos/{}/pulls?state={state}&per_page=100",
            c.settings.api_base,
            r.slug()
        );
        let (pulls, more) = self.paged::<Pull>(&c, url, clamp_limit(limit)).await?;
        let prs: Vec<Value> = pulls
            .into_iter()
            .map(|p| {
                json!({
                    "number": p.number, "title": p.title, "state": p.state, "draft": p.draft,
                    "author": p.user.map(|u| u.login), "head_ref": p.head.name,
                    "head_sha": p.head.sha, "base_ref": p.base.name, "url": p.html_url,
                    "created_at": p.created_at, "updated_at": p.updated_at,
                    "merged_at": p.merged_at, "merged": p.merged_at.is_some(),
                })
            })
            .collect();
        Ok(json!({"repo": r.slug(), "state": state, "prs": prs, "truncated": more}))
    }

    /// `GET /repo/issues`: issues in `state` (pull requests left out), newest first.
    pub async fn issues(
        &self,
        path: &str,
        state: &str,
        limit: usize,
    ) -> Result<Value, GithubError> {
        let state = list_state(state)?;
        let c = self.call().await?;
        let r = self.repo(path).await?;
        let url = format!(
            "{}/repos/{}/issues?state={state}&per_page=100",
            c.settings.api_base,
            r.slug()
        );
        let (items, more) = self.paged::<Issue>(&c, url, clamp_limit(limit)).await?;
        let issues: Vec<Value> = items
            .into_iter()
            .filter(|i| i.pull_request.is_none())
            .map(|i| issue_json(&i))
            .collect();
        Ok(json!({"repo": r.slug(), "state": state, "issues": issues, "truncated": more}))
    }

    /// `POST /repo/issues/close|reopen`: `PATCH /repos/{o}/{r}/issues/{n}` with the new state
    /// (and, closing, `state_reason` `completed` or `not_planned`).
    pub async fn set_issue_state(
        &self,
        path: &str,
        number: u64,
        open: bool,
        reason: Option<&str>,
    ) -> Result<Value, GithubError> {
        if number == 0 {
            return Err(GithubError::BadRequest(
                "number must be an issue number (≥ 1)".into(),
            ));
        }
        let mut body = json!({"state": if open { "open" } else { "closed" }});
        match (open, reason) {
            (_, None) => {}
            (false, Some(r @ ("completed" | "not_planned"))) => body["state_reason"] = json!(r),
            (true, Some(r)) => {
                return Err(GithubError::BadRequest(format!(
                    "reason applies to closing only (got {r:?})"
                )));
            }
            (false, Some(r)) => {
                return Err(GithubError::BadRequest(format!(
                    "reason must be completed or not_planned (got {r:?})"
                )));
            }
        }
        let c = self.call().await?;
        let r = self.repo(path).await?;
        let url = format!("{}/repos/{}/issues/{number}", c.settings.api_base, r.slug());
        let resp = self
            .send(&c, reqwest::Method::PATCH, &url, Some(body))
            .await
            .map_err(|e| match e {
                GithubError::NotFound(_) => GithubError::NotFound(format!(
                    "GitHub answered 404 for issue #{number} of {}: it does not exist, or the repository is private and the token cannot see it",
                    r.slug()
                )),
                e => e,
            })?;
        let i: Issue = resp.json().await.map_err(|e| GithubError::Upstream {
            status: 200,
            message: format!("GitHub's answer could not be read: {}", e.without_url()),
        })?;
        Ok(json!({"ok": true, "repo": r.slug(), "issue": issue_json(&i)}))
    }

    /// `GET /repo/ci-failure-logs`: the failed jobs of the newest failed run for `branch`'s
    /// local head, each log trimmed to its failing step. With `check` (an Actions job URL)
    /// and `head_sha`: that job, verified to have run on `head_sha`.
    pub async fn ci_failure_logs(
        &self,
        path: &str,
        branch: Option<&str>,
        check: Option<(&str, &str)>,
    ) -> Result<Value, GithubError> {
        let c = self.call().await?;
        let r = self.repo(path).await?;
        if let Some((check_url, head)) = check {
            return self.check_logs(&c, &r, check_url, head).await;
        }
        let branch = match branch.filter(|b| !b.is_empty()) {
            Some(b) => b.to_owned(),
            None => git(&r.dir, &["symbolic-ref", "--quiet", "--short", "HEAD"])
                .await
                .map_err(|_| {
                    GithubError::BadRequest("branch is required (the checkout is detached)".into())
                })?,
        };
        if branch.starts_with('-') || branch.contains("..") {
            return Err(GithubError::BadRequest(format!(
                "not a branch name: {branch:?}"
            )));
        }
        let head = git(
            &r.dir,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}^{{commit}}"),
            ],
        )
        .await
        .map_err(|_| GithubError::BadRequest(format!("branch {branch} does not exist locally")))?;
        let base = &c.settings.api_base;
        let q: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("branch", &branch)
            .append_pair("head_sha", &head)
            .append_pair("per_page", "30")
            .finish();
        let (runs, _) = self
            .get::<Runs>(&c, &format!("{base}/repos/{}/actions/runs?{q}", r.slug()))
            .await?;
        let checked = runs.workflow_runs.len();
        let Some(run) = runs
            .workflow_runs
            .into_iter()
            .find(|x| x.head_sha == head && failed(x.conclusion.as_deref()))
        else {
            return Ok(json!({
                "repo": r.slug(), "branch": branch, "head_sha": head, "run": null, "jobs": [],
                "message": format!("no failed workflow run for {branch} at {head} ({checked} runs checked)"),
            }));
        };
        let jobs_url = format!(
            "{base}/repos/{}/actions/runs/{}/jobs?filter=latest&per_page=100",
            r.slug(),
            run.id
        );
        let mut jobs = Vec::new();
        let mut url = Some(jobs_url);
        let mut pages = 0;
        while let Some(u) = url.take()
            && pages < MAX_PAGES
        {
            let (page, next) = self.get::<Jobs>(&c, &u).await?;
            jobs.extend(
                page.jobs
                    .into_iter()
                    .filter(|j| failed(j.conclusion.as_deref())),
            );
            pages += 1;
            url = next;
        }
        let total_failed = jobs.len();
        let mut out = Vec::new();
        for j in jobs.into_iter().take(MAX_JOBS) {
            out.push(self.job_log(&c, &r, j).await?);
        }
        Ok(json!({
            "repo": r.slug(), "branch": branch, "head_sha": head,
            "run": {"id": run.id, "name": run.name, "run_number": run.run_number,
                    "status": run.status, "conclusion": run.conclusion, "url": run.html_url,
                    "head_branch": run.head_branch, "created_at": run.created_at},
            "failed_jobs": total_failed,
            "jobs": out,
        }))
    }

    async fn check_logs(
        &self,
        c: &Call,
        r: &RepoRef,
        check_url: &str,
        head: &str,
    ) -> Result<Value, GithubError> {
        let job_id = actions_job_id(check_url).ok_or_else(|| {
            GithubError::BadRequest(format!(
                "checkUrl must be a GitHub Actions job URL (…/actions/runs/RUN/job/JOB); other CI providers (CircleCI) are not supported by this node (got {check_url:?})"
            ))
        })?;
        if head.is_empty() {
            return Err(GithubError::BadRequest(
                "headSha is required with checkUrl".into(),
            ));
        }
        let url = format!(
            "{}/repos/{}/actions/jobs/{job_id}",
            c.settings.api_base,
            r.slug()
        );
        let (job, _) = self.get::<Job>(c, &url).await?;
        if job.head_sha != head {
            return Err(GithubError::HeadMismatch(format!(
                "the check ran on {} but the PR head is {head}: refusing another commit's logs",
                job.head_sha
            )));
        }
        let run_id = job.run_id;
        let j = self.job_log(c, r, job).await?;
        Ok(json!({"repo": r.slug(), "head_sha": head, "run": {"id": run_id}, "jobs": [j]}))
    }

    /// One job's log, downloaded in chunks into a [`logs::Trimmer`] (bounded memory).
    async fn job_log(&self, c: &Call, r: &RepoRef, j: Job) -> Result<Value, GithubError> {
        let url = format!(
            "{}/repos/{}/actions/jobs/{}/logs",
            c.settings.api_base,
            r.slug(),
            j.id
        );
        let failed_step = j
            .steps
            .iter()
            .find(|s| failed(s.conclusion.as_deref()))
            .map(|s| json!({"number": s.number, "name": s.name}));
        let base = json!({"id": j.id, "name": j.name, "conclusion": j.conclusion,
                          "url": j.html_url, "failed_step": failed_step});
        let mut resp = match self.send(c, reqwest::Method::GET, &url, None).await {
            Ok(resp) => resp,
            // Logs expire (410) or were deleted (404): the job is still reported.
            Err(GithubError::NotFound(_)) | Err(GithubError::Upstream { status: 410, .. }) => {
                let mut v = base;
                v["log_error"] = json!("GitHub has no log for this job (expired or deleted)");
                return Ok(v);
            }
            Err(e) => return Err(e),
        };
        let mut t = logs::Trimmer::new(c.settings.log_tail_bytes);
        let mut cut_short = false;
        loop {
            match resp.chunk().await {
                Ok(Some(b)) => {
                    t.feed(&b);
                    if t.read() >= logs::MAX_READ {
                        cut_short = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(GithubError::unavailable(format!(
                        "reading the log of job {} broke off: {}",
                        j.id,
                        e.without_url()
                    )));
                }
            }
        }
        let trimmed = t.finish(cut_short);
        let mut v = base;
        v["log"] = json!(trimmed);
        Ok(v)
    }

    /// The `github_pr` evidence of branches: per `(branch, tip)`, the number of a merged pull
    /// request whose head was exactly `tip` (the verified head), or `None`.
    pub async fn merged_prs(
        &self,
        root: &Path,
        branches: &[(String, String)],
    ) -> Result<Vec<Option<u64>>, String> {
        let c = self.call().await.map_err(|e| e.to_string())?;
        let r = self
            .repo(&root.to_string_lossy())
            .await
            .map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(branches.len());
        for (b, tip) in branches {
            let q: String = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("state", "closed")
                .append_pair("head", &format!("{}:{b}", r.owner))
                .append_pair("per_page", "30")
                .finish();
            let url = format!("{}/repos/{}/pulls?{q}", c.settings.api_base, r.slug());
            let (pulls, _) = self
                .get::<Vec<Pull>>(&c, &url)
                .await
                .map_err(|e| e.to_string())?;
            out.push(
                pulls
                    .iter()
                    .find(|p| p.merged_at.is_some() && p.head.sha == *tip && p.head.name == *b)
                    .map(|p| p.number),
            );
        }
        Ok(out)
    }
}

/// The git service's `github_pr` hook: the blocking face of [`Github::merged_prs`].
impl crate::git::PrEvidence for Github {
    fn merged_prs(
        &self,
        root: &Path,
        branches: &[(String, String)],
    ) -> Result<Vec<Option<u64>>, String> {
        let h = tokio::runtime::Handle::try_current()
            .map_err(|_| "no runtime to ask GitHub from".to_owned())?;
        h.block_on(Github::merged_prs(self, root, branches))
    }
}

fn issue_json(i: &Issue) -> Value {
    json!({
        "number": i.number, "title": i.title, "state": i.state, "state_reason": i.state_reason,
        "author": i.user.as_ref().map(|u| u.login.clone()),
        "labels": i.labels.iter().map(|l| l.name.clone()).collect::<Vec<_>>(),
        "url": i.html_url, "comments": i.comments, "created_at": i.created_at,
        "updated_at": i.updated_at, "closed_at": i.closed_at,
    })
}

fn list_state(s: &str) -> Result<&'static str, GithubError> {
    match s {
        "" | "open" => Ok("open"),
        "closed" => Ok("closed"),
        "all" => Ok("all"),
        other => Err(GithubError::BadRequest(format!(
            "state must be open, closed or all (got {other:?})"
        ))),
    }
}

fn clamp_limit(l: usize) -> usize {
    if l == 0 { 100 } else { l.min(MAX_ITEMS) }
}

/// `…/actions/runs/RUN/job/JOB` → JOB.
fn actions_job_id(url: &str) -> Option<u64> {
    let u = url::Url::parse(url).ok()?;
    let segs: Vec<&str> = u.path_segments()?.collect();
    let i = segs.iter().position(|s| *s == "job")?;
    (i >= 2 && segs[i - 2] == "runs").then_some(())?;
    segs.get(i + 1)?.parse().ok()
}

/// Refuses a URL outside the API base's origin: the token goes nowhere else.
fn same_origin(base: &str, url: &str) -> Result<(), GithubError> {
    let b = url::Url::parse(base)
        .map_err(|_| GithubError::unavailable(format!("github.api_base is not a URL: {base:?}")))?;
    let u = url::Url::parse(url).map_err(|_| GithubError::Upstream {
        status: 200,
        message: "GitHub named a malformed page URL".into(),
    })?;
    if b.origin() != u.origin() {
        return Err(GithubError::Upstream {
            status: 200,
            message: format!(
                "GitHub named a page on another origin ({}); not followed with the token",
                u.origin().ascii_serialization()
            ),
        });
    }
    Ok(())
}

/// The `rel="next"` URL of a `Link` header.
fn next_link(h: &HeaderMap) -> Option<String> {
    let link = h.get(reqwest::header::LINK)?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim() == "rel=\"next\"")
            .then(|| {
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_owned()
            })
    })
}

/// A GitHub refusal, named.
async fn map_refusal(r: reqwest::Response) -> GithubError {
    let status = r.status().as_u16();
    let h = r.headers().clone();
    let header = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body: Option<ErrorBody> = r.json().await.ok();
    let message = body
        .and_then(|b| b.message)
        .unwrap_or_else(|| format!("HTTP {status}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let spent = header("x-ratelimit-remaining").as_deref() == Some("0");
    if (status == 403 || status == 429) && (spent || header("retry-after").is_some()) {
        let reset_at = if spent {
            header("x-ratelimit-reset")
                .and_then(|s| s.parse().ok())
                .unwrap_or(now + 60)
        } else {
            now + header("retry-after")
                .and_then(|s| s.parse().ok())
                .unwrap_or(60)
        };
        return GithubError::RateLimited {
            reset_at,
            message: format!(
                "GitHub API rate limit exceeded ({message}); it resets at {} (in {} s)",
                iso(reset_at),
                reset_at.saturating_sub(now)
            ),
        };
    }
    match status {
        401 => GithubError::Unavailable {
            reason: format!(
                "GitHub refused the token (401 {message}): store a valid one with PUT /repo/github-token or run gh auth login"
            ),
            github_status: Some(401),
        },
        404 => GithubError::NotFound(format!(
            "GitHub answered 404 ({message}): the repository does not exist, or it is private and the token cannot see it"
        )),
        _ => GithubError::Upstream {
            status,
            message: format!("GitHub answered {status}: {message}"),
        },
    }
}

/// `git -C dir args…`, stdout trimmed.
async fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let fut = tokio::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let o = tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .map_err(|_| "git timed out".to_owned())?
        .map_err(|e| format!("running git: {e}"))?;
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).trim().to_owned());
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

/// `gh auth token --hostname HOST`, or why not.
async fn gh_token(s: &Settings) -> Result<Token, String> {
    let host = s
        .gh_hostname()
        .ok_or_else(|| "github.api_base names no host".to_owned())?;
    let fut = tokio::process::Command::new("gh")
        .args(["auth", "token", "--hostname", &host])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let o = match tokio::time::timeout(Duration::from_secs(5), fut).await {
        Err(_) => return Err("gh auth token timed out".into()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("the gh CLI is not installed".into());
        }
        Ok(Err(e)) => return Err(format!("gh could not run: {e}")),
        Ok(Ok(o)) => o,
    };
    let t = Zeroizing::new(String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if !o.status.success() || t.is_empty() {
        return Err(format!("gh has no token for {host} (run gh auth login)"));
    }
    Ok(Token(t))
}

#[cfg(test)]
mod tests;
