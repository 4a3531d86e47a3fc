//! Connection hygiene on the TCP listener: a deadline for the first request's headers, an
//! idle deadline, and a cap on open connections per client address.
//!
//! hyper's own `header_read_timeout` covers only HTTP/1 heads it has started to parse; a
//! connection that sends nothing at all sits in the auto builder's protocol sniff, which has
//! no deadline. So each connection carries an [`Activity`] record, updated by its IO
//! ([`Watched`]) and by its service (requests seen and in flight), and a watchdog beside the
//! connection future closes it when the first request has not arrived in time or when it has
//! been idle too long. The per-address slot is held by the IO itself, so an upgraded
//! WebSocket keeps counting until it ends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The limits of one TCP listener's connections, read from tuning when it starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnLimits {
    /// The first request's headers must be in by then.
    pub header_read: Duration,
    /// No request in flight and no traffic for this long closes the connection.
    pub idle: Duration,
    /// Open connections per client address.
    pub per_address: usize,
}

impl ConnLimits {
    pub(crate) fn from_tuning(t: &crate::config::Tuning) -> Self {
        Self {
            header_read: Duration::from_millis(t.header_read_timeout_ms.max(1)),
            idle: Duration::from_millis(t.idle_connection_timeout_ms.max(1)),
            per_address: t.connections_per_address.max(1),
        }
    }
}

/// Open connections per client address.
#[derive(Debug, Default)]
pub(crate) struct AddressSlots {
    /// Address → (open connections, refused one since it was last under its cap).
    open: Mutex<HashMap<IpAddr, (usize, bool)>>,
}

/// One connection's claim on its address's count; released on drop.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Arc<AddressSlots>,
    ip: IpAddr,
}

/// A refused claim: the address already holds `limit` connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OverCap {
    /// Whether this is the first refusal since the address was last under its cap (log it).
    pub first: bool,
}

impl AddressSlots {
    /// Claims a slot for `ip`, unless it already holds `limit`.
    pub(crate) fn claim(self: &Arc<Self>, ip: IpAddr, limit: usize) -> Result<Slot, OverCap> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let (n, refused) = open.entry(ip).or_default();
        if *n >= limit {
            // A flood logs one line, not one per connection; the mark goes with a release.
            let first = !*refused;
            *refused = true;
            return Err(OverCap { first });
        }
        *n += 1;
        Ok(Slot {
            slots: self.clone(),
            ip,
        })
    }

    /// Open connections from `ip` (for tests and logs).
    #[cfg(test)]
    pub(crate) fn open(&self, ip: IpAddr) -> usize {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&ip)
            .map_or(0, |(n, _)| *n)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((n, refused)) = open.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            *refused = false;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// What a connection's watchdog reads: when it opened, its last traffic, its requests.
#[derive(Debug)]
pub(crate) struct Activity {
    opened: Instant,
    /// Milliseconds after `opened` of the last byte read or written.
    last_ms: AtomicU64,
    /// Requests whose headers arrived.
    requests: AtomicU64,
    /// Requests the service has not answered yet.
    in_flight: AtomicUsize,
}

/// What the watchdog decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Look again at this instant.
    Recheck(Instant),
    /// No request headers arrived within the header deadline.
    HeaderTimeout,
    /// Nothing in flight and no traffic for the idle deadline.
    Idle,
}

impl Activity {
    pub(crate) fn new(now: Instant) -> Arc<Self> {
        Arc::new(Self {
            opened: now,
            last_ms: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        })
    }

    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// A request's headers arrived (the service was called).
    pub(crate) fn request_started(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.touch();
    }

    /// The service answered a request (a streamed body counts as traffic from here on).
    pub(crate) fn request_answered(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.touch();
    }

    /// Judges the connection at `now`.
    pub(crate) fn verdict(&self, limits: &ConnLimits, now: Instant) -> Verdict {
        if self.requests.load(Ordering::Relaxed) == 0 {
            let deadline = self.opened + limits.header_read;
            return if now >= deadline {
                Verdict::HeaderTimeout
            } else {
                Verdict::Recheck(deadline)
            };
        }
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return Verdict::Recheck(now + limits.idle);
        }
        let last = self.opened + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        let deadline = last + limits.idle;
        if now >= deadline {
            Verdict::Idle
        } else {
            Verdict::Recheck(deadline)
        }
    }
}

/// A connection's IO that records its traffic and holds its address slot.
#[derive(Debug)]
pub(crate) struct Watched<I> {
    io: I,
    activity: Arc<Activity>,
    _slot: Option<Slot>,
}

impl<I> Watched<I> {
    pub(crate) fn new(io: I, activity: Arc<Activity>, slot: Option<Slot>) -> Self {
        Self {
            io,
            activity,
            _slot: slot,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConnLimits {
        ConnLimits {
            header_read: Duration::from_secs(2),
            idle: Duration::from_secs(10),
            per_address: 2,
        }
    }

    #[test]
    fn silent_connection_times_out_at_the_header_deadline() {
        let t0 = Instant::now();
        let a = Activity::new(t0);
        assert_eq!(
            a.verdict(&limits(), t0),
            Verdict::Recheck(t0 + Duration::from_secs(2))
        );
        assert_eq!(
            a.verdict(&limits(), t0 + Duration::from_secs(2)),
            Verdict::HeaderTimeout
        );
    }

    #[test]
    fn a_request_in_flight_is_never_idle_and_idle_counts_from_the_last_traffic() {
        let t0 = Instant::now();
        let a = Activity::new(t0);
        a.request_started();
        let late = t0 + Duration::from_secs(3600);
        assert!(matches!(a.verdict(&limits(), late), Verdict::Recheck(_)));
        a.request_answered();
        // The answer touched the clock at about t0; an hour later the connection is idle.
        assert_eq!(a.verdict(&limits(), late), Verdict::Idle);
    }

    #[test]
    fn address_cap_refuses_past_the_limit_and_frees_on_drop() {
        let slots = Arc::new(AddressSlots::default());
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let a = slots.claim(ip, 2).unwrap();
        let _b = slots.claim(ip, 2).unwrap();
        assert!(slots.claim(ip, 2).unwrap_err().first);
        assert!(!slots.claim(ip, 2).unwrap_err().first, "logged once");
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(slots.claim(other, 2).is_ok());
        drop(a);
        assert_eq!(slots.open(ip), 1);
        let _c = slots.claim(ip, 2).unwrap();
        assert!(
            slots.claim(ip, 2).unwrap_err().first,
            "a new flood logs again"
        );
    }
}
