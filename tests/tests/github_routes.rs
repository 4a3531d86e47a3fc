//! The GitHub/CI routes the removed `repo` actions point at: without a token they answer 503
//! `github_unavailable` with a reason — never 404. With one, a real node is pointed (through
//! `github.api_base`) at a local server replaying recorded GitHub REST API answers
//! (`tests/data/github/`): this machine cannot reach GitHub, so no live GitHub run exists.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use tuic_tests::github_replay::Replay;
use tuic_tests::{NodeProc, config_dir, ipc};

#[tokio::test]
async fn github_routes_answer_503_github_unavailable_never_404() {
    let d = config_dir(json!({}));
    let node = NodeProc::start(
        "tuic-node",
        &["--config-dir", d.path().to_str().unwrap()],
        &[],
    )
    .unwrap();
    for (method, uri) in [
        ("GET", "/repo/prs?path=/tmp"),
        ("GET", "/repo/issues?path=/tmp"),
        ("POST", "/repo/issues/close"),
        ("POST", "/repo/issues/reopen"),
        ("GET", "/repo/ci-failure-logs?path=/tmp&branch=main"),
    ] {
        let body = (method == "POST").then(|| json!({"path": "/tmp", "number": 1}));
        let r = ipc(&node.socket, method, uri, body).await.unwrap();
        assert_eq!(r.status, 503, "{method} {uri}");
        let v = r.json();
        assert_eq!(v["code"], "github_unavailable", "{uri}: {v}");
        assert!(
            v["reason"].as_str().is_some_and(|s| s.contains("GitHub")),
            "{v}"
        );
    }
}

const TOKEN: &str = "ghp_replayTestToken0123456789abcdefABCD";

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// A node pointed at the replay server, with a registered repository whose origin is
/// `octo/demo` (branches `feature` and `squashed` one commit ahead of `main`) and a token.
struct Rig {
    replay: Replay,
    node: NodeProc,
    repo: tempfile::TempDir,
    _config: tempfile::TempDir,
}

impl Rig {
    async fn start(token: &str) -> Self {
        Self::start_at(token, None).await
    }

    /// Like [`Rig::start`], the node pointed at `api_base` instead of the replay server.
    async fn start_at(token: &str, api_base: Option<&str>) -> Self {
        let replay = Replay::start().await;
        let api_base = api_base.unwrap_or(&replay.base).to_owned();
        let repo = tempfile::tempdir().unwrap();
        let root = repo.path();
        git(root, &["init", "-q", "-b", "main"]);
        std::fs::write(root.join("a.txt"), "a\n").unwrap();
        git(root, &["add", "."]);
        git(root, &["commit", "-qm", "base"]);
        for b in ["feature", "squashed"] {
            git(root, &["checkout", "-qb", b]);
            std::fs::write(root.join(format!("{b}.txt")), b).unwrap();
            git(root, &["add", "."]);
            git(root, &["commit", "-qm", b]);
            git(root, &["checkout", "-q", "main"]);
        }
        git(
            root,
            &["remote", "add", "origin", "git@github.com:octo/demo.git"],
        );
        replay.set("FEATURE", &git(root, &["rev-parse", "feature"]));
        replay.set("SQUASHED", &git(root, &["rev-parse", "squashed"]));
        let config = config_dir(json!({"github": {"api_base": api_base, "gh_fallback": false}}));
        let node = NodeProc::start(
            "tuic-node",
            &["--config-dir", config.path().to_str().unwrap()],
            &[],
        )
        .unwrap();
        let canon = std::fs::canonicalize(root).unwrap();
        let r = ipc(&node.socket, "POST", "/repos", Some(json!({"path": canon})))
            .await
            .unwrap();
        assert!(r.status < 300, "{}", r.json());
        let r = ipc(
            &node.socket,
            "PUT",
            "/repo/github-token",
            Some(json!({"token": token})),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200, "{}", r.json());
        assert!(!String::from_utf8_lossy(&r.body).contains(token));
        Self {
            replay,
            node,
            repo,
            _config: config,
        }
    }

