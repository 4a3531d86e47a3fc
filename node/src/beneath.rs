//! Beneath-resolution: the one way the node opens a path under a registered root.
//!
//! A registered repository is untrusted input (a clone brings its own symlinks), so a path
//! inside a root is never handed to the ambient `std::fs`: the root is opened once as a
//! `cap_std::fs::Dir` and everything below it resolves *beneath* that handle — through
//! `openat2(RESOLVE_BENEATH)` where the kernel has it, else cap-std's component-by-component
//! resolution. A symlink (or `..`) that leads outside the root is refused with an error, not
//! followed; a symlink that stays inside keeps working. Opening, reading, writing, creating
//! and renaming all happen relative to directory handles, so there is no check-then-use gap
//! between a containment test and the system call (the old gate was a lexical `starts_with`
//! followed by a path-based open).
//!
//! [`locate`] picks the registered root that holds a path (lexically: NUL, relative paths and,
//! for the spec's absolute-path routes, `..` are refused first) and opens it; the routes in
//! `fs/`, the upload receiver, the git service's worktree warming and the story plan reader
//! all go through it or through [`open_root`].

use std::ffi::OsString;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};

use crate::error::ApiError;

/// The stable code of a refusal because a path leads outside its root.
pub(crate) const OUTSIDE_CODE: &str = "outside_root";

/// Whether `..` components may appear in a located path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dots {
    /// Refused before anything touches the file system (the spec's traversal gate).
    Refuse,
    /// Allowed; the resolution itself refuses any that climbs out of the root
    /// (Markdown links such as `../README.md`).
    Beneath,
}

/// A path inside a registered root, with the root opened.
#[derive(Debug)]
pub(crate) struct Rooted {
    /// The registered root, as registered (canonical).
    pub(crate) root: PathBuf,
    /// The root, opened: every access through it resolves beneath it.
    pub(crate) dir: Dir,
    /// The path relative to the root (empty for the root itself).
    pub(crate) rel: PathBuf,
}

/// Opens a registered root as the directory handle everything below it resolves beneath.
pub(crate) fn open_root(root: &Path) -> io::Result<Dir> {
    // The root itself was canonicalised and registered by a local caller: the one ambient open.
    Dir::open_ambient_dir(root, ambient_authority())
}

/// Whether `e` is cap-std's refusal of a path that leads outside its directory handle
/// (a symlink to an absolute or climbing target, a `..` above the root, `openat2`'s `EXDEV`).
pub(crate) fn is_escape(e: &io::Error) -> bool {
    // cap-std reports every escape as this one PermissionDenied error; the message is the only
    // thing that tells it from a plain permission failure (see cap-primitives `escape_attempt`).
    e.kind() == io::ErrorKind::PermissionDenied && e.to_string().contains("led outside")
}

/// The 403 answered for a path that leads outside its repository.
pub(crate) fn outside(path: &Path) -> ApiError {
    ApiError {
        code: OUTSIDE_CODE,
        ..ApiError::forbidden(format!(
            "{} leads outside its registered repository (a symlink or '..' out of the root); refused",
            path.display()
        ))
    }
}

/// Maps a file-system error on `path` to the caller's answer; an escape is a 403.
pub(crate) fn io_error(path: &Path, e: io::Error) -> ApiError {
    if is_escape(&e) {
        return outside(path);
    }
    match e.kind() {
        io::ErrorKind::NotFound => {
            ApiError::not_found(format!("{} does not exist", path.display()))
        }
        io::ErrorKind::AlreadyExists => {
            ApiError::conflict(format!("{} already exists", path.display()))
        }
        io::ErrorKind::PermissionDenied => {
            ApiError::forbidden(format!("{}: permission denied", path.display()))
        }
        io::ErrorKind::NotADirectory | io::ErrorKind::IsADirectory => {
            ApiError::bad_request(format!("{}: {e}", path.display()))
        }
        _ => ApiError::internal(format!("{}: {e}", path.display())),
    }
}

