//! Cross-host mail on a node: the IO around the sans-IO peer cores (`tuic_proto::peer`).
//!
//! - [`driver`]: one task per link runs a `PeerLink` over a WebSocket (shared with the hub).
//! - [`endpoint`]: `WS /mcp/peer`, the node's end of the link a hub dials (TCP only).
//! - [`hubtools`]: the hub's upstream MCP tools offered here as `hub.{name}__{tool}`, listed
//!   and called over the link (node → hub requests only).
//! - this module: the node's durable state — its outbox towards the hub and the dedupe rings
//!   of every local recipient, both kept in `redb` after each change — the directory of
//!   remote peers the hub pushed, the delivery of forwarded mail into local inboxes, and the
//!   MCP-facing `send` to an address.
//!
//! A process that holds connections itself installs a [`crate::ext::MailRouter`]: its own
//! agents' sends to `<connection>/<peer>` then go through it instead of an uplink.
//!
//! Deliberately absent: process creation of any kind (no frame asks for it), and any link
//! traffic on the IPC socket. Lock order: `node.mail` before [`PeerState`]'s lock, never the
//! other way round.

pub mod commit;
pub mod driver;
pub mod endpoint;
pub mod hubtools;
pub mod quic;
pub mod quic_stream;
pub mod quic_udp;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tuic_proto::mail::MAX_MESSAGE_BYTES;
use tuic_proto::peer::{
    AckOutcome, Address, AddressError, DedupeRings, ErrorCode, Outbox, OutboxChange, OutboxError,
    OutboxLimits, PeerEntry, Response, SenderOutcome, WireMessage, Withdrawn, parse_address,
};

use crate::config::Tuning;
use crate::mail::Mail;
use crate::session::now_ms;
use crate::state::Node;
use crate::store::{PeerOp, Store, UPLINK_KEY};
use commit::{CommitResult, Committer, Source, Taken, Waiter};

/// The name a node gives its link to the hub in errors ("outbox for connection 'hub' is full").
pub const UPLINK: &str = "hub";

/// A refusal that crossed (or would cross) a host: a stable code and the connection named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Stable code.
    pub code: ErrorCode,
    /// The connection the refusal is about.
    pub connection: String,
    /// Detail; never a token or URL.
    pub message: String,
}

/// Where a waiting sender hears its mail's outcomes (non-blocking to send from any thread).
pub type OutcomeTx = mpsc::UnboundedSender<SenderOutcome>;

/// Mail a hop has taken custody of.
#[derive(Debug)]
pub struct Queued {
    /// The id it keeps on every hop.
    pub message_id: String,
    /// The connection it leaves through.
    pub connection: String,
    /// Later outcomes (ack, receipt, link drop), while the link is up; `None` when the link is
    /// down (the mail waits in the outbox).
    pub outcomes: Option<mpsc::UnboundedReceiver<SenderOutcome>>,
    /// Custody could not be committed, but the mail had already left (early dispatch): it is
    /// held in memory and resent until a hop answers, and a crash of this process before then
    /// would lose it. `None` when custody is durable.
    pub unsaved: Option<String>,
    /// The custody commit, when it has not been waited for yet: the sender's answer waits for
    /// it unless the verdict (or the next hop's `accepted`) comes first.
    pub custody: Option<PendingCustody>,
}

/// A custody commit a sender has not waited for yet (see [`send_remote`]).
#[derive(Debug)]
pub struct PendingCustody(tokio::sync::oneshot::Receiver<Custody>);

/// The durable and link state under one lock.
#[derive(Debug)]
pub struct Inner {
    /// Mail towards the hub, kept until the hub acknowledges it.
    pub uplink: Outbox,
    /// The rings of every local recipient of forwarded mail.
    pub rings: DedupeRings,
    /// Peers the hub can route to (its own and other nodes'), as it last pushed them.
    pub directory: Vec<PeerEntry>,
    /// The live link's task, by generation, with its liveness (a newer link replaces it only
    /// once it is proven dead: see [`Inner::attach`]).
    link: Option<(u64, mpsc::UnboundedSender<endpoint::Cmd>, Arc<LinkHealth>)>,
    next_link: u64,
    /// Senders waiting for the outcome of their mail, by message id.
    waiters: HashMap<String, OutcomeTx>,
    /// Recipients whose ring changed since the committer last took them.
    dirty_rings: BTreeSet<String>,
    /// Run after the next group commit (which takes everything journaled before them).
    durable: commit::Waiters,
}

/// Cross-host mail state of one node.
#[derive(Debug)]
pub struct PeerState {
    inner: Arc<Mutex<Inner>>,
    committer: Committer,
    /// The hub's upstream tools, as the link last listed them.
    pub hub_tools: Arc<hubtools::HubTools>,
}

/// Outbox bounds from the tuning keys.
pub fn limits(t: &Tuning) -> OutboxLimits {
    OutboxLimits {
        max_messages: t.peer_outbox_max_messages.max(1),
        max_bytes: t.peer_outbox_max_bytes.max(1),
        ..OutboxLimits::default()
    }
}

