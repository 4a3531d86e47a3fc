//! The git service of another node: a repository addressed as `<connection_id>:/path` is
//! served by its owner, over the owner's authenticated HTTP routes (`/worktrees`, `/repo/*`,
//! the same adapters a local caller uses) through the hub's proxy path — like `tuic cp`, never
//! over the peer link. The node hands such a path here through its `ext::HostRouter` hook
//! (`repo`); a plain node refuses it as not absolute.

use serde_json::{Map, Value};
use tuic_node::ext::GitError;
use tuic_node::ext::RepoCall;

use crate::federation::Federation;

/// Every code the git service answers with, so an owner's refusal keeps its code here.
const CODES: &[&str] = &[
    "invalid_path",
    "unknown_repository",
    "not_git",
    "unknown_ref",
    "unknown_worktree",
    "invalid_branch",
    "git_failed",
    "io_error",
    "dirty",
    "locked",
    "fingerprint_required",
    "stale_fingerprint",
    "checked_out",
    "path_exists",
    "path_escape",
    "main_checkout",
    "default_branch",
    "integration_branch",
    "unmerged",
    "unknown_verdict",
    "ref_moved",
    "no_open_dialog",
    "unsafe_cleanup",
    "invalid_decision",
    "bad_request",
    "behind",
    "conflicted",
    "detached",
    "nothing_to_land",
];

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Calls the owner's route; a refusal keeps the owner's code and names the connection.
async fn call(
    fed: &Federation,
    conn: &str,
    method: &str,
    path_and_query: &str,
    body: Option<Value>,
) -> Result<Value, GitError> {
    let (status, v) = fed
        .call_owner(conn, method, path_and_query, body)
        .await
        .map_err(|e| GitError::Remote {
            connection: conn.to_owned(),
            code: e.code,
            message: e.message,
            status: 503,
        })?;
    if (200..300).contains(&status) {
        let mut v = v;
        if let Some(m) = v.as_object_mut() {
            m.insert("connection_id".into(), Value::from(conn));
        }
        return Ok(v);
    }
    let code = v
        .get("code")
        .and_then(Value::as_str)
        .and_then(|c| CODES.iter().find(|k| **k == c).copied())
        .unwrap_or("remote_error");
    Err(GitError::Remote {
        connection: conn.to_owned(),
        code,
        message: format!(
            "{conn}: {}",
            v.get("error")
                .and_then(Value::as_str)
                .unwrap_or("the owner refused the call")
        ),
        status,
    })
}

fn pick(args: &Map<String, Value>, keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|k| args.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect()
}

/// Serves one git action of the `repo` tool (or a route) on the owner of `req.host`.
/// `req.args` are the MCP arguments (`path` already split off as `req.path`).
pub(crate) async fn action(fed: &Federation, req: RepoCall<'_>) -> Result<Value, GitError> {
    let RepoCall {
        host: conn,
        path,
        action: a,
        args,
    } = req;
    let q = |extra: &str| format!("path={}{extra}", enc(path));
    let branch_q = || {
        args.get("branch")
            .and_then(Value::as_str)
            .map(|b| format!("&branch={}", enc(b)))
            .unwrap_or_default()
    };
    let (method, path_and_query, body) = match a {
        "worktree_create" => {
            let mut b = pick(args, &["branch", "base", "spawn_session"]);
            b.insert("base_repo".into(), Value::from(path));
            ("POST", "/worktrees".to_owned(), Some(Value::Object(b)))
        }
        "worktree_list" => ("GET", format!("/worktrees?{}", q("")), None),
        "worktree_lifecycle" => (
            "GET",
            format!("/worktrees/lifecycle?{}", q(&branch_q())),
            None,
        ),
        "worktree_remove" => {
            let mut b = pick(
                args,
                &[
                    "branch",
                    "force",
                    "expected_fingerprint",
                    "delete_branch",
                    "override_lock",
                ],
            );
            b.insert("path".into(), Value::from(path));
            (
                "POST",
                "/worktrees/remove".to_owned(),
                Some(Value::Object(b)),
            )
        }
        "branch_integrations" => ("GET", format!("/repo/branch-integrations?{}", q("")), None),
        "branch_integration" => (
            "GET",
            format!("/repo/branch-integrations?{}", q(&branch_q())),
            None,
        ),
        "branch_delete" => {
            let mut b = pick(args, &["branch", "archive"]);
            b.insert("path".into(), Value::from(path));
            (
                "POST",
                "/repo/branch-delete".to_owned(),
                Some(Value::Object(b)),
            )
        }
        "orphan_cleanup_answer" => {
            let mut b = pick(args, &["decision"]);
            b.insert("path".into(), Value::from(path));
            (
                "POST",
                "/repo/orphan-cleanup".to_owned(),
                Some(Value::Object(b)),
            )
        }
        "info" => ("GET", format!("/repo/info?{}", q("")), None),
        "diff_summary" | "diff_file" => {
            let mut extra = String::new();
            for k in ["file", "branch", "base", "uncommitted", "offset", "limit"] {
                match args.get(k) {
                    Some(Value::String(v)) => extra.push_str(&format!("&{k}={}", enc(v))),
                    Some(v @ (Value::Bool(_) | Value::Number(_))) => {
                        extra.push_str(&format!("&{k}={v}"))
                    }
                    _ => {}
                }
            }
            let route = if a == "diff_summary" {
                "/repo/diff-summary"
            } else {
                "/repo/diff-file"
            };
            ("GET", format!("{route}?{}", q(&extra)), None)
        }
        "merge_state" => ("GET", format!("/repo/merge?{}", q("")), None),
        "merge" => {
            let mut b = pick(args, &["method", "message"]);
            b.insert("path".into(), Value::from(path));
            ("POST", "/repo/merge".to_owned(), Some(Value::Object(b)))
        }
        other => {
            return Err(GitError::InvalidPath(format!(
                "repo action={other} is not routed to remote repositories"
            )));
        }
    };
    call(fed, conn, method, &path_and_query, body).await
}
