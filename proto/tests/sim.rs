//! A seeded deterministic simulator of federated mail: one hub and two nodes built from the
//! sans-IO cores (`PeerLink`, `Outbox`, `DedupeRings`, `Inboxes`), virtual time, per-frame
//! latency, partitions, connection resets, process crashes and restarts.
//!
//! A connection is modelled like a WebSocket over TCP: frames arrive in order; during a
//! partition they are held (TCP retransmits) and, if liveness gives up first, the connection
//! dies with them. A reset drops whatever was on the wire. A crashed process loses its memory
//! (inboxes) and reloads what it persisted (outboxes and dedupe rings, as `redb` would hold
//! them: serialized and deserialized).
//!
//! Checked on every step: each outbox stays within its count and byte bounds and its
//! per-recipient dispatch window. Checked at the end, after healing every fault and running
//! until quiet: nothing the sender saw accepted is lost (delivered or refused back to the
//! sender), nothing is delivered twice, and no agent that keeps reading ever has unread mail
//! evicted (inboxes are small, so full ones hold forwarded mail at the previous hop).

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use common::sim::{Answer, Relayed};
use common::{Rng, peer_entry as entry};
use tuic_proto::mail::Inboxes;
use tuic_proto::peer::{
    Backoff, CutThroughWaits, DedupeRings, ErrorCode, LinkEvent, LinkState, Outbox, OutboxError,
    OutboxEvent, OutboxLimits, PeerEntry, Receipt, ReceiptOutcome, Relay, RelayOutput, Request,
    Response, SenderOutcome, Settled, Step, UplinkOutput, WireMessage, deliver,
};

const NODES: [&str; 2] = ["b", "c"];
/// A small inbox, so bursts after a partition or restart fill it and the destination holds
/// forwarded mail at the previous hop (`recipient_full`) instead of evicting unread mail.
const SIM_INBOX: usize = 4;
/// The housekeeping tick on which both ends let held mail go out again.
const RESUME_MS: u64 = 500;
const AGENTS: usize = 2;
const TRAFFIC_MS: u64 = 60_000;
/// After the traffic phase, every fault is healed; this much virtual time to become quiet.
const SETTLE_MS: u64 = 30 * 60_000;
/// How long the hub's relay step waits for the destination's answer before it answers
/// `accepted` (the hub's `CUT_THROUGH`).
const CUT_THROUGH_MS: u64 = 20;

/// A connection whose frames travel as text (WebSocket).
type Conn = common::sim::Conn<String>;

struct Node {
    name: &'static str,
    up: bool,
    restart_at: u64,
    inboxes: Inboxes,
    dedupe: DedupeRings,
    outbox: Outbox,
    persisted: Option<(String, String)>,
    /// The hub's directory as this node last heard it.
    directory: Vec<PeerEntry>,
}

impl Node {
    fn agents(&self) -> Vec<String> {
        (0..AGENTS).map(|i| format!("{}{i}", self.name)).collect()
    }

    /// A (re)started process: its agents register and read at once, as agents do.
    fn fresh_inboxes(&mut self, now: u64) {
        self.inboxes = Inboxes::with_capacity(SIM_INBOX);
        for a in self.agents() {
            self.inboxes.register(&a);
            self.inboxes.inbox(now, &a, None, None).expect("registered");
        }
    }
}

struct Hub {
    up: bool,
    restart_at: u64,
    /// The hub's relay (its outboxes, shadows and live links): the real one the hub runs.
    relay: Relay,
    backoff: BTreeMap<String, Backoff>,
    next_dial: BTreeMap<String, u64>,
    /// The hub's own peers (`local/h0`, `local/h1`).
    inboxes: Inboxes,
    dedupe: DedupeRings,
    persisted: Option<(BTreeMap<String, String>, String)>,
}

impl Hub {
    fn fresh_inboxes(&mut self, now: u64) {
        self.inboxes = Inboxes::with_capacity(SIM_INBOX);
        for a in 0..AGENTS {
            let a = format!("h{a}");
            self.inboxes.register(&a);
            self.inboxes.inbox(now, &a, None, None).expect("registered");
        }
    }

    /// The hub's own peers, as its directory lists them.
    fn entries() -> Vec<PeerEntry> {
        (0..AGENTS).map(|a| entry(format!("h{a}"))).collect()
    }
}

