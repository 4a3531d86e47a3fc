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
//!
//! The parts: `wait.rs` (blocking waits, their answers and the fate of an answer),
//! `lease.rs` (the wake owner of each message) and `wake.rs` (the PTY: its wake notice,
//! re-queue when it goes, acknowledgement). This file holds the inbox, its messages, events
//! and retention.

mod lease;
mod wait;
mod wake;

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

pub use lease::{DeliveryPath, WakeOwner};
pub(crate) use wait::is_zero;
use wait::{Answer, Reach};
pub use wait::{WaitId, WaitOutcome, WaitStart};

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

    fn get_mut(&mut self, recipient: &str) -> Result<&mut Recipient, InboxError> {
        self.recipients
            .get_mut(recipient)
            .ok_or_else(|| InboxError::UnknownRecipient {
                recipient: recipient.to_owned(),
            })
    }
}

/// A strictly increasing logical unix-ms cursor: the clock when it moved on, else last + 1.
fn next_cursor(r: &mut Recipient, now: u64) -> u64 {
    r.last_cursor = now.max(r.last_cursor + 1);
    r.last_cursor
}
