//! Packet-level link impairment between two network namespaces, without `sch_netem` (which
//! this kernel lacks): a TUN device in each namespace, addressed as the two ends of a
//! point-to-point link, and one thread that moves raw IP packets between them through an
//! [`Impairment`] per direction (hold each packet until `arrival + delay`, drop it with
//! probability `loss`, from a seeded RNG so runs repeat).
//!
//! Packets cross unchanged (no checksum rewriting, no TCP termination), so TCP sees the loss
//! and the delay end to end and must repair them itself, as it would on a real lossy path.
//!
//! [`Impairment`] is the sans-IO core (time is passed in, packets are byte vectors); the IO
//! shell is [`TunLink`].

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::netns::ip;

/// What a direction of the link does to its packets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Probability (0..=1) that a packet is dropped.
    pub loss: f64,
    /// How long each packet is held before it is delivered.
    pub delay: Duration,
}

impl Params {
    /// No loss, no delay.
    pub const CLEAN: Self = Self {
        loss: 0.0,
        delay: Duration::ZERO,
    };
}

/// What [`Impairment::offer`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Held for delivery.
    Queued,
    /// Dropped by the loss draw.
    Lost,
    /// Dropped because the queue was full.
    Overflow,
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Packets offered.
    pub offered: u64,
    /// Dropped by the loss draw.
    pub lost: u64,
    /// Dropped because the queue was full.
    pub overflow: u64,
    /// Handed out by [`Impairment::pop_due`].
    pub delivered: u64,
}

/// One direction's delay line: a bounded FIFO of `(due, packet)`.
#[derive(Debug)]
pub struct Impairment {
    rng: rand::rngs::StdRng,
    queue: VecDeque<(Instant, Vec<u8>)>,
    cap: usize,
    counts: Counts,
}

impl Impairment {
    /// An empty line holding at most `cap` packets, drawing losses from `seed`.
    pub fn new(seed: u64, cap: usize) -> Self {
        Self {
            rng: rand::SeedableRng::seed_from_u64(seed),
            queue: VecDeque::new(),
            cap,
            counts: Counts::default(),
        }
    }

    /// A packet arrived at `now`: drop it or hold it until `now + delay`. Due times never
    /// go backwards (a delay lowered at run time does not reorder packets already held).
    pub fn offer(&mut self, now: Instant, packet: Vec<u8>, p: Params) -> Verdict {
        self.counts.offered += 1;
        // The draw happens for every packet, so a seed gives the same pattern whatever the
        // queue's state.
        if rand::Rng::random::<f64>(&mut self.rng) < p.loss {
            self.counts.lost += 1;
            return Verdict::Lost;
        }
        if self.queue.len() >= self.cap {
            self.counts.overflow += 1;
            return Verdict::Overflow;
        }
        let mut due = now + p.delay;
        if let Some((last, _)) = self.queue.back() {
            due = due.max(*last);
        }
        self.queue.push_back((due, packet));
        Verdict::Queued
    }

    /// When the oldest held packet is due, if any.
    pub fn next_due(&self) -> Option<Instant> {
        self.queue.front().map(|(d, _)| *d)
    }

    /// The oldest held packet if it is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.queue.front().is_some_and(|(d, _)| *d <= now) {
            self.counts.delivered += 1;
            return self.queue.pop_front().map(|(_, p)| p);
        }
        None
    }

    /// Packets held now.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The counters so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }
}

/// Parameters shared with the link's thread, changeable while it runs.
#[derive(Debug, Default)]
struct Shared {
    /// Loss in parts per billion.
    loss_ppb: AtomicU32,
    delay_us: AtomicU64,
    /// Per direction (a→b, b→a): offered, lost, overflow, delivered.
    counts: [[AtomicU64; 4]; 2],
    failed: AtomicBool,
}

impl Shared {
    fn store(&self, p: Params) {
        let loss = (p.loss.clamp(0.0, 1.0) * 1e9).round() as u32;
        self.loss_ppb.store(loss, Ordering::Relaxed);
        self.delay_us
            .store(p.delay.as_micros() as u64, Ordering::Relaxed);
    }

    fn params(&self) -> Params {
        Params {
            loss: self.loss_ppb.load(Ordering::Relaxed) as f64 / 1e9,
            delay: Duration::from_micros(self.delay_us.load(Ordering::Relaxed)),
        }
    }
}

