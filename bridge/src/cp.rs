//! `tuic cp SRC... CONN:PATH`: stream local files as a tar, through this machine's hub, into a
//! registered repository on a connected node.
//!
//! The tar is produced while it is sent (chunked transfer over the IPC socket), so memory stays
//! flat whatever the size. The hub forwards the stream to the node's `POST /fs/upload-copy`
//! with the connection's token; the node validates, stages and publishes. Each source is one
//! upload (the node publishes exactly one top-level entry per archive). Progress goes to
//! stderr; the final line says what arrived where.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tuic_proto::ipc_http::ResponseCollector;

/// Transfer counters shared with the progress printer.
#[derive(Debug, Default)]
pub struct Progress {
    /// Archive bytes written so far.
    pub bytes: AtomicU64,
    /// Files appended so far.
    pub files: AtomicU64,
}

/// What one source's upload produced.
#[derive(Debug)]
pub struct Uploaded {
    /// HTTP status from the node (through the hub).
    pub status: u16,
    /// Response body (JSON).
    pub body: String,
}

/// Writes an HTTP/1.1 chunked body.
struct Chunked<W: Write> {
    inner: W,
    progress: Arc<Progress>,
}

impl<W: Write> Write for Chunked<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        write!(self.inner, "{:x}\r\n", buf.len())?;
        self.inner.write_all(buf)?;
        self.inner.write_all(b"\r\n")?;
        self.progress
            .bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Appends `src` (file or directory tree) under its own name. Symlinks are skipped with a
/// warning: the receiving node refuses links of any kind.
fn append_tree<W: Write>(
    b: &mut tar::Builder<W>,
    src: &Path,
    name: &Path,
    progress: &Progress,
) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(src)?;
    if meta.file_type().is_symlink() {
        eprintln!("tuic: skipping symlink {}", src.display());
        return Ok(());
    }
    if meta.is_dir() {
        b.append_dir(name, src)?;
        let mut entries: Vec<_> = std::fs::read_dir(src)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            append_tree(b, &e.path(), &name.join(e.file_name()), progress)?;
        }
    } else if meta.is_file() {
        b.append_path_with_name(src, name)?;
        progress.files.fetch_add(1, Ordering::Relaxed);
    } else {
        eprintln!("tuic: skipping special file {}", src.display());
    }
    Ok(())
}

/// Uploads one source through the hub on `socket`.
pub fn upload(
    socket: &Path,
    conn: &str,
    path: &str,
    src: &Path,
    progress: Arc<Progress>,
) -> io::Result<Uploaded> {
    let name = src.file_name().map(PathBuf::from).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} has no name", src.display()),
        )
    })?;
    let enc = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    let mut stream = UnixStream::connect(socket)?;
    let head = format!(
        "POST /hub/upload?conn={}&path={} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-tar\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        enc(conn),
        enc(path)
    );
    // The server may answer early (an unknown route, a refused root) and close while the tar
    // is still being written: then the write fails, and its answer is what to report.
    let sent = send_body(&mut stream, head.as_bytes(), src, &name, &progress);
    if let Err(e) = &sent
        && !matches!(
            e.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
        )
    {
        return Err(sent.unwrap_err());
    }
    // The node answers once it has published (or refused); large trees take a while.
    stream.set_read_timeout(Some(Duration::from_secs(600)))?;
    let mut collector = ResponseCollector::new(1 << 20);
    let mut buf = [0u8; 16 * 1024];
    let resp = loop {
        let n = match stream.read(&mut buf) {
            Ok(n) => n,
            // Nothing readable after a failed write: the write's error says more.
            Err(e) => return Err(sent.err().unwrap_or(e)),
        };
        let r = if n == 0 {
            collector.feed_eof().map(Some)
        } else {
            collector.feed(&buf[..n])
        };
        match r {
            Ok(Some(r)) => break r,
            Ok(None) => {}
            Err(e) => {
                return Err(sent
                    .err()
                    .unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidData, e.to_string())));
            }
        }
    };
    Ok(Uploaded {
        status: resp.status(),
        body: String::from_utf8_lossy(&resp.body).into_owned(),
    })
}

fn send_body(
    stream: &mut UnixStream,
    head: &[u8],
    src: &Path,
    name: &Path,
    progress: &Arc<Progress>,
) -> io::Result<()> {
    stream.write_all(head)?;
    let w = io::BufWriter::with_capacity(
        256 * 1024,
        Chunked {
            inner: &mut *stream,
            progress: progress.clone(),
        },
    );
    let mut b = tar::Builder::new(w);
    b.follow_symlinks(false);
    append_tree(&mut b, src, name, progress)?;
    let mut w = b.into_inner()?;
    w.flush()?;
    let inner = w.into_inner().map_err(|e| e.into_error())?;
    inner.inner.write_all(b"0\r\n\r\n")
}

/// Prints progress every half second until `done` is set; returns the final figures.
pub fn spawn_progress(
    progress: Arc<Progress>,
    done: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let start = Instant::now();
        while !done.load(Ordering::Relaxed) {
            std::thread::park_timeout(Duration::from_millis(500));
            let secs = start.elapsed().as_secs_f64().max(1e-3);
            let bytes = progress.bytes.load(Ordering::Relaxed);
            eprint!(
                "\r  {:>8.1} MB  {:>7} files  {:>7.1} MB/s",
                bytes as f64 / 1e6,
                progress.files.load(Ordering::Relaxed),
                bytes as f64 / 1e6 / secs
            );
        }
        eprintln!();
    })
}
