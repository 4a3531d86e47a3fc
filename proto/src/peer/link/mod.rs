//! The peer-link state machine: handshake, liveness, request matching and sender provenance.
//!
//! One [`PeerLink`] lives for one transport connection (a WebSocket today, a QUIC stream
//! later); a reconnect makes a new one. Frames go in through [`PeerLink::handle_frame`], time
//! through [`PeerLink::handle_timeout`]; frames to write come out of
//! [`PeerLink::poll_transmit`], things to act on out of [`PeerLink::poll_event`].
//!
//! Provenance: on the hub's end, a `send`, `inbox` or `wait` may only name a peer that this
//! node registered over this very link, never an address (`a/b`); the sender (or inbox owner)
//! the hub acts on is stamped `<connection_id>/<peer>`. On a node's end, the hub is the
//! authority for addresses: a sender must be a full address, and an inbox or wait names one of
//! the node's own peers. A frame that claims anything else is answered with an `error` frame
//! and never surfaces.
//!
//! Upstream tools flow one way: a node asks its hub (`list_upstream_tools`,
//! `call_upstream_tool`) and the hub hints `upstream_tools_changed`. A hub never asks a node
//! for its upstreams, so a node's end refuses those requests, and a hub's end refuses the hint.
//! A call that asked for progress gets `upstream_progress` frames while it is pending on the
//! hub's end ([`PeerLink::upstream_progress`] refuses once it was answered); the node's end
//! surfaces them only for its own pending call that asked, so no progress follows a result.
//!
//! The parts, one noun each: `handshake.rs` (the `hello` exchange), `liveness.rs` (pings and
//! deadlines), `request.rs` (requests, answers and matching them by id) and `provenance.rs`
//! (who a frame may speak for). This file holds the link, its events and the frame dispatch.

mod handshake;
mod liveness;
mod provenance;
mod request;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::mail::{InboxMessage, InboxPage, MAX_MESSAGE_BYTES, WaitOutcome};

use super::frame::{
    ErrorCode, Frame, LinkRole, PEER_PROTOCOL_VERSION, Receipt, RequestId, WireMessage,
};

pub use liveness::{MAX_MISSED_PINGS, PING_INTERVAL_MS};
pub use request::{Request, Response};

/// How a link is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkConfig {
    /// This process's id, sent in `hello`.
    pub local_id: String,
    /// The connection's id as the hub names it (`nodeb`); named in every error.
    pub connection_id: String,
    /// Which end this process is.
    pub role: LinkRole,
    /// Ping period.
    pub ping_interval_ms: u64,
    /// Missed pings before the link is declared down.
    pub max_missed_pings: u32,
}

impl LinkConfig {
    /// A config with the spec's liveness defaults.
    pub fn new(local_id: &str, connection_id: &str, role: LinkRole) -> Self {
        Self {
            local_id: local_id.to_owned(),
            connection_id: connection_id.to_owned(),
            role,
            ping_interval_ms: PING_INTERVAL_MS,
            max_missed_pings: MAX_MISSED_PINGS,
        }
    }
}

/// Where the link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// `hello` sent, waiting for the far side's.
    Handshaking,
    /// Both hellos exchanged; requests may flow.
    Up,
    /// Finished; make a new link to reconnect.
    Down,
}

/// Why a link went down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownReason {
    /// The far side's `hello` did not arrive in time.
    HandshakeTimeout,
    /// Nothing was heard for [`MAX_MISSED_PINGS`] ping intervals.
    PingTimeout,
    /// The transport reported a reset or close.
    Reset,
    /// The far side speaks another version.
    VersionMismatch {
        /// The version it announced.
        remote: u32,
    },
    /// The far side broke the protocol (for example a request before `hello`).
    ProtocolViolation(String),
    /// The far side sent a link-level `error` frame.
    RemoteError {
        /// Its code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// This side closed it.
    Closed,
}

