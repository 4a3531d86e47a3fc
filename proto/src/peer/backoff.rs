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

/// A link that ends sooner than this after coming up counts as a flap.
pub const FLAP_STABLE_MS: u64 = 10_000;
/// Flaps in a row forgiven before dials are held back: a node restarting or a blip ends one
/// link early now and then, and must still be back within the short probe interval.
pub const FLAPS_FORGIVEN: u32 = 2;
/// The first hold once a host flaps (doubling per further flap up to [`FLAP_HOLD_MAX_MS`]).
pub const FLAP_HOLD_MIN_MS: u64 = 2_000;
/// The longest hold of a flapping host: about one dial a minute, whatever it does.
pub const FLAP_HOLD_MAX_MS: u64 = 60_000;

/// Flap damping for one host's links: a host whose links come up and end again at once (a
/// crash loop, a proxy that accepts and drops, a node that connects a thousand times a second)
/// is held back with a growing pause, so it costs the hub at most one dial per pause and never
/// the dial slots of the others. A link that stays up [`FLAP_STABLE_MS`] forgives every flap.
///
/// Sans-IO: the caller passes its monotonic clock in milliseconds and a random value for the
/// jitter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flaps {
    /// When the current link came up, while it is up.
    up_at: Option<u64>,
    /// Links in a row that ended sooner than [`FLAP_STABLE_MS`] after coming up.
    flaps: u32,
}

impl Flaps {
    /// The host's link came up at `now`.
    pub fn up(&mut self, now: u64) {
        self.up_at = Some(now);
    }

    /// The host's link ended at `now`: a flap when it had come up less than
    /// [`FLAP_STABLE_MS`] before; a link that held forgives the earlier flaps. A link that
    /// never came up (a refused dial) changes nothing: the ordinary backoff paces those.
    pub fn down(&mut self, now: u64) {
        if let Some(at) = self.up_at.take() {
            if now.saturating_sub(at) < FLAP_STABLE_MS {
                self.flaps = self.flaps.saturating_add(1);
            } else {
                self.flaps = 0;
            }
        }
    }

    /// Flaps in a row so far.
    pub fn count(&self) -> u32 {
        self.flaps
    }

    /// The least pause before the next dial, in milliseconds: 0 until more than
    /// [`FLAPS_FORGIVEN`] flaps in a row, then [`FLAP_HOLD_MIN_MS`] doubling per flap up to
    /// [`FLAP_HOLD_MAX_MS`], with up to a quarter more of jitter from `random`.
    pub fn hold_ms(&self, random: u64) -> u64 {
        let Some(over) = self.flaps.checked_sub(FLAPS_FORGIVEN + 1) else {
            return 0;
        };
        let base = FLAP_HOLD_MIN_MS
            .saturating_mul(1u64 << over.min(20))
            .min(FLAP_HOLD_MAX_MS);
        (base + random % (base / 4 + 1)).min(FLAP_HOLD_MAX_MS)
    }
}

#[cfg(test)]
mod flap_tests {
    use super::*;

    #[test]
    fn a_flapping_host_is_held_back_more_each_time_and_a_stable_link_forgives_it() {
        let mut f = Flaps::default();
        let mut now = 0;
        let mut holds = Vec::new();
        for _ in 0..9 {
            f.up(now);
            now += 1; // up for a millisecond
            f.down(now);
            holds.push(f.hold_ms(0));
        }
        assert_eq!(
            holds,
            [0, 0, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
        );
        // Jitter stays within a quarter and under the cap.
        assert!((8_000..=10_000).contains(&{
            let mut g = Flaps::default();
            for _ in 0..5 {
                g.up(0);
                g.down(1);
            }
            g.hold_ms(u64::MAX)
        }));
        assert_eq!(f.hold_ms(u64::MAX), FLAP_HOLD_MAX_MS);
        // A refused dial (never up) is not a flap.
        f.down(now);
        assert_eq!(f.count(), 9);
        // A link that held forgives every flap.
        f.up(now);
        f.down(now + FLAP_STABLE_MS);
        assert_eq!((f.count(), f.hold_ms(0)), (0, 0));
    }
}
