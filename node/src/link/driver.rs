//! The IO driver shared by both ends of a peer link: one task owns one [`PeerLink`] and one
//! WebSocket, feeds it text frames and timer ticks, writes what it transmits, and hands its
//! events to an [`End`] (the node's answers, or the hub's relay).
//!
//! It does not decide anything about mail: that is the `End`'s job. It knows nothing about
//! which transport carries the frames: [`run`] takes any [`FrameIo`], and [`WsIo`] is the one
//! adapter for message streams (axum's server socket here, tokio-tungstenite's client socket
//! in the hub), each library giving only a small [`MessageKind`] mapping.

use std::time::Duration;

use std::marker::PhantomData;

use futures::{FutureExt, Sink, SinkExt, Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tuic_proto::peer::{LinkEvent, LinkState, PeerLink};

use crate::logs::mono_ms;

/// Longest a single frame write may take before the link counts as down (the liveness
/// deadline: 3 missed pings of 5 s).
pub const SEND_TIMEOUT: Duration = Duration::from_secs(15);

/// Most frames read in one step (frames already received are taken without waiting).
pub const MAX_FRAMES_PER_STEP: usize = 256;

/// Housekeeping period of an [`End`] (re-registering a changed peer set, directory pushes).
pub const TICK: Duration = Duration::from_millis(500);

/// A text-frame transport.
pub trait FrameIo: Send {
    /// The next text frame; `None` when the connection closed or failed.
    fn recv(&mut self) -> impl std::future::Future<Output = Option<String>> + Send;
    /// Writes one text frame; `false` when the connection is gone.
    fn send(&mut self, text: String) -> impl std::future::Future<Output = bool> + Send;
    /// Writes a step's frames in order with one flush (one socket write or one wake of the
    /// QUIC connection for all of them); `false` when the connection is gone.
    fn send_all(&mut self, texts: Vec<String>) -> impl std::future::Future<Output = bool> + Send {
        async move {
            for t in texts {
                if !self.send(t).await {
                    return false;
                }
            }
            true
        }
    }
    /// Closes the connection (best effort).
    fn close(&mut self) -> impl std::future::Future<Output = ()> + Send;
}

/// What a transport's message is to the link.
#[derive(Debug)]
pub enum Incoming {
    /// A text frame: one JSON peer frame.
    Text(String),
    /// The far side closed the connection.
    Close,
    /// Anything else (ping, pong, binary): skipped.
    Other,
}

/// How one message library spells text frames and close, for [`WsIo`].
pub trait MessageKind<M> {
    /// A text message carrying `text`.
    fn text(text: String) -> M;
    /// The closing message.
    fn close() -> M;
    /// What a received message is.
    fn read(message: M) -> Incoming;
}

/// The [`FrameIo`] of any message stream and sink (a WebSocket from axum or tokio-tungstenite,
/// or another transport with message framing), with `K` mapping its message type.
pub struct WsIo<S, K> {
    inner: S,
    kind: PhantomData<fn() -> K>,
}

impl<S, K> WsIo<S, K> {
    /// Wraps a connected transport.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            kind: PhantomData,
        }
    }
}

impl<S, K, M, E> FrameIo for WsIo<S, K>
where
    S: Stream<Item = Result<M, E>> + Sink<M> + Unpin + Send,
    K: MessageKind<M>,
    M: Send,
{
    async fn recv(&mut self) -> Option<String> {
        loop {
            match self.inner.next().await? {
                Ok(m) => match K::read(m) {
                    Incoming::Text(t) => return Some(t),
                    Incoming::Close => return None,
                    Incoming::Other => continue,
                },
                Err(_) => return None,
            }
        }
    }

    async fn send(&mut self, text: String) -> bool {
        self.inner.send(K::text(text)).await.is_ok()
    }

    async fn send_all(&mut self, texts: Vec<String>) -> bool {
        feed_all(&mut self.inner, texts.into_iter().map(K::text)).await
    }

    async fn close(&mut self) {
        let _ = self.inner.send(K::close()).await;
    }
}

/// Feeds `items` into `sink` in order and flushes once ([`FrameIo::send_all`] of a framed
/// sink); `false` when the sink failed.
pub async fn feed_all<S, T>(sink: &mut S, items: impl IntoIterator<Item = T> + Send) -> bool
where
    S: futures::Sink<T> + Unpin + Send,
    T: Send,
{
    for t in items {
        if sink.feed(t).await.is_err() {
            return false;
        }
    }
    sink.flush().await.is_ok()
}