/// Lexical checks shared by every absolute path a caller names.
pub(crate) fn check_absolute(path: &str, dots: Dots) -> Result<&Path, ApiError> {
    if path.contains('\0') {
        return Err(ApiError::forbidden("path contains a NUL byte"));
    }
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(ApiError::forbidden("path must be absolute"));
    }
    if dots == Dots::Refuse && p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(ApiError::forbidden("path must not contain '..'"));
    }
    Ok(p)
}

/// The innermost registered root that lexically holds `path`, and the rest of the path.
pub(crate) fn root_of(path: &Path, roots: &[PathBuf]) -> Result<(PathBuf, PathBuf), ApiError> {
    let root = roots
        .iter()
        .filter(|r| path.starts_with(r))
        .max_by_key(|r| r.as_os_str().len())
        .ok_or_else(|| {
            ApiError::forbidden(format!(
                "{} is outside every registered repository",
                path.display()
            ))
        })?;
    let rel = path
        .strip_prefix(root)
        .unwrap_or(Path::new(""))
        .to_path_buf();
    Ok((root.clone(), rel))
}

/// The gate of every absolute-path route: lexical checks, the registered root that holds the
/// path, and that root opened for beneath-resolution.
pub(crate) fn locate(path: &str, roots: &[PathBuf], dots: Dots) -> Result<Rooted, ApiError> {
    let p = check_absolute(path, dots)?;
    let (root, rel) = root_of(p, roots)?;
    within(&root, &rel)
}

/// `rel` beneath the registered root `root` (already known to be one).
pub(crate) fn within(root: &Path, rel: &Path) -> Result<Rooted, ApiError> {
    if rel.is_absolute() {
        return Err(outside(&root.join(rel)));
    }
    let dir = open_root(root).map_err(|e| io_error(root, e))?;
    Ok(Rooted {
        root: root.to_path_buf(),
        dir,
        rel: rel.to_path_buf(),
    })
}

/// An entry named in an opened directory: the unit copy and move work on, so that the final
/// component is never resolved (a symlink there is the entry itself, not its target).
#[derive(Debug)]
pub(crate) struct Entry {
    /// The directory holding the entry.
    pub(crate) parent: Dir,
    /// The entry's name in it (one component).
    pub(crate) name: OsString,
    /// The path shown in messages.
    pub(crate) shown: PathBuf,
}

impl Rooted {
    /// The full path, for messages.
    pub(crate) fn shown(&self) -> PathBuf {
        self.root.join(&self.rel)
    }

    /// The located path as an entry of its parent, the parent opened beneath the root. The root
    /// itself is not an entry (it cannot be copied, moved or overwritten through these routes).
    pub(crate) fn entry(&self) -> Result<Entry, ApiError> {
        let shown = self.shown();
        let name = match self.rel.components().next_back() {
            Some(Component::Normal(n)) => n.to_owned(),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "{} is a repository root or has no name",
                    shown.display()
                )));
            }
        };
        let parent = self.open_dir_at(self.rel.parent().unwrap_or(Path::new("")))?;
        Ok(Entry {
            parent,
            name,
            shown,
        })
    }

    /// The located path opened as a directory (beneath the root).
    pub(crate) fn open_dir(&self) -> Result<Dir, ApiError> {
        self.open_dir_at(&self.rel)
    }

    fn open_dir_at(&self, rel: &Path) -> Result<Dir, ApiError> {
        if rel.as_os_str().is_empty() {
            self.dir.try_clone()
        } else {
            self.dir.open_dir(rel)
        }
        .map_err(|e| io_error(&self.root.join(rel), e))
    }

    /// Metadata of the located path, symlinks inside the root followed.
    pub(crate) fn metadata(&self) -> io::Result<cap_std::fs::Metadata> {
        if self.rel.as_os_str().is_empty() {
            self.dir.dir_metadata()
        } else {
            self.dir.metadata(&self.rel)
        }
    }

    /// Reads a regular file of at most `cap` bytes; `Ok(Err(len))` when it is larger.
    pub(crate) fn read_capped(&self, cap: u64) -> Result<Result<Vec<u8>, u64>, ApiError> {
        let shown = self.shown();
        // Metadata first, so a FIFO or device is refused before an open could block on it.
        let meta = self.metadata().map_err(|e| io_error(&shown, e))?;
        if !meta.is_file() {
            return Err(ApiError::bad_request(format!(
                "{} is not a file",
                shown.display()
            )));
        }
        let file = self.dir.open(&self.rel).map_err(|e| io_error(&shown, e))?;
        // The handle's own metadata: what is read is what was checked.
        let meta = file.metadata().map_err(|e| io_error(&shown, e))?;
        if !meta.is_file() {
            return Err(ApiError::bad_request(format!(
                "{} is not a file",
                shown.display()
            )));
        }
        if meta.len() > cap {
            return Ok(Err(meta.len()));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.into_std()
            .take(cap.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| io_error(&shown, e))?;
        if bytes.len() as u64 > cap {
            return Ok(Err(bytes.len() as u64));
        }
        Ok(Ok(bytes))
    }

    /// Creates or truncates the located file and writes `content`; the final component may be
    /// a symlink only if it resolves beneath the root (a dangling one pointing out is refused).
    pub(crate) fn write(&self, content: &[u8]) -> Result<(), ApiError> {
        let shown = self.shown();
        if self.rel.as_os_str().is_empty() {
            return Err(ApiError::bad_request(format!(
                "{} is a repository root",
                shown.display()
            )));
        }
        self.dir
            .write(&self.rel, content)
            .map_err(|e| io_error(&shown, e))
    }
}

