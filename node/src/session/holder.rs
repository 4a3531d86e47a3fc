//! The session holder: a small process (`tuic-node hold`, detached with `setsid`) that is the
//! parent of one session's child, owns its PTY, reaps the child and keeps its exit status, and
//! keeps the last [`RING_BYTES`] of output — so a node that dies (`kill -9`, crash, upgrade
//! re-exec) loses no terminal: the next node re-adopts the holder (`session::held`).
//!
//! The holder always reads the PTY: each read goes to its ring and, while a node is connected,
//! to that node as an output frame. The node gets the PTY master itself (`SCM_RIGHTS`) for
//! input, resize and the foreground group, so keystrokes take the same path as before.
//! One node connection at a time; a new one replaces the old (the old node is gone: the node
//! lock allows one node per config dir).
//!
//! This module does not know sessions, the registry or the store; it serves one socket.
//!
//! Wire: frames of `tag: u8, len: u32 BE, payload`. Node to holder: `h` hello (JSON
//! [`Hello`]), `k` kill the child (SIGHUP), `q` kill the child and exit once it ended without
//! waiting for a node (graceful node shutdown). Holder to node, on hello: `H` (JSON
//! [`Header`]), `R` ring bytes (zero or more frames, `ring_len` bytes in all), then `F` (one
//! byte carrying the PTY master with `SCM_RIGHTS`) while the child runs, or `X` (JSON
//! [`ExitFrame`]) when it already exited; afterwards `O` output frames and one `X`.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use serde::{Deserialize, Serialize};

/// Wire version exchanged in the hello.
pub const VERSION: u32 = 1;

/// Output the holder retains for a node that re-adopts it (the node's own raw ring size).
pub const RING_BYTES: usize = super::backlog::RING_BYTES as usize;

/// Largest frame accepted from a peer (the ring goes in frames of at most this).
pub const MAX_FRAME: usize = 1024 * 1024;

/// How long the reader may drain the PTY after the child exits (a grandchild holding the
/// terminal open would otherwise hold the exit back forever).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How long a peer may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// What the node asks the holder to start (written as JSON to the holder's stdin).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HoldSpec {
    /// The session's PTY id (names the socket; checked on every hello).
    pub id: String,
    /// Program.
    pub shell: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Start directory.
    pub cwd: String,
    /// Extra environment (the holder's own environment is the node's).
    pub env: Vec<(String, String)>,
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// The node's first frame.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    /// Wire version ([`VERSION`]).
    pub v: u32,
}

/// The holder's answer to a hello.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    /// Wire version ([`VERSION`]).
    pub v: u32,
    /// The session's PTY id.
    pub id: String,
    /// The child's pid.
    pub pid: u32,
    /// The holder's own pid (logs, `ps`).
    pub holder_pid: u32,
    /// Output bytes ever read from the PTY: the ring's last byte is at `total - 1`.
    pub total: u64,
    /// Ring bytes that follow in `R` frames.
    pub ring_len: u64,
}

/// How the child ended.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExitFrame {
    /// Exit status (absent when a signal ended it).
    pub code: Option<i32>,
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, tag: u8, payload: &[u8]) -> std::io::Result<()> {
    // One write per frame: a keystroke's echo costs the holder one syscall, not two.
    let mut frame = Vec::with_capacity(5 + payload.len());
    frame.push(tag);
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload);
    w.write_all(&frame)
}

/// Reads one frame; `Ok(None)` on a clean end of stream before a frame starts.
pub fn read_frame(r: &mut impl Read) -> std::io::Result<Option<(u8, Vec<u8>)>> {
    let mut head = [0u8; 5];
    match r.read_exact(&mut head[..1]) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    r.read_exact(&mut head[1..])?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is over the {MAX_FRAME}-byte limit"),
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some((head[0], payload)))
}

