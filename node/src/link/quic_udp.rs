//! The QUIC listener's UDP socket, watched: datagrams that cannot be QUIC packets for this node
//! are counted and logged, at most one line per source and interval
//! (`tuning.quic_garbage_log_ms`), as `quic: dropped N undecodable datagrams from ADDR`.
//!
//! quinn drops such datagrams silently (a trace line at most), so a peer spraying garbage at
//! the port would leave no trace. [`WatchedSocket`] wraps the runtime's socket and passes
//! every datagram on unchanged; it only classifies them with the checks quinn's endpoint makes
//! before it drops one ([`undecodable`]): the fixed bit (greasing is off on the node's
//! endpoint), version 1 for a long header, connection-id lengths, the 1200-byte minimum of an
//! Initial, and the signature of the node's own connection ids (`HashedConnectionIdGenerator`,
//! keyed by the node's certificate) for short-header and Handshake packets. It does not drop,
//! answer or rate-limit anything itself.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use quinn_proto::{ConnectionId, ConnectionIdGenerator, HashedConnectionIdGenerator};

/// The length of the node's connection ids (`HashedConnectionIdGenerator`).
const CID_LEN: usize = 8;
/// QUIC's longest connection id.
const MAX_CID_LEN: usize = 20;
/// A client pads every datagram that carries an Initial packet to this size.
const MIN_INITIAL: usize = 1200;
/// The shortest packet quinn can do anything with (a stateless reset's minimum).
const MIN_SHORT: usize = 21;
/// Sources remembered between two log lines; more are summed as "other addresses".
const MAX_SOURCES: usize = 64;

/// Whether `d` cannot be a QUIC v1 packet for this node, by quinn's endpoint's own checks.
pub fn undecodable(d: &[u8], cids: &HashedConnectionIdGenerator) -> bool {
    let valid_cid = |c: &[u8]| c.len() == CID_LEN && cids.validate(&ConnectionId::new(c)).is_ok();
    let Some(&first) = d.first() else {
        return true;
    };
    if first & 0x40 == 0 {
        return true;
    }
    if first & 0x80 == 0 {
        return d.len() < MIN_SHORT || !valid_cid(&d[1..1 + CID_LEN]);
    }
    if d.len() < 7 || d[1..5] != [0, 0, 0, 1] {
        return true;
    }
    let dcid_len = usize::from(d[5]);
    let Some(&scid_len) = d.get(6 + dcid_len) else {
        return true;
    };
    if dcid_len > MAX_CID_LEN || usize::from(scid_len) > MAX_CID_LEN {
        return true;
    }
    let dcid = &d[6..6 + dcid_len];
    match (first >> 4) & 0x3 {
        0 => d.len() < MIN_INITIAL,
        1 => false,
        2 => !valid_cid(dcid),
        // A Retry only ever goes from a server to a client.
        _ => true,
    }
}

/// Counts of undecodable datagrams since the last log line.
#[derive(Debug, Default)]
struct Tally {
    by_source: HashMap<SocketAddr, u64>,
    other: u64,
    last_log: Option<Instant>,
}

/// The undecodable datagrams seen, and when they were last logged.
pub struct Garbage {
    cids: HashedConnectionIdGenerator,
    interval: Duration,
    tally: Mutex<Tally>,
    total: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for Garbage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Garbage")
            .field("interval", &self.interval)
            .field("total", &self.total())
            .finish_non_exhaustive()
    }
}

impl Garbage {
    /// A tally for an endpoint whose connection ids are keyed with `cid_key`, logging at most
    /// once per `interval`.
    pub fn new(cid_key: u64, interval: Duration) -> Self {
        Self {
            cids: HashedConnectionIdGenerator::from_key(cid_key),
            interval,
            tally: Mutex::new(Tally::default()),
            total: Default::default(),
        }
    }

