//! The hub's side of the peer links as a sans-IO state machine: one [`Relay`] per hub (the
//! per-connection outboxes, the shadows of every node's registered peers with the link
//! generation that registered them, the live links, the relay steps waiting for a
//! destination's answer) and one [`RelayEnd`] per link (its connection, generation, the
//! directory last pushed and the `send`s of the current step).
//!
//! Inputs are the link's events ([`RelayEnd::on_event`]), the relay of stamped mail
//! ([`Relay::relay`]), ticks ([`Relay::tick`]) and commit results (the caller routes what a
//! commit released with [`Relay::route`]). Outputs are frames on the `PeerLink` the caller
//! passes in, and typed values: [`RelayOutput`] (what the IO must do: answer a request it
//! owns, act on settled outcomes, log a link that went down), [`Settled`] (outcomes to route
//! now and refusals that wait for the commit of the removal they make) and [`Route`] (where
//! one outcome goes: the hub's own waiting sender, the relay step that waits for it, or a
//! receipt to the origin's link).
//!
//! Deliberately absent: persistence (the caller commits each outbox's journal, see
//! [`Outbox::take_changes`]), the hub's local inboxes (a `local/<peer>` step comes back as
//! [`Step::Local`] for the caller to deliver), waiting (the cut-through wait is the caller's:
//! this only remembers which messages a step waits for), clocks and tasks. The hub's process
//! (`hub/src/peerlink.rs`) and the simulator (`proto/tests/sim.rs`) both drive exactly this.

use std::collections::{BTreeMap, BTreeSet};

use super::address::{LOCAL, format_address};
use super::deliver::{Routed, relay};
use super::frame::{AckOutcome, ErrorCode, PeerEntry, Receipt, RequestId, WireMessage};
use super::link::{DownReason, LinkEvent, PeerLink, Request, Response};
use super::outbox::{Outbox, OutboxEvent, SenderOutcome, Withdrawn};

/// Outcomes one change of an outbox produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    /// The outbox they came from (a hub connection, or a node's uplink).
    pub connection: String,
    /// Outcomes to hand on at once (acceptances, deliveries, uncertainty).
    pub now: Vec<OutboxEvent>,
    /// Refusals: handed on only once the removal they made is committed, so a resend after a
    /// crash never follows a `refused`.
    pub after_commit: Vec<OutboxEvent>,
}

impl Settled {
    /// Applies `f` to `outbox` and collects the outcomes it produced.
    pub fn of(connection: &str, outbox: &mut Outbox, f: impl FnOnce(&mut Outbox)) -> Self {
        f(outbox);
        let mut s = Settled {
            connection: connection.to_owned(),
            ..Settled::default()
        };
        while let Some(e) = outbox.poll_event() {
            if is_refusal(&e.outcome) {
                s.after_commit.push(e);
            } else {
                s.now.push(e);
            }
        }
        s
    }

    /// Whether nothing came out.
    pub fn is_empty(&self) -> bool {
        self.now.is_empty() && self.after_commit.is_empty()
    }
}

/// Whether an outcome is a refusal (final, and only told after its removal is committed).
pub fn is_refusal(o: &SenderOutcome) -> bool {
    matches!(
        o,
        SenderOutcome::Refused { .. } | SenderOutcome::RefusedOnRetry { .. }
    )
}