impl Entry {
    /// An entry of an arbitrary absolute path, opened with ambient authority: only for a
    /// loopback caller's `/fs/transfer` sources, which the spec lets come from anywhere.
    pub(crate) fn ambient(path: &Path) -> Result<Entry, ApiError> {
        let name = path
            .file_name()
            .ok_or_else(|| ApiError::bad_request(format!("{} has no name", path.display())))?
            .to_owned();
        let parent_path = path.parent().unwrap_or(Path::new("/"));
        let parent = Dir::open_ambient_dir(parent_path, ambient_authority())
            .map_err(|e| io_error(parent_path, e))?;
        Ok(Entry {
            parent,
            name,
            shown: path.to_path_buf(),
        })
    }
}

/// Copies the entry `src` to `name` in `dest` (which must not exist): files with their mode,
/// directories recursively, symlinks recreated as they are and never followed.
pub(crate) fn copy_entry(
    src: &Entry,
    dest: &Dir,
    name: &OsString,
    shown: &Path,
) -> Result<(), ApiError> {
    copy_in(&src.parent, &src.name, &src.shown, dest, name, shown)
}

fn copy_in(
    from: &Dir,
    from_name: &OsString,
    from_shown: &Path,
    to: &Dir,
    to_name: &OsString,
    to_shown: &Path,
) -> Result<(), ApiError> {
    let meta = from
        .symlink_metadata(from_name)
        .map_err(|e| io_error(from_shown, e))?;
    if to.symlink_metadata(to_name).is_ok() {
        return Err(ApiError::conflict(format!(
            "{} already exists",
            to_shown.display()
        )));
    }
    let ft = meta.file_type();
    if ft.is_symlink() {
        // The link's text, not its target; a link out of the root stays a link that no route
        // will follow.
        let target = from
            .read_link_contents(from_name)
            .map_err(|e| io_error(from_shown, e))?;
        to.symlink_contents(target, to_name)
            .map_err(|e| io_error(to_shown, e))
    } else if ft.is_dir() {
        to.create_dir(to_name).map_err(|e| io_error(to_shown, e))?;
        // Opened relative to handles that are themselves beneath the root: even a directory
        // swapped for a symlink after the check above cannot lead out.
        let src = from
            .open_dir(from_name)
            .map_err(|e| io_error(from_shown, e))?;
        let dst = to.open_dir(to_name).map_err(|e| io_error(to_shown, e))?;
        for entry in src.entries().map_err(|e| io_error(from_shown, e))? {
            let entry = entry.map_err(|e| io_error(from_shown, e))?;
            let n = entry.file_name();
            copy_in(&src, &n, &from_shown.join(&n), &dst, &n, &to_shown.join(&n))?;
        }
        Ok(())
    } else if ft.is_file() {
        let mut input = from.open(from_name).map_err(|e| io_error(from_shown, e))?;
        let mut opts = OpenOptions::new();
        opts.write(true).create_new(true);
        let mut output = to
            .open_with(to_name, &opts)
            .map_err(|e| io_error(to_shown, e))?;
        io::copy(&mut input, &mut output).map_err(|e| io_error(to_shown, e))?;
        output
            .set_permissions(meta.permissions())
            .map_err(|e| io_error(to_shown, e))
    } else {
        Err(ApiError::bad_request(format!(
            "{} is not a regular file, directory or symlink",
            from_shown.display()
        )))
    }
}

