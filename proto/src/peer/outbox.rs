//! The bounded per-connection outbox of cross-host mail.
//!
//! A message stays here from the moment the sender is told "accepted" until the next hop
//! acknowledges it (or refuses it). Bounds, per connection: [`MAX_OUTBOX_MESSAGES`] messages and
//! [`MAX_OUTBOX_BYTES`] bytes; a push beyond either is refused with an error naming the
//! connection. Dispatch keeps at most [`MAX_IN_FLIGHT_PER_RECIPIENT`] messages per recipient
//! between the oldest unacknowledged one and the newest sent, so a resend always lands inside
//! the destination's 100-id dedupe horizon (as far as this outbox's traffic is concerned).
//!
//! A `recipient_full` answer is not a refusal: the message stays, nothing more goes to that
//! recipient until the owner calls [`Outbox::resume_held`] (both ends do on their 500 ms
//! housekeeping tick). Then one message probes — the oldest held, same id — and only its
//! acknowledgement reopens the recipient's whole window; a probe answered `recipient_full`
//! again holds the recipient for another tick. So a recipient that stays full costs one frame
//! per tick, not a window's worth.
//!
//! Persistence is per message: every held message has a sequence number, and each change
//! records an [`OutboxChange`] (a message's record written, or removed) that the owner takes
//! with [`Outbox::take_changes`] and commits, so a change costs one message's record however
//! full the outbox is. [`Outbox::from_records`] rebuilds an outbox from those records; a
//! reloaded outbox has nothing in flight and resends everything it holds, in order, with the
//! same `message_id`s. (The whole outbox also serializes with serde, for the simulator and for
//! reading records stored by earlier versions.) It does not talk to the link itself: the owner moves messages from
//! [`Outbox::poll_dispatch`] to `PeerLink::request` and feeds acknowledgements back.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::frame::{AckOutcome, ErrorCode, Receipt, ReceiptOutcome, WireMessage};

/// Messages per connection's outbox (API "Federation").
pub const MAX_OUTBOX_MESSAGES: usize = 1_000;
/// Bytes per connection's outbox (API "Federation": 16 MiB).
pub const MAX_OUTBOX_BYTES: u64 = 16 * 1024 * 1024;
/// Unacknowledged messages per recipient (API: 64, inside the 100-id dedupe horizon).
pub const MAX_IN_FLIGHT_PER_RECIPIENT: u64 = 64;

/// An outbox's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxLimits {
    /// Most messages held.
    pub max_messages: usize,
    /// Most bytes held (sum of [`WireMessage::weight`]).
    pub max_bytes: u64,
    /// Dispatch window per recipient.
    pub max_in_flight_per_recipient: u64,
}

impl Default for OutboxLimits {
    fn default() -> Self {
        Self {
            max_messages: MAX_OUTBOX_MESSAGES,
            max_bytes: MAX_OUTBOX_BYTES,
            max_in_flight_per_recipient: MAX_IN_FLIGHT_PER_RECIPIENT,
        }
    }
}

/// What the original sender learns about a message (DESIGN "A cross-host message").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SenderOutcome {
    /// The next hop relays it and holds it in its own outbox.
    Accepted,
    /// The destination node has it in the recipient's inbox (or already had it).
    Delivered,
    /// The far side refused it; it is gone from this outbox.
    Refused {
        /// Why.
        code: ErrorCode,
        /// The connection that refused.
        connection: String,
        /// Detail.
        message: String,
    },
    /// It was on the wire when the link dropped: it may or may not have arrived. It stays in
    /// the outbox and is resent with the same `message_id`, never as new mail.
    Uncertain {
        /// The connection that dropped.
        connection: String,
    },
    /// A resend was refused, but an earlier attempt may already have arrived, so this is not
    /// a refusal the sender can rely on: the outcome stays uncertain and the message leaves the
    /// outbox (it is never retried as new mail).
    RefusedOnRetry {
        /// Why the resend was refused.
        code: ErrorCode,
        /// The connection that refused.
        connection: String,
        /// Detail.
        message: String,
    },
}

