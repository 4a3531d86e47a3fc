//! The hub's ends of the peer links and the relay of cross-host mail.
//!
//! Per configured connection one task dials `ws://<node>/mcp/peer` with the node's token as
//! the `tui-session` cookie and runs a `PeerLink` (role hub) through the shared driver
//! (`tuic_node::peer::driver`). Each connection's task is its own: a mute node holds only its
//! own handshake, never mail to another node. Reconnects back off 1 s → 30 s with jitter.
//!
//! The relay keeps one bounded outbox per connection (in the hub's `redb`, committed before a
//! sender hears `accepted`): mail from a node's peer (stamped `<connection>/<peer>` by the
//! link) or from the hub's own agents (`local/<peer>`) waits there until the destination node
//! acknowledges it; the final outcome goes back to the origin as a `receipt`. Mail for
//! `local/<peer>` is delivered here through the hub's dedupe rings.
//!
//! Each node's registered peers are the hub's shadows of them, addressed
//! `<connection>/<peer>`; when that link goes down they are retired at once (before the task
//! does anything else). Every node gets the hub's directory (the hub's own peers and other
//! nodes') pushed as a `register`, so its `list_peers` shows them with usable addresses.
//!
//! The hub's upstream MCP tools are offered to every node over the same link: a node's
//! `list_upstream_tools` is answered with what the hub lists to its own agents (its allow/deny
//! filters applied), a `call_upstream_tool` runs through the hub's upstream service (the
//! filters apply again at dispatch) within the node caller's deadline, and every change of the
//! hub's tool set is hinted to each node (`upstream_tools_changed`). A call that asked for
//! progress gets the upstream's `notifications/progress` as `upstream_progress` frames, through
//! a bounded per-call queue (`tuic_proto::peer::progress`: a flood coalesces, counted, into
//! the latest) that closes when the call answers, so none follows the result.
//!
//! Deliberately absent: any process control. Session input, output and submit go through
//! the HTTP proxy (`proxy.rs`), never through this link.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use axum::http::{HeaderValue, header};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tuic_node::peer::commit::{CommitResult, Source, Taken, Waiter, Waiters};
use tuic_node::peer::driver::{self, End, FrameIo};
use tuic_node::peer::{
    LateRefusal, deliver_local, local_entries, notify_waiter, outbox_ops, post_refusals_later,
};
use tuic_node::state::Node;
use tuic_node::store::{PeerOp, UPLINK_KEY};
use tuic_proto::peer::{
    ErrorCode, LOCAL as LINK_LOCAL, LinkConfig, LinkEvent, LinkRole, Outbox, OutboxChange,
    OutboxEvent, PeerLink, Receipt, Relay, RelayEnd, RelayOutput, Request, RequestId, Response,
    Route, Settled, Step, WireMessage, Withdrawn,
};

use crate::federation::Conn;

/// Longest wait for a node to accept the WebSocket upgrade.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Commands to a connection's link task.
#[derive(Debug)]
pub enum HubCmd {
    /// Its outbox holds new mail.
    Kick,
    /// Tell the node how relayed mail from one of its peers ended.
    Receipt(Receipt),
    /// The hub's upstream tool set changed: hint the node.
    UpstreamsChanged,
    /// A node's call to an upstream tool has its answer.
    Answer(tuic_proto::peer::RequestId, Response),
    /// The custody commit of relayed mail whose cut-through ran out has ended: answer the
    /// node (see [`CutThrough::expire`]).
    Custody(Vec<WaitingRelay>, CommitResult, Vec<bool>),
    /// The host's session link found it down (a reset, an ended event stream, missed
    /// health probes): this link resets too, so both carriers say down together.
    HostDown,
    /// A node's call has progress queued: send it on. At most one is pending per call (sent
    /// when its queue goes from empty to not empty), so a flood never grows this channel.
    Progress(
        tuic_proto::peer::RequestId,
        Arc<Mutex<tuic_proto::peer::ProgressQueue>>,
    ),
}

/// The hub's relay state (`tuic_proto::peer::Relay`: outboxes, shadows, live links, cut-through
/// marks) and what only this process holds: the link tasks' channels, the hub's own waiting
/// senders, the commit waiters and the cut-through answer channels.
#[derive(Debug, Default)]
pub(crate) struct Inner {
    /// The sans-IO relay every link feeds.
    pub(crate) relay: Relay,
    /// The live link tasks, by generation (the relay's): a link that ends never retires a
    /// newer one's state.
    links: HashMap<String, (u64, mpsc::UnboundedSender<HubCmd>)>,
    /// The hub's own senders waiting for an outcome, by message id.
    pub(crate) waiters: HashMap<String, tuic_node::peer::OutcomeTx>,
    /// Run after the next group commit (which takes everything journaled before them).
    durable: Waiters,
    /// Where the destination's answer to relayed mail goes while the previous hop's link
    /// waits for it, by message id (the relay marks the same ids; see [`CutThrough`]).
    relaying: HashMap<String, CutSink>,
}

