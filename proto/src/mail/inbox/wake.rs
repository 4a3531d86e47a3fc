//! PTY wake ownership: a recipient in a managed PTY is woken by one payload-free notice at a
//! time for the mail the PTY owns; when the PTY goes, that mail is re-queued.

use super::{Entry, InboxError, InboxEvent, InboxMessage, Inboxes, WakeOwner, next_cursor};

impl Inboxes {
    /// Whether a PTY wake notice for `recipient` is queued or being written: mail sent now
    /// coalesces into it rather than earning a notice of its own.
    pub fn wake_pending(&self, recipient: &str) -> bool {
        self.recipients
            .get(recipient)
            .is_some_and(|r| r.wake_pending)
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

    /// Read mail settles its claim; when no PTY-owned unread mail is left, a pending notice is
    /// withdrawn.
    pub(super) fn settle_pty(&mut self, recipient: &str) {
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