/// Counts over one or many seeds.
#[derive(Debug, Default, Clone)]
struct Stats {
    seeds: u64,
    sent: u64,
    accepted: u64,
    refused_at_send: u64,
    refused_later: u64,
    delivered: u64,
    duplicate_acks: u64,
    duplicated: u64,
    lost_before_delivery: u64,
    delivered_then_lost_with_memory: u64,
    uncertain_reports: u64,
    forged_rejected: u64,
    reposts: u64,
    receipts_delivered: u64,
    /// Destination answers a waiting relay step passed straight back (cut-through).
    cut_through: u64,
    /// Relay steps whose wait ran out: answered `accepted`, the answer became a receipt.
    cut_through_expired: u64,
    /// `recipient_full` answers: a destination held forwarded mail at the previous hop.
    held: u64,
    /// Unread mail evicted from a reading recipient's inbox (must stay 0).
    missed: u64,
    reads: u64,
    frames: u64,
    reordered_seeds: u64,
    /// Resends refused and reported uncertain: delivered by an earlier attempt, or not.
    refused_on_retry_delivered: u64,
    refused_on_retry_undelivered: u64,
    resets: u64,
    partitions: u64,
    node_crashes: u64,
    hub_crashes: u64,
    max_outbox_len: usize,
    virtual_ms: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.seeds += o.seeds;
        self.sent += o.sent;
        self.accepted += o.accepted;
        self.refused_at_send += o.refused_at_send;
        self.refused_later += o.refused_later;
        self.delivered += o.delivered;
        self.duplicate_acks += o.duplicate_acks;
        self.duplicated += o.duplicated;
        self.lost_before_delivery += o.lost_before_delivery;
        self.delivered_then_lost_with_memory += o.delivered_then_lost_with_memory;
        self.uncertain_reports += o.uncertain_reports;
        self.forged_rejected += o.forged_rejected;
        self.reposts += o.reposts;
        self.receipts_delivered += o.receipts_delivered;
        self.cut_through += o.cut_through;
        self.cut_through_expired += o.cut_through_expired;
        self.held += o.held;
        self.missed += o.missed;
        self.reads += o.reads;
        self.frames += o.frames;
        self.reordered_seeds += o.reordered_seeds;
        self.refused_on_retry_delivered += o.refused_on_retry_delivered;
        self.refused_on_retry_undelivered += o.refused_on_retry_undelivered;
        self.resets += o.resets;
        self.partitions += o.partitions;
        self.node_crashes += o.node_crashes;
        self.hub_crashes += o.hub_crashes;
        self.max_outbox_len = self.max_outbox_len.max(o.max_outbox_len);
        self.virtual_ms += o.virtual_ms;
    }
}

struct Sim {
    seed: u64,
    rng: Rng,
    now: u64,
    limits: OutboxLimits,
    /// Frames within a connection may be reordered (one seed in five).
    reorder: bool,
    nodes: Vec<Node>,
    hub: Hub,
    conns: BTreeMap<String, Conn>,
    partitioned_until: BTreeMap<String, u64>,
    accepted: BTreeSet<String>,
    refused: BTreeSet<String>,
    delivered: BTreeMap<String, u32>,
    next_msg: u64,
    /// Recently accepted mail per node, for lifecycle-style re-posts with the same identity.
    recent: Vec<VecDeque<WireMessage>>,
    reposted: BTreeSet<String>,
    /// Mail whose resend was refused: the sender was told the outcome is uncertain.
    uncertain_final: BTreeSet<String>,
    /// Every `to` an outbox can hold (node-side addresses and hub-side peer ids).
    recipients: Vec<String>,
    stats: Stats,
    /// Receipts the relay routed this step, sent once the connections are all in place.
    receipts: Vec<(String, Receipt)>,
    /// Relay steps waiting for the destination's answer (cut-through), by message id: the
    /// previous hop's connection, link generation and request id.
    cut_through: CutThroughWaits<(String, u64, u64)>,
}