/// Where one outcome of a hub outbox goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// One of the hub's own agents sent it: tell its waiter (or, when it stopped waiting, its
    /// inbox about a refusal).
    Sender {
        /// The agent's peer id on the hub.
        sender: String,
        /// The message.
        message_id: String,
        /// Its destination address (`<connection>/<peer>`).
        to: String,
        /// What happened.
        outcome: SenderOutcome,
    },
    /// The relay step that took it from the previous hop still waits for the destination's
    /// answer ([`Relay::relay`] with cut-through): answer that hop with this instead of a
    /// receipt.
    CutThrough {
        /// The message.
        message_id: String,
        /// The answer for the previous hop.
        response: Response,
    },
    /// A receipt for the origin node, over its live link.
    Receipt {
        /// The origin connection.
        origin: String,
        /// The receipt.
        receipt: Receipt,
    },
    /// Nobody to tell: not final (accepted, uncertain), or the origin's link is down (the
    /// origin stays at `accepted`; a lost receipt is never replaced by a guess).
    Dropped {
        /// The message.
        message_id: String,
        /// The origin connection whose link was down, when a receipt was lost.
        origin: Option<String>,
    },
}

/// What [`Relay::relay`] made of one stamped message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Answered now: custody taken (`accepted`) or refused.
    Answered {
        /// The answer for the previous hop (or the hub's own sender).
        response: Response,
        /// The connection whose outbox took custody (the answer waits for its commit).
        custody: Option<String>,
    },
    /// Addressed to `local/<peer>`: the caller delivers it (with `to` = the peer).
    Local(WireMessage),
}

/// The hub's relay state across all its links.
#[derive(Debug, Default)]
pub struct Relay {
    /// One outbox per connection, towards that node.
    outboxes: BTreeMap<String, Outbox>,
    /// Peers each connected node registered over its link (with addresses), by the link
    /// generation that registered them: an older link ending never retires a newer one's.
    shadows: BTreeMap<String, (u64, Vec<PeerEntry>)>,
    /// The live link per connection, by generation.
    live: BTreeMap<String, u64>,
    next_generation: u64,
    /// Relayed mail whose previous hop is not answered yet (cut-through): the destination's
    /// final answer goes to that step instead of a receipt.
    relaying: BTreeSet<String>,
}

impl Relay {
    /// An empty relay.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a connection's outbox, e.g. one reloaded from the store.
    pub fn insert_outbox(&mut self, connection: &str, outbox: Outbox) {
        self.outboxes.insert(connection.to_owned(), outbox);
    }

    /// Makes sure a connection has an outbox.
    pub fn ensure_outbox(&mut self, connection: &str, make: impl FnOnce() -> Outbox) {
        self.outboxes
            .entry(connection.to_owned())
            .or_insert_with(make);
    }

    /// A connection's outbox.
    pub fn outbox(&self, connection: &str) -> Option<&Outbox> {
        self.outboxes.get(connection)
    }

    /// A connection's outbox, to change (the caller takes its journal for a commit).
    pub fn outbox_mut(&mut self, connection: &str) -> Option<&mut Outbox> {
        self.outboxes.get_mut(connection)
    }

    /// Every outbox, by connection.
    pub fn outboxes(&self) -> &BTreeMap<String, Outbox> {
        &self.outboxes
    }

    /// Every outbox, to change (the group committer takes their journals).
    pub fn outboxes_mut(&mut self) -> impl Iterator<Item = (&String, &mut Outbox)> {
        self.outboxes.iter_mut()
    }

    /// A new link for `connection` starts: its generation. It replaces any older one.
    pub fn attach(&mut self, connection: &str) -> u64 {
        self.next_generation += 1;
        self.live
            .insert(connection.to_owned(), self.next_generation);
        self.next_generation
    }

    /// Whether `connection` has a live link.
    pub fn is_up(&self, connection: &str) -> bool {
        self.live.contains_key(connection)
    }

    /// The link of `connection` with `generation` ended: its shadows are retired and the link
    /// forgotten (only when no newer link replaced it), and the mail on its wire becomes
    /// resendable (uncertain).
    pub fn detach(&mut self, connection: &str, generation: u64) -> Settled {
        if self
            .shadows
            .get(connection)
            .is_some_and(|(g, _)| *g == generation)
        {
            self.shadows.remove(connection);
        }
        if self.live.get(connection) == Some(&generation) {
            self.live.remove(connection);
        }
        self.settle(connection, Outbox::on_link_down)
    }