    fn path(&self) -> String {
        std::fs::canonicalize(self.repo.path())
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    async fn get(&self, uri: &str) -> (u16, Value) {
        let r = ipc(&self.node.socket, "GET", uri, None).await.unwrap();
        (r.status, r.json())
    }

    async fn post(&self, uri: &str, body: Value) -> (u16, Value) {
        let r = ipc(&self.node.socket, "POST", uri, Some(body))
            .await
            .unwrap();
        (r.status, r.json())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.node.log).unwrap_or_default()
    }
}

fn enc(s: &str) -> String {
    s.replace('%', "%25")
        .replace('/', "%2F")
        .replace(' ', "%20")
}

#[tokio::test]
async fn github_prs_follow_link_pagination_and_issues_leave_out_pull_requests() {
    let rig = Rig::start(TOKEN).await;
    let p = enc(&rig.path());
    let (s, v) = rig.get(&format!("/repo/prs?path={p}&state=all")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["repo"], "octo/demo");
    let numbers: Vec<u64> = v["prs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [12, 11, 9], "both pages, in order: {v}");
    assert_eq!(v["prs"][1]["draft"], true);
    assert_eq!(v["prs"][2]["merged"], true);
    assert_eq!(v["prs"][0]["head_ref"], "frob");
    assert_eq!(v["truncated"], false);
    let seen = rig.replay.seen();
    let pages: Vec<_> = seen
        .iter()
        .filter(|x| x.uri.starts_with("/repos/octo/demo/pulls"))
        .collect();
    assert_eq!(pages.len(), 2, "{seen:?}");
    assert!(pages[1].uri.contains("page=2"));
    for x in &pages {
        assert_eq!(x.auth.as_deref(), Some(format!("Bearer {TOKEN}").as_str()));
    }
    // A limit stops early and says there is more.
    let (_, v) = rig
        .get(&format!("/repo/prs?path={p}&state=all&limit=2"))
        .await;
    assert_eq!(v["prs"].as_array().unwrap().len(), 2);
    assert_eq!(v["truncated"], true);
    // The spec's repoPath works too; the issues listing drops pull requests (#12).
    let (s, v) = rig.get(&format!("/repo/issues?repoPath={p}")).await;
    assert_eq!(s, 200, "{v}");
    let numbers: Vec<u64> = v["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [13, 7]);
    assert_eq!(
        v["issues"][1]["labels"],
        json!(["docs", "good first issue"])
    );
    // Bad input: a clear 400, nothing sent.
    rig.replay.clear();
    let (s, v) = rig.get(&format!("/repo/prs?path={p}&state=merged")).await;
    assert_eq!((s, v["code"].as_str()), (400, Some("bad_request")), "{v}");
    let (s, v) = rig.get("/repo/prs?path=/tmp").await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("not a registered repository"),
        "{v}"
    );
    assert!(rig.replay.seen().is_empty());
    assert!(
        !rig.log().contains(TOKEN),
        "the token reached the node's log"
    );
}

#[tokio::test]
async fn github_close_and_reopen_send_the_right_patch() {
    let rig = Rig::start(TOKEN).await;
    let p = rig.path();
    rig.replay.set("STATE", "closed");
    rig.replay.set("STATE_REASON", "\"not_planned\"");
    let (s, v) = rig
        .post(
            "/repo/issues/close",
            json!({"path": p, "number": 7, "reason": "not_planned"}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["issue"]["state"], "closed");
    assert_eq!(v["issue"]["state_reason"], "not_planned");
    let seen = rig.replay.seen();
    let patch = seen.iter().find(|x| x.method == "PATCH").expect("a PATCH");
    assert_eq!(patch.uri, "/repos/octo/demo/issues/7");
    assert_eq!(
        patch.body,
        json!({"state": "closed", "state_reason": "not_planned"})
    );
    rig.replay.clear();
    rig.replay.set("STATE", "open");
    rig.replay.set("STATE_REASON", "\"reopened\"");
    let (s, v) = rig
        .post("/repo/issues/reopen", json!({"repoPath": p, "number": 7}))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["issue"]["state"], "open");
    let patch = rig
        .replay
        .seen()
        .into_iter()
        .find(|x| x.method == "PATCH")
        .unwrap();
    assert_eq!(patch.body, json!({"state": "open"}));
    // An issue GitHub does not know: named, never a 404 from this route.
    let (s, v) = rig
        .post("/repo/issues/close", json!({"path": p, "number": 999}))
        .await;
    assert_eq!(
        (s, v["code"].as_str()),
        (502, Some("github_not_found")),
        "{v}"
    );
    assert!(v["error"].as_str().unwrap().contains("#999"), "{v}");
    // Refusals before anything is sent.
    rig.replay.clear();
    let (s, _) = rig
        .post(
            "/repo/issues/close",
            json!({"path": p, "number": 7, "reason": "wontfix"}),
        )
        .await;
    assert_eq!(s, 400);
    let (s, _) = rig.post("/repo/issues/reopen", json!({"path": p})).await;
    assert_eq!(s, 400);
    assert!(rig.replay.seen().is_empty());
}

#[tokio::test]
async fn github_ci_failure_logs_trim_a_5_mb_log_to_the_failing_step() {
    let rig = Rig::start(TOKEN).await;
    let p = enc(&rig.path());
    let (s, v) = rig
        .get(&format!(
            "/repo/ci-failure-logs?repoPath={p}&branch=feature"
        ))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["run"]["id"], 9001,
        "the failed run, not the green one: {v}"
    );
    assert_eq!(
        v["head_sha"],
        git(rig.repo.path(), &["rev-parse", "feature"])
    );
    assert_eq!(v["failed_jobs"], 1);
    let job = &v["jobs"][0];
    assert_eq!(job["name"], "test (ubuntu-latest)");
    assert_eq!(
        job["failed_step"],
        json!({"number": 3, "name": "cargo test"})
    );
    let log = &job["log"];
    assert_eq!(log["step"], "Run cargo test");
    assert_eq!(log["error_found"], true);
    assert_eq!(log["truncated"], true);
    assert!(
        log["log_bytes"].as_u64().unwrap() > 5 * 1024 * 1024,
        "{}",
        log["log_bytes"]
    );
    let text = log["text"].as_str().unwrap();
    assert!(text.len() <= 64 * 1024, "kept {} bytes", text.len());
    assert!(text.contains("panicked at src/frob.rs:42:9"), "{text:.300}");
    assert!(text.contains("##[error]Process completed with exit code 101."));
    assert!(
        !text.contains("Syncing repository"),
        "another step leaked in"
    );
    assert!(
        !text.contains("Cleaning up orphan processes"),
        "a later step leaked in"
    );
    let q = rig
        .replay
        .seen()
        .into_iter()
        .find(|x| x.uri.starts_with("/repos/octo/demo/actions/runs?"))
        .unwrap();
    assert!(
        q.uri.contains("branch=feature") && q.uri.contains("head_sha="),
        "{}",
        q.uri
    );
    // A particular check, verified against the PR head.
    let head = git(rig.repo.path(), &["rev-parse", "feature"]);
    let check = enc("https://github.com/octo/demo/actions/runs/9001/job/5101");
    let (s, v) = rig
        .get(&format!(
            "/repo/ci-failure-logs?repoPath={p}&checkUrl={check}&headSha={head}"
        ))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["jobs"][0]["log"]["step"], "Run cargo test");
    let (s, v) = rig
        .get(&format!(
            "/repo/ci-failure-logs?repoPath={p}&checkUrl={check}&headSha={}",
            "f".repeat(40)
        ))
        .await;
    assert_eq!((s, v["code"].as_str()), (409, Some("head_mismatch")), "{v}");
    // A branch with no run: an empty answer that says so; an unknown branch: 400.
    let (s, v) = rig
        .get(&format!("/repo/ci-failure-logs?path={p}&branch=squashed"))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["jobs"], json!([]));
    let (s, _) = rig
        .get(&format!("/repo/ci-failure-logs?path={p}&branch=nope"))
        .await;
    assert_eq!(s, 400);
}

