//! Starting a session's process on a PTY and running its reader and waiter threads.
//!
//! The reader is a dedicated OS thread: PTY reads block, and they must never occupy an async
//! worker. It appends each read to the raw ring, feeds the screen (bulk plain text is only
//! queued there, see `screen`) and wakes subscribers once. The waiter reaps the child, then
//! waits for the reader to drain the PTY so that the exit is published only after every byte
//! the process wrote has been fed. A held session (`spawn_held`, `adopt`) has one thread that
//! reads its holder's output frames the same way and receives the exit in-band after them.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use portable_pty::{ChildKiller, CommandBuilder, MasterPty, PtySize, native_pty_system};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::backlog::Backlog;
use super::capture::{Capture, Direction};
use super::valuemask::Masker;
use super::{Exit, LOG_LINES, Name, Screen, Session, lock, now_ms};

/// Read buffer size: large enough that bulk output costs few wakeups.
const READ_BUF: usize = 64 * 1024;

/// Output set aside while a screen reader holds the screen, at most.
const DEFER_MAX: usize = 4 * 1024 * 1024;

/// How long the waiter lets the reader drain after the child exits. A grandchild that keeps
/// the terminal open would otherwise hold the exit back forever.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Everything needed to start one process (or to name a re-adopted one).
pub(super) struct Spawn {
    pub(super) id: String,
    pub(super) tuic_session: String,
    pub(super) alias: String,
    pub(super) cwd: String,
    pub(super) shell: String,
    pub(super) args: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) rows: u16,
    pub(super) cols: u16,
    pub(super) name: Name,
    /// The spawning agent's registered identity (`agent action=spawn`).
    pub(super) parent_session: Option<String>,
    /// The screen's cells in the node's budget, already taken.
    pub(super) charge: super::budget::Charge,
    /// Where the program's stderr goes instead of the terminal (`stderr`), when asked.
    pub(super) stderr_file: Option<std::path::PathBuf>,
    /// The secret values masked out of its output (`valuemask`).
    pub(super) redactions: Arc<super::valuemask::Redactions>,
}

impl Spawn {
    /// The program and arguments actually started: the session's own, or wrapped so that
    /// its stderr goes to the session's stderr file (`stderr::wrap`).
    fn launched(&self) -> (String, Vec<String>) {
        match &self.stderr_file {
            Some(f) => super::stderr::wrap(f, &self.shell, &self.args),
            None => (self.shell.clone(), self.args.clone()),
        }
    }
}

/// The PTY master as the node holds it.
pub(super) enum Master {
    /// Opened by this process (no holder).
    Direct(Box<dyn MasterPty + Send>),
    /// Passed by the session's holder (`session::holder`).
    Held(OwnedFd),
    /// The child ended before a holder was re-adopted: no terminal left.
    Gone,
}

impl Master {
    /// The pid leading the terminal's foreground process group.
    pub(super) fn process_group_leader(&self) -> Option<i32> {
        match self {
            Self::Direct(m) => m.process_group_leader(),
            Self::Held(fd) => rustix::termios::tcgetpgrp(fd)
                .ok()
                .map(|p| p.as_raw_nonzero().get()),
            Self::Gone => None,
        }
    }

    /// Sets the terminal size (the kernel tells the foreground group with SIGWINCH).
    pub(super) fn resize(&self, size: PtySize) -> Result<(), String> {
        match self {
            Self::Direct(m) => m.resize(size).map_err(|e| e.to_string()),
            Self::Held(fd) => rustix::termios::tcsetwinsize(
                fd,
                rustix::termios::Winsize {
                    ws_row: size.rows,
                    ws_col: size.cols,
                    ws_xpixel: 0,
                    ws_ypixel: 0,
                },
            )
            .map_err(|e| e.to_string()),
            Self::Gone => Err("the terminal is gone".into()),
        }
    }
}

/// Ends the child.
pub(super) enum Killer {
    /// This process's child.
    Direct(Box<dyn ChildKiller + Send + Sync>),
    /// The holder's child: the holder is asked over its socket.
    Held(UnixStream),
}

impl Killer {
    /// SIGHUP, as a closing terminal sends.
    pub(super) fn kill(&mut self) {
        match self {
            Self::Direct(k) => {
                let _ = k.kill();
            }
            Self::Held(s) => {
                let _ = super::held::send_kill(s);
            }
        }
    }

    /// Ends the child and lets its holder exit without a node (graceful node shutdown).
    pub(super) fn quit(&mut self) {
        match self {
            Self::Direct(k) => {
                let _ = k.kill();
            }
            Self::Held(s) => {
                let _ = super::held::send_quit(s);
            }
        }
    }
}

