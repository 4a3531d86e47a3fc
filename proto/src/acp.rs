//! Wire shapes of the ACP routes (`/acp/connections…`): what a node answers, what the hub
//! relays and what the phone, the CLI and scripts read.
//!
//! A connection's conversation is a journal of [`Frame`]s with sequence numbers; the stream
//! (`WS /acp/connections/{id}/stream?after=SEQ`) sends them as JSON text messages. The agent's
//! own `session/update` payloads ride inside [`FrameBody::Update`] as the agent sent them (the
//! ACP schema is their contract); everything tuic adds around them is typed here. This module
//! holds no IO and no ACP client: the node's `acp` service is that.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a connection is in its life, as `GET /acp/connections` lists it ("needs you" sorts
/// first in a UI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnState {
    /// The agent process is starting (`initialize`, `session/new`).
    Starting,
    /// Ready for a prompt; no turn has run yet.
    Ready,
    /// A prompt turn is running.
    Working,
    /// A permission request waits for a person.
    NeedsYou,
    /// The last turn ended; ready for the next prompt.
    Settled,
    /// The agent process is gone (exited, failed to start, deleted, or the node restarted);
    /// the journal is kept.
    Ended,
}

/// One permission option as the agent offered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionOption {
    /// The agent's id for the option (what an answer names).
    pub option_id: String,
    /// The label to show.
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once` or `reject_always`.
    pub kind: String,
}

/// A journal entry: its sequence number, when it was written, and what happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// Strictly increasing per connection, starting at 1, never reused (across restarts too).
    pub seq: u64,
    /// Wall-clock time, unix ms.
    pub ts_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub body: FrameBody,
}

/// What a frame records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FrameBody {
    /// An agent process was launched (generation 1 by `POST /acp/connections`, one more per
    /// reconnect).
    Started {
        /// The configured agent's name.
        agent: String,
        /// The launch count of this connection.
        generation: u32,
    },
    /// `initialize` and `session/new` (or `session/load`) succeeded.
    Ready {
        /// The agent's session id.
        session_id: String,
        /// The protocol version the agent answered.
        protocol_version: u16,
        /// `agentInfo` as the agent sent it, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_info: Option<Value>,
        /// Whether the agent supports `session/load` (a reconnect resumes the session).
        load_session: bool,
        /// Whether the session was loaded (a reconnect) rather than created.
        loaded: bool,
    },
    /// The agent refused to start a session (`initialize`, `session/new` or `session/load`
    /// answered an error): shown as a card with the agent's message and its auth methods.
    AgentError {
        /// The ACP method that failed.
        method: String,
        /// The JSON-RPC error code.
        code: i64,
        /// The agent's message.
        message: String,
        /// The error's `data`, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
        /// `authMethods` from the agent's `initialize` answer (how to log it in).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        auth_methods: Vec<Value>,
    },
    /// A prompt turn began with this content.
    Prompt {
        /// The turn's number on this connection.
        turn: u64,
        /// The ACP content blocks sent.
        content: Vec<Value>,
    },
    /// A `session/update` notification, as the agent sent it (`sessionUpdate` is its kind:
    /// `agent_message_chunk`, `agent_thought_chunk`, `plan`, `tool_call`, `tool_call_update`…).
    Update {
        /// The `update` object.
        update: Value,
    },
    /// The agent asked for permission; the request is held until answered or timed out.
    Permission {
        /// tuic's id for the request (what `POST …/interactions/{rid}` names).
        request_id: String,
        /// The tool call the request is about (ACP `ToolCallUpdate`).
        tool_call: Value,
        /// The agent's options, in its order.
        options: Vec<PermissionOption>,
    },
    /// A permission request was settled.
    PermissionOutcome {
        /// The request.
        request_id: String,
        /// The chosen option; absent when the request was cancelled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        option_id: Option<String>,
        /// Who answered (`ipc`, `tcp`, `cli`, a name the client gave), or why it was
        /// cancelled (`timeout`, `cancel`, `agent_exit`).
        by: String,
    },
    /// A client-capability call the agent made (`fs/read_text_file`, `fs/write_text_file`,
    /// `terminal/create`…) and whether it was allowed.
    Capability {
        /// The ACP method.
        method: String,
        /// The path or command it named.
        target: String,
        /// Whether it was carried out.
        ok: bool,
        /// Why not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The tuic PTY session a `terminal/create` runs in.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
    },
    /// A prompt turn ended.
    TurnEnd {
        /// The turn's number.
        turn: u64,
        /// The agent's stop reason (`end_turn`, `cancelled`, `refusal`, …) or `error`.
        stop_reason: String,
        /// The failure, when the turn did not end with a stop reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The agent process ended.
    Exit {
        /// Its exit code, if it exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        /// Why (`exited`, `deleted`, `node_restarted`, `spawn_failed: …`).
        reason: String,
    },
}

/// A stream message that is not a journal frame: the cursor fell behind what the journal
/// keeps. Terminal: the stream closes after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "gap")]
pub struct Gap {
    /// The cursor the client had.
    pub after: u64,
    /// The oldest sequence the journal still holds.
    pub first_seq: u64,
}

/// `POST /acp/connections` body. The agent is named, never described: an executable, its
/// arguments or environment in a body are refused (unknown fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewConnection {
    /// A name from `acp_agents` in the config, or `ego` for `ego_executable`.
    pub agent: String,
    /// The working directory: inside a registered repository.
    pub cwd: String,
    /// A display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `POST /acp/connections/{id}/prompt` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptBody {
    /// ACP content blocks: `text`, `image`, `resource_link` or `resource`.
    pub content: Vec<Value>,
}

/// `POST /acp/connections/{id}/interactions/{rid}` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    /// One of the request's `option_id`s.
    pub option_id: String,
    /// Who answers (shown to a later answer's 409); defaults to the transport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// One row of `GET /acp/connections`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionRow {
    /// The connection id (handed out by `POST /acp/connections`).
    pub id: String,
    /// Display name.
    pub name: String,
    /// The configured agent's name.
    pub agent: String,
    /// Working directory.
    pub cwd: String,
    /// Where it is.
    pub state: ConnState,
    /// Launch count.
    pub generation: u32,
    /// The newest journal sequence.
    pub last_seq: u64,
    /// Permission requests waiting.
    pub pending: usize,
    /// The agent's session id, once it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Creation time, unix ms.
    pub created_ms: u64,
    /// Why it ended (with `state: ended`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// The host that runs it (set by a hub for remote rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The connection's agent-mail identity: the agent's MCP calls (bridge or `/mcp`) act as
    /// it, and mail sent to it reaches a chat's `tuic://inbox`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuic_session: Option<String>,
    /// Opened by `POST /acp/chat/open`: a terminal-less peer in agent mail.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chat: bool,
}

