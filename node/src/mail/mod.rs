//! Agent mail on the node: the IO driver around the sans-IO inbox core
//! (`tuic_proto::mail::Inboxes`), the peer directory, and the wake delivery into managed PTYs.
//!
//! Everything mail-related sits under one mutex ([`Mail::lock`]): the recipient check of a
//! send, a `replaces=` retire and the inbox enqueue can never interleave, so a message is
//! either carried over or refused, never buffered under an address deleted a moment later.
//! PTY I/O never happens under that lock: the driver drains the core's events into a list of
//! actions and runs them after releasing it.
//!
//! Channel push (`channel`) and the launch receipt (`receipt`) hang off the same state; the
//! reaper asks [`peer_identity_is_addressable`] which identities must outlive their protocol
//! sessions. Mail never imports the MCP layer: it tells it things through [`Clients`], which
//! the composition root implements. Mail holds no node: [`Mail`] runs over a [`MailEnv`] of
//! handles (sessions, tasks, shutdown, the uplink state, a config reader) built there too.
//!
//! Lock order: the mail lock may be taken while the MCP session table is locked (the reaper
//! asks [`peer_identity_is_addressable`] under it), so the session table is never locked while
//! mail is held: [`Clients::push`] is called with the mail lock released.
//!
//! Time: every `now` handed to the core is [`mono_ms`] (the node's deadline clock), so a wall
//! clock step never moves a wait's deadline; message timestamps are [`now_ms`].
//!
//! Cross-host mail is the same room: [`uplink`] holds the node's durable link state (its
//! outbox towards the hub, the dedupe rings, the pushed directory), [`endpoint`] is the node's
//! end of a hub's link (`WS /mcp/peer`, and the QUIC link the `link` room accepts), [`deliver`]
//! puts forwarded mail into local inboxes, [`send`] carries an agent's send to an address.
//! The carriers themselves (driver, group committer, QUIC, TLS) are `crate::link`.
//!
//! Waits are event-driven: a pending `agent action=wait` holds the receiving end of a oneshot
//! channel; the core resolves it in the same step that assigns it mail, or the timer task
//! (woken by [`Mail::timer`]) resolves it at its deadline. Nothing polls.

pub(crate) mod channel;
pub(crate) mod deliver;
pub(crate) mod endpoint;
pub(crate) mod env;
pub(crate) mod launch;
pub(crate) mod receipt;
pub(crate) mod send;
pub(crate) mod spawn;
pub(crate) mod trust;
pub(crate) mod uplink;
pub(crate) mod wake;

pub use deliver::{LateRefusal, persist_outbox};
pub(crate) use deliver::{
    Route, deliver_batch, deliver_local, error_code, load_outboxes, local_entries, local_id,
    post_refusals, post_refusals_later, recipient_retired, route,
};
pub(crate) use env::MailEnv;
pub(crate) use send::{SendEnv, remote_peers};
pub use uplink::{OutcomeTx, PendingCustody, Queued, Refusal, notify_waiter, outbox_ops};
pub(crate) use uplink::{PeerState, UPLINK, limits};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;
use tuic_proto::events::Event;
use tuic_proto::mail::{
    DeliveryPath, InboxError, InboxEvent, InboxMessage, InboxPage, Inboxes, NewMessage,
    SendReceipt, WaitId, WaitOutcome, WaitStart,
};

use crate::logs::{mono_ms, now_ms};

/// One registered peer identity.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Peer {
    /// Display name (`register name=`, spawn `name=`), if any.
    pub name: Option<String>,
    /// Declared with `register orchestrator=true`.
    pub orchestrator: bool,
    /// Repository root it works in (`register path=`), for `list_peers path=`.
    pub path: Option<String>,
    /// The identity that spawned it, when the spawner was registered.
    pub parent: Option<String>,
    /// Started by `agent action=spawn` (a managed child).
    pub managed: bool,
    /// A managed child exempt from automatic idle closure (`keep_open`).
    pub keep_open: bool,
}

