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

/// Descriptors open now (`/proc/self/fd`, less the one the count itself holds). A process
/// out of descriptors cannot open the directory to count them: that is the limit reached.
pub fn used() -> u64 {
    match std::fs::read_dir("/proc/self/fd") {
        Ok(d) => d.count().saturating_sub(1) as u64,
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::MFILE.raw_os_error()) => limit(),
        Err(_) => 0,
    }
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

/// Descriptors promised to links being opened ([`claim`]) and not yet counted in [`used`].
static PENDING: AtomicU64 = AtomicU64::new(0);

/// `Err(reason)` when a new TCP client (already accepted) or outbound link (`what`) would eat
/// into the reserve; counts the refusal. The caller logs the reason (at most once per run of
/// refusals).
pub fn admit(what: &str) -> Result<(), String> {
    check(what, 0)
}

/// [`admit`] for a link about to open `fds` descriptors: while the returned [`Claim`] lives
/// they count as used, so the links of a burst of dials (a hub's start, many nodes back at
/// once) are admitted against what the ones before them will hold, not against what is open
/// at the instant each asks. Drop the claim once the link's descriptors are open (or failed).
pub fn claim(what: &str, fds: u64) -> Result<Claim, String> {
    check(what, fds)?;
    Ok(Claim(fds))
}

/// Descriptors promised to a link being opened ([`claim`]); given back on drop.
#[derive(Debug)]
#[must_use = "the descriptors are promised only while the claim lives"]
pub struct Claim(u64);

impl Drop for Claim {
    fn drop(&mut self) {
        PENDING.fetch_sub(self.0, Ordering::AcqRel);
    }
}

/// Admits `fds` more descriptors (added to [`PENDING`] when admitted) or refuses with the
/// reason.
fn check(what: &str, fds: u64) -> Result<(), String> {
    let limit = limit();
    let used = used();
    // Claimed first, then checked with every claim counted: two dials at once cannot both
    // take the last room.
    let pending = PENDING.fetch_add(fds, Ordering::AcqRel).saturating_add(fds);
    if fits(used, pending, limit) {
        return Ok(());
    }
    PENDING.fetch_sub(fds, Ordering::AcqRel);
    REFUSED.fetch_add(1, Ordering::Relaxed);
    Err(format!(
        "refusing a new {what}: {used} of {limit} file descriptors in use, the last {} are kept for the IPC socket and open links",
        reserve(limit)
    ))
}

/// Whether `used` open and `pending` promised descriptors leave the reserve of `limit` free.
fn fits(used: u64, pending: u64, limit: u64) -> bool {
    used.saturating_add(pending).saturating_add(reserve(limit)) < limit
}

/// Whether `error` is a refusal of [`admit`] or [`claim`] (a caller logs only the first of a
/// run).
pub fn is_refusal(error: &str) -> bool {
    error.starts_with("refusing a new ") && error.contains("file descriptors in use")
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

    #[test]
    fn a_claim_counts_until_dropped_and_the_last_room_is_refused() {
        // The rule: promised descriptors count like open ones.
        assert!(fits(100, 10, 256));
        assert!(
            !fits(200, 24, 256),
            "200 open + 24 promised + 32 kept reaches 256"
        );
        assert!(!fits(u64::MAX, 1, u64::MAX));
        // A small claim is held while it lives (other tests of this binary may claim too,
        // so only a lower bound is read) and a refusal names its reason.
        let c = claim("test link", 3).unwrap();
        assert!(PENDING.load(Ordering::Acquire) >= 3);
        drop(c);
        let e = "refusing a new test link: 250 of 256 file descriptors in use, the last 32 are kept for the IPC socket and open links";
        assert!(is_refusal(e));
        assert!(!is_refusal("connection refused"));
    }
}
