//! The event bus: typed events with monotonic ids, fanned out to every subscriber.
//!
//! Each subscriber has its own bounded buffer (a broadcast ring). A subscriber that falls
//! behind loses the oldest events and is told how many (`lagged {missed}`); a publisher never
//! waits for a subscriber.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;
use tuic_proto::events::Event;

/// Default per-subscriber buffer, in events.
pub(crate) const DEFAULT_CAPACITY: usize = 1024;

/// One published event with its bus id.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// Monotonic, starting at 1 for the first event of this process.
    pub id: u64,
    /// The event.
    pub event: Event,
}

/// The node's event bus.
#[derive(Debug)]
pub struct Bus {
    tx: broadcast::Sender<Arc<Envelope>>,
    /// Last id handed out; held while sending so ids reach subscribers in order.
    last_id: Mutex<u64>,
    /// Open `GET /events` streams that a UI answers requests on (see [`Bus::ui_attach`]).
    uis: Arc<AtomicUsize>,
}

/// Counts one attached UI while it lives (dropped with its event stream).
#[derive(Debug)]
pub struct UiGuard(Arc<AtomicUsize>);

impl Drop for UiGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Bus {
    /// A bus whose subscribers each buffer up to `capacity` events.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Self {
            tx,
            last_id: Mutex::new(0),
            uis: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Marks an event stream whose reader can answer UI requests (a page holding `/events`
    /// that receives `session-suspend-requested`); the mark lasts as long as the guard.
    pub fn ui_attach(&self) -> UiGuard {
        self.uis.fetch_add(1, Ordering::Relaxed);
        UiGuard(self.uis.clone())
    }

    /// How many UIs are attached now (a headless node has none).
    pub fn uis_attached(&self) -> usize {
        self.uis.load(Ordering::Relaxed)
    }

    /// Publishes an event and returns its id. Never blocks on subscribers.
    pub fn publish(&self, event: Event) -> u64 {
        let mut last = self.last_id.lock().unwrap_or_else(|p| p.into_inner());
        *last += 1;
        let id = *last;
        // No subscriber is not an error: events are live notifications, not a journal.
        let _ = self.tx.send(Arc::new(Envelope { id, event }));
        id
    }

    /// A new subscription that sees events published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Envelope>> {
        self.tx.subscribe()
    }
}

impl Default for Bus {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ids_are_monotonic_and_lag_is_reported_not_blocking() {
        let bus = Bus::new(4);
        let mut rx = bus.subscribe();
        for i in 0..10 {
            bus.publish(Event::SessionClosed {
                session_id: i.to_string(),
            });
        }
        match rx.recv().await {
            Err(broadcast::error::RecvError::Lagged(n)) => assert_eq!(n, 6),
            other => panic!("expected lag, got {other:?}"),
        }
        let mut ids = Vec::new();
        while let Ok(e) = rx.try_recv() {
            ids.push(e.id);
        }
        assert_eq!(ids, vec![7, 8, 9, 10]);
    }
}
