//! Raw PTY capture diagnostics: an off-by-default tap that records one session's (or every
//! session's) output and input, with original read/write boundaries and monotonic timestamps,
//! into `<captures dir>/<session-id>.tcap`, each file capped at 512 KiB.
//!
//! File format: the 8-byte magic `TCAP\x01\0\0\0`, then records of
//! `direction (b'o' output | b'i' input), u64 LE nanoseconds since the capture started,
//! u32 LE length, bytes`. A record that would pass the cap is not written (the file stays a
//! sequence of whole records). It does not decide where captures live; the caller passes the
//! directory (from `TUIC_CAPTURE_DIR` or the config dir).

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::Serialize;

/// Per-file size cap.
pub const FILE_CAP_BYTES: u64 = 512 * 1024;

/// File header.
pub const MAGIC: &[u8; 8] = b"TCAP\x01\0\0\0";

/// Direction of a captured record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// PTY output (a read).
    Output,
    /// Input written to the PTY.
    Input,
}

/// Where captures go: an absolute directory, or the reason capture cannot be enabled.
#[derive(Debug, Clone)]
pub enum CaptureDir {
    /// Usable directory.
    Dir(PathBuf),
    /// `TUIC_CAPTURE_DIR` was set to a relative path.
    Invalid(String),
}

impl CaptureDir {
    /// From the value of `TUIC_CAPTURE_DIR` (if any) and the config dir.
    pub fn resolve(env_value: Option<&str>, config_dir: &Path) -> Self {
        match env_value.filter(|v| !v.is_empty()) {
            Some(v) if Path::new(v).is_absolute() => Self::Dir(PathBuf::from(v)),
            Some(v) => Self::Invalid(format!(
                "TUIC_CAPTURE_DIR must be an absolute path, got {v:?}"
            )),
            None => Self::Dir(config_dir.join("captures")),
        }
    }
}

#[derive(Debug)]
struct Active {
    filter: Option<String>,
    started: Instant,
    files: HashMap<String, (File, u64)>,
}

/// The node-wide capture switch.
#[derive(Debug)]
pub struct Capture {
    dir: CaptureDir,
    on: AtomicBool,
    active: Mutex<Option<Active>>,
}

/// `GET /diagnostics/capture`.
#[derive(Debug, Serialize)]
pub struct CaptureStatus {
    /// Whether capture is on.
    pub enabled: bool,
    /// The one session recorded, when filtered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Output directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// Bytes written per opened session file.
    pub bytes: HashMap<String, u64>,
    /// Why capture cannot be enabled, when it cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Capture {
    /// A disabled capture writing to `dir` when enabled.
    pub fn new(dir: CaptureDir) -> Self {
        Self {
            dir,
            on: AtomicBool::new(false),
            active: Mutex::new(None),
        }
    }

    /// Starts (fresh files) or stops capture.
    pub fn set(&self, enabled: bool, filter: Option<String>) -> Result<(), String> {
        let mut a = self.active.lock().unwrap_or_else(|p| p.into_inner());
        if !enabled {
            self.on.store(false, Ordering::Release);
            *a = None;
            return Ok(());
        }
        let dir = match &self.dir {
            CaptureDir::Dir(d) => d,
            CaptureDir::Invalid(e) => return Err(e.clone()),
        };
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        *a = Some(Active {
            filter,
            started: Instant::now(),
            files: HashMap::new(),
        });
        self.on.store(true, Ordering::Release);
        Ok(())
    }

