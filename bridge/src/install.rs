//! `tuic-bridge install`: publishes this binary into `<config_dir>/mcp-bridge/<sha256>/`, so
//! agent MCP configs can point at a path that cargo cleans, rebuilds and upgrades never remove.
//!
//! Publication is atomic and verified: the source is hashed before copying; the copy goes to
//! a temporary file in the destination directory, gets its executable bit, and is renamed into
//! place only when both the copy and a second read of the source match that hash. Identical
//! bytes reuse the published file; a different build gets its own revision directory and old
//! revisions stay for the agents still running them. Not here (yet): migrating Claude Code and
//! Codex MCP configs to the published path.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

/// File name of the published binary inside its revision directory.
pub const BINARY_NAME: &str = "tuic-bridge";

/// The result of [`publish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The published executable.
    pub path: PathBuf,
    /// True when an identical copy was already published.
    pub reused: bool,
}

fn sha256_file(path: &Path) -> anyhow::Result<(String, Vec<u8>)> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok((hex::encode(Sha256::digest(&bytes)), bytes))
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Where [`publish`] would put `source`: `<config_dir>/mcp-bridge/<sha256>/tuic-bridge`.
pub fn published_path(source: &Path, config_dir: &Path) -> anyhow::Result<PathBuf> {
    let (hash, _) = sha256_file(source)?;
    Ok(config_dir.join("mcp-bridge").join(hash).join(BINARY_NAME))
}

/// Publishes `source` under `<config_dir>/mcp-bridge/<sha256>/tuic-bridge`.
pub fn publish(source: &Path, config_dir: &Path) -> anyhow::Result<Published> {
    let (hash, bytes) = sha256_file(source)?;
    let dir = config_dir.join("mcp-bridge").join(&hash);
    let dest = dir.join(BINARY_NAME);
    if is_executable(&dest) && sha256_file(&dest).is_ok_and(|(existing, _)| existing == hash) {
        return Ok(Published {
            path: dest,
            reused: true,
        });
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{BINARY_NAME}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(&bytes)?;
        f.set_permissions(fs::Permissions::from_mode(0o755))?;
        f.sync_all()?;
        drop(f);
        let (again, _) = sha256_file(source)?;
        if again != hash {
            bail!("{} changed while it was being copied", source.display());
        }
        let (copied, _) = sha256_file(&tmp)?;
        if copied != hash {
            bail!("the copy at {} does not match its source", tmp.display());
        }
        fs::rename(&tmp, &dest).with_context(|| format!("publishing {}", dest.display()))?;
        if let Ok(d) = fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| Published {
        path: dest,
        reused: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_bytes_reuse_and_new_bytes_add_a_revision() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        fs::write(&src, b"#!/bin/sh\necho one\n").unwrap();
        let cfg = t.path().join("cfg");
        let first = publish(&src, &cfg).unwrap();
        assert!(!first.reused);
        assert!(is_executable(&first.path));
        assert_eq!(fs::read(&first.path).unwrap(), fs::read(&src).unwrap());
        let again = publish(&src, &cfg).unwrap();
        assert_eq!(again.path, first.path);
        assert!(again.reused);
        fs::write(&src, b"#!/bin/sh\necho two\n").unwrap();
        let second = publish(&src, &cfg).unwrap();
        assert_ne!(second.path, first.path);
        assert_eq!(fs::read(&first.path).unwrap(), b"#!/bin/sh\necho one\n");
        let revisions = fs::read_dir(cfg.join("mcp-bridge")).unwrap().count();
        assert_eq!(revisions, 2);
        // No temporary files are left behind.
        for rev in fs::read_dir(cfg.join("mcp-bridge")).unwrap() {
            let names: Vec<_> = fs::read_dir(rev.unwrap().path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, vec![std::ffi::OsString::from(BINARY_NAME)]);
        }
    }

    #[test]
    fn a_damaged_published_copy_is_replaced() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        fs::write(&src, b"binary").unwrap();
        let cfg = t.path().join("cfg");
        let p = publish(&src, &cfg).unwrap();
        fs::write(&p.path, b"damaged").unwrap();
        let q = publish(&src, &cfg).unwrap();
        assert!(!q.reused);
        assert_eq!(fs::read(&q.path).unwrap(), b"binary");
    }
}
