//! Root-gated file routes: every path a caller names must lie inside a registered repository.
//!
//! The gate is lexical, as the spec says: NUL, relative paths and `..` components are refused
//! before the `starts_with` containment check, and paths are not canonicalized (a symlink
//! placed inside a registered repository is an accepted design decision). Routes that must
//! not follow symlinks out (`markdown-image`) canonicalize and re-check. Only the node opens
//! file roots; the hub never does.

pub(crate) mod upload;

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{ApiError, JsonBody};
use crate::guard::{self, Transport};
use crate::state::Node;

/// Read cap for remote callers and for `read-external` (10 MB).
pub(crate) const STANDARD_READ_CAP: u64 = 10 * 1024 * 1024;
/// Read cap for loopback callers of the editor routes (250 MB).
pub(crate) const LARGE_READ_CAP: u64 = 250 * 1024 * 1024;
/// Largest image `markdown-image` serves (10 MiB).
pub(crate) const IMAGE_CAP: u64 = 10 * 1024 * 1024;

/// The traversal gate shared by the absolute-path routes.
pub(crate) fn deny_unless_in_roots(path: &str, roots: &[PathBuf]) -> Result<PathBuf, ApiError> {
    if path.contains('\0') {
        return Err(ApiError::forbidden("path contains a NUL byte"));
    }
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(ApiError::forbidden("path must be absolute"));
    }
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(ApiError::forbidden("path must not contain '..'"));
    }
    if !roots.iter().any(|r| p.starts_with(r)) {
        return Err(ApiError::forbidden(
            "path is outside every registered repository",
        ));
    }
    Ok(p.to_path_buf())
}

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

/// Gates `path`, then reads it off the async workers within `cap`.
async fn read_gated(node: &Node, path: &str, cap: u64) -> Result<Json<Value>, ApiError> {
    let p = deny_unless_in_roots(path, &node.repos.roots())?;
    Ok(Json(blocking(move || read_capped(&p, cap)).await?))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
}

fn io_error(path: &Path, e: std::io::Error) -> ApiError {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            ApiError::not_found(format!("{} does not exist", path.display()))
        }
        std::io::ErrorKind::AlreadyExists => {
            ApiError::conflict(format!("{} already exists", path.display()))
        }
        _ => ApiError::internal(format!("{}: {e}", path.display())),
    }
}

fn read_capped(path: &Path, cap: u64) -> Result<Value, ApiError> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, e))?;
    if !meta.is_file() {
        return Err(ApiError::bad_request(format!(
            "{} is not a file",
            path.display()
        )));
    }
    if meta.len() > cap {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "{} is {} bytes; the limit for this caller is {cap}",
                path.display(),
                meta.len()
            ),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| io_error(path, e))?;
    Ok(json!({"content": String::from_utf8_lossy(&bytes), "size": meta.len()}))
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

/// `POST /fs/write-external {path, content}`.
pub(crate) async fn write_external(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<WriteBody>,
) -> Result<Json<Value>, ApiError> {
    let p = deny_unless_in_roots(&b.path, &node.repos.roots())?;
    blocking(move || std::fs::write(&p, b.content.as_bytes()).map_err(|e| io_error(&p, e))).await?;
    Ok(Json(json!({"ok": true})))
}

#[derive(Debug, Deserialize)]
pub(crate) struct CopyBody {
    src: String,
    dest: String,
}

/// `POST /fs/copy-abs {src, dest}` — both inside roots; directories copy recursively.
pub(crate) async fn copy_abs(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<CopyBody>,
) -> Result<Json<Value>, ApiError> {
    let roots = node.repos.roots();
    let src = deny_unless_in_roots(&b.src, &roots)?;
    let dest = deny_unless_in_roots(&b.dest, &roots)?;
    blocking(move || copy_tree(&src, &dest)).await?;
    Ok(Json(json!({"ok": true})))
}