/// The way back to a link task that waits for destinations' answers (cut-through): its answer
/// channel, and its command channel to wake it.
#[derive(Debug, Clone)]
pub(crate) struct CutSink {
    answers: std_mpsc::Sender<(String, Response)>,
    wake: mpsc::UnboundedSender<HubCmd>,
}

impl Inner {
    /// Hands one outcome of `conn`'s outbox on where the relay routes it: to the hub's own
    /// waiting sender, to the relay step waiting for it, or as a receipt to the origin
    /// node's link.
    fn route(&mut self, conn: &str, e: OutboxEvent, late: &mut Vec<LateRefusal>) {
        match self.relay.route(conn, e) {
            Route::Sender {
                sender,
                message_id,
                to,
                outcome,
            } => {
                if let Some(o) = notify_waiter(&mut self.waiters, &message_id, outcome) {
                    late.extend(LateRefusal::of(&sender, &message_id, &to, o));
                }
            }
            Route::CutThrough {
                message_id,
                response,
            } => {
                // The waiting link drains its channel before it ends a cut-through (under this
                // lock), so an answer handed here is never also answered `accepted`.
                if let Some(sink) = self.relaying.remove(&message_id) {
                    let _ = sink.answers.send((message_id, response));
                    let _ = sink.wake.send(HubCmd::Kick);
                }
            }
            Route::Receipt { origin, receipt } => match self.links.get(&origin) {
                Some((_, tx)) => {
                    let _ = tx.send(HubCmd::Receipt(receipt));
                }
                None => {
                    tracing::debug!(origin = %origin, message_id = %receipt.message_id, "receipt dropped: origin link down")
                }
            },
            Route::Dropped {
                message_id,
                origin: Some(origin),
            } => {
                tracing::debug!(origin = %origin, message_id = %message_id, "receipt dropped: origin link down")
            }
            Route::Dropped { origin: None, .. } => {}
        }
    }
}

/// The hub's part of a group commit: every connection's outbox journal.
struct HubSource(Weak<PeerHub>);

struct HubTaken {
    hub: Arc<PeerHub>,
    /// Per connection: its changes and its outbox's next sequence number when taken.
    outboxes: Vec<(String, Vec<OutboxChange>, u64)>,
    waiters: Vec<Waiter>,
}

impl Source for HubSource {
    fn take(&self) -> Option<Box<dyn Taken>> {
        let hub = self.0.upgrade()?;
        let mut g = hub.lock();
        let outboxes: Vec<(String, Vec<OutboxChange>, u64)> = g
            .relay
            .outboxes_mut()
            .filter_map(|(k, o)| {
                let changes = o.take_changes();
                (!changes.is_empty()).then(|| (k.clone(), changes, o.next_seq()))
            })
            .collect();
        let waiters = std::mem::take(&mut g.durable).0;
        drop(g);
        if outboxes.is_empty() && waiters.is_empty() {
            return None;
        }
        Some(Box::new(HubTaken {
            hub,
            outboxes,
            waiters,
        }))
    }
}

impl Taken for HubTaken {
    fn write(&self, ops: &mut Vec<PeerOp>) -> anyhow::Result<()> {
        for (k, changes, _) in &self.outboxes {
            outbox_ops(k, changes, ops);
        }
        Ok(())
    }

    fn finish(self: Box<Self>, result: CommitResult) {
        let this = *self;
        {
            let mut g = this.hub.lock();
            for (k, changes, upto) in this.outboxes {
                let Some(o) = g.relay.outbox_mut(&k) else {
                    continue;
                };
                if result.is_ok() {
                    // The watermark (mail already left: early dispatch).
                    o.set_durable(upto);
                } else {
                    o.restore_changes(changes);
                }
            }
        }
        for w in this.waiters {
            w(result.clone());
        }
    }
}

/// What the relay made of one message.
#[derive(Debug)]
pub(crate) enum Relayed {
    /// The answer for the previous hop.
    Answer(Response),
    /// Custody could not be committed, but the mail had already left: it is held in memory and
    /// resent until the destination answers, and no answer to the previous hop would be true
    /// (`accepted` promises a commit, a refusal denies a delivery that may happen). A node's
    /// link is reset instead, so the node keeps the mail (uncertain) and resends it; the
    /// destination's ring absorbs the repeat.
    Unsaved {
        /// The destination connection.
        connection: String,
        /// Why the commit failed.
        error: String,
    },
}

/// A relay step's routing ([`PeerHub::route_batch`]): answers known at once (`accepted` for
/// mail taken into an outbox), hub-local mail, and the mail whose custody is owed unless the
/// destination answers first.
struct Routed {
    out: Vec<Option<Response>>,
    locals: Vec<(usize, WireMessage)>,
    held: Vec<Held>,
}

/// Mail a relay step took into a destination's outbox.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// Its place in the step.
    index: usize,
    /// The destination connection.
    conn: String,
    message_id: String,
}