/// The parts of a session that differ between a direct and a held PTY.
struct Parts {
    pid: Option<u32>,
    writer: Box<dyn Write + Send>,
    master: Master,
    killer: Killer,
    stream: Backlog,
    persist: Option<Arc<super::held::Persist>>,
}

fn new_session(s: Spawn, p: Parts) -> Arc<Session> {
    let (wake, _) = watch::channel(0u64);
    let (lifecycle, _) = watch::channel(0u64);
    Arc::new(Session {
        id: s.id,
        tuic_session: s.tuic_session,
        alias: s.alias,
        cwd: s.cwd,
        shell: s.shell,
        pid: p.pid,
        display_name: Mutex::new(s.name),
        parent_session: Mutex::new(s.parent_session),
        stream: Mutex::new(p.stream),
        deferred: Mutex::new(Vec::new()),
        screen: Mutex::new(Screen::new(s.rows, s.cols, LOG_LINES)),
        wake,
        lifecycle,
        writer: Mutex::new(p.writer),
        master: Mutex::new(p.master),
        killer: Mutex::new(p.killer),
        exit: OnceLock::new(),
        last_output_ms: AtomicU64::new(0),
        last_input_ms: AtomicU64::new(0),
        agent: Mutex::new(None),
        seen: Mutex::default(),
        fits: Mutex::default(),
        probe: Mutex::new(None),
        turn_epoch: AtomicU64::new(0),
        submit_claim: Default::default(),
        composer: Mutex::new(super::input::Composer::default()),
        description: Mutex::new(None),
        persist: p.persist,
        charge: Mutex::new(Some(s.charge)),
        stderr_file: s.stderr_file,
    })
}

/// Records the exit once every byte was fed, wakes everyone, then runs `on_exit`.
fn publish_exit(s: &Arc<Session>, code: Option<i32>, on_exit: impl FnOnce(&Arc<Session>)) {
    let _ = s.exit.set(Exit { code });
    // Ended: its cells go back to the node's budget and a large screen's memory with them,
    // before anyone is woken to read the final screen.
    s.release_screen();
    s.wake.send_modify(|v| *v += 1);
    s.lifecycle.send_modify(|v| *v += 1);
    on_exit(s);
}

/// Starts the process in this node; `on_exit` runs on the waiter thread once the exit is
/// recorded.
pub(super) fn spawn(
    s: Spawn,
    capture: Arc<Capture>,
    on_exit: impl FnOnce(&Arc<Session>) + Send + 'static,
) -> anyhow::Result<Arc<Session>> {
    let size = PtySize {
        rows: s.rows,
        cols: s.cols,
        pixel_width: 0,
        pixel_height: 0,
    };
    let pair = native_pty_system().openpty(size)?;
    let (program, args) = s.launched();
    let mut cmd = CommandBuilder::new(&program);
    cmd.args(&args);
    cmd.cwd(&s.cwd);
    // The node's allocator setting is its own, not the user's programs'.
    cmd.env_remove(crate::ALLOCATOR_ENV);
    for (k, v) in &s.env {
        cmd.env(k, v);
    }
    let mut child = pair.slave.spawn_command(cmd)?;
    // The parent's copy of the slave must close, or reads never see EOF after the child exits.
    drop(pair.slave);
    let reader = pair.master.try_clone_reader()?;
    let writer = pair.master.take_writer()?;
    let killer = child.clone_killer();
    let masker = Masker::new(s.redactions.clone());
    let session = new_session(
        s,
        Parts {
            pid: child.process_id(),
            writer,
            master: Master::Direct(pair.master),
            killer: Killer::Direct(killer),
            stream: Backlog::default(),
            persist: None,
        },
    );

    let (drained_tx, drained_rx) = mpsc::channel::<()>();
    let rs = session.clone();
    std::thread::Builder::new()
        .name(format!("pty-read-{}", rs.id))
        .stack_size(256 * 1024)
        .spawn(move || {
            read_loop(&rs, reader, &capture, masker);
            let _ = drained_tx.send(());
        })?;
    let ws = session.clone();
    std::thread::Builder::new()
        .name(format!("pty-wait-{}", ws.id))
        .stack_size(128 * 1024)
        .spawn(move || {
            let code = match child.wait() {
                Ok(st) if st.signal().is_none() => Some(st.exit_code() as i32),
                Ok(_) => None,
                Err(e) => {
                    warn!(session = %ws.id, error = %e, "waiting for the child");
                    None
                }
            };
            if drained_rx.recv_timeout(DRAIN_GRACE).is_err() {
                debug!(session = %ws.id, "pty still open after exit; publishing exit anyway");
            }
            publish_exit(&ws, code, on_exit);
        })?;
    Ok(session)
}