/// What one end does with its link's events.
pub trait End: Send {
    /// Commands other tasks send to this link's task.
    type Cmd: Send;
    /// Handles one link event (including the final `Down`).
    fn on_event(&mut self, link: &mut PeerLink, event: LinkEvent);
    /// Handles one command.
    fn on_cmd(&mut self, link: &mut PeerLink, cmd: Self::Cmd);
    /// Runs after every step while the link is up: dispatch outboxes, re-register, etc.
    fn pump(&mut self, link: &mut PeerLink);
    /// Runs every [`TICK`].
    fn on_tick(&mut self, link: &mut PeerLink) {
        let _ = link;
    }
    /// The next instant (mono ms) this end wants [`End::on_deadline`], if any.
    fn deadline(&self) -> Option<u64> {
        None
    }
    /// Runs once [`End::deadline`] has passed.
    fn on_deadline(&mut self, link: &mut PeerLink, now: u64) {
        let _ = (link, now);
    }
}

/// Why [`run`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The link went down (the `End` saw the `Down` event with its reason).
    Down,
    /// `stop` was cancelled.
    Stopped,
}

/// Runs a link until it is down or `stop` fires. The `End` sees every event, including the
/// `Down` event, before this returns.
#[must_use = "the link's end must be acted on (reconnect, logs)"]
pub async fn run<E: End, I: FrameIo>(
    mut link: PeerLink,
    io: &mut I,
    end: &mut E,
    cmds: &mut mpsc::UnboundedReceiver<E::Cmd>,
    stop: &CancellationToken,
) -> Ended {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stopped = false;
    loop {
        // Checked on every step, not only when the sleep wins: a busy link must not starve a
        // deadline its end waits for.
        let now = mono_ms();
        if end.deadline().is_some_and(|t| t <= now) {
            end.on_deadline(&mut link, now);
        }
        while let Some(ev) = link.poll_event() {
            end.on_event(&mut link, ev);
        }
        if link.state() == LinkState::Up {
            end.pump(&mut link);
        }
        let mut frames = Vec::new();
        while let Some(f) = link.poll_transmit() {
            frames.push(f.encode());
        }
        // One write for the step's frames. A peer that stops reading (a silent partition with
        // full socket buffers) must not hold this task past the liveness deadline.
        if !frames.is_empty() {
            match tokio::time::timeout(SEND_TIMEOUT, io.send_all(frames)).await {
                Ok(true) => {}
                Ok(false) | Err(_) => link.reset(),
            }
        }
        if link.state() == LinkState::Down {
            // Events queued by the last step (the `Down` itself) still reach the end.
            while let Some(ev) = link.poll_event() {
                end.on_event(&mut link, ev);
            }
            io.close().await;
            return if stopped { Ended::Stopped } else { Ended::Down };
        }
        let wake = [link.poll_timeout(), end.deadline()]
            .into_iter()
            .flatten()
            .min()
            .map(|t| Duration::from_millis(t.saturating_sub(mono_ms())))
            .unwrap_or(Duration::from_secs(60));
        tokio::select! {
            _ = stop.cancelled() => {
                stopped = true;
                link.close();
            }
            text = io.recv() => match text {
                Some(t) => {
                    let now = mono_ms();
                    link.handle_text(now, &t);
                    // Frames that arrived while the last step ran (its commit) are taken in
                    // this step too, so the end answers them with one group commit.
                    for _ in 1..MAX_FRAMES_PER_STEP {
                        match io.recv().now_or_never() {
                            Some(Some(t)) => link.handle_text(now, &t),
                            Some(None) => {
                                link.reset();
                                break;
                            }
                            None => break,
                        }
                    }
                }
                None => link.reset(),
            },
            _ = tokio::time::sleep(wake) => link.handle_timeout(mono_ms()),
            cmd = cmds.recv() => match cmd {
                Some(c) => end.on_cmd(&mut link, c),
                // Every sender is gone: nobody can reach this link any more.
                None => link.close(),
            },
            _ = tick.tick() => {
                link.handle_timeout(mono_ms());
                end.on_tick(&mut link);
            }
        }
    }
}
