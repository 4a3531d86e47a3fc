//! The operations routes: `GET /agents`, `GET /stats`, `GET /process/stats`, `GET /metrics`,
//! `GET/PUT /config/activity`, `POST /store/backup` (IPC only) and `POST /remote/update`,
//! plus the [`track`] middleware that observes every request's latency. Adapters over
//! [`crate::ops`]: blocking work runs on the blocking pool.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use serde_json::{Value, json};

use super::blocking;
use crate::error::ApiError;
use crate::ops::{self, metrics, service, update};
use crate::state::Node;

/// The operations routes, merged into the node's router (`/remote/update` streams and is
/// mounted apart, see [`update`]).
pub(super) fn routes() -> axum::Router<Arc<Node>> {
    axum::Router::new()
        .route("/agents", get(agents))
        .route("/stats", get(stats))
        .route("/process/stats", get(process_stats))
        .route("/metrics", get(metrics_text))
        .route("/config/activity", get(get_activity).put(put_activity))
        .route("/store/backup", axum::routing::post(backup))
}

/// `GET /agents`: agent detection over the live sessions (the foreground process of each).
async fn agents(State(node): State<Arc<Node>>) -> Result<Json<Value>, ApiError> {
    blocking(move || Ok(Json(node.ops.agents()))).await
}

/// `GET /stats`: one object of the node's counts.
async fn stats(State(node): State<Arc<Node>>) -> Json<Value> {
    Json(node.ops.stats())
}

/// `GET /process/stats`: per live session, its process tree's CPU and resident memory.
async fn process_stats(State(node): State<Arc<Node>>) -> Result<Json<Value>, ApiError> {
    blocking(move || Ok(Json(node.ops.process_stats()))).await
}

/// `GET /metrics`: the Prometheus text exposition.
async fn metrics_text(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    let text = blocking(move || Ok(node.ops.metrics_text())).await?;
    Ok(([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response())
}

/// `GET /config/activity`: the persisted Activity array (`[]` before anything was saved).
async fn get_activity(State(node): State<Arc<Node>>) -> Result<Json<Value>, ApiError> {
    blocking(move || node.ops.read_activity().map(Json)).await
}

/// `PUT /config/activity`: replaces the persisted array (objects only, at most
/// [`ops::MAX_ACTIVITY_ITEMS`]).
async fn put_activity(State(node): State<Arc<Node>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let items = ops::activity_items(&body)?;
    blocking(move || {
        node.ops.write_activity(&items)?;
        Ok(Json(json!({"ok": true, "count": items.len()})))
    })
    .await
}

#[derive(Debug, serde::Deserialize)]
struct BackupBody {
    /// Absolute path of the file to write (must not exist).
    path: String,
}

/// `POST /store/backup {path}` (IPC only): a consistent copy of the store while the node runs
/// (writes pause for the copy) → `{path, bytes, sha256}`. `tuic-node backup FILE` calls it.
async fn backup(
    State(node): State<Arc<Node>>,
    transport: Option<axum::Extension<crate::guard::Transport>>,
    crate::routes::JsonBody(b): crate::routes::JsonBody<BackupBody>,
) -> Result<Json<Value>, ApiError> {
    if !matches!(
        transport.map(|axum::Extension(t)| t),
        Some(crate::guard::Transport::Ipc)
    ) {
        return Err(ApiError::forbidden(
            "store backups are taken only from this machine's IPC socket",
        ));
    }
    let dest = std::path::PathBuf::from(&b.path);
    if !dest.is_absolute() {
        return Err(ApiError::bad_request("path must be absolute"));
    }
    let n = node.clone();
    let r = tokio::task::spawn_blocking(move || {
        service::backup_store(&n.store, &n.paths.store_file(), &dest)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::bad_request(format!("{e:#}")))?;
    Ok(Json(json!(r)))
}

/// `POST /remote/update`: streams the body into the staging file ([`update::Target`]), installs
/// it when every check passed, answers, and then drains the node so it re-executes itself.
pub(super) async fn update(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let target = update::target(headers.get("x-update-sha256").and_then(|v| v.to_str().ok()))?;
    let result = async {
        let mut staging = target.open()?;
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
            staging.push(&chunk)?;
        }
        target.install(staging, node.name).await
    }
    .await;
    let done = match result {
        Ok(r) => r,
        Err(e) => {
            target.discard();
            return Err(e);
        }
    };
    tracing::warn!(source = "update", version = %done.version, bytes = done.bytes, "executable replaced; restarting");
    target.request_restart();
    // Answer first, then drain: the client sees the verdict before the node goes away.
    let n = node.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        n.shutdown.cancel();
    });
    Ok(Json(json!({
        "ok": true,
        "sha256": done.sha256,
        "bytes": done.bytes,
        "version": done.version,
        "path": target.exe,
        "previous": done.previous,
        "restarting": true,
    })))
}

/// Middleware: observes each request's time to the response head under its route template
/// (`unmatched` for the fallback), so label values stay bounded.
pub(super) async fn track(State(node): State<Arc<Node>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = req.method().as_str().to_owned();
    let t0 = Instant::now();
    let resp = next.run(req).await;
    node.ops
        .metrics
        .observe_request(&route, &method, t0.elapsed().as_secs_f64());
    resp
}
