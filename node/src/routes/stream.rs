//! The live session stream (`/sessions/{id}/stream`): the byte stream (`output`, `text`,
//! `log`, `binary`) and screen sync (`mode=screen`), served on any carrier of WebSocket-shaped
//! messages.
//!
//! [`open`] checks the request and subscribes (so every byte after the answer reaches the
//! client); [`Opened::run`] serves it on a message sink and a message stream. The WebSocket
//! route here is one adapter; a session stream on its own QUIC stream of a peer link
//! (`crate::link::quic_stream`, through [`QuicStreams`], its hook) is the other. The service itself is written once. It does not
//! authenticate: each carrier admits only what its own boundary authenticated.

use std::sync::Arc;

use axum::Extension;
use axum::extract::ws::{Message, WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use futures::{Sink, SinkExt, Stream, StreamExt};
use serde::Deserialize;
use tuic_proto::events::Event;
use tuic_proto::stream::StreamFrame;

use crate::audit::{Actor, Event as AuditEvent};
use crate::error::ApiError;
use crate::session::Session;
use crate::session::backlog::Read;
use crate::session::cleanlog::Stripper;
use crate::session::utf8::StreamDecoder;
use crate::share::Grant;
use crate::state::Node;

/// The session-stream hook of the node's QUIC streams (`crate::link::quic_stream::StreamHook`):
/// the same [`open`] and [`Opened::run`] as the WebSocket route, over the link's frames.
pub struct QuicStreams(pub Arc<Node>);

impl crate::link::quic_stream::StreamHook for QuicStreams {
    fn open(
        &self,
        request: &crate::link::quic_stream::Request,
    ) -> Result<crate::link::quic_stream::Serve, crate::link::quic_stream::Refused> {
        use crate::link::quic_stream::{Carrier, Frame, Refused};
        let opened = parse_query(request.query.as_deref())
            .and_then(|q| open(&self.0, &request.session, q))
            .map_err(|e| Refused {
                status: e.status.as_u16(),
                code: e.code.to_owned(),
                message: e.message,
            })?;
        let node = self.0.clone();
        // The link is the hub's node token; the attach is the hub user's.
        let who = Actor {
            who: format!(
                "hub:{}",
                request.forwarded_user.as_deref().unwrap_or("node-token")
            ),
            via: "hub".into(),
            address: None,
        };
        let attach = AuditEvent::new("attach", &who)
            .session(&opened.s.id)
            .with("mode", "read_write")
            .with(
                "stream",
                if matches!(opened.kind, Kind::Screen) {
                    "screen"
                } else {
                    "bytes"
                },
            )
            .with("carrier", "quic");
        Ok(Box::new(move |(tx, rx): Carrier| {
            Box::pin(async move {
                super::audit::record(&node, attach).await;
                let tx = tx.with(|m: Message| {
                    futures::future::ready(Ok::<_, std::io::Error>(match m {
                        Message::Text(t) => Frame::Text(t.as_str().to_owned()),
                        Message::Binary(b) => Frame::Binary(b),
                        Message::Close(_) => Frame::Close,
                        Message::Ping(_) | Message::Pong(_) => Frame::Other,
                    }))
                });
                let rx = rx.map(|r| {
                    r.map(|f| match f {
                        Frame::Text(t) => Message::Text(t.into()),
                        Frame::Binary(b) => Message::Binary(b),
                        Frame::Close => Message::Close(None),
                        Frame::Other => Message::Pong(Default::default()),
                    })
                });
                opened.run(node, tx, rx).await;
            })
        }))
    }
}

/// Largest output frame a stream sends, in bytes.
const FRAME_MAX: usize = 256 * 1024;

/// A wake that drained at least this much (a full PTY read) marks the stream as bulk.
const BULK_BYTES: usize = 4000;

/// While a stream is bulk, how long it lets output gather before the next frame: one frame
/// per interval instead of one per PTY read (4 KiB), which costs a task wake-up and a socket
/// write each. Output after a quiet spell (typing, prompts) is sent at once.
const BULK_COALESCE: std::time::Duration = std::time::Duration::from_millis(2);

/// The stream's query.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamQuery {
    /// `text` strips escapes; `log` sends clean-log lines; absent sends output as is.
    format: Option<String>,
    /// `1`: raw PTY bytes as binary frames.
    binary: Option<String>,
    /// Start at this raw byte offset instead of now (replays retained output).
    from_byte: Option<u64>,
    /// `screen`: the emulated screen as frames (`crate::session::screensync`).
    mode: Option<String>,
}

