//! The file routes: `GET /fs/read-external`, `/fs/read-editor`, `/fs/read-editor-external`,
//! `/fs/markdown-image`, and `POST /fs/write-external`, `/fs/copy-abs`, `/fs/move-abs`,
//! `/fs/transfer`, `/fs/resolve-markdown-link`, `/fs/upload-copy`. Adapters over
//! [`crate::fs`]: they pick the read cap from the transport (the large one only for loopback
//! callers), run the root-gated work on the blocking pool and map its errors to statuses.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use super::blocking;
use crate::error::ApiError;
use crate::fs::upload::{self, UploadError};
use crate::fs::{self, LARGE_READ_CAP, STANDARD_READ_CAP};
use crate::guard::{self, Transport};
use crate::routes::JsonBody;
use crate::state::Node;

fn loopback(transport: Option<Extension<Transport>>, headers: &HeaderMap) -> bool {
    transport.is_some_and(|Extension(t)| guard::is_loopback_caller(t, headers))
}

/// The editor read cap: the large one only for loopback callers (metered links stay small).
fn editor_cap(transport: Option<Extension<Transport>>, headers: &HeaderMap) -> u64 {
    if loopback(transport, headers) {
        LARGE_READ_CAP
    } else {
        STANDARD_READ_CAP
    }
}

/// Gates `path`, then reads it beneath its root, off the async workers, within `cap`.
async fn read_gated(node: &Node, path: String, cap: u64) -> Result<Json<Value>, ApiError> {
    let roots = node.repos.roots();
    Ok(Json(blocking(move || fs::read(&roots, &path, cap)).await?))
}

#[derive(Debug, Deserialize)]
pub(super) struct PathQuery {
    path: String,
}