/// Something the owner of a link must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// The handshake finished.
    Up {
        /// The far side's `node_id`.
        remote_id: String,
    },
    /// The far side asks for something; answer with [`PeerLink::respond`].
    Request {
        /// Its id, to pass back.
        id: RequestId,
        /// What it asks, with provenance applied.
        request: Request,
    },
    /// An answer to one of our requests.
    Response {
        /// Our request's id.
        id: RequestId,
        /// What we asked.
        request: Request,
        /// The answer.
        response: Response,
    },
    /// The hub reports how relayed mail ended (node end only).
    Receipt(Receipt),
    /// The hub's upstream tool catalogue changed (node end only).
    UpstreamToolsChanged {
        /// The hub's generation after the change.
        generation: u64,
    },
    /// Progress of one of our pending `call_upstream_tool` requests that asked for it (node
    /// end only).
    UpstreamProgress {
        /// Our request's id.
        id: RequestId,
        /// The notification's params, without a token.
        params: serde_json::Map<String, serde_json::Value>,
        /// Notifications the hub coalesced away just before this one.
        coalesced: u64,
    },
    /// The link is over. Requests without an answer are handed back: their outcome is
    /// uncertain (the far side may or may not have acted on them).
    Down {
        /// Why.
        reason: DownReason,
        /// Our unanswered requests.
        unanswered: Vec<(RequestId, Request)>,
    },
}

/// Errors of link operations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// Requests need an established link.
    #[error("peer link to '{connection}' is not up")]
    NotUp {
        /// The connection.
        connection: String,
    },
    /// No inbound request with this id awaits an answer.
    #[error("no pending request {id} on '{connection}'")]
    UnknownRequest {
        /// The id given.
        id: RequestId,
        /// The connection.
        connection: String,
    },
}

/// One side of one peer-link connection.
#[derive(Debug)]
pub struct PeerLink {
    config: LinkConfig,
    state: LinkState,
    transmit: VecDeque<Frame>,
    events: VecDeque<LinkEvent>,
    next_request: RequestId,
    /// Our requests awaiting an answer.
    outgoing: BTreeMap<RequestId, Request>,
    /// Their requests we have not answered yet (so a response cannot be forged by id).
    incoming: BTreeSet<RequestId>,
    /// Peers the far side registered; the only senders a node may speak for.
    registered: BTreeSet<String>,
    remote_id: Option<String>,
    next_ping: u64,
    unanswered_pings: u32,
    /// A probe's deadline ([`PeerLink::probe`]): nothing heard by then, the link is down.
    probe_deadline: Option<u64>,
    handshake_deadline: u64,
    ping_nonce: u64,
}

impl PeerLink {
    /// Starts a link at `now`; its `hello` is the first frame to transmit.
    pub fn new(now: u64, config: LinkConfig) -> Self {
        let hello = Frame::Hello {
            protocol_version: PEER_PROTOCOL_VERSION,
            node_id: config.local_id.clone(),
            role: config.role,
        };
        let handshake_deadline = now + config.ping_interval_ms * u64::from(config.max_missed_pings);
        Self {
            state: LinkState::Handshaking,
            transmit: VecDeque::from([hello]),
            events: VecDeque::new(),
            next_request: 1,
            outgoing: BTreeMap::new(),
            incoming: BTreeSet::new(),
            registered: BTreeSet::new(),
            remote_id: None,
            next_ping: now + config.ping_interval_ms,
            unanswered_pings: 0,
            probe_deadline: None,
            handshake_deadline,
            ping_nonce: 0,
            config,
        }
    }

    /// The link's state.
    pub fn state(&self) -> LinkState {
        self.state
    }

    /// The connection id this link belongs to.
    pub fn connection_id(&self) -> &str {
        &self.config.connection_id
    }

    /// The far side's `node_id`, once known.
    pub fn remote_id(&self) -> Option<&str> {
        self.remote_id.as_deref()
    }

    /// Decodes and handles one text frame; an undecodable frame (an unknown `type` such as a
    /// process-creation request, a missing field, not JSON) is answered with a `malformed`
    /// error and otherwise ignored.
    pub fn handle_text(&mut self, now: u64, text: &str) {
        match Frame::decode(text) {
            Ok(frame) => self.handle_frame(now, frame),
            Err(e) => {
                if self.state != LinkState::Down {
                    self.heard();
                    // Name the request when the frame carries a readable id, so the far side
                    // can fail that request instead of the whole link.
                    let id = serde_json::from_str::<serde_json::Value>(text)
                        .ok()
                        .and_then(|v| v.get("id")?.as_u64());
                    self.send_error(id, ErrorCode::Malformed, &e.to_string());
                }
            }
        }
    }

