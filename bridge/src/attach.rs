//! `tuic attach`: the user's terminal shows a session and types into it, locally or through a
//! hub, the way `tmux attach` does.
//!
//! One attachment is: resize the session to this terminal, fetch the screen snapshot
//! (`GET /sessions/{id}/terminal/snapshot`: escape sequences that redraw it, and the raw stream
//! offset it reflects), paint it, then stream raw bytes from exactly that offset
//! (`WS /sessions/{id}/stream?binary=1&from_byte=N`) while typed bytes go the other way as
//! binary frames. The window size follows `SIGWINCH`. The detach key leaves the session
//! running. When the connection drops (the hub or the host went away) a line says so and the
//! attachment is retried with the shared reconnect backoff until it comes back, the session
//! is reported gone, or the retry budget runs out; the detach key gives up at any time. Keys
//! typed meanwhile are kept (up to 4 KiB) and sent once the session is back.
//! `tuic run` uses the same stream without raw mode and without input.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tuic_proto::ipc_http::Request;
use tuic_proto::peer::Backoff;
use tuic_proto::stream::StreamFrame;

use crate::ipc::{self, IpcError};
use crate::keys::{DetachKey, DetachWatch};
use crate::tty;

/// Bound of one HTTP request during an attachment.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How an attachment ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The detach key: the session keeps running.
    Detached,
    /// The session's process ended (its exit code, when it exited normally).
    Exited(Option<i32>),
    /// The session is not there (any more): why.
    Gone(String),
    /// The connection stayed down past the retry budget: the last reason.
    Unreachable(String),
}

/// What `attach` needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The IPC socket of the local node or hub.
    pub socket: PathBuf,
    /// The id session routes take (`host/id` for a remote session).
    pub route_id: String,
    /// For messages: `host/alias`.
    pub label: String,
    /// The detach key.
    pub detach: DetachKey,
    /// How long to keep re-attaching after the connection drops.
    pub reconnect_for: Duration,
}

/// Percent-encodes a route id for a path segment (`boxb/3` → `boxb%2F3`).
pub fn encode_id(id: &str) -> String {
    percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Why one attempt failed.
enum Attempt {
    /// 404: no such session (or connection).
    Gone(String),
    /// Anything that may heal: refused, reset, 503 from a hub whose host is down.
    Retry(String),
}

fn describe_ipc(e: &IpcError) -> String {
    match e {
        IpcError::NotRunning { .. } => "nothing listens on the local socket".into(),
        other => other.to_string(),
    }
}

/// `GET`/`POST` a JSON route; 404 is [`Attempt::Gone`].
async fn call(socket: &Path, req: Request) -> Result<Value, Attempt> {
    let resp = ipc::request(socket, &req, REQUEST_TIMEOUT)
        .await
        .map_err(|e| Attempt::Retry(describe_ipc(&e)))?;
    let v = resp.json().unwrap_or(Value::Null);
    let err = || {
        v["error"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| String::from_utf8_lossy(&resp.body).into_owned())
    };
    match resp.status() {
        200..=299 => Ok(v),
        404 => Err(Attempt::Gone(err())),
        s if s >= 500 => Err(Attempt::Retry(format!("{s}: {}", err()))),
        s => Err(Attempt::Gone(format!("{s}: {}", err()))),
    }
}

/// Sends this terminal's size to the session (the last client to attach or resize sets it).
async fn send_size(socket: &Path, route: &str) {
    if let Some((rows, cols)) = tty::size() {
        let req = Request::new("POST", &format!("/sessions/{route}/resize"))
            .json(&json!({"rows": rows, "cols": cols}));
        let _ = call(socket, req).await;
    }
}

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::UnixStream>;

/// Opens the raw stream at `offset`.
async fn open_stream(socket: &Path, route: &str, offset: u64) -> Result<Ws, Attempt> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| Attempt::Retry(format!("connecting {}: {e}", socket.display())))?;
    let url = format!("ws://localhost/sessions/{route}/stream?binary=1&from_byte={offset}");
    match tokio_tungstenite::client_async(url, stream).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            let body = r
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default()
                .into_owned();
            if r.status().as_u16() == 404 {
                Err(Attempt::Gone(body))
            } else {
                Err(Attempt::Retry(format!("{}: {body}", r.status())))
            }
        }
        Err(e) => Err(Attempt::Retry(e.to_string())),
    }
}

