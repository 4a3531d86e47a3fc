//! Reconnect backoff: 1 s doubling to 30 s, with jitter supplied by the caller.

use serde::{Deserialize, Serialize};

/// First reconnect delay.
pub const BACKOFF_MIN_MS: u64 = 1_000;
/// Largest reconnect delay.
pub const BACKOFF_MAX_MS: u64 = 30_000;

/// Exponential backoff state for one connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    attempt: u32,
}

impl Backoff {
    /// Fresh state.
    pub fn new() -> Self {
        Self::default()
    }

    /// The delay before the next attempt, in `[base, base * 1.25]` capped at
    /// [`BACKOFF_MAX_MS`], where `base` doubles per failed attempt from [`BACKOFF_MIN_MS`].
    /// `random` is any random value from the caller (this crate has no randomness).
    pub fn next_delay(&mut self, random: u64) -> u64 {
        let base = BACKOFF_MIN_MS
            .saturating_mul(1u64 << self.attempt.min(16))
            .min(BACKOFF_MAX_MS);
        self.attempt = self.attempt.saturating_add(1);
        (base + random % (base / 4 + 1)).min(BACKOFF_MAX_MS)
    }

    /// A handshake succeeded: start again from the minimum.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}
