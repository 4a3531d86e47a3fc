//! Root-gated file routes: every path a caller names must lie inside a registered repository,
//! and is opened *beneath* that repository's root.
//!
//! The gate ([`beneath::locate`]) first applies the spec's lexical checks (NUL, relative paths
//! and `..` refused before anything touches the file system, then the registered root that
//! holds the path), and then every open, create, read, write, copy and rename resolves beneath
//! the opened root (`crate::beneath`): a symlink inside a repository that leads out of it is
//! refused (403 `outside_root`), never followed, while one that stays inside keeps working.
//! A cloned repository is untrusted input, so its symlinks must not widen the roots (issue
//! 40, finding 2). Only the node opens file roots; the hub never does.

pub(crate) mod upload;

use std::path::{Component, Path};
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::beneath::{self, Dots, Entry, Rooted};
use crate::error::{ApiError, JsonBody};
use crate::guard::{self, Transport};
use crate::state::Node;

/// Read cap for remote callers and for `read-external` (10 MB).
pub(crate) const STANDARD_READ_CAP: u64 = 10 * 1024 * 1024;
/// Read cap for loopback callers of the editor routes (250 MB).
pub(crate) const LARGE_READ_CAP: u64 = 250 * 1024 * 1024;
/// Largest image `markdown-image` serves (10 MiB).
pub(crate) const IMAGE_CAP: u64 = 10 * 1024 * 1024;

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
async fn read_gated(node: &Node, path: &str, cap: u64) -> Result<Json<Value>, ApiError> {
    let rooted = beneath::locate(path, &node.repos.roots(), Dots::Refuse)?;
    Ok(Json(blocking(move || read_capped(&rooted, cap)).await?))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
}

fn read_capped(rooted: &Rooted, cap: u64) -> Result<Value, ApiError> {
    match rooted.read_capped(cap)? {
        Ok(bytes) => Ok(json!({"content": String::from_utf8_lossy(&bytes), "size": bytes.len()})),
        Err(len) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "{} is {len} bytes; the limit for this caller is {cap}",
                rooted.shown().display()
            ),
        )),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct PathQuery {
    path: String,
}