/// The mail state under the one lock.
#[derive(Debug, Default)]
pub struct Inner {
    /// The sans-IO inbox core.
    pub inboxes: Inboxes,
    /// Registered identities.
    pub peers: BTreeMap<String, Peer>,
    waiters: HashMap<WaitId, oneshot::Sender<Option<WaitOutcome>>>,
    next_wait: WaitId,
    /// Pending PTY wake notices, by recipient: cancelled when withdrawn.
    wakes: HashMap<String, (u64, CancellationToken)>,
    next_wake: u64,
    /// Urgent notices written and not yet observed, as (sender, recipient): one covers further
    /// urgent mail from that sender until the recipient reads its inbox.
    pub urgent: HashSet<(String, String)>,
    /// Launch receipts of managed PTYs, by identity.
    pub receipts: HashMap<String, receipt::Receipt>,
}

/// Something to do after the lock is released.
#[derive(Debug)]
pub enum Action {
    /// Start the wake-notice task for this recipient.
    Wake {
        /// Whose PTY.
        recipient: String,
        /// Which wake this is (a later one supersedes it).
        generation: u64,
        /// Cancelled when the notice is withdrawn.
        cancel: CancellationToken,
    },
}

/// What mail tells the client layer above it (the MCP endpoint: its live streams and the task
/// handles of spawned children). Mail defines this and never imports that layer; the
/// composition root (`state.rs`) installs the implementation.
pub trait Clients: Send + Sync + std::fmt::Debug {
    /// Pushes `note` (a JSON-RPC notification) onto the live stream of a client bound to
    /// `identity`; whether one took it.
    fn push(&self, identity: &str, note: &serde_json::Value) -> bool;
    /// Opens the task handle of a spawned child, owned by these protocol sessions; returns
    /// its id and the poll interval (ms) a caller is told.
    fn open_task(&self, owners: Vec<String>) -> (String, u64);
    /// The child behind a task handle exited.
    fn finish_task(&self, task_id: &str, session_id: &str, exit_code: Option<i32>);
    /// Sends `notifications/resources/updated` for `tuic://inbox` to the live streams of
    /// `identity`'s protocol sessions subscribed to it; whether one took it.
    fn inbox_updated(&self, identity: &str) -> bool;
    /// Whether a holder other than a PTY keeps `identity` addressable (an ACP chat opened by
    /// `POST /acp/chat/open`).
    fn holds_identity(&self, identity: &str) -> bool;
}

/// Agent mail of one node.
#[derive(Debug)]
pub struct Mail {
    inner: Mutex<Inner>,
    /// Wakes the timer task when a wait with a possibly earlier deadline is registered.
    pub timer: Notify,
    /// What mail uses of its node: sessions, the client layer, tasks, the uplink state, …
    pub(crate) env: MailEnv,
}

/// The result of a `send`, with how the recipient was resolved.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The message id.
    pub message_id: String,
    /// The resolved recipient identity.
    pub recipient: String,
    /// What the core did.
    pub receipt: SendReceipt,
    /// A `notifications/claude/channel` push reached the recipient's `GET /mcp` stream.
    pub channel: bool,
    /// The recipient is a declared orchestrator (`register orchestrator=true`).
    pub orchestrator: bool,
    /// A PTY wake notice was already pending when this message arrived: it joined that
    /// notice (the coalesced orchestrator wake) instead of earning its own.
    pub coalesced: bool,
    /// A terminal-less recipient subscribed to `tuic://inbox` was told of it
    /// (`delivery_path` `acp_inbox_resource`).
    pub inbox_resource: bool,
}

impl Mail {
    /// Mail over `env` (its clients, sessions, tasks and uplink state).
    pub(crate) fn new(env: MailEnv) -> Self {
        Self {
            inner: Mutex::default(),
            timer: Notify::new(),
            env,
        }
    }

    /// The client layer above mail.
    pub fn clients(&self) -> &dyn Clients {
        &*self.env.clients
    }

    /// The config in force.
    pub(crate) fn config(&self) -> Arc<crate::config::Config> {
        (self.env.config)()
    }