/// The holder's shared state.
struct State {
    /// The last [`RING_BYTES`] of output.
    ring: VecDeque<u8>,
    /// Output bytes ever read.
    total: u64,
    /// The connected node (a generation number, so a stale reader does not drop a newer one).
    conn: Option<(u64, UnixStream)>,
    /// Set once the child ended and its output was drained.
    exit: Option<ExitFrame>,
    /// A node shut down gracefully: exit once the child ended, node or not.
    quit: bool,
}

struct Shared {
    state: Mutex<State>,
    /// The session's PTY id, told to every node in the header.
    id: String,
    /// The child's pid.
    pid: u32,
    killer: Mutex<Box<dyn portable_pty::ChildKiller + Send + Sync>>,
    socket: PathBuf,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A raw descriptor borrowed for one `dup` (portable-pty exposes its master only as a raw fd;
/// `filedescriptor` does the duplication so this crate needs no `unsafe`).
struct Raw(RawFd);

impl AsRawFd for Raw {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// `tuic-node hold --socket PATH`: reads a [`HoldSpec`] from stdin, starts the child, binds
/// the socket, prints `ready <pid>` (or `error: …`) on stdout and serves until the child
/// ended and a node collected the exit.
pub fn main(socket: &Path) -> anyhow::Result<()> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let spec: HoldSpec = serde_json::from_str(&input)?;
    let mut out = std::io::stdout();
    match start(spec, socket) {
        Ok((pid, listener, shared, master)) => {
            writeln!(out, "ready {pid}")?;
            out.flush()?;
            serve(listener, shared, &master);
            Ok(())
        }
        Err(e) => {
            let _ = writeln!(out, "error: {e:#}");
            let _ = out.flush();
            Err(e)
        }
    }
}

type Started = (
    u32,
    UnixListener,
    Arc<Shared>,
    filedescriptor::FileDescriptor,
);

fn start(spec: HoldSpec, socket: &Path) -> anyhow::Result<Started> {
    use anyhow::Context;
    // Its own session: a `kill -9` of the node's process group does not reach the holder.
    rustix::process::setsid().context("leaving the node's session")?;
    let pair = native_pty_system()
        .openpty(PtySize {
            rows: spec.rows,
            cols: spec.cols,
            pixel_width: 0,
            pixel_height: 0,
        })
        .context("opening the pty")?;
    let mut cmd = CommandBuilder::new(&spec.shell);
    cmd.args(&spec.args);
    cmd.cwd(&spec.cwd);
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    let mut child = pair
        .slave
        .spawn_command(cmd)
        .with_context(|| format!("starting {}", spec.shell))?;
    drop(pair.slave);
    let pid = child.process_id().unwrap_or(0);
    let raw = pair
        .master
        .as_raw_fd()
        .context("the pty master has no descriptor")?;
    let master_fd =
        filedescriptor::FileDescriptor::dup(&Raw(raw)).context("duplicating the pty")?;
    let reader = pair.master.try_clone_reader()?;
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket)
        .with_context(|| format!("binding the holder socket {}", socket.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    }
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            ring: VecDeque::new(),
            total: 0,
            conn: None,
            exit: None,
            quit: false,
        }),
        id: spec.id.clone(),
        pid,
        killer: Mutex::new(child.clone_killer()),
        socket: socket.to_path_buf(),
    });
    let ino = {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(socket)?.ino()
    };
    let ss = shared.clone();
    std::thread::spawn(move || watch_socket(&ss, ino));
    let (drained_tx, drained_rx) = std::sync::mpsc::channel::<()>();
    let rs = shared.clone();
    std::thread::spawn(move || {
        read_loop(&rs, reader);
        let _ = drained_tx.send(());
    });
    let ws = shared.clone();
    std::thread::spawn(move || {
        let code = match child.wait() {
            Ok(st) if st.signal().is_none() => Some(st.exit_code() as i32),
            _ => None,
        };
        let _ = drained_rx.recv_timeout(DRAIN_GRACE);
        let exit = ExitFrame { code };
        let mut st = lock(&ws.state);
        st.exit = Some(exit);
        let delivered = match &mut st.conn {
            Some((_, c)) => write_frame(c, b'X', &serde_json::to_vec(&exit).unwrap_or_default())
                .and_then(|()| c.flush())
                .is_ok(),
            None => false,
        };
        if delivered || st.quit {
            finish(&ws);
        }
    });
    Ok((pid, listener, shared, master_fd))
}