impl PeerState {
    /// Loads the uplink outbox and the rings from the store (empty when absent). A stored
    /// record that does not decode is an error: starting empty would drop accepted mail.
    pub fn load(store: &Arc<Store>, tuning: &Tuning) -> anyhow::Result<Self> {
        let mut uplink = load_outboxes(store, limits(tuning))?
            .remove(UPLINK_KEY)
            .unwrap_or_else(|| Outbox::with_limits(UPLINK, limits(tuning)));
        // Commits happen in groups after the fact; mail leaves while its custody commit runs
        // (the caller hears only after that commit, and the hub keeps the mail only after its
        // own).
        uplink.set_durable(uplink.next_seq());
        uplink.set_early_dispatch();
        let mut rings = DedupeRings::new();
        for (recipient, v) in store.peer_rings()? {
            rings
                .import_ring(&recipient, &String::from_utf8_lossy(&v))
                .map_err(|e| {
                    anyhow::anyhow!("decoding the stored dedupe ring of {recipient}: {e}")
                })?;
        }
        let inner = Arc::new(Mutex::new(Inner {
            uplink,
            rings,
            directory: Vec::new(),
            link: None,
            next_link: 0,
            waiters: HashMap::new(),
            dirty_rings: BTreeSet::new(),
            durable: commit::Waiters::default(),
        }));
        let committer = Committer::start(store.clone());
        committer.add(Arc::new(NodeSource(Arc::downgrade(&inner))));
        Ok(Self {
            inner,
            committer,
            hub_tools: Arc::default(),
        })
    }

    /// The group committer of this process's peer state (a hub adds its outboxes to it).
    pub fn committer(&self) -> &Committer {
        &self.committer
    }

    /// Runs `w` after the next group commit, which takes everything journaled before this
    /// call; wakes the committer.
    pub fn after_commit(&self, w: Waiter) {
        self.lock().durable.0.push(w);
        self.committer.wake();
    }

    /// The lock (poison-tolerant). Never take `node.mail`'s lock while holding it.
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        lock_inner(&self.inner)
    }

    /// The uplink outbox's fill against its bounds: mail held until the hub acknowledges it.
    pub fn uplink_status(&self) -> serde_json::Value {
        let g = self.lock();
        let l = g.uplink.limits();
        serde_json::json!({
            "held": g.uplink.len(),
            "bytes": g.uplink.bytes(),
            "max_messages": l.max_messages,
            "max_bytes": l.max_bytes,
            "recipient_full": g.uplink.recipient_full_answers(),
            // Transactions this process's group committer wrote (outboxes and rings).
            "commits": self.committer.transactions(),
        })
    }

    /// The live link task's command channel, if a hub link is attached.
    pub fn link_cmd(&self) -> Option<mpsc::UnboundedSender<endpoint::Cmd>> {
        self.lock().link.as_ref().map(|(_, tx, _)| tx.clone())
    }
}

fn lock_inner(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|p| p.into_inner())
}

/// The node's part of a group commit: its uplink outbox's journal and its changed rings.
struct NodeSource(std::sync::Weak<Mutex<Inner>>);

struct NodeTaken {
    inner: Arc<Mutex<Inner>>,
    changes: Vec<OutboxChange>,
    /// The uplink's next sequence number when the changes were taken.
    upto: u64,
    rings: Vec<(String, Option<Vec<u8>>)>,
    waiters: Vec<Waiter>,
}

impl Source for NodeSource {
    fn take(&self) -> Option<Box<dyn Taken>> {
        let inner = self.0.upgrade()?;
        let mut g = lock_inner(&inner);
        let changes = g.uplink.take_changes();
        let upto = g.uplink.next_seq();
        let dirty = std::mem::take(&mut g.dirty_rings);
        let rings = dirty
            .into_iter()
            .map(|r| {
                let json = g.rings.export_ring(&r).map(String::into_bytes);
                (r, json)
            })
            .collect::<Vec<_>>();
        let waiters = std::mem::take(&mut g.durable).0;
        drop(g);
        if changes.is_empty() && rings.is_empty() && waiters.is_empty() {
            return None;
        }
        Some(Box::new(NodeTaken {
            inner,
            changes,
            upto,
            rings,
            waiters,
        }))
    }
}

/// An outbox's changes as store writes.
pub fn outbox_ops(key: &str, changes: &[OutboxChange], ops: &mut Vec<PeerOp>) {
    ops.extend(changes.iter().map(|c| match c {
        OutboxChange::Put { seq, record } => PeerOp::Outbox {
            key: key.to_owned(),
            seq: *seq,
            record: Some(record.clone()),
        },
        OutboxChange::Remove { seq } => PeerOp::Outbox {
            key: key.to_owned(),
            seq: *seq,
            record: None,
        },
    }));
}

impl Taken for NodeTaken {
    fn write(&self, ops: &mut Vec<PeerOp>) -> anyhow::Result<()> {
        outbox_ops(UPLINK_KEY, &self.changes, ops);
        ops.extend(self.rings.iter().map(|(r, json)| PeerOp::Ring {
            recipient: r.clone(),
            json: json.clone(),
        }));
        Ok(())
    }