    /// The lock (poison-tolerant).
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drains the core's events under the lock; returns the actions to run outside it.
    pub fn drain(g: &mut Inner) -> Vec<Action> {
        let mut actions = Vec::new();
        while let Some(ev) = g.inboxes.poll_event() {
            match ev {
                InboxEvent::WaitResolved {
                    recipient,
                    wait_id,
                    outcome,
                } => {
                    let delivered = match g.waiters.remove(&wait_id) {
                        Some(tx) => tx.send(Some(outcome)),
                        None => Err(Some(outcome)),
                    };
                    if let Err(Some(lost)) = delivered {
                        // The caller went away: hand the mail back (same ids, fresh cursors)
                        // and owe its missed_count again.
                        let _ = g.inboxes.wait_undelivered(mono_ms(), &recipient, &lost);
                    }
                }
                InboxEvent::WaitAbandoned { wait_id, .. } => {
                    if let Some(tx) = g.waiters.remove(&wait_id) {
                        let _ = tx.send(None);
                    }
                }
                InboxEvent::PtyWake { recipient, .. } => {
                    let cancel = CancellationToken::new();
                    g.next_wake += 1;
                    let generation = g.next_wake;
                    if let Some((_, old)) = g
                        .wakes
                        .insert(recipient.clone(), (generation, cancel.clone()))
                    {
                        old.cancel();
                    }
                    actions.push(Action::Wake {
                        recipient,
                        generation,
                        cancel,
                    });
                }
                InboxEvent::PtyWakeWithdrawn { recipient } => {
                    if let Some((_, c)) = g.wakes.remove(&recipient) {
                        c.cancel();
                    }
                }
                InboxEvent::LeaseAssigned {
                    recipient,
                    message_id,
                    cursor,
                    owner,
                } => {
                    tracing::debug!(source = "agent_msg", %recipient, %message_id, cursor, owner = ?owner, "lease assigned");
                }
            }
        }
        actions
    }