    /// A node's `register` over its link: its peers become this connection's shadows,
    /// addressed `<connection>/<peer>`. A node with no peers keeps no entry, so building a
    /// directory costs the nodes that registered peers, not every connected node (a hub of
    /// thousands of nodes, most with nobody to address, would otherwise walk them all on
    /// every link-up and tick).
    pub fn register(&mut self, connection: &str, generation: u64, peers: Vec<PeerEntry>) {
        if peers.is_empty() {
            self.shadows.remove(connection);
            return;
        }
        let shadows = peers
            .into_iter()
            .map(|mut p| {
                p.address = Some(format_address(connection, &p.tuic_session));
                p.alias = None;
                p.session_id = None;
                p
            })
            .collect();
        self.shadows
            .insert(connection.to_owned(), (generation, shadows));
    }

    /// Every node's shadows.
    pub fn shadow_peers(&self) -> Vec<PeerEntry> {
        self.shadows
            .values()
            .flat_map(|(_, p)| p.iter().cloned())
            .collect()
    }

    /// The directory a node is told about: the hub's own peers (`local` given by the caller,
    /// addressed `local/<id>` here) and every other connected node's shadows.
    pub fn directory_for(&self, connection: &str, local: Vec<PeerEntry>) -> Vec<PeerEntry> {
        let mut dir: Vec<PeerEntry> = local
            .into_iter()
            .map(|mut p| {
                p.address = Some(format_address(LOCAL, &p.tuic_session));
                p.alias = None;
                p.session_id = None;
                p
            })
            .collect();
        for (c, (_, peers)) in &self.shadows {
            if c != connection {
                dir.extend(peers.iter().cloned());
            }
        }
        dir
    }

    /// Routes one stamped message: into the destination connection's outbox (`accepted`,
    /// owing a commit before the answer goes out), a refusal naming the connection, or back
    /// to the caller for `local/<peer>`. With `cut_through` the destination's final answer
    /// is kept for this step ([`Route::CutThrough`]) until [`Relay::end_cut_through`].
    pub fn relay(&mut self, m: &WireMessage, cut_through: bool) -> Step {
        match relay(&mut self.outboxes, m) {
            Routed::Local(m) => Step::Local(m),
            Routed::Answered(response) => {
                let custody = match &response {
                    Response::SendAck {
                        outcome: AckOutcome::Accepted,
                        ..
                    } => m.to.split_once('/').map(|(c, _)| c.to_owned()),
                    _ => None,
                };
                if cut_through && custody.is_some() {
                    self.relaying.insert(m.message_id.clone());
                }
                Step::Answered { response, custody }
            }
        }
    }