/// `POST /fs/move-abs {src, dest}` — both inside roots.
pub(crate) async fn move_abs(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<CopyBody>,
) -> Result<Json<Value>, ApiError> {
    let roots = node.repos.roots();
    let src = deny_unless_in_roots(&b.src, &roots)?;
    let dest = deny_unless_in_roots(&b.dest, &roots)?;
    blocking(move || {
        if std::fs::symlink_metadata(&dest).is_ok() {
            return Err(ApiError::conflict(format!(
                "{} already exists",
                dest.display()
            )));
        }
        std::fs::rename(&src, &dest).map_err(|e| io_error(&src, e))
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

/// `POST /fs/transfer {paths, destDir, mode?: "copy"|"move"}` — `destDir` passes the gate.
/// Sources must be absolute without `..`; a remote caller's sources must also lie in roots,
/// so an HTTP token can never pull arbitrary files of this machine into a repository.
pub(crate) async fn transfer(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
    JsonBody(b): JsonBody<TransferBody>,
) -> Result<Json<Value>, ApiError> {
    let roots = node.repos.roots();
    let dest_dir = deny_unless_in_roots(&b.dest_dir, &roots)?;
    let is_local = loopback(transport, &headers);
    let mut sources = Vec::new();
    for s in &b.paths {
        let p = if is_local {
            let p = Path::new(s);
            if s.contains('\0')
                || !p.is_absolute()
                || p.components().any(|c| matches!(c, Component::ParentDir))
            {
                return Err(ApiError::forbidden(format!("invalid source path {s}")));
            }
            p.to_path_buf()
        } else {
            deny_unless_in_roots(s, &roots)?
        };
        sources.push(p);
    }
    let moving = match b.mode.as_deref() {
        None | Some("copy") => false,
        Some("move") => true,
        Some(m) => return Err(ApiError::bad_request(format!("unknown mode {m}"))),
    };
    let done = blocking(move || {
        let mut out = Vec::new();
        for src in sources {
            let name = src
                .file_name()
                .ok_or_else(|| ApiError::bad_request("source has no name"))?;
            let dest = dest_dir.join(name);
            if std::fs::symlink_metadata(&dest).is_ok() {
                return Err(ApiError::conflict(format!(
                    "{} already exists",
                    dest.display()
                )));
            }
            if moving {
                std::fs::rename(&src, &dest).map_err(|e| io_error(&src, e))?;
            } else {
                copy_tree(&src, &dest)?;
            }
            out.push(dest.to_string_lossy().into_owned());
        }
        Ok(out)
    })
    .await?;
    Ok(Json(json!({"ok": true, "paths": done})))
}

/// Copies a file or a directory tree; symlinks are recreated, never followed.
fn copy_tree(src: &Path, dest: &Path) -> Result<(), ApiError> {
    let meta = std::fs::symlink_metadata(src).map_err(|e| io_error(src, e))?;
    if std::fs::symlink_metadata(dest).is_ok() {
        return Err(ApiError::conflict(format!(
            "{} already exists",
            dest.display()
        )));
    }
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(src).map_err(|e| io_error(src, e))?;
        std::os::unix::fs::symlink(target, dest).map_err(|e| io_error(dest, e))
    } else if meta.is_dir() {
        std::fs::create_dir(dest).map_err(|e| io_error(dest, e))?;
        for entry in std::fs::read_dir(src).map_err(|e| io_error(src, e))? {
            let entry = entry.map_err(|e| io_error(src, e))?;
            copy_tree(&entry.path(), &dest.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(src, dest)
            .map(|_| ())
            .map_err(|e| io_error(src, e))
    }
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
/// repository, after canonicalizing both, so a symlink cannot lead outside.
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
        let file = Path::new(&q.file);
        let joined = if file.is_absolute() {
            file.to_path_buf()
        } else {
            repo.join(file)
        };
        let real = joined.canonicalize().map_err(|e| io_error(&joined, e))?;
        if !real.starts_with(&repo) {
            return Err(ApiError::forbidden("image is outside the repository"));
        }
        let ct = image_type(&real).ok_or_else(|| ApiError::bad_request("not an image file"))?;
        let meta = std::fs::metadata(&real).map_err(|e| io_error(&real, e))?;
        if !meta.is_file() || meta.len() > IMAGE_CAP {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                "image larger than 10 MiB",
            ));
        }
        let bytes = std::fs::read(&real).map_err(|e| io_error(&real, e))?;
        Ok(([(CONTENT_TYPE, ct)], bytes).into_response())
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

/// `POST /fs/resolve-markdown-link {basePath, link}` — target metadata only, never content.
/// UNC paths are refused before anything touches the file system.
pub(crate) async fn resolve_markdown_link(
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
    let base = PathBuf::from(&b.base_path);
    if !base.is_absolute() {
        return Err(ApiError::bad_request("basePath must be absolute"));
    }
    blocking(move || {
        let dir = if base.is_dir() {
            base.clone()
        } else {
            base.parent().map(Path::to_path_buf).unwrap_or(base.clone())
        };
        let target = if Path::new(&link).is_absolute() {
            PathBuf::from(&link)
        } else {
            dir.join(&link)
        };
        let meta = std::fs::metadata(&target).ok();
        Ok(json!({
            "path": target.to_string_lossy(),
            "exists": meta.is_some(),
            "is_dir": meta.as_ref().is_some_and(|m| m.is_dir()),
            "size": meta.as_ref().filter(|m| m.is_file()).map(|m| m.len()),
        }))
    })
    .await
    .map(|mut v| {
        if v["size"].is_null() {
            v.as_object_mut().map(|o| o.remove("size"));
        }
        Json(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_table() {
        let roots = vec![PathBuf::from("/repo")];
        assert!(deny_unless_in_roots("/repo/a/b.txt", &roots).is_ok());
        assert!(deny_unless_in_roots("/repo", &roots).is_ok());
        for bad in [
            "/repo/../../etc/passwd",
            "/repo/a/../../x",
            "repo/a",
            "a",
            "/repo\0/a",
            "/repository/a",
            "/etc/passwd",
            "",
        ] {
            assert_eq!(
                deny_unless_in_roots(bad, &roots).unwrap_err().status,
                StatusCode::FORBIDDEN,
                "{bad:?}"
            );
        }
    }
}
