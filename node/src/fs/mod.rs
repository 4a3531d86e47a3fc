//! Root-gated file access (served over HTTP by `routes::files`): every path a caller names must lie inside a registered repository,
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

use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};

use crate::beneath::{self, Dots, Entry, Rooted};
use crate::error::ApiError;

/// Read cap for remote callers and for `read-external` (10 MB).
pub(crate) const STANDARD_READ_CAP: u64 = 10 * 1024 * 1024;
/// Read cap for loopback callers of the editor routes (250 MB).
pub(crate) const LARGE_READ_CAP: u64 = 250 * 1024 * 1024;
/// Largest image `markdown-image` serves (10 MiB).
pub(crate) const IMAGE_CAP: u64 = 10 * 1024 * 1024;

/// Gates `path`, then reads it beneath its root within `cap` (blocking):
/// `{content, size}`.
pub(crate) fn read(roots: &[PathBuf], path: &str, cap: u64) -> Result<Value, ApiError> {
    let rooted = beneath::locate(path, roots, Dots::Refuse)?;
    match rooted.read_capped(cap)? {
        Ok(bytes) => Ok(json!({"content": String::from_utf8_lossy(&bytes), "size": bytes.len()})),
        Err(len) => Err(ApiError::too_large(format!(
            "{} is {len} bytes; the limit for this caller is {cap}",
            rooted.shown().display()
        ))),
    }
}

/// Creates or truncates a file beneath its root (blocking).
pub(crate) fn write(roots: &[PathBuf], path: &str, content: &[u8]) -> Result<(), ApiError> {
    beneath::locate(path, roots, Dots::Refuse)?.write(content)
}

/// Locates `src` and `dest` (both inside roots) as entries of their parent directories.
fn gated_pair(roots: &[PathBuf], src: &str, dest: &str) -> Result<(Entry, Entry), ApiError> {
    let src = beneath::locate(src, roots, Dots::Refuse)?;
    let dest = beneath::locate(dest, roots, Dots::Refuse)?;
    Ok((src.entry()?, dest.entry()?))
}

/// Copies `src` to `dest`, both inside roots; directories copy recursively (blocking).
pub(crate) fn copy(roots: &[PathBuf], src: &str, dest: &str) -> Result<(), ApiError> {
    let (src, dest) = gated_pair(roots, src, dest)?;
    beneath::copy_entry(&src, &dest.parent, &dest.name, &dest.shown)
}

/// Moves `src` to `dest`, both inside roots; never replaces an existing `dest` (blocking).
pub(crate) fn rename(roots: &[PathBuf], src: &str, dest: &str) -> Result<(), ApiError> {
    let (src, dest) = gated_pair(roots, src, dest)?;
    beneath::move_entry(&src, &dest.parent, &dest.name, &dest.shown)
}

/// One transfer request: sources, a destination directory and `copy` (default) or `move`.
#[derive(Debug)]
pub(crate) struct Transfer<'a> {
    /// Absolute source paths.
    pub paths: &'a [String],
    /// The destination directory (inside a root).
    pub dest_dir: &'a str,
    /// `None`/`"copy"` or `"move"`.
    pub mode: Option<&'a str>,
    /// Whether the caller is on this machine (its sources may lie outside the roots).
    pub local: bool,
}

/// A transfer source: any absolute path for a loopback caller, inside a root otherwise.
enum Source {
    Local(PathBuf),
    Rooted(Rooted),
}

/// A checked transfer, ready to run on the blocking pool ([`Checked::run`]).
pub(crate) struct Checked {
    dest_dir: Rooted,
    sources: Vec<Source>,
    moving: bool,
}

/// Checks a transfer before anything is written: `destDir` passes the gate; sources must be
/// absolute without `..`; a remote caller's sources must also lie in roots (and are read
/// beneath them), so an HTTP token can never pull arbitrary files of this machine into a
/// repository.
pub(crate) fn check_transfer(roots: &[PathBuf], t: &Transfer<'_>) -> Result<Checked, ApiError> {
    let dest_dir = beneath::locate(t.dest_dir, roots, Dots::Refuse)?;
    let mut sources = Vec::new();
    for s in t.paths {
        let src = if t.local {
            let p = Path::new(s);
            if s.contains('\0')
                || !p.is_absolute()
                || p.components().any(|c| matches!(c, Component::ParentDir))
            {
                return Err(ApiError::forbidden(format!("invalid source path {s}")));
            }
            Source::Local(p.to_path_buf())
        } else {
            Source::Rooted(beneath::locate(s, roots, Dots::Refuse)?)
        };
        sources.push(src);
    }
    let moving = match t.mode {
        None | Some("copy") => false,
        Some("move") => true,
        Some(m) => return Err(ApiError::bad_request(format!("unknown mode {m}"))),
    };
    Ok(Checked {
        dest_dir,
        sources,
        moving,
    })
}