/// What a failed custody commit makes of mail answered `accepted` meanwhile: `None` when
/// the commit held. Mail that had left stays held in memory ([`Relayed::Unsaved`]); mail
/// that had not was taken back out (`internal`, nothing relayed).
fn custody_failed(r: &CommitResult, conn: &str, left: bool) -> Option<Relayed> {
    let e = r.as_ref().err()?;
    tracing::error!(error = %e, "persisting an outbox failed");
    Some(if left {
        Relayed::Unsaved {
            connection: conn.to_owned(),
            error: e.to_string(),
        }
    } else {
        Relayed::Answer(Response::Error {
            code: ErrorCode::Internal,
            connection: conn.to_owned(),
            message: "the hub could not save its outbox; nothing was relayed".into(),
        })
    })
}

/// Relayed mail whose answer to the node waits for the destination (cut-through).
#[derive(Debug)]
pub struct WaitingRelay {
    /// The node's `send` request.
    rid: RequestId,
    held: Held,
    /// The answer if custody is committed instead (`accepted`).
    accepted: Response,
}

/// A node link's relay steps that wait for destinations' answers. The step does not block:
/// the mail is routed, the answers known at once go back, and each message taken into an
/// outbox waits here up to `tuning.peer_cut_through_ms` (20 ms) for the destination's
/// answer, which the destination's link hands to `answers` (see [`Inner::route`]) and wakes
/// this link: a `delivered`/`duplicate` goes back to the node as the answer, a refusal as the
/// refusal (the node's first attempt, so it reports `refused`), with no custody commit here —
/// the record an answer removes before any commit took it is never written. Mail still
/// unanswered at its deadline leaves the cut-through (its answer becomes a receipt), is
/// committed with the next group, and is answered `accepted` once that commit ends
/// ([`HubCmd::Custody`]). Meanwhile the link keeps reading: sends that arrive during a wait
/// are routed at once instead of gathering behind it.
struct CutThrough {
    sink: CutSink,
    answers: std_mpsc::Receiver<(String, Response)>,
    /// By message id.
    waiting: HashMap<String, WaitingRelay>,
    /// When each wait ends (mono ms), in the order the mail came: the deadlines never
    /// decrease, so the earliest is the first one still waiting. An answered message's entry
    /// is dropped when it reaches the front.
    deadlines: VecDeque<(u64, String)>,
}

impl CutThrough {
    fn new(wake: mpsc::UnboundedSender<HubCmd>) -> Self {
        let (tx, answers) = std_mpsc::channel();
        Self {
            sink: CutSink { answers: tx, wake },
            answers,
            waiting: HashMap::new(),
            deadlines: VecDeque::new(),
        }
    }

    /// Makes `w` wait for its destination's answer until `deadline` (mono ms; a deadline
    /// earlier than the last one's, after `peer_cut_through_ms` was shortened, waits as long
    /// as the mail before it).
    fn hold(&mut self, w: WaitingRelay, deadline: u64) {
        let deadline = self
            .deadlines
            .back()
            .map_or(deadline, |(d, _)| deadline.max(*d));
        let id = w.held.message_id.clone();
        self.deadlines.push_back((deadline, id.clone()));
        self.waiting.insert(id, w);
    }

    /// Answers the waiting mail the destinations answered.
    fn answer(&mut self, link: &mut PeerLink) {
        while let Ok((id, r)) = self.answers.try_recv() {
            if let Some(w) = self.waiting.remove(&id) {
                let _ = link.respond(w.rid, r);
            }
        }
        while self
            .deadlines
            .front()
            .is_some_and(|(_, id)| !self.waiting.contains_key(id))
        {
            self.deadlines.pop_front();
        }
    }

    /// The earliest deadline (mono ms).
    fn deadline(&self) -> Option<u64> {
        self.deadlines.front().map(|(d, _)| *d)
    }

    /// Ends the cut-through of the mail whose deadline passed (all of it with `now = None`,
    /// when the link ends) and returns what is still unanswered: from now on the
    /// destination's answer to it becomes a receipt.
    fn expire(
        &mut self,
        hub: &PeerHub,
        now: Option<u64>,
        link: &mut PeerLink,
    ) -> Vec<WaitingRelay> {
        let mut due = Vec::new();
        while let Some((d, _)) = self.deadlines.front() {
            if now.is_some_and(|t| *d > t) {
                break;
            }
            let (_, id) = self.deadlines.pop_front().expect("a front entry");
            if self.waiting.contains_key(&id) {
                due.push(id);
            }
        }
        if due.is_empty() {
            return Vec::new();
        }
        {
            // Under the hub lock: after this nothing more is handed here, and what was
            // handed before is drained below.
            let mut g = hub.lock();
            g.relay.end_cut_through(due.iter().map(String::as_str));
            for id in &due {
                g.relaying.remove(id);
            }
        }
        self.answer(link);
        due.iter()
            .filter_map(|id| self.waiting.remove(id))
            .collect()
    }
}

/// The hub's relay: outboxes, shadows and link handles.
#[derive(Debug)]
pub struct PeerHub {
    pub(crate) node: Arc<Node>,
    inner: Mutex<Inner>,
    me: Weak<PeerHub>,
}