    fn finish(self: Box<Self>, result: CommitResult) {
        let this = *self;
        {
            let mut g = lock_inner(&this.inner);
            match &result {
                Ok(()) => {
                    // The watermark (mail already left: early dispatch).
                    g.uplink.set_durable(this.upto);
                }
                Err(_) => {
                    g.uplink.restore_changes(this.changes);
                    g.dirty_rings.extend(this.rings.into_iter().map(|(r, _)| r));
                }
            }
        }
        for w in this.waiters {
            w(result.clone());
        }
    }
}

/// Unanswered pings after which a node's link may be replaced by a newer one: a full ping
/// interval of silence after a ping went out (a live hub answers each within its round trip).
/// The link itself goes down at [`tuic_proto::peer::link::MAX_MISSED_PINGS`].
pub const REPLACE_AFTER_MISSED_PINGS: u32 = 2;

/// What a link task publishes of its liveness for the slot's next claimant: written by the
/// task after every step, read when another link arrives.
#[derive(Debug, Default)]
pub struct LinkHealth {
    up: std::sync::atomic::AtomicBool,
    missed: std::sync::atomic::AtomicU32,
}

impl LinkHealth {
    /// Records the link's state after a step.
    pub fn set(&self, up: bool, missed: u32) {
        use std::sync::atomic::Ordering::Relaxed;
        self.up.store(up, Relaxed);
        self.missed.store(missed, Relaxed);
    }

    /// Whether the link is up, and its unanswered pings.
    pub fn get(&self) -> (bool, u32) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.up.load(Relaxed), self.missed.load(Relaxed))
    }
}

/// The outcome of [`Inner::attach`].
#[derive(Debug)]
pub enum Attach {
    /// The new link owns the slot.
    Attached {
        /// Its generation.
        generation: u64,
        /// The link it took the slot from, which is told to close.
        replaced: Option<Replaced>,
    },
    /// A live link owns the slot: the new one is refused.
    Refused {
        /// The live link's generation.
        live: u64,
    },
}

/// The link a newer one replaced, for the log.
#[derive(Debug)]
pub struct Replaced {
    /// Its generation.
    pub generation: u64,
    /// Whether it had completed its handshake.
    pub up: bool,
    /// Its unanswered pings.
    pub missed: u32,
}

impl Inner {
    /// Registers a new link task, unless the slot's current link is live: a second link for
    /// the one connection a node has (its hub) never knocks off one that answers its pings —
    /// one token holder dialling again would otherwise take the real hub's link (issue 40,
    /// finding 7). The current link is replaced only when it is proven dead: still
    /// handshaking, its task gone, or [`REPLACE_AFTER_MISSED_PINGS`] pings unanswered.
    fn attach(
        &mut self,
        tx: mpsc::UnboundedSender<endpoint::Cmd>,
        health: Arc<LinkHealth>,
    ) -> Attach {
        if let Some((g, old, h)) = &self.link {
            let (up, missed) = h.get();
            if up && missed < REPLACE_AFTER_MISSED_PINGS && !old.is_closed() {
                return Attach::Refused { live: *g };
            }
        }
        self.next_link += 1;
        let replaced = self
            .link
            .replace((self.next_link, tx, health))
            .map(|(g, old, h)| {
                let _ = old.send(endpoint::Cmd::Replaced);
                let (up, missed) = h.get();
                Replaced {
                    generation: g,
                    up,
                    missed,
                }
            });
        Attach::Attached {
            generation: self.next_link,
            replaced,
        }
    }

    /// Forgets the link task `generation` (a newer one may already own the slot).
    fn detach(&mut self, generation: u64) {
        if self.link.as_ref().is_some_and(|(g, _, _)| *g == generation) {
            self.link = None;
            self.directory.clear();
        }
    }

    fn kick(&self) -> bool {
        self.link
            .as_ref()
            .is_some_and(|(_, tx, _)| tx.send(endpoint::Cmd::Kick).is_ok())
    }

    /// Reports an outcome to a waiting sender; hands it back when nobody waits any more.
    pub(crate) fn notify(
        &mut self,
        message_id: &str,
        outcome: SenderOutcome,
    ) -> Option<SenderOutcome> {
        notify_waiter(&mut self.waiters, message_id, outcome)
    }
}

/// Hands `outcome` to the sender waiting on `message_id`, or back when none waits.
pub fn notify_waiter(
    waiters: &mut HashMap<String, OutcomeTx>,
    message_id: &str,
    outcome: SenderOutcome,
) -> Option<SenderOutcome> {
    let Some(tx) = waiters.get(message_id) else {
        return Some(outcome);
    };
    match tx.send(outcome) {
        Ok(()) => None,
        Err(mpsc::error::SendError(outcome)) => {
            waiters.remove(message_id);
            Some(outcome)
        }
    }
}