/// `GET /fs/read-external?path=` — a text file inside a root, standard cap.
pub(crate) async fn read_external(
    State(node): State<Arc<Node>>,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, ApiError> {
    read_gated(&node, &q.path, STANDARD_READ_CAP).await
}

/// `GET /fs/read-editor-external?path=` — 250 MB for loopback callers, 10 MB for remote ones.
pub(crate) async fn read_editor_external(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, ApiError> {
    read_gated(&node, &q.path, editor_cap(transport, &headers)).await
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RepoFileQuery {
    repo_path: String,
    file: String,
}

/// `GET /fs/read-editor?repoPath=&file=` — a file relative to a repository, capped per caller.
pub(crate) async fn read_editor(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
    Query(q): Query<RepoFileQuery>,
) -> Result<Json<Value>, ApiError> {
    let joined = Path::new(&q.repo_path).join(&q.file);
    read_gated(
        &node,
        &joined.to_string_lossy(),
        editor_cap(transport, &headers),
    )
    .await
}

#[derive(Debug, Deserialize)]
pub(crate) struct WriteBody {
    path: String,
    content: String,
}

/// `POST /fs/write-external {path, content}` — creates or truncates a file beneath its root.
pub(crate) async fn write_external(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<WriteBody>,
) -> Result<Json<Value>, ApiError> {
    let rooted = beneath::locate(&b.path, &node.repos.roots(), Dots::Refuse)?;
    blocking(move || rooted.write(b.content.as_bytes())).await?;
    Ok(Json(json!({"ok": true})))
}

#[derive(Debug, Deserialize)]
pub(crate) struct CopyBody {
    src: String,
    dest: String,
}

/// Locates `src` and `dest` (both inside roots) as entries of their parent directories.
fn gated_pair(node: &Node, b: &CopyBody) -> Result<(Entry, Entry), ApiError> {
    let roots = node.repos.roots();
    let src = beneath::locate(&b.src, &roots, Dots::Refuse)?;
    let dest = beneath::locate(&b.dest, &roots, Dots::Refuse)?;
    Ok((src.entry()?, dest.entry()?))
}

/// `POST /fs/copy-abs {src, dest}` — both inside roots; directories copy recursively.
pub(crate) async fn copy_abs(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<CopyBody>,
) -> Result<Json<Value>, ApiError> {
    blocking(move || {
        let (src, dest) = gated_pair(&node, &b)?;
        beneath::copy_entry(&src, &dest.parent, &dest.name, &dest.shown)
    })
    .await?;
    Ok(Json(json!({"ok": true})))
}

/// `POST /fs/move-abs {src, dest}` — both inside roots; never replaces an existing `dest`.
pub(crate) async fn move_abs(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<CopyBody>,
) -> Result<Json<Value>, ApiError> {
    blocking(move || {
        let (src, dest) = gated_pair(&node, &b)?;
        beneath::move_entry(&src, &dest.parent, &dest.name, &dest.shown)
    })
    .await?;
    Ok(Json(json!({"ok": true})))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TransferBody {
    paths: Vec<String>,
    dest_dir: String,
    #[serde(default)]
    mode: Option<String>,
}

/// A `/fs/transfer` source: any absolute path for a loopback caller, inside a root otherwise.
enum Source {
    Local(std::path::PathBuf),
    Rooted(Rooted),
}

/// `POST /fs/transfer {paths, destDir, mode?: "copy"|"move"}` — `destDir` passes the gate and
/// is written beneath its root. Sources must be absolute without `..`; a remote caller's
/// sources must also lie in roots (and are read beneath them), so an HTTP token can never pull
/// arbitrary files of this machine into a repository.
pub(crate) async fn transfer(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<TransferBody>,
) -> Result<Json<Value>, ApiError> {
    let roots = node.repos.roots();
    let dest_dir = beneath::locate(&b.dest_dir, &roots, Dots::Refuse)?;
    let is_local = loopback(transport, &headers);
    let mut sources = Vec::new();
    for s in &b.paths {
        let src = if is_local {
            let p = Path::new(s);
            if s.contains('\0')
                || !p.is_absolute()
                || p.components().any(|c| matches!(c, Component::ParentDir))
            {
                return Err(ApiError::forbidden(format!("invalid source path {s}")));
            }
            Source::Local(p.to_path_buf())
        } else {
            Source::Rooted(beneath::locate(s, &roots, Dots::Refuse)?)
        };
        sources.push(src);
    }
    let moving = match b.mode.as_deref() {
        None | Some("copy") => false,
        Some("move") => true,
        Some(m) => return Err(ApiError::bad_request(format!("unknown mode {m}"))),
    };
    let done = blocking(move || {
        let dest = dest_dir.open_dir()?;
        let mut out = Vec::new();
        for src in sources {
            let entry = match &src {
                Source::Local(p) => Entry::ambient(p)?,
                Source::Rooted(r) => r.entry()?,
            };
            let shown = dest_dir.shown().join(&entry.name);
            if moving {
                beneath::move_entry(&entry, &dest, &entry.name, &shown)?;
            } else {
                beneath::copy_entry(&entry, &dest, &entry.name, &shown)?;
            }
            out.push(shown.to_string_lossy().into_owned());
        }
        Ok(out)
    })
    .await?;
    Ok(Json(json!({"ok": true, "paths": done})))
}

fn image_type(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "avif" => "image/avif",
        "bmp" => "image/bmp",
        "ico" => "image/x-icon",
        _ => return None,
    })
}

/// `GET /fs/markdown-image?repoPath=&file=` — an image ≤ 10 MiB inside a registered
/// repository, read beneath it, so a symlink (or `..`) cannot lead outside.
pub(crate) async fn markdown_image(
    State(node): State<Arc<Node>>,
    Query(q): Query<RepoFileQuery>,
) -> Result<Response, ApiError> {
    let roots = node.repos.roots();
    blocking(move || {
        let repo = Path::new(&q.repo_path)
            .canonicalize()
            .map_err(|_| ApiError::not_found("unknown repository"))?;
        if !roots.contains(&repo) {
            return Err(ApiError::forbidden("not a registered repository"));
        }
        if q.file.contains('\0') {
            return Err(ApiError::bad_request("file contains a NUL byte"));
        }
        let file = Path::new(&q.file);
        let rel = if file.is_absolute() {
            file.strip_prefix(&repo)
                .map_err(|_| ApiError::forbidden("image is outside the repository"))?
        } else {
            file
        };
        let ct = image_type(rel).ok_or_else(|| ApiError::bad_request("not an image file"))?;
        let rooted = beneath::within(&repo, rel)?;
        match rooted.read_capped(IMAGE_CAP)? {
            Ok(bytes) => Ok(([(CONTENT_TYPE, ct)], bytes).into_response()),
            Err(_) => Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                "image larger than 10 MiB",
            )),
        }
    })
    .await
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LinkBody {
    /// The Markdown file the link appears in (absolute), or a directory to resolve from.
    base_path: String,
    /// The link target as written.
    link: String,
}

/// `POST /fs/resolve-markdown-link {basePath, link}` — target metadata only, never content,
/// and only beneath a registered root: a base or target outside every root, or one reached
/// through a symlink out of its root, is refused with 403 before anything is probed there, so
/// the answer says nothing about the world outside the roots. UNC paths are refused before
/// anything touches the file system. `path` is the lexical target (not canonicalized).
pub(crate) async fn resolve_markdown_link(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<LinkBody>,
) -> Result<Json<Value>, ApiError> {
    let link = b.link.split(['#', '?']).next().unwrap_or("").to_owned();
    if link.starts_with("\\\\")
        || link.starts_with("//")
        || b.base_path.starts_with("\\\\")
        || b.base_path.starts_with("//")
    {
        return Err(ApiError::bad_request("UNC paths are not resolved"));
    }
    if link.contains('\0') || link.contains("://") || link.is_empty() {
        return Err(ApiError::bad_request("not a local file link"));
    }
    if !Path::new(&b.base_path).is_absolute() {
        return Err(ApiError::bad_request("basePath must be absolute"));
    }
    let roots = node.repos.roots();
    let base = beneath::locate(&b.base_path, &roots, Dots::Beneath)?;
    blocking(move || {
        let base_path = base.shown();
        let dir = if base.metadata().is_ok_and(|m| m.is_dir()) {
            base_path.clone()
        } else {
            base_path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or(base_path.clone())
        };
        let target = dir.join(&link);
        let rooted = beneath::locate(&target.to_string_lossy(), &roots, Dots::Beneath)?;
        let meta = match rooted.metadata() {
            Ok(m) => Some(m),
            Err(e) if beneath::is_escape(&e) => return Err(beneath::outside(&target)),
            Err(_) => None,
        };
        let mut v = json!({
            "path": target.to_string_lossy(),
            "exists": meta.is_some(),
            "is_dir": meta.as_ref().is_some_and(|m| m.is_dir()),
        });
        if let Some(m) = meta.as_ref().filter(|m| m.is_file()) {
            v["size"] = json!(m.len());
        }
        Ok(Json(v))
    })
    .await
}