/// `GET /sessions/{id}/stream`: the WebSocket adapter. The attach and the detach (with the
/// count of bytes the client typed, never the bytes) are audited; a share link's viewer is
/// read-only, listed on the link while connected, and cut when the link is revoked or expires.
pub(super) async fn ws(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    Query(q): Query<StreamQuery>,
    who: Option<Extension<Actor>>,
    grant: Option<Extension<Grant>>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let opened = open(&node, &id, q)?;
    let ws = ws.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let who = super::audit::actor(who);
    let grant = grant.map(|Extension(g)| g);
    let read_only = grant.is_some();
    let screen = matches!(opened.kind, Kind::Screen);
    let session = opened.s.id.clone();
    let mut attach = AuditEvent::new("attach", &who)
        .session(&session)
        .with("mode", if read_only { "read_only" } else { "read_write" })
        .with("stream", if screen { "screen" } else { "bytes" });
    if let Some(g) = &grant {
        attach = attach.with("link", g.link.as_str());
    }
    super::audit::record(&node, attach).await;
    Ok(ws
        .on_upgrade(move |sock| async move {
            let (tx, rx) = sock.split();
            let typed = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let rx = client_filter(rx, read_only, screen, typed.clone());
            let viewer = grant.as_ref().map(|g| {
                node.shares.join(
                    &g.link,
                    who.address.clone().unwrap_or_default(),
                    crate::logs::now_ms(),
                )
            });
            match grant {
                // The link's end ends the client's side of the stream: the service then
                // stops as when a client leaves, and both halves of the socket close.
                Some(g) => {
                    let rx = rx.take_until(Box::pin(async move { g.ended().await }));
                    opened.run(node.clone(), tx, rx).await;
                }
                None => opened.run(node.clone(), tx, rx).await,
            }
            drop(viewer);
            let bytes = typed.load(std::sync::atomic::Ordering::Relaxed);
            super::audit::record(
                &node,
                AuditEvent::new("detach", &who)
                    .session(&session)
                    .with("bytes_in", bytes),
            )
            .await;
        })
        .into_response())
}

/// The client's messages as the stream sees them: counted (bytes typed), and for a read-only
/// viewer stripped of everything that would reach the PTY (input, paste, an applied resize):
/// acks, view-only resizes and scrolls stay.
fn client_filter<Rx, E>(
    rx: Rx,
    read_only: bool,
    screen: bool,
    typed: Arc<std::sync::atomic::AtomicU64>,
) -> impl Stream<Item = Result<Message, E>> + Unpin + Send + 'static
where
    Rx: Stream<Item = Result<Message, E>> + Unpin + Send + 'static,
    E: Send + 'static,
{
    use tuic_proto::screen::ClientFrame;
    rx.filter(move |m| {
        let (writes, n) = match m {
            Ok(Message::Binary(b)) => (true, b.len()),
            Ok(Message::Text(t)) if screen => {
                match serde_json::from_str::<ClientFrame>(t.as_str()) {
                    Ok(ClientFrame::Input { data } | ClientFrame::Paste { data }) => {
                        (true, data.len())
                    }
                    Ok(ClientFrame::Resize { apply: true, .. }) => (true, 0),
                    _ => (false, 0),
                }
            }
            Ok(Message::Text(t)) => (true, t.len()),
            _ => (false, 0),
        };
        let keep = !(read_only && writes);
        if keep {
            typed.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        }
        futures::future::ready(keep)
    })
}

