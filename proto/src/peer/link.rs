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

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::mail::{InboxMessage, InboxPage, MAX_MESSAGE_BYTES, WaitOutcome};

use super::frame::{
    AckOutcome, ErrorCode, Frame, LinkRole, PEER_PROTOCOL_VERSION, PeerEntry, Receipt, RequestId,
    WireMessage,
};

/// Ping interval (API "Federation": every 5 s).
pub const PING_INTERVAL_MS: u64 = 5_000;
/// Unanswered pings after which the link is down (API: down after 3 misses).
pub const MAX_MISSED_PINGS: u32 = 3;

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

/// A request the far side made of us (or we of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The far side's complete peer set.
    Register {
        /// Its peers.
        peers: Vec<PeerEntry>,
    },
    /// List routable peers.
    ListPeers {
        /// Optional project filter.
        path: Option<String>,
    },
    /// Deliver or relay mail. Inbound, `from` is already stamped by provenance.
    Send(WireMessage),
    /// Read an inbox.
    Inbox {
        /// Whose inbox; inbound, stamped like a sender.
        recipient: String,
        /// Cursor.
        since: Option<u64>,
        /// Page size.
        limit: Option<u32>,
    },
    /// Wait for mail.
    Wait {
        /// Whose inbox; inbound, stamped like a sender.
        recipient: String,
        /// Cursor.
        since: Option<u64>,
        /// Timeout.
        timeout_ms: Option<u64>,
    },
    /// The hub's upstream tool catalogue (node → hub).
    ListUpstreamTools,
    /// Calls one of the hub's upstream tools (node → hub).
    CallUpstreamTool {
        /// `{upstream}__{tool}` as the hub names it.
        name: String,
        /// Arguments.
        arguments: serde_json::Map<String, serde_json::Value>,
        /// The caller's deadline.
        timeout_ms: u64,
        /// Relay the upstream's progress for this call.
        progress: bool,
    },
}

