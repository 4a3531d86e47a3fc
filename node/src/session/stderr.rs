//! A session's stderr apart from its terminal, for programs run as one-off commands
//! (`tuic run`): the program is started through `/bin/sh` with fd 2 appended to a file of its
//! own, which `GET /sessions/{id}/stderr` reads from any byte offset.
//!
//! The file lives in a 0700 directory beside the node's IPC socket (`<socket>.stderr/<id>`),
//! so its path follows from the socket and the PTY id alone: a held session re-adopted by a
//! restarted node finds it again. It is removed when the session's tombstone expires.
//! Deliberately not here: interleaving with stdout (the two are apart, as with `2>file`), and
//! a terminal on fd 2 (the program sees a regular file there).

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The most one read returns; a client asks again from where it stopped.
pub const READ_MAX: usize = 1 << 20;

/// The script `sh -c` runs: `$1` is the file, the rest is the program and its arguments.
/// `exec` keeps the program's own exit status and pid; a program that cannot be started
/// says so on the redirected stderr and exits 127, as in a shell.
const WRAPPER: &str = r#"f=$1; shift; exec "$@" 2>>"$f""#;

/// The directory of stderr files of the node listening on `socket`.
fn dir(socket: &Path) -> PathBuf {
    let mut name = socket.file_name().unwrap_or_default().to_os_string();
    name.push(".stderr");
    socket.with_file_name(name)
}

/// The stderr file of session `id`.
fn path(socket: &Path, id: &str) -> PathBuf {
    dir(socket).join(id)
}

/// Creates session `id`'s empty stderr file (0600, in a 0700 directory).
pub(super) fn create_file(socket: &Path, id: &str) -> anyhow::Result<PathBuf> {
    let d = dir(socket);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&d)?;
    let p = path(socket, id);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&p)?;
    Ok(p)
}

/// Session `id`'s stderr file when one exists (a held session re-adopted after a restart).
pub(super) fn existing(socket: &Path, id: &str) -> Option<PathBuf> {
    let p = path(socket, id);
    p.is_file().then_some(p)
}

/// `program args…` started with its stderr appended to `file`.
pub(super) fn wrap(file: &Path, program: &str, args: &[String]) -> (String, Vec<String>) {
    let mut a = vec![
        "-c".to_owned(),
        WRAPPER.to_owned(),
        "tuic-run".to_owned(),
        file.display().to_string(),
        program.to_owned(),
    ];
    a.extend(args.iter().cloned());
    ("/bin/sh".to_owned(), a)
}

/// Bytes of a stderr file from `from`, at most [`READ_MAX`], and the file's length when read.
pub fn read_from(file: &Path, from: u64) -> std::io::Result<(Vec<u8>, u64)> {
    let mut f = std::fs::File::open(file)?;
    let len = f.metadata()?.len();
    if from >= len {
        return Ok((Vec::new(), len));
    }
    f.seek(SeekFrom::Start(from))?;
    let want = usize::try_from(len - from)
        .unwrap_or(usize::MAX)
        .min(READ_MAX);
    let mut buf = vec![0; want];
    let mut got = 0;
    while got < want {
        match f.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    buf.truncate(got);
    Ok((buf, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrapper_sends_stderr_to_the_file_and_keeps_stdout_and_the_status() {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("n.sock");
        let f = create_file(&socket, "7").unwrap();
        assert_eq!(existing(&socket, "7").as_deref(), Some(f.as_path()));
        assert!(existing(&socket, "8").is_none());
        let (prog, args) = wrap(
            &f,
            "sh",
            &["-c".into(), "echo out; echo 'err ✓' >&2; exit 3".into()],
        );
        let out = std::process::Command::new(prog)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"out\n");
        assert!(out.stderr.is_empty());
        assert_eq!(out.status.code(), Some(3));
        let (bytes, len) = read_from(&f, 0).unwrap();
        assert_eq!(bytes, "err ✓\n".as_bytes());
        assert_eq!(len, bytes.len() as u64);
        assert_eq!(read_from(&f, 4).unwrap().0, "✓\n".as_bytes());
        assert!(read_from(&f, 99).unwrap().0.is_empty());
        // A second create of the same id is refused rather than sharing a file.
        assert!(create_file(&socket, "7").is_err());
    }

    #[test]
    fn a_program_that_cannot_start_says_so_on_its_stderr_and_exits_127() {
        let tmp = tempfile::tempdir().unwrap();
        let f = create_file(&tmp.path().join("n.sock"), "1").unwrap();
        let (prog, args) = wrap(&f, "/nonexistent/tuic-no-such-program", &[]);
        let out = std::process::Command::new(prog)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(127));
        let (bytes, _) = read_from(&f, 0).unwrap();
        assert!(
            String::from_utf8_lossy(&bytes).contains("tuic-no-such-program"),
            "{bytes:?}"
        );
    }
}
