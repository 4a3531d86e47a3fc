//! The per-recipient inbox: retention, cursors, waits and the delivery lease.
//!
//! One [`Inboxes`] value holds every registered recipient's mail on a node. It decides:
//!
//! - **Retention**: at most [`INBOX_CAPACITY`] messages per recipient, oldest evicted first;
//!   evictions of unread mail are counted and reported once as `missed_count`.
//! - **Lifecycle replacement**: a server-authored lifecycle notice replaces the older notice of
//!   the same child and kind (never an `awaiting_input` one: every question stays readable).
//! - **Cursors**: each message gets a logical unix-millisecond cursor, strictly increasing per
//!   recipient, so a burst within one clock millisecond still pages correctly. The server-side
//!   read cursor moves forward only; `since = 0` replays without rewinding it.
//! - **The delivery lease**: every message is assigned to at most one wake owner, either an
//!   active waiter or the recipient's PTY, at the moment it arrives. A waiter is resolved in the
//!   same step that assigns it mail, so there is no window in which a message is owned by a
//!   waiter that then times out.
//! - **Re-queue**: when a PTY disappears, its unread owned mail moves to the end of the inbox with
//!   a fresh cursor and the same `message_id`.
//! - **Holding forwarded mail**: [`Inboxes::should_hold`] tells the peer link when mail from
//!   another host would evict unread mail of a recipient that is still reading; that mail
//!   waits at the previous hop instead (local mail always follows the spec's FIFO eviction).
//!
//! Time: every `now` is the caller's deadline clock, in unix milliseconds (wait deadlines, the
//! reading window of `should_hold`, cursors); only a message's `timestamp_ms` may come from a
//! separate wall-clock reading ([`Inboxes::send_stamped`]), so a node can keep its deadlines
//! on a monotonic clock while people still read wall-clock times.
//!
//! It deliberately does not write to terminals, apply the composer-safety gate, run the wake
//! budget or log: it emits [`InboxEvent`]s and the node acts on them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

/// Messages retained per recipient (spec "Limits").
pub const INBOX_CAPACITY: usize = 100;
/// How long after its last `inbox` or `wait` call a recipient still counts as reading, for
/// [`Inboxes::should_hold`].
pub const READER_ACTIVE_MS: u64 = 30_000;
/// Largest accepted message body in bytes (spec "Limits": 64 KB).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// The wait timing rules are the shared MCP contract (one source for node and bridge).
pub use crate::mcp::{WAIT_CAP_MS, WAIT_CLAMPED_MS, WAIT_DEFAULT_MS};
/// The `awaiting_input` lifecycle state, exempt from replacement.
const AWAITING_INPUT: &str = "awaiting_input";

/// Identifies one `agent action=wait` call; chosen by the caller and unique while pending.
pub type WaitId = u64;

/// One inbox entry as MCP returns it (`inbox` and `wait`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxMessage {
    /// Stable id; kept across re-queues and hops, recipients dedupe on it.
    pub message_id: String,
    /// The sender's validated identity (a `tuic_session` or a federation address).
    pub from: String,
    /// The sender's display name, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_name: Option<String>,
    /// The body.
    pub message: String,
    /// Wall-clock unix milliseconds when the message was accepted.
    pub timestamp_ms: u64,
    /// `state_change` and other server-authored kinds; absent for peer mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// Marks a server-authored lifecycle notice about one child, the key for replacement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifecycle {
    /// The child the notice is about.
    pub child: String,
    /// The state it reports (`idle`, `completed`, `exited`, `awaiting_input`, ...).
    pub state: String,
}

/// A message offered to [`Inboxes::send`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    /// Who receives it (a registered `tuic_session`).
    pub recipient: String,
    /// Its id, minted by the sending node (randomness stays outside this crate).
    pub message_id: String,
    /// The validated sender.
    pub from: String,
    /// The sender's display name.
    pub from_name: Option<String>,
    /// The body.
    pub message: String,
    /// The message kind, if server-authored.
    pub kind: Option<String>,
    /// Set for lifecycle notices, which replace their predecessor.
    pub lifecycle: Option<Lifecycle>,
}