/// Renames the entry `src` to `name` in `dest`, never replacing what is there (one
/// `renameat2(RENAME_NOREPLACE)` between two directory handles: no final symlink followed).
pub(crate) fn move_entry(
    src: &Entry,
    dest: &Dir,
    name: &OsString,
    shown: &Path,
) -> Result<(), ApiError> {
    rustix::fs::renameat_with(
        &src.parent,
        src.name.as_os_str(),
        dest,
        name.as_os_str(),
        rustix::fs::RenameFlags::NOREPLACE,
    )
    .map_err(|e| match e {
        rustix::io::Errno::EXIST => {
            ApiError::conflict(format!("{} already exists", shown.display()))
        }
        rustix::io::Errno::NOENT => {
            ApiError::not_found(format!("{} does not exist", src.shown.display()))
        }
        rustix::io::Errno::INVAL => {
            ApiError::bad_request(format!("cannot move {} into itself", src.shown.display()))
        }
        other => io_error(&src.shown, other.into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn gate_table() {
        let roots = vec![PathBuf::from("/repo")];
        assert_eq!(
            root_of(Path::new("/repo/a/b.txt"), &roots).unwrap(),
            (PathBuf::from("/repo"), PathBuf::from("a/b.txt"))
        );
        assert_eq!(
            root_of(Path::new("/repo"), &roots).unwrap(),
            (PathBuf::from("/repo"), PathBuf::new())
        );
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
                locate(bad, &roots, Dots::Refuse).unwrap_err().status,
                StatusCode::FORBIDDEN,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn nested_roots_pick_the_innermost() {
        let roots = vec![PathBuf::from("/a"), PathBuf::from("/a/b")];
        assert_eq!(
            root_of(Path::new("/a/b/c"), &roots).unwrap(),
            (PathBuf::from("/a/b"), PathBuf::from("c"))
        );
    }

    /// Every operation of the module against a root holding a link out, a dangling link out,
    /// a `..` out and a link that stays inside.
    #[test]
    fn links_out_are_refused_and_links_inside_work() {
        let repo = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let root = repo.path().canonicalize().unwrap();
        let outside = out.path().canonicalize().unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/in.txt"), "in").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.join("new"), root.join("dangling")).unwrap();
        std::os::unix::fs::symlink("sub", root.join("inlink")).unwrap();
        let roots = vec![root.clone()];
        let at = |rel: &str| locate(&format!("{}/{rel}", root.display()), &roots, Dots::Refuse);

        let e = at("out/secret").unwrap().read_capped(1 << 20).unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::FORBIDDEN, OUTSIDE_CODE),
            "{e}"
        );
        let e = at("out/x").unwrap().write(b"x").unwrap_err();
        assert_eq!(e.code, OUTSIDE_CODE, "{e}");
        let e = at("dangling").unwrap().write(b"x").unwrap_err();
        assert_eq!(e.code, OUTSIDE_CODE, "{e}");
        assert!(at("out/y").unwrap().entry().is_err());
        let dots = locate(
            &format!("{}/sub/../../x", root.display()),
            &roots,
            Dots::Beneath,
        )
        .unwrap();
        assert!(is_escape(&dots.metadata().unwrap_err()));
        let names: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![OsString::from("secret")]);

        assert_eq!(
            at("inlink/in.txt").unwrap().read_capped(1 << 20).unwrap(),
            Ok(b"in".to_vec())
        );
        at("inlink/new.txt").unwrap().write(b"n").unwrap();
        assert_eq!(std::fs::read(root.join("sub/new.txt")).unwrap(), b"n");
        assert_eq!(
            at("sub/in.txt").unwrap().read_capped(1).unwrap(),
            Err(2),
            "over the cap"
        );
    }
}