/// Parses a stream's query string (`format=text&mode=screen`, ...).
pub fn parse_query(query: Option<&str>) -> Result<StreamQuery, ApiError> {
    let uri: axum::http::Uri = format!("/?{}", query.unwrap_or_default())
        .parse()
        .map_err(|_| ApiError::bad_request("invalid stream query"))?;
    Query::<StreamQuery>::try_from_uri(&uri)
        .map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}

/// A checked, subscribed stream request, ready to be served on a carrier.
pub struct Opened {
    s: Arc<Session>,
    hello: Hello,
    kind: Kind,
}

enum Kind {
    Screen,
    Bytes {
        q: StreamQuery,
        cursor: Arc<std::sync::atomic::AtomicU64>,
        log_from: u64,
        bus: tokio::sync::broadcast::Receiver<Arc<crate::events::Envelope>>,
    },
}

/// Checks a stream request for session `id` (any of its addresses) and subscribes to its
/// output; errors are the HTTP route's own.
pub fn open(node: &Node, id: &str, q: StreamQuery) -> Result<Opened, ApiError> {
    let s = super::sessions::find(node, id)?;
    if let Some(f) = q.format.as_deref()
        && !matches!(f, "text" | "log" | "raw")
    {
        return Err(ApiError::bad_request(format!(
            "unknown stream format {f:?}"
        )));
    }
    match q.mode.as_deref() {
        None | Some("bytes") => {}
        Some("screen") => {
            let hello = {
                let st = s.stream();
                Hello {
                    offset: st.total(),
                    total_written: st.total(),
                    oldest_offset: st.ring_start(),
                }
            };
            return Ok(Opened {
                s,
                hello,
                kind: Kind::Screen,
            });
        }
        Some(m) => return Err(ApiError::bad_request(format!("unknown stream mode {m:?}"))),
    }
    // Subscribe before answering, so every byte after the handshake reaches this client.
    let (cursor, hello) = {
        let mut st = s.stream();
        let total = st.total();
        let cursor = st.subscribe(q.from_byte.unwrap_or(total));
        let start = cursor.load(std::sync::atomic::Ordering::Acquire);
        let hello = Hello {
            offset: start,
            total_written: total,
            oldest_offset: st.ring_start().min(start),
        };
        (cursor, hello)
    };
    let log_from = s.screen().log.total();
    let bus = node.bus.subscribe();
    Ok(Opened {
        s,
        hello,
        kind: Kind::Bytes {
            q,
            cursor,
            log_from,
            bus,
        },
    })
}

impl Opened {
    /// Serves the stream: frames go to `tx`, client messages come from `rx`, until either
    /// side ends, the session exits or the node shuts down.
    pub async fn run<Tx, Rx, E>(self, node: Arc<Node>, tx: Tx, rx: Rx)
    where
        Tx: Sink<Message> + Unpin + Send + 'static,
        Tx::Error: Send,
        Rx: Stream<Item = Result<Message, E>> + Unpin + Send + 'static,
        E: Send + 'static,
    {
        match self.kind {
            Kind::Screen => run_screen(node, self.s, tx, rx, self.hello).await,
            Kind::Bytes {
                q,
                cursor,
                log_from,
                bus,
            } => run_stream(node, self.s, tx, rx, q, cursor, self.hello, log_from, bus).await,
        }
    }
}

/// Where a byte stream starts, sent as its first frame (`{"type":"hello",...}`): the raw offset
/// of the first byte the stream sends, the bytes written so far, and the oldest retained offset
/// (a client that connected "from now" may page `[oldest_offset, offset)` from `output`).
#[derive(Debug, Clone, Copy)]
struct Hello {
    offset: u64,
    total_written: u64,
    oldest_offset: u64,
}

impl Hello {
    fn frame(&self, mode: &str) -> Message {
        text_frame(&StreamFrame::Hello(tuic_proto::stream::Hello {
            mode: mode.to_owned(),
            offset: self.offset,
            total_written: self.total_written,
            oldest_offset: self.oldest_offset,
        }))
    }
}