/// How one connected attachment ended.
enum Pump {
    Detached,
    Exited(Option<i32>),
    /// Reconnect at once (the stream lagged: repaint from a fresh snapshot).
    Repaint,
    Lost(String),
}

/// The exit code in an `exit` text frame.
fn exit_code(v: &Value) -> Option<i32> {
    v["exit_code"].as_i64().and_then(|c| i32::try_from(c).ok())
}

/// Reads stdin on its own thread (a blocked read cannot be cancelled; it ends with the
/// process) into a channel.
fn stdin_reader() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        let mut stdin = std::io::stdin().lock();
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}

/// Streams one connected attachment until it ends.
async fn pump(
    o: &Options,
    ws: Ws,
    held: Vec<u8>,
    keys: &mut mpsc::Receiver<Vec<u8>>,
    watch: &mut DetachWatch,
    winch: &mut tokio::signal::unix::Signal,
) -> Pump {
    let (mut tx, mut rx) = ws.split();
    if !held.is_empty() && tx.send(Message::Binary(held.into())).await.is_err() {
        return Pump::Lost("the connection closed".into());
    }
    let mut switches = SwitchFilter::default();
    loop {
        tokio::select! {
            typed = keys.recv() => {
                let Some(bytes) = typed else {
                    // stdin closed: nothing more can be typed; leave the session running.
                    return Pump::Detached;
                };
                let t = watch.feed(&bytes);
                if !t.send.is_empty() && tx.send(Message::Binary(t.send.into())).await.is_err() {
                    return Pump::Lost("the connection closed".into());
                }
                if t.detach {
                    let _ = tx.close().await;
                    return Pump::Detached;
                }
            }
            msg = rx.next() => match msg {
                Some(Ok(Message::Binary(b))) => {
                    let (bytes, switched) = switches.feed(&b);
                    tty::out(&bytes);
                    if switched {
                        // The session changed screens: show the one it is on now.
                        let _ = tx.close().await;
                        return Pump::Repaint;
                    }
                }
                Some(Ok(Message::Text(t))) => {
                    match serde_json::from_str::<StreamFrame>(t.as_str()) {
                        Ok(StreamFrame::Exit { exit_code }) => return Pump::Exited(exit_code),
                        Ok(StreamFrame::Lagged { .. }) => return Pump::Repaint,
                        Ok(StreamFrame::Closed) => return Pump::Lost("the host is shutting down".into()),
                        // hello, parsed events: nothing to draw.
                        _ => {}
                    }
                }
                Some(Ok(Message::Close(_))) | None => {
                    return Pump::Lost("the connection closed".into());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Pump::Lost(e.to_string()),
            },
            _ = winch.recv() => send_size(&o.socket, &encode_id(&o.route_id)).await,
        }
    }
}

/// Keeps the session's screen switches away from the user's terminal. `tuic attach` shows the
/// session on the alternate screen it entered ([`tty::ENTER`]); a switch the session makes
/// (`?1049`, `?1047`, `?47`: vim starting or ending) passed through would flip the user's own
/// screen in and out and move their saved cursor. The filter drops those parameters (keeping
/// any others of the same sequence) and reports the switch, so the attachment repaints from a
/// snapshot, which shows the session's current screen either way. A sequence split across
/// reads is held until it is whole (at most [`SwitchFilter::HOLD_MAX`] bytes).
#[derive(Debug, Default)]
pub struct SwitchFilter {
    pending: Vec<u8>,
}

/// How the bytes at an escape start.
enum Private<'a> {
    /// Not a private mode set/reset.
    No,
    /// It may be one: more bytes are needed.
    Incomplete,
    /// `ESC [ ? params final` of `len` bytes.
    Mode {
        len: usize,
        params: &'a [u8],
        fin: u8,
    },
}

