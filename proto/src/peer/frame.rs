//! Peer-link wire frames: JSON objects with a `type` tag, a version in the first frame, and a
//! request id on every request and response.
//!
//! The set of frames is closed on purpose: `register`, `list_peers`, `send`, `inbox`, `wait`,
//! their acknowledgements (including the delivery `receipt` a hub relays back to the sender's
//! node) and errors, plus `hello` and `ping`/`pong`; and the hub's upstream tools offered to
//! its nodes (issue 17 item 7): `list_upstream_tools` / `upstream_tools`,
//! `call_upstream_tool` / `upstream_result` (node → hub requests only), the hub's
//! `upstream_tools_changed` hint, and `upstream_progress` (hub → node, the upstream's progress
//! for a call that asked for it). There is no frame that creates a process; an unknown `type`
//! fails to decode.
//!
//! Compatibility: `call_upstream_tool`'s `progress` field is omitted when false, and a hub sends
//! `upstream_progress` only for a call whose `progress` is true, so a node or hub built before
//! progress relay (which ignores the field and never sets it) keeps working without a version
//! bump: it simply gets no progress.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::mail::{InboxMessage, Lifecycle};

/// Version of the peer-link frame set, sent in `hello`.
pub const PEER_PROTOCOL_VERSION: u32 = 1;

/// Matches a response to its request; chosen by the requesting side, unique per link.
pub type RequestId = u64;

/// Which end of a link a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkRole {
    /// The federating hub; it dials nodes.
    Hub,
    /// A node dialed by a hub.
    Node,
}

/// A registered peer as the far side should list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerEntry {
    /// The peer's identity on its own host (or, from a hub, its federation address).
    pub tuic_session: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Declared orchestrator role.
    #[serde(default)]
    pub orchestrator: bool,
    /// The address a sender uses as `to` (`<connection_id>/<tuic_session>`), set by the hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The terminal alias when the peer owns a live PTY.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// The PTY id when the peer owns a live PTY.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Project path, for `list_peers path=` filtering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// One piece of mail crossing a link (and sitting in an outbox).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireMessage {
    /// Stable across hops, resends and restarts; the dedupe key.
    pub message_id: String,
    /// The sender. On the wire it is the sender as the sending side knows it; the receiving link
    /// replaces it with what the authenticated link proves (see `PeerLink`).
    pub from: String,
    /// The destination: `<connection_id>/<peer>` towards a hub, `<peer>` towards its node.
    pub to: String,
    /// The body.
    pub message: String,
    /// When the original sender's node accepted it (unix ms).
    pub timestamp_ms: u64,
    /// The sender's display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_name: Option<String>,
    /// Server-authored kind (`state_change`), absent for peer mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Lifecycle key, so a notice replaces its predecessor at the destination too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
}

impl WireMessage {
    /// Bytes this message counts against an outbox's byte bound.
    pub fn weight(&self) -> u64 {
        (self.message.len()
            + self.message_id.len()
            + self.from.len()
            + self.to.len()
            + self.from_name.as_ref().map_or(0, String::len)
            + self.kind.as_ref().map_or(0, String::len)) as u64
    }
}

/// How the far side took a `send`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckOutcome {
    /// It is in the destination inbox.
    Delivered,
    /// The destination already had it (a resend within the dedupe horizon); nothing new.
    Duplicate,
    /// The far side relays it and holds it in its own outbox until the next hop acknowledges.
    Accepted,
}

/// How mail ended at its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptOutcome {
    /// The destination node put it in the recipient's inbox (or already had it).
    Delivered,
    /// The destination refused it after a relay had taken custody.
    Refused,
}

/// A hub tells the original sender's node how relayed mail ended. Best effort: a receipt lost
/// with its connection leaves the sender at `accepted`, never at a wrong answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The mail's id.
    pub message_id: String,
    /// The original sender as its own node knows it (a local peer id).
    pub from: String,
    /// The destination address the sender used (`<connection_id>/<peer>`).
    pub to: String,
    /// How it ended.
    pub outcome: ReceiptOutcome,
    /// The connection of the destination (errors that cross hosts name it).
    pub connection: String,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    /// Refusal detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Stable error codes carried by `error` frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// `hello` named a protocol version this side does not speak.
    VersionMismatch,
    /// A frame other than `hello` arrived before the handshake finished.
    HandshakeRequired,
    /// The frame did not decode (unknown `type`, missing fields, not JSON).
    Malformed,
    /// A `send`, `inbox` or `wait` named a sender the link has not registered.
    SenderNotRegistered,
    /// A frame claimed a sender on another host.
    SenderForged,
    /// No such recipient.
    UnknownRecipient,
    /// The next hop's outbox is full.
    OutboxFull,
    /// The recipient is reading but already has a full inbox of unread mail: the message stays
    /// with the previous hop, which retries it (not a refusal; the sender is not told).
    RecipientFull,
    /// The message id is known with another sender or body.
    IdentityCollision,
    /// The body is over the size limit.
    TooLarge,
    /// The destination connection is down.
    Unavailable,
    /// Anything else; the message says what.
    Internal,
}