/// Who is responsible for waking the recipient about a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeOwner {
    /// A blocking `wait` call; it was resolved with the message.
    Waiter(WaitId),
    /// The recipient's managed PTY, through the payload-free wake notice.
    Pty,
}

/// The route a send took, reported to the sender as `delivery_path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryPath {
    /// An active waiter received it.
    Waiter,
    /// The PTY owns it: a wake notice is queued or already pending.
    TerminalOrQueued,
    /// Nobody owns it; it waits in the inbox for a read.
    InboxOnly,
}

/// What a successful send did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendReceipt {
    /// The cursor the message got.
    pub cursor: u64,
    /// The wake route.
    pub delivery: DeliveryPath,
    /// The id of a lifecycle notice this one replaced.
    pub replaced: Option<String>,
    /// The id of the message evicted to make room.
    pub evicted: Option<String>,
}

/// One page of `agent action=inbox`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxPage {
    /// Oldest first, all after the effective `since`.
    pub messages: Vec<InboxMessage>,
    /// Newer unread mail remains beyond this page.
    pub has_more: bool,
    /// Pass as `since` to continue (or omit `since` to use the stored cursor).
    pub next_since: u64,
    /// Unread messages evicted since the previous inbox read.
    pub missed_count: u64,
}

/// The result of `agent action=wait`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitOutcome {
    /// New mail arrived (or was already there).
    pub met: bool,
    /// The deadline passed with nothing new.
    pub timed_out: bool,
    /// Every retained fresh message, oldest first.
    pub new_messages: Vec<InboxMessage>,
    /// The cursor to continue from; present even on timeout.
    pub next_since: u64,
    /// Unread messages evicted since the previous read (inbox or wait), omitted when none.
    /// The spec reports evictions on inbox reads only; a caller that only ever waits would
    /// never learn of them, so a wait reports them too and whichever read comes first clears
    /// the count.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub missed_count: u64,
}

/// `skip_serializing_if` for counts omitted when zero (here and in peer-link frames).
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What [`Inboxes::wait`] did at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitStart {
    /// Fresh mail was already there; the wait is over.
    Resolved(WaitOutcome),
    /// Registered; a [`InboxEvent::WaitResolved`] will follow by the deadline.
    Pending {
        /// Unix ms at which the wait times out.
        deadline: u64,
    },
}

/// Something the node must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboxEvent {
    /// A pending wait is over: answer the MCP call with `outcome`.
    WaitResolved {
        /// Whose inbox.
        recipient: String,
        /// Which wait.
        wait_id: WaitId,
        /// The answer.
        outcome: WaitOutcome,
    },
    /// A pending wait ended because its recipient was unregistered.
    WaitAbandoned {
        /// Whose inbox it was.
        recipient: String,
        /// Which wait.
        wait_id: WaitId,
    },
    /// The PTY owns unread mail and no notice is pending: write the wake notice when the
    /// composer gate allows, then call [`Inboxes::pty_wake_done`].
    PtyWake {
        /// Whose PTY.
        recipient: String,
        /// The notice covers mail up to this cursor (and later mail while it is pending).
        up_to: u64,
    },
    /// A read observed all PTY-owned mail: drop the queued notice if not yet written.
    PtyWakeWithdrawn {
        /// Whose PTY.
        recipient: String,
    },
    /// The lease assigned a message to an owner (forensics for the `agent_msg` trace line).
    LeaseAssigned {
        /// Whose inbox.
        recipient: String,
        /// Which message.
        message_id: String,
        /// The message's cursor at assignment (a re-queued message gets a new one).
        cursor: u64,
        /// The owner.
        owner: WakeOwner,
    },
}

/// Errors of inbox operations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InboxError {
    /// The recipient is not registered (never buffered under an unknown address).
    #[error("recipient '{recipient}' is not registered")]
    UnknownRecipient {
        /// The address that was asked for.
        recipient: String,
    },
    /// The body exceeds [`MAX_MESSAGE_BYTES`].
    #[error("message is {size} bytes, the limit is {max}")]
    TooLarge {
        /// The body's size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The message id is empty.
    #[error("message_id must not be empty")]
    EmptyMessageId,
    /// A wait with this id is already pending.
    #[error("wait {wait_id} is already pending")]
    DuplicateWait {
        /// The id given.
        wait_id: WaitId,
    },
}