fn private_mode(s: &[u8]) -> Private<'_> {
    let prefix = b"\x1b[?";
    let n = s.len().min(prefix.len());
    if s[..n] != prefix[..n] {
        return Private::No;
    }
    if s.len() < prefix.len() {
        return Private::Incomplete;
    }
    let digits = s[3..]
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b';')
        .count();
    match s.get(3 + digits) {
        None if 3 + digits <= SwitchFilter::HOLD_MAX => Private::Incomplete,
        Some(&fin @ (b'h' | b'l')) => Private::Mode {
            len: 3 + digits + 1,
            params: &s[3..3 + digits],
            fin,
        },
        _ => Private::No,
    }
}

impl SwitchFilter {
    /// The longest partial sequence held for the next read.
    pub const HOLD_MAX: usize = 32;

    /// Filters one read: the bytes to write, and whether the session switched screens.
    pub fn feed(&mut self, input: &[u8]) -> (Vec<u8>, bool) {
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(input);
        let mut out = Vec::with_capacity(buf.len());
        let mut switched = false;
        let mut i = 0;
        while i < buf.len() {
            if buf[i] != 0x1b {
                let n = buf[i..].iter().take_while(|b| **b != 0x1b).count();
                out.extend_from_slice(&buf[i..i + n]);
                i += n;
                continue;
            }
            match private_mode(&buf[i..]) {
                Private::No => {
                    out.push(0x1b);
                    i += 1;
                }
                Private::Incomplete => {
                    self.pending = buf[i..].to_vec();
                    break;
                }
                Private::Mode { len, params, fin } => {
                    let all: Vec<&[u8]> = params.split(|b| *b == b';').collect();
                    let kept: Vec<&[u8]> = all
                        .iter()
                        .copied()
                        .filter(|p| !matches!(*p, b"47" | b"1047" | b"1049"))
                        .collect();
                    if kept.len() == all.len() {
                        out.extend_from_slice(&buf[i..i + len]);
                    } else {
                        switched = true;
                        if !kept.is_empty() {
                            out.extend_from_slice(b"\x1b[?");
                            out.extend_from_slice(&kept.join(&b';'));
                            out.push(fin);
                        }
                    }
                    i += len;
                }
            }
        }
        (out, switched)
    }
}

/// Keys typed while the connection is down that are kept for the session (beyond this they
/// are dropped, and the user is told).
const HELD_KEYS_MAX: usize = 4096;

/// Waits `d` while watching the keyboard: `true` when the detach key was typed. Other typed
/// bytes are kept in `held` (bounded) for the session once it is back.
async fn wait_or_detach(
    d: Duration,
    keys: &mut mpsc::Receiver<Vec<u8>>,
    watch: &mut DetachWatch,
    held: &mut Vec<u8>,
) -> bool {
    let deadline = tokio::time::Instant::now() + d;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return false,
            typed = keys.recv() => {
                let Some(b) = typed else { return true };
                let t = watch.feed(&b);
                if t.detach {
                    return true;
                }
                let room = HELD_KEYS_MAX.saturating_sub(held.len());
                if t.send.len() > room {
                    tty::out(b"\r\n[tuic: too much typed while disconnected; dropping keys]\r\n");
                }
                held.extend_from_slice(&t.send[..t.send.len().min(room)]);
            }
        }
    }
}