impl SenderOutcome {
    /// The outcome a delivery receipt reports to the original sender.
    pub fn from_receipt(r: &Receipt) -> Self {
        match r.outcome {
            ReceiptOutcome::Delivered => SenderOutcome::Delivered,
            ReceiptOutcome::Refused => SenderOutcome::Refused {
                code: r.code.unwrap_or(ErrorCode::Internal),
                connection: r.connection.clone(),
                message: r.message.clone().unwrap_or_default(),
            },
        }
    }
}

impl OutboxEvent {
    /// For a relay (the hub): the receipt to send to the original sender's node when this
    /// outcome is final, with the connection it goes to. `from` must be the stamped
    /// `<connection>/<peer>` and this outbox the destination's.
    pub fn receipt(&self, destination: &str) -> Option<(String, Receipt)> {
        let (origin, peer) = self.from.split_once('/')?;
        let (outcome, code, message) = match &self.outcome {
            SenderOutcome::Delivered => (ReceiptOutcome::Delivered, None, None),
            SenderOutcome::Refused { code, message, .. } => {
                (ReceiptOutcome::Refused, Some(*code), Some(message.clone()))
            }
            SenderOutcome::Accepted
            | SenderOutcome::Uncertain { .. }
            | SenderOutcome::RefusedOnRetry { .. } => return None,
        };
        Some((
            origin.to_owned(),
            Receipt {
                message_id: self.message_id.clone(),
                from: peer.to_owned(),
                to: format!("{destination}/{}", self.to),
                outcome,
                connection: destination.to_owned(),
                code,
                message,
            },
        ))
    }
}

/// An outcome for one message, for the node to report to its sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEvent {
    /// The message.
    pub message_id: String,
    /// Its sender.
    pub from: String,
    /// Its destination.
    pub to: String,
    /// What happened.
    pub outcome: SenderOutcome,
}

/// What a push did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Newly held.
    Accepted,
    /// A message with this id is already held (a lifecycle notice re-posted, a relay resend);
    /// nothing changed.
    AlreadyHeld,
}

/// Errors of [`Outbox::push`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboxError {
    /// The outbox holds its maximum count or bytes; the send is refused.
    #[error("outbox for connection '{connection}' is full ({count} messages, {bytes} bytes held)")]
    Full {
        /// The connection whose outbox is full.
        connection: String,
        /// Messages held.
        count: usize,
        /// Bytes held.
        bytes: u64,
    },
    /// A single message larger than the whole byte bound.
    #[error("message is {bytes} bytes, over the outbox bound of connection '{connection}'")]
    TooLarge {
        /// The connection.
        connection: String,
        /// The message's weight.
        bytes: u64,
    },
    /// The message id is empty.
    #[error("message_id must not be empty")]
    EmptyMessageId,
}

/// One change to an outbox's stored records, keyed by the message's sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboxChange {
    /// Write (or overwrite) the record of message `seq`.
    Put {
        /// The message's sequence number in this outbox.
        seq: u64,
        /// The record (JSON), as [`Outbox::from_records`] reads it.
        record: Vec<u8>,
    },
    /// Remove the record of message `seq`.
    Remove {
        /// The message's sequence number in this outbox.
        seq: u64,
    },
}

impl OutboxChange {
    /// The sequence number the change is about.
    pub fn seq(&self) -> u64 {
        match self {
            Self::Put { seq, .. } | Self::Remove { seq } => *seq,
        }
    }
}

/// The record of one held message.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Held {
    /// Order of arrival in this outbox (the record's key).
    #[serde(default)]
    seq: u64,
    message: WireMessage,
    /// Position in the recipient's dispatch sequence; not persisted, so a reloaded outbox starts
    /// a fresh window.
    #[serde(skip)]
    dispatch_no: Option<u64>,
    /// On the wire right now, awaiting an answer.
    #[serde(skip)]
    in_flight: bool,
    /// Times put on the wire, persisted: a message dispatched before a crash may have arrived,
    /// so a refusal of a later attempt is not authoritative.
    #[serde(default)]
    attempts: u32,
    /// A change about it was taken by the owner, so its record may be stored (or being
    /// stored): its removal must be written. While false, nothing of it left the journal and
    /// a removal just drops its pending record.
    #[serde(skip)]
    recorded: bool,
}