/// An answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `register` applied.
    RegisterAck,
    /// Peers for `list_peers`.
    Peers(Vec<PeerEntry>),
    /// `send` taken.
    SendAck {
        /// The mail's id.
        message_id: String,
        /// How it was taken.
        outcome: AckOutcome,
    },
    /// An inbox page.
    InboxPage(InboxPage),
    /// A wait's result.
    WaitResult(WaitOutcome),
    /// The hub's upstream tools.
    UpstreamTools {
        /// The hub's catalogue generation.
        generation: u64,
        /// MCP `Tool` objects named as the hub lists them.
        tools: Vec<serde_json::Value>,
    },
    /// A `CallToolResult` as it came.
    UpstreamResult(serde_json::Value),
    /// The request failed.
    Error {
        /// Stable code.
        code: ErrorCode,
        /// The connection the error is about.
        connection: String,
        /// Detail.
        message: String,
    },
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
            match frame {
                Frame::Hello {
                    protocol_version,
                    node_id,
                    role,
                } => {
                    if role == self.config.role {
                        self.send_error(
                            None,
                            ErrorCode::Malformed,
                            "both ends of a peer link claim the same role",
                        );
                        self.go_down(DownReason::ProtocolViolation(format!(
                            "far side is also a {role:?}"
                        )));
                        return;
                    }
                    if protocol_version != PEER_PROTOCOL_VERSION {
                        self.send_error(
                            None,
                            ErrorCode::VersionMismatch,
                            &format!(
                                "peer protocol {protocol_version} not supported, this side speaks {PEER_PROTOCOL_VERSION}"
                            ),
                        );
                        self.go_down(DownReason::VersionMismatch {
                            remote: protocol_version,
                        });
                        return;
                    }
                    self.state = LinkState::Up;
                    self.remote_id = Some(node_id.clone());
                    self.events.push_back(LinkEvent::Up { remote_id: node_id });
                }
                Frame::Error { code, message, .. } => {
                    self.go_down(DownReason::RemoteError { code, message });
                }
                other => {
                    self.send_error(
                        other.request_id(),
                        ErrorCode::HandshakeRequired,
                        "hello must be the first frame",
                    );
                    self.go_down(DownReason::ProtocolViolation(
                        "frame before hello".to_owned(),
                    ));
                }
            }
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

    /// Advances time: sends pings, declares the link down after missed pings or a slow
    /// handshake.
    pub fn handle_timeout(&mut self, now: u64) {
        match self.state {
            LinkState::Down => {}
            LinkState::Handshaking => {
                if now >= self.handshake_deadline {
                    self.go_down(DownReason::HandshakeTimeout);
                }
            }
            LinkState::Up => {
                while now >= self.next_ping && self.state == LinkState::Up {
                    if self.unanswered_pings >= self.config.max_missed_pings {
                        self.go_down(DownReason::PingTimeout);
                        return;
                    }
                    self.ping_nonce += 1;
                    self.transmit.push_back(Frame::Ping {
                        nonce: self.ping_nonce,
                    });
                    self.unanswered_pings += 1;
                    self.next_ping += self.config.ping_interval_ms;
                }
            }
        }
    }

    /// When [`PeerLink::handle_timeout`] must next run.
    pub fn poll_timeout(&self) -> Option<u64> {
        match self.state {
            LinkState::Down => None,
            LinkState::Handshaking => Some(self.handshake_deadline),
            LinkState::Up => Some(self.next_ping),
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

    /// Sends a request; its answer arrives as [`LinkEvent::Response`] (or it comes back
    /// unanswered in [`LinkEvent::Down`]).
    pub fn request(&mut self, request: Request) -> Result<RequestId, LinkError> {
        if self.state != LinkState::Up {
            return Err(LinkError::NotUp {
                connection: self.config.connection_id.clone(),
            });
        }
        let id = self.next_request;
        self.next_request += 1;
        let frame = match &request {
            Request::Register { peers } => Frame::Register {
                id,
                peers: peers.clone(),
            },
            Request::ListPeers { path } => Frame::ListPeers {
                id,
                path: path.clone(),
            },
            Request::Send(m) => Frame::Send {
                id,
                message: m.clone(),
            },
            Request::Inbox {
                recipient,
                since,
                limit,
            } => Frame::Inbox {
                id,
                recipient: recipient.clone(),
                since: *since,
                limit: *limit,
            },
            Request::Wait {
                recipient,
                since,
                timeout_ms,
            } => Frame::Wait {
                id,
                recipient: recipient.clone(),
                since: *since,
                timeout_ms: *timeout_ms,
            },
            Request::ListUpstreamTools => Frame::ListUpstreamTools { id },
            Request::CallUpstreamTool {
                name,
                arguments,
                timeout_ms,
                progress,
            } => Frame::CallUpstreamTool {
                id,
                name: name.clone(),
                arguments: arguments.clone(),
                timeout_ms: *timeout_ms,
                progress: *progress,
            },
        };
        self.transmit.push_back(frame);
        self.outgoing.insert(id, request);
        Ok(id)
    }

    /// Answers a request the far side made.
    pub fn respond(&mut self, id: RequestId, response: Response) -> Result<(), LinkError> {
        if self.state != LinkState::Up {
            return Err(LinkError::NotUp {
                connection: self.config.connection_id.clone(),
            });
        }
        if !self.incoming.remove(&id) {
            return Err(LinkError::UnknownRequest {
                id,
                connection: self.config.connection_id.clone(),
            });
        }
        let frame = match response {
            Response::RegisterAck => Frame::RegisterAck { id },
            Response::Peers(peers) => Frame::Peers { id, peers },
            Response::SendAck {
                message_id,
                outcome,
            } => Frame::SendAck {
                id,
                message_id,
                outcome,
            },
            Response::InboxPage(p) => Frame::InboxPage {
                id,
                messages: p.messages,
                has_more: p.has_more,
                next_since: p.next_since,
                missed_count: p.missed_count,
            },
            Response::WaitResult(w) => Frame::WaitResult {
                id,
                met: w.met,
                timed_out: w.timed_out,
                new_messages: w.new_messages,
                next_since: w.next_since,
                missed_count: w.missed_count,
            },
            Response::UpstreamTools { generation, tools } => Frame::UpstreamTools {
                id,
                generation,
                tools,
            },
            Response::UpstreamResult(result) => Frame::UpstreamResult { id, result },
            Response::Error {
                code,
                connection,
                message,
            } => Frame::Error {
                id: Some(id),
                code,
                connection,
                message,
            },
        };
        self.transmit.push_back(frame);
        Ok(())
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

    /// Pings sent since anything was last heard from the far side: a live link answers each
    /// within its round trip, so two or more mean a full ping interval of silence.
    pub fn missed_pings(&self) -> u32 {
        self.unanswered_pings
    }

    /// Peers the far side registered over this link (hub end only).
    pub fn registered(&self) -> impl Iterator<Item = &str> {
        self.registered.iter().map(String::as_str)
    }

    fn heard(&mut self) {
        self.unanswered_pings = 0;
    }

    fn inbound(&mut self, id: RequestId, request: Request) {
        self.incoming.insert(id);
        self.events.push_back(LinkEvent::Request { id, request });
    }

    fn answered(&mut self, id: RequestId, response: Response) {
        if let Some(request) = self.outgoing.remove(&id) {
            self.events.push_back(LinkEvent::Response {
                id,
                request,
                response,
            });
        }
    }

    /// Applies provenance to a claimed sender (or inbox owner).
    fn stamp(&self, claimed: &str) -> Result<String, (ErrorCode, String)> {
        match self.config.role {
            LinkRole::Hub => {
                if claimed.contains('/') {
                    return Err((
                        ErrorCode::SenderForged,
                        format!(
                            "'{claimed}' is an address; connection '{}' speaks only for its own peers",
                            self.config.connection_id
                        ),
                    ));
                }
                if !self.registered.contains(claimed) {
                    return Err((
                        ErrorCode::SenderNotRegistered,
                        format!(
                            "'{claimed}' is not registered on connection '{}'",
                            self.config.connection_id
                        ),
                    ));
                }
                Ok(format!("{}/{claimed}", self.config.connection_id))
            }
            LinkRole::Node => {
                let valid = claimed
                    .split_once('/')
                    .is_some_and(|(c, p)| !c.is_empty() && !p.is_empty());
                if valid {
                    Ok(claimed.to_owned())
                } else {
                    Err((
                        ErrorCode::SenderForged,
                        format!("'{claimed}' is not a federation address"),
                    ))
                }
            }
        }
    }

    /// Applies provenance to the owner of an inbox being read or waited on: only an identity
    /// the far side registered over this link (issue 40, finding 7). On the hub end that is
    /// the sender rule (a peer this node registered, stamped). On a node's end nothing
    /// qualifies: a node's agents register on the node itself, never over the link (the hub's
    /// `register` is its directory, kept for `list_peers`), so every `inbox`/`wait` naming one
    /// of them is refused here and never surfaces — a token holder on the link cannot read or
    /// consume a local agent's mail.
    fn owner(&self, claimed: &str) -> Result<String, (ErrorCode, String)> {
        match self.config.role {
            LinkRole::Hub => self.stamp(claimed),
            LinkRole::Node => {
                if claimed.is_empty() || claimed.contains('/') {
                    Err((
                        ErrorCode::UnknownRecipient,
                        format!("'{claimed}' is not a peer of this node"),
                    ))
                } else {
                    Err((
                        ErrorCode::SenderNotRegistered,
                        format!(
                            "'{claimed}' did not register over this link: a node's agents read their mail on their own node, never over connection '{}'",
                            self.config.connection_id
                        ),
                    ))
                }
            }
        }
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