/// Ends the child (SIGHUP, then SIGKILL after [`QUIT_GRACE`]) and the holder with it, node
/// or not.
fn quit(s: &Shared) {
    let mut st = lock(&s.state);
    st.quit = true;
    if st.exit.is_some() {
        finish(s);
    }
    drop(st);
    let _ = lock(&s.killer).kill();
    let pid = s.pid;
    std::thread::spawn(move || {
        std::thread::sleep(QUIT_GRACE);
        if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    });
}

/// How long a child may take to end after SIGHUP when the holder quits.
const QUIT_GRACE: Duration = Duration::from_secs(5);

/// How often the holder checks that its socket is still in place.
const SOCKET_CHECK: Duration = Duration::from_secs(1);

/// A holder whose socket was removed or replaced (its config dir deleted) can never be
/// re-adopted: it quits rather than keep an unreachable terminal running.
fn watch_socket(s: &Shared, ino: u64) {
    use std::os::unix::fs::MetadataExt;
    loop {
        std::thread::sleep(SOCKET_CHECK);
        let here = std::fs::symlink_metadata(&s.socket).is_ok_and(|m| m.ino() == ino);
        if !here {
            eprintln!(
                "holder: socket {} is gone; ending the session",
                s.socket.display()
            );
            quit(s);
            return;
        }
    }
}

/// Removes the socket and ends the process (the child ended and its exit was delivered, or
/// the node asked to quit).
fn finish(s: &Shared) -> ! {
    let _ = std::fs::remove_file(&s.socket);
    // The log (the node points the holder's stderr at it) only matters while it runs.
    let _ = std::fs::remove_file(s.socket.with_extension("log"));
    std::process::exit(0)
}

/// Reads the PTY into the ring and to the connected node. Like the node's own reader
/// (`pty::Yielding`), a reader streaming bulk output runs at a lower priority and lets short
/// reads gather, so the holders of interactive sessions go first on a busy machine.
fn read_loop(s: &Shared, mut reader: Box<dyn Read + Send>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut yielding = super::pty::Yielding::new(std::time::Instant::now());
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        yielding.observe(n, std::time::Instant::now());
        forward(s, &buf[..n]);
        yielding.gather(n);
    }
}

/// One read: into the ring, then to the connected node.
fn forward(s: &Shared, bytes: &[u8]) {
    let mut st = lock(&s.state);
    st.total += bytes.len() as u64;
    st.ring.extend(bytes);
    let over = st.ring.len().saturating_sub(RING_BYTES);
    st.ring.drain(..over);
    if let Some((_, c)) = &mut st.conn
        && write_frame(c, b'O', bytes).is_err()
    {
        st.conn = None;
    }
}

/// Accepts nodes until the process ends. `master` (a copy of the PTY master) lives as long as
/// the holder, so the PTY outlives every node connection.
fn serve(listener: UnixListener, s: Arc<Shared>, master: &filedescriptor::FileDescriptor) {
    let mut generation = 0u64;
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        generation += 1;
        if let Err(e) = adopt(&s, conn, generation, master) {
            eprintln!("holder: refused a peer: {e:#}");
        }
    }
}

