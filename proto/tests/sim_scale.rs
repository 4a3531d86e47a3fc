//! The seeded simulator at scale: one hub and thousands of nodes (10,000 in CI) built from the
//! real sans-IO ends (`PeerLink`, `RelayEnd` + `Relay` on the hub, `Uplink` + `Outbox` on the
//! nodes, `DedupeRings`, `Inboxes`), virtual time driven by an event queue (each connection is
//! woken only when one of its frames arrives or one of its timers is due, so a step costs
//! what changed, not the number of nodes), group faults: partitions of a rack of nodes,
//! connection resets, crashes of a rack, hub crashes and restarts (its dials spread over a
//! window, as the hub spreads them).
//!
//! A minority of the nodes talk (register an agent and send mail to any node); every node
//! receives, holds its link, pings, crashes, restarts. Frames go over ordered pipes as
//! decoded `Frame`s (the two-node simulator, `sim.rs`, covers the wire text and reordering).
//!
//! Checked at the end, after healing every fault and running until quiet: nothing the sender
//! saw accepted is lost (delivered or refused back to the sender) beyond a crashed node's
//! unread memory, nothing is delivered twice, every outbox stays within its bounds, and every
//! link converges: each node's end and the hub's end are up, and the relay has one live link
//! per node.
//!
//! `TUIC_SIM_NODES`, `TUIC_SIM_SEEDS` (`a..b`) and `TUIC_SIM_TRAFFIC_MS` scale the run (the
//! longer command is in `docs/chaos.md`).

mod common;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use common::sim::{Answer, Relayed};
use common::{Rng, peer_entry as entry};
use tuic_proto::mail::Inboxes;
use tuic_proto::peer::Relay;
use tuic_proto::peer::{
    Backoff, CutThroughWaits, DedupeRings, Frame, LinkEvent, LinkState, Outbox, OutboxError,
    OutboxEvent, OutboxLimits, PeerEntry, Receipt, RelayOutput, Response, Settled, UplinkOutput,
    WireMessage, deliver,
};

/// A small inbox, so bursts fill it and the hub holds mail (`recipient_full`).
const SIM_INBOX: usize = 4;
/// The housekeeping tick of both ends.
const TICK_MS: u64 = 500;
/// How long the hub's relay step waits for the destination's answer (`CUT_THROUGH`).
const CUT_THROUGH_MS: u64 = 20;
/// One node in this many talks (registers an agent and sends). Every change of the talkers'
/// registrations pushes the whole directory to every node (nodes x talkers entries per
/// change), so the talkers stay few.
const TALKER_EVERY: usize = 500;
/// The hub spreads its dials after a (re)start over this window (`federation::spread_window`
/// at its cap).
const SPREAD_MS: u64 = 2_000;
/// After healing, this much virtual time at most to become quiet and converge.
const SETTLE_MS: u64 = 20 * 60_000;

fn name(ix: usize) -> String {
    format!("n{ix}")
}

fn ix_of(name: &str) -> usize {
    name[1..].parse().expect("a node name")
}

fn agent(ix: usize) -> String {
    format!("n{ix}a")
}

/// A connection whose frames travel typed (QUIC streams carry them decoded here).
type Conn = common::sim::Conn<Frame>;

struct Node {
    up: bool,
    talker: bool,
    inboxes: Inboxes,
    dedupe: DedupeRings,
    outbox: Outbox,
    persisted: Option<(String, String)>,
}

