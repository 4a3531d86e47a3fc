//! Answer tokens: the login-free, single-use capability an ntfy action button carries.
//!
//! An ntfy `http` action is a plain POST from the phone's ntfy app, which holds no tuic login,
//! so the URL itself must be the credential. Each token answers exactly one notification (its
//! id is the only thing it maps to), once: it is taken by a successful answer and revoked when
//! the notification clears (answered anywhere, or the question went away). Only a SHA-256 of
//! each token is kept, so a lookup compares digests and a memory dump reveals no live URL.
//! This module deliberately grants nothing else: it is never a login token, and the route
//! that spends it performs only the notification's own answer.

use std::collections::{HashMap, VecDeque};

use sha2::{Digest, Sha256};

/// Live tokens kept before the oldest is revoked (one per open notification at most).
pub const MAX_TOKENS: usize = 4096;

/// The live tokens.
#[derive(Debug, Default)]
pub struct Tokens {
    /// Digest → notification id.
    by_digest: HashMap<[u8; 32], u64>,
    /// Notification id → digest (one token per notification).
    by_id: HashMap<u64, [u8; 32]>,
    /// The token that a channel already put on the wire, per id, so a retry carries the same
    /// URL (kept only while live).
    plain: HashMap<u64, String>,
    order: VecDeque<u64>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Tokens {
    /// The token of notification `id`, issued on first use.
    pub fn issue(&mut self, id: u64) -> String {
        if let Some(t) = self.plain.get(&id) {
            return t.clone();
        }
        let token = crate::vault::random_token();
        let d = digest(&token);
        self.by_digest.insert(d, id);
        self.by_id.insert(id, d);
        self.plain.insert(id, token.clone());
        self.order.push_back(id);
        while self.order.len() > MAX_TOKENS {
            if let Some(old) = self.order.pop_front() {
                self.revoke(old);
            }
        }
        token
    }

    /// The notification `token` answers, if it is live.
    pub fn lookup(&self, token: &str) -> Option<u64> {
        self.by_digest.get(&digest(token)).copied()
    }

    /// Revokes notification `id`'s token (spent, or the notification cleared).
    pub fn revoke(&mut self, id: u64) {
        if let Some(d) = self.by_id.remove(&id) {
            self.by_digest.remove(&d);
        }
        self.plain.remove(&id);
        self.order.retain(|i| *i != id);
    }

    /// How many are live.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether none is live.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_answers_only_its_notification_once_and_is_stable_until_revoked() {
        let mut t = Tokens::default();
        let a = t.issue(1);
        let b = t.issue(2);
        assert_ne!(a, b);
        assert_eq!(t.issue(1), a, "a retry carries the same URL");
        assert_eq!(t.lookup(&a), Some(1));
        assert_eq!(t.lookup(&b), Some(2));
        assert_eq!(t.lookup("guess"), None);
        t.revoke(1);
        assert_eq!(t.lookup(&a), None);
        assert_eq!(t.lookup(&b), Some(2));
        assert_ne!(t.issue(1), a, "a revoked token is never issued again");
    }

    #[test]
    fn tokens_are_bounded() {
        let mut t = Tokens::default();
        let first = t.issue(0);
        for i in 1..=MAX_TOKENS as u64 {
            t.issue(i);
        }
        assert_eq!(t.len(), MAX_TOKENS);
        assert_eq!(t.lookup(&first), None);
    }
}
