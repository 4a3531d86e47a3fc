//! Per-recipient dedupe rings of forwarded mail at the receiving side.
//!
//! Each registered recipient has a FIFO ring of the last [`DEDUPE_HORIZON`] forwarded
//! `(message_id, fingerprint)` pairs, shared across all senders. The fingerprint is a SHA-256
//! over the stamped sender and the body, so no body is retained. A known id with the same
//! fingerprint is a resend and is dropped; a known id with another fingerprint is an identity
//! collision and is refused. Unregistering a recipient removes its ring; a sender's retirement
//! does not. Beyond the horizon a resend may be delivered again: this is a bounded replay
//! horizon, not exactly-once delivery forever.
//!
//! The rings serialize with serde (whole, or one recipient at a time with
//! [`DedupeRings::export_ring`]) so the node can keep them in `redb` across restarts.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Ids remembered per recipient (spec "Configured remote MCP ownership").
pub const DEDUPE_HORIZON: usize = 100;

/// What the ring says about an arriving message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Never seen within the horizon: deliver it.
    Fresh,
    /// Seen with the same sender and body: drop it and acknowledge as duplicate.
    Duplicate,
}

/// Errors of [`DedupeRings::check`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DedupeError {
    /// The id is retained with another sender or body.
    #[error(
        "message id '{message_id}' for '{recipient}' is already used by another sender or body"
    )]
    IdentityCollision {
        /// The recipient.
        recipient: String,
        /// The colliding id.
        message_id: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Seen {
    message_id: String,
    fingerprint: String,
}

/// Every recipient's ring on one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupeRings {
    rings: BTreeMap<String, VecDeque<Seen>>,
}

/// The fingerprint of a forwarded message: SHA-256 over the length-prefixed sender and body.
pub fn fingerprint(sender: &str, body: &str) -> String {
    let mut h = Sha256::new();
    h.update((sender.len() as u64).to_be_bytes());
    h.update(sender.as_bytes());
    h.update(body.as_bytes());
    hex::encode(h.finalize())
}

impl DedupeRings {
    /// No rings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Looks an arriving message up without recording it.
    pub fn check(
        &self,
        recipient: &str,
        message_id: &str,
        sender: &str,
        body: &str,
    ) -> Result<Verdict, DedupeError> {
        let Some(ring) = self.rings.get(recipient) else {
            return Ok(Verdict::Fresh);
        };
        let Some(seen) = ring.iter().find(|s| s.message_id == message_id) else {
            return Ok(Verdict::Fresh);
        };
        if seen.fingerprint == fingerprint(sender, body) {
            Ok(Verdict::Duplicate)
        } else {
            Err(DedupeError::IdentityCollision {
                recipient: recipient.to_owned(),
                message_id: message_id.to_owned(),
            })
        }
    }

    /// Records a delivered message, evicting the ring's oldest entry beyond the horizon.
    pub fn record(&mut self, recipient: &str, message_id: &str, sender: &str, body: &str) {
        let ring = self.rings.entry(recipient.to_owned()).or_default();
        if ring.iter().any(|s| s.message_id == message_id) {
            return;
        }
        if ring.len() >= DEDUPE_HORIZON {
            ring.pop_front();
        }
        ring.push_back(Seen {
            message_id: message_id.to_owned(),
            fingerprint: fingerprint(sender, body),
        });
    }

    /// [`DedupeRings::check`], then [`DedupeRings::record`] when fresh. Call it under the same
    /// lock as the recipient check and the inbox enqueue.
    pub fn admit(
        &mut self,
        recipient: &str,
        message_id: &str,
        sender: &str,
        body: &str,
    ) -> Result<Verdict, DedupeError> {
        let verdict = self.check(recipient, message_id, sender, body)?;
        if verdict == Verdict::Fresh {
            self.record(recipient, message_id, sender, body);
        }
        Ok(verdict)
    }

    /// Drops a recipient's ring (on unregister).
    pub fn remove(&mut self, recipient: &str) {
        self.rings.remove(recipient);
    }

    /// Ids retained for a recipient.
    pub fn len(&self, recipient: &str) -> usize {
        self.rings.get(recipient).map_or(0, VecDeque::len)
    }

    /// One recipient's ring as a standalone JSON record (`None` when it has none), so a store
    /// can write only the ring that changed.
    pub fn export_ring(&self, recipient: &str) -> Option<String> {
        let ring = self.rings.get(recipient)?;
        // Plain strings in a list: serialization cannot fail.
        Some(serde_json::to_string(ring).unwrap_or_default())
    }

    /// Restores a ring written by [`DedupeRings::export_ring`], replacing any in memory.
    pub fn import_ring(&mut self, recipient: &str, json: &str) -> Result<(), serde_json::Error> {
        let ring: VecDeque<Seen> = serde_json::from_str(json)?;
        self.rings.insert(recipient.to_owned(), ring);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_ring_round_trips_on_its_own() {
        let mut a = DedupeRings::new();
        a.record("bob", "m1", "b/x", "hi");
        a.record("carol", "m2", "b/x", "yo");
        let json = a.export_ring("bob").unwrap();
        assert!(a.export_ring("nobody").is_none());
        let mut b = DedupeRings::new();
        b.import_ring("bob", &json).unwrap();
        assert_eq!(
            b.check("bob", "m1", "b/x", "hi").unwrap(),
            Verdict::Duplicate
        );
        assert!(b.check("bob", "m1", "b/x", "other").is_err());
        assert_eq!(b.len("carol"), 0);
        assert!(b.import_ring("bob", "not json").is_err());
    }
}