impl Checked {
    /// Copies or moves every source into the destination (blocking); the paths written.
    pub(crate) fn run(self) -> Result<Vec<String>, ApiError> {
        let dest = self.dest_dir.open_dir()?;
        let mut out = Vec::new();
        for src in self.sources {
            let entry = match &src {
                Source::Local(p) => Entry::ambient(p)?,
                Source::Rooted(r) => r.entry()?,
            };
            let shown = self.dest_dir.shown().join(&entry.name);
            if self.moving {
                beneath::move_entry(&entry, &dest, &entry.name, &shown)?;
            } else {
                beneath::copy_entry(&entry, &dest, &entry.name, &shown)?;
            }
            out.push(shown.to_string_lossy().into_owned());
        }
        Ok(out)
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

/// An image ≤ 10 MiB inside the registered repository `repo_path`, read beneath it, so a
/// symlink (or `..`) cannot lead outside (blocking): its content type and bytes.
pub(crate) fn markdown_image(
    roots: &[PathBuf],
    repo_path: &str,
    file: &str,
) -> Result<(&'static str, Vec<u8>), ApiError> {
    let repo = Path::new(repo_path)
        .canonicalize()
        .map_err(|_| ApiError::not_found("unknown repository"))?;
    if !roots.contains(&repo) {
        return Err(ApiError::forbidden("not a registered repository"));
    }
    if file.contains('\0') {
        return Err(ApiError::bad_request("file contains a NUL byte"));
    }
    let file = Path::new(file);
    let rel = if file.is_absolute() {
        file.strip_prefix(&repo)
            .map_err(|_| ApiError::forbidden("image is outside the repository"))?
    } else {
        file
    };
    let ct = image_type(rel).ok_or_else(|| ApiError::bad_request("not an image file"))?;
    let rooted = beneath::within(&repo, rel)?;
    match rooted.read_capped(IMAGE_CAP)? {
        Ok(bytes) => Ok((ct, bytes)),
        Err(_) => Err(ApiError::too_large("image larger than 10 MiB")),
    }
}

/// The lexical checks of a Markdown link before anything touches the file system: UNC paths,
/// non-local links and a relative base are refused. The link without its fragment or query.
fn link_target(base_path: &str, link: &str) -> Result<String, ApiError> {
    let link = link.split(['#', '?']).next().unwrap_or("").to_owned();
    if link.starts_with("\\\\")
        || link.starts_with("//")
        || base_path.starts_with("\\\\")
        || base_path.starts_with("//")
    {
        return Err(ApiError::bad_request("UNC paths are not resolved"));
    }
    if link.contains('\0') || link.contains("://") || link.is_empty() {
        return Err(ApiError::bad_request("not a local file link"));
    }
    if !Path::new(base_path).is_absolute() {
        return Err(ApiError::bad_request("basePath must be absolute"));
    }
    Ok(link)
}

/// Resolves `link` from `base_path` (a Markdown file, or a directory to resolve from) —
/// target metadata only, never content, and only beneath a registered root: a base or target
/// outside every root, or one reached through a symlink out of its root, is refused with 403
/// before anything is probed there, so the answer says nothing about the world outside the
/// roots. UNC paths are refused before anything touches the file system. `path` is the
/// lexical target (not canonicalized). Blocking.
pub(crate) fn resolve_markdown_link(
    roots: &[PathBuf],
    base_path: &str,
    link: &str,
) -> Result<Value, ApiError> {
    let link = link_target(base_path, link)?;
    let base = beneath::locate(base_path, roots, Dots::Beneath)?;
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
    let rooted = beneath::locate(&target.to_string_lossy(), roots, Dots::Beneath)?;
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
    Ok(v)
}