#[derive(Debug, Clone)]
struct Entry {
    msg: InboxMessage,
    cursor: u64,
    owner: Option<WakeOwner>,
    lifecycle: Option<Lifecycle>,
    reach: Reach,
}

/// How far an entry has got towards its reader, so a lost wait answer hands back only mail
/// that no other answer carried to the recipient.
#[derive(Debug, Clone, Copy, Default)]
struct Reach {
    /// Resolved wait answers carrying it whose fate the node has not reported yet
    /// ([`Inboxes::wait_answered`] or [`Inboxes::wait_undelivered`]).
    in_flight: u32,
    /// A read carrying it reached its caller: an inbox page, a wait answered at once, or a
    /// wait answer the node confirmed.
    delivered: bool,
}

#[derive(Debug, Clone)]
struct Waiter {
    id: WaitId,
    since: u64,
    deadline: u64,
}

#[derive(Debug, Clone, Default)]
struct Recipient {
    entries: VecDeque<Entry>,
    /// Highest cursor handed out; the next one is strictly greater.
    last_cursor: u64,
    /// The stored read position (`agent_read_cursor`).
    read_cursor: u64,
    /// Unread evictions not yet reported.
    missed: u64,
    /// Pending waits in arrival order; the first one owns new mail.
    waiters: Vec<Waiter>,
    /// A managed PTY can be woken for this recipient.
    pty: bool,
    /// A wake notice was requested and not yet reported done.
    wake_pending: bool,
    /// When `inbox` or `wait` was last called, or the agent registered (unix ms).
    last_read_call: Option<u64>,
}

/// Every recipient's inbox on one node.
#[derive(Debug, Clone)]
pub struct Inboxes {
    recipients: BTreeMap<String, Recipient>,
    capacity: usize,
    events: VecDeque<InboxEvent>,
}

impl Default for Inboxes {
    fn default() -> Self {
        Self::new()
    }
}

impl Inboxes {
    /// Empty, with the spec's capacity of [`INBOX_CAPACITY`] per recipient.
    pub fn new() -> Self {
        Self::with_capacity(INBOX_CAPACITY)
    }

