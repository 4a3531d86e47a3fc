//! The one reconnect backoff of the workspace (peer links, the bridge, `tuic attach`, the
//! simulator): a delay doubling from a minimum to a maximum, with jitter supplied by the caller
//! (this crate has no randomness and no clock, so a seeded simulator replays it exactly).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// First reconnect delay of a peer link.
pub const BACKOFF_MIN_MS: u64 = 1_000;
/// Largest reconnect delay of a peer link.
pub const BACKOFF_MAX_MS: u64 = 30_000;

/// Exponential backoff state for one connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    attempt: u32,
    min_ms: u64,
    max_ms: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    /// Fresh state with the peer link's limits (1 s doubling to 30 s).
    pub fn new() -> Self {
        Self::with_limits(
            Duration::from_millis(BACKOFF_MIN_MS),
            Duration::from_millis(BACKOFF_MAX_MS),
        )
    }

    /// Fresh state doubling from `min` up to `max` (`max` is raised to `min` if lower; both at
    /// least 1 ms).
    pub fn with_limits(min: Duration, max: Duration) -> Self {
        let min_ms = u64::try_from(min.as_millis()).unwrap_or(u64::MAX).max(1);
        let max_ms = u64::try_from(max.as_millis())
            .unwrap_or(u64::MAX)
            .max(min_ms);
        Self {
            attempt: 0,
            min_ms,
            max_ms,
        }
    }

    /// The delay in milliseconds before the next attempt, in `[base, base * 1.25]` capped at the
    /// maximum, where `base` doubles per failed attempt from the minimum. `random` is any random
    /// value from the caller; `0` gives the bare base.
    pub fn next_delay(&mut self, random: u64) -> u64 {
        let base = self
            .min_ms
            .saturating_mul(1u64 << self.attempt.min(30))
            .min(self.max_ms);
        self.attempt = self.attempt.saturating_add(1);
        (base + random % (base / 4 + 1)).min(self.max_ms)
    }

    /// [`Backoff::next_delay`] as a [`Duration`].
    pub fn next(&mut self, random: u64) -> Duration {
        Duration::from_millis(self.next_delay(random))
    }

    /// A handshake succeeded: start again from the minimum.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}
