//! The circuit breaker of one upstream, as a pure state machine: failures of health checks
//! and connects go in, the next pause comes out. Time is the caller's.
//!
//! Spec "Health checker": 3 consecutive failures open the circuit; each retry waits a backoff
//! that starts at 1 s and doubles up to 60 s; after 5 retries the upstream is `failed`, which
//! is retried only on the health checker's own tick. Any success closes the circuit and
//! resets everything. The numbers are tunings (`upstream_*` in `config.json`).

use std::time::Duration;

/// The breaker's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// Consecutive failures that open the circuit.
    pub threshold: u32,
    /// First backoff.
    pub base: Duration,
    /// Longest backoff.
    pub max: Duration,
    /// Retries before `failed`.
    pub max_retries: u32,
}

impl Tuning {
    /// From the node's config.
    pub fn from_config(t: &crate::config::Tuning) -> Self {
        Self {
            threshold: t.upstream_failure_threshold.max(1),
            base: Duration::from_millis(t.upstream_backoff_base_ms.max(1)),
            max: Duration::from_millis(t.upstream_backoff_max_ms.max(1)),
            max_retries: t.upstream_max_retries,
        }
    }
}

/// What the caller should do after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Below the threshold: keep going (a connected upstream keeps serving).
    Degraded {
        /// Consecutive failures so far.
        failures: u32,
    },
    /// The circuit is open: reconnect after `backoff`.
    Open {
        /// The pause before the retry.
        backoff: Duration,
        /// Which retry that will be (1-based).
        retry: u32,
    },
    /// Out of retries: wait for the health checker's next tick.
    Failed,
}

/// One upstream's breaker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Breaker {
    failures: u32,
    retries: u32,
}

impl Breaker {
    /// A success: the circuit closes and the counters reset.
    pub fn success(&mut self) {
        *self = Self::default();
    }

    /// A failure and what follows from it.
    pub fn failure(&mut self, t: &Tuning) -> Verdict {
        self.failures = self.failures.saturating_add(1);
        if self.failures < t.threshold {
            return Verdict::Degraded {
                failures: self.failures,
            };
        }
        if self.retries >= t.max_retries {
            return Verdict::Failed;
        }
        let backoff = t
            .base
            .saturating_mul(2u32.saturating_pow(self.retries))
            .min(t.max);
        self.retries += 1;
        Verdict::Open {
            backoff,
            retry: self.retries,
        }
    }

    /// Consecutive failures.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Retries spent since the circuit opened.
    pub fn retries(&self) -> u32 {
        self.retries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Tuning {
        Tuning {
            threshold: 3,
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
            max_retries: 5,
        }
    }

    #[test]
    fn opens_after_three_backs_off_to_the_cap_and_fails_after_five_retries() {
        let mut b = Breaker::default();
        assert_eq!(b.failure(&t()), Verdict::Degraded { failures: 1 });
        assert_eq!(b.failure(&t()), Verdict::Degraded { failures: 2 });
        let pauses: Vec<Verdict> = (0..6).map(|_| b.failure(&t())).collect();
        let secs = |s| Duration::from_secs(s);
        assert_eq!(
            pauses,
            vec![
                Verdict::Open {
                    backoff: secs(1),
                    retry: 1
                },
                Verdict::Open {
                    backoff: secs(2),
                    retry: 2
                },
                Verdict::Open {
                    backoff: secs(4),
                    retry: 3
                },
                Verdict::Open {
                    backoff: secs(8),
                    retry: 4
                },
                Verdict::Open {
                    backoff: secs(16),
                    retry: 5
                },
                Verdict::Failed,
            ]
        );
        b.success();
        assert_eq!(b.failures(), 0);
        assert_eq!(b.failure(&t()), Verdict::Degraded { failures: 1 });
    }

    #[test]
    fn backoff_is_capped() {
        let tun = Tuning {
            max_retries: 20,
            ..t()
        };
        let mut b = Breaker::default();
        let mut last = Duration::ZERO;
        for _ in 0..15 {
            if let Verdict::Open { backoff, .. } = b.failure(&tun) {
                last = backoff;
            }
        }
        assert_eq!(last, Duration::from_secs(60));
    }
}