/// One frame on a peer link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Frame {
    /// First frame in each direction.
    Hello {
        /// [`PEER_PROTOCOL_VERSION`] of the sender.
        protocol_version: u32,
        /// The sender's stable id (a node's or hub's instance id), for logs.
        node_id: String,
        /// Which end the sender is.
        role: LinkRole,
    },
    /// Liveness probe; any frame counts as life, `pong` is the cheapest.
    Ping {
        /// Echoed in the pong.
        nonce: u64,
    },
    /// Answer to `ping`.
    Pong {
        /// The ping's nonce.
        nonce: u64,
    },
    /// The sender's complete set of registered peers (replaces the previous set).
    Register {
        /// Request id.
        id: RequestId,
        /// Every peer registered on the sending side.
        peers: Vec<PeerEntry>,
    },
    /// `register` was applied.
    RegisterAck {
        /// The request's id.
        id: RequestId,
    },
    /// Asks for the peers the far side can route to.
    ListPeers {
        /// Request id.
        id: RequestId,
        /// Only peers registered under this project path.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
    },
    /// Answer to `list_peers`.
    Peers {
        /// The request's id.
        id: RequestId,
        /// The peers, each with an address.
        peers: Vec<PeerEntry>,
    },
    /// Mail towards the far side.
    Send {
        /// Request id.
        id: RequestId,
        /// The mail.
        #[serde(flatten)]
        message: WireMessage,
    },
    /// The far side took the mail.
    SendAck {
        /// The request's id.
        id: RequestId,
        /// The mail's id.
        message_id: String,
        /// How it was taken.
        outcome: AckOutcome,
    },
    /// Reads a recipient's inbox on the far side.
    Inbox {
        /// Request id.
        id: RequestId,
        /// Whose inbox (the caller's own identity).
        recipient: String,
        /// Cursor; absent means the stored read position.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<u64>,
        /// Page size.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u32>,
    },
    /// Answer to `inbox`.
    InboxPage {
        /// The request's id.
        id: RequestId,
        /// Oldest first.
        messages: Vec<InboxMessage>,
        /// More unread mail remains.
        has_more: bool,
        /// Cursor to continue from.
        next_since: u64,
        /// Unread evictions since the previous read.
        missed_count: u64,
    },
    /// Waits for mail on the far side.
    Wait {
        /// Request id.
        id: RequestId,
        /// Whose inbox (the caller's own identity).
        recipient: String,
        /// Cursor; absent means the stored read position.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<u64>,
        /// Timeout, clamped like a local wait.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Answer to `wait`.
    WaitResult {
        /// The request's id.
        id: RequestId,
        /// Mail arrived.
        met: bool,
        /// The deadline passed.
        timed_out: bool,
        /// The fresh mail.
        new_messages: Vec<InboxMessage>,
        /// Cursor to continue from.
        next_since: u64,
        /// Unread mail evicted since the previous read (omitted when none).
        #[serde(default, skip_serializing_if = "crate::mail::inbox::is_zero")]
        missed_count: u64,
    },
    /// How relayed mail ended, hub → the sender's node (no answer expected).
    Receipt(Receipt),
    /// The hub's upstream tool catalogue changed, hub → node (no answer expected): the node
    /// lists it again when `generation` differs from the one it holds.
    UpstreamToolsChanged {
        /// The hub's catalogue generation after the change.
        generation: u64,
    },
    /// Asks the hub for its upstream tool catalogue (node → hub only).
    ListUpstreamTools {
        /// Request id.
        id: RequestId,
    },
    /// Answer to `list_upstream_tools`: MCP `Tool` objects as the hub lists them to its own
    /// agents (`{upstream}__{tool}`, the hub's allow/deny filters applied).
    UpstreamTools {
        /// The request's id.
        id: RequestId,
        /// The hub's catalogue generation these tools belong to.
        generation: u64,
        /// The tools, unchanged apart from the hub's `{upstream}__` prefix.
        tools: Vec<Value>,
    },
    /// Calls one of the hub's upstream tools (node → hub only).
    CallUpstreamTool {
        /// Request id.
        id: RequestId,
        /// The tool as the hub names it (`{upstream}__{tool}`).
        name: String,
        /// The tool's arguments.
        #[serde(default)]
        arguments: Map<String, Value>,
        /// The caller's deadline: the hub gives up (and answers a tool error) after this long.
        timeout_ms: u64,
        /// The caller asked for progress: the hub relays the upstream's
        /// `notifications/progress` for this call as `upstream_progress` frames until it
        /// answers. Absent (false) from a node that predates progress relay.
        #[serde(default, skip_serializing_if = "is_false")]
        progress: bool,
    },
    /// Answer to `call_upstream_tool`: the upstream's `CallToolResult` as it came (content,
    /// structuredContent, isError and any extension field), or the hub's refusal as an
    /// `isError` result.
    UpstreamResult {
        /// The request's id.
        id: RequestId,
        /// The result object.
        result: Value,
    },
    /// One `notifications/progress` of an upstream call in flight, hub → node (no answer
    /// expected); sent only for a `call_upstream_tool` with `progress: true`, in the order the
    /// upstream sent them, and never after that call's `upstream_result`.
    UpstreamProgress {
        /// The `call_upstream_tool` request this progress belongs to. Deliberately not named
        /// `id`: this frame is neither a request nor a response.
        call_id: RequestId,
        /// The notification's params as the upstream sent them (`progress`, `total`,
        /// `message`, ...), without `progressToken`: the node puts its caller's token back.
        params: Map<String, Value>,
        /// Notifications of this call the hub coalesced away just before this one (a flood
        /// outran the link); omitted when none.
        #[serde(default, skip_serializing_if = "is_zero_u64")]
        coalesced: u64,
    },
    /// A request failed, or the link is being refused.
    Error {
        /// The failed request, absent for link-level errors.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<RequestId>,
        /// Stable code.
        code: ErrorCode,
        /// The connection the error is about (errors that cross hosts name it).
        connection: String,
        /// Human-readable detail; never a token or URL.
        message: String,
    },
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// Decoding a frame failed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Not JSON, an unknown `type`, or missing fields.
    #[error("malformed peer frame: {0}")]
    Malformed(#[from] serde_json::Error),
}

impl Frame {
    /// Decodes one text frame.
    pub fn decode(text: &str) -> Result<Self, FrameError> {
        Ok(serde_json::from_str(text)?)
    }

    /// Encodes to one text frame.
    pub fn encode(&self) -> String {
        // Every field is a string, number, bool or a derived struct: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Whether this frame is a request that expects an answer.
    pub fn is_request(&self) -> bool {
        matches!(
            self,
            Frame::Register { .. }
                | Frame::ListPeers { .. }
                | Frame::Send { .. }
                | Frame::Inbox { .. }
                | Frame::Wait { .. }
                | Frame::ListUpstreamTools { .. }
                | Frame::CallUpstreamTool { .. }
        )
    }

    /// The request id of a request or response frame.
    pub fn request_id(&self) -> Option<RequestId> {
        match self {
            Frame::Hello { .. }
            | Frame::Ping { .. }
            | Frame::Pong { .. }
            | Frame::Receipt(_)
            | Frame::UpstreamToolsChanged { .. }
            | Frame::UpstreamProgress { .. } => None,
            Frame::Register { id, .. }
            | Frame::RegisterAck { id }
            | Frame::ListPeers { id, .. }
            | Frame::Peers { id, .. }
            | Frame::Send { id, .. }
            | Frame::SendAck { id, .. }
            | Frame::Inbox { id, .. }
            | Frame::InboxPage { id, .. }
            | Frame::Wait { id, .. }
            | Frame::WaitResult { id, .. }
            | Frame::ListUpstreamTools { id }
            | Frame::UpstreamTools { id, .. }
            | Frame::CallUpstreamTool { id, .. }
            | Frame::UpstreamResult { id, .. } => Some(*id),
            Frame::Error { id, .. } => *id,
        }
    }
}