/// Most packets held per direction; more are dropped (counted as overflow).
pub const QUEUE_CAP: usize = 8192;

/// The TUN device name used in both namespaces (each namespace has its own).
pub const TUN_NAME: &str = "impair0";

/// Creates TUN device `name` (`IFF_TUN | IFF_NO_PI`) in the calling thread's network
/// namespace; the device lives as long as the returned [`tun_tap::Iface`]. Also returns a
/// non-blocking duplicate of its descriptor, for `poll` (`tun_tap` exposes only the raw fd;
/// `pidfd_getfd` on our own process turns it into an owned one without `unsafe`).
fn open_tun(name: &str) -> anyhow::Result<(tun_tap::Iface, OwnedFd)> {
    let iface = tun_tap::Iface::without_packet_info(name, tun_tap::Mode::Tun)
        .with_context(|| format!("creating TUN device {name} (/dev/net/tun, CAP_NET_ADMIN)"))?;
    anyhow::ensure!(iface.name() == name, "TUN device named {}", iface.name());
    let me = rustix::process::pidfd_open(
        rustix::process::getpid(),
        rustix::process::PidfdFlags::empty(),
    )
    .context("pidfd_open")?;
    let fd = rustix::process::pidfd_getfd(
        &me,
        iface.as_raw_fd(),
        rustix::process::PidfdGetfdFlags::empty(),
    )
    .context("pidfd_getfd")?;
    rustix::io::ioctl_fionbio(&fd, true).context("FIONBIO")?;
    Ok((iface, fd))
}