/// Starts the process under a holder (`session::holder`), records it in the store and
/// connects to it; `on_exit` runs on the reader thread once the holder reports the exit.
pub(super) fn spawn_held(
    s: Spawn,
    cfg: &super::held::HolderConfig,
    capture: Arc<Capture>,
    on_exit: impl FnOnce(&Arc<Session>) + Send + 'static,
) -> anyhow::Result<Arc<Session>> {
    use super::held;
    let (program, args) = s.launched();
    let spec = super::holder::HoldSpec {
        id: s.id.clone(),
        shell: program,
        args,
        cwd: s.cwd.clone(),
        env: s.env.clone(),
        rows: s.rows,
        cols: s.cols,
    };
    let socket = held::start(cfg, &spec)?;
    let mut adopted = held::connect(&socket, &s.id)?;
    let record = held::Record {
        id: s.id.clone(),
        tuic_session: s.tuic_session.clone(),
        alias: s.alias.clone(),
        cwd: s.cwd.clone(),
        shell: s.shell.clone(),
        args: s.args.clone(),
        rows: s.rows,
        cols: s.cols,
        name: s.name.text.clone(),
        name_is_custom: s.name.is_custom,
        name_from_spawn: s.name.from_spawn,
        parent_session: s.parent_session.clone(),
        description: None,
        created_ms: now_ms(),
        socket,
    };
    let persist = match held::Persist::new(cfg.store.clone(), record) {
        Ok(p) => p,
        Err(e) => {
            // Not recorded: it could never be re-adopted, so it must not outlive this node.
            let _ = held::send_quit(&mut adopted.stream);
            return Err(e.context("recording the held session"));
        }
    };
    adopt(s, adopted, Some(persist), capture, on_exit)
}

/// Builds the session of a connected holder: the raw ring continues at the holder's offsets
/// and the screen is rebuilt from its ring (the emulator's answers to old queries are
/// dropped, not typed into the terminal again).
pub(super) fn adopt(
    s: Spawn,
    a: super::held::Adopted,
    persist: Option<Arc<super::held::Persist>>,
    capture: Arc<Capture>,
    on_exit: impl FnOnce(&Arc<Session>) + Send + 'static,
) -> anyhow::Result<Arc<Session>> {
    // The holder keeps the raw bytes: the adopted ring is masked like any read.
    let mut a = a;
    s.redactions.mask_complete(&mut a.ring);
    let masker = Masker::new(s.redactions.clone());
    let mut stream = Backlog::starting_at(a.header.total - a.ring.len() as u64);
    stream.push(&a.ring);
    let writer: Box<dyn Write + Send> = match &a.master {
        Some(fd) => Box::new(std::fs::File::from(fd.try_clone()?)),
        None => Box::new(std::io::sink()),
    };
    let master = a.master.map_or(Master::Gone, Master::Held);
    let killer = Killer::Held(a.stream.try_clone()?);
    let session = new_session(
        s,
        Parts {
            pid: Some(a.header.pid),
            writer,
            master,
            killer,
            stream,
            persist,
        },
    );
    {
        let mut scr = lock(&session.screen);
        scr.start_at(a.header.total - a.ring.len() as u64);
        let _replies = scr.feed(&a.ring);
    }
    if !a.ring.is_empty() {
        session.last_output_ms.store(now_ms(), Ordering::Relaxed);
    }
    let rs = session.clone();
    let early = a.exit;
    let conn = a.stream;
    std::thread::Builder::new()
        .name(format!("pty-held-{}", rs.id))
        .stack_size(256 * 1024)
        .spawn(move || {
            let code = match early {
                Some(x) => x.code,
                None => held_loop(&rs, conn, &capture, masker),
            };
            finish_screen(&rs);
            publish_exit(&rs, code, on_exit);
        })?;
    Ok(session)
}

/// Reads a holder's output frames until its exit frame (or until it vanishes: no code).
fn held_loop(s: &Session, conn: UnixStream, capture: &Capture, mut masker: Masker) -> Option<i32> {
    let mut r = std::io::BufReader::with_capacity(READ_BUF + 8, conn);
    let mut yielding = Yielding::new(Instant::now());
    loop {
        match super::holder::read_frame(&mut r) {
            Ok(Some((b'O', bytes))) => {
                let out = masker.pass(&bytes);
                ingest(s, &out, capture, &mut yielding);
            }
            Ok(Some((b'X', p))) => {
                ingest(s, &masker.finish(), capture, &mut yielding);
                return serde_json::from_slice::<super::holder::ExitFrame>(&p)
                    .ok()
                    .and_then(|x| x.code);
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                warn!(session = %s.id, "the session holder went away without an exit");
                return None;
            }
        }
    }
}

