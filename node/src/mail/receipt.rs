//! The launch receipt of a managed PTY (`GET /sessions/{id}/prompt-receipt`): what a spawned
//! agent was launched with and how its prompt was delivered, plus the MCP instructions the
//! server actually served to protocol sessions bound to that PTY's identity.
//!
//! The copy lives with the PTY identity, not with the protocol session, so it survives the
//! reaping of the protocol session that was served. It is bounded: at most
//! [`SERVED_MAX`] served instruction texts per identity, and receipts of sessions that no
//! longer resolve (live or tombstoned) are pruned whenever a receipt is written. Nothing is
//! reconstructed from the store or settings: a PTY that was not spawned by `agent action=spawn`
//! reports an explicit launch-unavailable section.

use std::collections::VecDeque;

use serde::Serialize;
use serde_json::{Value, json};

use super::Mail;
use crate::session::now_ms;

/// Served instruction texts kept per identity.
pub(crate) const SERVED_MAX: usize = 4;

/// How a spawn delivers its prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// No prompt was given.
    None,
    /// Substituted where the caller's args wrote `{prompt}`.
    Placeholder,
    /// Appended as the final positional argument.
    Argv,
    /// Typed into the PTY once the prefill-only TUI shows its ready prompt.
    DeferredPty,
}

/// The state of a deferred prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptState {
    /// Delivered with the argv (or no prompt).
    Launched,
    /// Waiting for the ready prompt.
    Pending,
    /// Typed and submitted.
    Delivered,
    /// The watchdog fired; the parent was told `prompt_delivery_failed`.
    Failed,
}

/// The launch brief recorded at spawn.
#[derive(Debug, Clone, Serialize)]
pub struct Launch {
    /// The agent CLI.
    pub command: String,
    /// The argv it got.
    pub args: Vec<String>,
    /// The task prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// How the prompt travels.
    pub prompt_delivery: Delivery,
    /// Where the prompt is.
    pub prompt_state: PromptState,
    /// The registered spawner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    /// Wall-clock ms of the spawn.
    pub spawned_at_ms: u64,
    /// Wall-clock ms the deferred prompt was typed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered_at_ms: Option<u64>,
}

/// Instructions served by one `initialize` bound to the identity.
#[derive(Debug, Clone, Serialize)]
pub struct Served {
    /// The protocol session that was served.
    pub mcp_session: String,
    /// Wall-clock ms of the initialize.
    pub served_at_ms: u64,
    /// The instructions text as sent.
    pub instructions: String,
}

/// One PTY identity's receipt.
#[derive(Debug, Clone, Default)]
pub struct Receipt {
    /// The PTY id it belongs to.
    pub session_id: String,
    /// Set by `agent action=spawn`.
    pub launch: Option<Launch>,
    /// Newest last, at most [`SERVED_MAX`].
    pub served: VecDeque<Served>,
}

fn prune(mail: &Mail, g: &mut super::Inner) {
    g.receipts
        .retain(|_, r| mail.env.sessions.resolve(&r.session_id).is_some());
}

/// Records the launch brief of a spawned child.
pub(crate) fn launched(mail: &Mail, tuic: &str, session_id: &str, launch: Launch) {
    let mut g = mail.lock();
    prune(mail, &mut g);
    let r = g.receipts.entry(tuic.to_owned()).or_default();
    r.session_id = session_id.to_owned();
    r.launch = Some(launch);
}

/// Moves a deferred prompt to `state`.
pub(crate) fn prompt_state(mail: &Mail, tuic: &str, state: PromptState) {
    let mut g = mail.lock();
    if let Some(l) = g.receipts.get_mut(tuic).and_then(|r| r.launch.as_mut()) {
        l.prompt_state = state;
        if state == PromptState::Delivered {
            l.delivered_at_ms = Some(now_ms());
        }
    }
}

/// `initialize` served `instructions` to protocol session `sid` bound to `tuic`; kept when
/// `tuic` owns a live PTY.
pub(crate) fn served(mail: &Mail, tuic: &str, sid: &str, instructions: &str) {
    let Some(s) = mail
        .env
        .sessions
        .live(tuic)
        .filter(|s| s.tuic_session == tuic)
    else {
        return;
    };
    let mut g = mail.lock();
    prune(mail, &mut g);
    let r = g.receipts.entry(tuic.to_owned()).or_default();
    r.session_id = s.id.clone();
    if r.served.len() == SERVED_MAX {
        r.served.pop_front();
    }
    r.served.push_back(Served {
        mcp_session: sid.to_owned(),
        served_at_ms: now_ms(),
        instructions: instructions.to_owned(),
    });
}

/// The receipt of PTY `session_id` (identity `tuic`) as the route answers it.
pub(crate) fn read(mail: &Mail, session_id: &str, tuic: &str) -> Value {
    let r = mail.lock().receipts.get(tuic).cloned();
    let mut v = json!({"session_id": session_id, "tuic_session": tuic});
    match r.as_ref().and_then(|r| r.launch.as_ref()) {
        Some(l) => v["launch"] = json!(l),
        None => {
            v["launch_unavailable"] = json!(
                "this session was not started by agent action=spawn, so no launch brief was captured"
            )
        }
    }
    v["mcp_instructions"] = json!(r.map(|r| r.served).unwrap_or_default());
    v
}
