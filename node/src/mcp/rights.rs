//! Remote rights: what a non-loopback caller (authenticated TCP from another address, or
//! loopback behind a proxy such as `tailscale serve`) may do with each native tool action.
//!
//! One table, [`REMOTE_RIGHTS`], read by the registry at dispatch (`registry::run`) before any
//! handler runs, and by the REST route that shares an entry (`POST /repos` is `repo add`). A
//! (tool, action) the table does not name is refused for remote callers, and the table test
//! (`mcp::tests::remote_rights_table_covers_every_action_and_dispatch_obeys_it`) fails until
//! a new action gets an entry: adding an action means deciding its remote right.
//!
//! The rules come from the spec's security model: "Loopback-only session actions" (a remote
//! client only reads sessions: list, output, status) and the "Anti-hijack guard" (register,
//! list_peers, send, inbox stay local; agent spawn and task cancel re-check the same guard).
//! Registering a repository widens the file routes' root gate, so it is a local act too. What
//! else starts processes, changes settings or rewrites repositories follows the same line.

use serde_json::json;

use crate::mcp::registry::{CallCtx, ToolError};

/// Why an action is kept to local callers; `id` is stable, `why` is for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rule {
    /// Stable rule name, quoted in every refusal (`loopback-only: <id>`).
    pub id: &'static str,
    /// What the rule protects.
    pub why: &'static str,
}

/// A remote caller's right to one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Right {
    /// Remote callers may use it (the tool's own checks still apply).
    Open,
    /// Local callers only (IPC socket or loopback TCP without proxy headers).
    Local(Rule),
}

/// Sessions: remote clients read them (list, output, status) and nothing else.
pub(crate) const SESSION_CONTROL: Rule = Rule {
    id: "session-control",
    why: "remote clients may only read sessions (list, output, status); creating, writing, resizing, renaming, waiting on, pausing or ending them is local",
};
/// Repository roots: registering one widens what the file routes serve.
pub(crate) const ROOTS: Rule = Rule {
    id: "roots",
    why: "registering a repository root widens the file routes' root gate; only this machine may do it",
};
/// The anti-hijack guard on agent identity and mail.
pub(crate) const AGENT_MAIL: Rule = Rule {
    id: "agent-mail",
    why: "anti-hijack guard: agent identity, peer discovery and mail act as a live agent of this machine",
};
/// Starting or scheduling processes.
pub(crate) const SPAWN: Rule = Rule {
    id: "spawn",
    why: "it starts, schedules or stops processes on this machine",
};
/// Settings.
pub(crate) const CONFIG: Rule = Rule {
    id: "config",
    why: "settings change only from this machine",
};
/// Worktrees and branches on disk.
pub(crate) const REPO_CHANGES: Rule = Rule {
    id: "repo-changes",
    why: "worktrees and branches on this machine's disk change only from it (worktree_create may also spawn a session)",
};
/// The workflow coordinator's tools.
pub(crate) const COORDINATOR: Rule = Rule {
    id: "coordinator",
    why: "the coordinator tools act as a live managed terminal of this machine",
};
/// Credentials for this machine's agents (the `secret` tool).
pub(crate) const SECRETS: Rule = Rule {
    id: "secrets",
    why: "secrets are asked for, used and removed by this machine's agents only",
};
/// An action the table does not name (fails closed).
pub(crate) const UNLISTED: Rule = Rule {
    id: "unlisted",
    why: "this action has no entry in the remote rights table",
};

use Right::{Local, Open};