/// Reads the PTY: each read goes to the raw ring, then the screen (which holds bulk plain text
/// back cheaply, see `screen`), then subscribers are woken once. The emulator's answers to
/// queries are written back to the PTY.
fn read_loop(s: &Session, mut reader: Box<dyn Read + Send>, capture: &Capture, mut masker: Masker) {
    let mut buf = vec![0u8; READ_BUF];
    let mut yielding = Yielding::new(Instant::now());
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // EIO: every holder of the slave side closed it.
            Err(_) => break,
        };
        let out = masker.pass(&buf[..n]);
        ingest(s, &out, capture, &mut yielding);
    }
    ingest(s, &masker.finish(), capture, &mut yielding);
    finish_screen(s);
}

/// One read of output: raw ring, screen, then subscribers are woken.
fn ingest(s: &Session, bytes: &[u8], capture: &Capture, yielding: &mut Yielding) {
    let n = bytes.len();
    if n == 0 {
        return;
    }
    yielding.observe(n, Instant::now());
    capture.record(&s.id, Direction::Output, bytes);
    lock(&s.stream).push(bytes);
    s.last_output_ms.store(now_ms(), Ordering::Relaxed);
    feed_screen(s, bytes);
    s.wake.send_modify(|v| *v += 1);
    yielding.gather(n);
}

/// Bytes held by an unterminated synchronized update are still output: apply them.
fn finish_screen(s: &Session) {
    let mut scr = lock(&s.screen);
    s.feed_deferred(&mut scr);
    scr.expire_sync(std::time::Instant::now() + Duration::from_secs(3600));
}

/// The span over which a reader's output rate is judged.
const WINDOW: Duration = Duration::from_millis(25);
/// Bytes per [`WINDOW`] at or above which output counts as bulk (~2.6 MB/s): far above any
/// typing echo or prompt, far below a `cat` of a file.
const BULK_PER_WINDOW: u64 = 64 * 1024;
/// Consecutive bulk windows (~100 ms) before a reader counts as bulk.
const BULK_WINDOWS: u32 = 4;
/// Consecutive quiet windows before a bulk reader counts as interactive again.
const CALM_WINDOWS: u32 = 2;
/// A bulk reader's read shorter than this (the line discipline hands over at most 4 KiB)...
const GATHER_BELOW: usize = 2048;
/// ...is followed by this pause, so output gathers into fuller reads.
const GATHER: Duration = Duration::from_micros(200);
/// The nice value of a bulk reader's thread.
const BULK_NICE: i32 = 10;

/// Scheduling for the reader thread: while its PTY streams bulk output, the thread runs at a
/// lower priority so the readers of interactive sessions (a keystroke's echo) go first on a
/// busy machine. Bulk throughput is unchanged when the CPU is free. Going back to the normal
/// priority needs `CAP_SYS_NICE` (or an `RLIMIT_NICE` allowance); without it the thread stays
/// at the lower priority, which only matters when the CPU is contended.
///
/// Bulk is judged by rate, not read size: a reader that keeps up with a fast producer reads
/// a few hundred bytes at a time, as often as the kernel hands them over.
pub(super) struct Yielding {
    window_start: Instant,
    window_bytes: u64,
    bulk: u32,
    calm: u32,
    niced: bool,
}

impl Yielding {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            window_start: now,
            window_bytes: 0,
            bulk: 0,
            calm: 0,
            niced: false,
        }
    }

    /// After a read of `n` bytes: a bulk reader that keeps up would wake for every few
    /// hundred bytes the kernel hands over; letting them gather costs the stream nothing (the
    /// kernel buffers far more than arrives meanwhile) and frees the CPU for interactive
    /// sessions.
    pub(super) fn gather(&self, n: usize) {
        if self.niced && n < GATHER_BELOW {
            std::thread::sleep(GATHER);
        }
    }

    pub(super) fn observe(&mut self, n: usize, now: Instant) {
        self.window_bytes += n as u64;
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed < WINDOW {
            return;
        }
        // Normalised to one window: a read after a long quiet spell closes a quiet window.
        let per_window = self.window_bytes as u128 * WINDOW.as_nanos() / elapsed.as_nanos().max(1);
        self.window_start = now;
        self.window_bytes = 0;
        if per_window >= BULK_PER_WINDOW as u128 {
            self.bulk += 1;
            self.calm = 0;
            if !self.niced && self.bulk >= BULK_WINDOWS {
                self.niced = set_thread_nice(BULK_NICE);
            }
        } else {
            self.bulk = 0;
            self.calm += 1;
            if self.niced && self.calm >= CALM_WINDOWS && set_thread_nice(0) {
                self.niced = false;
            }
        }
    }
}

