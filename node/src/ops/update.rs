//! The executable replacement behind `POST /remote/update` (served by `routes::ops`): replaces
//! this node's executable and restarts it on the new one.
//!
//! Authorization is the spec's: on TCP only the `tui-session` login cookie (or a hub's node
//! token cookie) authorizes executable replacement; Basic Auth and `?token=` answer 401 (the
//! request boundary enforces it). The body is the new executable (`application/octet-stream`,
//! at most [`MAX_UPDATE_BYTES`]) and `x-update-sha256` must carry its SHA-256 (hex).
//!
//! Nothing is replaced unless every check passes, in order: the digest matches, the file is
//! an executable of this platform (ELF / Mach-O magic), and the candidate, run as
//! `<candidate> --version` within 10 s, exits 0 and names this binary. Then the current file
//! is kept as `<exe>.previous`, the candidate is renamed over `<exe>` (same directory, so the
//! rename is atomic), the answer is sent, and the node drains and re-executes itself with the
//! same arguments.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::Digest;

use crate::error::ApiError;

/// Largest executable accepted.
pub const MAX_UPDATE_BYTES: u64 = 512 * 1024 * 1024;

/// Set once an update was installed: the process re-executes itself after draining.
static RESTART: AtomicBool = AtomicBool::new(false);
/// The path the update was installed at (after the swap `/proc/self/exe` names the old,
/// deleted file, so it is kept from before).
static INSTALLED_AT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Whether an update asked for a re-exec (read by `cli::serve` after the server drained).
pub fn restart_requested() -> bool {
    RESTART.load(Ordering::SeqCst)
}

/// Replaces this process with the (updated) executable, same arguments. Returns only on error.
pub fn reexec() -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let exe = match INSTALLED_AT
        .get()
        .cloned()
        .map_or_else(std::env::current_exe, Ok)
    {
        Ok(e) => e,
        Err(e) => return e,
    };
    std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .exec()
}

fn is_executable_format(head: &[u8]) -> bool {
    head.starts_with(b"\x7fELF")
        || [
            [0xfe, 0xed, 0xfa, 0xcf],
            [0xcf, 0xfa, 0xed, 0xfe],
            [0xca, 0xfe, 0xba, 0xbe],
        ]
        .iter()
        .any(|m| head.starts_with(m))
}

/// Runs `<candidate> --version` (bounded) and checks that it names `name`.
fn probe(candidate: &Path, name: &str) -> Result<String, String> {
    let mut child = std::process::Command::new(candidate)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("the new executable does not start: {e}"))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("the new executable did not answer --version within 10 s".into());
            }
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("reading --version: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() {
        return Err(format!(
            "the new executable's --version failed ({})",
            out.status
        ));
    }
    if text.split_whitespace().next() != Some(name) {
        return Err(format!(
            "the new executable is not {name} (its --version says {text:?})"
        ));
    }
    Ok(text)
}

/// Checks the staged candidate and swaps it in; returns `(version, previous)`.
fn install(staged: &Path, exe: &Path, name: &str) -> Result<(String, PathBuf), String> {
    let mut head = [0u8; 4];
    let mut f = std::fs::File::open(staged).map_err(|e| e.to_string())?;
    std::io::Read::read_exact(&mut f, &mut head)
        .map_err(|_| "the body is not an executable (too short)".to_owned())?;
    if !is_executable_format(&head) {
        return Err("the body is not an executable of this platform".into());
    }
    let version = probe(staged, name)?;
    let previous = exe.with_file_name(format!(
        "{}.previous",
        exe.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    ));
    std::fs::hard_link(exe, &previous)
        .or_else(|_| std::fs::copy(exe, &previous).map(drop))
        .or_else(|e| {
            // A stale `.previous` from an earlier update is replaced.
            if previous.exists() {
                std::fs::remove_file(&previous)
                    .and_then(|()| std::fs::hard_link(exe, &previous))
                    .map_err(|e| e.to_string())
            } else {
                Err(e.to_string())
            }
        })
        .map_err(|e| format!("keeping the current executable: {e}"))?;
    std::fs::rename(staged, exe).map_err(|e| format!("replacing {}: {e}", exe.display()))?;
    Ok((version, previous))
}