/// Every native tool action and its remote right; `""` is a tool without an `action` field.
/// Order follows the catalogue (`tools::NATIVE`) and each tool's action list.
pub(crate) static REMOTE_RIGHTS: &[(&str, &str, Right)] = &[
    ("session", "list", Open),
    ("session", "create", Local(SESSION_CONTROL)),
    ("session", "input", Local(SESSION_CONTROL)),
    ("session", "submit", Local(SESSION_CONTROL)),
    ("session", "output", Open),
    ("session", "status", Open),
    ("session", "wait", Local(SESSION_CONTROL)),
    ("session", "resize", Local(SESSION_CONTROL)),
    ("session", "rename", Local(SESSION_CONTROL)),
    ("session", "close", Local(SESSION_CONTROL)),
    ("session", "kill", Local(SESSION_CONTROL)),
    ("session", "suspend", Local(SESSION_CONTROL)),
    ("session", "keep_open", Local(SESSION_CONTROL)),
    ("session", "declare_worktree", Local(SESSION_CONTROL)),
    ("session", "pause", Local(SESSION_CONTROL)),
    ("session", "resume", Local(SESSION_CONTROL)),
    ("session", "answer", Local(SESSION_CONTROL)),
    ("agent", "register", Local(AGENT_MAIL)),
    ("agent", "list_peers", Local(AGENT_MAIL)),
    ("agent", "send", Local(AGENT_MAIL)),
    ("agent", "inbox", Local(AGENT_MAIL)),
    ("agent", "wait", Open),
    ("agent", "spawn", Local(SPAWN)),
    ("task", "get", Open),
    ("task", "cancel", Local(SPAWN)),
    ("remote", "list", Open),
    ("remote", "status", Open),
    ("repo", "add", Local(ROOTS)),
    ("repo", "list", Open),
    ("repo", "active", Open),
    ("repo", "status", Open),
    ("repo", "worktree_create", Local(REPO_CHANGES)),
    ("repo", "worktree_list", Open),
    ("repo", "worktree_remove", Local(REPO_CHANGES)),
    ("repo", "worktree_lifecycle", Open),
    ("repo", "branch_integrations", Open),
    ("repo", "branch_integration", Open),
    ("repo", "diff_summary", Open),
    ("repo", "diff_file", Open),
    ("repo", "branch_delete", Local(REPO_CHANGES)),
    ("repo", "progress_list", Open),
    ("repo", "orphan_cleanup_answer", Local(REPO_CHANGES)),
    // Stories: over authenticated TCP the caller acts with `human` authority (spec).
    ("story", "", Open),
    ("automations", "list", Open),
    ("automations", "get", Open),
    ("automations", "create", Local(SPAWN)),
    ("automations", "update", Local(SPAWN)),
    ("automations", "pause", Local(SPAWN)),
    ("automations", "resume", Local(SPAWN)),
    ("automations", "delete", Local(SPAWN)),
    ("workflow_run", "start_graph", Open),
    ("workflow_run", "get", Open),
    ("workflow_run", "list", Open),
    ("workflow_run", "events", Open),
    ("workflow_run", "pause", Open),
    ("workflow_run", "resume", Open),
    ("workflow_run", "cancel", Open),
    ("workflow_run", "resume_graph", Open),
    ("workflow_report", "", Local(COORDINATOR)),
    ("workflow_launch", "", Local(COORDINATOR)),
    ("workflow_story_create", "", Local(COORDINATOR)),
    ("progress", "", Open),
    ("ui", "toast", Open),
    ("ui", "confirm", Open),
    ("ui", "tab", Open),
    ("plugin_dev_guide", "", Open),
    ("voice", "status", Open),
    ("voice", "speak", Open),
    ("voice", "listen", Open),
    ("secret", "request", Local(SECRETS)),
    ("secret", "run", Local(SPAWN)),
    ("secret", "remove", Local(SECRETS)),
    ("config", "get", Open),
    ("config", "save", Local(CONFIG)),
    ("debug", "help", Open),
    ("debug", "logs", Open),
    ("debug", "mcp_sessions", Open),
];

/// A remote caller's right to `tool action` (`action` is `""` for a tool without actions);
/// an unlisted pair is local-only.
pub(crate) fn remote_right(tool: &str, action: &str) -> Right {
    REMOTE_RIGHTS
        .iter()
        .find(|(t, a, _)| *t == tool && *a == action)
        .map_or(Local(UNLISTED), |(_, _, r)| *r)
}

/// The refusal text every surface uses: it names the rule.
pub(crate) fn refusal_message(tool: &str, action: &str, rule: Rule) -> String {
    let what = if action.is_empty() {
        tool.to_owned()
    } else {
        format!("{tool} action={action}")
    };
    format!(
        "loopback-only: {} ({}); {what} is refused for remote callers: call it over the IPC socket or loopback TCP",
        rule.id, rule.why
    )
}

/// The dispatch check: `Ok` for a local caller or an open action, else the `loopback_only`
/// tool error naming the rule.
pub(crate) fn check(ctx: &CallCtx, tool: &str, action: &str) -> Result<(), ToolError> {
    if ctx.loopback {
        return Ok(());
    }
    match remote_right(tool, action) {
        Open => Ok(()),
        Local(rule) => Err(
            ToolError::new("loopback_only", refusal_message(tool, action, rule))
                .with("rule", json!(rule.id)),
        ),
    }
}

/// The same check for a REST route that shares a table entry (`POST /repos` is `repo add`):
/// 403 `loopback_only` with the same message. A request that did not come through a listener
/// (no transport) counts as remote, like everywhere else.
pub(crate) fn check_http(
    transport: Option<crate::guard::Transport>,
    headers: &axum::http::HeaderMap,
    tool: &str,
    action: &str,
) -> Result<(), crate::error::ApiError> {
    let transport = transport.unwrap_or(crate::guard::Transport::Tcp {
        peer: std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
    });
    if crate::guard::is_loopback_caller(transport, headers) {
        return Ok(());
    }
    match remote_right(tool, action) {
        Open => Ok(()),
        Local(rule) => Err(crate::error::ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "loopback_only",
            refusal_message(tool, action, rule),
        )),
    }
}