/// Sets this thread's nice value; whether it took.
fn set_thread_nice(nice: i32) -> bool {
    rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice).is_ok()
}

/// Feeds one read to the screen. While a screen reader holds it (applying held-back text can
/// take milliseconds), the read is set aside instead, up to [`DEFER_MAX`], so the PTY is not
/// slowed; the next feed or screen read applies it first.
fn feed_screen(s: &Session, bytes: &[u8]) {
    let mut scr = match s.screen.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            let mut d = lock(&s.deferred);
            if d.len() + bytes.len() <= DEFER_MAX {
                d.extend_from_slice(bytes);
                return;
            }
            drop(d);
            lock(&s.screen)
        }
    };
    s.feed_deferred(&mut scr);
    let replies = scr.feed(bytes);
    drop(scr);
    if !replies.is_empty() {
        let _ = lock(&s.writer).write_all(&replies);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::capture::CaptureDir;

    #[test]
    fn a_bulk_reader_yields_the_cpu_and_an_interactive_one_does_not() {
        // On its own thread: the test harness's threads keep their priority.
        std::thread::spawn(|| {
            let nice =
                || rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
            let base = nice();
            let t0 = Instant::now();
            let at = |ms: u64| t0 + Duration::from_millis(ms);
            let mut y = Yielding::new(t0);
            // Interactive: an echo every 5 ms for 10 s never changes the priority.
            for i in 0..2_000 {
                y.observe(40, at(i * 5));
            }
            assert_eq!(nice(), base);
            // Bulk in small reads (a reader keeping up): 300 bytes every 0.1 ms is 3 MB/s.
            // One window short of the threshold keeps the priority, the threshold lowers it.
            let t1 = 10_000;
            let bulk_until = |y: &mut Yielding, from: u64, windows: u64| {
                for k in 0..windows * 250 {
                    y.observe(300, t0 + Duration::from_micros(from * 1_000 + k * 100));
                }
            };
            bulk_until(&mut y, t1, BULK_WINDOWS as u64);
            assert_eq!(
                nice(),
                base,
                "judged bulk before {BULK_WINDOWS} full windows"
            );
            y.observe(300, at(t1 + 25 * BULK_WINDOWS as u64));
            assert_eq!(nice(), BULK_NICE);
            // Calm again (a read after a quiet second, then an echo): back to normal where
            // the process may raise priority (root here).
            y.observe(40, at(t1 + 1_200));
            y.observe(40, at(t1 + 1_230));
            if rustix::process::getuid().is_root() {
                assert_eq!(nice(), 0);
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_held_screen_does_not_stall_the_reader_and_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = mpsc::channel();
        let n = 20_000;
        let s = spawn(
            Spawn {
                id: "t-held".into(),
                tuic_session: "t-held-id".into(),
                alias: "th-1".into(),
                cwd: "/tmp".into(),
                shell: "/bin/sh".into(),
                args: vec!["-c".into(), format!("seq 1 {n}")],
                env: Vec::new(),
                rows: 24,
                cols: 80,
                name: Name::default(),
                parent_session: None,
                charge: Arc::new(super::super::budget::CellBudget::default()).adopt(24, 80),
                stderr_file: None,
                redactions: Arc::default(),
            },
            Arc::new(Capture::new(CaptureDir::Dir(dir.path().to_path_buf()))),
            move |_| {
                let _ = tx.send(());
            },
        )
        .unwrap();
        {
            // While this reader holds the screen, output keeps reaching the raw ring.
            let _held = s.screen();
            let deadline = Instant::now() + Duration::from_secs(30);
            while s.stream().total() < 64 * 1024 {
                assert!(
                    Instant::now() < deadline,
                    "reader stalled behind the screen"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        rx.recv_timeout(Duration::from_secs(60)).unwrap();
        let scr = s.screen();
        assert_eq!(scr.log.total(), n);
        assert_eq!(scr.log.lines().back().map(String::as_str), Some("20000"));
        let info = scr.grid.scroll_info();
        assert_eq!(
            scr.grid.lines(info.total_lines - 2, info.total_lines),
            ["20000", ""]
        );
    }
}