impl Node {
    fn fresh_inboxes(&mut self, ix: usize, now: u64) {
        self.inboxes = Inboxes::with_capacity(SIM_INBOX);
        self.inboxes.register(&agent(ix));
        self.inboxes
            .inbox(now, &agent(ix), None, None)
            .expect("registered");
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A connection's frame arrives or a timer of its ends is due.
    Wake(usize),
    /// The hub dials a node.
    Dial(usize),
    Restart(usize),
    HubRestart,
    /// A fault of a given kind (0 partition, 35 reset, 60 crash, 90 hub crash), so each
    /// seed has each kind at least once.
    FaultOf(u64),
    /// A node's agent reads its inbox (scheduled when mail reaches it: agents keep reading).
    Read(usize),
    Send,
    Fault,
    Tick,
    CutThrough,
    /// A partition heals: wake its connections.
    Heal(usize, usize),
}

/// Counts of one run.
#[derive(Debug, Default, Clone)]
struct Stats {
    sent: u64,
    accepted: u64,
    refused_at_send: u64,
    refused_later: u64,
    delivered: u64,
    duplicated: u64,
    lost: u64,
    delivered_then_lost_with_memory: u64,
    held: u64,
    missed: u64,
    receipts: u64,
    cut_through: u64,
    frames: u64,
    events: u64,
    partitions: u64,
    partitioned_nodes: u64,
    resets: u64,
    node_crashes: u64,
    hub_crashes: u64,
    link_ups: u64,
    max_outbox_len: usize,
    virtual_ms: u64,
}

struct Sim {
    seed: u64,
    rng: Rng,
    now: u64,
    n: usize,
    traffic_ms: u64,
    limits: OutboxLimits,
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    /// The earliest wake queued per connection (`u64::MAX`: none).
    wake_at: Vec<u64>,
    nodes: Vec<Node>,
    talkers: Vec<usize>,
    conns: Vec<Option<Conn>>,
    partitioned_until: Vec<u64>,
    hub_up: bool,
    relay: Relay,
    hub_backoff: Vec<Backoff>,
    /// When the hub dials each node next (`u64::MAX`: not planned).
    dial_due: Vec<u64>,
    /// When each node's agent reads next: every few seconds, soon after mail reaches it.
    read_due: Vec<u64>,
    hub_inboxes: Inboxes,
    hub_dedupe: DedupeRings,
    hub_persisted: Option<(Vec<(String, String)>, String)>,
    /// The shadows last pushed on a tick (the directory every end was given).
    last_shadows: Vec<PeerEntry>,
    dirty: BTreeSet<usize>,
    receipts: Vec<(String, Receipt)>,
    /// Relay steps waiting for the destination's answer (cut-through), by message id: the
    /// previous hop's link, its generation and the request id.
    cut_through: CutThroughWaits<(usize, u64, u64)>,
    accepted: BTreeSet<String>,
    refused: BTreeSet<String>,
    uncertain_final: BTreeSet<String>,
    delivered: BTreeMap<String, u32>,
    next_msg: u64,
    stats: Stats,
}

impl Sim {
    fn new(seed: u64, n: usize, traffic_ms: u64) -> Self {
        let mut rng = Rng::new(seed);
        let limits = common::sim::seeded_limits(seed.is_multiple_of(2), &mut rng);
        let talkers: Vec<usize> = (0..n).filter(|i| i % TALKER_EVERY == 0).collect();
        let nodes = (0..n)
            .map(|ix| {
                let mut node = Node {
                    up: true,
                    talker: ix % TALKER_EVERY == 0,
                    inboxes: Inboxes::new(),
                    dedupe: DedupeRings::new(),
                    outbox: Outbox::with_limits(&name(ix), limits),
                    persisted: None,
                };
                node.fresh_inboxes(ix, 0);
                node
            })
            .collect();
        let mut relay = Relay::new();
        for ix in 0..n {
            relay.insert_outbox(&name(ix), Outbox::with_limits(&name(ix), limits));
        }
        let mut hub_inboxes = Inboxes::with_capacity(SIM_INBOX);
        hub_inboxes.register("h0");
        hub_inboxes.inbox(0, "h0", None, None).expect("registered");
        let mut sim = Self {
            seed,
            rng,
            now: 0,
            n,
            traffic_ms,
            limits,
            queue: BinaryHeap::new(),
            seq: 0,
            wake_at: vec![u64::MAX; n],
            nodes,
            talkers,
            conns: (0..n).map(|_| None).collect(),
            partitioned_until: vec![0; n],
            hub_up: true,
            relay,
            hub_backoff: vec![Backoff::new(); n],
            dial_due: vec![u64::MAX; n],
            read_due: vec![u64::MAX; n],
            hub_inboxes,
            hub_dedupe: DedupeRings::new(),
            hub_persisted: None,
            last_shadows: Vec::new(),
            dirty: BTreeSet::new(),
            receipts: Vec::new(),
            cut_through: CutThroughWaits::new(),
            accepted: BTreeSet::new(),
            refused: BTreeSet::new(),
            uncertain_final: BTreeSet::new(),
            delivered: BTreeMap::new(),
            next_msg: 0,
            stats: Stats::default(),
        };
        sim.dial_all();
        for ix in 0..n {
            let t = 1_000 + sim.rng.below(10_000);
            sim.plan_read(ix, t);
        }
        sim.at(0, Ev::Send);
        sim.at(3_000, Ev::Fault);
        sim.at(TICK_MS, Ev::Tick);
        sim
    }