    /// The relay step stopped waiting for these messages: their final answers become
    /// receipts again.
    pub fn end_cut_through<'a>(&mut self, message_ids: impl IntoIterator<Item = &'a str>) {
        for id in message_ids {
            self.relaying.remove(id);
        }
    }

    /// Takes custody back after a failed commit (see [`Outbox::withdraw`]).
    pub fn withdraw(&mut self, connection: &str, message_id: &str) -> Withdrawn {
        self.outboxes
            .get_mut(connection)
            .map_or(Withdrawn::NotHeld, |o| o.withdraw(message_id))
    }

    /// Applies a change to `connection`'s outbox and collects its outcomes.
    pub fn settle(&mut self, connection: &str, f: impl FnOnce(&mut Outbox)) -> Settled {
        match self.outboxes.get_mut(connection) {
            Some(o) => Settled::of(connection, o, f),
            None => Settled {
                connection: connection.to_owned(),
                ..Settled::default()
            },
        }
    }

    /// Where one outcome of `connection`'s outbox goes.
    pub fn route(&mut self, connection: &str, e: OutboxEvent) -> Route {
        if let Some(sender) = e.from.strip_prefix("local/") {
            return Route::Sender {
                sender: sender.to_owned(),
                to: format_address(connection, &e.to),
                message_id: e.message_id,
                outcome: e.outcome,
            };
        }
        if self.relaying.contains(&e.message_id) {
            let direct = match &e.outcome {
                SenderOutcome::Delivered => Some(Response::SendAck {
                    message_id: e.message_id.clone(),
                    outcome: AckOutcome::Delivered,
                }),
                SenderOutcome::Refused {
                    code,
                    connection,
                    message,
                } => Some(Response::Error {
                    code: *code,
                    connection: connection.clone(),
                    message: message.clone(),
                }),
                _ => None,
            };
            if let Some(response) = direct {
                self.relaying.remove(&e.message_id);
                return Route::CutThrough {
                    message_id: e.message_id,
                    response,
                };
            }
        }
        match e.receipt(connection) {
            Some((origin, receipt)) if self.live.contains_key(&origin) => {
                Route::Receipt { origin, receipt }
            }
            Some((origin, _)) => Route::Dropped {
                message_id: e.message_id,
                origin: Some(origin),
            },
            None => Route::Dropped {
                message_id: e.message_id,
                origin: None,
            },
        }
    }

    /// The housekeeping tick of `connection`'s link: mail a reading recipient had no room for
    /// goes out again (`recipient_full`).
    pub fn tick(&mut self, connection: &str) {
        if let Some(o) = self.outboxes.get_mut(connection) {
            o.resume_held();
        }
    }
}

/// What the IO must do after a link event the relay handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayOutput {
    /// Nothing more.
    Nothing,
    /// The handshake finished (the directory was pushed).
    Up {
        /// The node's `node_id`.
        remote_id: String,
    },
    /// A request the relay does not answer itself (`list_peers`, which needs the hub's own
    /// peers: answer it with [`RelayEnd::list_peers`]; the upstream tool requests).
    Request {
        /// Its id.
        id: RequestId,
        /// The request.
        request: Request,
    },
    /// The destination answered relayed mail.
    Answered {
        /// The message.
        message_id: String,
        /// Its recipient on that node.
        to: String,
        /// The refusal, when it was one (`recipient_full` holds it for a retry).
        refused: Option<(ErrorCode, String)>,
        /// The outcomes to route.
        settled: Settled,
    },
    /// An answer the relay did not expect (logged by the IO).
    Unexpected(Box<LinkEvent>),
    /// The link is down: shadows retired, in-flight mail resendable.
    Down {
        /// Why.
        reason: DownReason,
        /// Whether it had come up.
        was_up: bool,
        /// The outcomes to route (uncertainty of mail on the wire).
        settled: Settled,
    },
}

/// The hub's end of one link.
#[derive(Debug)]
pub struct RelayEnd {
    connection: String,
    generation: u64,
    /// The directory last pushed to this node.
    pushed: Option<Vec<PeerEntry>>,
    was_up: bool,
    /// The node's `send`s of this step, relayed together (one group commit).
    sends: Vec<(RequestId, WireMessage)>,
}

impl RelayEnd {
    /// The end of a link for `connection` (its generation from [`Relay::attach`]).
    pub fn new(connection: &str, generation: u64) -> Self {
        Self {
            connection: connection.to_owned(),
            generation,
            pushed: None,
            was_up: false,
            sends: Vec::new(),
        }
    }

    /// The connection.
    pub fn connection(&self) -> &str {
        &self.connection
    }

    /// This link's generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the link came up.
    pub fn was_up(&self) -> bool {
        self.was_up
    }