impl Sim {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        // Most seeds use tight bounds; every fourth uses the spec's.
        let limits = common::sim::seeded_limits(seed.is_multiple_of(4), &mut rng);
        let nodes = NODES
            .iter()
            .map(|&name| {
                let mut n = Node {
                    name,
                    up: true,
                    restart_at: 0,
                    inboxes: Inboxes::new(),
                    dedupe: DedupeRings::new(),
                    outbox: Outbox::with_limits(name, limits),
                    persisted: None,
                    directory: Vec::new(),
                };
                n.fresh_inboxes(0);
                n
            })
            .collect();
        let hub = Hub {
            up: true,
            restart_at: 0,
            relay: {
                let mut r = Relay::new();
                for n in NODES {
                    r.insert_outbox(n, Outbox::with_limits(n, limits));
                }
                r
            },
            backoff: NODES
                .iter()
                .map(|&n| (n.to_owned(), Backoff::new()))
                .collect(),
            next_dial: NODES.iter().map(|&n| (n.to_owned(), 0)).collect(),
            inboxes: Inboxes::new(),
            dedupe: DedupeRings::new(),
            persisted: None,
        };
        let mut hub = hub;
        hub.fresh_inboxes(0);
        Self {
            seed,
            rng,
            now: 0,
            limits,
            reorder: seed % 5 == 1,
            nodes,
            hub,
            conns: BTreeMap::new(),
            partitioned_until: BTreeMap::new(),
            accepted: BTreeSet::new(),
            refused: BTreeSet::new(),
            delivered: BTreeMap::new(),
            next_msg: 0,
            recent: vec![VecDeque::new(); NODES.len()],
            reposted: BTreeSet::new(),
            uncertain_final: BTreeSet::new(),
            recipients: NODES
                .iter()
                .flat_map(|n| {
                    (0..AGENTS).flat_map(move |a| [format!("{n}{a}"), format!("{n}/{n}{a}")])
                })
                .chain((0..AGENTS).map(|a| format!("local/h{a}")))
                .collect(),
            stats: Stats {
                seeds: 1,
                ..Stats::default()
            },
            receipts: Vec::new(),
            cut_through: CutThroughWaits::new(),
        }
    }

    fn node_ix(name: &str) -> usize {
        NODES.iter().position(|n| *n == name).expect("known node")
    }

    fn partitioned(&self, conn: &str) -> bool {
        self.partitioned_until
            .get(conn)
            .is_some_and(|&t| t > self.now)
    }

    fn run(mut self) -> Stats {
        let mut next_send = 0u64;
        let mut next_fault = 2_000 + self.rng.below(8_000);
        let mut next_read = 0u64;
        let mut next_resume = RESUME_MS;
        loop {
            let traffic = self.now < TRAFFIC_MS;
            if !traffic && self.quiet() {
                break;
            }
            if self.now > TRAFFIC_MS + SETTLE_MS {
                break;
            }
            if !traffic {
                self.heal();
            }
            // Next instant anything can happen.
            let mut t = u64::MAX;
            if traffic {
                t = t.min(next_send).min(next_fault);
            } else {
                t = t.min(TRAFFIC_MS + SETTLE_MS + 1);
            }
            // Agents keep reading, and held mail is retried, in both phases.
            t = t.min(next_read).min(next_resume);
            if let Some(at) = self.cut_through.poll_timeout() {
                t = t.min(at);
            }
            for (name, c) in &self.conns {
                let held = self.partitioned_until.get(name).copied().unwrap_or(0);
                if let Some(at) = c.next_at(held) {
                    t = t.min(at);
                }
            }
            if self.hub.up {
                for (n, &at) in &self.hub.next_dial {
                    if !self.conns.contains_key(n) {
                        t = t.min(at);
                    }
                }
            } else {
                t = t.min(self.hub.restart_at);
            }
            for n in &self.nodes {
                if !n.up {
                    t = t.min(n.restart_at);
                }
            }
            self.now = self.now.max(t);

            if traffic && self.now >= next_send {
                self.send_one();
                next_send = self.now + 5 + self.rng.below(800);
            }
            if traffic && self.now >= next_fault {
                self.fault();
                next_fault = self.now + 1_000 + self.rng.below(12_000);
            }
            if self.now >= next_read {
                self.read_one();
                next_read = self.now + 20 + self.rng.below(400);
            }
            if self.now >= next_resume {
                self.nodes.iter_mut().for_each(|n| {
                    n.outbox.resume_held();
                });
                for x in NODES {
                    self.hub.relay.tick(x);
                }
                // The hub's housekeeping pushes a changed directory.
                for c in self.conns.values_mut() {
                    if self.hub.up && c.hub.state() == LinkState::Up {
                        c.hub_end
                            .push_directory(&self.hub.relay, &mut c.hub, Hub::entries());
                    }
                }
                next_resume = self.now + RESUME_MS;
            }
            self.restarts();
            self.end_cut_through();
            self.dial();
            self.deliver();
            for c in self.conns.values_mut() {
                c.hub.handle_timeout(self.now);
                c.node.handle_timeout(self.now);
            }
            self.pump();
            self.check_bounds();
        }
        self.finish()
    }

    /// One agent on a running host reads a page of its inbox.
    fn read_one(&mut self) {
        let host = self.rng.below(NODES.len() as u64 + 1) as usize;
        let agent = self.rng.below(AGENTS as u64);
        let limit = 1 + self.rng.below(4) as usize;
        let (inboxes, name) = match self.nodes.get_mut(host) {
            Some(n) if n.up => (&mut n.inboxes, format!("{}{agent}", n.name)),
            None if self.hub.up => (&mut self.hub.inboxes, format!("h{agent}")),
            _ => return,
        };
        let page = inboxes
            .inbox(self.now, &name, None, Some(limit))
            .expect("registered");
        self.stats.reads += 1;
        self.stats.missed += page.missed_count;
    }

    fn quiet(&self) -> bool {
        self.hub.up
            && self.nodes.iter().all(|n| n.up && n.outbox.is_empty())
            && self.hub.relay.outboxes().values().all(Outbox::is_empty)
            && self
                .conns
                .values()
                .all(|c| c.to_hub.is_empty() && c.to_node.is_empty())
    }

    fn heal(&mut self) {
        self.partitioned_until.clear();
        if !self.hub.up {
            self.hub.restart_at = self.hub.restart_at.min(self.now);
        }
        for n in &mut self.nodes {
            if !n.up {
                n.restart_at = n.restart_at.min(self.now);
            }
        }
    }

    fn send_one(&mut self) {
        if self.rng.chance(20) {
            self.send_from_hub();
            return;
        }
        let from_ix = self.rng.below(2) as usize;
        let to_ix = 1 - from_ix;
        if !self.nodes[from_ix].up {
            return;
        }
        if self.rng.chance(2) {
            self.forge(from_ix, to_ix);
            return;
        }
        if self.rng.chance(4) {
            self.repost(from_ix);
            return;
        }
        let from = format!("{}{}", NODES[from_ix], self.rng.below(AGENTS as u64));
        let to = if self.rng.chance(20) {
            format!("local/h{}", self.rng.below(AGENTS as u64))
        } else {
            format!(
                "{}/{}{}",
                NODES[to_ix],
                NODES[to_ix],
                self.rng.below(AGENTS as u64)
            )
        };
        self.next_msg += 1;
        let id = format!("s{}-m{}", self.seed, self.next_msg);
        let body = "x".repeat(1 + self.rng.below(300) as usize);
        let msg = WireMessage {
            message_id: id.clone(),
            from,
            to,
            message: body,
            timestamp_ms: self.now,
            from_name: None,
            kind: None,
            lifecycle: None,
        };
        self.stats.sent += 1;
        match self.nodes[from_ix].outbox.push(msg.clone()) {
            Ok(_) => {
                self.stats.accepted += 1;
                self.accepted.insert(id);
                let recent = &mut self.recent[from_ix];
                recent.push_back(msg);
                if recent.len() > 10 {
                    recent.pop_front();
                }
            }
            Err(OutboxError::Full { connection, .. }) => {
                assert_eq!(connection, NODES[from_ix], "seed {}", self.seed);
                self.stats.refused_at_send += 1;
            }
            Err(e) => panic!("seed {}: unexpected push error {e}", self.seed),
        }
    }

    /// One of the hub's own peers sends to a node's peer: the hub stamps `local/<peer>` and
    /// relays into that connection's outbox.
    fn send_from_hub(&mut self) {
        if !self.hub.up {
            return;
        }
        let to_ix = self.rng.below(2) as usize;
        self.next_msg += 1;
        let id = format!("s{}-m{}", self.seed, self.next_msg);
        let m = WireMessage {
            message_id: id.clone(),
            from: format!("local/h{}", self.rng.below(AGENTS as u64)),
            to: format!(
                "{}/{}{}",
                NODES[to_ix],
                NODES[to_ix],
                self.rng.below(AGENTS as u64)
            ),
            message: "y".repeat(1 + self.rng.below(300) as usize),
            timestamp_ms: self.now,
            from_name: None,
            kind: None,
            lifecycle: None,
        };
        self.stats.sent += 1;
        match self.hub.relay.relay(&m, false) {
            Step::Answered {
                response: Response::SendAck { .. },
                custody,
            } => {
                assert_eq!(custody.as_deref(), Some(NODES[to_ix]), "seed {}", self.seed);
                self.stats.accepted += 1;
                self.accepted.insert(id);
            }
            Step::Answered {
                response:
                    Response::Error {
                        code: ErrorCode::OutboxFull,
                        connection,
                        ..
                    },
                ..
            } => {
                assert_eq!(connection, NODES[to_ix], "seed {}", self.seed);
                self.stats.refused_at_send += 1;
            }
            other => panic!("seed {}: hub send {other:?}", self.seed),
        }
    }

    /// A compromised node claims a sender it does not own, straight onto the link.
    fn forge(&mut self, from_ix: usize, to_ix: usize) {
        let Some(c) = self.conns.get_mut(NODES[from_ix]) else {
            return;
        };
        if c.node.state() != LinkState::Up {
            return;
        }
        self.next_msg += 1;
        let claimed = if self.rng.chance(50) {
            format!("{}/{}0", NODES[to_ix], NODES[to_ix])
        } else {
            "intruder".to_owned()
        };
        let m = WireMessage {
            message_id: format!("forged-s{}-m{}", self.seed, self.next_msg),
            from: claimed,
            to: format!("{}/{}0", NODES[to_ix], NODES[to_ix]),
            message: "forged".into(),
            timestamp_ms: self.now,
            from_name: None,
            kind: None,
            lifecycle: None,
        };
        c.node.request(Request::Send(m)).expect("up");
    }

    /// A node re-posts recent mail with its original identity (as it does for lifecycle
    /// notices after a reconnect); the destination must not see it twice.
    fn repost(&mut self, from_ix: usize) {
        let recent = &self.recent[from_ix];
        if recent.is_empty() {
            return;
        }
        let m = recent[self.rng.below(recent.len() as u64) as usize].clone();
        if self.refused.contains(&m.message_id) {
            return;
        }
        if self.nodes[from_ix].outbox.push(m.clone()).is_ok() {
            self.stats.reposts += 1;
            self.reposted.insert(m.message_id);
        }
    }

    fn fault(&mut self) {
        let x = NODES[self.rng.below(2) as usize].to_owned();
        match self.rng.below(100) {
            0..=34 => {
                let d = 1_000 + self.rng.below(30_000);
                self.partitioned_until.insert(x, self.now + d);
                self.stats.partitions += 1;
            }
            35..=59 => {
                if let Some(mut c) = self.conns.remove(&x) {
                    c.hub.reset();
                    c.node.reset();
                    self.stats.resets += 1;
                    self.settle_conn(&x, c);
                }
            }
            60..=84 => {
                let ix = Self::node_ix(&x);
                if self.nodes[ix].up {
                    self.crash_node(ix);
                }
            }
            _ => {
                if self.hub.up {
                    self.crash_hub();
                }
            }
        }
    }

    /// Runs both ends' `Down` events of a torn-down connection through the real ends, so
    /// outboxes learn it is down and the hub retires its shadows.
    fn settle_conn(&mut self, x: &str, mut c: Conn) {
        let ix = Self::node_ix(x);
        while let Some(e) = c.hub.poll_event() {
            if let LinkEvent::Down { .. } = e {
                self.hub_event(x, &mut c, e);
            }
        }
        while let Some(e) = c.node.poll_event() {
            if let LinkEvent::Down { .. } = e {
                self.node_event(ix, &mut c, e);
            }
        }
        self.send_receipts();
    }

    fn crash_node(&mut self, ix: usize) {
        let name = NODES[ix];
        if let Some(mut c) = self.conns.remove(name) {
            // The kernel resets the socket of a killed process.
            c.hub.reset();
            c.node.reset();
            self.settle_conn(name, c);
        }
        let n = &mut self.nodes[ix];
        let retained: usize = n.agents().iter().map(|a| n.inboxes.peek(a).len()).sum();
        self.stats.delivered_then_lost_with_memory += retained as u64;
        n.persisted = Some((
            serde_json::to_string(&n.outbox).expect("outbox serializes"),
            serde_json::to_string(&n.dedupe).expect("dedupe serializes"),
        ));
        n.up = false;
        n.restart_at = self.now + 500 + self.rng.below(20_000);
        self.stats.node_crashes += 1;
    }

    fn crash_hub(&mut self) {
        for x in NODES {
            if let Some(mut c) = self.conns.remove(x) {
                c.hub.reset();
                c.node.reset();
                self.settle_conn(x, c);
            }
        }
        // Relay steps waiting for an answer die with the process (their nodes resend).
        self.cut_through = CutThroughWaits::new();
        let retained: usize = (0..AGENTS)
            .map(|a| self.hub.inboxes.peek(&format!("h{a}")).len())
            .sum();
        self.stats.delivered_then_lost_with_memory += retained as u64;
        self.hub.persisted = Some((
            self.hub
                .relay
                .outboxes()
                .iter()
                .map(|(k, o)| (k.clone(), serde_json::to_string(o).expect("serializes")))
                .collect(),
            serde_json::to_string(&self.hub.dedupe).expect("serializes"),
        ));
        self.hub.up = false;
        self.hub.restart_at = self.now + 500 + self.rng.below(20_000);
        self.stats.hub_crashes += 1;
    }

    fn restarts(&mut self) {
        for ix in 0..self.nodes.len() {
            let n = &mut self.nodes[ix];
            if !n.up && self.now >= n.restart_at {
                let (o, d) = n.persisted.take().expect("persisted at crash");
                n.outbox = serde_json::from_str(&o).expect("outbox reloads");
                n.dedupe = serde_json::from_str(&d).expect("dedupe reloads");
                n.fresh_inboxes(self.now);
                n.up = true;
            }
        }
        if !self.hub.up && self.now >= self.hub.restart_at {
            let (p, d) = self.hub.persisted.take().expect("persisted at crash");
            self.hub.dedupe = serde_json::from_str(&d).expect("dedupe reloads");
            self.hub.fresh_inboxes(self.now);
            // A restarted hub has its outboxes back, and no links or shadows.
            self.hub.relay = Relay::new();
            for (k, s) in p {
                let o = serde_json::from_str(&s).expect("outbox reloads");
                self.hub.relay.insert_outbox(&k, o);
            }
            for b in self.hub.backoff.values_mut() {
                b.reset();
            }
            for t in self.hub.next_dial.values_mut() {
                *t = self.now;
            }
            self.hub.up = true;
        }
    }

    fn dial(&mut self) {
        if !self.hub.up {
            return;
        }
        for x in NODES {
            if self.conns.contains_key(x) || self.now < self.hub.next_dial[x] {
                continue;
            }
            let reachable = self.nodes[Self::node_ix(x)].up && !self.partitioned(x);
            if reachable {
                let generation = self.hub.relay.attach(x);
                let c = Conn::dial(self.now, x, generation, self.reorder);
                self.conns.insert(x.to_owned(), c);
            } else {
                let delay = self
                    .hub
                    .backoff
                    .get_mut(x)
                    .expect("backoff")
                    .next_delay(self.rng.next_u64());
                self.hub.next_dial.insert(x.to_owned(), self.now + delay);
            }
        }
    }

    fn deliver(&mut self) {
        let now = self.now;
        for x in NODES {
            if self.partitioned(x) {
                continue;
            }
            let Some(c) = self.conns.get_mut(x) else {
                continue;
            };
            while let Some(f) = c.to_node.pop_due(now) {
                c.node.handle_text(now, &f);
                self.stats.frames += 1;
            }
            while let Some(f) = c.to_hub.pop_due(now) {
                c.hub.handle_text(now, &f);
                self.stats.frames += 1;
            }
        }
    }

    fn pump(&mut self) {
        for _ in 0..8 {
            let mut progress = false;
            for x in NODES {
                progress |= self.pump_node(x);
                progress |= self.pump_hub(x);
            }
            self.send_receipts();
            self.reap_down();
            if !progress {
                break;
            }
        }
    }

    /// Connections whose two ends are down are removed; one end down while the path is open
    /// resets the other (the FIN/RST reaches it); across a partition the other end must find
    /// out by its own liveness.
    fn reap_down(&mut self) {
        let names: Vec<String> = self.conns.keys().cloned().collect();
        for x in names {
            let partitioned = self.partitioned(&x);
            if self.conns.get_mut(&x).expect("conn").reap(partitioned) {
                let c = self.conns.remove(&x).expect("conn");
                self.settle_conn(&x, c);
            }
        }
    }

    fn pump_node(&mut self, x: &str) -> bool {
        let ix = Self::node_ix(x);
        if !self.nodes[ix].up {
            return false;
        }
        // Out of the map while its ends run, so they can reach the rest of the simulator.
        let Some(mut c) = self.conns.remove(x) else {
            return false;
        };
        let mut progress = false;
        while let Some(e) = c.node.poll_event() {
            progress = true;
            self.node_event(ix, &mut c, e);
        }
        let n = &mut self.nodes[ix];
        if c.node.state() == LinkState::Up {
            // The hub's `send`s of this step, delivered together and answered in order.
            for (id, m) in c.uplink.take_sends() {
                let resp = deliver(&mut n.inboxes, &mut n.dedupe, self.now, n.name, &m);
                count_delivery(&resp, &m, &mut self.delivered, &mut self.stats);
                c.node.respond(id, resp).expect("respond");
            }
            let peers = n.agents().into_iter().map(entry).collect();
            c.uplink.pump(&mut c.node, peers, &mut n.outbox);
        }
        while n.inboxes.poll_event().is_some() {}
        while let Some(f) = c.node.poll_transmit() {
            progress = true;
            let lat = 1 + self.rng.below(80);
            c.to_hub.push(self.now, lat, f.encode());
        }
        self.conns.insert(x.to_owned(), c);
        progress
    }

    /// One event of a node's link, through the node's real end.
    fn node_event(&mut self, ix: usize, c: &mut Conn, e: LinkEvent) {
        let n = &mut self.nodes[ix];
        match c.uplink.on_event(&mut c.node, &mut n.outbox, e) {
            UplinkOutput::Nothing | UplinkOutput::Up { .. } | UplinkOutput::Registered { .. } => {}
            UplinkOutput::Directory(d) => {
                assert!(
                    d.iter()
                        .all(|p| p.address.as_deref().is_some_and(|a| a.contains('/'))),
                    "seed {}: a directory entry without an address {d:?}",
                    self.seed
                );
                n.directory = d;
            }
            UplinkOutput::Request { id, .. } => {
                c.node
                    .respond(id, Response::Peers(vec![]))
                    .expect("respond");
            }
            UplinkOutput::Answered {
                message,
                response,
                settled,
            } => {
                if message.message_id.starts_with("forged-") {
                    assert!(
                        matches!(
                            response,
                            Response::Error {
                                code: ErrorCode::SenderForged | ErrorCode::SenderNotRegistered,
                                ..
                            }
                        ),
                        "seed {}: forged send answered {response:?}",
                        self.seed
                    );
                    assert!(settled.is_empty(), "seed {}", self.seed);
                    self.stats.forged_rejected += 1;
                    return;
                }
                self.settled(true, settled);
            }
            UplinkOutput::Receipt(r) => {
                // The hub says relayed mail reached its destination: it really did.
                assert_eq!(r.outcome, ReceiptOutcome::Delivered, "seed {}", self.seed);
                assert!(
                    self.delivered.contains_key(&r.message_id),
                    "seed {}: receipt for undelivered {}",
                    self.seed,
                    r.message_id
                );
                assert_eq!(
                    SenderOutcome::from_receipt(&r),
                    SenderOutcome::Delivered,
                    "seed {}",
                    self.seed
                );
                self.stats.receipts_delivered += 1;
            }
            UplinkOutput::Other(e) => match *e {
                LinkEvent::UpstreamToolsChanged { .. } | LinkEvent::UpstreamProgress { .. } => {}
                other => panic!("seed {}: odd event {other:?}", self.seed),
            },
            UplinkOutput::Down { settled, .. } => self.settled(true, settled),
        }
    }

    fn pump_hub(&mut self, x: &str) -> bool {
        if !self.hub.up {
            return false;
        }
        let Some(mut c) = self.conns.remove(x) else {
            return false;
        };
        let mut progress = false;
        while let Some(e) = c.hub.poll_event() {
            progress = true;
            self.hub_event(x, &mut c, e);
        }
        if c.hub.state() == LinkState::Up {
            // The node's `send`s of this step, relayed together.
            for (id, m) in c.hub_end.take_sends() {
                // Held for the destination's answer, as the hub's relay step waits.
                let step = (x.to_owned(), c.hub_end.generation(), id);
                let at = self.now + CUT_THROUGH_MS;
                let h = &mut self.hub;
                let resp = match common::sim::relay_send(
                    &mut h.relay,
                    &mut self.cut_through,
                    &m,
                    step,
                    at,
                ) {
                    Relayed::Waits(_) => continue,
                    Relayed::Answer(response) => response,
                    Relayed::Local(m) => {
                        let r = deliver(&mut h.inboxes, &mut h.dedupe, self.now, "local", &m);
                        count_delivery(&r, &m, &mut self.delivered, &mut self.stats);
                        r
                    }
                };
                c.hub.respond(id, resp).expect("respond");
            }
            c.hub_end.dispatch(&mut self.hub.relay, &mut c.hub);
        }
        while let Some(f) = c.hub.poll_transmit() {
            progress = true;
            let lat = 1 + self.rng.below(80);
            c.to_node.push(self.now, lat, f.encode());
        }
        self.conns.insert(x.to_owned(), c);
        progress
    }

    /// One event of a hub's link, through the hub's real end.
    fn hub_event(&mut self, x: &str, c: &mut Conn, e: LinkEvent) {
        let out = c
            .hub_end
            .on_event(&mut self.hub.relay, &mut c.hub, e, Hub::entries);
        match out {
            RelayOutput::Nothing => {}
            RelayOutput::Up { .. } => {
                self.hub.backoff.get_mut(x).expect("backoff").reset();
            }
            RelayOutput::Request { id, request } => {
                let resp = common::sim::answer_request(c, &self.hub.relay, request, Hub::entries);
                c.hub.respond(id, resp).expect("respond");
            }
            RelayOutput::Answered { settled, .. } => self.settled(false, settled),
            RelayOutput::Unexpected(e) => panic!("seed {}: odd answer {e:?}", self.seed),
            RelayOutput::Down { settled, .. } => {
                self.settled(false, settled);
                let b = self.hub.backoff.get_mut(x).expect("backoff");
                let delay = b.next_delay(self.rng.next_u64());
                self.hub.next_dial.insert(x.to_owned(), self.now + delay);
            }
        }
    }

    /// Outcomes one end's outbox produced: tallied, and on the hub routed by the relay
    /// (receipts to the origin's link). A commit here is instant (every outbox is
    /// serialized at a crash), so refusals waiting for theirs go on at once.
    fn settled(&mut self, origin: bool, s: Settled) {
        for e in s.now.iter().chain(&s.after_commit) {
            self.tally(origin, e);
        }
        if origin {
            return;
        }
        let h = &mut self.hub;
        let answers =
            common::sim::route_settled(&mut h.relay, &mut self.cut_through, &mut self.receipts, s);
        for (step, response) in answers {
            self.stats.cut_through += 1;
            self.answer_step(step, response);
        }
    }

    /// Relay steps whose wait ran out answer `accepted` (the hub holds the mail); their
    /// destination's answer becomes a receipt again.
    fn end_cut_through(&mut self) {
        let h = &mut self.hub;
        for (step, accepted) in
            common::sim::end_cut_through(&mut h.relay, &mut self.cut_through, self.now)
        {
            self.stats.cut_through_expired += 1;
            self.answer_step(step, accepted);
        }
    }

    fn answer_step(&mut self, (conn, generation, id): (String, u64, u64), r: Response) {
        if let Some(c) = self.conns.get_mut(&conn)
            && c.hub_end.generation() == generation
            && c.hub.state() == LinkState::Up
        {
            c.hub.respond(id, r).expect("respond");
        }
    }

    /// Sends the receipts routed so far over their origins' links.
    fn send_receipts(&mut self) {
        for (origin, r) in std::mem::take(&mut self.receipts) {
            if let Some(c) = self.conns.get_mut(&origin)
                && c.hub.state() == LinkState::Up
            {
                c.hub.receipt(r).expect("up");
            }
        }
        // Every outcome went through an end's settling: nothing is left behind.
        for n in &mut self.nodes {
            assert!(n.outbox.poll_event().is_none(), "seed {}", self.seed);
        }
        for x in NODES {
            if let Some(o) = self.hub.relay.outbox_mut(x) {
                assert!(o.poll_event().is_none(), "seed {}", self.seed);
            }
        }
    }

    fn tally(&mut self, origin: bool, e: &OutboxEvent) {
        let (refused, uncertain) = (&mut self.refused, &mut self.uncertain_final);
        if common::sim::tally(self.seed, origin, e, refused, uncertain) {
            self.stats.uncertain_reports += 1;
        }
    }

    fn check_bounds(&mut self) {
        let l = self.limits;
        let all = self
            .nodes
            .iter()
            .map(|n| &n.outbox)
            .chain(self.hub.relay.outboxes().values());
        for o in all {
            assert!(o.len() <= l.max_messages, "seed {}: count bound", self.seed);
            assert!(o.bytes() <= l.max_bytes, "seed {}: byte bound", self.seed);
            for to in &self.recipients {
                assert!(
                    o.in_flight_to(to) as u64 <= l.max_in_flight_per_recipient,
                    "seed {}: in-flight window",
                    self.seed
                );
            }
            self.stats.max_outbox_len = self.stats.max_outbox_len.max(o.len());
        }
    }

    fn finish(mut self) -> Stats {
        self.stats.virtual_ms = self.now;
        self.stats.reordered_seeds = u64::from(self.reorder);
        assert!(
            self.delivered.keys().all(|id| !id.starts_with("forged-")),
            "seed {}: a forged send was delivered",
            self.seed
        );
        for id in &self.accepted {
            match self.delivered.get(id).copied().unwrap_or(0) {
                0 if self.refused.contains(id) => self.stats.refused_later += 1,
                0 if self.uncertain_final.contains(id) => {
                    self.stats.refused_on_retry_undelivered += 1
                }
                0 => self.stats.lost_before_delivery += 1,
                1 => {
                    self.stats.delivered += 1;
                    if self.uncertain_final.contains(id) {
                        self.stats.refused_on_retry_delivered += 1;
                    }
                }
                n => {
                    self.stats.delivered += 1;
                    self.stats.duplicated += u64::from(n - 1);
                }
            }
            assert!(
                self.reposted.contains(id)
                    || !(self.refused.contains(id) && self.delivered.contains_key(id)),
                "seed {}: {id} both refused and delivered",
                self.seed
            );
        }
        self.stats
    }
}

