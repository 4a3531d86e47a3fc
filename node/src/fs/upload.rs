//! The upload receiver behind `POST /fs/upload-copy` (served by `routes::files`): receive a
//! tar stream and publish its one top-level entry inside a registered repository.
//!
//! The root is opened through `cap-std` directory handles, so nothing the archive says can
//! reach outside it. Entries are validated one by one (relative, no `..`, regular files and
//! directories only: no links of any kind, no devices), bytes and entries are bounded, and the
//! archive is extracted into a disposable staging directory inside the root. Publication is an
//! atomic no-replace rename; a failure anywhere removes the staging directory, so the root is
//! exactly as before. This route is exempt from the body limit and the request deadline and
//! has its own: a 30 s idle deadline per chunk, and a concurrency permit held through the
//! blocking extraction. It never makes this node send data away.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use cap_std::fs::Dir;

/// Directory inside each root that holds uploads in progress.
pub(crate) const STAGING_DIR: &str = ".tuic-staging";

/// Bounds of one upload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Total bytes of file content.
    pub max_bytes: u64,
    /// Number of entries.
    pub max_entries: u64,
    /// Longest wait for the next body chunk.
    pub idle: Duration,
}

/// Why an upload failed; each maps to a 4xx/5xx with a clear message.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The archive is malformed or contains a forbidden entry.
    #[error("rejected archive: {0}")]
    Rejected(String),
    /// The destination leads outside the root (a symlink out of it).
    #[error("{0}")]
    Outside(String),
    /// Bytes or entries over the bounds.
    #[error("archive too large: {0}")]
    TooLarge(String),
    /// The top-level name already exists at the destination.
    #[error("{0} already exists at the destination")]
    Exists(String),
    /// The sender went quiet past the idle deadline.
    #[error("no data for {0:?}; upload abandoned")]
    Idle(Duration),
    /// A local file-system failure.
    #[error("upload failed: {0}")]
    Io(String),
}

/// What a successful upload published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Published {
    /// Top-level name.
    pub name: String,
    /// File content bytes.
    pub bytes: u64,
    /// Entries (files and directories).
    pub entries: u64,
}

/// Validates a destination directory relative to the root ("" is the root itself).
pub(crate) fn relative_dir(dest: &str) -> Result<PathBuf, String> {
    if dest.contains('\0') {
        return Err("dest contains a NUL byte".into());
    }
    let p = Path::new(dest.trim_start_matches("./"));
    if p.is_absolute() {
        return Err("dest must be relative to the root".into());
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return Err("dest must not contain '..'".into()),
        }
    }
    Ok(out)
}

/// Validates one archive path: relative, Normal components only, at least one.
fn entry_path(p: &Path) -> Result<PathBuf, UploadError> {
    if p.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(UploadError::Rejected(
            "entry path contains a NUL byte".into(),
        ));
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(UploadError::Rejected(format!(
                    "entry {} contains '..'",
                    p.display()
                )));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(UploadError::Rejected(format!(
                    "entry {} is absolute",
                    p.display()
                )));
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(UploadError::Rejected("entry with an empty path".into()));
    }
    Ok(out)
}