/// Where an announced update is staged and installed.
#[derive(Debug)]
pub(crate) struct Target {
    /// The running executable (canonical).
    pub exe: PathBuf,
    /// The staging file beside it.
    staged: PathBuf,
    /// The announced SHA-256 (lowercase hex).
    want: String,
}

/// Checks the announced digest (`x-update-sha256`: 64 hex digits) and names the staging file
/// beside the running executable. Nothing is written yet.
pub(crate) fn target(announced: Option<&str>) -> Result<Target, ApiError> {
    let want = announced
        .map(str::to_ascii_lowercase)
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            ApiError::bad_request(
                "x-update-sha256 must carry the executable's SHA-256 (64 hex digits)",
            )
        })?;
    let exe = std::env::current_exe().map_err(|e| ApiError::internal(e.to_string()))?;
    let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
    let dir = exe
        .parent()
        .ok_or_else(|| ApiError::internal("the executable has no directory"))?
        .to_path_buf();
    let staged = dir.join(format!(
        ".{}.update-{}",
        exe.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    Ok(Target { exe, staged, want })
}

/// An update being received: the staging file, the running digest and size.
pub(crate) struct Staging {
    file: std::fs::File,
    hasher: sha2::Sha256,
    total: u64,
}

/// What an installed update reports.
#[derive(Debug)]
pub(crate) struct Installed {
    /// The SHA-256 of the new executable.
    pub sha256: String,
    /// Its size.
    pub bytes: u64,
    /// Its `--version` line.
    pub version: String,
    /// Where the old executable was kept.
    pub previous: PathBuf,
}

impl Target {
    /// Creates the staging file (never an existing one).
    pub(crate) fn open(&self) -> Result<Staging, ApiError> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&self.staged)
            .map_err(|e| ApiError::internal(format!("staging the update: {e}")))?;
        Ok(Staging {
            file,
            hasher: sha2::Sha256::new(),
            total: 0,
        })
    }

    /// Verifies the received file against the announced digest, then checks and installs it
    /// ([`install`], on the blocking pool). Nothing is replaced unless every check passes.
    pub(crate) async fn install(
        &self,
        staging: Staging,
        name: &str,
    ) -> Result<Installed, ApiError> {
        let Staging {
            file,
            hasher,
            total,
        } = staging;
        file.sync_all()
            .map_err(|e| ApiError::internal(e.to_string()))?;
        drop(file);
        let got = hex::encode(hasher.finalize());
        if got != self.want {
            return Err(ApiError::bad_request(format!(
                "the body's SHA-256 is {got}, not the announced {}; nothing was replaced",
                self.want
            )));
        }
        let (staged, exe, name) = (self.staged.clone(), self.exe.clone(), name.to_owned());
        let (version, previous) =
            tokio::task::spawn_blocking(move || install(&staged, &exe, &name))
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?
                .map_err(|m| ApiError::bad_request(format!("{m}; nothing was replaced")))?;
        Ok(Installed {
            sha256: got,
            bytes: total,
            version,
            previous,
        })
    }

    /// Removes the staging file after a failure, so nothing is left behind.
    pub(crate) fn discard(&self) {
        let _ = std::fs::remove_file(&self.staged);
    }

    /// Marks the update installed: after the server drained, the process re-executes the
    /// installed file ([`restart_requested`], [`reexec`]).
    pub(crate) fn request_restart(&self) {
        let _ = INSTALLED_AT.set(self.exe.clone());
        RESTART.store(true, Ordering::SeqCst);
    }
}

impl Staging {
    /// Appends one chunk of the body, refusing more than [`MAX_UPDATE_BYTES`] in total.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<(), ApiError> {
        self.total += chunk.len() as u64;
        if self.total > MAX_UPDATE_BYTES {
            return Err(ApiError::too_large(format!(
                "an executable is at most {MAX_UPDATE_BYTES} bytes"
            )));
        }
        self.hasher.update(chunk);
        self.file
            .write_all(chunk)
            .map_err(|e| ApiError::internal(format!("staging the update: {e}")))
    }
}
