//! The process's file-descriptor budget: the soft `RLIMIT_NOFILE` raised to the hard one at
//! start, and the headroom check that keeps the last descriptors for what must never fail —
//! the IPC socket's accepts and the links already open.
//!
//! A node or hub near its limit refuses *new* TCP clients and new outbound links with a logged
//! reason rather than letting `accept` fail with `EMFILE` for everyone (the IPC socket
//! included). The limit is read at each check, so a limit lowered from outside (`prlimit`)
//! counts at once. Deliberately not here: per-kind quotas (links vs clients) — one reserve
//! for the protected paths is what keeps `tuic ls` answering.

use std::sync::atomic::{AtomicU64, Ordering};

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use tracing::{info, warn};

/// What `raise_soft_limit` found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    /// The soft limit before.
    pub before: u64,
    /// The soft limit now.
    pub soft: u64,
    /// The hard limit (`None`: unlimited).
    pub hard: Option<u64>,
}

/// Raises the soft descriptor limit to the hard one (or to 1 Mi when the hard one is
/// unlimited) and logs both. A process inherits the soft limit of whoever started it, often
/// 1,024, while each QUIC link costs the hub several descriptors.
pub fn raise_soft_limit() -> Raised {
    let lim = getrlimit(Resource::Nofile);
    let before = lim.current.unwrap_or(u64::MAX);
    let target = lim.maximum.unwrap_or(1 << 20);
    let mut soft = before;
    if before < target {
        match setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(target),
                maximum: lim.maximum,
            },
        ) {
            Ok(()) => soft = target,
            Err(e) => {
                warn!(error = %e, from = before, to = target, "could not raise the open-file limit")
            }
        }
    }
    info!(
        soft_before = before,
        soft,
        hard = lim
            .maximum
            .map_or_else(|| "unlimited".to_owned(), |h| h.to_string()),
        "open-file limit"
    );
    Raised {
        before,
        soft,
        hard: lim.maximum,
    }
}

/// The soft limit now.
pub fn limit() -> u64 {
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Descriptors open now (`/proc/self/fd`, less the one the count itself holds).
pub fn used() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count().saturating_sub(1) as u64)
}

/// Descriptors kept back for the IPC socket and the links already open: an eighth of the
/// limit, between 16 and 256.
pub fn reserve(limit: u64) -> u64 {
    (limit / 8).clamp(16, 256)
}

/// Refusals since start (`/metrics` `tuic_fd_refusals_total`).
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Refusals of new connections or links for want of descriptors so far.
pub fn refused_total() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// `Err(reason)` when a new TCP client or outbound link (`what`) would eat into the reserve;
/// counts the refusal. The caller logs the reason (at most once per run of refusals).
pub fn admit(what: &str) -> Result<(), String> {
    let limit = limit();
    let used = used();
    let keep = reserve(limit);
    if used.saturating_add(keep) < limit {
        return Ok(());
    }
    REFUSED.fetch_add(1, Ordering::Relaxed);
    Err(format!(
        "refusing a new {what}: {used} of {limit} file descriptors in use, the last {keep} are kept for the IPC socket and open links"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_an_eighth_within_bounds() {
        assert_eq!(reserve(64), 16);
        assert_eq!(reserve(1024), 128);
        assert_eq!(reserve(1 << 20), 256);
    }

    #[test]
    fn counting_sees_a_new_descriptor_and_admission_holds_with_room() {
        let before = used();
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(used(), before + 1);
        drop(f);
        assert!(limit() > used());
        // The test process is far below its limit.
        assert_eq!(admit("test"), Ok(()));
    }
}
