//! The simulators' shared harness (`sim.rs`, `sim_scale.rs`): the wire between two link ends,
//! the hub's relay step with its cut-through waits (the real [`CutThroughWaits`] the hub's
//! link task drives), the routing of settled outcomes, and the end-to-end ledger's readings
//! of sender outcomes and destination answers.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tuic_proto::peer::{
    AckOutcome, CutThroughWaits, ErrorCode, LinkConfig, LinkRole, LinkState, OutboxEvent,
    OutboxLimits, PeerEntry, PeerLink, Receipt, Relay, RelayEnd, Request, Response, Route,
    SenderOutcome, Settled, Step, Uplink, WireMessage,
};

use super::Rng;

/// A run's outbox bounds: the spec's with `spec`, else tight ones drawn from `rng`, so
/// refusals and the dispatch window are exercised.
pub fn seeded_limits(spec: bool, rng: &mut Rng) -> OutboxLimits {
    if spec {
        OutboxLimits::default()
    } else {
        OutboxLimits {
            max_messages: 10 + rng.below(40) as usize,
            max_bytes: 2_000 + rng.below(6_000),
            max_in_flight_per_recipient: 1 + rng.below(16),
        }
    }
}

/// One direction of a connection: frames with their arrival times. In order, like a
/// WebSocket or a QUIC stream; with `reorder`, frames take independent latencies and may
/// overtake each other (a reordering proxy, or a transport with several streams).
pub struct Pipe<F> {
    q: VecDeque<(u64, F)>,
    last: u64,
    reorder: bool,
}

impl<F> Default for Pipe<F> {
    fn default() -> Self {
        Self::new(false)
    }
}

impl<F> Pipe<F> {
    pub fn new(reorder: bool) -> Self {
        Self {
            q: VecDeque::new(),
            last: 0,
            reorder,
        }
    }

    /// Puts `frame` on the wire at `now`, arriving `latency` later (never before the frame
    /// ahead of it, unless the pipe reorders).
    pub fn push(&mut self, now: u64, latency: u64, frame: F) {
        if self.reorder {
            let at = now + latency;
            let i = self.q.partition_point(|(t, _)| *t <= at);
            self.q.insert(i, (at, frame));
        } else {
            let at = (now + latency).max(self.last);
            self.last = at;
            self.q.push_back((at, frame));
        }
    }

    /// The next frame that has arrived by `now`.
    pub fn pop_due(&mut self, now: u64) -> Option<F> {
        if self.q.front().is_some_and(|(at, _)| *at <= now) {
            self.q.pop_front().map(|(_, f)| f)
        } else {
            None
        }
    }