/// A refusal that arrived after its sender stopped waiting: the sender gets a notice in its
/// inbox instead, so nothing ends silently.
#[derive(Debug, Clone)]
pub struct LateRefusal {
    /// The sender's local identity.
    pub sender: String,
    /// The mail's id.
    pub message_id: String,
    /// Where it was going.
    pub to: String,
    /// The outcome (`Refused` or `RefusedOnRetry`).
    pub outcome: SenderOutcome,
}

impl LateRefusal {
    /// A notice for `outcome` when it is a refusal.
    pub fn of(sender: &str, message_id: &str, to: &str, outcome: SenderOutcome) -> Option<Self> {
        matches!(
            outcome,
            SenderOutcome::Refused { .. } | SenderOutcome::RefusedOnRetry { .. }
        )
        .then(|| Self {
            sender: sender.to_owned(),
            message_id: message_id.to_owned(),
            to: to.to_owned(),
            outcome,
        })
    }
}

/// Posts late-refusal notices (`kind: "delivery_refused"`, from `tuic`) into the senders'
/// inboxes. Call with no lock held. A sender that is gone (a restart emptied the registry) is
/// only logged.
pub fn post_refusals(node: &Arc<Node>, late: Vec<LateRefusal>) {
    for l in late {
        let text = match &l.outcome {
            SenderOutcome::Refused {
                code,
                connection,
                message,
            } => format!(
                "message {} to {} was refused by connection '{connection}' ({}): {message}",
                l.message_id,
                l.to,
                error_code(*code)
            ),
            SenderOutcome::RefusedOnRetry {
                code,
                connection,
                message,
            } => format!(
                "message {} to {}: outcome uncertain; a resend was refused by connection '{connection}' ({}: {message}) but an earlier attempt may have arrived; it is not retried",
                l.message_id,
                l.to,
                error_code(*code)
            ),
            _ => continue,
        };
        if let Err(e) = Mail::post(
            node,
            &l.sender,
            "tuic",
            Some("tuic".into()),
            text,
            Some("delivery_refused".into()),
            None,
        ) {
            tracing::warn!(source = "agent_msg", sender = %l.sender, message_id = %l.message_id, error = %e, "late refusal not posted");
        }
    }
}

/// [`post_refusals`] from a waiter on the committer thread, which must not take the mail
/// lock: on a thread of its own (rare: refusals nobody waited for).
pub fn post_refusals_later(node: &Arc<Node>, late: Vec<LateRefusal>) {
    if late.is_empty() {
        return;
    }
    let node = node.clone();
    let _ = std::thread::Builder::new()
        .name("late-refusals".into())
        .spawn(move || post_refusals(&node, late));
}

/// Commits an outbox's pending changes (one message record each) in one transaction. On
/// failure the changes go back into the outbox, so the next commit writes them again.
pub fn persist_outbox(store: &Store, key: &str, outbox: &mut Outbox) -> anyhow::Result<()> {
    commit_changes(store, key, outbox, false)
}

fn commit_changes(
    store: &Store,
    key: &str,
    outbox: &mut Outbox,
    drop_legacy: bool,
) -> anyhow::Result<()> {
    let changes = outbox.take_changes();
    if changes.is_empty() && !drop_legacy {
        return Ok(());
    }
    let rows: Vec<(u64, Option<&[u8]>)> = changes
        .iter()
        .map(|c| match c {
            OutboxChange::Put { seq, record } => (*seq, Some(record.as_slice())),
            OutboxChange::Remove { seq } => (*seq, None),
        })
        .collect();
    let r = store.apply_peer_outbox(key, &rows, drop_legacy);
    if r.is_err() {
        outbox.restore_changes(changes);
    }
    r
}

/// Every stored outbox by key ([`UPLINK_KEY`] or a connection id), with `limits`. Outboxes an
/// earlier version stored as whole records are first moved into per-message records (one
/// transaction each). A record that does not decode is an error: starting empty would drop
/// accepted mail.
pub fn load_outboxes(
    store: &Store,
    limits: OutboxLimits,
) -> anyhow::Result<BTreeMap<String, Outbox>> {
    for (key, json) in store.legacy_peer_outboxes()? {
        let mut old: Outbox = serde_json::from_slice(&json)
            .map_err(|e| anyhow::anyhow!("decoding the stored outbox of {key}: {e}"))?;
        old.rewrite_all();
        commit_changes(store, &key, &mut old, true)?;
    }
    let mut out = BTreeMap::new();
    for (key, records) in store.peer_outbox_messages()? {
        let name = if key == UPLINK_KEY { UPLINK } else { &key };
        let o = Outbox::from_records(name, limits, &records)
            .map_err(|e| anyhow::anyhow!("decoding the stored outbox of {key}: {e}"))?;
        out.insert(key, o);
    }
    Ok(out)
}

/// A local identity for `hello` and errors: the machine's host name.
pub fn local_id(node: &Node) -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| node.name.to_owned())
}

/// Delivers forwarded mail (`from` stamped by the link) into a local inbox: recipient check,
/// dedupe ring, enqueue and ring record under the mail lock, the ring committed to `redb`
/// before the answer goes back. `connection` names this side in refusals.
pub fn deliver_local(node: &Arc<Node>, connection: &str, m: &WireMessage) -> Response {
    deliver_batch(node, connection, vec![m.clone()])
        .pop()
        .expect("one answer per message")
}