#[tokio::test]
async fn github_refusals_rate_limit_private_repo_and_bad_token_are_named() {
    let rig = Rig::start(TOKEN).await;
    let root = rig.repo.path();
    let p = enc(&rig.path());
    // Rate limit spent: 429 with GitHub's reset time.
    git(
        root,
        &[
            "remote",
            "set-url",
            "origin",
            "https://github.com/octo/busy.git",
        ],
    );
    let (s, v) = rig.get(&format!("/repo/issues?path={p}")).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (429, Some("github_rate_limited")),
        "{v}"
    );
    assert_eq!(v["reset_at"], 1_800_000_000u64);
    assert_eq!(v["reset_at_iso"], "2027-01-15T08:00:00Z");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("2027-01-15T08:00:00Z"),
        "{v}"
    );
    // A private repository the token cannot see: GitHub's 404, named, answered 502.
    git(
        root,
        &[
            "remote",
            "set-url",
            "origin",
            "ssh://git@github.com/octo/private",
        ],
    );
    let (s, v) = rig.get(&format!("/repo/prs?path={p}")).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (502, Some("github_not_found")),
        "{v}"
    );
    assert!(v["error"].as_str().unwrap().contains("private"), "{v}");
    // A bad token: 503 github_unavailable naming GitHub's 401; the token never answered.
    git(
        root,
        &[
            "remote",
            "set-url",
            "origin",
            "https://github.com/octo/demo.git",
        ],
    );
    let r = ipc(
        &rig.node.socket,
        "PUT",
        "/repo/github-token",
        Some(json!({"token": "bad-token"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    let (s, v) = rig.get(&format!("/repo/prs?path={p}")).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (503, Some("github_unavailable")),
        "{v}"
    );
    assert_eq!(v["github_status"], 401);
    assert!(
        v["reason"].as_str().unwrap().contains("Bad credentials"),
        "{v}"
    );
    assert!(!v.to_string().contains("bad-token"));
    assert!(!rig.log().contains("bad-token") && !rig.log().contains(TOKEN));
    // The integration proof says why it is unavailable.
    let (s, v) = rig
        .get(&format!(
            "/repo/branch-integrations?path={p}&branch=feature"
        ))
        .await;
    assert_eq!(s, 200, "{v}");
    assert!(
        v["github_pr"]
            .as_str()
            .unwrap()
            .starts_with("unavailable: GitHub refused the token"),
        "{v}"
    );
}

#[tokio::test]
async fn github_unreachable_api_answers_503_with_the_reason() {
    // Port 1 on loopback: nothing listens there.
    let rig = Rig::start_at(TOKEN, Some("http://127.0.0.1:1")).await;
    let p = enc(&rig.path());
    let (s, v) = rig
        .get(&format!("/repo/ci-failure-logs?path={p}&branch=feature"))
        .await;
    assert_eq!(
        (s, v["code"].as_str()),
        (503, Some("github_unavailable")),
        "{v}"
    );
    assert!(v["reason"].as_str().unwrap().contains("unreachable"), "{v}");
    assert!(!v.to_string().contains(TOKEN));
}

#[tokio::test]
async fn github_pr_proof_integrates_a_branch_merged_by_pull_request() {
    let rig = Rig::start(TOKEN).await;
    let p = enc(&rig.path());
    let (s, v) = rig
        .get(&format!("/repo/branch-integrations?path={p}"))
        .await;
    assert_eq!(s, 200, "{v}");
    let by = |b: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|x| x["branch"] == b)
            .cloned()
            .unwrap()
    };
    let sq = by("squashed");
    assert_eq!(sq["proof"], "github_pr", "{sq}");
    assert_eq!(sq["integrated"], true);
    assert_eq!(sq["commit_status"], "merged");
    assert_eq!(sq["github_pr"], "merged: #42");
    let f = by("feature");
    assert_eq!(f["integrated"], false, "{f}");
    assert_eq!(f["github_pr"], "none");
    assert!(
        by("main")["github_pr"]
            .as_str()
            .unwrap()
            .starts_with("not needed")
    );
    let asked: Vec<_> = rig
        .replay
        .seen()
        .into_iter()
        .filter(|x| x.uri.contains("/pulls?"))
        .map(|x| x.uri)
        .collect();
    assert_eq!(
        asked.len(),
        2,
        "only the unproved branches are asked: {asked:?}"
    );
    assert!(asked.iter().all(|u| u.contains("state=closed")));
}