/// One connection's outbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outbox {
    connection_id: String,
    limits: OutboxLimits,
    held: VecDeque<Held>,
    bytes: u64,
    /// The next message's sequence number.
    #[serde(default)]
    next_seq: u64,
    /// Changes not yet taken by [`Outbox::take_changes`].
    #[serde(skip)]
    journal: Vec<OutboxChange>,
    /// Next dispatch number per recipient.
    #[serde(skip)]
    next_no: BTreeMap<String, u64>,
    /// Recipients that answered `recipient_full`: nothing goes to them until
    /// [`Outbox::resume_held`].
    #[serde(skip)]
    held_for: BTreeSet<String>,
    /// Recipients resumed after a hold: one message at a time until one is acknowledged.
    #[serde(skip)]
    probing: BTreeSet<String>,
    /// `recipient_full` answers since this outbox was loaded.
    #[serde(skip)]
    full_answers: u64,
    #[serde(skip)]
    events: VecDeque<OutboxEvent>,
    /// With an owner that commits after the fact ([`Outbox::set_durable`]): messages with a
    /// sequence number from here on are not committed yet and are not dispatched. `None`: no
    /// gate (an owner that commits every change before anything else happens).
    #[serde(skip)]
    durable_upto: Option<u64>,
    /// Early dispatch ([`Outbox::set_early_dispatch`]): mail may leave before its record is
    /// committed, because whoever handed it over waits for this hop's commit before hearing
    /// that it is held.
    #[serde(skip)]
    early: bool,
}

/// What [`Outbox::withdraw`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawn {
    /// It was held and never put on the wire: it is gone, nothing was sent.
    Withdrawn,
    /// It was put on the wire already (it may arrive): it stays held and is resent until a
    /// hop answers.
    OnItsWay,
    /// It is not held (answered, or never pushed).
    NotHeld,
}

impl Outbox {
    /// An empty outbox with the spec's bounds.
    pub fn new(connection_id: &str) -> Self {
        Self::with_limits(connection_id, OutboxLimits::default())
    }

    /// An empty outbox with other bounds (tests, tuning).
    pub fn with_limits(connection_id: &str, limits: OutboxLimits) -> Self {
        Self {
            connection_id: connection_id.to_owned(),
            limits,
            held: VecDeque::new(),
            bytes: 0,
            next_seq: 0,
            journal: Vec::new(),
            next_no: BTreeMap::new(),
            held_for: BTreeSet::new(),
            probing: BTreeSet::new(),
            full_answers: 0,
            events: VecDeque::new(),
            durable_upto: None,
            early: false,
        }
    }

    /// The connection this outbox feeds.
    pub fn connection_id(&self) -> &str {
        &self.connection_id
    }

    /// Messages held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The bounds.
    pub fn limits(&self) -> OutboxLimits {
        self.limits
    }

    /// The sequence number the next pushed message gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Declares every message with a sequence number below `upto` committed, and turns on the
    /// commit gate: [`Outbox::poll_dispatch`] hands out no fresh message that is not, so mail
    /// never leaves before the hop that took custody of it could survive a crash. An owner that
    /// commits in groups after the fact calls this after each successful commit with the
    /// [`Outbox::next_seq`] it read when it took the changes (and once at load with the
    /// current one). Never moves back. A gated outbox records a message's first attempt in
    /// the record its push writes (it cannot leave before that record is committed), so the
    /// dispatch writes nothing and one commit per message is enough.
    pub fn set_durable(&mut self, upto: u64) {
        self.durable_upto = Some(self.durable_upto.map_or(upto, |d| d.max(upto)));
    }