    /// Runs drained actions (outside the lock).
    pub fn act(self: &Arc<Self>, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Wake {
                    recipient,
                    generation,
                    cancel,
                } => wake::start(self, recipient, generation, cancel),
            }
        }
    }

    /// Makes sure `tuic` has an inbox and a peer entry, attaching its live PTY if it has one.
    pub fn ensure(&self, g: &mut Inner, tuic: &str) {
        if !g.inboxes.is_registered(tuic) {
            g.inboxes.register(tuic);
        }
        let pty = self
            .env
            .sessions
            .live(tuic)
            .filter(|s| s.tuic_session == tuic);
        let entry = g.peers.entry(tuic.to_owned()).or_default();
        if let Some(s) = pty {
            if entry.name.is_none() {
                entry.name = s.display_name();
            }
            let _ = g.inboxes.attach_pty(tuic);
        }
    }

    /// Delivers one message (the recipient must be registered) and runs its actions.
    pub fn post(
        self: &Arc<Self>,
        recipient: &str,
        from: &str,
        from_name: Option<String>,
        message: String,
        kind: Option<String>,
        lifecycle: Option<tuic_proto::mail::Lifecycle>,
    ) -> Result<Sent, InboxError> {
        let message_id = match &lifecycle {
            Some(_) => format!("tuic-auto-{}", uuid::Uuid::new_v4()),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let server_authored = lifecycle.is_some();
        let body = message.clone();
        let (receipt, orchestrator, coalesced, actions) = {
            let mut g = self.lock();
            let coalesced = g.inboxes.wake_pending(recipient);
            // Deadlines and cursors on the deadline clock, the timestamp on the wall clock.
            let r = g.inboxes.send_stamped(
                mono_ms(),
                now_ms(),
                NewMessage {
                    recipient: recipient.to_owned(),
                    message_id: message_id.clone(),
                    from: from.to_owned(),
                    from_name,
                    message,
                    kind,
                    lifecycle,
                },
            )?;
            let orch = g.peers.get(recipient).is_some_and(|p| p.orchestrator);
            (r, orch, coalesced, Self::drain(&mut g))
        };
        self.act(actions);
        self.env
            .posted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A terminal-less peer subscribed to `tuic://inbox` (an ACP chat) is told through the
        // resource; else the channel push for a client with a live stream. Neither takes the
        // lease: the inbox stays authoritative.
        let unowned = receipt.delivery == DeliveryPath::InboxOnly
            && !self.env.sessions.owns_live_pty(recipient);
        let inbox_resource = unowned && self.env.clients.inbox_updated(recipient);
        let channel = unowned && !inbox_resource && {
            let inline = server_authored || !orchestrator;
            let note = channel::notification(from, &message_id, &body, inline);
            self.env.clients.push(recipient, &note)
        };
        Ok(Sent {
            message_id,
            recipient: recipient.to_owned(),
            receipt,
            channel,
            orchestrator,
            coalesced,
            inbox_resource,
        })
    }

    /// `agent action=inbox`.
    pub fn inbox(
        self: &Arc<Self>,
        recipient: &str,
        since: Option<u64>,
        limit: Option<usize>,
    ) -> Result<InboxPage, InboxError> {
        let (page, actions) = {
            let mut g = self.lock();
            self.ensure(&mut g, recipient);
            let p = g.inboxes.inbox(mono_ms(), recipient, since, limit)?;
            g.urgent.retain(|(_, r)| r != recipient);
            (p, Self::drain(&mut g))
        };
        self.act(actions);
        Ok(page)
    }

    /// `agent action=wait`: resolves at once when fresh mail is retained, else sleeps on the
    /// inbox until mail arrives or the deadline passes. Dropping the future cancels the wait;
    /// an answer that was already resolved but not yet taken is handed back to the inbox.
    pub async fn wait(
        self: &Arc<Self>,
        recipient: &str,
        since: Option<u64>,
        timeout_ms: Option<u64>,
    ) -> Result<WaitOutcome, InboxError> {
        let (rx, id) = {
            let mut g = self.lock();
            self.ensure(&mut g, recipient);
            g.next_wait += 1;
            let id = g.next_wait;
            match g
                .inboxes
                .wait(mono_ms(), recipient, id, since, timeout_ms)?
            {
                WaitStart::Resolved(o) => {
                    g.urgent.retain(|(_, r)| r != recipient);
                    let actions = Self::drain(&mut g);
                    drop(g);
                    self.act(actions);
                    return Ok(o);
                }
                WaitStart::Pending { .. } => {
                    let (tx, rx) = oneshot::channel();
                    g.waiters.insert(id, tx);
                    (rx, id)
                }
            }
        };
        self.timer.notify_one();
        let mut guard = WaitGuard {
            mail: self.clone(),
            recipient: recipient.to_owned(),
            id,
            rx: Some(rx),
        };
        let rx = guard.rx.as_mut().expect("set above");
        let r = rx.await;
        guard.rx = None;
        match r {
            Ok(Some(o)) => {
                // `met` is "carries mail"; a timed-out answer carries none and needs no lock.
                if o.met {
                    let mut g = self.lock();
                    // Taken by its caller: a concurrent wait whose answer is lost must not
                    // hand this mail back (the recipient has it).
                    g.inboxes.wait_answered(recipient, &o);
                    g.urgent.retain(|(_, r)| r != recipient);
                }
                Ok(o)
            }
            _ => Err(InboxError::UnknownRecipient {
                recipient: recipient.to_owned(),
            }),
        }
    }

    /// `register replaces=` / identity repair: moves `old`'s mail to `new`, retires `old`.
    pub fn carry_over(&self, g: &mut Inner, old: &str, new: &str) -> usize {
        let n = g.inboxes.carry_over(mono_ms(), old, new).unwrap_or(0);
        // A retired recipient's dedupe ring goes with it (cross-host mail, `deliver`).
        recipient_retired(self, old);
        if let Some(p) = g.peers.remove(old) {
            let e = g.peers.entry(new.to_owned()).or_default();
            if e.name.is_none() {
                e.name = p.name;
            }
        }
        for (child, p) in g.peers.iter_mut() {
            if p.parent.as_deref() == Some(old) {
                p.parent = Some(new.to_owned());
                // The child's session row names its parent once that is a registered identity.
                if !new.starts_with(spawn::PENDING_PREFIX)
                    && let Some(s) = self.env.sessions.live(child)
                {
                    s.set_parent_session(Some(new.to_owned()));
                }
            }
        }
        n
    }

    /// Every retained message of a recipient, without touching cursors (tests, diagnostics).
    pub fn peek(&self, recipient: &str) -> Vec<InboxMessage> {
        self.lock().inboxes.peek(recipient)
    }
}

