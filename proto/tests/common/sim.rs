//! The simulators' shared harness (`sim.rs`, `sim_scale.rs`): the wire between two link ends,
//! the hub's relay step with its cut-through waits (the real [`CutThroughWaits`] the hub's
//! link task drives), the routing of settled outcomes, and the end-to-end ledger's readings
//! of sender outcomes and destination answers.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tuic_proto::peer::{
    AckOutcome, CutThroughWaits, ErrorCode, OutboxEvent, Receipt, Relay, Response, Route,
    SenderOutcome, Settled, Step, WireMessage,
};

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