/// An impaired point-to-point IP link between namespaces `a` and `b`: TUN device
/// [`TUN_NAME`] in each, `a` at [`TunLink::A_ADDR`] and `b` at [`TunLink::B_ADDR`] (each a
/// `/32` with the other as its peer, so the route to the other end goes over the TUN), and a
/// thread relaying packets between the two through one [`Impairment`] per direction. The
/// same [`Params`] apply to both directions. Stops on drop; the devices vanish with their
/// descriptors (also when the process dies).
#[derive(Debug)]
pub struct TunLink {
    shared: Arc<Shared>,
    stop: Option<std::io::PipeWriter>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TunLink {
    /// Namespace `a`'s end.
    pub const A_ADDR: &str = "10.99.0.1";
    /// Namespace `b`'s end.
    pub const B_ADDR: &str = "10.99.0.2";

    /// Creates the devices in namespaces `a` and `b` (names under `/run/netns`), addresses
    /// them and starts relaying with `params`; `seed` fixes the loss pattern.
    pub fn open(a: &str, b: &str, params: Params, seed: u64) -> anyhow::Result<Self> {
        let (na, nb) = (
            std::fs::File::open(format!("/run/netns/{a}"))
                .with_context(|| format!("opening namespace {a}"))?,
            std::fs::File::open(format!("/run/netns/{b}"))
                .with_context(|| format!("opening namespace {b}"))?,
        );
        // `setns` moves only the calling thread, so the devices are created on a thread of
        // their own; the descriptors keep their namespace after it ends.
        type Dev = (tun_tap::Iface, OwnedFd);
        let (fa, fb) = std::thread::spawn(move || -> anyhow::Result<(Dev, Dev)> {
            let enter = |ns: &std::fs::File| {
                rustix::thread::move_into_link_name_space(
                    ns.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .context("entering a namespace")
            };
            enter(&na)?;
            let fa = open_tun(TUN_NAME)?;
            enter(&nb)?;
            let fb = open_tun(TUN_NAME)?;
            Ok((fa, fb))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the TUN setup thread panicked"))??;
        for (ns, me, peer) in [
            (a, Self::A_ADDR, Self::B_ADDR),
            (b, Self::B_ADDR, Self::A_ADDR),
        ] {
            ip(&["-n", ns, "addr", "add", me, "peer", peer, "dev", TUN_NAME])?;
            ip(&["-n", ns, "link", "set", TUN_NAME, "up"])?;
        }
        let (stop_r, stop_w) = std::io::pipe().context("pipe")?;
        let shared = Arc::new(Shared::default());
        shared.store(params);
        let relay_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("impair".into())
            .spawn(move || {
                let shared = relay_shared;
                // The interfaces are kept (and closed) with their duplicates.
                let ((_ia, fa), (_ib, fb)) = (fa, fb);
                if let Err(e) = relay(&fa, &fb, &stop_r, &shared, seed) {
                    shared.failed.store(true, Ordering::Relaxed);
                    eprintln!("impair: the relay stopped: {e:#}");
                }
            })?;
        Ok(Self {
            shared,
            stop: Some(stop_w),
            thread: Some(thread),
        })
    }

    /// Changes both directions' loss and delay from now on.
    pub fn set(&self, p: Params) {
        self.shared.store(p);
    }

    /// The parameters in force.
    pub fn params(&self) -> Params {
        self.shared.params()
    }

    /// Counters per direction: `[a→b, b→a]`.
    pub fn counts(&self) -> [Counts; 2] {
        let c = |d: usize| {
            let v = &self.shared.counts[d];
            Counts {
                offered: v[0].load(Ordering::Relaxed),
                lost: v[1].load(Ordering::Relaxed),
                overflow: v[2].load(Ordering::Relaxed),
                delivered: v[3].load(Ordering::Relaxed),
            }
        };
        [c(0), c(1)]
    }

    /// True if the relay thread stopped on an error.
    pub fn failed(&self) -> bool {
        self.shared.failed.load(Ordering::Relaxed)
    }
}

impl Drop for TunLink {
    fn drop(&mut self) {
        // Closing the write end makes the read end readable (end of file): the thread stops.
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Most packets read from one device per wakeup, so one busy direction cannot starve the
/// other or the timer.
const READ_BURST: usize = 64;

/// The relay loop: wait (`ppoll`) until a device is readable, the stop pipe closes or the
/// next held packet is due; read what arrived into its direction's line; write what is due
/// to the other device.
fn relay(
    fa: &OwnedFd,
    fb: &OwnedFd,
    stop: &std::io::PipeReader,
    shared: &Shared,
    seed: u64,
) -> anyhow::Result<()> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let devs = [fa, fb];
    let mut lines = [
        Impairment::new(seed, QUEUE_CAP),
        Impairment::new(seed ^ 0x5555_5555_5555_5555, QUEUE_CAP),
    ];
    let mut buf = vec![0u8; 65536];
    loop {
        let now = Instant::now();
        let wait = lines
            .iter()
            .filter_map(Impairment::next_due)
            .min()
            .map(|d| d.saturating_duration_since(now));
        let ts = wait.map(|w| Timespec {
            tv_sec: w.as_secs() as _,
            tv_nsec: w.subsec_nanos() as _,
        });
        let mut pfds = [
            PollFd::new(fa, PollFlags::IN),
            PollFd::new(fb, PollFlags::IN),
            PollFd::new(stop, PollFlags::IN),
        ];
        match rustix::event::poll(&mut pfds, ts.as_ref()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e).context("poll"),
        }
        let rev: Vec<PollFlags> = pfds.iter().map(PollFd::revents).collect();
        if !rev[2].is_empty() {
            // The write end closed: stop.
            return Ok(());
        }
        let p = shared.params();
        for d in 0..2 {
            if rev[d].intersects(PollFlags::ERR | PollFlags::NVAL) {
                bail!("TUN device {d} reported {:?}", rev[d]);
            }
            if !rev[d].contains(PollFlags::IN) {
                continue;
            }
            for _ in 0..READ_BURST {
                let n = match rustix::io::read(devs[d], &mut buf[..]) {
                    Ok(n) => n,
                    Err(rustix::io::Errno::AGAIN) => break,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(e).context("reading a TUN device"),
                };
                let k = match lines[d].offer(Instant::now(), buf[..n].to_vec(), p) {
                    Verdict::Queued => 0,
                    Verdict::Lost => 1,
                    Verdict::Overflow => 2,
                };
                shared.counts[d][0].fetch_add(1, Ordering::Relaxed);
                if k > 0 {
                    shared.counts[d][k].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let now = Instant::now();
        for d in 0..2 {
            let out = devs[1 - d];
            // Bounded by the queue's length.
            for _ in 0..lines[d].len() {
                let Some(pkt) = lines[d].pop_due(now) else {
                    break;
                };
                // Counted before the write: the receiver may answer, and a test read the
                // counts, before this thread runs again (the count must never lag a packet
                // the far side has already seen).
                shared.counts[d][3].fetch_add(1, Ordering::Relaxed);
                match rustix::io::write(out, &pkt) {
                    // A full device queue drops the packet, as a congested link would.
                    Ok(_) | Err(rustix::io::Errno::AGAIN) => {}
                    Err(e) => return Err(e).context("writing a TUN device"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(loss: f64, ms: u64) -> Params {
        Params {
            loss,
            delay: Duration::from_millis(ms),
        }
    }

    #[test]
    fn a_packet_is_held_until_its_delay_has_passed() {
        let mut line = Impairment::new(1, 16);
        let t0 = Instant::now();
        assert_eq!(line.offer(t0, vec![1], p(0.0, 100)), Verdict::Queued);
        assert_eq!(line.next_due(), Some(t0 + Duration::from_millis(100)));
        assert_eq!(line.pop_due(t0 + Duration::from_millis(99)), None);
        assert_eq!(line.pop_due(t0 + Duration::from_millis(100)), Some(vec![1]));
        assert!(line.is_empty());
        assert_eq!(line.next_due(), None);
    }

    #[test]
    fn zero_delay_is_due_at_once_and_order_is_kept() {
        let mut line = Impairment::new(1, 16);
        let t0 = Instant::now();
        for i in 0..5u8 {
            line.offer(t0, vec![i], Params::CLEAN);
        }
        let got: Vec<u8> = std::iter::from_fn(|| line.pop_due(t0))
            .map(|v| v[0])
            .collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_lowered_delay_does_not_reorder_packets() {
        let mut line = Impairment::new(1, 16);
        let t0 = Instant::now();
        line.offer(t0, vec![1], p(0.0, 100));
        line.offer(t0 + Duration::from_millis(1), vec![2], p(0.0, 0));
        // The second is not overtaking the first: it is due with it.
        assert_eq!(line.pop_due(t0 + Duration::from_millis(50)), None);
        let at = t0 + Duration::from_millis(100);
        assert_eq!(line.pop_due(at), Some(vec![1]));
        assert_eq!(line.pop_due(at), Some(vec![2]));
    }

    #[test]
    fn the_loss_rate_matches_the_probability() {
        let mut line = Impairment::new(42, 1);
        let t0 = Instant::now();
        let n = 200_000;
        for _ in 0..n {
            line.offer(t0, Vec::new(), p(0.05, 0));
            line.pop_due(t0);
        }
        let c = line.counts();
        let rate = c.lost as f64 / n as f64;
        assert!((rate - 0.05).abs() < 0.003, "loss rate {rate}");
        assert_eq!(c.offered, n);
        assert_eq!(c.lost + c.delivered + c.overflow, n);
    }

    #[test]
    fn no_loss_drops_nothing_and_full_loss_drops_everything() {
        let t0 = Instant::now();
        let mut line = Impairment::new(7, 10_000);
        for _ in 0..5_000 {
            assert_eq!(line.offer(t0, Vec::new(), Params::CLEAN), Verdict::Queued);
        }
        let mut line = Impairment::new(7, 10_000);
        for _ in 0..5_000 {
            assert_eq!(line.offer(t0, Vec::new(), p(1.0, 0)), Verdict::Lost);
        }
    }

    #[test]
    fn a_seed_gives_the_same_pattern_and_another_seed_a_different_one() {
        let t0 = Instant::now();
        let pattern = |seed| {
            let mut line = Impairment::new(seed, usize::MAX);
            (0..1_000)
                .map(|_| line.offer(t0, Vec::new(), p(0.3, 10)) == Verdict::Lost)
                .collect::<Vec<_>>()
        };
        assert_eq!(pattern(9), pattern(9));
        assert_ne!(pattern(9), pattern(10));
    }

    #[test]
    fn a_full_queue_drops_and_counts_the_overflow() {
        let mut line = Impairment::new(3, 2);
        let t0 = Instant::now();
        assert_eq!(line.offer(t0, vec![1], p(0.0, 10)), Verdict::Queued);
        assert_eq!(line.offer(t0, vec![2], p(0.0, 10)), Verdict::Queued);
        assert_eq!(line.offer(t0, vec![3], p(0.0, 10)), Verdict::Overflow);
        assert_eq!(line.counts().overflow, 1);
        assert_eq!(line.len(), 2);
    }
}
