//! Typed events published on a node's event bus and served on `GET /events` (SSE).
//!
//! The SSE event name is the kebab-case tag; the payload is the variant's fields. Payload
//! field names are public contract (the phone UI and scripts read them).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One event on the bus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "kebab-case")]
pub enum Event {
    /// A PTY session was created (locally, over MCP, or by a spawn).
    SessionCreated {
        session_id: String,
        cwd: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        display_name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_session: Option<String>,
        tuic_session: String,
    },
    /// A session received its human-friendly alias (fires once, after `session-created`).
    TermAliasAssigned { session_id: String, alias: String },
    /// A session's display name changed.
    SessionRenamed {
        session_id: String,
        name: String,
        is_custom: bool,
    },
    /// The orchestrator's description of a session's work was set, replaced or cleared
    /// (`pty_description` on spawn, `session action=submit|input` or their REST routes);
    /// `pty_description` is absent once cleared.
    PtyDescriptionChanged {
        session_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pty_description: Option<String>,
    },
    /// A session ended and left the session list.
    SessionClosed { session_id: String },
    /// The output parser recognised something (question, rate limit, error, agent state).
    PtyParsed { session_id: String, parsed: Value },
    /// A session's process exited.
    PtyExit {
        session_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    /// The set of registered repositories changed.
    RepositoriesChanged { repos: Value },
    /// A progress record was journaled.
    ProgressRecorded(Value),
    /// A toast for every connected UI.
    McpToast {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        message: String,
        level: String,
        /// The resolved notification sound name; omitted for a silent toast.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sound: Option<String>,
        /// Repository the calling agent works in, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin_repo_path: Option<String>,
        /// The caller's TUIC session, only when the caller is bound to a terminal.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin_session_id: Option<String>,
    },
    /// An agent asks the user a yes/no question (`ui action=confirm`); a UI answers it with
    /// `POST /mcp/confirm-response {request_id, confirmed}`.
    McpConfirm {
        request_id: String,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin_session_id: Option<String>,
    },
    /// A confirmation was answered or timed out; UIs drop its dialog.
    McpConfirmResolved { request_id: String, confirmed: bool },
    /// An agent asks the person for a secret (`secret action=request`): a UI opens the form at
    /// `form_path` (`/index.html#/secret-form?nonce=…`), whose value the agent never sees.
    SecretRequested {
        name: String,
        reason: String,
        form_path: String,
    },
    /// A secret form was answered or withdrawn; UIs drop it.
    SecretResolved { name: String, stored: bool },
    /// `session action=suspend` passed the busy check: a UI ends that session's PTY, keeps it
    /// restorable and answers with `POST /mcp/suspend-response {request_id, ok, reason}`.
    SessionSuspendRequested {
        session_id: String,
        request_id: String,
    },
    /// The configuration file changed (after `PUT /config`).
    ConfigChanged { remote_access_enabled: bool },
    /// Tailscale detection found a different state (see `GET /tailscale`).
    TailscaleStatus {
        /// `ready`, `stopped`, `absent`, `unavailable` or `disabled`.
        state: String,
        /// The machine's Tailscale DNS name when `ready`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dns_name: Option<String>,
    },
    /// A workflow run changed: a low-frequency wake hint `{runId, sequence}`; consumers page
    /// `/workflows/run/action` events from their last durable sequence.
    WorkflowRunChanged { repo_path: String, payload: Value },
    /// A project's story log advanced to `sequence` (a wake hint, not the state).
    StoryChanged { repo_path: String, sequence: u64 },
    /// An automation fired (the firing record as stored in its ledger).
    AutomationFired(Value),
    /// A linked worktree was created (`POST /worktrees`, `repo action=worktree_create`): the
    /// worktree lifecycle payload with `creator_session` and `spawn_session`.
    WorktreeCreated(Value),
    /// A linked worktree was removed (`repo action=worktree_remove`).
    WorktreeRemoved(Value),
    /// An agent opened a tab in every attached UI (`ui action=tab`): `{tab_id, kind:
    /// file|edit|url, url, path?, title, focus, repo_path?, switch_repo?, origin_session_id?}`.
    McpTab(Value),
    /// An agent declared the worktree its tab belongs to (`session action=declare_worktree`):
    /// the worktree lifecycle payload with `creator_session` and `spawn_session: false`.
    SessionWorktreeDeclared(Value),
    /// The node found orphaned linked worktrees and opened the cleanup dialog that
    /// `repo action=orphan_cleanup_answer` answers.
    OrphanCleanupRequested(Value),
    /// The orphan cleanup dialog was answered; UIs close it.
    OrphanCleanupResolved(Value),
    /// A notification was raised, changed (delivery state) or cleared: the record as
    /// `GET /notifications` lists it, plus `op` (`show`, `update` or `clear`).
    Notification(Value),
    /// An ACP connection changed state (`crate::acp::Notice`): a wake signal, never a turn
    /// frame.
    AcpNotice(crate::acp::Notice),
    /// Sent only to one SSE client: it fell behind and `missed` events were dropped for it.
    Lagged { missed: u64 },
}

impl Event {
    /// The SSE event name (the kebab-case tag).
    pub fn name(&self) -> &'static str {
        match self {
            Self::SessionCreated { .. } => "session-created",
            Self::TermAliasAssigned { .. } => "term-alias-assigned",
            Self::SessionRenamed { .. } => "session-renamed",
            Self::PtyDescriptionChanged { .. } => "pty-description-changed",
            Self::SessionClosed { .. } => "session-closed",
            Self::PtyParsed { .. } => "pty-parsed",
            Self::PtyExit { .. } => "pty-exit",
            Self::RepositoriesChanged { .. } => "repositories-changed",
            Self::ProgressRecorded(_) => "progress-recorded",
            Self::McpToast { .. } => "mcp-toast",
            Self::McpConfirm { .. } => "mcp-confirm",
            Self::McpConfirmResolved { .. } => "mcp-confirm-resolved",
            Self::SecretRequested { .. } => "secret-requested",
            Self::SecretResolved { .. } => "secret-resolved",
            Self::SessionSuspendRequested { .. } => "session-suspend-requested",
            Self::ConfigChanged { .. } => "config-changed",
            Self::TailscaleStatus { .. } => "tailscale-status",
            Self::WorkflowRunChanged { .. } => "workflow-run-changed",
            Self::StoryChanged { .. } => "story-changed",
            Self::AutomationFired(_) => "automation-fired",
            Self::WorktreeCreated(_) => "worktree-created",
            Self::WorktreeRemoved(_) => "worktree-removed",
            Self::McpTab(_) => "mcp-tab",
            Self::SessionWorktreeDeclared(_) => "session-worktree-declared",
            Self::OrphanCleanupRequested(_) => "orphan-cleanup-requested",
            Self::OrphanCleanupResolved(_) => "orphan-cleanup-resolved",
            Self::Notification(_) => "notification",
            Self::AcpNotice(_) => "acp-notice",
            Self::Lagged { .. } => "lagged",
        }
    }