    /// Empty, with another per-recipient capacity (at least 1); for tests and tuning.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            recipients: BTreeMap::new(),
            capacity: capacity.max(1),
            events: VecDeque::new(),
        }
    }

    /// Gives `recipient` an inbox; idempotent.
    pub fn register(&mut self, recipient: &str) {
        self.recipients.entry(recipient.to_owned()).or_default();
    }

    /// Whether `recipient` has an inbox.
    pub fn is_registered(&self, recipient: &str) -> bool {
        self.recipients.contains_key(recipient)
    }

    /// Whether a PTY wake notice for `recipient` is queued or being written: mail sent now
    /// coalesces into it rather than earning a notice of its own.
    pub fn wake_pending(&self, recipient: &str) -> bool {
        self.recipients
            .get(recipient)
            .is_some_and(|r| r.wake_pending)
    }

    /// The recipient's agent just announced itself (`agent action=register`): it counts as
    /// reading for [`READER_ACTIVE_MS`], as if it had called `inbox`, so mail that crosses
    /// hosts between its registration and its first read waits instead of evicting.
    pub fn mark_reading(&mut self, now: u64, recipient: &str) {
        if let Some(r) = self.recipients.get_mut(recipient) {
            r.last_read_call = Some(now);
        }
    }

    /// Retained messages after the stored read cursor.
    pub fn unread(&self, recipient: &str) -> usize {
        self.recipients.get(recipient).map_or(0, |r| {
            r.entries
                .iter()
                .filter(|e| e.cursor > r.read_cursor)
                .count()
        })
    }

    /// Whether mail forwarded from another host should stay with the previous hop for now
    /// (which retries it) rather than enter this inbox: the inbox already retains `capacity`
    /// unread messages, so one more would evict unread mail, and the recipient is reading — a
    /// wait is pending or it registered or called `inbox`/`wait` within [`READER_ACTIVE_MS`]. A recipient
    /// that never read or stopped reading gets the spec's FIFO eviction (reported by
    /// `missed_count`) instead, so it cannot keep a connection's outbox full.
    pub fn should_hold(&self, now: u64, recipient: &str) -> bool {
        let Some(r) = self.recipients.get(recipient) else {
            return false;
        };
        let reading = !r.waiters.is_empty()
            || r.last_read_call
                .is_some_and(|t| now.saturating_sub(t) <= READER_ACTIVE_MS);
        reading && self.unread(recipient) >= self.capacity
    }

    /// Removes `recipient`'s inbox and returns its retained mail (for `replaces=` carry-over);
    /// its pending waits end with [`InboxEvent::WaitAbandoned`].
    pub fn unregister(&mut self, recipient: &str) -> Vec<InboxMessage> {
        let Some(r) = self.recipients.remove(recipient) else {
            return Vec::new();
        };
        for w in r.waiters {
            self.events.push_back(InboxEvent::WaitAbandoned {
                recipient: recipient.to_owned(),
                wait_id: w.id,
            });
        }
        r.entries.into_iter().map(|e| e.msg).collect()
    }

    /// Marks that `recipient` runs in a managed PTY that can receive wake notices.
    pub fn attach_pty(&mut self, recipient: &str) -> Result<(), InboxError> {
        let r = self.get_mut(recipient)?;
        r.pty = true;
        Ok(())
    }

    /// The recipient's PTY is gone: its unread PTY-owned mail is re-queued at the end of the
    /// inbox with fresh cursors and unchanged ids, and goes to a waiter if one is pending.
    /// Returns how many messages were re-queued.
    pub fn detach_pty(&mut self, now: u64, recipient: &str) -> Result<usize, InboxError> {
        let r = self.get_mut(recipient)?;
        r.pty = false;
        r.wake_pending = false;
        let read = r.read_cursor;
        let (requeue, keep): (Vec<Entry>, Vec<Entry>) = r
            .entries
            .drain(..)
            .partition(|e| e.owner == Some(WakeOwner::Pty) && e.cursor > read);
        r.entries = keep.into();
        let n = requeue.len();
        for mut e in requeue {
            e.cursor = next_cursor(r, now);
            e.owner = None;
            r.entries.push_back(e);
        }
        if n > 0 {
            self.assign_unowned(recipient);
            self.settle_pty(recipient);
        }
        Ok(n)
    }

    /// A resolved wait's answer reached its caller (the node took it from the event): its
    /// messages count as read, so a concurrent answer that is lost does not hand them back.
    pub fn wait_answered(&mut self, recipient: &str, answered: &WaitOutcome) {
        let Some(r) = self.recipients.get_mut(recipient) else {
            return;
        };
        let ids = carried_ids(answered);
        for e in r.entries.iter_mut().filter(|e| carries(&ids, e)) {
            e.reach.in_flight = e.reach.in_flight.saturating_sub(1);
            e.reach.delivered = true;
        }
    }

    /// A resolved wait's answer never reached its caller (the MCP call or stream went away):
    /// each listed message that is still retained and that no other answer carried to the
    /// recipient (none returned or confirmed, none still in flight) is handed back, re-queued
    /// at the end with a fresh cursor and its unchanged id, and assigned to the next waiter or
    /// the PTY. The recipient dedupes a replay by `message_id`. The answer's `missed_count` is
    /// owed again (the next read reports it). Returns how many were re-queued.
    pub fn wait_undelivered(
        &mut self,
        now: u64,
        recipient: &str,
        lost: &WaitOutcome,
    ) -> Result<usize, InboxError> {
        let r = self.get_mut(recipient)?;
        r.missed += lost.missed_count;
        let ids = carried_ids(lost);
        for e in r.entries.iter_mut().filter(|e| carries(&ids, e)) {
            e.reach.in_flight = e.reach.in_flight.saturating_sub(1);
        }
        let (requeue, keep): (Vec<Entry>, Vec<Entry>) = r
            .entries
            .drain(..)
            .partition(|e| carries(&ids, e) && !e.reach.delivered && e.reach.in_flight == 0);
        r.entries = keep.into();
        let n = requeue.len();
        for mut e in requeue {
            e.cursor = next_cursor(r, now);
            e.owner = None;
            r.entries.push_back(e);
        }
        if n > 0 {
            self.assign_unowned(recipient);
            self.settle_pty(recipient);
        }
        Ok(n)
    }

    /// `register replaces=<old>`: moves `old`'s retained mail to `new` (appended with fresh
    /// cursors, ids unchanged, order kept) and retires `old`. Both must be registered. Returns
    /// how many messages moved (`mail_migrated`).
    pub fn carry_over(&mut self, now: u64, old: &str, new: &str) -> Result<usize, InboxError> {
        if old == new {
            return Ok(0);
        }
        self.get_mut(new)?;
        if !self.is_registered(old) {
            return Err(InboxError::UnknownRecipient {
                recipient: old.to_owned(),
            });
        }
        let moved = self.unregister(old);
        let n = moved.len();
        let capacity = self.capacity;
        let r = self.get_mut(new)?;
        for msg in moved {
            if r.entries.len() >= capacity
                && let Some(gone) = r.entries.pop_front()
                && gone.cursor > r.read_cursor
            {
                r.missed += 1;
            }
            let cursor = next_cursor(r, now);
            r.entries.push_back(Entry {
                msg,
                cursor,
                owner: None,
                lifecycle: None,
                reach: Reach::default(),
            });
        }
        self.assign_unowned(new);
        self.settle_pty(new);
        Ok(n)
    }

    /// The unread mail the PTY owns, oldest first, with cursors: the window a wake notice
    /// covers. The node uses it to decide the lifecycle-summary exception (every entry
    /// server-authored, summary ≤ 240 characters) before writing the notice.
    pub fn pty_window(&self, recipient: &str) -> Vec<(u64, InboxMessage)> {
        let Some(r) = self.recipients.get(recipient) else {
            return Vec::new();
        };
        r.entries
            .iter()
            .filter(|e| e.owner == Some(WakeOwner::Pty) && e.cursor > r.read_cursor)
            .map(|e| (e.cursor, e.msg.clone()))
            .collect()
    }

    /// Acknowledges mail through `up_to` as observed (a lifecycle summary typed into the PTY
    /// acknowledges its own window). The stored cursor only moves forward; mail after `up_to`
    /// stays unread and keeps its owner, so it earns its own notice.
    pub fn acknowledge(&mut self, recipient: &str, up_to: u64) -> Result<(), InboxError> {
        let r = self.get_mut(recipient)?;
        r.read_cursor = r.read_cursor.max(up_to.min(r.last_cursor));
        self.settle_pty(recipient);
        Ok(())
    }

    /// The wake notice requested by [`InboxEvent::PtyWake`] was written or given up; mail that
    /// arrives from now on earns a new notice.
    pub fn pty_wake_done(&mut self, recipient: &str) {
        if let Some(r) = self.recipients.get_mut(recipient) {
            r.wake_pending = false;
        }
    }

    /// Asks again for a wake notice if the PTY still owns unread mail (a BUSY→IDLE edge re-arms).
    pub fn rearm_pty_wake(&mut self, recipient: &str) {
        let Some(r) = self.recipients.get_mut(recipient) else {
            return;
        };
        if r.pty && !r.wake_pending {
            let read = r.read_cursor;
            if let Some(up_to) = r
                .entries
                .iter()
                .filter(|e| e.owner == Some(WakeOwner::Pty) && e.cursor > read)
                .map(|e| e.cursor)
                .max()
            {
                r.wake_pending = true;
                self.events.push_back(InboxEvent::PtyWake {
                    recipient: recipient.to_owned(),
                    up_to,
                });
            }
        }
    }

    /// Buffers a message for its recipient and assigns its wake owner, stamped with `now`
    /// ([`Inboxes::send_stamped`] when the caller's `now` is not a wall clock).
    pub fn send(&mut self, now: u64, new: NewMessage) -> Result<SendReceipt, InboxError> {
        self.send_stamped(now, now, new)
    }

    /// [`Inboxes::send`] for a caller whose `now` is its deadline clock (monotonic, unix-ms
    /// based): the message's `timestamp_ms` is the separate wall-clock reading `wall_ms`, what
    /// people read; the cursor still comes from `now`, so it stays strictly increasing.
    pub fn send_stamped(
        &mut self,
        now: u64,
        wall_ms: u64,
        new: NewMessage,
    ) -> Result<SendReceipt, InboxError> {
        if new.message_id.is_empty() {
            return Err(InboxError::EmptyMessageId);
        }
        if new.message.len() > MAX_MESSAGE_BYTES {
            return Err(InboxError::TooLarge {
                size: new.message.len(),
                max: MAX_MESSAGE_BYTES,
            });
        }
        let capacity = self.capacity;
        let recipient = new.recipient.clone();
        let r = self.get_mut(&recipient)?;
        let mut replaced = None;
        if let Some(lc) = new
            .lifecycle
            .as_ref()
            .filter(|lc| lc.state != AWAITING_INPUT)
        {
            let pos = r.entries.iter().rposition(|e| {
                e.msg.kind == new.kind
                    && e.lifecycle
                        .as_ref()
                        .is_some_and(|old| old.child == lc.child && old.state != AWAITING_INPUT)
            });
            if let Some(pos) = pos {
                replaced = r.entries.remove(pos).map(|e| e.msg.message_id);
            }
        }
        let mut evicted = None;
        if replaced.is_none()
            && r.entries.len() >= capacity
            && let Some(old) = r.entries.pop_front()
        {
            if old.cursor > r.read_cursor {
                r.missed += 1;
            }
            evicted = Some(old.msg.message_id);
        }
        let cursor = next_cursor(r, now);
        r.entries.push_back(Entry {
            msg: InboxMessage {
                message_id: new.message_id,
                from: new.from,
                from_name: new.from_name,
                message: new.message,
                timestamp_ms: wall_ms,
                kind: new.kind,
            },
            cursor,
            owner: None,
            lifecycle: new.lifecycle,
            reach: Reach::default(),
        });
        let owner = self.assign_unowned(&recipient);
        let delivery = match owner {
            Some(WakeOwner::Waiter(_)) => DeliveryPath::Waiter,
            Some(WakeOwner::Pty) => DeliveryPath::TerminalOrQueued,
            None => DeliveryPath::InboxOnly,
        };
        self.settle_pty(&recipient);
        Ok(SendReceipt {
            cursor,
            delivery,
            replaced,
            evicted,
        })
    }

    /// `agent action=inbox`: the oldest messages after `since` (the stored cursor when absent),
    /// at most `limit` (clamped to 1..=100). Advances the stored cursor through the page (never
    /// backwards) and reports and clears `missed_count`.
    pub fn inbox(
        &mut self,
        now: u64,
        recipient: &str,
        since: Option<u64>,
        limit: Option<usize>,
    ) -> Result<InboxPage, InboxError> {
        let r = self.get_mut(recipient)?;
        r.last_read_call = Some(now);
        let since = since.unwrap_or(r.read_cursor);
        let limit = limit.map_or(INBOX_CAPACITY, |l| l.clamp(1, INBOX_CAPACITY));
        let mut fresh = r.entries.iter_mut().filter(|e| e.cursor > since);
        let page: Vec<&mut Entry> = fresh.by_ref().take(limit).collect();
        let has_more = fresh.next().is_some();
        let next_since = page.last().map_or(since.max(r.read_cursor), |e| e.cursor);
        let messages = page
            .into_iter()
            .map(|e| {
                e.reach.carried(Answer::Returned);
                e.msg.clone()
            })
            .collect();
        r.read_cursor = r.read_cursor.max(next_since);
        let missed_count = std::mem::take(&mut r.missed);
        self.settle_pty(recipient);
        Ok(InboxPage {
            messages,
            has_more,
            next_since,
            missed_count,
        })
    }

    /// `agent action=wait`: resolves at once when mail after `since` (the stored cursor when
    /// absent) is retained, else registers a waiter until `now + timeout` (default 60 s, a
    /// request at or above 300 s runs 295 s). A successful observation advances the stored
    /// cursor like an inbox read.
    pub fn wait(
        &mut self,
        now: u64,
        recipient: &str,
        wait_id: WaitId,
        since: Option<u64>,
        timeout_ms: Option<u64>,
    ) -> Result<WaitStart, InboxError> {
        let r = self.get_mut(recipient)?;
        if r.waiters.iter().any(|w| w.id == wait_id) {
            return Err(InboxError::DuplicateWait { wait_id });
        }
        r.last_read_call = Some(now);
        let since = since.unwrap_or(r.read_cursor);
        if r.entries.iter().any(|e| e.cursor > since) {
            // Answered at once: it reaches the caller with this return.
            let outcome = observe(r, since, Answer::Returned);
            self.settle_pty(recipient);
            return Ok(WaitStart::Resolved(outcome));
        }
        let deadline = now.saturating_add(clamp_wait(timeout_ms));
        r.waiters.push(Waiter {
            id: wait_id,
            since,
            deadline,
        });
        Ok(WaitStart::Pending { deadline })
    }

    /// Cancels a pending wait (the MCP call went away). Waits own no mail while pending, so
    /// nothing needs handing back.
    pub fn cancel_wait(&mut self, recipient: &str, wait_id: WaitId) -> bool {
        let Some(r) = self.recipients.get_mut(recipient) else {
            return false;
        };
        let before = r.waiters.len();
        r.waiters.retain(|w| w.id != wait_id);
        before != r.waiters.len()
    }

    /// Times out every wait whose deadline is at or before `now`, with a final check of the
    /// inbox in the same step.
    pub fn handle_timeout(&mut self, now: u64) {
        let names: Vec<String> = self
            .recipients
            .iter()
            .filter(|(_, r)| r.waiters.iter().any(|w| w.deadline <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            let Some(r) = self.recipients.get_mut(&name) else {
                continue;
            };
            let (due, keep): (Vec<Waiter>, Vec<Waiter>) =
                r.waiters.drain(..).partition(|w| w.deadline <= now);
            r.waiters = keep;
            for w in due {
                let outcome = if r.entries.iter().any(|e| e.cursor > w.since) {
                    observe(r, w.since, Answer::Pending)
                } else {
                    WaitOutcome {
                        met: false,
                        timed_out: true,
                        new_messages: Vec::new(),
                        next_since: w.since.max(r.read_cursor),
                        missed_count: std::mem::take(&mut r.missed),
                    }
                };
                self.events.push_back(InboxEvent::WaitResolved {
                    recipient: name.clone(),
                    wait_id: w.id,
                    outcome,
                });
            }
            self.settle_pty(&name);
        }
    }

    /// The earliest pending wait deadline, when [`Inboxes::handle_timeout`] must next run.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.recipients
            .values()
            .flat_map(|r| r.waiters.iter().map(|w| w.deadline))
            .min()
    }

    /// The next thing for the node to do.
    pub fn poll_event(&mut self) -> Option<InboxEvent> {
        self.events.pop_front()
    }

    /// Every retained message of `recipient`, oldest first, without touching any cursor.
    pub fn peek(&self, recipient: &str) -> Vec<InboxMessage> {
        self.recipients
            .get(recipient)
            .map(|r| r.entries.iter().map(|e| e.msg.clone()).collect())
            .unwrap_or_default()
    }

    /// The wake owner currently holding a retained message, if any.
    pub fn owner_of(&self, recipient: &str, message_id: &str) -> Option<WakeOwner> {
        self.recipients
            .get(recipient)?
            .entries
            .iter()
            .find(|e| e.msg.message_id == message_id)?
            .owner
    }

    fn get_mut(&mut self, recipient: &str) -> Result<&mut Recipient, InboxError> {
        self.recipients
            .get_mut(recipient)
            .ok_or_else(|| InboxError::UnknownRecipient {
                recipient: recipient.to_owned(),
            })
    }

    /// Assigns unread, unowned mail to the first waiter (resolving every waiter it satisfies)
    /// or to the PTY. Returns the owner of the newest message.
    fn assign_unowned(&mut self, recipient: &str) -> Option<WakeOwner> {
        let r = self.recipients.get_mut(recipient)?;
        let read = r.read_cursor;
        let mut newest_owner = None;
        let mut newest = None;
        let mut pty_up_to = None;
        for e in r.entries.iter_mut() {
            if e.owner.is_some() || e.cursor <= read {
                continue;
            }
            let owner = match r.waiters.iter().find(|w| w.since < e.cursor) {
                Some(w) => WakeOwner::Waiter(w.id),
                None if r.pty => WakeOwner::Pty,
                None => continue,
            };
            e.owner = Some(owner);
            newest_owner = Some(owner);
            newest = Some(e.cursor);
            if owner == WakeOwner::Pty {
                pty_up_to = Some(e.cursor);
            }
            self.events.push_back(InboxEvent::LeaseAssigned {
                recipient: recipient.to_owned(),
                message_id: e.msg.message_id.clone(),
                cursor: e.cursor,
                owner,
            });
        }
        if let Some(newest) = newest {
            let (met, keep): (Vec<Waiter>, Vec<Waiter>) =
                r.waiters.drain(..).partition(|w| w.since < newest);
            r.waiters = keep;
            for w in met {
                let outcome = observe(r, w.since, Answer::Pending);
                self.events.push_back(InboxEvent::WaitResolved {
                    recipient: recipient.to_owned(),
                    wait_id: w.id,
                    outcome,
                });
            }
        }
        if let Some(up_to) = pty_up_to
            && !r.wake_pending
        {
            r.wake_pending = true;
            self.events.push_back(InboxEvent::PtyWake {
                recipient: recipient.to_owned(),
                up_to,
            });
        }
        newest_owner
    }

    /// Read mail settles its claim; when no PTY-owned unread mail is left, a pending notice is
    /// withdrawn.
    fn settle_pty(&mut self, recipient: &str) {
        let Some(r) = self.recipients.get_mut(recipient) else {
            return;
        };
        let read = r.read_cursor;
        for e in r.entries.iter_mut() {
            if e.cursor <= read {
                e.owner = None;
            }
        }
        let outstanding = r
            .entries
            .iter()
            .any(|e| e.owner == Some(WakeOwner::Pty) && e.cursor > read);
        if r.wake_pending && !outstanding {
            r.wake_pending = false;
            self.events.push_back(InboxEvent::PtyWakeWithdrawn {
                recipient: recipient.to_owned(),
            });
        }
    }
}