/// Delivers a batch of forwarded mail (one link step's `send`s), answers in order: each goes
/// through recipient check, dedupe ring, enqueue and ring record under the mail lock, then the
/// changed rings are committed in one group (`commit`) while the mail lock is still held, so
/// no reader, waiter or PTY wake sees the mail before its ring is durable, and no answer
/// leaves before that.
pub fn deliver_batch(node: &Arc<Node>, connection: &str, msgs: Vec<WireMessage>) -> Vec<Response> {
    let msgs: Vec<WireMessage> = msgs
        .into_iter()
        .map(|mut m| {
            // `to` may name a live terminal by PTY id or alias; mail goes to its identity.
            if !node.mail.lock().inboxes.is_registered(&m.to)
                && let Some(s) = node.sessions.live(&m.to)
            {
                let mut g = node.mail.lock();
                Mail::ensure(node, &mut g, &s.tuic_session);
                m.to = s.tuic_session.clone();
            }
            m
        })
        .collect();
    let (resps, actions) = {
        let mut g = node.mail.lock();
        let mut committed = None;
        let resps: Vec<Response> = {
            let mut p = node.peer.lock();
            // Deadlines and cursors on the deadline clock, the stamp on the wall clock.
            let (now, wall) = (crate::logs::mono_ms(), now_ms());
            let resps: Vec<Response> = msgs
                .iter()
                .map(|m| {
                    let resp = tuic_proto::peer::deliver_stamped(
                        &mut g.inboxes,
                        &mut p.rings,
                        now,
                        wall,
                        connection,
                        m,
                    );
                    if let Response::SendAck {
                        outcome: AckOutcome::Delivered,
                        ..
                    } = &resp
                    {
                        p.dirty_rings.insert(m.to.clone());
                    }
                    resp
                })
                .collect();
            if !p.dirty_rings.is_empty() {
                let (w, rx) = commit::channel_waiter();
                p.durable.0.push(w);
                committed = Some(rx);
            }
            resps
        };
        if let Some(rx) = committed {
            // Run the group here: the ring commit is on the mail's critical path.
            node.peer.committer.commit_now();
            if let Err(e) = commit::wait(&rx) {
                // As before group commit: the mail is in the inbox; the ring is written again
                // with the next group.
                tracing::error!(error = %e, "persisting dedupe rings failed");
            }
        }
        (resps, Mail::drain(&mut g))
    };
    Mail::act(node, actions);
    for (m, resp) in msgs.iter().zip(&resps) {
        match resp {
            Response::SendAck { outcome, .. } => {
                tracing::info!(source = "agent_msg", from = %m.from, to = %m.to, message_id = %m.message_id, outcome = ?outcome, "forwarded message delivered")
            }
            Response::Error {
                code: ErrorCode::RecipientFull,
                ..
            } => {
                tracing::info!(source = "agent_msg", from = %m.from, to = %m.to, message_id = %m.message_id, "forwarded message held at the previous hop: recipient full")
            }
            Response::Error { code, message, .. } => {
                tracing::warn!(source = "agent_msg", from = %m.from, to = %m.to, message_id = %m.message_id, code = ?code, %message, "forwarded message refused")
            }
            _ => {}
        }
    }
    resps
}

/// A recipient identity retired on this node: its ring goes with it (sender retirement does
/// not touch rings). Call under the mail lock.
pub fn recipient_retired(node: &Node, recipient: &str) {
    let mut p = node.peer.lock();
    if p.rings.len(recipient) > 0 {
        p.rings.remove(recipient);
        p.dirty_rings.insert(recipient.to_owned());
        drop(p);
        node.peer.committer.wake();
    }
}

/// How an `agent send` target that did not resolve locally is routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Not an address at all: the local "unknown recipient" answer stands.
    NotAnAddress,
    /// `local/<peer>` on a hub: the hub's own peer.
    Local(String),
    /// Through the peer link.
    Remote,
}

/// Routes a `to` that is not a local recipient. Empty connection ids and peers are refused
/// here, before any owner is selected.
pub fn route(node: &Node, to: &str) -> Result<Route, AddressError> {
    if !to.contains('/') {
        return Ok(Route::NotAnAddress);
    }
    match parse_address(to) {
        Err(e) => Err(e),
        Ok(Address::Local(peer)) if node.ext.mail_router().is_some() => {
            Ok(Route::Local(peer.to_owned()))
        }
        Ok(_) => Ok(Route::Remote),
    }
}

/// The stable snake_case name of a wire error code.
pub fn error_code(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::OutboxFull => "outbox_full",
        ErrorCode::UnknownRecipient => "unknown_recipient",
        ErrorCode::IdentityCollision => "identity_collision",
        ErrorCode::TooLarge => "too_large",
        ErrorCode::SenderForged => "sender_forged",
        ErrorCode::SenderNotRegistered => "sender_not_registered",
        ErrorCode::Unavailable => "unavailable",
        _ => "refused",
    }
}

