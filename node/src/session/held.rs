//! The node's side of session holders (`session::holder`): starting a holder for a new
//! session, connecting to one (at create, and at start to re-adopt what a previous node left
//! running), and the durable record of each held session in the store.
//!
//! A connection is trusted only when the socket file is ours (owner uid, no group or other
//! permissions), the peer process runs as our uid, and it answers the hello with the header of
//! the session the record names. Anything else is refused with a reason; the caller logs it
//! and moves on. This module does not build `Session`s (see `pty`) or know the registry.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::holder::{self, ExitFrame, Header, Hello, HoldSpec, VERSION, read_frame, write_frame};
use crate::store::Store;

/// How long a holder may take to start its child and bind its socket.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a holder may take to answer a hello with its header and ring.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and how this node runs holders.
#[derive(Debug, Clone)]
pub struct HolderConfig {
    /// The executable re-run as `<exe> hold` (this node's own binary).
    pub exe: PathBuf,
    /// The directory of holder sockets (mode 0700, in the config dir).
    pub dir: PathBuf,
    /// The store that keeps each held session's record.
    pub store: Arc<Store>,
}

/// A held session's durable record: what a restarted node needs to list it again under the
/// same names.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Record {
    /// PTY id.
    pub id: String,
    /// Stable identity.
    pub tuic_session: String,
    /// Alias.
    pub alias: String,
    /// Start directory.
    pub cwd: String,
    /// Program.
    pub shell: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Last size set.
    pub rows: u16,
    /// Last size set.
    pub cols: u16,
    /// Display name.
    pub name: Option<String>,
    /// The name was chosen by a person.
    pub name_is_custom: bool,
    /// The name was assigned by the spawning agent.
    pub name_from_spawn: bool,
    /// The spawning agent's identity.
    pub parent_session: Option<String>,
    /// The orchestrator's description of the assigned work (`pty_description`).
    #[serde(default)]
    pub description: Option<String>,
    /// Wall-clock ms of creation.
    pub created_ms: u64,
    /// The holder's socket.
    pub socket: PathBuf,
}

/// Keeps a live session's record current (rename, resize, parent). Changes are written by a
/// short-lived background thread, latest state first, so a resize on an async worker never
/// waits for a store commit.
#[derive(Debug)]
pub struct Persist {
    store: Arc<Store>,
    id: String,
    state: Mutex<PersistState>,
    /// Signalled when no writer thread runs.
    idle: Condvar,
}

#[derive(Debug)]
struct PersistState {
    /// Bumped by every change.
    version: u64,
    /// `None` once the session ended (the record is removed).
    record: Option<Record>,
    /// A writer thread is running.
    writing: bool,
}