/// A strictly increasing logical unix-ms cursor: the clock when it moved on, else last + 1.
fn next_cursor(r: &mut Recipient, now: u64) -> u64 {
    r.last_cursor = now.max(r.last_cursor + 1);
    r.last_cursor
}

fn clamp_wait(timeout_ms: Option<u64>) -> u64 {
    crate::mcp::wait_ms(timeout_ms)
}

/// The ids a wait answer carried, looked up once per retained entry.
fn carried_ids(answer: &WaitOutcome) -> BTreeSet<&str> {
    answer
        .new_messages
        .iter()
        .map(|m| m.message_id.as_str())
        .collect()
}

/// Whether an answer with these ids carried this entry.
fn carries(ids: &BTreeSet<&str>, e: &Entry) -> bool {
    ids.contains(e.msg.message_id.as_str())
}

/// Whether a read answer is in its caller's hands when it is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Returned by the call itself (an inbox page, a wait answered at once).
    Returned,
    /// Handed to the node in an event; it reports the fate later.
    Pending,
}

impl Reach {
    fn carried(&mut self, answer: Answer) {
        match answer {
            Answer::Returned => self.delivered = true,
            Answer::Pending => self.in_flight += 1,
        }
    }
}

/// A successful wait observation: every fresh message after `since`, acknowledging the cursor.
fn observe(r: &mut Recipient, since: u64, answer: Answer) -> WaitOutcome {
    let mut new_messages = Vec::new();
    for e in r.entries.iter_mut().filter(|e| e.cursor > since) {
        e.reach.carried(answer);
        new_messages.push(e.msg.clone());
    }
    let next_since = r
        .entries
        .iter()
        .filter(|e| e.cursor > since)
        .map(|e| e.cursor)
        .max()
        .unwrap_or(since.max(r.read_cursor));
    r.read_cursor = r.read_cursor.max(next_since);
    WaitOutcome {
        met: !new_messages.is_empty(),
        timed_out: false,
        new_messages,
        next_since,
        missed_count: std::mem::take(&mut r.missed),
    }
}
