//! Cut-through waits: the relay steps of one node link that wait, briefly, for the
//! destinations' answers before answering the node (the hub's `peer_cut_through_ms`, 20 ms).
//!
//! The relay ([`crate::peer::Relay::relay`] with `cut_through`) marks each message it took
//! into an outbox and hands the destination's final answer back as
//! [`crate::peer::Route::CutThrough`]; this table holds the waiting steps until that answer
//! ([`CutThroughWaits::answer`]) or their deadline ([`CutThroughWaits::expire`], after which
//! the caller ends the relay's mark and answers `accepted` once custody is committed). Time is
//! the caller's (milliseconds on any monotonic clock); the hub's link task and the seeded
//! simulator drive the same table.

use std::collections::{HashMap, VecDeque};

/// The waiting relay steps of one link, by message id, each with its deadline.
#[derive(Debug)]
pub struct CutThroughWaits<T> {
    /// By message id.
    waiting: HashMap<String, T>,
    /// When each wait ends, in the order the mail came: the deadlines never decrease, so the
    /// earliest is the first one still waiting. An answered message's entry is dropped when
    /// it reaches the front.
    deadlines: VecDeque<(u64, String)>,
}

impl<T> Default for CutThroughWaits<T> {
    fn default() -> Self {
        Self {
            waiting: HashMap::new(),
            deadlines: VecDeque::new(),
        }
    }
}

impl<T> CutThroughWaits<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `step` (the relay step of `message_id`) wait for its destination's answer until
    /// `deadline`. A deadline earlier than the last one's (the wait was shortened meanwhile)
    /// waits as long as the mail before it.
    pub fn hold(&mut self, message_id: String, step: T, deadline: u64) {
        let deadline = self
            .deadlines
            .back()
            .map_or(deadline, |(d, _)| deadline.max(*d));
        self.deadlines.push_back((deadline, message_id.clone()));
        self.waiting.insert(message_id, step);
    }

    /// The destination answered `message_id`: its step, if it still waits (the caller answers
    /// the node with the destination's answer). Also takes what [`Self::expire`] returned.
    pub fn answer(&mut self, message_id: &str) -> Option<T> {
        let step = self.waiting.remove(message_id);
        while self
            .deadlines
            .front()
            .is_some_and(|(_, id)| !self.waiting.contains_key(id))
        {
            self.deadlines.pop_front();
        }
        step
    }

    /// The earliest deadline of a step still waiting (or of one answered but not yet dropped:
    /// calling [`Self::expire`] then returns nothing).
    pub fn poll_timeout(&self) -> Option<u64> {
        self.deadlines.front().map(|(d, _)| *d)
    }

    /// Ends the waits whose deadline is at or before `now` (every wait with `None`, when the
    /// link ends) and returns their message ids, oldest first. Their steps stay until
    /// [`Self::answer`] takes them: the caller first ends the relay's marks of these ids, then
    /// answers what the destinations answered meanwhile, and takes the rest to answer
    /// `accepted` once custody is committed.
    pub fn expire(&mut self, now: Option<u64>) -> Vec<String> {
        let mut due = Vec::new();
        while let Some((d, _)) = self.deadlines.front() {
            if now.is_some_and(|t| *d > t) {
                break;
            }
            let (_, id) = self.deadlines.pop_front().expect("a front entry");
            if self.waiting.contains_key(&id) {
                due.push(id);
            }
        }
        due
    }

    /// How many steps wait.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether no step waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answered_steps_leave_and_the_rest_expire_in_order() {
        let mut w = CutThroughWaits::new();
        w.hold("a".into(), 1, 20);
        w.hold("b".into(), 2, 25);
        // Shortened meanwhile: waits as long as the mail before it.
        w.hold("c".into(), 3, 22);
        assert_eq!(w.poll_timeout(), Some(20));
        assert_eq!(w.answer("a"), Some(1));
        assert_eq!(w.answer("a"), None);
        assert_eq!(w.poll_timeout(), Some(25));
        assert_eq!(w.expire(Some(24)), Vec::<String>::new());
        assert_eq!(w.expire(Some(25)), vec!["b".to_owned(), "c".to_owned()]);
        // Expired steps stay until taken: an answer handed meanwhile still finds them.
        assert_eq!(w.len(), 2);
        assert_eq!(w.answer("c"), Some(3));
        assert_eq!(w.answer("b"), Some(2));
        assert!(w.is_empty());
        assert_eq!(w.poll_timeout(), None);
    }

    #[test]
    fn a_link_that_ends_expires_every_wait() {
        let mut w = CutThroughWaits::new();
        w.hold("a".into(), (), 1_000);
        w.hold("b".into(), (), 2_000);
        assert_eq!(w.answer("b"), Some(()));
        assert_eq!(w.expire(None), vec!["a".to_owned()]);
        assert_eq!(w.poll_timeout(), None);
    }
}