    /// Turns on early dispatch, for an owner that commits in groups after the fact but only
    /// tells the previous hop (or the caller) that a message is held once that message's
    /// record is committed: [`Outbox::poll_dispatch`] then hands out fresh mail at once, so a
    /// message travels on while its custody commit runs instead of after it. Safe because
    /// nobody forgets the message before this hop's commit: a crash before it leaves the
    /// previous hop holding the message (it resends, the destination's dedupe ring answers
    /// `duplicate`), or the caller without an answer. As with the gate, the push's record
    /// counts the first attempt, so a dispatch writes nothing. Overrides [`Outbox::set_durable`]'s
    /// gate (the watermark is still kept).
    pub fn set_early_dispatch(&mut self) {
        self.early = true;
    }

    /// Takes back a message whose custody could not be committed: removed (no event, nothing
    /// to write beyond its pending record) when it was never put on the wire; kept when it was
    /// (it may arrive, so it is resent until a hop answers, like any uncertain mail).
    pub fn withdraw(&mut self, message_id: &str) -> Withdrawn {
        let Some(h) = self
            .held
            .iter()
            .find(|h| h.message.message_id == message_id)
        else {
            return Withdrawn::NotHeld;
        };
        if h.dispatch_no.is_some() || h.in_flight {
            return Withdrawn::OnItsWay;
        }
        self.remove(message_id);
        Withdrawn::Withdrawn
    }

    /// Whether a message with this id is held.
    pub fn contains(&self, message_id: &str) -> bool {
        self.held.iter().any(|h| h.message.message_id == message_id)
    }

    /// Messages on the wire awaiting an answer.
    pub fn in_flight(&self) -> usize {
        self.held.iter().filter(|h| h.in_flight).count()
    }

    /// Messages to `to` on the wire awaiting an answer.
    pub fn in_flight_to(&self, to: &str) -> usize {
        self.held
            .iter()
            .filter(|h| h.in_flight && h.message.to == to)
            .count()
    }

    /// Takes custody of a message, or refuses it when a bound would be passed.
    pub fn push(&mut self, message: WireMessage) -> Result<Pushed, OutboxError> {
        if message.message_id.is_empty() {
            return Err(OutboxError::EmptyMessageId);
        }
        if self.contains(&message.message_id) {
            return Ok(Pushed::AlreadyHeld);
        }
        let weight = message.weight();
        if weight > self.limits.max_bytes {
            return Err(OutboxError::TooLarge {
                connection: self.connection_id.clone(),
                bytes: weight,
            });
        }
        if self.held.len() >= self.limits.max_messages
            || self.bytes + weight > self.limits.max_bytes
        {
            return Err(OutboxError::Full {
                connection: self.connection_id.clone(),
                count: self.held.len(),
                bytes: self.bytes,
            });
        }
        self.bytes += weight;
        let h = Held {
            seq: self.next_seq,
            message,
            dispatch_no: None,
            in_flight: false,
            attempts: 0,
            recorded: false,
        };
        self.next_seq += 1;
        if self.durable_upto.is_some() || self.early {
            // Gated or early: the record is committed after the fact, so it says the message
            // was attempted (a crash before the send then makes a later refusal
            // `RefusedOnRetry`, the safe side) and the first dispatch writes nothing more.
            self.journal.push(put(&Held {
                attempts: 1,
                ..h.clone()
            }));
        } else {
            self.journal.push(put(&h));
        }
        self.held.push_back(h);
        Ok(Pushed::Accepted)
    }