/// Receives an archive into `root/dest` (blocking). On any error the root is left as before.
pub(crate) fn receive(
    root: &Path,
    dest: &Path,
    reader: impl Read,
    limits: Limits,
) -> Result<Published, UploadError> {
    let io = |what: &str, e: std::io::Error| UploadError::Io(format!("{what}: {e}"));
    let root_dir = crate::beneath::open_root(root).map_err(|e| io("opening the root", e))?;
    let dest_dir = if dest.as_os_str().is_empty() {
        root_dir
            .try_clone()
            .map_err(|e| io("opening the destination", e))?
    } else {
        root_dir.open_dir(dest).map_err(|e| {
            if crate::beneath::is_escape(&e) {
                return UploadError::Outside(crate::beneath::outside(&root.join(dest)).message);
            }
            UploadError::Rejected(format!(
                "destination {} is not a directory in the root: {e}",
                dest.display()
            ))
        })?
    };
    let id = uuid::Uuid::new_v4().to_string();
    // Another upload's cleanup may remove an empty staging dir between our two steps: retry.
    let mut attempt = 0;
    let staging = loop {
        attempt += 1;
        match root_dir.symlink_metadata(STAGING_DIR) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(UploadError::Io(format!(
                    "{STAGING_DIR} in the root is not a directory"
                )));
            }
            Err(_) => match root_dir.create_dir(STAGING_DIR) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("creating the staging dir", e)),
            },
        }
        let staging = root_dir
            .open_dir(STAGING_DIR)
            .map_err(|e| io("opening the staging dir", e));
        match staging.and_then(|s| {
            s.create_dir(&id)
                .map(|()| s)
                .map_err(|e| io("creating the upload dir", e))
        }) {
            Ok(s) => break s,
            Err(e) if attempt >= 3 => return Err(e),
            Err(_) => continue,
        }
    };
    let stage = staging
        .open_dir(&id)
        .map_err(|e| io("opening the upload dir", e))?;
    let result = extract(&stage, reader, limits).and_then(|(published, dir_modes)| {
        // Directory modes go on last, deepest first, so a read-only directory in the archive
        // never blocks writing into it; the top-level one after the rename that moves it.
        let top = Path::new(&published.name);
        for (path, mode) in dir_modes.iter().rev().filter(|(p, _)| p != top) {
            set_mode(&stage, path, *mode)?;
        }
        publish(&stage, &dest_dir, &published.name)?;
        if let Some((_, mode)) = dir_modes.iter().find(|(p, _)| p == top) {
            set_mode(&dest_dir, top, *mode)?;
        }
        Ok(published)
    });
    drop(stage);
    remove_staged(&staging, Path::new(&id));
    // Leave no trace when no other upload is in progress (fails harmlessly when one is).
    let _ = root_dir.remove_dir(STAGING_DIR);
    result
}

type DirModes = Vec<(PathBuf, u32)>;

fn extract(
    stage: &Dir,
    reader: impl Read,
    limits: Limits,
) -> Result<(Published, DirModes), UploadError> {
    let mut archive = tar::Archive::new(reader);
    let mut top: Option<std::ffi::OsString> = None;
    let (mut bytes, mut entries) = (0u64, 0u64);
    let mut dir_modes = Vec::new();
    let bad = |e: std::io::Error| UploadError::Rejected(format!("unreadable archive: {e}"));
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let kind = entry.header().entry_type();
        if kind == tar::EntryType::XGlobalHeader {
            continue;
        }
        let path = entry_path(&entry.path().map_err(bad)?)?;
        entries += 1;
        if entries > limits.max_entries {
            return Err(UploadError::TooLarge(format!(
                "more than {} entries",
                limits.max_entries
            )));
        }
        let first = path
            .components()
            .next()
            .map(|c| c.as_os_str().to_owned())
            .expect("non-empty path");
        match &top {
            None => top = Some(first),
            Some(t) if *t == first => {}
            Some(t) => {
                return Err(UploadError::Rejected(format!(
                    "archive has more than one top-level entry ({} and {})",
                    t.to_string_lossy(),
                    first.to_string_lossy()
                )));
            }
        }
        let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
        let write = |what: &str, e: std::io::Error| match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                UploadError::Rejected(format!("duplicate entry {}", path.display()))
            }
            _ => UploadError::Rejected(format!("{what} {}: {e}", path.display())),
        };
        match kind {
            tar::EntryType::Directory => {
                stage
                    .create_dir_all(&path)
                    .map_err(|e| write("creating", e))?;
                dir_modes.push((path.clone(), mode));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.header().size().map_err(bad)?;
                if bytes.saturating_add(size) > limits.max_bytes {
                    return Err(UploadError::TooLarge(format!(
                        "more than {} bytes",
                        limits.max_bytes
                    )));
                }
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    stage
                        .create_dir_all(parent)
                        .map_err(|e| write("creating parent of", e))?;
                }
                let mut opts = cap_std::fs::OpenOptions::new();
                opts.write(true).create_new(true);
                let file = stage
                    .open_with(&path, &opts)
                    .map_err(|e| write("creating", e))?;
                let mut file = file.into_std();
                let copied = std::io::copy(&mut (&mut entry).take(size), &mut file).map_err(bad)?;
                if copied != size {
                    return Err(UploadError::Rejected(format!(
                        "entry {} is truncated",
                        path.display()
                    )));
                }
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(mode))
                    .map_err(|e| write("setting mode of", e))?;
                bytes += size;
            }
            other => {
                let what = match other {
                    tar::EntryType::Symlink => "symbolic link",
                    tar::EntryType::Link => "hard link",
                    tar::EntryType::Char | tar::EntryType::Block => "device",
                    tar::EntryType::Fifo => "fifo",
                    _ => "unsupported entry type",
                };
                return Err(UploadError::Rejected(format!(
                    "{what} {} is not allowed",
                    path.display()
                )));
            }
        }
    }
    let name = top.ok_or_else(|| UploadError::Rejected("empty archive".into()))?;
    let name = name
        .into_string()
        .map_err(|_| UploadError::Rejected("top-level name is not UTF-8".into()))?;
    Ok((
        Published {
            name,
            bytes,
            entries,
        },
        dir_modes,
    ))
}

