//! The node's HTTP router: one route group per file, assembled here with the server limits.
//!
//! The same router serves the IPC socket and the TCP listener; the boundary middleware
//! decides per transport which guards apply.

mod acp;
mod audit;
mod auth;
mod automations;
mod body;
mod config;
mod events;
#[cfg(test)]
mod ext_tests;
mod files;
mod github;
mod notify;
mod oauth_callback;
mod ops;
mod peer;
mod progress;
mod repos;
mod review;
mod secrets;
mod sessions;
mod sessions_list;
mod share;
pub mod stories;
pub mod stream;
mod system;
mod upstreams;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware;
use axum::routing::{get, post};
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
use tower_http::timeout::TimeoutLayer;

use crate::error::ApiError;
use crate::state::Node;
pub(crate) use body::JsonBody;

/// The request body bound: deliberately equal to axum's own default, stated so a test pins it.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// Responses smaller than this are not compressed.
pub(crate) const COMPRESS_ABOVE_BYTES: u16 = 860;

/// Extra behaviour layered onto the node's routes inside the request boundary: an
/// extension's own routes and middleware (the hub's `/hub/*` routes and its routing of
/// addresses to their owners). Rows and calls the node's own routes serve go through
/// `crate::ext` instead.
pub type RouterHook = Arc<dyn Fn(Router<Arc<Node>>) -> Router<Arc<Node>> + Send + Sync>;

/// Builds the full router with the server limits and the request boundary (no hook: the
/// in-process tests' router; the server calls [`router_with`]).
pub fn router(node: Arc<Node>) -> Router {
    router_with(node, None)
}

/// [`router`] with an optional hook applied inside the boundary.
pub(crate) fn router_with(node: Arc<Node>, hook: Option<RouterHook>) -> Router {
    let routes = Router::new()
        .route("/health", get(system::health))
        .route("/logs", get(system::logs))
        .route("/tailscale", get(system::tailscale))
        .route("/config", get(config::get_config).put(config::put_config))
        .route("/auth/login", post(auth::login))
        .route("/auth/logout", post(auth::logout))
        .route(
            "/auth/sessions",
            get(auth::list_sessions).delete(auth::revoke_all_sessions),
        )
        .route(
            "/auth/sessions/{id}",
            axum::routing::delete(auth::revoke_session),
        )
        .route("/auth/token/rotate", post(auth::rotate_token))
        .route("/audit", get(audit::list))
        .route("/events", get(events::sse))
        .route("/repos", get(repos::list).post(repos::add))
        .route(
            "/worktrees",
            get(repos::list_worktrees).post(repos::create_worktree),
        )
        .route("/worktrees/lifecycle", get(repos::worktree_lifecycle))
        .route("/worktrees/remove", post(repos::remove_worktree))
        .route("/repo/info", get(repos::repo_info))
        .route("/repo/branch-integrations", get(repos::branch_integrations))
        .route("/repo/branch-delete", post(repos::branch_delete))
        .route("/repo/orphan-cleanup", post(repos::orphan_cleanup))
        .route("/repo/prs", get(github::prs))
        .route("/repo/issues", get(github::issues))
        .route("/repo/issues/close", post(github::close))
        .route("/repo/issues/reopen", post(github::reopen))
        .route("/repo/ci-failure-logs", get(github::ci_failure_logs))
        .route("/repo/github-token", axum::routing::put(github::set_token))
        .route("/fs/read-external", get(files::read_external))
        .route("/fs/read-editor", get(files::read_editor))
        .route("/fs/read-editor-external", get(files::read_editor_external))
        .route("/fs/write-external", post(files::write_external))
        .route("/fs/copy-abs", post(files::copy_abs))
        .route("/fs/move-abs", post(files::move_abs))
        .route("/fs/transfer", post(files::transfer))
        .route("/fs/markdown-image", get(files::markdown_image))
        .route(
            "/fs/resolve-markdown-link",
            post(files::resolve_markdown_link),
        )
        .route("/mcp/peer", get(peer::peer_ws))
        .merge(sessions::routes())
        .merge(share::routes())
        .merge(secrets::routes())
        .merge(acp::routes())
        .merge(progress::routes())
        .merge(stories::routes())
        .merge(automations::routes())
        .merge(ops::routes())
        .merge(crate::mcp::routes())
        .merge(upstreams::routes())
        .merge(notify::routes())
        .merge(review::routes())
        .merge(crate::web::routes())
        .fallback(|| async { ApiError::not_found("no such route") })
        .layer(middleware::from_fn_with_state(node.clone(), ops::track));
    // Uploads stream for as long as data keeps coming: they have their own bounds (idle
    // deadline per chunk, bytes, entries, concurrency; the update's size cap) instead of the
    // body limit and deadline.
    let streaming = Router::new()
        .route("/fs/upload-copy", post(files::upload_copy))
        .route("/remote/update", post(ops::update))
        .layer(DefaultBodyLimit::disable());
    let app = with_server_limits(routes, node.request_timeout()).merge(streaming);
    let app = match hook {
        Some(h) => h(app),
        None => app,
    };
    app.layer(middleware::from_fn_with_state(
        node.clone(),
        crate::server::boundary::boundary,
    ))
    .with_state(node)
}

/// Runs `f` on the blocking pool (file system, `/proc`, `redb` work), off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
}

/// The two bounds every request/response route gets: a deadline and a body limit, plus
/// compression. The deadline races only the future producing the response head, so SSE and
/// WebSocket bodies stream past it; compression skips event streams.
pub(crate) fn with_server_limits(
    routes: Router<Arc<Node>>,
    timeout: std::time::Duration,
) -> Router<Arc<Node>> {
    let compress = SizeAbove::new(COMPRESS_ABOVE_BYTES)
        .and(NotForContentType::GRPC)
        .and(NotForContentType::IMAGES)
        .and(NotForContentType::SSE);
    routes
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        .layer(CompressionLayer::new().compress_when(compress))
}