    /// The JSON payload carried in the SSE `data:` line.
    pub fn payload(&self) -> Value {
        match serde_json::to_value(self) {
            Ok(Value::Object(mut m)) => m.remove("data").unwrap_or(Value::Null),
            _ => Value::Null,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_matches_serde_tag() {
        let samples = [
            Event::SessionClosed {
                session_id: "1".into(),
            },
            Event::Lagged { missed: 3 },
            Event::PtyDescriptionChanged {
                session_id: "1".into(),
                pty_description: Some("build it".into()),
            },
            Event::PtyExit {
                session_id: "1".into(),
                exit_code: None,
            },
            Event::ProgressRecorded(serde_json::json!({"a": 1})),
            Event::WorktreeCreated(serde_json::json!({"branch": "b"})),
            Event::McpTab(serde_json::json!({"kind": "file"})),
            Event::SessionWorktreeDeclared(serde_json::json!({"branch": "b"})),
            Event::OrphanCleanupResolved(serde_json::json!({"decision": "keep"})),
            Event::SessionSuspendRequested {
                session_id: "1".into(),
                request_id: "r".into(),
            },
        ];
        for e in samples {
            let v = serde_json::to_value(&e).unwrap();
            assert_eq!(v["type"], e.name());
            let back: Event = serde_json::from_value(v).unwrap();
            assert_eq!(back, e);
        }
    }

    #[test]
    fn payload_omits_absent_optionals() {
        let e = Event::PtyExit {
            session_id: "s".into(),
            exit_code: None,
        };
        assert_eq!(e.payload(), serde_json::json!({"session_id": "s"}));
    }
}