impl PeerHub {
    /// Loads every stored per-connection outbox from the hub's store.
    pub fn load(node: Arc<Node>) -> anyhow::Result<Arc<Self>> {
        let mut inner = Inner::default();
        let limits = tuic_node::peer::limits(&node.config().tuning);
        for (k, o) in tuic_node::peer::load_outboxes(&node.store, limits)? {
            if k != UPLINK_KEY {
                let mut o = o;
                // Commits happen in groups after the fact; relayed mail leaves while its
                // custody commit runs (the previous hop hears `accepted` only after it).
                o.set_durable(o.next_seq());
                o.set_early_dispatch();
                inner.relay.insert_outbox(&k, o);
            }
        }
        let hub = Arc::new_cyclic(|me| Self {
            node: node.clone(),
            inner: Mutex::new(inner),
            me: me.clone(),
        });
        node.peer
            .committer()
            .add(Arc::new(HubSource(Arc::downgrade(&hub))));
        Ok(hub)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes sure a configured connection has an outbox.
    pub fn ensure_outbox(&self, conn: &str) {
        let limits = tuic_node::peer::limits(&self.node.config().tuning);
        self.lock().relay.ensure_outbox(conn, || {
            let mut o = Outbox::with_limits(conn, limits);
            o.set_durable(0);
            o.set_early_dispatch();
            o
        });
    }

    /// Whether `conn`'s link is up (a task is attached).
    pub fn link_up(&self, conn: &str) -> bool {
        self.lock().links.contains_key(conn)
    }

    /// Messages held for `conn`.
    pub fn held(&self, conn: &str) -> usize {
        self.lock().relay.outbox(conn).map_or(0, Outbox::len)
    }

    /// `recipient_full` answers `conn`'s node gave since this hub started.
    pub fn recipient_full(&self, conn: &str) -> u64 {
        self.lock()
            .relay
            .outbox(conn)
            .map_or(0, Outbox::recipient_full_answers)
    }

    /// Routes stamped mail from the hub's own agents: into the destination connection's
    /// outbox (committed before the answer; no cut-through, their verdict comes through their
    /// waiter), or into a hub-local inbox for `local/<peer>`. Blocking: runs the custody
    /// commit on this thread.
    pub(crate) fn relay_in(&self, m: &WireMessage) -> Relayed {
        let Routed {
            mut out,
            mut locals,
            held,
        } = self.route_batch(std::slice::from_ref(m), None);
        if let Some((_, m)) = locals.pop() {
            return Relayed::Answer(deliver_local(&self.node, LINK_LOCAL, &m));
        }
        let answer = out.pop().flatten().expect("one answer per message");
        let Some(h) = held.into_iter().next() else {
            return Relayed::Answer(answer);
        };
        let (tx, rx) = std_mpsc::channel();
        let conn = h.conn.clone();
        self.custody(vec![h], move |r, left| {
            let _ = tx.send((r, left));
        });
        // The answer waits for this commit: run the group on this thread.
        self.node.peer.committer().commit_now();
        match rx.recv() {
            Ok((r, left)) => custody_failed(&r, &conn, left.first() == Some(&true))
                .unwrap_or(Relayed::Answer(answer)),
            // The committer is gone (shutdown): nothing here is known durable.
            Err(_) => Relayed::Unsaved {
                connection: conn,
                error: "the hub is stopping".into(),
            },
        }
    }

    /// Routes one step's stamped mail under the hub lock and wakes the destinations' link
    /// tasks: the mail leaves at once (early dispatch: the previous hop keeps it until it
    /// hears an answer, so a crash here only makes it resend). With a `sink` (mail from a
    /// node's link) the destination's answer to mail taken into an outbox is handed there
    /// until the cut-through ends ([`CutThrough`]).
    fn route_batch(&self, msgs: &[WireMessage], sink: Option<&CutSink>) -> Routed {
        let mut routed = Routed {
            out: vec![None; msgs.len()],
            locals: Vec::new(),
            held: Vec::new(),
        };
        let mut g = self.lock();
        for (i, m) in msgs.iter().enumerate() {
            match g.relay.relay(m, sink.is_some()) {
                Step::Answered { response, custody } => {
                    if let Some(conn) = custody {
                        routed.held.push(Held {
                            index: i,
                            conn,
                            message_id: m.message_id.clone(),
                        });
                    }
                    routed.out[i] = Some(response);
                }
                Step::Local(m) => routed.locals.push((i, m)),
            }
        }
        if let Some(sink) = sink {
            for h in &routed.held {
                g.relaying.insert(h.message_id.clone(), sink.clone());
            }
        }
        let mut conns: Vec<&str> = routed.held.iter().map(|h| h.conn.as_str()).collect();
        conns.sort_unstable();
        conns.dedup();
        for c in conns {
            if let Some((_, tx)) = g.links.get(c) {
                let _ = tx.send(HubCmd::Kick);
            }
        }
        routed
    }

    /// Journals the custody of `held` (committed with the next group); `done` hears the
    /// commit's result and, when it failed, per message whether it had already left — mail
    /// that had not is taken back out first (on the committing thread, before a later group
    /// could commit it).
    fn custody(
        &self,
        held: Vec<Held>,
        done: impl FnOnce(CommitResult, Vec<bool>) + Send + 'static,
    ) {
        let hub = self.me.clone();
        self.lock().durable.0.push(Box::new(move |r: CommitResult| {
            let mut left = Vec::new();
            if r.is_err()
                && let Some(hub) = hub.upgrade()
            {
                let mut g = hub.lock();
                for h in &held {
                    left.push(g.relay.withdraw(&h.conn, &h.message_id) == Withdrawn::OnItsWay);
                }
            }
            done(r, left);
        }));
    }

    /// Routes what an outbox change produced: receipts to the origin node's link, or to the
    /// hub's own waiting sender — a refusal only once the removal it makes is committed,
    /// anything else at once. Removals nobody waits for ride with the next group (custody
    /// commits, or the next tick).
    fn hand_on(&self, mut g: MutexGuard<'_, Inner>, s: Settled) {
        let mut late = Vec::new();
        let Settled {
            connection: conn,
            now,
            after_commit: refusals,
        } = s;
        for e in now {
            g.route(&conn, e, &mut late);
        }
        if refusals.is_empty() {
            drop(g);
            post_refusals_later(&self.node, late);
            return;
        }
        let hub = self.me.clone();
        g.durable.0.push(Box::new(move |r: CommitResult| {
            if let Err(e) = r {
                tracing::error!(conn = %conn, error = %e, "persisting an outbox failed");
            }
            let Some(hub) = hub.upgrade() else { return };
            let mut late = Vec::new();
            {
                let mut g = hub.lock();
                for e in refusals {
                    g.route(&conn, e, &mut late);
                }
            }
            post_refusals_later(&hub.node, late);
        }));
        drop(g);
        self.node.peer.committer().wake();
        post_refusals_later(&self.node, late);
    }
}

/// tokio-tungstenite's WebSocket messages, for the peer driver's one adapter
/// ([`driver::WsIo`]).
pub struct Tung;

impl driver::MessageKind<Message> for Tung {
    fn text(text: String) -> Message {
        Message::Text(text.into())
    }