/// Cancels a pending wait when its future is dropped; returns an answer resolved but not
/// taken to the inbox.
struct WaitGuard {
    mail: Arc<Mail>,
    recipient: String,
    id: WaitId,
    rx: Option<oneshot::Receiver<Option<WaitOutcome>>>,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        let actions = {
            let mut g = self.mail.lock();
            g.waiters.remove(&self.id);
            g.inboxes.cancel_wait(&self.recipient, self.id);
            if let Ok(Some(lost)) = rx.try_recv() {
                let _ = g
                    .inboxes
                    .wait_undelivered(mono_ms(), &self.recipient, &lost);
            }
            Mail::drain(&mut g)
        };
        self.mail.act(actions);
    }
}

/// Starts the wait timer and the PTY-exit watcher; both end at shutdown.
pub(crate) fn spawn_background(mail: &Arc<Mail>) {
    let n = mail.clone();
    mail.env.tasks.spawn(async move {
        loop {
            let next = n.lock().inboxes.poll_timeout();
            let sleep = match next {
                Some(d) => Duration::from_millis(d.saturating_sub(mono_ms())),
                None => Duration::from_secs(3600),
            };
            tokio::select! {
                _ = n.env.shutdown.cancelled() => break,
                _ = n.timer.notified() => continue,
                _ = tokio::time::sleep(sleep) => {}
            }
            let actions = {
                let mut g = n.lock();
                g.inboxes.handle_timeout(mono_ms());
                Mail::drain(&mut g)
            };
            n.act(actions);
        }
    });
    // A PTY that exits re-queues the unread mail it owned (same ids, fresh cursors).
    let n = mail.clone();
    mail.env.tasks.spawn(async move {
        let mut rx = n.env.bus.subscribe();
        loop {
            let ev = tokio::select! {
                _ = n.env.shutdown.cancelled() => break,
                ev = rx.recv() => ev,
            };
            let Ok(ev) = ev else {
                if matches!(ev, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                    break;
                }
                continue;
            };
            if let Event::PtyExit { session_id, .. } = &ev.event
                && let Some(s) = n.env.sessions.resolve(session_id)
            {
                pty_gone(&n, &s.tuic_session);
            }
        }
    });
}

/// The recipient's PTY is gone: re-queue what it owned and drop its pending wake.
pub(crate) fn pty_gone(mail: &Arc<Mail>, tuic: &str) {
    let actions = {
        let mut g = mail.lock();
        if !g.inboxes.is_registered(tuic) {
            return;
        }
        let _ = g.inboxes.detach_pty(mono_ms(), tuic);
        if let Some((_, c)) = g.wakes.remove(tuic) {
            c.cancel();
        }
        Mail::drain(&mut g)
    };
    mail.act(actions);
}

/// The wake task for `recipient` finished (notice written or given up).
pub(crate) fn wake_done(mail: &Mail, recipient: &str, generation: u64) {
    let mut g = mail.lock();
    if g.wakes
        .get(recipient)
        .is_some_and(|(n, _)| *n == generation)
    {
        g.wakes.remove(recipient);
        g.inboxes.pty_wake_done(recipient);
    }
}

/// A lifecycle summary was typed: it acknowledges its own window; mail that coalesced while it
/// was typed is outside the window and earns its own notice.
pub(crate) fn summary_done(mail: &Arc<Mail>, recipient: &str, generation: u64, up_to: u64) {
    let actions = {
        let mut g = mail.lock();
        let _ = g.inboxes.acknowledge(recipient, up_to);
        if g.wakes
            .get(recipient)
            .is_some_and(|(n, _)| *n == generation)
        {
            g.wakes.remove(recipient);
            g.inboxes.pty_wake_done(recipient);
        }
        g.inboxes.rearm_pty_wake(recipient);
        Mail::drain(&mut g)
    };
    mail.act(actions);
}