    /// Records one read or write; a no-op (one atomic load) when capture is off.
    pub fn record(&self, session_id: &str, dir: Direction, bytes: &[u8]) {
        if !self.on.load(Ordering::Acquire) || bytes.is_empty() {
            return;
        }
        let CaptureDir::Dir(out_dir) = &self.dir else {
            return;
        };
        let mut guard = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let Some(a) = guard.as_mut() else { return };
        if a.filter.as_deref().is_some_and(|f| f != session_id) {
            return;
        }
        let ts = a.started.elapsed().as_nanos() as u64;
        if !a.files.contains_key(session_id) {
            let path = out_dir.join(format!("{}.tcap", sanitize(session_id)));
            let Ok(mut f) = File::create(&path) else {
                return;
            };
            if f.write_all(MAGIC).is_err() {
                return;
            }
            a.files
                .insert(session_id.to_owned(), (f, MAGIC.len() as u64));
        }
        let Some((f, written)) = a.files.get_mut(session_id) else {
            return;
        };
        let len = 13 + bytes.len() as u64;
        if *written + len > FILE_CAP_BYTES {
            return;
        }
        let mut rec = Vec::with_capacity(len as usize);
        rec.push(match dir {
            Direction::Output => b'o',
            Direction::Input => b'i',
        });
        rec.extend_from_slice(&ts.to_le_bytes());
        rec.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        rec.extend_from_slice(bytes);
        if f.write_all(&rec).is_ok() {
            *written += len;
        }
    }

    /// The active filter, directory and bytes per session.
    pub fn status(&self) -> CaptureStatus {
        let a = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let (dir, error) = match &self.dir {
            CaptureDir::Dir(d) => (Some(d.display().to_string()), None),
            CaptureDir::Invalid(e) => (None, Some(e.clone())),
        };
        CaptureStatus {
            enabled: a.is_some(),
            session_id: a.as_ref().and_then(|a| a.filter.clone()),
            dir,
            bytes: a
                .as_ref()
                .map(|a| a.files.iter().map(|(k, (_, n))| (k.clone(), *n)).collect())
                .unwrap_or_default(),
            error,
        }
    }
}

fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Parses a capture file into `(direction, nanos, bytes)` records (for tests and replay).
pub fn parse(file: &[u8]) -> Option<Vec<(Direction, u64, Vec<u8>)>> {
    let mut b = file.strip_prefix(MAGIC.as_slice())?;
    let mut out = Vec::new();
    while !b.is_empty() {
        if b.len() < 13 {
            return None;
        }
        let dir = match b[0] {
            b'o' => Direction::Output,
            b'i' => Direction::Input,
            _ => return None,
        };
        let ts = u64::from_le_bytes(b[1..9].try_into().ok()?);
        let n = u32::from_le_bytes(b[9..13].try_into().ok()?) as usize;
        let data = b.get(13..13 + n)?.to_vec();
        out.push((dir, ts, data));
        b = &b[13 + n..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_roundtrip_and_cap() {
        let d = tempfile::tempdir().unwrap();
        let c = Capture::new(CaptureDir::Dir(d.path().to_path_buf()));
        c.record("s1", Direction::Output, b"ignored while off");
        c.set(true, Some("s1".into())).unwrap();
        c.record("s1", Direction::Output, b"hello");
        c.record("s1", Direction::Input, b"ls\r");
        c.record("s2", Direction::Output, b"filtered out");
        let big = vec![b'x'; 100 * 1024];
        for _ in 0..10 {
            c.record("s1", Direction::Output, &big);
        }
        let st = c.status();
        assert!(st.enabled && st.bytes["s1"] <= FILE_CAP_BYTES);
        let recs = parse(&std::fs::read(d.path().join("s1.tcap")).unwrap()).unwrap();
        assert_eq!(recs[0].2, b"hello");
        assert_eq!(
            (recs[1].0, recs[1].2.as_slice()),
            (Direction::Input, b"ls\r".as_slice())
        );
        assert!(recs[1].1 >= recs[0].1);
        assert!(!d.path().join("s2.tcap").exists());
    }

    #[test]
    fn relative_dir_refuses_activation() {
        let c = Capture::new(CaptureDir::resolve(Some("rel/dir"), Path::new("/cfg")));
        assert!(c.set(true, None).is_err());
        assert!(!c.status().enabled);
    }
}