fn set_mode(stage: &Dir, path: &Path, mode: u32) -> Result<(), UploadError> {
    use cap_std::fs::PermissionsExt;
    stage
        .set_permissions(path, cap_std::fs::Permissions::from_mode(mode))
        .map_err(|e| UploadError::Io(format!("setting mode of {}: {e}", path.display())))
}

/// Atomic no-replace rename of the staged top-level entry into the destination.
fn publish(stage: &Dir, dest: &Dir, name: &str) -> Result<(), UploadError> {
    match rustix::fs::renameat_with(stage, name, dest, name, rustix::fs::RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) => Err(UploadError::Exists(name.to_owned())),
        Err(e) => Err(UploadError::Io(format!("publishing {name}: {e}"))),
    }
}

/// Removes the entry `name` of the staging directory `parent`, first giving the owner access
/// to every directory inside it (a restrictive archive mode must not make cleanup fail). Works
/// through directory handles, so a symlink anywhere inside is removed, never followed.
fn remove_staged(parent: &Dir, name: &Path) {
    fn open_up(parent: &Dir, name: &Path) {
        use cap_std::fs::PermissionsExt;
        let Ok(m) = parent.symlink_metadata(name) else {
            return;
        };
        if m.is_dir() {
            let _ = parent.set_permissions(
                name,
                cap_std::fs::Permissions::from_mode(m.permissions().mode() | 0o700),
            );
            if let Ok(d) = parent.open_dir(name)
                && let Ok(rd) = d.entries()
            {
                for e in rd.flatten() {
                    open_up(&d, Path::new(&e.file_name()));
                }
            }
        }
    }
    open_up(parent, name);
    let removed = match parent.symlink_metadata(name) {
        Ok(m) if m.is_dir() => parent.remove_dir_all(name),
        Ok(_) => parent.remove_file(name),
        Err(e) => Err(e),
    };
    if let Err(e) = removed
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %name.display(), error = %e, "removing upload staging");
    }
}

