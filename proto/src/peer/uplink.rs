//! The node's side of its link to a hub as a sans-IO state machine ([`Uplink`], one per
//! link): the register-before-send gate (mail is dispatched only while no `register` is
//! unanswered, so a `send` never overtakes the registration that makes its sender valid),
//! vouching for the senders of held mail (after a restart the in-memory registry is empty,
//! but the node accepted their mail, so the hub must accept its resend), the batching of the
//! hub's `send`s of one step, and the settling of the uplink outbox on answers and on
//! link down — with the `refused_by` rewrite: a refusal names the connection the hub said
//! refused (its outbox for another node may be the full one), not this node's uplink.
//!
//! Inputs are link events ([`Uplink::on_event`]), the node's current peer set
//! ([`Uplink::pump`]) and the outbox it settles, which the caller owns (agents push into it
//! under the caller's lock). Outputs are frames on the `PeerLink` the caller passes in and
//! [`UplinkOutput`] values for what only the node's IO can do: deliver a step's `send`s into
//! its inboxes, answer `list_peers`/`inbox`/`wait` and the upstream-tool answers, keep the
//! hub's directory, tell waiting senders ([`Settled`]) once their refusals are committed.
//!
//! Deliberately absent: inboxes, dedupe rings, persistence, waiting, clocks. The node's
//! process (`node/src/peer/endpoint.rs`) and the simulator (`proto/tests/sim.rs`) both drive
//! exactly this.

use super::frame::{ErrorCode, PeerEntry, Receipt, RequestId, WireMessage};
use super::link::{DownReason, LinkEvent, PeerLink, Request, Response};
use super::outbox::{Outbox, SenderOutcome};
use super::relay::Settled;

/// What the IO must do after a link event the uplink handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UplinkOutput {
    /// Nothing more.
    Nothing,
    /// The handshake finished.
    Up {
        /// The hub's `node_id`.
        remote_id: String,
    },
    /// The hub's directory arrived (and was acknowledged): every peer it routes to, each with
    /// an address.
    Directory(Vec<PeerEntry>),
    /// A request only the node's IO can answer (`list_peers`, `inbox`, `wait`, and the
    /// upstream-tool requests the link refuses on a node's end anyway).
    Request {
        /// Its id.
        id: RequestId,
        /// The request.
        request: Request,
    },
    /// The hub answered our `register`.
    Registered {
        /// Its refusal, when it refused the peer set.
        refused: Option<(ErrorCode, String)>,
    },
    /// The hub answered one of our `send`s.
    Answered {
        /// The message as sent.
        message: WireMessage,
        /// The answer.
        response: Response,
        /// The outcomes for waiting senders.
        settled: Settled,
    },
    /// The hub reports how relayed mail ended.
    Receipt(Receipt),
    /// An event that is not about mail (upstream tools, their answers and progress).
    Other(Box<LinkEvent>),
    /// The link is down: mail on the wire is uncertain and will be resent.
    Down {
        /// Why.
        reason: DownReason,
        /// The outcomes for waiting senders.
        settled: Settled,
    },
}

/// The node's end of one link to its hub.
#[derive(Debug, Default)]
pub struct Uplink {
    /// The peer set last sent in `register`.
    registered: Option<Vec<PeerEntry>>,
    register_pending: Option<RequestId>,
    /// The hub acknowledged a `register`: mail may flow.
    ready: bool,
    /// The hub's `send`s of this step, delivered together (one ring commit).
    sends: Vec<(RequestId, WireMessage)>,
}

impl Uplink {
    /// A fresh link's end: nothing registered, no mail may flow yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether mail may flow (the hub acknowledged the last `register`).
    pub fn ready(&self) -> bool {
        self.ready
    }

    /// The peer set to register: the node's own peers plus the senders of held mail, so a
    /// resend after a restart (which emptied the in-memory registry) is still vouched for.
    pub fn vouched(mut peers: Vec<PeerEntry>, outbox: &Outbox) -> Vec<PeerEntry> {
        for m in outbox.messages() {
            if !peers.iter().any(|e| e.tuic_session == m.from) {
                peers.push(PeerEntry {
                    tuic_session: m.from.clone(),
                    name: m.from_name.clone(),
                    orchestrator: false,
                    address: None,
                    alias: None,
                    session_id: None,
                    path: None,
                });
            }
        }
        peers
    }

