//! The delivery lease: each unread message is assigned to at most one wake owner, a waiter
//! or the PTY, in the step it arrives, and a waiter it satisfies is resolved in that step.

use serde::{Deserialize, Serialize};

use super::wait::{Answer, observe};
use super::{InboxEvent, Inboxes, WaitId, Waiter};

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

impl Inboxes {
    /// The wake owner currently holding a retained message, if any.
    pub fn owner_of(&self, recipient: &str, message_id: &str) -> Option<WakeOwner> {
        self.recipients
            .get(recipient)?
            .entries
            .iter()
            .find(|e| e.msg.message_id == message_id)?
            .owner
    }

    /// Assigns unread, unowned mail to the first waiter (resolving every waiter it satisfies)
    /// or to the PTY. Returns the owner of the newest message.
    pub(super) fn assign_unowned(&mut self, recipient: &str) -> Option<WakeOwner> {
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
}