/// Answers one node's hello: header, ring, master (or exit), then streams output to it.
fn adopt(
    s: &Arc<Shared>,
    mut conn: UnixStream,
    generation: u64,
    master: &filedescriptor::FileDescriptor,
) -> anyhow::Result<()> {
    let cred = rustix::net::sockopt::socket_peercred(&conn)?;
    anyhow::ensure!(
        cred.uid == rustix::process::getuid(),
        "peer uid {} is not ours",
        cred.uid.as_raw()
    );
    conn.set_read_timeout(Some(HELLO_TIMEOUT))?;
    let hello = match read_frame(&mut conn)? {
        Some((b'h', p)) => serde_json::from_slice::<Hello>(&p)?,
        Some((t, _)) => anyhow::bail!("expected a hello, got frame {t:#x}"),
        None => anyhow::bail!("peer closed before its hello"),
    };
    anyhow::ensure!(
        hello.v == VERSION,
        "wire version {} is not {VERSION}",
        hello.v
    );
    conn.set_read_timeout(None)?;
    // A peer that says hello and then never reads must not hold the ring (and with it the
    // reader and the child) for long.
    conn.set_write_timeout(Some(HELLO_TIMEOUT))?;
    let mut st = lock(&s.state);
    let header = Header {
        v: VERSION,
        id: s.id.clone(),
        pid: s.pid,
        holder_pid: std::process::id(),
        total: st.total,
        ring_len: st.ring.len() as u64,
    };
    write_frame(&mut conn, b'H', &serde_json::to_vec(&header)?)?;
    let (a, b) = st.ring.as_slices();
    for part in [a, b] {
        for chunk in part.chunks(MAX_FRAME) {
            write_frame(&mut conn, b'R', chunk)?;
        }
    }
    if let Some(exit) = st.exit {
        write_frame(&mut conn, b'X', &serde_json::to_vec(&exit)?)?;
        conn.flush()?;
        finish(s);
    }
    send_fd(&conn, master)?;
    // From here a slow node slows the child, as a slow reader of a PTY always did.
    conn.set_write_timeout(None)?;
    st.conn = Some((generation, conn.try_clone()?));
    drop(st);
    let s = s.clone();
    std::thread::spawn(move || commands(&s, conn, generation));
    Ok(())
}

/// Sends the `F` frame with the PTY master attached.
fn send_fd(conn: &UnixStream, fd: &filedescriptor::FileDescriptor) -> std::io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let frame = [b'F', 0, 0, 0, 1, 0];
    let fds = [fd.as_fd()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("ancillary buffer too small"));
    }
    let n = sendmsg(
        conn,
        &[std::io::IoSlice::new(&frame)],
        &mut control,
        SendFlags::empty(),
    )?;
    if n < frame.len() {
        // The descriptor went with the first bytes; the rest is plain data.
        (&*conn).write_all(&frame[n..])?;
    }
    Ok(())
}

/// Reads a connected node's commands until it goes away.
fn commands(s: &Shared, conn: UnixStream, generation: u64) {
    let mut r = std::io::BufReader::new(conn);
    loop {
        match read_frame(&mut r) {
            Ok(Some((b'k', _))) => {
                let _ = lock(&s.killer).kill();
            }
            Ok(Some((b'q', _))) => quit(s),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    let mut st = lock(&s.state);
    if st.conn.as_ref().is_some_and(|(g, _)| *g == generation) {
        st.conn = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_frames_are_refused() {
        let mut wire = Vec::new();
        write_frame(&mut wire, b'O', b"hello").unwrap();
        write_frame(&mut wire, b'k', &[]).unwrap();
        let mut r = wire.as_slice();
        assert_eq!(read_frame(&mut r).unwrap(), Some((b'O', b"hello".to_vec())));
        assert_eq!(read_frame(&mut r).unwrap(), Some((b'k', Vec::new())));
        // A clean end between frames.
        assert_eq!(read_frame(&mut r).unwrap(), None);
        // A frame cut short is an error, not a clean end.
        let mut cut = &wire[..7];
        assert_eq!(
            read_frame(&mut cut).unwrap_err().kind(),
            std::io::ErrorKind::UnexpectedEof
        );
        // A length over the limit is refused before anything is allocated.
        let mut huge = vec![b'O'];
        huge.extend_from_slice(&(MAX_FRAME as u32 + 1).to_be_bytes());
        let e = read_frame(&mut huge.as_slice()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("over the"), "{e}");
    }
}