/// Tallies a destination's answer: fresh deliveries per id, absorbed resends, held mail.
fn count_delivery(
    resp: &Response,
    m: &WireMessage,
    delivered: &mut BTreeMap<String, u32>,
    stats: &mut Stats,
) {
    match common::sim::count_delivery(resp, m, delivered) {
        Answer::Delivered => {}
        Answer::Duplicate => stats.duplicate_acks += 1,
        Answer::Held => stats.held += 1,
    }
}

fn run_seeds(seeds: std::ops::Range<u64>) -> Stats {
    let mut total = Stats::default();
    for seed in seeds {
        let s = Sim::new(seed).run();
        assert_eq!(s.lost_before_delivery, 0, "seed {seed}: lost {s:?}");
        assert_eq!(s.duplicated, 0, "seed {seed}: duplicated {s:?}");
        assert_eq!(
            s.missed, 0,
            "seed {seed}: a reading agent lost mail to eviction {s:?}"
        );
        total.add(&s);
    }
    total
}

#[test]
fn federated_mail_survives_faults_across_seeds() {
    // `TUIC_SIM_SEEDS=10000` runs a longer sweep; CI runs the default.
    let seeds = std::env::var("TUIC_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let total = run_seeds(0..seeds);
    eprintln!(
        "sim: seeds={} sent={} accepted={} refused_at_send={} refused_later={} delivered={} \
         lost_before_delivery={} duplicated={} delivered_then_lost_with_memory={} \
         duplicate_acks={} uncertain={} forged_rejected={} reposts={} receipts_delivered={} cut_through={} cut_through_expired={} held={} missed={} reads={} frames={} reordered_seeds={} \
         refused_on_retry_delivered={} refused_on_retry_undelivered={} resets={} partitions={} node_crashes={} \
         hub_crashes={} max_outbox_len={} virtual_s={}",
        total.seeds,
        total.sent,
        total.accepted,
        total.refused_at_send,
        total.refused_later,
        total.delivered,
        total.lost_before_delivery,
        total.duplicated,
        total.delivered_then_lost_with_memory,
        total.duplicate_acks,
        total.uncertain_reports,
        total.forged_rejected,
        total.reposts,
        total.receipts_delivered,
        total.cut_through,
        total.cut_through_expired,
        total.held,
        total.missed,
        total.reads,
        total.frames,
        total.reordered_seeds,
        total.refused_on_retry_delivered,
        total.refused_on_retry_undelivered,
        total.resets,
        total.partitions,
        total.node_crashes,
        total.hub_crashes,
        total.max_outbox_len,
        total.virtual_ms / 1_000,
    );
    assert_eq!(total.lost_before_delivery, 0);
    assert_eq!(total.duplicated, 0);
    assert_eq!(
        total.delivered + total.refused_later + total.refused_on_retry_undelivered,
        total.accepted,
        "every accepted message ends delivered or refused back to its sender"
    );
    // The faults really happened.
    assert!(total.resets > 0 && total.partitions > 0);
    assert!(total.node_crashes > 0 && total.hub_crashes > 0);
    assert!(total.duplicate_acks > 0, "resends reached the dedupe rings");
    assert!(total.forged_rejected > 0 && total.reposts > 0);
    assert!(
        total.held > 0,
        "full inboxes of reading agents held mail at the previous hop"
    );
    assert!(
        total.receipts_delivered > 0 && total.receipts_delivered <= total.delivered + total.reposts
    );
    assert!(
        total.cut_through > 0,
        "destinations answered waiting relay steps directly"
    );
    assert!(
        total.cut_through_expired > 0,
        "waits ran out (the hub's `CutThroughWaits` deadlines) and answered accepted"
    );
}

#[test]
fn a_seed_replays_identically() {
    let a = Sim::new(42).run();
    let b = Sim::new(42).run();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}
