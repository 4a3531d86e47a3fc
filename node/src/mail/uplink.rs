//! The node's uplink: its durable cross-host mail state — the outbox towards the hub and the
//! dedupe rings of every local recipient, both kept in `redb` after each change through the
//! group committer (`crate::link::commit`) — the directory of remote peers the hub pushed,
//! and the slot of the live hub link. Its IO shells: [`super::endpoint`] (`WS /mcp/peer` and
//! the QUIC link's end), [`super::deliver`] (forwarded mail into local inboxes) and
//! [`super::send`] (an agent's send to an address).
//!
//! A process that holds connections itself installs a [`crate::ext::MailRouter`]: its own
//! agents' sends to `<connection>/<peer>` then go through it instead of an uplink.
//!
//! Deliberately absent: process creation of any kind (no frame asks for it), and any link
//! traffic on the IPC socket. Lock order: `node.mail` before [`PeerState`]'s lock, never the
//! other way round.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;
use tuic_proto::peer::{
    DedupeRings, ErrorCode, Outbox, OutboxChange, OutboxLimits, PeerEntry, SenderOutcome,
};

use super::deliver::load_outboxes;
use super::endpoint;
use super::send::Custody;
use crate::config::Tuning;
use crate::link::commit::{self, CommitResult, Committer, Source, Taken, Waiter};
use crate::store::{PeerOp, Store, UPLINK_KEY};
use crate::upstream::hubtools;

/// The name a node gives its link to the hub in errors ("outbox for connection 'hub' is full").
pub(crate) const UPLINK: &str = "hub";

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
pub struct PendingCustody(pub(super) tokio::sync::oneshot::Receiver<Custody>);

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
    pub(super) link: Option<(u64, mpsc::UnboundedSender<endpoint::Cmd>, Arc<LinkHealth>)>,
    pub(super) next_link: u64,
    /// Senders waiting for the outcome of their mail, by message id.
    pub(super) waiters: HashMap<String, OutcomeTx>,
    /// Recipients whose ring changed since the committer last took them.
    pub(super) dirty_rings: BTreeSet<String>,
    /// Run after the next group commit (which takes everything journaled before them).
    pub(super) durable: commit::Waiters,
}

/// Cross-host mail state of one node.
#[derive(Debug)]
pub struct PeerState {
    pub(super) inner: Arc<Mutex<Inner>>,
    pub(super) committer: Committer,
    /// The hub's upstream tools, as the link last listed them.
    pub hub_tools: Arc<hubtools::HubTools>,
}

/// Outbox bounds from the tuning keys.
pub(crate) fn limits(t: &Tuning) -> OutboxLimits {
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

    /// Whether a hub's link is attached and answering (up, fewer than
    /// [`REPLACE_AFTER_MISSED_PINGS`] pings unanswered): notifications leave it to the hub.
    pub fn hub_attached(&self) -> bool {
        self.lock().link.as_ref().is_some_and(|(_, tx, h)| {
            let (up, missed) = h.get();
            up && missed < REPLACE_AFTER_MISSED_PINGS && !tx.is_closed()
        })
    }

    /// The live link task's command channel, if a hub link is attached.
    pub fn link_cmd(&self) -> Option<mpsc::UnboundedSender<endpoint::Cmd>> {
        self.lock().link.as_ref().map(|(_, tx, _)| tx.clone())
    }
}

pub(super) fn lock_inner(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
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
pub(crate) const REPLACE_AFTER_MISSED_PINGS: u32 = 2;

/// What a link task publishes of its liveness for the slot's next claimant: written by the
/// task after every step, read when another link arrives.
#[derive(Debug, Default)]
pub(crate) struct LinkHealth {
    up: std::sync::atomic::AtomicBool,
    missed: std::sync::atomic::AtomicU32,
}

impl LinkHealth {
    /// Records the link's state after a step.
    pub(crate) fn set(&self, up: bool, missed: u32) {
        use std::sync::atomic::Ordering::Relaxed;
        self.up.store(up, Relaxed);
        self.missed.store(missed, Relaxed);
    }

    /// Whether the link is up, and its unanswered pings.
    pub(crate) fn get(&self) -> (bool, u32) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.up.load(Relaxed), self.missed.load(Relaxed))
    }
}

/// The outcome of [`Inner::attach`].
#[derive(Debug)]
pub(crate) enum Attach {
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
pub(crate) struct Replaced {
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
    pub(super) fn attach(
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
    pub(super) fn detach(&mut self, generation: u64) {
        if self.link.as_ref().is_some_and(|(g, _, _)| *g == generation) {
            self.link = None;
            self.directory.clear();
        }
    }

    pub(super) fn kick(&self) -> bool {
        self.link
            .as_ref()
            .is_some_and(|(_, tx, _)| tx.send(endpoint::Cmd::Kick).is_ok())
    }

    /// Reports an outcome to a waiting sender; hands it back when nobody waits any more.
    pub(super) fn notify(
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