    fn at(&mut self, t: u64, e: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq, e)));
    }

    /// The hub's dials after a (re)start, spread over [`SPREAD_MS`] (replacing any backoff).
    fn dial_all(&mut self) {
        for ix in 0..self.n {
            self.dial_due[ix] = u64::MAX;
            let t = self.now + self.rng.below(SPREAD_MS);
            self.plan_dial(ix, t);
        }
    }

    /// Plans a dial of `ix` at `t` unless one is planned sooner.
    fn plan_dial(&mut self, ix: usize, t: u64) {
        if t < self.dial_due[ix] {
            self.dial_due[ix] = t;
            self.at(t, Ev::Dial(ix));
        }
    }

    /// Plans a read of `ix`'s inbox at `t` unless one is planned sooner.
    fn plan_read(&mut self, ix: usize, t: u64) {
        if t < self.read_due[ix] {
            self.read_due[ix] = t;
            self.at(t, Ev::Read(ix));
        }
    }

    fn partitioned(&self, ix: usize) -> bool {
        self.partitioned_until[ix] > self.now
    }

    fn run(mut self) -> Stats {
        let mut healed = false;
        while let Some(Reverse((t, _, e))) = self.queue.pop() {
            self.now = self.now.max(t);
            let traffic = self.now < self.traffic_ms;
            if !traffic && !healed {
                self.heal();
                healed = true;
            }
            if self.now > self.traffic_ms + SETTLE_MS {
                break;
            }
            self.stats.events += 1;
            match e {
                Ev::Wake(ix) => {
                    if self.wake_at[ix] != t {
                        continue;
                    }
                    self.wake_at[ix] = u64::MAX;
                    self.wake(ix);
                }
                Ev::Dial(ix) => {
                    if self.dial_due[ix] != t {
                        continue;
                    }
                    self.dial_due[ix] = u64::MAX;
                    self.dial(ix);
                }
                Ev::Restart(ix) => self.restart(ix),
                Ev::HubRestart => self.hub_restart(),
                Ev::FaultOf(kind) => self.fault_of(kind),
                Ev::Read(ix) => {
                    if self.read_due[ix] != t {
                        continue;
                    }
                    self.read_due[ix] = u64::MAX;
                    self.read(ix);
                }
                Ev::Send => {
                    if traffic {
                        self.send_one();
                        let t = self.now + 5 + self.rng.below(100);
                        self.at(t, Ev::Send);
                    }
                }
                Ev::Fault => {
                    if traffic {
                        let kind = self.rng.below(100);
                        self.fault_of(kind);
                        let t = self.now + 500 + self.rng.below(3_000);
                        self.at(t, Ev::Fault);
                    }
                }
                Ev::Tick => {
                    self.tick();
                    if !traffic && self.quiet() {
                        break;
                    }
                    let t = self.now + TICK_MS;
                    self.at(t, Ev::Tick);
                }
                Ev::CutThrough => self.end_cut_through(),
                Ev::Heal(a, b) => {
                    for ix in a..b {
                        self.dirty.insert(ix);
                    }
                }
            }
            self.pump();
        }
        self.finish()
    }

    /// Every fault ends: partitions heal, the hub and crashed nodes restart now.
    fn heal(&mut self) {
        for ix in 0..self.n {
            if self.partitioned_until[ix] > 0 {
                self.partitioned_until[ix] = 0;
                self.dirty.insert(ix);
            }
            if !self.nodes[ix].up {
                self.at(self.now, Ev::Restart(ix));
            }
        }
        if !self.hub_up {
            self.at(self.now, Ev::HubRestart);
        }
    }

    /// Every fault healed has settled: all mail answered, every link up on both ends.
    fn quiet(&self) -> bool {
        self.hub_up
            && self.cut_through.is_empty()
            && self.relay.outboxes().values().all(Outbox::is_empty)
            && self.nodes.iter().all(|n| n.up && n.outbox.is_empty())
            && self.conns.iter().all(|c| {
                // Pings are always on some wire among thousands of links; mail is not (an
                // outbox keeps each message until its answer arrives).
                c.as_ref().is_some_and(|c| {
                    c.hub.state() == LinkState::Up && c.node.state() == LinkState::Up
                })
            })
    }

    fn wake(&mut self, ix: usize) {
        if let Some(c) = self.conns[ix].as_mut() {
            if self.partitioned_until[ix] <= self.now {
                while let Some(f) = c.to_node.pop_due(self.now) {
                    c.node.handle_frame(self.now, f);
                    self.stats.frames += 1;
                }
                while let Some(f) = c.to_hub.pop_due(self.now) {
                    c.hub.handle_frame(self.now, f);
                    self.stats.frames += 1;
                }
            }
            c.hub.handle_timeout(self.now);
            c.node.handle_timeout(self.now);
        }
        self.dirty.insert(ix);
    }

    /// Queues the next wake of a connection: its next frame (held while partitioned) or timer.
    fn schedule(&mut self, ix: usize) {
        let Some(c) = self.conns[ix].as_ref() else {
            return;
        };
        let held = self.partitioned_until[ix];
        let t = c.next_at(held).unwrap_or(u64::MAX).max(self.now);
        if t != u64::MAX && t < self.wake_at[ix] {
            self.wake_at[ix] = t;
            self.at(t, Ev::Wake(ix));
        }
    }

    fn pump(&mut self) {
        let mut rounds = 0u64;
        while let Some(ix) = self.dirty.pop_first() {
            rounds += 1;
            assert!(
                rounds < 10_000_000,
                "seed {}: pump never settles",
                self.seed
            );
            let a = self.pump_node(ix);
            let b = self.pump_hub(ix);
            self.send_receipts();
            self.reap_down(ix);
            if a || b {
                self.dirty.insert(ix);
            } else {
                self.schedule(ix);
                self.check_bounds(ix);
            }
        }
    }

    fn pump_node(&mut self, ix: usize) -> bool {
        if !self.nodes[ix].up {
            return false;
        }
        let Some(mut c) = self.conns[ix].take() else {
            return false;
        };
        let mut progress = false;
        while let Some(e) = c.node.poll_event() {
            progress = true;
            self.node_event(ix, &mut c, e);
        }
        let n = &mut self.nodes[ix];
        if c.node.state() == LinkState::Up {
            let me = name(ix);
            let mut fresh = false;
            for (id, m) in c.uplink.take_sends() {
                let resp = deliver(&mut n.inboxes, &mut n.dedupe, self.now, &me, &m);
                fresh |= count_delivery(&resp, &m, &mut self.delivered, &mut self.stats);
                c.node.respond(id, resp).expect("respond");
            }
            if fresh {
                let t = self.now + 20 + self.rng.below(400);
                if t < self.read_due[ix] {
                    self.read_due[ix] = t;
                    self.seq += 1;
                    self.queue.push(Reverse((t, self.seq, Ev::Read(ix))));
                }
            }
            let peers = if n.talker {
                vec![entry(agent(ix))]
            } else {
                Vec::new()
            };
            c.uplink.pump(&mut c.node, peers, &mut n.outbox);
        }
        while n.inboxes.poll_event().is_some() {}
        while let Some(f) = c.node.poll_transmit() {
            progress = true;
            let lat = 1 + self.rng.below(80);
            c.to_hub.push(self.now, lat, f);
        }
        self.conns[ix] = Some(c);
        progress
    }

    fn node_event(&mut self, ix: usize, c: &mut Conn, e: LinkEvent) {
        let n = &mut self.nodes[ix];
        match c.uplink.on_event(&mut c.node, &mut n.outbox, e) {
            UplinkOutput::Nothing
            | UplinkOutput::Up { .. }
            | UplinkOutput::Registered { .. }
            | UplinkOutput::Directory(_) => {}
            UplinkOutput::Request { id, .. } => {
                c.node
                    .respond(id, Response::Peers(vec![]))
                    .expect("respond");
            }
            UplinkOutput::Answered { settled, .. } | UplinkOutput::Down { settled, .. } => {
                self.settled(true, settled)
            }
            UplinkOutput::Receipt(r) => {
                assert_eq!(r.outcome, tuic_proto::peer::ReceiptOutcome::Delivered);
                assert!(
                    self.delivered.contains_key(&r.message_id),
                    "seed {}: receipt for undelivered {}",
                    self.seed,
                    r.message_id
                );
                self.stats.receipts += 1;
            }
            UplinkOutput::Other(e) => match *e {
                LinkEvent::UpstreamToolsChanged { .. } | LinkEvent::UpstreamProgress { .. } => {}
                other => panic!("seed {}: odd event {other:?}", self.seed),
            },
        }
    }

    fn pump_hub(&mut self, ix: usize) -> bool {
        if !self.hub_up {
            return false;
        }
        let Some(mut c) = self.conns[ix].take() else {
            return false;
        };
        let mut progress = false;
        while let Some(e) = c.hub.poll_event() {
            progress = true;
            self.hub_event(ix, &mut c, e);
        }
        if c.hub.state() == LinkState::Up {
            for (id, m) in c.hub_end.take_sends() {
                let step = (ix, c.hub_end.generation(), id);
                let at = self.now + CUT_THROUGH_MS;
                let relayed =
                    common::sim::relay_send(&mut self.relay, &mut self.cut_through, &m, step, at);
                let resp = match relayed {
                    Relayed::Waits(dest) => {
                        self.at(at, Ev::CutThrough);
                        self.dirty.insert(ix_of(&dest));
                        continue;
                    }
                    Relayed::Answer(response) => response,
                    Relayed::Local(m) => {
                        let r = deliver(
                            &mut self.hub_inboxes,
                            &mut self.hub_dedupe,
                            self.now,
                            "local",
                            &m,
                        );
                        count_delivery(&r, &m, &mut self.delivered, &mut self.stats);
                        // The hub's own agent reads at once.
                        let page = self
                            .hub_inboxes
                            .inbox(self.now, "h0", None, None)
                            .expect("registered");
                        self.stats.missed += page.missed_count;
                        r
                    }
                };
                c.hub.respond(id, resp).expect("respond");
            }
            c.hub_end.dispatch(&mut self.relay, &mut c.hub);
        }
        while let Some(f) = c.hub.poll_transmit() {
            progress = true;
            let lat = 1 + self.rng.below(80);
            c.to_node.push(self.now, lat, f);
        }
        self.conns[ix] = Some(c);
        progress
    }

    fn hub_event(&mut self, ix: usize, c: &mut Conn, e: LinkEvent) {
        let local = || vec![entry("h0".to_owned())];
        match c.hub_end.on_event(&mut self.relay, &mut c.hub, e, local) {
            RelayOutput::Nothing => {}
            RelayOutput::Up { .. } => {
                self.hub_backoff[ix].reset();
                self.stats.link_ups += 1;
            }
            RelayOutput::Request { id, request } => {
                let resp = common::sim::answer_request(c, &self.relay, request, local);
                c.hub.respond(id, resp).expect("respond");
            }
            RelayOutput::Answered { settled, .. } => self.settled(false, settled),
            RelayOutput::Unexpected(e) => panic!("seed {}: odd answer {e:?}", self.seed),
            RelayOutput::Down { settled, .. } => {
                self.settled(false, settled);
                let delay = self.hub_backoff[ix].next_delay(self.rng.next_u64());
                self.plan_dial(ix, self.now + delay);
            }
        }
    }

    fn settled(&mut self, origin: bool, s: Settled) {
        for e in s.now.iter().chain(&s.after_commit) {
            self.tally(origin, e);
        }
        if origin {
            return;
        }
        let answers = common::sim::route_settled(
            &mut self.relay,
            &mut self.cut_through,
            &mut self.receipts,
            s,
        );
        for (step, response) in answers {
            self.stats.cut_through += 1;
            self.answer_step(step, response);
        }
    }

    fn end_cut_through(&mut self) {
        for (step, accepted) in
            common::sim::end_cut_through(&mut self.relay, &mut self.cut_through, self.now)
        {
            self.answer_step(step, accepted);
        }
    }

    fn answer_step(&mut self, (ix, generation, id): (usize, u64, u64), r: Response) {
        if let Some(c) = self.conns[ix].as_mut()
            && c.hub_end.generation() == generation
            && c.hub.state() == LinkState::Up
        {
            c.hub.respond(id, r).expect("respond");
            self.dirty.insert(ix);
        }
    }

    fn send_receipts(&mut self) {
        for (origin, r) in std::mem::take(&mut self.receipts) {
            let ix = ix_of(&origin);
            if let Some(c) = self.conns[ix].as_mut()
                && c.hub.state() == LinkState::Up
            {
                c.hub.receipt(r).expect("up");
                self.dirty.insert(ix);
            }
        }
    }

    /// One end down while the path is open resets the other; both down: the connection goes.
    fn reap_down(&mut self, ix: usize) {
        let partitioned = self.partitioned(ix);
        let Some(c) = self.conns[ix].as_mut() else {
            return;
        };
        if c.reap(partitioned) {
            let c = self.conns[ix].take().expect("conn");
            self.settle_conn(ix, c);
        }
    }

    /// Runs both ends' `Down` events of a torn-down connection through the real ends.
    fn settle_conn(&mut self, ix: usize, mut c: Conn) {
        self.wake_at[ix] = u64::MAX;
        if self.hub_up {
            while let Some(e) = c.hub.poll_event() {
                if let LinkEvent::Down { .. } = e {
                    self.hub_event(ix, &mut c, e);
                }
            }
        }
        if self.nodes[ix].up {
            while let Some(e) = c.node.poll_event() {
                if let LinkEvent::Down { .. } = e {
                    self.node_event(ix, &mut c, e);
                }
            }
        }
        self.send_receipts();
    }

    fn tear_down(&mut self, ix: usize) {
        if let Some(mut c) = self.conns[ix].take() {
            c.hub.reset();
            c.node.reset();
            self.settle_conn(ix, c);
        }
    }

    fn dial(&mut self, ix: usize) {
        if !self.hub_up || self.conns[ix].is_some() {
            return;
        }
        if self.nodes[ix].up && !self.partitioned(ix) {
            let me = name(ix);
            let generation = self.relay.attach(&me);
            self.conns[ix] = Some(Conn::dial(self.now, &me, generation, false));
            self.dirty.insert(ix);
        } else {
            let delay = self.hub_backoff[ix].next_delay(self.rng.next_u64());
            self.plan_dial(ix, self.now + delay);
        }
    }

    fn read(&mut self, ix: usize) {
        let n = &mut self.nodes[ix];
        if !n.up {
            return;
        }
        // Agents keep reading: every few seconds, and soon again while mail waits.
        let next = if n.inboxes.peek(&agent(ix)).len() > 1 {
            20 + self.rng.below(400)
        } else {
            2_000 + self.rng.below(8_000)
        };
        let page = n
            .inboxes
            .inbox(
                self.now,
                &agent(ix),
                None,
                Some(1 + self.rng.below(4) as usize),
            )
            .expect("registered");
        self.stats.missed += page.missed_count;
        let t = self.now + next;
        self.plan_read(ix, t);
    }

    fn send_one(&mut self) {
        let from_ix = self.talkers[self.rng.below(self.talkers.len() as u64) as usize];
        if !self.nodes[from_ix].up {
            return;
        }
        let to = if self.rng.chance(5) {
            "local/h0".to_owned()
        } else {
            let to_ix = self.rng.below(self.n as u64) as usize;
            format!("{}/{}", name(to_ix), agent(to_ix))
        };
        self.next_msg += 1;
        let id = format!("s{}-m{}", self.seed, self.next_msg);
        let msg = WireMessage {
            message_id: id.clone(),
            from: agent(from_ix),
            to,
            message: "x".repeat(1 + self.rng.below(300) as usize),
            timestamp_ms: self.now,
            from_name: None,
            kind: None,
            lifecycle: None,
        };
        self.stats.sent += 1;
        match self.nodes[from_ix].outbox.push(msg) {
            Ok(_) => {
                self.stats.accepted += 1;
                self.accepted.insert(id);
                self.dirty.insert(from_ix);
            }
            Err(OutboxError::Full { .. }) => self.stats.refused_at_send += 1,
            Err(e) => panic!("seed {}: unexpected push error {e}", self.seed),
        }
    }

    /// A group fault: a rack (a run of neighbouring nodes, up to 2 % of them) is partitioned,
    /// reset or crashed; or the hub crashes.
    fn fault_of(&mut self, kind: u64) {
        let rack = 1 + self.rng.below((self.n as u64 / 50).max(1)) as usize;
        let a = self.rng.below(self.n as u64) as usize;
        let b = (a + rack).min(self.n);
        match kind {
            0..=34 => {
                let until = self.now + 1_000 + self.rng.below(30_000);
                for ix in a..b {
                    self.partitioned_until[ix] = self.partitioned_until[ix].max(until);
                }
                self.at(until, Ev::Heal(a, b));
                self.stats.partitions += 1;
                self.stats.partitioned_nodes += (b - a) as u64;
            }
            35..=59 => {
                for ix in a..b {
                    if self.conns[ix].is_some() {
                        self.tear_down(ix);
                        self.stats.resets += 1;
                    }
                }
            }
            60..=89 => {
                for ix in a..b {
                    if self.nodes[ix].up {
                        self.crash_node(ix);
                    }
                }
            }
            _ => {
                if self.hub_up {
                    self.crash_hub();
                }
            }
        }
    }

    fn crash_node(&mut self, ix: usize) {
        self.tear_down(ix);
        let n = &mut self.nodes[ix];
        self.stats.delivered_then_lost_with_memory += n.inboxes.peek(&agent(ix)).len() as u64;
        n.persisted = Some((
            serde_json::to_string(&n.outbox).expect("outbox serializes"),
            serde_json::to_string(&n.dedupe).expect("dedupe serializes"),
        ));
        n.up = false;
        self.stats.node_crashes += 1;
        let t = self.now + 500 + self.rng.below(20_000);
        self.at(t, Ev::Restart(ix));
    }

    fn restart(&mut self, ix: usize) {
        let n = &mut self.nodes[ix];
        if n.up {
            return;
        }
        let (o, d) = n.persisted.take().expect("persisted at crash");
        n.outbox = serde_json::from_str(&o).expect("outbox reloads");
        n.dedupe = serde_json::from_str(&d).expect("dedupe reloads");
        n.fresh_inboxes(ix, self.now);
        n.up = true;
        let t = self.now + 2_000 + self.rng.below(8_000);
        self.plan_read(ix, t);
    }

    fn crash_hub(&mut self) {
        for ix in 0..self.n {
            self.tear_down(ix);
        }
        self.cut_through = CutThroughWaits::new();
        self.stats.delivered_then_lost_with_memory += self.hub_inboxes.peek("h0").len() as u64;
        self.hub_persisted = Some((
            self.relay
                .outboxes()
                .iter()
                .filter(|(_, o)| !o.is_empty() || o.next_seq() > 0)
                .map(|(k, o)| (k.clone(), serde_json::to_string(o).expect("serializes")))
                .collect(),
            serde_json::to_string(&self.hub_dedupe).expect("serializes"),
        ));
        self.hub_up = false;
        self.stats.hub_crashes += 1;
        let t = self.now + 500 + self.rng.below(20_000);
        self.at(t, Ev::HubRestart);
    }

    fn hub_restart(&mut self) {
        if self.hub_up {
            return;
        }
        let (p, d) = self.hub_persisted.take().expect("persisted at crash");
        self.hub_dedupe = serde_json::from_str(&d).expect("dedupe reloads");
        self.hub_inboxes = Inboxes::with_capacity(SIM_INBOX);
        self.hub_inboxes.register("h0");
        self.hub_inboxes
            .inbox(self.now, "h0", None, None)
            .expect("registered");
        self.relay = Relay::new();
        for ix in 0..self.n {
            self.relay
                .insert_outbox(&name(ix), Outbox::with_limits(&name(ix), self.limits));
        }
        for (k, s) in p {
            let o = serde_json::from_str(&s).expect("outbox reloads");
            self.relay.insert_outbox(&k, o);
        }
        self.last_shadows.clear();
        for b in &mut self.hub_backoff {
            b.reset();
        }
        self.hub_up = true;
        self.dial_all();
    }

    /// The housekeeping tick: held mail goes out again on both ends, and a changed directory
    /// is pushed to every node (the hub compares per link; here the shadows are compared
    /// once, since an unchanged set is what every end already has).
    fn tick(&mut self) {
        for ix in 0..self.n {
            if self.nodes[ix].up && !self.nodes[ix].outbox.is_empty() {
                self.nodes[ix].outbox.resume_held();
                self.dirty.insert(ix);
            }
        }
        if !self.hub_up {
            return;
        }
        let busy: Vec<String> = self
            .relay
            .outboxes()
            .iter()
            .filter(|(_, o)| !o.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        for k in busy {
            self.relay.tick(&k);
            self.dirty.insert(ix_of(&k));
        }
        let shadows = self.relay.shadow_peers();
        if shadows != self.last_shadows {
            self.last_shadows = shadows;
            let local = vec![entry("h0".to_owned())];
            for ix in 0..self.n {
                if let Some(c) = self.conns[ix].as_mut()
                    && c.hub.state() == LinkState::Up
                {
                    c.hub_end
                        .push_directory(&self.relay, &mut c.hub, local.clone());
                    self.dirty.insert(ix);
                }
            }
        }
    }

    fn tally(&mut self, origin: bool, e: &OutboxEvent) {
        let (refused, uncertain) = (&mut self.refused, &mut self.uncertain_final);
        common::sim::tally(self.seed, origin, e, refused, uncertain);
    }

    /// The count and byte bounds of the outboxes a step touched.
    fn check_bounds(&mut self, ix: usize) {
        let l = self.limits;
        let me = name(ix);
        for o in [Some(&self.nodes[ix].outbox), self.relay.outbox(&me)]
            .into_iter()
            .flatten()
        {
            assert!(o.len() <= l.max_messages, "seed {}: count bound", self.seed);
            assert!(o.bytes() <= l.max_bytes, "seed {}: byte bound", self.seed);
            self.stats.max_outbox_len = self.stats.max_outbox_len.max(o.len());
        }
    }

    fn finish(mut self) -> Stats {
        self.stats.virtual_ms = self.now;
        if !self.quiet() {
            let down: Vec<usize> = (0..self.n)
                .filter(|&ix| {
                    !self.conns[ix].as_ref().is_some_and(|c| {
                        c.hub.state() == LinkState::Up && c.node.state() == LinkState::Up
                    })
                })
                .take(5)
                .collect();
            let busy: Vec<(usize, usize)> = (0..self.n)
                .filter(|&ix| !self.nodes[ix].outbox.is_empty())
                .map(|ix| (ix, self.nodes[ix].outbox.len()))
                .take(5)
                .collect();
            let held: Vec<(&String, usize)> = self
                .relay
                .outboxes()
                .iter()
                .filter(|(_, o)| !o.is_empty())
                .map(|(k, o)| (k, o.len()))
                .take(5)
                .collect();
            let first = down.first().map(|&ix| {
                let c = self.conns[ix].as_ref();
                (
                    self.nodes[ix].up,
                    c.map(|c| (c.hub.state(), c.node.state())),
                    self.dial_due[ix],
                    self.wake_at[ix],
                )
            });
            panic!(
                "seed {}: not quiet {} ms after healing (now {}): links not up {down:?} {first:?}, node outboxes {busy:?}, hub outboxes {held:?}, cut-through {}",
                self.seed,
                SETTLE_MS,
                self.now,
                self.cut_through.len()
            );
        }
        // Every link converged: both ends up, one live link per node on the relay.
        for ix in 0..self.n {
            assert!(
                self.relay.is_up(&name(ix)),
                "seed {}: n{ix} not live",
                self.seed
            );
        }
        for id in &self.accepted {
            match self.delivered.get(id).copied().unwrap_or(0) {
                0 if self.refused.contains(id) || self.uncertain_final.contains(id) => {
                    self.stats.refused_later += 1
                }
                0 => self.stats.lost += 1,
                1 => self.stats.delivered += 1,
                n => {
                    self.stats.delivered += 1;
                    self.stats.duplicated += u64::from(n - 1);
                }
            }
        }
        self.stats
    }
}