/// How an `agent send` to an address ended: the peer layer's typed answer. The MCP tool's
/// rendering is [`Sent::to_json`] (the MCP tool's error rendering of the refusals is
/// `mcp::tools::peer_errors`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The mail's id (stable across hops and resends).
    pub message_id: String,
    /// The connection the answer is about (the first hop, or the one that dropped).
    pub connection: String,
    /// What the sender can rely on.
    pub status: SentStatus,
}

/// The three answers of a cross-host send (`docs/mail-protocol.md`, "Guarantees, hop by hop").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SentStatus {
    /// In the recipient's inbox, its ring committed there.
    Delivered,
    /// Held committed by a hop, retried until acknowledged.
    Accepted,
    /// Maybe delivered.
    Uncertain(Uncertainty),
}

/// Why an answer is uncertain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uncertainty {
    /// The link dropped while the mail was on the wire; it is resent with the same id.
    LinkDropped,
    /// A hop could not save it after it had left (the text names the hop and the error); it is
    /// resent until acknowledged, but a restart of that hop would lose it.
    Unsaved(String),
    /// A resend was refused (the detail) but an earlier attempt may have arrived; final.
    RefusedOnRetry(String),
}

/// Why an `agent send` to an address was refused (nothing was sent, or it certainly did not
/// arrive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// The body is over the mail limit.
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// A hop refused it.
    Refused {
        /// Code and connection.
        refusal: Refusal,
        /// The mail's id, once one was given.
        message_id: Option<String>,
    },
}

impl SendError {
    pub(crate) fn refused(refusal: Refusal, message_id: &str) -> Self {
        SendError::Refused {
            refusal,
            message_id: Some(message_id.to_owned()),
        }
    }
}

impl Sent {
    /// The MCP tool's answer for `agent action=send` to `to`.
    pub fn to_json(&self, to: &str) -> Value {
        let status = match self.status {
            SentStatus::Delivered => "delivered",
            SentStatus::Accepted => "accepted",
            SentStatus::Uncertain(_) => "uncertain",
        };
        let mut v = json!({
            "delivered": status == "delivered",
            "status": status,
            "message_id": self.message_id,
            "to": to,
            "connection": self.connection,
            "delivery_path": "peer_link",
        });
        if let SentStatus::Uncertain(why) = &self.status {
            let (will_retry, reason) = match why {
                Uncertainty::LinkDropped => (
                    true,
                    "the link dropped while the message was on the wire; it stays queued and is resent with the same message_id, which the destination deduplicates".to_owned(),
                ),
                Uncertainty::Unsaved(detail) => (true, detail.clone()),
                Uncertainty::RefusedOnRetry(detail) => (
                    false,
                    format!(
                        "a resend was refused ({detail}) but an earlier attempt may have arrived; it is not retried"
                    ),
                ),
            };
            v["will_retry"] = json!(will_retry);
            v["uncertain_reason"] = json!(reason);
        }
        v
    }
}