    /// Handles one decoded frame from the far side.
    pub fn handle_frame(&mut self, now: u64, frame: Frame) {
        let _ = now;
        if self.state == LinkState::Down {
            return;
        }
        self.heard();
        if self.state == LinkState::Handshaking {
            self.handshake(frame);
            return;
        }
        if frame.is_request()
            && let Some(id) = frame.request_id()
            && self.incoming.contains(&id)
        {
            self.send_error(Some(id), ErrorCode::Malformed, "request id already pending");
            return;
        }
        match frame {
            Frame::Hello { .. } => {
                self.send_error(None, ErrorCode::Malformed, "hello repeated");
            }
            Frame::Ping { nonce } => self.transmit.push_back(Frame::Pong { nonce }),
            Frame::Pong { .. } => {}
            Frame::Register { id, peers } => {
                if peers.iter().any(|p| p.tuic_session.is_empty()) {
                    self.send_error(Some(id), ErrorCode::Malformed, "empty peer id");
                    return;
                }
                if self.config.role == LinkRole::Hub {
                    if let Some(p) = peers.iter().find(|p| p.tuic_session.contains('/')) {
                        let msg =
                            format!("peer '{}' is an address, not a local peer", p.tuic_session);
                        self.send_error(Some(id), ErrorCode::SenderForged, &msg);
                        return;
                    }
                    self.registered = peers.iter().map(|p| p.tuic_session.clone()).collect();
                }
                self.inbound(id, Request::Register { peers });
            }
            Frame::ListPeers { id, path } => self.inbound(id, Request::ListPeers { path }),
            Frame::Send { id, message } if message.message.len() > MAX_MESSAGE_BYTES => {
                let msg = format!(
                    "message is {} bytes, the limit is {MAX_MESSAGE_BYTES}",
                    message.message.len()
                );
                self.send_error(Some(id), ErrorCode::TooLarge, &msg);
            }
            Frame::Send { id, mut message } => match self.stamp(&message.from) {
                Ok(from) => {
                    message.from = from;
                    self.inbound(id, Request::Send(message));
                }
                Err((code, msg)) => self.send_error(Some(id), code, &msg),
            },
            Frame::Inbox {
                id,
                recipient,
                since,
                limit,
            } => match self.owner(&recipient) {
                Ok(recipient) => self.inbound(
                    id,
                    Request::Inbox {
                        recipient,
                        since,
                        limit,
                    },
                ),
                Err((code, msg)) => self.send_error(Some(id), code, &msg),
            },
            Frame::Wait {
                id,
                recipient,
                since,
                timeout_ms,
            } => match self.owner(&recipient) {
                Ok(recipient) => self.inbound(
                    id,
                    Request::Wait {
                        recipient,
                        since,
                        timeout_ms,
                    },
                ),
                Err((code, msg)) => self.send_error(Some(id), code, &msg),
            },
            Frame::Receipt(r) => match self.config.role {
                LinkRole::Node => self.events.push_back(LinkEvent::Receipt(r)),
                LinkRole::Hub => {
                    self.send_error(None, ErrorCode::Malformed, "receipts flow from the hub");
                }
            },
            Frame::UpstreamToolsChanged { generation } => match self.config.role {
                LinkRole::Node => self
                    .events
                    .push_back(LinkEvent::UpstreamToolsChanged { generation }),
                LinkRole::Hub => self.send_error(
                    None,
                    ErrorCode::Malformed,
                    "upstream tool hints flow from the hub",
                ),
            },
            Frame::ListUpstreamTools { id } | Frame::CallUpstreamTool { id, .. }
                if self.config.role == LinkRole::Node =>
            {
                self.send_error(
                    Some(id),
                    ErrorCode::Malformed,
                    "a hub offers its upstream tools to its nodes, never the other way",
                );
            }
            Frame::ListUpstreamTools { id } => self.inbound(id, Request::ListUpstreamTools),
            Frame::CallUpstreamTool {
                id,
                name,
                arguments,
                timeout_ms,
                progress,
            } => self.inbound(
                id,
                Request::CallUpstreamTool {
                    name,
                    arguments,
                    timeout_ms,
                    progress,
                },
            ),
            Frame::UpstreamProgress {
                call_id,
                params,
                coalesced,
            } => match self.config.role {
                LinkRole::Node => {
                    // Only for a call of ours still pending that asked for progress; anything
                    // else (a late or unsolicited frame) is dropped without a word.
                    let asked = matches!(
                        self.outgoing.get(&call_id),
                        Some(Request::CallUpstreamTool { progress: true, .. })
                    );
                    if asked {
                        self.events.push_back(LinkEvent::UpstreamProgress {
                            id: call_id,
                            params,
                            coalesced,
                        });
                    }
                }
                LinkRole::Hub => self.send_error(
                    None,
                    ErrorCode::Malformed,
                    "upstream progress flows from the hub",
                ),
            },
            Frame::UpstreamTools {
                id,
                generation,
                tools,
            } => self.answered(id, Response::UpstreamTools { generation, tools }),
            Frame::UpstreamResult { id, result } => {
                self.answered(id, Response::UpstreamResult(result))
            }
            Frame::RegisterAck { id } => self.answered(id, Response::RegisterAck),
            Frame::Peers { id, peers } => self.answered(id, Response::Peers(peers)),
            Frame::SendAck {
                id,
                message_id,
                outcome,
            } => self.answered(
                id,
                Response::SendAck {
                    message_id,
                    outcome,
                },
            ),
            Frame::InboxPage {
                id,
                messages,
                has_more,
                next_since,
                missed_count,
            } => self.answered(
                id,
                Response::InboxPage(InboxPage {
                    messages,
                    has_more,
                    next_since,
                    missed_count,
                }),
            ),
            Frame::WaitResult {
                id,
                met,
                timed_out,
                new_messages,
                next_since,
                missed_count,
            } => self.answered(
                id,
                Response::WaitResult(WaitOutcome {
                    met,
                    timed_out,
                    new_messages,
                    next_since,
                    missed_count,
                }),
            ),
            Frame::Error {
                id: Some(id),
                code,
                connection,
                message,
            } => self.answered(
                id,
                Response::Error {
                    code,
                    connection,
                    message,
                },
            ),
            Frame::Error {
                id: None,
                code,
                message,
                ..
            } => self.go_down(DownReason::RemoteError { code, message }),
        }
    }