/// `GET /fs/read-external?path=` — a text file inside a root, standard cap.
pub(super) async fn read_external(
    State(node): State<Arc<Node>>,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, ApiError> {
    read_gated(&node, q.path, STANDARD_READ_CAP).await
}

/// `GET /fs/read-editor-external?path=` — 250 MB for loopback callers, 10 MB for remote ones.
pub(super) async fn read_editor_external(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, ApiError> {
    read_gated(&node, q.path, editor_cap(transport, &headers)).await
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RepoFileQuery {
    repo_path: String,
    file: String,
}

/// `GET /fs/read-editor?repoPath=&file=` — a file relative to a repository, capped per caller.
pub(super) async fn read_editor(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
    Query(q): Query<RepoFileQuery>,
) -> Result<Json<Value>, ApiError> {
    let joined = Path::new(&q.repo_path).join(&q.file);
    read_gated(
        &node,
        joined.to_string_lossy().into_owned(),
        editor_cap(transport, &headers),
    )
    .await
}

#[derive(Debug, Deserialize)]
pub(super) struct WriteBody {
    path: String,
    content: String,
}

/// `POST /fs/write-external {path, content}` — creates or truncates a file beneath its root.
pub(super) async fn write_external(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<WriteBody>,
) -> Result<Json<Value>, ApiError> {
    let roots = node.repos.roots();
    blocking(move || fs::write(&roots, &b.path, b.content.as_bytes())).await?;
    Ok(Json(json!({"ok": true})))
}

#[derive(Debug, Deserialize)]
pub(super) struct CopyBody {
    src: String,
    dest: String,
}

/// `POST /fs/copy-abs {src, dest}` — both inside roots; directories copy recursively.
pub(super) async fn copy_abs(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<CopyBody>,
) -> Result<Json<Value>, ApiError> {
    let roots = node.repos.roots();
    blocking(move || fs::copy(&roots, &b.src, &b.dest)).await?;
    Ok(Json(json!({"ok": true})))
}

/// `POST /fs/move-abs {src, dest}` — both inside roots; never replaces an existing `dest`.
pub(super) async fn move_abs(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<CopyBody>,
) -> Result<Json<Value>, ApiError> {
    let roots = node.repos.roots();
    blocking(move || fs::rename(&roots, &b.src, &b.dest)).await?;
    Ok(Json(json!({"ok": true})))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TransferBody {
    paths: Vec<String>,
    dest_dir: String,
    #[serde(default)]
    mode: Option<String>,
}

/// `POST /fs/transfer {paths, destDir, mode?: "copy"|"move"}` — see [`fs::check_transfer`]:
/// a loopback caller's sources may lie anywhere, a remote caller's only in roots.
pub(super) async fn transfer(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<TransferBody>,
) -> Result<Json<Value>, ApiError> {
    let checked = fs::check_transfer(
        &node.repos.roots(),
        &fs::Transfer {
            paths: &b.paths,
            dest_dir: &b.dest_dir,
            mode: b.mode.as_deref(),
            local: loopback(transport, &headers),
        },
    )?;
    let done = blocking(move || checked.run()).await?;
    Ok(Json(json!({"ok": true, "paths": done})))
}

/// `GET /fs/markdown-image?repoPath=&file=` — an image ≤ 10 MiB inside a registered
/// repository ([`fs::markdown_image`]).
pub(super) async fn markdown_image(
    State(node): State<Arc<Node>>,
    Query(q): Query<RepoFileQuery>,
) -> Result<Response, ApiError> {
    let roots = node.repos.roots();
    let (ct, bytes) = blocking(move || fs::markdown_image(&roots, &q.repo_path, &q.file)).await?;
    Ok(([(CONTENT_TYPE, ct)], bytes).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct LinkBody {
    /// The Markdown file the link appears in (absolute), or a directory to resolve from.
    base_path: String,
    /// The link target as written.
    link: String,
}

/// `POST /fs/resolve-markdown-link {basePath, link}` — target metadata only, never content
/// ([`fs::resolve_markdown_link`]).
pub(super) async fn resolve_markdown_link(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<LinkBody>,
) -> Result<Json<Value>, ApiError> {
    let roots = node.repos.roots();
    blocking(move || fs::resolve_markdown_link(&roots, &b.base_path, &b.link))
        .await
        .map(Json)
}

impl From<UploadError> for ApiError {
    fn from(e: UploadError) -> Self {
        let (status, code) = match &e {
            UploadError::Rejected(_) => (StatusCode::BAD_REQUEST, "bad_archive"),
            UploadError::Outside(_) => (StatusCode::FORBIDDEN, crate::beneath::OUTSIDE_CODE),
            UploadError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            UploadError::Exists(_) => (StatusCode::CONFLICT, "exists"),
            upload::UploadError::Idle(_) => (StatusCode::REQUEST_TIMEOUT, "idle_timeout"),
            UploadError::Io(_) => (StatusCode::INTERNAL_SERVER_ERROR, "io"),
        };
        ApiError::new(status, code, e.to_string())
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct UploadQuery {
    /// A registered repository path (with `dest` relative to it)...
    root: Option<String>,
    #[serde(default)]
    dest: String,
    /// ...or an absolute directory inside a registered repository.
    path: Option<String>,
}

/// Resolves the query to (registered root, destination relative to it).
fn upload_target(node: &Node, q: &UploadQuery) -> Result<(PathBuf, PathBuf), ApiError> {
    let unknown =
        |p: &str| ApiError::forbidden(format!("{p} is not inside a registered repository"));
    match (&q.root, &q.path) {
        (Some(root), None) => {
            let canon = Path::new(root).canonicalize().map_err(|_| unknown(root))?;
            if !node.repos.is_root(&canon) {
                return Err(unknown(root));
            }
            Ok((
                canon,
                upload::relative_dir(&q.dest).map_err(ApiError::bad_request)?,
            ))
        }
        (None, Some(path)) => {
            if !Path::new(path).is_absolute() {
                return Err(ApiError::bad_request("path must be absolute"));
            }
            // Lexical: the directory is opened beneath the root by `receive`, so a symlink in
            // it that leads out of the root is refused there, not resolved here.
            let p = crate::beneath::check_absolute(path, crate::beneath::Dots::Refuse)?;
            let (root, rel) = crate::beneath::root_of(p, &node.repos.roots())?;
            Ok((
                root,
                rel.join(upload::relative_dir(&q.dest).map_err(ApiError::bad_request)?),
            ))
        }
        _ => Err(ApiError::bad_request(
            "give either root (with dest) or path",
        )),
    }
}

/// `POST /fs/upload-copy?root=&dest=` (or `?path=`): streams the body into [`upload::receive`]
/// on the blocking pool, with its own idle deadline per chunk and a concurrency permit.
pub(super) async fn upload_copy(
    State(node): State<Arc<Node>>,
    Query(q): Query<UploadQuery>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let (root, dest) = upload_target(&node, &q)?;
    let permit = node
        .upload_permits
        .clone()
        .try_acquire_owned()
        .map_err(|_| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "busy",
                "too many uploads in progress; retry later",
            )
        })?;
    let t = &node.config().tuning;
    let limits = upload::Limits {
        max_bytes: t.upload_max_bytes,
        max_entries: t.upload_max_entries,
        idle: Duration::from_millis(t.upload_idle_ms),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(16);
    let extract = tokio::task::spawn_blocking(move || {
        // The permit lives until extraction has finished, not just until the body is read.
        let _permit = permit;
        upload::receive(
            &root,
            &dest,
            ChannelReader {
                rx,
                buf: Bytes::new(),
            },
            limits,
        )
    });
    let mut stream = body.into_data_stream();
    let mut idle = false;
    loop {
        match tokio::time::timeout(limits.idle, stream.next()).await {
            Err(_) => {
                idle = true;
                let _ = tx
                    .send(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "idle",
                    )))
                    .await;
                break;
            }
            Ok(None) => break,
            Ok(Some(Ok(chunk))) => {
                // The extractor stopped early (rejected entry): stop reading.
                if tx.send(Ok(chunk)).await.is_err() {
                    break;
                }
            }
            Ok(Some(Err(e))) => {
                let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                break;
            }
        }
    }
    drop(tx);
    let result = extract
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    match result {
        Err(_) if idle => Err(upload::UploadError::Idle(limits.idle).into()),
        Err(e) => Err(e.into()),
        Ok(p) => {
            tracing::info!(source = "upload", name = %p.name, bytes = p.bytes, entries = p.entries, "upload published");
            Ok(Json(
                json!({"ok": true, "name": p.name, "bytes": p.bytes, "entries": p.entries}),
            ))
        }
    }
}

/// Blocking reader over the body chunks.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
    buf: Bytes,
}

impl std::io::Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.buf.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.buf = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf.split_to(n));
        Ok(n)
    }
}
