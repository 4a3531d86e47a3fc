//! Requests and their answers: ours are kept by id until answered (or handed back when the
//! link goes down), theirs until we respond, so an answer cannot be forged by id.

use crate::mail::{InboxPage, WaitOutcome};
use crate::peer::frame::{AckOutcome, ErrorCode, Frame, PeerEntry, RequestId, WireMessage};

use super::{LinkError, LinkEvent, LinkState, PeerLink};

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

impl PeerLink {
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

    pub(super) fn inbound(&mut self, id: RequestId, request: Request) {
        self.incoming.insert(id);
        self.events.push_back(LinkEvent::Request { id, request });
    }

    pub(super) fn answered(&mut self, id: RequestId, response: Response) {
        if let Some(request) = self.outgoing.remove(&id) {
            self.events.push_back(LinkEvent::Response {
                id,
                request,
                response,
            });
        }
    }
}
