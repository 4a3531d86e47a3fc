//! The raw output stream of one session: the raw ring (the last 2 MiB, allocated as it fills)
//! and the live subscribers' read positions into it.
//!
//! Each subscriber is a cursor. The reader appends and never waits; a subscriber copies from
//! its cursor when woken. Chunks a subscriber still needs are kept beyond the ring up to a
//! per-subscriber lag bound; past that the subscriber is told how many bytes it missed and
//! resumes at the oldest retained byte. Pure data structure: no threads, no wakeups.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Bytes the raw ring retains.
pub const RING_BYTES: u64 = 2 * 1024 * 1024;

/// How far a subscriber may fall behind the newest byte before it is resynchronised.
pub const MAX_LAG_BYTES: u64 = 16 * 1024 * 1024;

/// Allocation unit: chunks are filled before a new one is allocated.
const CHUNK: usize = 16 * 1024;

/// Retained raw output and subscriber cursors.
#[derive(Debug, Default)]
pub struct Backlog {
    chunks: VecDeque<Vec<u8>>,
    /// Offset of the first byte of `chunks[0]`.
    base: u64,
    /// Bytes ever appended.
    total: u64,
    subs: Vec<Weak<AtomicU64>>,
}

/// What a subscriber gets from one read.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// Bytes from the cursor (possibly empty: caught up).
    Data(Vec<u8>),
    /// The subscriber fell too far behind: `missed` bytes were evicted; the cursor moved to
    /// the oldest retained byte.
    Lagged { missed: u64 },
}

impl Backlog {
    /// An empty backlog whose next byte is at `offset` (a re-adopted session continues the
    /// offsets its holder counted).
    pub fn starting_at(offset: u64) -> Self {
        Self {
            base: offset,
            total: offset,
            ..Self::default()
        }
    }

    /// Appends output and trims what nobody needs any more.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        while !bytes.is_empty() {
            match self.chunks.back_mut() {
                Some(c) if c.len() < c.capacity() => {
                    let n = (c.capacity() - c.len()).min(bytes.len());
                    c.extend_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                }
                _ => {
                    let mut c = Vec::with_capacity(CHUNK.max(bytes.len().min(CHUNK * 4)));
                    let n = c.capacity().min(bytes.len());
                    c.extend_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    self.chunks.push_back(c);
                }
            }
        }
        self.trim();
    }

    fn trim(&mut self) {
        let ring_floor = self.total.saturating_sub(RING_BYTES);
        let lag_floor = self.total.saturating_sub(MAX_LAG_BYTES);
        self.subs.retain(|w| w.strong_count() > 0);
        let slowest = self
            .subs
            .iter()
            .filter_map(Weak::upgrade)
            .map(|c| c.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        let keep_from = ring_floor.min(slowest.max(lag_floor));
        while let Some(front) = self.chunks.front() {
            let end = self.base + front.len() as u64;
            if end > keep_from || self.chunks.len() == 1 {
                break;
            }
            self.base = end;
            self.chunks.pop_front();
        }
    }

    /// Bytes ever appended.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The first offset of the raw ring (the last ≤ 2 MiB).
    pub fn ring_start(&self) -> u64 {
        self.base.max(self.total.saturating_sub(RING_BYTES))
    }

    /// A copy of `[from, to)`, clamped to what is retained.
    pub fn copy_range(&self, from: u64, to: u64) -> Vec<u8> {
        let from = from.max(self.base);
        let to = to.min(self.total);
        let mut out = Vec::with_capacity(to.saturating_sub(from) as usize);
        let mut at = self.base;
        for c in &self.chunks {
            let end = at + c.len() as u64;
            if end > from && at < to {
                let s = from.saturating_sub(at) as usize;
                let e = (to.min(end) - at) as usize;
                out.extend_from_slice(&c[s..e]);
            }
            at = end;
            if at >= to {
                break;
            }
        }
        out
    }

    /// The raw ring: the last ≤ 2 MiB.
    pub fn ring(&self) -> Vec<u8> {
        self.copy_range(self.ring_start(), self.total)
    }

    /// Registers a subscriber reading from `from` (clamped to what is retained).
    pub fn subscribe(&mut self, from: u64) -> Arc<AtomicU64> {
        let c = Arc::new(AtomicU64::new(from.clamp(self.base, self.total)));
        self.subs.push(Arc::downgrade(&c));
        c
    }

    /// Reads up to `max` bytes at the subscriber's cursor and advances it.
    pub fn read(&self, cursor: &AtomicU64, max: usize) -> Read {
        let at = cursor.load(Ordering::Acquire);
        if at < self.base {
            cursor.store(self.base, Ordering::Release);
            return Read::Lagged {
                missed: self.base - at,
            };
        }
        let to = self.total.min(at + max as u64);
        let data = self.copy_range(at, to);
        cursor.store(to, Ordering::Release);
        Read::Data(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_last_two_mib_exactly() {
        let mut b = Backlog::default();
        let mut all = Vec::new();
        for i in 0..700u32 {
            let chunk: Vec<u8> = (0..(i % 13 + 1) * 517).map(|j| (i + j) as u8).collect();
            all.extend_from_slice(&chunk);
            b.push(&chunk);
        }
        let ring = b.ring();
        assert_eq!(ring.len() as u64, RING_BYTES.min(all.len() as u64));
        assert_eq!(&ring[..], &all[all.len() - ring.len()..]);
        assert_eq!(b.total(), all.len() as u64);
    }

    #[test]
    fn a_slow_subscriber_keeps_bytes_until_its_lag_bound_then_is_told() {
        let mut b = Backlog::default();
        let cur = b.subscribe(0);
        let block = vec![7u8; 1024 * 1024];
        for _ in 0..8 {
            b.push(&block);
        }
        // Within the lag bound: everything is still there.
        let mut got = 0;
        while let Read::Data(d) = b.read(&cur, 1 << 20) {
            if d.is_empty() {
                break;
            }
            got += d.len();
        }
        assert_eq!(got, 8 << 20);
        // Past the bound: told, then resumes.
        for _ in 0..(MAX_LAG_BYTES / (1 << 20) + 4) {
            b.push(&block);
        }
        match b.read(&cur, 1 << 20) {
            Read::Lagged { missed } => assert!(missed > 0),
            other => panic!("expected lag, got {other:?}"),
        }
        assert!(matches!(b.read(&cur, 10), Read::Data(d) if d.len() == 10));
    }

    #[test]
    fn dropped_subscribers_release_memory() {
        let mut b = Backlog::default();
        let cur = b.subscribe(0);
        b.push(&vec![1u8; 6 << 20]);
        drop(cur);
        b.push(b"x");
        let retained: usize = b.chunks.iter().map(Vec::len).sum();
        assert!(
            retained as u64 <= RING_BYTES + 4 * CHUNK as u64,
            "{retained}"
        );
    }
}