    /// Handles one link event. `local` gives the hub's own peers when the directory is due.
    pub fn on_event(
        &mut self,
        relay: &mut Relay,
        link: &mut PeerLink,
        event: LinkEvent,
        local: impl FnOnce() -> Vec<PeerEntry>,
    ) -> RelayOutput {
        match event {
            LinkEvent::Up { remote_id } => {
                self.was_up = true;
                self.push_directory(relay, link, local());
                RelayOutput::Up { remote_id }
            }
            LinkEvent::Request { id, request } => {
                let resp = match request {
                    Request::Register { peers } => {
                        relay.register(&self.connection, self.generation, peers);
                        Response::RegisterAck
                    }
                    Request::Send(m) => {
                        self.sends.push((id, m));
                        return RelayOutput::Nothing;
                    }
                    Request::Inbox { recipient, .. } | Request::Wait { recipient, .. } => {
                        Response::Error {
                            code: ErrorCode::UnknownRecipient,
                            connection: self.connection.clone(),
                            message: format!(
                                "the hub keeps no inbox for '{recipient}': it is read on its own node"
                            ),
                        }
                    }
                    request @ (Request::ListPeers { .. }
                    | Request::ListUpstreamTools
                    | Request::CallUpstreamTool { .. }) => {
                        return RelayOutput::Request { id, request };
                    }
                };
                let _ = link.respond(id, resp);
                RelayOutput::Nothing
            }
            LinkEvent::Response {
                id,
                request: Request::Send(m),
                response,
            } => {
                let refused = match &response {
                    Response::SendAck { .. } => None,
                    Response::Error { code, message, .. } => Some((*code, message.clone())),
                    _ => {
                        return RelayOutput::Unexpected(Box::new(LinkEvent::Response {
                            id,
                            request: Request::Send(m),
                            response,
                        }));
                    }
                };
                let settled = relay.settle(&self.connection, |o| match &response {
                    Response::SendAck { outcome, .. } => o.on_ack(&m.message_id, *outcome),
                    Response::Error { code, message, .. } => {
                        o.on_refused(&m.message_id, *code, message)
                    }
                    _ => {}
                });
                RelayOutput::Answered {
                    message_id: m.message_id,
                    to: m.to,
                    refused,
                    settled,
                }
            }
            LinkEvent::Response { .. }
            | LinkEvent::Receipt(_)
            | LinkEvent::UpstreamToolsChanged { .. }
            | LinkEvent::UpstreamProgress { .. } => RelayOutput::Nothing,
            LinkEvent::Down { reason, .. } => {
                // Requests of a link that is gone get no answer (the node resends).
                self.sends.clear();
                let settled = relay.detach(&self.connection, self.generation);
                RelayOutput::Down {
                    reason,
                    was_up: self.was_up,
                    settled,
                }
            }
        }
    }

    /// The answer to a node's `list_peers`: its directory, filtered by path.
    pub fn list_peers(&self, relay: &Relay, local: Vec<PeerEntry>, path: Option<&str>) -> Response {
        Response::Peers(
            relay
                .directory_for(&self.connection, local)
                .into_iter()
                .filter(|p| path.is_none() || p.path.as_deref() == path)
                .collect(),
        )
    }

    /// Pushes the directory as `register` when it changed since the last push.
    pub fn push_directory(&mut self, relay: &Relay, link: &mut PeerLink, local: Vec<PeerEntry>) {
        let dir = relay.directory_for(&self.connection, local);
        if self.pushed.as_ref() != Some(&dir)
            && link
                .request(Request::Register { peers: dir.clone() })
                .is_ok()
        {
            self.pushed = Some(dir);
        }
    }

    /// The node's `send`s of this step, to relay together.
    pub fn take_sends(&mut self) -> Vec<(RequestId, WireMessage)> {
        std::mem::take(&mut self.sends)
    }

    /// Sends what this connection's outbox may dispatch.
    pub fn dispatch(&self, relay: &mut Relay, link: &mut PeerLink) {
        if let Some(o) = relay.outboxes.get_mut(&self.connection) {
            while let Some(m) = o.poll_dispatch() {
                if link.request(Request::Send(m)).is_err() {
                    break;
                }
            }
        }
    }
}