/// Attaches the calling terminal (already in raw mode) to the session until it ends.
pub async fn run(o: &Options) -> Outcome {
    let route = encode_id(&o.route_id);
    let mut keys = stdin_reader();
    let mut watch = DetachWatch::new(o.detach.clone());
    let mut winch =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()) {
            Ok(s) => s,
            Err(e) => return Outcome::Unreachable(format!("cannot watch the window size: {e}")),
        };
    let mut backoff = Backoff::new();
    let mut down_since: Option<Instant> = None;
    let mut held = Vec::new();
    loop {
        let attempt = async {
            send_size(&o.socket, &route).await;
            let snap = call(
                &o.socket,
                Request::new("GET", &format!("/sessions/{route}/terminal/snapshot")),
            )
            .await?;
            if snap["exited"] == json!(true) {
                return Ok(Err(exit_code(&snap)));
            }
            let offset = snap["offset"].as_u64().unwrap_or(0);
            let ws = open_stream(&o.socket, &route, offset).await?;
            Ok(Ok((snap, ws)))
        };
        let why = match attempt.await {
            Ok(Err(code)) => return Outcome::Exited(code),
            Ok(Ok((snap, ws))) => {
                if down_since.take().is_some() {
                    tty::out(b"\x1b[0m");
                }
                backoff.reset();
                // The snapshot selects the session's screen; this terminal stays on the one
                // `tuic attach` entered.
                let ansi = snap["ansi"].as_str().unwrap_or_default().as_bytes();
                tty::out(&SwitchFilter::default().feed(ansi).0);
                let typed_meanwhile = std::mem::take(&mut held);
                match pump(o, ws, typed_meanwhile, &mut keys, &mut watch, &mut winch).await {
                    Pump::Detached => return Outcome::Detached,
                    Pump::Exited(c) => return Outcome::Exited(c),
                    Pump::Repaint => continue,
                    Pump::Lost(why) => why,
                }
            }
            Err(Attempt::Gone(why)) => {
                return Outcome::Gone(if why.is_empty() {
                    "no such session".into()
                } else {
                    why
                });
            }
            Err(Attempt::Retry(why)) => why,
        };
        let since = *down_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= o.reconnect_for {
            return Outcome::Unreachable(why);
        }
        let delay = backoff.next(crate::jitter());
        tty::out(
            format!(
                "\r\n\x1b[0m[tuic: lost {} ({why}); re-attaching in {:.0} s, detach key to give up]\r\n",
                o.label,
                delay.as_secs_f64().ceil()
            )
            .as_bytes(),
        );
        if wait_or_detach(delay, &mut keys, &mut watch, &mut held).await {
            return Outcome::Detached;
        }
    }
}

/// The PTY's `\r\n` line ends (its `onlcr`) as plain `\n`, for output that goes to a pipe or
/// a file. A `\r` at the end of one read is held until the next shows what follows it; a lone
/// `\r` (a progress line redrawn) passes through.
#[derive(Debug, Default)]
pub struct Newlines {
    held_cr: bool,
}

impl Newlines {
    /// Translates one read.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len() + 1);
        let mut rest = bytes;
        if std::mem::take(&mut self.held_cr) && rest.first() != Some(&b'\n') {
            out.push(b'\r');
        }
        while let Some((&b, tail)) = rest.split_first() {
            match (b, tail.first()) {
                (b'\r', Some(b'\n')) => {}
                (b'\r', None) => self.held_cr = true,
                _ => out.push(b),
            }
            rest = tail;
        }
        out
    }

    /// What is still held at the end of the stream.
    pub fn finish(&mut self) -> &'static [u8] {
        if std::mem::take(&mut self.held_cr) {
            b"\r"
        } else {
            b""
        }
    }
}

/// `tuic run`: streams a session's output from its first byte to stdout until it exits, and
/// with `stderr` its separate stderr (`GET /sessions/{id}/stderr`) to this process's stderr;
/// returns the exit code once both are complete.
pub async fn follow(socket: &Path, route_id: &str, stderr: bool) -> Result<Option<i32>, String> {
    let route = encode_id(route_id);
    let ws = open_stream(socket, &route, 0).await.map_err(|a| match a {
        Attempt::Gone(w) | Attempt::Retry(w) => w,
    })?;
    let (_tx, mut rx) = ws.split();
    let mut newlines = (!tty::stdout_is_tty()).then(Newlines::default);
    let mut errs = stderr.then(|| StderrFollow::new(socket, &route));
    // The stderr file has no push: it is read while output flows and at this pace when quiet.
    let mut tick = tokio::time::interval(STDERR_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let msg = tokio::select! {
            m = rx.next() => m,
            _ = tick.tick(), if errs.is_some() => {
                if let Some(e) = &mut errs {
                    e.pull().await?;
                }
                continue;
            }
        };
        let Some(msg) = msg else { break };
        match msg.map_err(|e| e.to_string())? {
            Message::Binary(b) => match &mut newlines {
                Some(n) => tty::out(&n.feed(&b)),
                None => tty::out(&b),
            },
            Message::Text(t) => match serde_json::from_str::<StreamFrame>(t.as_str()) {
                Ok(StreamFrame::Exit { exit_code }) => {
                    if let Some(n) = &mut newlines {
                        tty::out(n.finish());
                    }
                    if let Some(e) = &mut errs {
                        e.drain().await?;
                    }
                    return Ok(exit_code);
                }
                Ok(StreamFrame::Closed) => return Err("the host is shutting down".into()),
                Ok(StreamFrame::Lagged { missed }) => {
                    return Err(format!("output outran this client ({missed} bytes missed)"));
                }
                _ => {}
            },
            Message::Close(_) => break,
            _ => {}
        }
    }
    Err("the connection closed before the session exited".into())
}