impl Persist {
    /// Writes the record now (blocking) and keeps it for updates.
    pub fn new(store: Arc<Store>, record: Record) -> anyhow::Result<Arc<Self>> {
        store.put_held_session(&record.id, &serde_json::to_vec(&record)?)?;
        Ok(Arc::new(Self {
            store,
            id: record.id.clone(),
            state: Mutex::new(PersistState {
                version: 0,
                record: Some(record),
                writing: false,
            }),
            idle: Condvar::new(),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PersistState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies a change; when it changed the record, a writer saves it soon.
    pub fn update(self: &Arc<Self>, f: impl FnOnce(&mut Record)) {
        let mut g = self.lock();
        let Some(rec) = g.record.as_mut() else {
            return;
        };
        let before = rec.clone();
        f(rec);
        if *rec == before {
            return;
        }
        g.version += 1;
        if g.writing {
            return;
        }
        g.writing = true;
        drop(g);
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("held-save-{}", self.id))
            .stack_size(128 * 1024)
            .spawn(move || me.write_until_current());
        if spawned.is_err() {
            self.write_until_current();
        }
    }

    fn write_until_current(&self) {
        loop {
            let (version, rec) = {
                let g = self.lock();
                (g.version, g.record.clone())
            };
            let r = match rec {
                Some(rec) => serde_json::to_vec(&rec)
                    .map_err(anyhow::Error::from)
                    .and_then(|b| self.store.put_held_session(&self.id, &b)),
                None => self.store.remove_held_session(&self.id),
            };
            if let Err(e) = r {
                tracing::warn!(session = %self.id, error = %e, "saving the held session record");
            }
            let mut g = self.lock();
            if g.version == version {
                g.writing = false;
                self.idle.notify_all();
                return;
            }
        }
    }

    /// Forgets the record (the session ended, or ends with the node); blocking, and done when
    /// it returns.
    pub fn remove(&self) {
        let mut g = self.lock();
        g.record = None;
        g.version += 1;
        while g.writing {
            g = self.idle.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        drop(g);
        if let Err(e) = self.store.remove_held_session(&self.id) {
            tracing::warn!(session = %self.id, error = %e, "removing the held session record");
        }
    }
}

/// Why a holder could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    /// Nothing listens on the socket any more (the holder died): a stale socket.
    #[error("stale socket (no holder listening): {0}")]
    Stale(String),
    /// The socket file or its peer is not ours.
    #[error("not ours: {0}")]
    Foreign(String),
    /// The peer did not speak the holder protocol, or named another session.
    #[error("bad peer: {0}")]
    Protocol(String),
}

/// A connected holder, after the handshake.
#[derive(Debug)]
pub struct Adopted {
    /// Its header.
    pub header: Header,
    /// The retained output, oldest first (ends at `header.total`).
    pub ring: Vec<u8>,
    /// The PTY master, while the child runs.
    pub master: Option<OwnedFd>,
    /// The exit, when the child ended before this connection.
    pub exit: Option<ExitFrame>,
    /// The connection: output frames follow; commands go the other way.
    pub stream: UnixStream,
}

/// Starts a holder for `spec`; returns its socket once it is ready.
pub fn start(cfg: &HolderConfig, spec: &HoldSpec) -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    ensure_dir(&cfg.dir)?;
    let socket = cfg.dir.join(format!("{}.sock", spec.id));
    let log = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(cfg.dir.join(format!("{}.log", spec.id)))
            .context("creating the holder log")?
    };
    let mut child = Command::new(&cfg.exe)
        .arg("hold")
        .arg("--socket")
        .arg(&socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting the holder {}", cfg.exe.display()))?;
    let mut stdin = child.stdin.take().context("holder stdin")?;
    stdin.write_all(&serde_json::to_vec(spec)?)?;
    drop(stdin);
    let stdout = child.stdout.take().context("holder stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(START_TIMEOUT).unwrap_or_default();
    let line = line.trim();
    if !line.starts_with("ready ") {
        // A holder that did not come up must not linger.
        let _ = child.kill();
    }
    // The holder is this process's child until this node exits: reap it when it ends.
    std::thread::Builder::new()
        .name(format!("holder-reap-{}", spec.id))
        .stack_size(64 * 1024)
        .spawn(move || {
            let _ = child.wait();
        })?;
    if line.starts_with("ready ") {
        return Ok(socket);
    }
    let why = line.strip_prefix("error: ").unwrap_or(line);
    anyhow::bail!(
        "the session holder did not start: {}",
        if why.is_empty() { "no answer" } else { why }
    )
}

/// Creates the holder directory, mode 0700.
fn ensure_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    Ok(())
}

/// Connects to the holder of session `id` at `socket` and completes the handshake.
pub fn connect(socket: &Path, id: &str) -> Result<Adopted, AdoptError> {
    let meta = std::fs::symlink_metadata(socket)
        .map_err(|e| AdoptError::Stale(format!("{}: {e}", socket.display())))?;
    if !meta.file_type().is_socket() {
        return Err(AdoptError::Foreign(format!(
            "{} is not a socket",
            socket.display()
        )));
    }
    let uid = rustix::process::getuid().as_raw();
    if meta.uid() != uid {
        return Err(AdoptError::Foreign(format!(
            "{} is owned by uid {}, not {uid}",
            socket.display(),
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(AdoptError::Foreign(format!(
            "{} has mode {:o}, not 0600",
            socket.display(),
            meta.mode() & 0o777
        )));
    }
    let stream = UnixStream::connect(socket)
        .map_err(|e| AdoptError::Stale(format!("{}: {e}", socket.display())))?;
    let cred = rustix::net::sockopt::socket_peercred(&stream)
        .map_err(|e| AdoptError::Protocol(format!("reading the peer's credentials: {e}")))?;
    if cred.uid.as_raw() != uid {
        return Err(AdoptError::Foreign(format!(
            "the peer runs as uid {}, not {uid}",
            cred.uid.as_raw()
        )));
    }
    handshake(stream, id).map_err(|e| AdoptError::Protocol(format!("{e:#}")))
}

fn handshake(mut stream: UnixStream, id: &str) -> anyhow::Result<Adopted> {
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    write_frame(
        &mut stream,
        b'h',
        &serde_json::to_vec(&Hello { v: VERSION })?,
    )?;
    let mut fds = Vec::new();
    let mut rx = FdReader {
        stream: &stream,
        fds: &mut fds,
    };
    let header: Header = match read_frame(&mut rx)? {
        Some((b'H', p)) => serde_json::from_slice(&p)?,
        Some((t, _)) => anyhow::bail!("expected a header, got frame {t:#x}"),
        None => anyhow::bail!("closed before its header"),
    };
    anyhow::ensure!(
        header.v == VERSION,
        "wire version {} is not {VERSION}",
        header.v
    );
    anyhow::ensure!(header.id == id, "it holds {}, not {id}", header.id);
    anyhow::ensure!(
        header.ring_len <= holder::RING_BYTES as u64 && header.ring_len <= header.total,
        "ring of {} bytes is out of bounds",
        header.ring_len
    );
    let mut ring = Vec::with_capacity(header.ring_len as usize);
    let (master, exit) = loop {
        match read_frame(&mut rx)? {
            Some((b'R', p)) => {
                anyhow::ensure!(
                    ring.len() + p.len() <= header.ring_len as usize,
                    "more ring than announced"
                );
                ring.extend_from_slice(&p);
            }
            Some((b'F', _)) => {
                let fd = rx
                    .fds
                    .pop()
                    .context_msg("the master frame carried no descriptor")?;
                break (Some(fd), None);
            }
            Some((b'X', p)) => break (None, Some(serde_json::from_slice::<ExitFrame>(&p)?)),
            Some((t, _)) => anyhow::bail!("unexpected frame {t:#x} in the handshake"),
            None => anyhow::bail!("closed during the handshake"),
        }
    };
    anyhow::ensure!(
        ring.len() as u64 == header.ring_len,
        "ring of {} bytes, {} announced",
        ring.len(),
        header.ring_len
    );
    stream.set_read_timeout(None)?;
    stream.set_write_timeout(None)?;
    Ok(Adopted {
        header,
        ring,
        master,
        exit,
        stream,
    })
}

trait ContextMsg<T> {
    fn context_msg(self, msg: &'static str) -> anyhow::Result<T>;
}

impl<T> ContextMsg<T> for Option<T> {
    fn context_msg(self, msg: &'static str) -> anyhow::Result<T> {
        self.ok_or_else(|| anyhow::anyhow!(msg))
    }
}

/// Reads the handshake with `recvmsg`, keeping any descriptors that arrive with the bytes.
struct FdReader<'a> {
    stream: &'a UnixStream,
    fds: &'a mut Vec<OwnedFd>,
}

impl Read for FdReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = loop {
            match recvmsg(
                self.stream,
                &mut [std::io::IoSliceMut::new(buf)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Err(rustix::io::Errno::INTR) => continue,
                r => break r?,
            }
        };
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = msg {
                self.fds.extend(fds);
            }
        }
        Ok(got.bytes)
    }
}

/// Tells a holder to end its child (SIGHUP); the exit comes back as an `X` frame.
pub fn send_kill(stream: &mut UnixStream) -> std::io::Result<()> {
    write_frame(stream, b'k', &[])
}

/// Tells a holder to end its child and then exit without waiting for a node (this node is
/// shutting down gracefully).
pub fn send_quit(stream: &mut UnixStream) -> std::io::Result<()> {
    write_frame(stream, b'q', &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> Record {
        Record {
            id: id.into(),
            tuic_session: "00000000-0000-4000-8000-000000000001".into(),
            alias: "tmp-1".into(),
            cwd: "/tmp".into(),
            shell: "/bin/sh".into(),
            args: Vec::new(),
            rows: 24,
            cols: 80,
            name: None,
            name_is_custom: false,
            name_from_spawn: false,
            parent_session: None,
            description: None,
            created_ms: 1,
            socket: "/tmp/x.sock".into(),
        }
    }

    fn stored(store: &Store) -> Vec<Record> {
        store
            .held_sessions()
            .unwrap()
            .iter()
            .map(|(_, j)| serde_json::from_slice(j).unwrap())
            .collect()
    }

    #[test]
    fn records_follow_changes_and_a_removal_is_final() {
        let d = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&d.path().join("state.redb")).unwrap());
        let p = Persist::new(store.clone(), record("pty-a")).unwrap();
        assert_eq!(stored(&store), vec![record("pty-a")]);
        for cols in 81..=120 {
            p.update(|r| r.cols = cols);
        }
        p.update(|r| r.name = Some("renamed".into()));
        p.update(|r| r.description = Some("builds the docs".into()));
        // Saved in the background: wait for the writer to go idle, then read.
        {
            let mut g = p.lock();
            while g.writing {
                g = p.idle.wait(g).unwrap();
            }
        }
        let got = stored(&store);
        assert_eq!(
            (got[0].cols, got[0].name.as_deref()),
            (120, Some("renamed"))
        );
        // A change racing the removal never brings the record back.
        p.update(|r| r.rows = 50);
        p.remove();
        p.update(|r| r.rows = 60);
        assert!(stored(&store).is_empty());
    }

    #[test]
    fn a_socket_that_is_not_ours_or_not_there_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("gone.sock");
        assert!(matches!(connect(&missing, "x"), Err(AdoptError::Stale(_))));
        let plain = d.path().join("file.sock");
        std::fs::write(&plain, b"").unwrap();
        let e = connect(&plain, "x").unwrap_err();
        assert!(e.to_string().contains("is not a socket"), "{e}");
        let open = d.path().join("open.sock");
        let _l = std::os::unix::net::UnixListener::bind(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = connect(&open, "x").unwrap_err();
        assert!(matches!(e, AdoptError::Foreign(_)), "{e}");
    }
}