/// Tallies a destination's answer; whether it was a fresh delivery.
fn count_delivery(
    resp: &Response,
    m: &WireMessage,
    delivered: &mut BTreeMap<String, u32>,
    stats: &mut Stats,
) -> bool {
    let a = common::sim::count_delivery(resp, m, delivered);
    if a == Answer::Held {
        stats.held += 1;
    }
    a == Answer::Delivered
}

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seeds(default: std::ops::Range<u64>) -> std::ops::Range<u64> {
    std::env::var("TUIC_SIM_SEEDS")
        .ok()
        .and_then(|v| {
            let (a, b) = v.split_once("..")?;
            Some(a.parse().ok()?..b.parse().ok()?)
        })
        .unwrap_or(default)
}

/// 10,000 nodes, one CI-sized seed (about 20 s of traffic with group partitions, resets,
/// crashes and at least one hub restart), in a few seconds of wall time.
#[test]
fn ten_thousand_nodes_lose_nothing_duplicate_nothing_and_every_link_converges() {
    let n = env_u64("TUIC_SIM_NODES", 10_000) as usize;
    let traffic = env_u64("TUIC_SIM_TRAFFIC_MS", 20_000);
    for seed in seeds(0..1) {
        let started = std::time::Instant::now();
        let mut sim = Sim::new(seed, n, traffic);
        // Each kind of fault at least once per seed: a rack partitioned, reset, crashed, and
        // the hub crashed and restarted.
        for (i, kind) in [0, 35, 60, 90].into_iter().enumerate() {
            sim.at(traffic * (i as u64 + 1) / 5, Ev::FaultOf(kind));
        }
        let s = sim.run();
        eprintln!(
            "seed {seed}: {n} nodes, {:.1} s wall: {s:?}",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(s.lost, 0, "seed {seed}: lost {s:?}");
        assert_eq!(s.duplicated, 0, "seed {seed}: duplicated {s:?}");
        assert_eq!(s.missed, 0, "seed {seed}: evicted unread mail {s:?}");
        assert!(
            s.hub_crashes >= 1 && s.node_crashes > 0 && s.partitions > 0,
            "{s:?}"
        );
        assert!(s.delivered > 0 && s.link_ups as usize > n, "{s:?}");
    }
}