/// `POST /acp/chat/open` body: a conversation with an agent and no terminal tab. The agent
/// defaults to `ego` (the `ego_executable` setting), the cwd to the first registered
/// repository.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatOpen {
    /// A name from `acp_agents`, or `ego` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The working directory: inside a registered repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The display name, also the peer's name in agent mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A permission request and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interaction {
    /// tuic's id for the request.
    pub request_id: String,
    /// The tool call it is about.
    pub tool_call: Value,
    /// The agent's options.
    pub options: Vec<PermissionOption>,
    /// The journal sequence of its `permission` frame.
    pub seq: u64,
    /// `pending`, `answered` or `cancelled`.
    pub state: String,
    /// The chosen option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub option_id: Option<String>,
    /// Who answered, or why it was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// `GET /acp/connections/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The row.
    #[serde(flatten)]
    pub row: ConnectionRow,
    /// The oldest sequence the journal still holds (a cursor below `first_seq - 1` is refused).
    pub first_seq: u64,
    /// The latest plan update's entries, if the agent sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Value>,
    /// Permission requests still waiting.
    pub interactions: Vec<Interaction>,
    /// The agent's last start-up error, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<FrameBody>,
}

/// The `acp-notice` wake signal on `/events`: never turn frames, only a change of state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// `ready`, `settled`, `interaction_pending`, `interaction_settled`, `card` or `ended`.
    pub kind: String,
    /// The connection.
    pub connection_id: String,
    /// Its launch count.
    pub generation: u32,
    /// The journal sequence to read from.
    pub sequence: u64,
    /// The agent's session id, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The permission request, for interaction notices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Golden samples: a change that breaks an old reader fails here.
    #[test]
    fn frames_decode_both_ways() {
        let samples = [
            json!({"seq":1,"ts_ms":5,"type":"started","agent":"test","generation":1}),
            json!({"seq":2,"ts_ms":6,"type":"ready","session_id":"s1","protocol_version":1,"load_session":false,"loaded":false}),
            json!({"seq":3,"ts_ms":7,"type":"prompt","turn":1,"content":[{"type":"text","text":"hi"}]}),
            json!({"seq":4,"ts_ms":8,"type":"update","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}),
            json!({"seq":5,"ts_ms":9,"type":"permission","request_id":"p1","tool_call":{"toolCallId":"t"},"options":[{"option_id":"a","name":"Allow","kind":"allow_once"}]}),
            json!({"seq":6,"ts_ms":9,"type":"permission_outcome","request_id":"p1","option_id":"a","by":"ipc"}),
            json!({"seq":7,"ts_ms":9,"type":"capability","method":"fs/read_text_file","target":"/r/a","ok":false,"error":"outside"}),
            json!({"seq":8,"ts_ms":9,"type":"turn_end","turn":1,"stop_reason":"end_turn"}),
            json!({"seq":9,"ts_ms":9,"type":"agent_error","method":"session/new","code":-32000,"message":"Authentication required","auth_methods":[{"id":"login"}]}),
            json!({"seq":10,"ts_ms":9,"type":"exit","code":0,"reason":"exited"}),
        ];
        for s in samples {
            let f: Frame = serde_json::from_value(s.clone()).unwrap();
            assert_eq!(serde_json::to_value(&f).unwrap(), s);
        }
        let gap = Gap {
            after: 1,
            first_seq: 9,
        };
        assert_eq!(
            serde_json::to_value(&gap).unwrap(),
            json!({"type":"gap","after":1,"first_seq":9})
        );
    }

    #[test]
    fn a_row_and_a_chat_open_decode_both_ways() {
        let row = json!({"id":"c1","name":"chat","agent":"ego","cwd":"/r","state":"ready","generation":1,
            "last_seq":3,"pending":0,"created_ms":5,"tuic_session":"0b7c","chat":true});
        let r: ConnectionRow = serde_json::from_value(row.clone()).unwrap();
        assert_eq!(serde_json::to_value(&r).unwrap(), row);
        let old = json!({"id":"c1","name":"n","agent":"a","cwd":"/r","state":"ended","generation":1,
            "last_seq":0,"pending":0,"created_ms":5});
        let r: ConnectionRow = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(serde_json::to_value(&r).unwrap(), old);
        let open: ChatOpen = serde_json::from_value(json!({"name":"chat"})).unwrap();
        assert_eq!(open.agent, None);
        let r: Result<ChatOpen, _> = serde_json::from_value(json!({"command":"/bin/sh"}));
        assert!(r.unwrap_err().to_string().contains("command"));
    }

    #[test]
    fn a_new_connection_refuses_an_executable() {
        let r: Result<NewConnection, _> =
            serde_json::from_value(json!({"agent":"a","cwd":"/r","command":"/bin/sh"}));
        assert!(r.unwrap_err().to_string().contains("command"));
    }
}