    fn close() -> Message {
        Message::Close(None)
    }

    fn read(message: Message) -> driver::Incoming {
        match message {
            Message::Text(t) => driver::Incoming::Text(t.as_str().to_owned()),
            Message::Close(_) => driver::Incoming::Close,
            _ => driver::Incoming::Other,
        }
    }
}

/// The hub's WebSocket link transport.
pub type TungIo = driver::WsIo<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    Tung,
>;

/// Opens the WebSocket. Errors name what failed, never the URL or the token.
pub(crate) async fn dial(conn: &Conn) -> Result<TungIo, String> {
    let url = format!("{}/mcp/peer", conn.url).replacen("http", "ws", 1);
    let mut req = url
        .into_client_request()
        .map_err(|_| "the connection url is not a valid WebSocket url".to_owned())?;
    let cookie = HeaderValue::from_str(&conn.cookie())
        .map_err(|_| "the connection token is not a valid header value".to_owned())?;
    req.headers_mut().insert(header::COOKIE, cookie);
    use tokio_tungstenite::tungstenite::Error as E;
    match tokio::time::timeout(DIAL_TIMEOUT, tokio_tungstenite::connect_async(req)).await {
        Err(_) => Err("peer link handshake timed out".into()),
        Ok(Err(E::Http(r))) => Err(format!("node answered {} to the peer link", r.status())),
        Ok(Err(E::Io(_))) => Err("peer link: connection refused or unreachable".into()),
        Ok(Err(_)) => Err("peer link handshake failed".into()),
        Ok(Ok((ws, _))) => {
            if let tokio_tungstenite::MaybeTlsStream::Plain(s) = ws.get_ref() {
                let _ = s.set_nodelay(true);
            }
            Ok(TungIo::new(ws))
        }
    }
}

/// The pauses between reconnect attempts to a node: the workspace's one backoff
/// ([`tuic_proto::peer::Backoff`]), 1 s doubling up to `tuning.peer_reconnect_max_ms`, each with
/// a random jitter of up to a quarter of its length, without end. Both of a connection's tasks
/// (sessions and mail) start a fresh one after a link that was up ends.
pub(crate) fn reconnect_backoff(node: &Node) -> impl Iterator<Item = Duration> + use<> {
    let max = Duration::from_millis(node.config().tuning.peer_reconnect_max_ms.max(1_000));
    let mut delays = tuic_proto::peer::Backoff::with_limits(Duration::from_secs(1), max);
    std::iter::from_fn(move || Some(delays.next(rand::random())))
}

/// One connection's link task over WebSocket: dial, run, retire, back off, again; until the
/// connection is removed or the hub shuts down.
pub async fn drive(hub: Arc<PeerHub>, conn: Arc<Conn>) {
    drive_over(hub, conn, |c: Arc<Conn>| async move { dial(&c).await }).await;
}

/// [`drive`] over any frame transport: `dial` opens one connection to the node (its error
/// names what failed, never a URL or a token). The ends do not know the transport.
pub async fn drive_over<I, F, Fut>(hub: Arc<PeerHub>, conn: Arc<Conn>, dial: F)
where
    I: FrameIo,
    F: Fn(Arc<Conn>) -> Fut,
    Fut: std::future::Future<Output = Result<I, String>>,
{
    hub.ensure_outbox(&conn.id);
    let mut delays = reconnect_backoff(&hub.node);
    let stop = conn.stop.clone();
    let mut ups = conn.ups.subscribe();
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = tokio::time::sleep_until(conn.first_dial) => {}
    }
    loop {
        let dialed = tokio::select! {
            _ = stop.cancelled() => return,
            d = dial(conn.clone()) => d,
        };
        match dialed {
            Err(e) => {
                tracing::debug!(conn = %conn.id, error = %e, "peer link dial failed");
                conn.set(|s| {
                    s.peer_up = false;
                    s.peer_error = Some(e);
                });
            }
            Ok(mut io) => {
                let (tx, mut rx) = mpsc::unbounded_channel();
                let generation = {
                    let mut g = hub.lock();
                    let generation = g.relay.attach(&conn.id);
                    g.links.insert(conn.id.clone(), (generation, tx.clone()));
                    generation
                };
                // Every change of the hub's upstream tool set reaches this link at once (the
                // tick compares generations too, as a backstop).
                let mut changes = hub.node.upstreams.subscribe();
                // A host the session link finds down takes this link down with it.
                let mut downs = conn.downs.subscribe();
                downs.borrow_and_update();
                let wake = tx.clone();
                hub.node.tasks.spawn(async move {
                    loop {
                        tokio::select! {
                            _ = tx.closed() => break,
                            r = changes.changed() => {
                                if r.is_err() || tx.send(HubCmd::UpstreamsChanged).is_err() {
                                    break;
                                }
                            }
                            r = downs.changed() => {
                                if r.is_err() || tx.send(HubCmd::HostDown).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
                let link = PeerLink::new(
                    tuic_node::logs::mono_ms(),
                    LinkConfig::new(
                        &tuic_node::peer::local_id(&hub.node),
                        &conn.id,
                        LinkRole::Hub,
                    ),
                );
                let mut end = HubEnd {
                    hub: hub.clone(),
                    conn: conn.clone(),
                    end: RelayEnd::new(&conn.id, generation),
                    hinted: None,
                    cut: CutThrough::new(wake),
                };
                let ended = driver::run(link, &mut io, &mut end, &mut rx, &stop).await;
                if end.end.was_up() {
                    delays = reconnect_backoff(&hub.node);
                }
                tracing::debug!(conn = %conn.id, ?ended, "peer link task ended");
                if ended == driver::Ended::Stopped {
                    return;
                }
            }
        }
        let delay = delays.next().unwrap_or(Duration::from_secs(30));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
            // The session link reached the host: it is back, dial now with a fresh backoff.
            r = ups.changed() => {
                if r.is_ok() {
                    delays = reconnect_backoff(&hub.node);
                }
            }
        }
    }
}

/// The IO shell of the hub's end of one link: feeds its events into the sans-IO
/// [`RelayEnd`] and carries out what comes back (commits, waiters, receipts, the hub's
/// upstream tools).
struct HubEnd {
    hub: Arc<PeerHub>,
    conn: Arc<Conn>,
    /// The relay's end of this link (directory pushed, this step's sends, generation).
    end: RelayEnd,
    /// The upstream tool generation the node was last told about (or listed).
    hinted: Option<u64>,
    /// Relayed mail waiting for its destination's answer.
    cut: CutThrough,
}

impl HubEnd {
    /// Hints the node when the hub's upstream tool set moved since it last heard.
    fn hint_upstreams(&mut self, link: &mut PeerLink) {
        use tuic_node::ext::ToolSource;
        let g = self.hub.node.upstreams.generation();
        if self.hinted != Some(g) && link.upstream_tools_changed(g).is_ok() {
            self.hinted = Some(g);
        }
    }

    /// Runs a node's call to one of the hub's upstream tools in its own task, within the
    /// caller's deadline; the answer comes back to this link as a command.
    fn call_upstream(
        &self,
        rid: tuic_proto::peer::RequestId,
        name: String,
        arguments: serde_json::Map<String, serde_json::Value>,
        timeout_ms: u64,
        progress: bool,
    ) {
        let tx = {
            let g = self.hub.lock();
            match g.links.get(&self.conn.id) {
                Some((n, tx)) if *n == self.end.generation() => tx.clone(),
                _ => return,
            }
        };
        let node = self.hub.node.clone();
        let conn = self.conn.id.clone();
        let queue = progress.then(|| {
            Arc::new(Mutex::new(tuic_proto::peer::ProgressQueue::new(
                tuic_proto::peer::PROGRESS_QUEUE_CAP,
            )))
        });
        let sink = queue.clone().map(|q| {
            let tx = tx.clone();
            let sink: tuic_node::upstream::client::ProgressSink =
                Arc::new(move |params: serde_json::Value| {
                    let mut params = match params {
                        serde_json::Value::Object(m) => m,
                        _ => serde_json::Map::new(),
                    };
                    // The hub's own token means nothing to the node; it puts its caller's back.
                    params.remove("progressToken");
                    let pushed = q.lock().unwrap_or_else(|p| p.into_inner()).push(params);
                    if pushed == tuic_proto::peer::progress::Pushed::Wake {
                        let _ = tx.send(HubCmd::Progress(rid, q.clone()));
                    }
                });
            sink
        });
        self.hub.node.tasks.spawn(async move {
            use tuic_node::ext::ToolError;
            let deadline = Duration::from_millis(timeout_ms.max(1));
            // The deadline goes down to the upstream call (which cancels upstream at it, as a
            // local call does); the outer bound is a backstop a little later.
            let r = match tokio::time::timeout(
                deadline + Duration::from_secs(1),
                node.upstreams.call_relayed(&name, arguments, sink, deadline),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => Err(ToolError::new(
                    "timeout",
                    format!("{name} did not answer on the hub within {timeout_ms} ms"),
                )),
            };
            if let Some(q) = &queue {
                // Progress sent before the answer is queued (and its wake is ahead of the
                // answer in the link's channel); anything later is dropped.
                let mut q = q.lock().unwrap_or_else(|p| p.into_inner());
                q.close();
                if q.coalesced() > 0 {
                    tracing::debug!(conn = %conn, tool = %name, coalesced = q.coalesced(), "upstream progress coalesced");
                }
            }
            let result = match r {
                Ok(v) => v,
                Err(e) => {
                    tracing::debug!(conn = %conn, tool = %name, code = e.code, "node's upstream call refused");
                    serde_json::json!({
                        "content": [{"type": "text", "text": e.to_json().to_string()}],
                        "isError": true,
                    })
                }
            };
            let _ = tx.send(HubCmd::Answer(rid, Response::UpstreamResult(result)));
        });
    }

    fn push_directory(&mut self, link: &mut PeerLink) {
        let local = local_entries(&self.hub.node, None);
        let g = self.hub.lock();
        self.end.push_directory(&g.relay, link, local);
    }
}

impl End for HubEnd {
    type Cmd = HubCmd;

    fn on_event(&mut self, link: &mut PeerLink, event: LinkEvent) {
        let id = self.conn.id.clone();
        if matches!(event, LinkEvent::Down { .. }) {
            // Nothing can answer the node any more: its in-flight mail is uncertain to it and
            // resent on the next link (the destination's ring absorbs a repeat); the answers
            // still to come become receipts, dropped with this link.
            self.cut.expire(&self.hub, None, link);
        }
        // The hub's own peers, for the directory pushed at link up (read before the hub lock).
        let local = matches!(event, LinkEvent::Up { .. })
            .then(|| local_entries(&self.hub.node, None))
            .unwrap_or_default();
        // The outcomes an answer or the link's end produced are routed under the same lock
        // that changed the outbox, as one step.
        let mut g = self.hub.lock();
        let out = self.end.on_event(&mut g.relay, link, event, || local);
        let out = match out {
            RelayOutput::Answered {
                message_id,
                to,
                refused,
                settled,
            } => {
                match refused {
                    // Not a refusal: the outbox keeps it and retries on the next tick.
                    Some((ErrorCode::RecipientFull, message)) => {
                        tracing::info!(conn = %id, message_id = %message_id, to = %to, %message, "recipient full; mail held for retry")
                    }
                    Some((code, message)) => {
                        tracing::warn!(conn = %id, message_id = %message_id, ?code, %message, "node refused relayed mail")
                    }
                    None => {}
                }
                self.hub.hand_on(g, settled);
                return;
            }
            RelayOutput::Down {
                reason,
                was_up,
                settled,
            } => {
                // The relay retired this link's shadows and made its in-flight mail
                // resendable, synchronously, before the task does anything else.
                {
                    if g.links
                        .get(&id)
                        .is_some_and(|(n, _)| *n == self.end.generation())
                    {
                        g.links.remove(&id);
                    }
                    self.hub.hand_on(g, settled);
                }
                self.hub.node.peer.committer().wake();
                self.conn.set(|s| s.peer_up = false);
                if was_up {
                    tracing::warn!(conn = %id, ?reason, "peer link down");
                }
                let why = format!("peer link down: {reason:?}");
                self.conn.set(|s| s.peer_error = Some(why));
                return;
            }
            other => {
                drop(g);
                other
            }
        };
        match out {
            RelayOutput::Nothing => {}
            RelayOutput::Up { remote_id } => {
                self.conn.set(|s| {
                    s.peer_up = true;
                    s.peer_error = None;
                    s.peer_link_ups += 1;
                });
                tracing::info!(conn = %id, node = %remote_id, "peer link up");
                // The node lists the catalogue itself at link up.
                self.hinted = Some(tuic_node::ext::ToolSource::generation(
                    &*self.hub.node.upstreams,
                ));
            }
            RelayOutput::Request { id: rid, request } => match request {
                Request::ListPeers { path } => {
                    let local = local_entries(&self.hub.node, None);
                    let resp = {
                        let g = self.hub.lock();
                        self.end.list_peers(&g.relay, local, path.as_deref())
                    };
                    let _ = link.respond(rid, resp);
                }
                Request::ListUpstreamTools => {
                    use tuic_node::ext::ToolSource;
                    let up = &self.hub.node.upstreams;
                    // Generation first: a change racing the listing re-hints, never hides.
                    let generation = up.generation();
                    self.hinted = Some(generation);
                    let _ = link.respond(
                        rid,
                        Response::UpstreamTools {
                            generation,
                            tools: up.listings(),
                        },
                    );
                }
                Request::CallUpstreamTool {
                    name,
                    arguments,
                    timeout_ms,
                    progress,
                } => self.call_upstream(rid, name, arguments, timeout_ms, progress),
                other => tracing::debug!(conn = %id, ?other, "request the relay left unanswered"),
            },
            // Routed under the lock above.
            RelayOutput::Answered { .. } | RelayOutput::Down { .. } => {}
            RelayOutput::Unexpected(other) => {
                tracing::debug!(conn = %id, ?other, "unexpected answer to send")
            }
        }
    }

    fn on_cmd(&mut self, link: &mut PeerLink, cmd: HubCmd) {
        match cmd {
            HubCmd::Kick => {}
            HubCmd::Receipt(r) => {
                let _ = link.receipt(r);
            }
            HubCmd::UpstreamsChanged => self.hint_upstreams(link),
            HubCmd::HostDown => {
                if link.state() != tuic_proto::peer::LinkState::Down {
                    tracing::info!(conn = %self.conn.id, "the session link found the host down; resetting the mail link");
                    link.reset();
                }
            }
            HubCmd::Answer(rid, r) => {
                let _ = link.respond(rid, r);
            }
            HubCmd::Custody(relayed, r, left) => {
                let mut unsaved = false;
                for (i, w) in relayed.into_iter().enumerate() {
                    let left = left.get(i) == Some(&true);
                    match custody_failed(&r, &w.held.conn, left) {
                        None => {
                            let _ = link.respond(w.rid, w.accepted);
                        }
                        Some(Relayed::Answer(refusal)) => {
                            let _ = link.respond(w.rid, refusal);
                        }
                        Some(Relayed::Unsaved { .. }) => unsaved = true,
                    }
                }
                if unsaved {
                    // See `Relayed::Unsaved`: the node's in-flight mail becomes uncertain and
                    // is resent on the next link.
                    tracing::warn!(conn = %self.conn.id, "custody of relayed mail not saved; resetting the link");
                    link.reset();
                }
            }
            HubCmd::Progress(rid, q) => {
                let queued = q.lock().unwrap_or_else(|p| p.into_inner()).drain();
                for p in queued {
                    // Refused once the call answered or the link is down: the rest goes too.
                    if link.upstream_progress(rid, p.params, p.coalesced).is_err() {
                        break;
                    }
                }
            }
        }
    }

    fn pump(&mut self, link: &mut PeerLink) {
        self.cut.answer(link);
        let sends = self.end.take_sends();
        if !sends.is_empty() {
            let (rids, msgs): (Vec<RequestId>, Vec<WireMessage>) = sends.into_iter().unzip();
            let Routed {
                mut out,
                locals,
                held,
            } = self.hub.route_batch(&msgs, Some(&self.cut.sink));
            let wait = self.hub.node.config().tuning.peer_cut_through_ms;
            let deadline = tuic_node::logs::mono_ms() + wait;
            for h in held {
                let accepted = out[h.index].take().expect("an answer per message");
                let rid = rids[h.index];
                self.cut.hold(
                    WaitingRelay {
                        rid,
                        held: h,
                        accepted,
                    },
                    deadline,
                );
            }
            // Mail for the hub's own peers: delivered through its rings (a ring commit).
            for (i, m) in locals {
                let node = &self.hub.node;
                out[i] = Some(deliver_local(node, LINK_LOCAL, &m));
            }
            for (rid, r) in rids.into_iter().zip(out) {
                if let Some(r) = r {
                    let _ = link.respond(rid, r);
                }
            }
        }
        let mut g = self.hub.lock();
        self.end.dispatch(&mut g.relay, link);
    }

    fn deadline(&self) -> Option<u64> {
        self.cut.deadline()
    }

    fn on_deadline(&mut self, link: &mut PeerLink, now: u64) {
        let due = self.cut.expire(&self.hub, Some(now), link);
        if due.is_empty() {
            return;
        }
        let wake = self.cut.sink.wake.clone();
        let held = due.iter().map(|w| w.held.clone()).collect();
        self.hub.custody(held, move |r, left| {
            let _ = wake.send(HubCmd::Custody(due, r, left));
        });
        self.hub.node.peer.committer().wake();
    }

    fn on_tick(&mut self, link: &mut PeerLink) {
        // Mail a reading recipient had no room for goes out again (`recipient_full`).
        self.hub.lock().relay.tick(&self.conn.id);
        // Removals nobody waited for are committed at the latest now.
        self.hub.node.peer.committer().wake();
        self.push_directory(link);
        self.hint_upstreams(link);
    }
}