/// How often `run` reads a quiet session's stderr.
const STDERR_POLL: Duration = Duration::from_millis(100);

/// How long `run` waits, after the exit, for the stderr file to be complete (a child the
/// program left behind may still hold it open and write).
const STDERR_DRAIN: Duration = Duration::from_secs(5);

/// Reads a session's stderr file from where it stopped and copies it to this stderr.
struct StderrFollow {
    socket: PathBuf,
    route: String,
    next: u64,
    /// The node has no such route or the session no such file (an older node, a hub whose
    /// node is older): nothing to follow.
    absent: bool,
}

impl StderrFollow {
    fn new(socket: &Path, route: &str) -> Self {
        Self {
            socket: socket.to_owned(),
            route: route.to_owned(),
            next: 0,
            absent: false,
        }
    }

    /// One read: copies what is new; true once the node says the stream is complete.
    async fn pull(&mut self) -> Result<bool, String> {
        if self.absent {
            return Ok(true);
        }
        let req = Request::new(
            "GET",
            &format!("/sessions/{}/stderr?from_byte={}", self.route, self.next),
        );
        let resp = ipc::request(&self.socket, &req, REQUEST_TIMEOUT)
            .await
            .map_err(|e| format!("reading stderr: {}", describe_ipc(&e)))?;
        match resp.status() {
            200 => {}
            404 => {
                self.absent = true;
                return Ok(true);
            }
            s => return Err(format!("reading stderr: {s}: {}", resp.text())),
        }
        if !resp.body.is_empty() {
            tty::err(&resp.body);
        }
        self.next = resp
            .head
            .header("x-next-byte")
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.next + resp.body.len() as u64);
        Ok(resp.head.header("x-stderr-complete") == Some("true"))
    }

    /// Reads until complete, for at most [`STDERR_DRAIN`].
    async fn drain(&mut self) -> Result<(), String> {
        let until = Instant::now() + STDERR_DRAIN;
        while !self.pull().await? {
            if Instant::now() >= until {
                return Err(
                    "the program's stderr was still being written 5 s after it exited".into(),
                );
            }
            tokio::time::sleep(STDERR_POLL).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Newlines, SwitchFilter};

    #[test]
    fn screen_switches_are_dropped_reported_and_others_kept_across_reads() {
        let mut f = SwitchFilter::default();
        assert_eq!(f.feed(b"a\x1b[?25lb"), (b"a\x1b[?25lb".to_vec(), false));
        assert_eq!(f.feed(b"x\x1b[?10"), (b"x".to_vec(), false));
        assert_eq!(f.feed(b"49hvim"), (b"vim".to_vec(), true));
        assert_eq!(
            f.feed(b"\x1b[?1;1049;2004l"),
            (b"\x1b[?1;2004l".to_vec(), true)
        );
        assert_eq!(f.feed(b"\x1b[?47h\x1b[2J"), (b"\x1b[2J".to_vec(), true));
        assert_eq!(f.feed(b"\x1b[1049h\x1b"), (b"\x1b[1049h".to_vec(), false));
        assert_eq!(f.feed(b"[0m"), (b"\x1b[0m".to_vec(), false));
    }

    #[test]
    fn crlf_becomes_lf_across_reads_and_a_lone_cr_stays() {
        let mut n = Newlines::default();
        let mut out = n.feed(b"a\r\nb\r");
        out.extend(n.feed(b"\nc\r"));
        out.extend(n.feed(b"d\r\r\n"));
        out.extend(n.feed(b"e\r"));
        out.extend(n.finish());
        assert_eq!(out, b"a\nb\nc\rd\r\ne\r");
    }
}
