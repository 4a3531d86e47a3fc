//! Cut-through: a node link's relay steps that wait, briefly, for the destinations' answers
//! before answering the node (see [`CutThrough`]). The waits and their deadlines are the
//! sans-IO [`CutThroughWaits`] the seeded simulator drives; this is its IO shell (the answer
//! channel, the hub lock, the link).

use std::sync::mpsc as std_mpsc;

use tokio::sync::mpsc;
use tuic_proto::peer::{CutThroughWaits, PeerLink, RequestId, Response};

use super::{CutSink, Held, HubCmd, PeerHub};

/// Relayed mail whose answer to the node waits for the destination (cut-through).
#[derive(Debug)]
pub struct WaitingRelay {
    /// The node's `send` request.
    pub(super) rid: RequestId,
    pub(super) held: Held,
    /// The answer if custody is committed instead (`accepted`).
    pub(super) accepted: Response,
}

/// A node link's relay steps that wait for destinations' answers. The step does not block:
/// the mail is routed, the answers known at once go back, and each message taken into an
/// outbox waits here up to `tuning.peer_cut_through_ms` (20 ms) for the destination's
/// answer, which the destination's link hands to `answers` (see [`Inner::route`]) and wakes
/// this link: a `delivered`/`duplicate` goes back to the node as the answer, a refusal as the
/// refusal (the node's first attempt, so it reports `refused`), with no custody commit here —
/// the record an answer removes before any commit took it is never written. Mail still
/// unanswered at its deadline leaves the cut-through (its answer becomes a receipt), is
/// committed with the next group, and is answered `accepted` once that commit ends
/// ([`HubCmd::Custody`]). Meanwhile the link keeps reading: sends that arrive during a wait
/// are routed at once instead of gathering behind it.
pub(super) struct CutThrough {
    pub(super) sink: CutSink,
    answers: std_mpsc::Receiver<(String, Response)>,
    /// The waiting steps by message id, with their deadlines (mono ms).
    waits: CutThroughWaits<WaitingRelay>,
}

impl CutThrough {
    pub(super) fn new(wake: mpsc::UnboundedSender<HubCmd>) -> Self {
        let (tx, answers) = std_mpsc::channel();
        Self {
            sink: CutSink { answers: tx, wake },
            answers,
            waits: CutThroughWaits::new(),
        }
    }

    /// Makes `w` wait for its destination's answer until `deadline` (mono ms; a deadline
    /// earlier than the last one's, after `peer_cut_through_ms` was shortened, waits as long
    /// as the mail before it).
    pub(super) fn hold(&mut self, w: WaitingRelay, deadline: u64) {
        self.waits.hold(w.held.message_id.clone(), w, deadline);
    }

    /// Answers the waiting mail the destinations answered.
    pub(super) fn answer(&mut self, link: &mut PeerLink) {
        while let Ok((id, r)) = self.answers.try_recv() {
            if let Some(w) = self.waits.answer(&id) {
                let _ = link.respond(w.rid, r);
            }
        }
    }

    /// The earliest deadline (mono ms).
    pub(super) fn deadline(&self) -> Option<u64> {
        self.waits.poll_timeout()
    }

    /// Ends the cut-through of the mail whose deadline passed (all of it with `now = None`,
    /// when the link ends) and returns what is still unanswered: from now on the
    /// destination's answer to it becomes a receipt.
    pub(super) fn expire(
        &mut self,
        hub: &PeerHub,
        now: Option<u64>,
        link: &mut PeerLink,
    ) -> Vec<WaitingRelay> {
        let due = self.waits.expire(now);
        if due.is_empty() {
            return Vec::new();
        }
        {
            // Under the hub lock: after this nothing more is handed here, and what was
            // handed before is drained below.
            let mut g = hub.lock();
            g.relay.end_cut_through(due.iter().map(String::as_str));
            for id in &due {
                g.relaying.remove(id);
            }
        }
        self.answer(link);
        due.iter().filter_map(|id| self.waits.answer(id)).collect()
    }
}