/// Startup sweep: removes abandoned staging inside every root, beneath the root and never
/// following a symlinked staging directory.
pub(crate) fn sweep_staging(roots: &[PathBuf]) -> usize {
    let mut removed = 0;
    for root in roots {
        let Ok(root_dir) = crate::beneath::open_root(root) else {
            continue;
        };
        match root_dir.symlink_metadata(STAGING_DIR) {
            Ok(m) if m.is_dir() => {}
            _ => continue,
        }
        let Ok(staging) = root_dir.open_dir(STAGING_DIR) else {
            continue;
        };
        if let Ok(rd) = staging.entries() {
            for e in rd.flatten() {
                remove_staged(&staging, Path::new(&e.file_name()));
                removed += 1;
            }
        }
        let _ = root_dir.remove_dir(STAGING_DIR);
    }
    if removed > 0 {
        tracing::info!(removed, "swept abandoned upload staging");
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_bytes: 1 << 20,
            max_entries: 100,
            idle: Duration::from_secs(30),
        }
    }

    fn listing(root: &Path) -> Vec<String> {
        fn walk(base: &Path, p: &Path, out: &mut Vec<String>) {
            if let Ok(rd) = std::fs::read_dir(p) {
                for e in rd.flatten() {
                    let path = e.path();
                    out.push(
                        path.strip_prefix(base)
                            .unwrap()
                            .to_string_lossy()
                            .into_owned(),
                    );
                    if e.file_type().unwrap().is_dir() {
                        walk(base, &path, out);
                    }
                }
            }
        }
        let mut out = Vec::new();
        walk(root, root, &mut out);
        out.sort();
        out
    }

    fn header(path: &str, kind: tar::EntryType, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(0o644);
        // Write the raw name so hostile paths (absolute, `..`) reach the archive unchanged.
        let name = &mut h.as_old_mut().name;
        name[..path.len()].copy_from_slice(path.as_bytes());
        h.set_cksum();
        h
    }

    fn archive(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (p, k, data) in entries {
            let h = header(p, *k, data.len() as u64);
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn publishes_one_tree_and_refuses_a_second_copy() {
        let root = tempfile::tempdir().unwrap();
        let tar = archive(&[
            ("proj/", tar::EntryType::Directory, b""),
            ("proj/a.txt", tar::EntryType::Regular, b"hello"),
            ("proj/sub/b.bin", tar::EntryType::Regular, &[0u8, 1, 2]),
        ]);
        let p = receive(root.path(), Path::new(""), tar.as_slice(), limits()).unwrap();
        assert_eq!(
            p,
            Published {
                name: "proj".into(),
                bytes: 8,
                entries: 3
            }
        );
        assert_eq!(
            std::fs::read(root.path().join("proj/a.txt")).unwrap(),
            b"hello"
        );
        let before = listing(root.path());
        let again = receive(root.path(), Path::new(""), tar.as_slice(), limits());
        assert!(matches!(again, Err(UploadError::Exists(_))));
        assert_eq!(
            listing(root.path()),
            before,
            "a refused copy changes nothing"
        );
    }

    #[test]
    fn hostile_archives_are_rejected_and_leave_the_root_as_before() {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "traversal",
                archive(&[("../evil.txt", tar::EntryType::Regular, b"x")]),
            ),
            (
                "nested traversal",
                archive(&[("p/../../evil", tar::EntryType::Regular, b"x")]),
            ),
            (
                "absolute",
                archive(&[("/tmp/evil", tar::EntryType::Regular, b"x")]),
            ),
            (
                "symlink",
                archive(&[
                    ("p/", tar::EntryType::Directory, b""),
                    ("p/l", tar::EntryType::Symlink, b""),
                ]),
            ),
            (
                "hardlink",
                archive(&[
                    ("p/", tar::EntryType::Directory, b""),
                    ("p/h", tar::EntryType::Link, b""),
                ]),
            ),
            ("device", archive(&[("p/dev", tar::EntryType::Char, b"")])),
            ("fifo", archive(&[("p/fifo", tar::EntryType::Fifo, b"")])),
            (
                "two tops",
                archive(&[
                    ("a/x", tar::EntryType::Regular, b"1"),
                    ("b/y", tar::EntryType::Regular, b"2"),
                ]),
            ),
            (
                "duplicate",
                archive(&[
                    ("p/x", tar::EntryType::Regular, b"1"),
                    ("p/x", tar::EntryType::Regular, b"2"),
                ]),
            ),
            (
                "huge",
                archive(&[("p/big", tar::EntryType::Regular, &vec![0u8; 2 << 20])]),
            ),
            (
                "too many",
                archive(
                    &(0..150)
                        .map(|_| ("p/", tar::EntryType::Directory, &b""[..]))
                        .collect::<Vec<_>>(),
                ),
            ),
            ("truncated", {
                let mut t = archive(&[("p/x", tar::EntryType::Regular, &[7u8; 4000])]);
                t.truncate(1500);
                t
            }),
            ("garbage", vec![0xAB; 1024]),
            ("empty", Vec::new()),
        ];
        for (name, tar) in cases {
            let root = tempfile::tempdir().unwrap();
            std::fs::write(root.path().join("keep.txt"), "keep").unwrap();
            let before = listing(root.path());
            let r = receive(root.path(), Path::new(""), tar.as_slice(), limits());
            assert!(r.is_err(), "{name} was accepted");
            assert_eq!(listing(root.path()), before, "{name} changed the root");
        }
    }

    #[test]
    fn pax_path_override_is_validated() {
        let mut b = tar::Builder::new(Vec::new());
        let pax = b"path=../../escape\n";
        let rec = format!("{} {}", pax.len() + 3, std::str::from_utf8(pax).unwrap());
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::XHeader);
        h.set_path("pax").unwrap();
        h.set_size(rec.len() as u64);
        h.set_cksum();
        b.append(&h, rec.as_bytes()).unwrap();
        let mut f = tar::Header::new_ustar();
        f.set_path("safe.txt").unwrap();
        f.set_size(1);
        f.set_cksum();
        b.append(&f, &b"x"[..]).unwrap();
        let tar = b.into_inner().unwrap();
        let root = tempfile::tempdir().unwrap();
        let r = receive(root.path(), Path::new(""), tar.as_slice(), limits());
        assert!(
            matches!(r, Err(UploadError::Rejected(ref m)) if m.contains("..")),
            "{r:?}"
        );
        assert!(listing(root.path()).is_empty());
    }

    #[test]
    fn restrictive_modes_do_not_block_cleanup_and_are_kept_when_published() {
        let root = tempfile::tempdir().unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut d = header("p/", tar::EntryType::Directory, 0);
        d.set_mode(0o500);
        d.set_cksum();
        b.append(&d, &b""[..]).unwrap();
        let tar = b.into_inner().unwrap();
        std::fs::create_dir(root.path().join("p")).unwrap();
        // Conflict: staging with a 0500 dir must still be removed.
        assert!(matches!(
            receive(root.path(), Path::new(""), tar.as_slice(), limits()),
            Err(UploadError::Exists(_))
        ));
        assert_eq!(listing(root.path()), vec!["p".to_owned()]);
        // Published: the archive's modes stay as they were.
        std::fs::remove_dir(root.path().join("p")).unwrap();
        receive(root.path(), Path::new(""), tar.as_slice(), limits()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(root.path().join("p"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o500);
    }

    #[test]
    fn sweep_removes_abandoned_staging_but_not_through_symlinks() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("precious"), "x").unwrap();
        std::fs::create_dir_all(root.path().join(STAGING_DIR).join("abc/deep")).unwrap();
        assert_eq!(sweep_staging(&[root.path().to_path_buf()]), 1);
        assert!(!root.path().join(STAGING_DIR).exists());
        std::os::unix::fs::symlink(outside.path(), root.path().join(STAGING_DIR)).unwrap();
        assert_eq!(sweep_staging(&[root.path().to_path_buf()]), 0);
        assert!(outside.path().join("precious").exists());
    }

    /// Seeded fuzzing: archives assembled from valid and hostile entries, then truncated or
    /// bit-flipped at random. Whatever the input, `receive` never panics; a refused archive
    /// leaves the root exactly as before; an accepted one adds exactly its one top-level entry.
    #[test]
    fn fuzzed_archives_never_escape_or_leave_partial_trees() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let names = [
            "p/a",
            "p/b/c",
            "p/",
            "../x",
            "/abs",
            "p/../../y",
            "q/z",
            "p/./d",
            "p//e",
            "",
        ];
        let kinds = [
            tar::EntryType::Regular,
            tar::EntryType::Directory,
            tar::EntryType::Symlink,
            tar::EntryType::Link,
            tar::EntryType::Char,
            tar::EntryType::Fifo,
            tar::EntryType::GNUSparse,
        ];
        let (mut accepted, mut refused) = (0, 0);
        for _ in 0..400 {
            let n = 1 + (next() % 5) as usize;
            let mut entries: Vec<(&str, tar::EntryType, Vec<u8>)> = Vec::new();
            for _ in 0..n {
                let name = names[(next() % names.len() as u64) as usize];
                let kind = kinds[(next() % 3 + next() % 2 * (next() % 5)) as usize % kinds.len()];
                let len = if kind == tar::EntryType::Regular {
                    (next() % 3000) as usize
                } else {
                    0
                };
                entries.push((name, kind, vec![(next() % 256) as u8; len]));
            }
            let borrowed: Vec<(&str, tar::EntryType, &[u8])> = entries
                .iter()
                .map(|(p, k, d)| (*p, *k, d.as_slice()))
                .collect();
            let mut bytes = archive(&borrowed);
            match next() % 4 {
                0 => bytes.truncate((next() as usize) % (bytes.len() + 1)),
                1 if !bytes.is_empty() => {
                    let i = (next() as usize) % bytes.len();
                    bytes[i] ^= 1 << (next() % 8);
                }
                _ => {}
            }
            let root = tempfile::tempdir().unwrap();
            std::fs::write(root.path().join("keep"), "k").unwrap();
            let before = listing(root.path());
            match receive(root.path(), Path::new(""), bytes.as_slice(), limits()) {
                Ok(p) => {
                    accepted += 1;
                    let added: Vec<String> = listing(root.path())
                        .into_iter()
                        .filter(|e| !before.contains(e))
                        .collect();
                    assert!(
                        !added.is_empty()
                            && added.iter().all(|e| Path::new(e).starts_with(&p.name)),
                        "{added:?}"
                    );
                }
                Err(_) => {
                    refused += 1;
                    assert_eq!(listing(root.path()), before);
                }
            }
        }
        // The corpus must exercise both outcomes, or the test proves nothing.
        assert!(
            accepted > 10 && refused > 10,
            "accepted {accepted}, refused {refused}"
        );
    }

    #[test]
    fn dest_validation() {
        assert_eq!(relative_dir("").unwrap(), PathBuf::new());
        assert_eq!(relative_dir("a/./b").unwrap(), PathBuf::from("a/b"));
        assert!(relative_dir("../x").is_err());
        assert!(relative_dir("/abs").is_err());
    }
}