    /// When the next frame arrives.
    pub fn next_at(&self) -> Option<u64> {
        self.q.front().map(|(at, _)| *at)
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

/// One connection between the hub and node `x`: both link ends, the hub's `RelayEnd` and the
/// node's `Uplink` (the real ends the processes run: the relay's side, and the node's
/// register-before-send gate, vouching and settling), and the wire each way.
pub struct Conn<F> {
    pub hub: PeerLink,
    pub node: PeerLink,
    pub hub_end: RelayEnd,
    pub uplink: Uplink,
    pub to_node: Pipe<F>,
    pub to_hub: Pipe<F>,
}

impl<F> Conn<F> {
    /// The hub dials node `x` at `now`: the relay's link `generation`.
    pub fn dial(now: u64, x: &str, generation: u64, reorder: bool) -> Self {
        Self {
            hub: PeerLink::new(now, LinkConfig::new("hub", x, LinkRole::Hub)),
            node: PeerLink::new(now, LinkConfig::new(x, x, LinkRole::Node)),
            hub_end: RelayEnd::new(x, generation),
            uplink: Uplink::new(),
            to_node: Pipe::new(reorder),
            to_hub: Pipe::new(reorder),
        }
    }

    /// When something next happens on this connection: a frame arriving (held until `held`
    /// while partitioned) or an end's timer.
    pub fn next_at(&self, held: u64) -> Option<u64> {
        let frames = [&self.to_node, &self.to_hub]
            .into_iter()
            .filter_map(|p| p.next_at().map(|at| at.max(held)));
        let timers = [&self.hub, &self.node]
            .into_iter()
            .filter_map(PeerLink::poll_timeout);
        frames.chain(timers).min()
    }

    /// One end down while the path is open resets the other (the FIN/RST reaches it); across
    /// a partition the other end finds out by its own liveness. Whether both ends are down:
    /// then the connection goes.
    pub fn reap(&mut self, partitioned: bool) -> bool {
        let hub_down = self.hub.state() == LinkState::Down;
        let node_down = self.node.state() == LinkState::Down;
        if (hub_down || node_down) && !partitioned {
            self.hub.reset();
            self.node.reset();
        }
        self.hub.state() == LinkState::Down && self.node.state() == LinkState::Down
    }
}

/// The hub's answer to a node's request: `list_peers` from the relay's shadows and the hub's
/// own peers (`local`), nothing else asked in the simulators.
pub fn answer_request<F>(
    c: &Conn<F>,
    relay: &Relay,
    request: Request,
    local: impl FnOnce() -> Vec<PeerEntry>,
) -> Response {
    match request {
        Request::ListPeers { path } => c.hub_end.list_peers(relay, local(), path.as_deref()),
        _ => Response::Peers(vec![]),
    }
}

/// What the hub's relay step did with a node's `send`.
pub enum Relayed {
    /// Taken into connection `.0`'s outbox: the step waits for the destination's answer.
    Waits(String),
    /// Answered at once.
    Answer(Response),
    /// For one of the hub's own peers: deliver it there.
    Local(WireMessage),
}

/// The hub's relay step for `m`, sent as request `step` of a node link: mail taken into an
/// outbox waits in `waits` until `deadline`, as the hub's link task holds it.
pub fn relay_send<K>(
    relay: &mut Relay,
    waits: &mut CutThroughWaits<K>,
    m: &WireMessage,
    step: K,
    deadline: u64,
) -> Relayed {
    match relay.relay(m, true) {
        Step::Answered {
            custody: Some(dest),
            ..
        } => {
            waits.hold(m.message_id.clone(), step, deadline);
            Relayed::Waits(dest)
        }
        Step::Answered { response, .. } => Relayed::Answer(response),
        Step::Local(m) => Relayed::Local(m),
    }
}

/// Routes what the hub's end settled (commits are instant here): receipts go to `receipts`
/// for their origins' links; a destination's answer to a waiting relay step comes back with
/// that step, for the caller to answer the node with.
pub fn route_settled<K>(
    relay: &mut Relay,
    waits: &mut CutThroughWaits<K>,
    receipts: &mut Vec<(String, Receipt)>,
    s: Settled,
) -> Vec<(K, Response)> {
    let Settled {
        connection,
        now,
        after_commit,
    } = s;
    let mut answers = Vec::new();
    for e in now.into_iter().chain(after_commit) {
        match relay.route(&connection, e) {
            Route::Receipt { origin, receipt } => receipts.push((origin, receipt)),
            Route::CutThrough {
                message_id,
                response,
            } => {
                let step = waits.answer(&message_id).expect("a waiting step");
                answers.push((step, response));
            }
            Route::Sender { .. } | Route::Dropped { .. } => {}
        }
    }
    answers
}

/// Relay steps whose wait ran out by `now` answer `accepted` (the hub holds the mail); their
/// destination's answer becomes a receipt again.
pub fn end_cut_through<K>(
    relay: &mut Relay,
    waits: &mut CutThroughWaits<K>,
    now: u64,
) -> Vec<(K, Response)> {
    let due = waits.expire(Some(now));
    relay.end_cut_through(due.iter().map(String::as_str));
    due.into_iter()
        .map(|id| {
            let step = waits.answer(&id).expect("due");
            let accepted = Response::SendAck {
                message_id: id,
                outcome: AckOutcome::Accepted,
            };
            (step, accepted)
        })
        .collect()
}

/// Records a sender outcome: a refusal into `refused`, a refused resend into
/// `uncertain_final`; only the origin's own outbox may refuse (the hub never refuses after
/// taking custody). Whether it reported an uncertain outcome.
pub fn tally(
    seed: u64,
    origin: bool,
    e: &OutboxEvent,
    refused: &mut BTreeSet<String>,
    uncertain_final: &mut BTreeSet<String>,
) -> bool {
    let into = match &e.outcome {
        SenderOutcome::Refused { .. } => refused,
        SenderOutcome::RefusedOnRetry { .. } => uncertain_final,
        SenderOutcome::Uncertain { .. } => return true,
        SenderOutcome::Accepted | SenderOutcome::Delivered => return false,
    };
    assert!(
        origin,
        "seed {seed}: the hub refused {} after taking custody",
        e.message_id
    );
    into.insert(e.message_id.clone());
    false
}

/// A destination's answer to forwarded mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Delivered fresh (counted in the ledger).
    Delivered,
    /// A resend the dedupe ring absorbed.
    Duplicate,
    /// `recipient_full`: the destination holds it at the previous hop.
    Held,
}

/// Reads a destination's answer to `m`, counting fresh deliveries per id; any other refusal
/// fails the run.
pub fn count_delivery(
    resp: &Response,
    m: &WireMessage,
    delivered: &mut BTreeMap<String, u32>,
) -> Answer {
    match resp {
        Response::SendAck {
            outcome: AckOutcome::Delivered,
            ..
        } => {
            *delivered.entry(m.message_id.clone()).or_default() += 1;
            Answer::Delivered
        }
        Response::SendAck {
            outcome: AckOutcome::Duplicate,
            ..
        } => Answer::Duplicate,
        Response::Error {
            code: ErrorCode::RecipientFull,
            ..
        } => Answer::Held,
        other => panic!("destination refused {}: {other:?}", m.message_id),
    }
}
