//! The bounded queue of one relayed upstream call's progress notifications, between the
//! upstream connection that produces them and the peer link that sends them on.
//!
//! An upstream may send progress faster than a link carries it (a flood, a slow WAN link).
//! The queue never holds more than its capacity: when it is full, the newest queued
//! notification is replaced by the arriving one, and the replaced one is counted as coalesced
//! (the count travels with the survivor, so the far side knows how many it did not see). Order
//! is kept, the first notifications and the latest one always survive, and a progress value
//! seen by the far side never goes backwards.
//!
//! Once the call has its answer the queue is closed: a late notification is dropped, so no
//! progress follows the result.
//!
//! It holds no lock and no clock; the owner wraps it in whatever its threads need.

use std::collections::VecDeque;

use serde_json::{Map, Value};

/// Default capacity: the size of an agent's `GET /mcp` stream buffer on a node, so a burst the
/// agent's stream can take whole is never coalesced; a flood costs a few kilobytes per call.
pub const PROGRESS_QUEUE_CAP: usize = 64;

/// One queued notification and how many were coalesced into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// The notification's params (without `progressToken`).
    pub params: Map<String, Value>,
    /// Notifications replaced by this one while it waited.
    pub coalesced: u64,
}

/// What [`ProgressQueue::push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued into an empty queue: the owner must wake the sender.
    Wake,
    /// Queued behind others; a wake is already pending.
    Queued,
    /// The queue was full: it replaced the newest queued notification.
    Coalesced,
    /// The call has answered: dropped.
    Closed,
}

/// The progress of one call on its way to the link.
#[derive(Debug)]
pub struct ProgressQueue {
    cap: usize,
    queue: VecDeque<Queued>,
    closed: bool,
    /// Total coalesced away (for counters).
    coalesced: u64,
    /// Total dropped after close.
    late: u64,
}

impl ProgressQueue {
    /// An empty queue holding at most `cap` (≥ 1) notifications.
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            queue: VecDeque::new(),
            closed: false,
            coalesced: 0,
            late: 0,
        }
    }

    /// Adds one notification.
    pub fn push(&mut self, params: Map<String, Value>) -> Pushed {
        if self.closed {
            self.late += 1;
            return Pushed::Closed;
        }
        if self.queue.len() >= self.cap
            && let Some(last) = self.queue.back_mut()
        {
            last.coalesced += 1;
            last.params = params;
            self.coalesced += 1;
            return Pushed::Coalesced;
        }
        let was_empty = self.queue.is_empty();
        self.queue.push_back(Queued {
            params,
            coalesced: 0,
        });
        if was_empty {
            Pushed::Wake
        } else {
            Pushed::Queued
        }
    }

    /// Takes everything queued, oldest first; the next push wakes again.
    pub fn drain(&mut self) -> Vec<Queued> {
        self.queue.drain(..).collect()
    }

    /// The call answered: later notifications are dropped. What is still queued can be
    /// drained (it came before the answer).
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// Whether [`ProgressQueue::close`] ran.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Notifications waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Nothing waiting.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Notifications coalesced away so far.
    pub fn coalesced(&self) -> u64 {
        self.coalesced
    }

    /// Notifications dropped because they came after the answer.
    pub fn late(&self) -> u64 {
        self.late
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(n: u64) -> Map<String, Value> {
        json!({"progress": n})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    fn progress(q: &[Queued]) -> Vec<u64> {
        q.iter()
            .map(|x| x.params["progress"].as_u64().unwrap_or(0))
            .collect()
    }

    #[test]
    fn wakes_once_per_empty_to_nonempty_transition() {
        let mut q = ProgressQueue::new(4);
        assert_eq!(q.push(p(1)), Pushed::Wake);
        assert_eq!(q.push(p(2)), Pushed::Queued);
        assert_eq!(progress(&q.drain()), vec![1, 2]);
        assert_eq!(q.push(p(3)), Pushed::Wake);
    }

    #[test]
    fn a_flood_stays_within_capacity_keeps_order_and_the_latest() {
        let mut q = ProgressQueue::new(4);
        for n in 1..=10_000 {
            q.push(p(n));
            assert!(q.len() <= 4);
        }
        let out = q.drain();
        assert_eq!(progress(&out), vec![1, 2, 3, 10_000]);
        assert_eq!(out[3].coalesced, 9_996);
        assert_eq!(q.coalesced(), 9_996);
        let seen: u64 = out.iter().map(|x| 1 + x.coalesced).sum();
        assert_eq!(seen, 10_000, "every notification is delivered or counted");
    }

    #[test]
    fn nothing_is_queued_after_close_but_what_came_before_drains() {
        let mut q = ProgressQueue::new(4);
        q.push(p(1));
        q.close();
        assert_eq!(q.push(p(2)), Pushed::Closed);
        assert_eq!(q.late(), 1);
        assert_eq!(progress(&q.drain()), vec![1]);
        assert!(q.is_empty() && q.is_closed());
    }
}