/// `agent action=send` to an address: custody in the first hop's outbox, then up to
/// `tuning.peer_send_wait_ms` for the verdict. Answers `delivered` (in the recipient's inbox,
/// its ring committed there: this hop's custody commit is not waited for), `accepted` (held,
/// will be retried until acknowledged: committed here first, unless the hub said it holds it
/// committed), `uncertain` (on the wire when the link dropped; committed here, resent with the
/// same id, never as new mail), or a refusal naming the connection.
pub async fn send_to_address(
    node: &Arc<Node>,
    from: &str,
    from_name: Option<String>,
    to: &str,
    message: String,
) -> Result<Sent, SendError> {
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(SendError::TooLarge {
            bytes: message.len(),
        });
    }
    let mut queued = match node.ext.mail_router() {
        Some(router) => {
            // A hub's own agent: its relay step commits custody (blocking).
            let (router, from, to) = (router.clone(), from.to_owned(), to.to_owned());
            tokio::task::spawn_blocking(move || router.send(&from, from_name, &to, message))
                .await
                .unwrap_or_else(|_| {
                    Err(Refusal {
                        code: ErrorCode::Internal,
                        connection: UPLINK.to_owned(),
                        message: "relaying the message failed unexpectedly".into(),
                    })
                })
        }
        None => queue_uplink(node, from, from_name, to, message),
    }
    .map_err(|refusal| SendError::Refused {
        refusal,
        message_id: None,
    })?;
    // Whether the next hop said it holds the mail (committed there), so this hop's custody
    // commit is no longer what the answer rests on.
    let mut held_beyond = false;
    let wait = Duration::from_millis(node.config().tuning.peer_send_wait_ms);
    let mut status = SentStatus::Accepted;
    let mut connection = queued.connection.clone();
    if let Some(why) = &queued.unsaved {
        // Not durable here: uncertain until the next hop says it holds the mail.
        status = SentStatus::Uncertain(Uncertainty::Unsaved(why.clone()));
    }
    if let Some(rx) = &mut queued.outcomes {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let next = match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(o)) => Ok(o),
                Ok(None) | Err(_) => Err(()),
            };
            match next {
                Ok(SenderOutcome::Accepted) => {
                    // The next hop holds it committed.
                    status = SentStatus::Accepted;
                    connection = queued.connection.clone();
                    held_beyond = true;
                }
                Ok(SenderOutcome::Delivered) => {
                    status = SentStatus::Delivered;
                    connection = queued.connection.clone();
                    break;
                }
                Ok(SenderOutcome::Refused {
                    code,
                    connection,
                    message,
                }) => {
                    forget_waiter(node, &queued.message_id);
                    let r = Refusal {
                        code,
                        connection,
                        message,
                    };
                    return Err(SendError::refused(r, &queued.message_id));
                }
                Ok(SenderOutcome::Uncertain { connection: c }) => {
                    status = SentStatus::Uncertain(Uncertainty::LinkDropped);
                    connection = c;
                    break;
                }
                Ok(SenderOutcome::RefusedOnRetry {
                    connection: c,
                    message,
                    ..
                }) => {
                    status = SentStatus::Uncertain(Uncertainty::RefusedOnRetry(message));
                    connection = c;
                    break;
                }
                Err(_) => break,
            }
        }
    }
    forget_waiter(node, &queued.message_id);
    if status != SentStatus::Delivered
        && !held_beyond
        && let Some(PendingCustody(rx)) = queued.custody.take()
    {
        // The answer promises the mail survives a crash: its custody commit first (the
        // committer thread runs the group). A `delivered` verdict needs none: the mail is in
        // the recipient's inbox, its ring committed there.
        node.peer.committer.wake();
        match rx.await {
            Ok(Custody::Durable) => {}
            Ok(Custody::OnItsWay(e)) => {
                tracing::error!(error = %e, message_id = %queued.message_id, "persisting the uplink outbox failed after the mail left");
                connection = queued.connection.clone();
                status = SentStatus::Uncertain(Uncertainty::Unsaved(format!(
                    "this node could not save its outbox ({e}); the message was already on its way and is resent with the same message_id until the hub acknowledges it, but a restart of this node before then would lose it"
                )));
            }
            Ok(Custody::NotSent(e)) => {
                tracing::error!(error = %e, "persisting the uplink outbox failed");
                let r = Refusal {
                    code: ErrorCode::Internal,
                    connection: UPLINK.to_owned(),
                    message: "the outbox could not be saved; nothing was sent".into(),
                };
                return Err(SendError::refused(r, &queued.message_id));
            }
            Err(_) => {
                // The committer is gone (shutdown): nothing says the mail is durable.
                let r = Refusal {
                    code: ErrorCode::Internal,
                    connection: UPLINK.to_owned(),
                    message: "the outbox could not be saved (the node is stopping)".into(),
                };
                return Err(SendError::refused(r, &queued.message_id));
            }
        }
    }
    let label = match status {
        SentStatus::Delivered => "delivered",
        SentStatus::Accepted => "accepted",
        SentStatus::Uncertain(_) => "uncertain",
    };
    tracing::info!(source = "agent_msg", %from, %to, message_id = %queued.message_id, status = label, "agent message sent across hosts");
    Ok(Sent {
        message_id: queued.message_id,
        connection,
        status,
    })
}

fn forget_waiter(node: &Node, message_id: &str) {
    // A verdict that raced the end of the wait is reported as a notice later, not lost.
    node.peer.lock().waiters.remove(message_id);
}

/// What became of a sender's custody commit.
#[derive(Debug)]
pub enum Custody {
    /// Committed (or the hub answered before the commit failed).
    Durable,
    /// The commit failed and the mail had not left: taken back out.
    NotSent(Arc<str>),
    /// The commit failed after the mail left: it stays held in memory.
    OnItsWay(Arc<str>),
}