    /// Undecodable datagrams since the listener started.
    pub fn total(&self) -> u64 {
        self.total.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn count(&self, from: SocketAddr, n: u64) {
        self.total
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        if t.by_source.len() < MAX_SOURCES || t.by_source.contains_key(&from) {
            *t.by_source.entry(from).or_default() += n;
        } else {
            t.other += n;
        }
        // The first batch after a quiet interval is logged at once; the rest by `flush`.
        if t.last_log.is_none_or(|l| l.elapsed() >= self.interval) {
            Self::log(&mut t);
        }
    }

    /// Logs what was counted since the last line, if the interval has passed; the listener
    /// calls it every interval so a burst that stopped is still reported.
    pub fn flush(&self) {
        let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        if t.last_log.is_none_or(|l| l.elapsed() >= self.interval) {
            Self::log(&mut t);
        }
    }

    fn log(t: &mut Tally) {
        if t.by_source.is_empty() && t.other == 0 {
            return;
        }
        for (from, n) in t.by_source.drain() {
            tracing::warn!(listener = "quic", %from, dropped = n, "quic: dropped {n} undecodable datagrams from {from}");
        }
        if t.other > 0 {
            let n = std::mem::take(&mut t.other);
            tracing::warn!(
                listener = "quic",
                dropped = n,
                "quic: dropped {n} undecodable datagrams from other addresses"
            );
        }
        t.last_log = Some(Instant::now());
    }

    /// Classifies the datagrams of one receive (GRO batches split at `stride`).
    fn inspect(&self, buf: &[u8], meta: &RecvMeta) {
        let data = &buf[..meta.len.min(buf.len())];
        let stride = meta.stride.max(1);
        let bad = data
            .chunks(stride)
            .filter(|d| undecodable(d, &self.cids))
            .count() as u64;
        if bad > 0 {
            self.count(meta.addr, bad);
        }
    }
}

/// A UDP socket that reports undecodable datagrams to a [`Garbage`] tally.
#[derive(Debug)]
pub struct WatchedSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    garbage: Arc<Garbage>,
}

impl WatchedSocket {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn AsyncUdpSocket>, garbage: Arc<Garbage>) -> Self {
        Self { inner, garbage }
    }
}

impl AsyncUdpSocket for WatchedSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let r = self.inner.poll_recv(cx, bufs, meta);
        if let Poll::Ready(Ok(n)) = &r {
            for (buf, m) in bufs.iter().zip(meta.iter()).take(*n) {
                self.garbage.inspect(buf, m);
            }
        }
        r
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short(cid: &[u8]) -> Vec<u8> {
        let mut p = vec![0x40];
        p.extend_from_slice(cid);
        p.resize(40, 0xaa);
        p
    }

    fn long(kind: u8, version: [u8; 4], dcid: &[u8], len: usize) -> Vec<u8> {
        let mut p = vec![0xc0 | (kind << 4)];
        p.extend_from_slice(&version);
        p.push(dcid.len() as u8);
        p.extend_from_slice(dcid);
        p.push(8);
        p.extend_from_slice(&[7; 8]);
        p.resize(len, 0);
        p
    }

    #[test]
    fn quic_shaped_packets_pass_and_garbage_does_not() {
        let mut g = HashedConnectionIdGenerator::from_key(42);
        let ours = g.generate_cid();
        let theirs = [9u8; 8];
        let v1 = [0, 0, 0, 1];
        let cases: &[(&str, Vec<u8>, bool)] = &[
            ("empty", vec![], true),
            ("fixed bit clear", vec![0x00; 100], true),
            ("short header, our cid", short(&ours), false),
            ("short header, a forged cid", short(&theirs), true),
            ("short header, too short", short(&ours)[..12].to_vec(), true),
            ("initial, padded", long(0, v1, &theirs, 1200), false),
            ("initial, unpadded", long(0, v1, &theirs, 300), true),
            (
                "initial, unknown version",
                long(0, [1, 2, 3, 4], &theirs, 1200),
                true,
            ),
            ("handshake, our cid", long(2, v1, &ours, 300), false),
            ("handshake, a forged cid", long(2, v1, &theirs, 300), true),
            ("0-rtt", long(1, v1, &theirs, 300), false),
            ("retry from a client", long(3, v1, &ours, 300), true),
            ("cid length over 20", long(0, v1, &[1; 21], 1200), true),
            ("truncated long header", vec![0xc0, 0, 0, 0, 1, 20], true),
        ];
        for (name, p, want) in cases {
            assert_eq!(undecodable(p, &g), *want, "{name}");
        }
    }

    #[test]
    fn a_burst_is_one_line_per_source_and_interval() {
        let g = Garbage::new(1, Duration::from_secs(3600));
        let a: SocketAddr = "10.0.0.1:5".parse().unwrap();
        g.count(a, 1);
        g.count(a, 5);
        g.flush();
        assert_eq!(g.total(), 6);
        let t = g.tally.lock().unwrap();
        // The first datagram was logged at once; the next five wait for the interval.
        assert_eq!(t.by_source.get(&a), Some(&5));
        assert!(t.last_log.is_some());
    }
}
