//! The GitHub/CI routes the removed `repo` actions point agents at: `GET /repo/prs`,
//! `GET /repo/issues`, `POST /repo/issues/close`, `POST /repo/issues/reopen`,
//! `GET /repo/ci-failure-logs`. This node has no GitHub client yet (issue 45, item 3 is open),
//! so the API is unreachable from it by construction: per the spec each route answers 503
//! `github_unavailable` with the reason — never 404, so an agent following the pointer learns
//! why instead of concluding the route is gone. No request leaves the machine.

use axum::Json;
use axum::http::StatusCode;
use serde_json::{Value, json};

/// Why GitHub answers cannot be given here.
pub(super) const REASON: &str = "this node has no GitHub client: no GitHub API call is made and no token is read (not built yet)";

/// Every GitHub/CI route's answer on this node.
pub(super) async fn unavailable() -> (StatusCode, Json<Value>) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"code": "github_unavailable", "error": REASON, "reason": REASON})),
    )
}