/// Whether `tuic` is still addressable although its protocol sessions are gone: it owns a
/// live PTY, or a live managed child records it as its parent. Both are bounded by live
/// sessions, so retention cannot grow without bound. The MCP reaper asks this through the
/// liveness answer the composition root installs.
pub(crate) fn peer_identity_is_addressable(mail: &Mail, tuic: &str) -> bool {
    if mail.env.sessions.owns_live_pty(tuic) || mail.env.clients.holds_identity(tuic) {
        return true;
    }
    let children: Vec<String> = mail
        .lock()
        .peers
        .iter()
        .filter(|(_, p)| p.parent.as_deref() == Some(tuic))
        .map(|(k, _)| k.clone())
        .collect();
    children.iter().any(|c| mail.env.sessions.owns_live_pty(c))
}

/// Registers a terminal-less peer (an ACP chat, `POST /acp/chat/open`): an inbox and a peer
/// entry named `name` working in `path`, and no PTY. Its mail is read through `tuic://inbox`.
pub(crate) fn register_terminal_less(mail: &Mail, identity: &str, name: &str, path: &str) {
    let mut g = mail.lock();
    mail.ensure(&mut g, identity);
    let p = g.peers.entry(identity.to_owned()).or_default();
    p.name.get_or_insert_with(|| name.to_owned());
    p.path.get_or_insert_with(|| path.to_owned());
    tracing::info!(source = "agent_msg", %identity, "registered a terminal-less ACP peer");
}

/// Retires a terminal-less peer whose ACP chat was deleted: unless it is still addressable
/// (as [`peer_identity_is_addressable`] says), its peer entry and inbox go, pending waits end
/// and mail to it is refused from now on.
pub(crate) fn retire_terminal_less(mail: &Arc<Mail>, identity: &str) {
    retire(
        mail,
        &[identity.to_owned()],
        "retired a peer whose ACP chat was deleted",
    );
}

/// A protocol session ended (reaped or deleted) before registering: its pending-parent inbox
/// goes, and its children keep no parent.
pub(crate) fn forget_pending(mail: &Arc<Mail>, sessions: &[String]) {
    let actions = {
        let mut g = mail.lock();
        for sid in sessions {
            let pending = spawn::pending_parent(sid);
            if !g.inboxes.is_registered(&pending) {
                continue;
            }
            g.inboxes.unregister(&pending);
            for p in g.peers.values_mut() {
                if p.parent.as_deref() == Some(pending.as_str()) {
                    p.parent = None;
                }
            }
        }
        Mail::drain(&mut g)
    };
    mail.act(actions);
}

/// Retires the peers of identities whose last protocol session was reaped or deleted, unless
/// they are still addressable: their inbox goes (pending waits end), they leave `list_peers`,
/// and mail to them is refused from now on.
pub(crate) fn evict_peers_for_reaped_mcp_session(mail: &Arc<Mail>, identities: &[String]) {
    retire(
        mail,
        identities,
        "retired a peer whose protocol session ended",
    );
}

/// Retires `identities` that are no longer addressable (logging `why`).
fn retire(mail: &Arc<Mail>, identities: &[String], why: &'static str) {
    let gone: Vec<&String> = identities
        .iter()
        .filter(|t| !peer_identity_is_addressable(mail, t))
        .collect();
    if gone.is_empty() {
        return;
    }
    let actions = {
        let mut g = mail.lock();
        for t in &gone {
            g.peers.remove(*t);
            let dropped = g.inboxes.unregister(t);
            if let Some((_, c)) = g.wakes.remove(*t) {
                c.cancel();
            }
            g.urgent.retain(|(s, r)| s != *t && r != *t);
            tracing::info!(source = "agent_msg", identity = %t, dropped_messages = dropped.len(), "{why}");
        }
        Mail::drain(&mut g)
    };
    mail.act(actions);
}
