//! Waits: `agent action=wait` calls pending until mail or their deadline, the answers they
//! resolve with, and what happens to mail when an answer is lost on its way to the caller.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{Entry, InboxError, InboxEvent, InboxMessage, Inboxes, Recipient, Waiter, next_cursor};

/// Identifies one `agent action=wait` call; chosen by the caller and unique while pending.
pub type WaitId = u64;

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

/// How far an entry has got towards its reader, so a lost wait answer hands back only mail
/// that no other answer carried to the recipient.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Reach {
    /// Resolved wait answers carrying it whose fate the node has not reported yet
    /// ([`Inboxes::wait_answered`] or [`Inboxes::wait_undelivered`]).
    in_flight: u32,
    /// A read carrying it reached its caller: an inbox page, a wait answered at once, or a
    /// wait answer the node confirmed.
    delivered: bool,
}

impl Inboxes {
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
pub(super) enum Answer {
    /// Returned by the call itself (an inbox page, a wait answered at once).
    Returned,
    /// Handed to the node in an event; it reports the fate later.
    Pending,
}

impl Reach {
    pub(super) fn carried(&mut self, answer: Answer) {
        match answer {
            Answer::Returned => self.delivered = true,
            Answer::Pending => self.in_flight += 1,
        }
    }
}

/// A successful wait observation: every fresh message after `since`, acknowledging the cursor.
pub(super) fn observe(r: &mut Recipient, since: u64, answer: Answer) -> WaitOutcome {
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