    /// Settles the uplink outbox: applies `f` and collects its outcomes. `refused_by` names
    /// the connection a refusal came from when the hub said so, instead of this uplink.
    pub fn settle(
        outbox: &mut Outbox,
        refused_by: Option<&str>,
        f: impl FnOnce(&mut Outbox),
    ) -> Settled {
        let connection = outbox.connection_id().to_owned();
        let mut s = Settled::of(&connection, outbox, f);
        if let Some(by) = refused_by {
            for e in s.after_commit.iter_mut() {
                if let SenderOutcome::Refused { connection, .. }
                | SenderOutcome::RefusedOnRetry { connection, .. } = &mut e.outcome
                {
                    *connection = by.to_owned();
                }
            }
        }
        s
    }

    /// Handles one link event; `outbox` is the node's uplink outbox.
    pub fn on_event(
        &mut self,
        link: &mut PeerLink,
        outbox: &mut Outbox,
        event: LinkEvent,
    ) -> UplinkOutput {
        match event {
            LinkEvent::Up { remote_id } => UplinkOutput::Up { remote_id },
            LinkEvent::Request { id, request } => match request {
                Request::Send(m) => {
                    self.sends.push((id, m));
                    UplinkOutput::Nothing
                }
                Request::Register { peers } => {
                    let _ = link.respond(id, Response::RegisterAck);
                    UplinkOutput::Directory(
                        peers.into_iter().filter(|p| p.address.is_some()).collect(),
                    )
                }
                request => UplinkOutput::Request { id, request },
            },
            LinkEvent::Response {
                id,
                request: Request::Register { .. },
                response,
            } => {
                if self.register_pending == Some(id) {
                    self.register_pending = None;
                    self.ready = true;
                }
                UplinkOutput::Registered {
                    refused: match response {
                        Response::Error { code, message, .. } => Some((code, message)),
                        _ => None,
                    },
                }
            }
            LinkEvent::Response {
                id,
                request: Request::Send(m),
                response,
            } => {
                let settled = match &response {
                    Response::SendAck { outcome, .. } => {
                        Self::settle(outbox, None, |o| o.on_ack(&m.message_id, *outcome))
                    }
                    Response::Error {
                        code,
                        message,
                        connection,
                    } => Self::settle(outbox, Some(connection), |o| {
                        o.on_refused(&m.message_id, *code, message)
                    }),
                    _ => {
                        return UplinkOutput::Other(Box::new(LinkEvent::Response {
                            id,
                            request: Request::Send(m),
                            response,
                        }));
                    }
                };
                UplinkOutput::Answered {
                    message: m,
                    response,
                    settled,
                }
            }
            LinkEvent::Receipt(r) => UplinkOutput::Receipt(r),
            LinkEvent::Down { reason, .. } => {
                // Requests of a link that is gone get no answer (the hub resends).
                self.sends.clear();
                self.ready = false;
                let settled = Self::settle(outbox, None, Outbox::on_link_down);
                UplinkOutput::Down { reason, settled }
            }
            other @ (LinkEvent::Response { .. }
            | LinkEvent::UpstreamToolsChanged { .. }
            | LinkEvent::UpstreamProgress { .. }) => UplinkOutput::Other(Box::new(other)),
        }
    }

    /// The hub's `send`s of this step, to deliver together and answer in order.
    pub fn take_sends(&mut self) -> Vec<(RequestId, WireMessage)> {
        std::mem::take(&mut self.sends)
    }

    /// After every step while the link is up: re-registers when the peer set (`peers`, the
    /// node's own; the senders of held mail are added here) changed, and dispatches the outbox
    /// while no `register` is unanswered.
    pub fn pump(&mut self, link: &mut PeerLink, peers: Vec<PeerEntry>, outbox: &mut Outbox) {
        let peers = Self::vouched(peers, outbox);
        if self.register_pending.is_none() && self.registered.as_ref() != Some(&peers) {
            match link.request(Request::Register {
                peers: peers.clone(),
            }) {
                Ok(id) => {
                    self.register_pending = Some(id);
                    self.registered = Some(peers);
                    self.ready = false;
                }
                Err(_) => return,
            }
        }
        if !self.ready {
            return;
        }
        while let Some(m) = outbox.poll_dispatch() {
            if link.request(Request::Send(m)).is_err() {
                break;
            }
        }
    }
}