    /// The next frame to write to the transport.
    pub fn poll_transmit(&mut self) -> Option<Frame> {
        self.transmit.pop_front()
    }

    /// The next event to act on.
    pub fn poll_event(&mut self) -> Option<LinkEvent> {
        self.events.pop_front()
    }

    /// Sends a delivery receipt towards the original sender's node (hub end).
    pub fn receipt(&mut self, receipt: Receipt) -> Result<(), LinkError> {
        if self.state != LinkState::Up {
            return Err(LinkError::NotUp {
                connection: self.config.connection_id.clone(),
            });
        }
        self.transmit.push_back(Frame::Receipt(receipt));
        Ok(())
    }

    /// Tells the node the hub's upstream tool catalogue changed (hub end).
    pub fn upstream_tools_changed(&mut self, generation: u64) -> Result<(), LinkError> {
        if self.state != LinkState::Up {
            return Err(LinkError::NotUp {
                connection: self.config.connection_id.clone(),
            });
        }
        self.transmit
            .push_back(Frame::UpstreamToolsChanged { generation });
        Ok(())
    }

    /// Relays one progress notification of the node's call `call` (hub end). Refused once the
    /// call was answered (or was never asked of us), so progress never follows a result.
    pub fn upstream_progress(
        &mut self,
        call: RequestId,
        params: serde_json::Map<String, serde_json::Value>,
        coalesced: u64,
    ) -> Result<(), LinkError> {
        if self.state != LinkState::Up {
            return Err(LinkError::NotUp {
                connection: self.config.connection_id.clone(),
            });
        }
        if !self.incoming.contains(&call) {
            return Err(LinkError::UnknownRequest {
                id: call,
                connection: self.config.connection_id.clone(),
            });
        }
        self.transmit.push_back(Frame::UpstreamProgress {
            call_id: call,
            params,
            coalesced,
        });
        Ok(())
    }

    /// The transport was reset or closed under us: the link is down at once.
    pub fn reset(&mut self) {
        self.go_down(DownReason::Reset);
    }

    /// Closes the link from this side.
    pub fn close(&mut self) {
        self.go_down(DownReason::Closed);
    }

    fn send_error(&mut self, id: Option<RequestId>, code: ErrorCode, message: &str) {
        self.transmit.push_back(Frame::Error {
            id,
            code,
            connection: self.config.connection_id.clone(),
            message: message.to_owned(),
        });
    }

    fn go_down(&mut self, reason: DownReason) {
        if self.state == LinkState::Down {
            return;
        }
        self.state = LinkState::Down;
        self.incoming.clear();
        let unanswered = std::mem::take(&mut self.outgoing).into_iter().collect();
        self.events
            .push_back(LinkEvent::Down { reason, unanswered });
    }
}

/// Builds a recipient-facing inbox message from wire mail (for delivery at the destination).
pub fn to_inbox_message(m: &WireMessage) -> InboxMessage {
    InboxMessage {
        message_id: m.message_id.clone(),
        from: m.from.clone(),
        from_name: m.from_name.clone(),
        message: m.message.clone(),
        timestamp_ms: m.timestamp_ms,
        kind: m.kind.clone(),
    }
}