    /// The next message to put on the wire (call only while the link is up): a resend of an
    /// earlier dispatch first, else the oldest fresh message whose recipient's window has room.
    /// The message is marked in flight.
    pub fn poll_dispatch(&mut self) -> Option<WireMessage> {
        let mut oldest_open: BTreeMap<&str, u64> = BTreeMap::new();
        // Recipients with something on the wire, gathered in the same pass (a probing
        // recipient gets one message at a time).
        let mut on_wire: BTreeSet<&str> = BTreeSet::new();
        for h in &self.held {
            if let Some(no) = h.dispatch_no {
                let e = oldest_open.entry(h.message.to.as_str()).or_insert(no);
                *e = (*e).min(no);
            }
            if h.in_flight {
                on_wire.insert(h.message.to.as_str());
            }
        }
        let window = self.limits.max_in_flight_per_recipient;
        let mut pick = None;
        for (i, h) in self.held.iter().enumerate() {
            if h.in_flight || self.held_for.contains(&h.message.to) {
                continue;
            }
            if h.dispatch_no.is_none()
                && !self.early
                && self.durable_upto.is_some_and(|d| h.seq >= d)
            {
                // Not committed yet: later messages are not either (sequence order).
                break;
            }
            if self.probing.contains(&h.message.to) && on_wire.contains(h.message.to.as_str()) {
                continue;
            }
            if h.dispatch_no.is_some() {
                pick = Some(i);
                break;
            }
            let to = h.message.to.as_str();
            let next = self.next_no.get(to).copied().unwrap_or(0);
            let open = oldest_open.get(to).is_none_or(|&o| next - o < window);
            if open {
                pick = Some(i);
                break;
            }
        }
        let i = pick?;
        let h = &mut self.held[i];
        if h.dispatch_no.is_none() {
            let next = self.next_no.entry(h.message.to.clone()).or_insert(0);
            h.dispatch_no = Some(*next);
            *next += 1;
        }
        h.in_flight = true;
        h.attempts = h.attempts.saturating_add(1);
        // Only the first attempt needs recording: after a restart, any later refusal is then
        // already known to follow an attempt that may have arrived.
        if h.attempts == 1 && self.durable_upto.is_none() && !self.early {
            let change = put(h);
            self.journal.push(change);
        }
        Some(self.held[i].message.clone())
    }

    /// The next hop acknowledged a message: it leaves the outbox.
    pub fn on_ack(&mut self, message_id: &str, outcome: AckOutcome) {
        if let Some(h) = self.remove(message_id) {
            self.probing.remove(&h.message.to);
            let outcome = match outcome {
                AckOutcome::Delivered | AckOutcome::Duplicate => SenderOutcome::Delivered,
                AckOutcome::Accepted => SenderOutcome::Accepted,
            };
            self.emit(&h.message, outcome);
        }
    }

    /// The next hop refused a message: it leaves the outbox and the sender is told why —
    /// [`SenderOutcome::Refused`] when this was its only attempt, else
    /// [`SenderOutcome::RefusedOnRetry`] (an earlier attempt may have arrived). Except
    /// [`ErrorCode::RecipientFull`], which is no refusal: the message stays, off the wire, and
    /// its recipient gets nothing more until [`Outbox::resume_held`].
    pub fn on_refused(&mut self, message_id: &str, code: ErrorCode, message: &str) {
        if code == ErrorCode::RecipientFull {
            self.full_answers += 1;
            if let Some(h) = self
                .held
                .iter_mut()
                .find(|h| h.message.message_id == message_id)
            {
                h.in_flight = false;
                let to = h.message.to.clone();
                self.probing.remove(&to);
                self.held_for.insert(to);
            }
            return;
        }
        if let Some(h) = self.remove(message_id) {
            let connection = self.connection_id.clone();
            let message = message.to_owned();
            let outcome = if h.attempts > 1 {
                SenderOutcome::RefusedOnRetry {
                    code,
                    connection,
                    message,
                }
            } else {
                SenderOutcome::Refused {
                    code,
                    connection,
                    message,
                }
            };
            self.emit(&h.message, outcome);
        }
    }

    /// The link dropped: everything in flight becomes uncertain and will be resent, in its
    /// original order and with its original id, by later [`Outbox::poll_dispatch`] calls.
    pub fn on_link_down(&mut self) {
        let mut uncertain = Vec::new();
        for h in self.held.iter_mut() {
            if h.in_flight {
                h.in_flight = false;
                uncertain.push(h.message.clone());
            }
        }
        for m in uncertain {
            let outcome = SenderOutcome::Uncertain {
                connection: self.connection_id.clone(),
            };
            self.emit(&m, outcome);
        }
    }

