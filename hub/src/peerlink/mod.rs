//! The hub's ends of the peer links and the relay of cross-host mail.
//!
//! Per configured connection one task dials `ws://<node>/mcp/peer` with the node's token as
//! the `tui-session` cookie and runs a `PeerLink` (role hub) through the shared driver
//! (`tuic_node::link::driver`). Each connection's task is its own: a mute node holds only its
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
mod cut;
mod end;

use std::collections::HashMap;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use tokio::sync::mpsc;
use tuic_node::ext::NodeApi;
use tuic_node::ext::mail::{
    LateRefusal, PeerOp, UPLINK_KEY, deliver_local, notify_waiter, outbox_ops, post_refusals_later,
};
use tuic_node::link::commit::{CommitResult, Source, Taken, Waiter, Waiters};
use tuic_proto::peer::{
    ErrorCode, LOCAL as LINK_LOCAL, Outbox, OutboxChange, OutboxEvent, Receipt, Relay, Response,
    Route, Settled, Step, WireMessage, Withdrawn,
};

use crate::connections::Conn;
pub use cut::WaitingRelay;
pub use end::drive_over;

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
    pub(crate) waiters: HashMap<String, tuic_node::ext::mail::OutcomeTx>,
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

/// The hub's relay: outboxes, shadows and link handles.
#[derive(Debug)]
pub struct PeerHub {
    pub(crate) node: Arc<NodeApi>,
    inner: Mutex<Inner>,
    me: Weak<PeerHub>,
}

impl PeerHub {
    /// Loads every stored per-connection outbox from the hub's store.
    pub fn load(node: Arc<NodeApi>) -> anyhow::Result<Arc<Self>> {
        let mut inner = Inner::default();
        for (k, o) in tuic_node::ext::mail::load_outboxes(&node)? {
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
        tuic_node::ext::mail::committer(&node).add(Arc::new(HubSource(Arc::downgrade(&hub))));
        Ok(hub)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes sure a configured connection has an outbox.
    pub fn ensure_outbox(&self, conn: &str) {
        let limits = tuic_node::ext::mail::limits(&self.node);
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
        tuic_node::ext::mail::committer(&self.node).commit_now();
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
        tuic_node::ext::mail::committer(&self.node).wake();
        post_refusals_later(&self.node, late);
    }
}

/// One connection's link task: [`drive_over`] with the hub's dials (`crate::link::dial`),
/// a fingerprint seen first pinned in `config.json`.
pub async fn drive(hub: Arc<PeerHub>, conn: Arc<Conn>) {
    let h = hub.clone();
    let skip = Arc::new(std::sync::Mutex::new(None::<Instant>));
    drive_over(hub, conn, move |c: Arc<Conn>| {
        let (h, skip) = (h.clone(), skip.clone());
        async move {
            let pin = |conn: &Conn, fp: &str| pin_first(&h, conn, fp);
            crate::link::dial(&pin, &c, &skip).await
        }
    })
    .await;
}

/// Saves the fingerprint a dial pinned (trust on first use; `link::dial` already holds it in
/// memory) as the connection's `quic_fingerprint` in `config.json`.
fn pin_first(hub: &PeerHub, conn: &Conn, fingerprint: &str) {
    let saved = hub.node.config_file.update(|doc| {
        crate::connections::set_fingerprint(doc, &conn.id, fingerprint);
        Ok(())
    });
    match saved {
        Ok(cfg) => hub.node.set_config(cfg),
        Err(e) => {
            tracing::error!(conn = %conn.id, error = %e, "saving the pinned QUIC fingerprint")
        }
    }
    tracing::info!(conn = %conn.id, fingerprint, "pinned the node's QUIC certificate (trust on first use)");
}