/// Writes a client's bytes to the PTY off the async workers; false once the session cannot
/// take them (exited, gone).
async fn write_pty(
    s: &Arc<Session>,
    cap: &Arc<crate::session::capture::Capture>,
    data: Vec<u8>,
) -> bool {
    let (w, cap) = (s.clone(), cap.clone());
    matches!(
        tokio::task::spawn_blocking(move || w.write(&data, &cap)).await,
        Ok(Ok(()))
    )
}

/// A byte-stream frame as the socket's text message.
fn text_frame(f: &StreamFrame) -> Message {
    Message::Text(f.to_text().into())
}

/// A screen-sync client: JSON client frames are acks, resizes, scrolls or input; binary frames
/// are input. The frames themselves come from `screensync::run`.
async fn run_screen<Tx, Rx, E>(
    node: Arc<Node>,
    s: Arc<Session>,
    mut tx: Tx,
    mut rx: Rx,
    hello: Hello,
) where
    Tx: Sink<Message> + Unpin + Send + 'static,
    Tx::Error: Send,
    Rx: Stream<Item = Result<Message, E>> + Unpin + Send + 'static,
    E: Send + 'static,
{
    use crate::session::screensync::{self, Control};
    use tuic_proto::screen::ClientFrame;
    if tx.send(hello.frame("screen")).await.is_err() {
        return;
    }
    let (ctl_tx, ctl_rx) = tokio::sync::mpsc::channel(64);
    let writer = s.clone();
    let cap = node.sessions.capture.clone();
    tokio::spawn(async move {
        while let Some(Ok(msg)) = rx.next().await {
            let data = match msg {
                Message::Binary(b) => b.to_vec(),
                Message::Text(t) => match serde_json::from_str::<ClientFrame>(t.as_str()) {
                    Ok(ClientFrame::Input { data }) => data.into_bytes(),
                    Ok(ClientFrame::Paste { data }) => {
                        let bracketed = writer.screen().grid.bracketed_paste();
                        crate::session::input::paste_bytes(&data, bracketed)
                    }
                    Ok(ClientFrame::Ack { seq }) => {
                        let _ = ctl_tx.send(Control::Ack(seq)).await;
                        continue;
                    }
                    Ok(ClientFrame::Resize { rows, cols, apply }) => {
                        let _ = ctl_tx.send(Control::Resize { rows, cols, apply }).await;
                        continue;
                    }
                    Ok(ClientFrame::Scroll { offset }) => {
                        let _ = ctl_tx.send(Control::Scroll(offset)).await;
                        continue;
                    }
                    // A malformed control frame is dropped, never typed into the PTY.
                    Err(e) => {
                        tracing::debug!(session = %writer.id, "screen client frame: {e}");
                        continue;
                    }
                },
                Message::Close(_) => break,
                _ => continue,
            };
            if !write_pty(&writer, &cap, data).await {
                break;
            }
        }
        // Dropping the control sender ends the screen loop.
    });
    let out =
        tx.with(|t: String| futures::future::ready(Ok::<_, Tx::Error>(Message::Text(t.into()))));
    screensync::run(node.sessions.env().clone(), s, Box::pin(out), ctl_rx).await;
}