    /// Lets mail to recipients that answered `recipient_full` go out again, one probe each
    /// until one is acknowledged; returns whether any was held. Call periodically (the hold is
    /// a retry delay, not a state to wait out).
    pub fn resume_held(&mut self) -> bool {
        let any = !self.held_for.is_empty();
        self.probing.append(&mut self.held_for);
        any
    }

    /// `recipient_full` answers since this outbox was created or loaded (observability).
    pub fn recipient_full_answers(&self) -> u64 {
        self.full_answers
    }

    /// Recipients whose mail is held back after a `recipient_full` answer.
    pub fn held_for(&self) -> usize {
        self.held_for.len()
    }

    /// The next sender outcome to report.
    pub fn poll_event(&mut self) -> Option<OutboxEvent> {
        self.events.pop_front()
    }

    /// The changes to commit since the last call, in order.
    pub fn take_changes(&mut self) -> Vec<OutboxChange> {
        for c in &self.journal {
            let seq = c.seq();
            // Held messages are in sequence order.
            if let Ok(i) = self.held.binary_search_by_key(&seq, |h| h.seq) {
                self.held[i].recorded = true;
            }
        }
        std::mem::take(&mut self.journal)
    }

    /// Gives back changes whose commit failed: they go before any newer ones, so the next
    /// commit writes them again.
    pub fn restore_changes(&mut self, mut changes: Vec<OutboxChange>) {
        changes.append(&mut self.journal);
        self.journal = changes;
    }

    /// Renumbers every held message and records a write for each (and nothing else): moves an
    /// outbox read from an older whole-outbox record into per-message records.
    pub fn rewrite_all(&mut self) {
        for (seq, h) in self.held.iter_mut().enumerate() {
            h.seq = seq as u64;
            h.recorded = true;
        }
        self.next_seq = self.held.len() as u64;
        self.journal = self.held.iter().map(put).collect();
    }

    /// Rebuilds an outbox from its message records (`(seq, record)` from [`OutboxChange::Put`],
    /// any order). Nothing is in flight; dispatch restarts with the oldest.
    pub fn from_records(
        connection_id: &str,
        limits: OutboxLimits,
        records: &[(u64, Vec<u8>)],
    ) -> Result<Self, serde_json::Error> {
        let mut o = Self::with_limits(connection_id, limits);
        let mut held = records
            .iter()
            .map(|(seq, r)| {
                let mut h: Held = serde_json::from_slice(r)?;
                h.seq = *seq;
                h.recorded = true;
                Ok(h)
            })
            .collect::<Result<Vec<Held>, serde_json::Error>>()?;
        held.sort_by_key(|h| h.seq);
        o.next_seq = held.last().map_or(0, |h| h.seq + 1);
        o.bytes = held.iter().map(|h| h.message.weight()).sum();
        o.held = held.into();
        Ok(o)
    }

    /// Every held message, oldest first (for inspection and persistence checks).
    pub fn messages(&self) -> impl Iterator<Item = &WireMessage> {
        self.held.iter().map(|h| &h.message)
    }

    fn remove(&mut self, message_id: &str) -> Option<Held> {
        let i = self
            .held
            .iter()
            .position(|h| h.message.message_id == message_id)?;
        let h = self.held.remove(i)?;
        self.bytes -= h.message.weight();
        // A record no commit has taken yet is simply not written: the journal holds only
        // changes the owner has not taken, so nothing of this message is stored or being
        // stored, and a removal would only cost a write.
        if h.recorded {
            self.journal.push(OutboxChange::Remove { seq: h.seq });
        } else {
            self.journal.retain(|c| c.seq() != h.seq);
        }
        Some(h)
    }

    fn emit(&mut self, m: &WireMessage, outcome: SenderOutcome) {
        self.events.push_back(OutboxEvent {
            message_id: m.message_id.clone(),
            from: m.from.clone(),
            to: m.to.clone(),
            outcome,
        });
    }
}

fn put(h: &Held) -> OutboxChange {
    OutboxChange::Put {
        seq: h.seq,
        record: serde_json::to_vec(h).expect("a held message serializes"),
    }
}
