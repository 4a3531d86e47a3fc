//! `POST /remote/update`: replaces this node's executable and restarts it on the new one.
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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use futures::StreamExt;
use serde_json::{Value, json};
use sha2::Digest;

use crate::error::ApiError;
use crate::state::Node;

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

/// The handler.
pub async fn update(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let want = headers
        .get("x-update-sha256")
        .and_then(|v| v.to_str().ok())
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
    let result = async {
        let mut file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o755)
                .open(&staged)
                .map_err(|e| ApiError::internal(format!("staging the update: {e}")))?
        };
        let mut hasher = sha2::Sha256::new();
        let mut total = 0u64;
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
            total += chunk.len() as u64;
            if total > MAX_UPDATE_BYTES {
                return Err(ApiError::new(
                    axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    format!("an executable is at most {MAX_UPDATE_BYTES} bytes"),
                ));
            }
            hasher.update(&chunk);
            file.write_all(&chunk)
                .map_err(|e| ApiError::internal(format!("staging the update: {e}")))?;
        }
        file.sync_all()
            .map_err(|e| ApiError::internal(e.to_string()))?;
        drop(file);
        let got = hex::encode(hasher.finalize());
        if got != want {
            return Err(ApiError::bad_request(format!(
                "the body's SHA-256 is {got}, not the announced {want}; nothing was replaced"
            )));
        }
        let (staged2, exe2, name) = (staged.clone(), exe.clone(), node.name.to_owned());
        let (version, previous) =
            tokio::task::spawn_blocking(move || install(&staged2, &exe2, &name))
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?
                .map_err(|m| ApiError::bad_request(format!("{m}; nothing was replaced")))?;
        Ok((got, total, version, previous))
    }
    .await;
    let (sha, bytes, version, previous) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&staged);
            return Err(e);
        }
    };
    tracing::warn!(source = "update", %version, bytes, "executable replaced; restarting");
    let _ = INSTALLED_AT.set(exe.clone());
    RESTART.store(true, Ordering::SeqCst);
    // Answer first, then drain: the client sees the verdict before the node goes away.
    let n = node.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        n.shutdown.cancel();
    });
    Ok(Json(json!({
        "ok": true,
        "sha256": sha,
        "bytes": bytes,
        "version": version,
        "path": exe,
        "previous": previous,
        "restarting": true,
    })))
}