/// A node's own send to an address: into the uplink outbox, the link task told at once (the
/// mail leaves before its custody commit); the commit is left pending for `send_remote`.
fn queue_uplink(
    node: &Arc<Node>,
    from: &str,
    from_name: Option<String>,
    to: &str,
    message: String,
) -> Result<Queued, Refusal> {
    let message_id = uuid::Uuid::new_v4().to_string();
    let m = WireMessage {
        message_id: message_id.clone(),
        from: from.to_owned(),
        to: to.to_owned(),
        message,
        timestamp_ms: now_ms(),
        from_name,
        kind: None,
        lifecycle: None,
    };
    let mut p = node.peer.lock();
    match p.uplink.push(m) {
        Ok(_) => {}
        Err(e @ OutboxError::Full { .. }) => {
            return Err(Refusal {
                code: ErrorCode::OutboxFull,
                connection: UPLINK.to_owned(),
                message: e.to_string(),
            });
        }
        Err(e) => {
            return Err(Refusal {
                code: ErrorCode::TooLarge,
                connection: UPLINK.to_owned(),
                message: e.to_string(),
            });
        }
    }
    // The outcome waiter is in place before the mail can leave.
    let outcomes = if p.link.is_some() {
        let (tx, rx) = mpsc::unbounded_channel();
        p.waiters.insert(message_id.clone(), tx);
        Some(rx)
    } else {
        None
    };
    // Custody: answered only after the group commit that holds this message; the mail leaves
    // at once (early dispatch), so its trip overlaps that commit. A failed commit takes it back
    // out on the committer thread when it has not left yet (nothing is promised that a crash
    // would lose); mail already on its way stays held, and the caller hears it is unsaved.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let inner = node.peer.inner.clone();
    let id = message_id.clone();
    p.durable.0.push(Box::new(move |r: CommitResult| {
        let custody = match r {
            Ok(()) => Custody::Durable,
            Err(e) => {
                let mut g = lock_inner(&inner);
                match g.uplink.withdraw(&id) {
                    Withdrawn::Withdrawn => {
                        g.waiters.remove(&id);
                        Custody::NotSent(e)
                    }
                    Withdrawn::OnItsWay => Custody::OnItsWay(e),
                    // The hub answered already (it holds the mail committed, or refused it:
                    // the outcome is on its way to the sender).
                    Withdrawn::NotHeld => Custody::Durable,
                }
            }
        };
        let _ = tx.send(custody);
    }));
    p.kick();
    drop(p);
    // The commit is not waited for here: the verdict usually comes first, and whether the
    // answer needs this commit is decided then (`send_remote`). Until a group takes the
    // record, it stays in the journal, and an acknowledgement before that writes nothing.
    Ok(Queued {
        message_id,
        connection: UPLINK.to_owned(),
        outcomes,
        unsaved: None,
        custody: Some(PendingCustody(rx)),
    })
}

/// Peers reachable through the peer link, as `list_peers` entries with their addresses: on a
/// hub, every connected node's peers; on a node, what its hub last pushed.
pub fn remote_peers(node: &Node, path: Option<&str>) -> Vec<Value> {
    let entries = match node.ext.mail_router() {
        Some(h) => h.peers(),
        None => node.peer.lock().directory.clone(),
    };
    entries
        .into_iter()
        .filter(|p| path.is_none() || p.path.as_deref() == path)
        .filter_map(|p| {
            let address = p.address.clone()?;
            let mut v = json!({
                "tuic_session": p.tuic_session,
                "name": p.name,
                "orchestrator": p.orchestrator,
                "address": address,
                "is_remote": true,
            });
            if let Some((conn, _)) = address.split_once('/') {
                v["connection_id"] = json!(conn);
            }
            if let Some(path) = p.path {
                v["path"] = json!(path);
            }
            Some(v)
        })
        .collect()
}

/// This node's registered peers as link entries (no address: the hub assigns those).
pub fn local_entries(node: &Node, path: Option<&str>) -> Vec<PeerEntry> {
    let peers: Vec<(String, crate::mail::Peer)> = node
        .mail
        .lock()
        .peers
        .iter()
        .filter(|(_, p)| path.is_none() || p.path.as_deref() == path)
        .map(|(k, p)| (k.clone(), p.clone()))
        .collect();
    peers
        .into_iter()
        .map(|(k, p)| {
            let live = node.sessions.live(&k).filter(|s| s.tuic_session == k);
            PeerEntry {
                tuic_session: k,
                name: p.name,
                orchestrator: p.orchestrator,
                address: None,
                alias: live.as_ref().map(|s| s.alias.clone()),
                session_id: live.as_ref().map(|s| s.id.clone()),
                path: p.path,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(status: SentStatus) -> Value {
        Sent {
            message_id: "m1".into(),
            connection: "hub".into(),
            status,
        }
        .to_json("nodec/carol")
    }

    #[test]
    fn peer_send_outcomes_render_as_the_agent_tool_answers() {
        let v = sent(SentStatus::Delivered);
        assert_eq!(v["status"], "delivered");
        assert_eq!(v["delivered"], true);
        assert_eq!(v["to"], "nodec/carol");
        assert_eq!(v["delivery_path"], "peer_link");
        assert!(v.get("will_retry").is_none());
        let v = sent(SentStatus::Accepted);
        assert_eq!(
            (v["status"].as_str(), v["delivered"].as_bool()),
            (Some("accepted"), Some(false))
        );
        let v = sent(SentStatus::Uncertain(Uncertainty::LinkDropped));
        assert_eq!(v["will_retry"], true);
        assert!(
            v["uncertain_reason"]
                .as_str()
                .unwrap()
                .contains("link dropped")
        );
        let v = sent(SentStatus::Uncertain(Uncertainty::Unsaved(
            "hub could not save".into(),
        )));
        assert_eq!(
            (v["will_retry"].as_bool(), v["uncertain_reason"].as_str()),
            (Some(true), Some("hub could not save"))
        );
        let v = sent(SentStatus::Uncertain(Uncertainty::RefusedOnRetry(
            "full".into(),
        )));
        assert_eq!(v["will_retry"], false);
        assert!(
            v["uncertain_reason"]
                .as_str()
                .unwrap()
                .starts_with("a resend was refused (full)")
        );
    }
}