#[allow(clippy::too_many_arguments)]
async fn run_stream<Tx, Rx, E>(
    node: Arc<Node>,
    s: Arc<Session>,
    mut tx: Tx,
    mut rx: Rx,
    q: StreamQuery,
    cursor: Arc<std::sync::atomic::AtomicU64>,
    hello: Hello,
    mut log_cursor: u64,
    mut bus: tokio::sync::broadcast::Receiver<Arc<crate::events::Envelope>>,
) where
    Tx: Sink<Message> + Unpin + Send + 'static,
    Tx::Error: Send,
    Rx: Stream<Item = Result<Message, E>> + Unpin + Send + 'static,
    E: Send + 'static,
{
    let binary = q.binary.as_deref().is_some_and(|b| b == "1" || b == "true");
    let label = if binary {
        "binary"
    } else {
        match q.format.as_deref() {
            Some("text") => "text",
            Some("log") => "log",
            _ => "output",
        }
    };
    if tx.send(hello.frame(label)).await.is_err() {
        return;
    }
    let mode = q.format.clone().unwrap_or_default();
    // Client frames go to the PTY, in order, off the async workers.
    let (gone_tx, mut gone) = tokio::sync::oneshot::channel::<()>();
    let writer = s.clone();
    let cap = node.sessions.capture.clone();
    tokio::spawn(async move {
        while let Some(Ok(msg)) = rx.next().await {
            let data = match msg {
                Message::Text(t) => t.as_str().as_bytes().to_vec(),
                Message::Binary(b) => b.to_vec(),
                Message::Close(_) => break,
                _ => continue,
            };
            if !write_pty(&writer, &cap, data).await {
                break;
            }
        }
        let _ = gone_tx.send(());
    });
    let mut wake = s.wake();
    let mut dec = StreamDecoder::default();
    let mut strip = Stripper::default();
    let mut exit_seen = false;
    'outer: loop {
        wake.borrow_and_update();
        let exited = s.exit();
        let mut drained = 0;
        // Drain everything available; at exit this is everything the process wrote.
        loop {
            let r = s.stream().read(&cursor, FRAME_MAX);
            if let Read::Data(d) = &r {
                drained += d.len();
            }
            let msg = match r {
                Read::Lagged { missed } => {
                    dec.reset();
                    Some(text_frame(&StreamFrame::Lagged { missed }))
                }
                Read::Data(d) if d.is_empty() => break,
                Read::Data(d) if binary => Some(Message::Binary(d.into())),
                Read::Data(d) if mode == "log" => {
                    let _ = d;
                    None
                }
                Read::Data(d) => {
                    let text = if mode == "text" {
                        strip.strip(&d)
                    } else {
                        dec.decode(&d)
                    };
                    (!text.is_empty()).then(|| text_frame(&StreamFrame::Output { data: text }))
                }
            };
            if let Some(m) = msg
                && tx.send(m).await.is_err()
            {
                break 'outer;
            }
        }
        if mode == "log" {
            let (offset, lines) = s.screen().log.since(log_cursor);
            if !lines.is_empty() {
                log_cursor = offset + lines.len() as u64;
                let m = text_frame(&StreamFrame::Log { lines, offset });
                if tx.send(m).await.is_err() {
                    break;
                }
            }
        }
        if let Some(e) = exited {
            if !exit_seen {
                // One more pass: the exit was observed before the last drain began.
                exit_seen = true;
                continue;
            }
            let tail = dec.finish();
            if !tail.is_empty() && !binary && mode.is_empty() {
                let _ = tx
                    .send(text_frame(&StreamFrame::Output { data: tail }))
                    .await;
            }
            let m = StreamFrame::Exit { exit_code: e.code };
            let _ = tx.send(text_frame(&m)).await;
            let _ = tx.close().await;
            return;
        }
        let bulk = drained >= BULK_BYTES;
        tokio::select! {
            r = wake.changed() => {
                if r.is_err() {
                    break;
                }
                if bulk && exited.is_none() {
                    tokio::time::sleep(BULK_COALESCE).await;
                }
            }
            ev = bus.recv() => {
                if let Ok(env) = ev
                    && let Event::PtyParsed { session_id, parsed } = &env.event
                    && *session_id == s.id
                {
                    let m = StreamFrame::Parsed { event: parsed.clone() };
                    if tx.send(text_frame(&m)).await.is_err() {
                        break;
                    }
                }
            }
            _ = &mut gone => break,
            _ = node.shutdown.cancelled() => {
                let _ = tx.send(text_frame(&StreamFrame::Closed)).await;
                let _ = tx.close().await;
                return;
            }
        }
    }
}
