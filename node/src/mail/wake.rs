//! The payload-free wake notice typed into a managed PTY that owns unread mail, with its
//! claim, expiry and budget (spec "Protocol", step 4).
//!
//! - **Readiness**: the session is quiet (shell idle; a detected agent idle or completed).
//!   Busy sessions keep the notice queued and are re-evaluated at their idle edge.
//! - **The claim**: the final check and the write run together under the session's submit
//!   claim, off the async workers, so nothing submits between observing an empty composer and
//!   typing the notice (the spec's atomic idle→busy claim).
//! - **Composer safety**: no question on screen, nothing half-typed (tracked input or screen).
//!   A refusal writes no bytes (`NotStarted`) and does not loop: the next BUSY→IDLE edge of the
//!   session (typing, clearing or submitting the composer produces one) re-arms the attempt.
//! - **Expiry and budget**: a written notice that no inbox read or wait observation consumes
//!   within `mail_wake_expiry_ms` (5 s) expired; it is retried once when the session is ready
//!   again. A second expiry exhausts the group's budget: later mail stays inbox-only until an
//!   observation acknowledges the group.
//! - **Lifecycle summary**: when every message in the window is a server-authored lifecycle
//!   notice (`tuic-auto-*`) and the summary fits in [`SUMMARY_MAX`] characters, the summary is
//!   typed instead of the generic notice and acknowledges its own window.
//!
//! Peer payloads never reach the terminal: only [`NOTICE`] or a lifecycle summary.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tuic_proto::mail::InboxMessage;

use super::Mail;
use crate::session::activity::{self, AgentState, ShellState};
use crate::session::{Session, input};

/// The notice text (spec "Inter-Agent Messaging"); it carries no payload.
pub(crate) const NOTICE: &str = "[TUIC] message available — read it with: agent action=inbox";

/// Longest lifecycle summary typed instead of the notice, in characters.
pub(crate) const SUMMARY_MAX: usize = 240;

/// Prompt endings that mark an empty composer on the cursor line.
const PROMPTS: &[&str] = &[">", "❯", "$", "#", "%"];

/// Why the gate is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// The process has exited.
    Exited,
    /// Output arrived recently (or none was observed yet).
    Busy,
    /// A detected agent is starting, working or asking.
    AgentNotIdle,
    /// Another submission holds the session's claim.
    Claimed,
    /// A question or approval is on screen.
    Question,
    /// Something is typed after the prompt.
    Draft,
}

impl Closed {
    /// Whether the session is simply not ready yet (wait for its idle edge), as opposed to a
    /// composer that refused the claim.
    fn not_ready(self) -> bool {
        matches!(self, Self::Busy | Self::AgentNotIdle | Self::Claimed)
    }
}

/// Whether the last non-blank screen line is a bare prompt.
pub(crate) fn composer_empty(rows: &[String]) -> bool {
    rows.iter()
        .rev()
        .find(|l| !l.trim().is_empty())
        .is_some_and(|l| {
            let t = l.trim_end();
            PROMPTS.iter().any(|p| t.ends_with(p))
        })
}

/// Readiness: the session is alive and quiet.
pub(crate) fn ready(s: &Session) -> Result<(), Closed> {
    if s.exit().is_some() {
        return Err(Closed::Exited);
    }
    let row = s.row();
    if row.shell_state != Some(ShellState::Idle) {
        return Err(Closed::Busy);
    }
    if let Some(a) = row.agent_state
        && !matches!(a, AgentState::Idle | AgentState::Completed)
    {
        return Err(Closed::AgentNotIdle);
    }
    Ok(())
}

/// Composer safety: no question on screen and nothing typed. `bare_prompt` additionally
/// requires the cursor line to be a bare prompt (an idle composer shows one; a busy agent's
/// screen does not).
pub(crate) fn composer_safe(s: &Session, bare_prompt: bool) -> Result<(), Closed> {
    if s.composer_dirty() {
        return Err(Closed::Draft);
    }
    let rows = s.screen().grid.screen();
    if activity::question_on_screen(&rows.join("\n")).is_some() {
        return Err(Closed::Question);
    }
    if bare_prompt && !composer_empty(&rows) {
        return Err(Closed::Draft);
    }
    Ok(())
}

/// The composer-safety gate of an idle session.
pub(crate) fn gate(s: &Session) -> Result<(), Closed> {
    ready(s)?;
    composer_safe(s, true)
}

/// Claims the session, re-checks `check` and types `text` + Enter, all in one blocking step.
/// Blocking: call off the async workers.
pub(crate) fn claim_and_write(
    mail: &Mail,
    s: &Session,
    text: &str,
    check: impl FnOnce(&Session) -> Result<(), Closed>,
) -> Result<(), Closed> {
    let Some(_claim) = s.try_claim_submit() else {
        return Err(Closed::Claimed);
    };
    check(s)?;
    let parts = [
        input::Part::Bytes(text.as_bytes().to_vec()),
        input::Part::Gap(input::GAP),
        input::Part::Bytes(b"\r".to_vec()),
    ];
    s.write_parts(&parts, &mail.env.sessions.capture, || {})
        .map_err(|_| Closed::Exited)
}

/// The lifecycle summary of a window, when every entry is server-authored and it fits.
pub(crate) fn lifecycle_summary(window: &[(u64, InboxMessage)]) -> Option<String> {
    if window.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    for (_, m) in window {
        if !m.message_id.starts_with("tuic-auto-") {
            return None;
        }
        let body: Value = serde_json::from_str(&m.message).ok()?;
        let child: String = body["child"].as_str()?.chars().take(8).collect();
        let part = match (m.kind.as_deref(), body["state"].as_str()) {
            (Some("prompt_delivery_failed"), _) => {
                format!("child agent {child} did not receive its prompt")
            }
            (_, Some("exited")) => match body["exit_code"].as_i64() {
                Some(c) => format!("child agent {child} exited (exit {c})"),
                None => format!("child agent {child} exited"),
            },
            (_, Some(state)) => format!("child agent {child} is now {state}"),
            _ => return None,
        };
        parts.push(part);
    }
    let text = format!("[TUIC] {}", parts.join("; "));
    (text.chars().count() <= SUMMARY_MAX).then_some(text)
}

/// Waits for the session's next output (the start of a BUSY→IDLE edge). False when the wake
/// was withdrawn, the node stops, or the session is gone.
async fn next_output(
    mail: &Mail,
    cancel: &CancellationToken,
    output: &mut tokio::sync::watch::Receiver<u64>,
) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => false,
        _ = mail.env.shutdown.cancelled() => false,
        r = output.changed() => r.is_ok(),
    }
}

/// Sleeps `d` unless the wake is withdrawn or the node stops first.
async fn pause(mail: &Mail, cancel: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => false,
        _ = mail.env.shutdown.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

/// Runs one pending wake for `recipient` until the notice is consumed, withdrawn, its budget is
/// exhausted, or the PTY goes away.
pub(crate) fn start(
    mail: &Arc<Mail>,
    recipient: String,
    generation: u64,
    cancel: CancellationToken,
) {
    let n = mail.clone();
    mail.env.tasks.spawn(async move {
        let Some(s) = n.env.sessions.live(&recipient) else {
            super::pty_gone(&n, &recipient);
            return;
        };
        let mut output = s.wake();
        let mut expired = 0u32;
        loop {
            if cancel.is_cancelled() || n.env.shutdown.is_cancelled() {
                return;
            }
            // Readiness first; a busy session is re-checked at its idle edge.
            match ready(&s) {
                Err(Closed::Exited) => {
                    super::pty_gone(&n, &recipient);
                    return;
                }
                Err(_) => {
                    let settle = Duration::from_millis(activity::IDLE_AFTER_MS + 50);
                    if !pause(&n, &cancel, settle).await {
                        return;
                    }
                    continue;
                }
                Ok(()) => {}
            }
            let window = n.lock().inboxes.pty_window(&recipient);
            if window.is_empty() {
                // Everything was observed meanwhile; the withdrawal is on its way.
                super::wake_done(&n, &recipient, generation);
                return;
            }
            let summary = lifecycle_summary(&window);
            let up_to = window.last().map(|(c, _)| *c).unwrap_or(0);
            let text = summary.clone().unwrap_or_else(|| NOTICE.to_owned());
            let verdict = {
                let (s, n2) = (s.clone(), n.clone());
                tokio::task::spawn_blocking(move || claim_and_write(&n2, &s, &text, gate))
                    .await
                    .unwrap_or(Err(Closed::Exited))
            };
            match verdict {
                Ok(()) if summary.is_some() => {
                    super::summary_done(&n, &recipient, generation, up_to);
                    tracing::info!(source = "agent_msg", recipient = %recipient, delivery_path = "lifecycle_summary_and_inbox", "lifecycle summary written");
                    return;
                }
                Ok(()) => {
                    tracing::info!(source = "agent_msg", recipient = %recipient, attempt = expired + 1, "wake notice written");
                    let expiry = Duration::from_millis(n.config().tuning.mail_wake_expiry_ms);
                    if !pause(&n, &cancel, expiry).await {
                        return;
                    }
                    expired += 1;
                    if expired >= 2 {
                        // The group's budget is spent: later mail stays inbox-only until an
                        // inbox read or wait observation acknowledges it (the pending wake
                        // stays reserved so coalesced mail earns no new notice).
                        tracing::info!(source = "agent_msg", recipient = %recipient, "wake budget exhausted; mail stays inbox-only until read");
                        return;
                    }
                    tracing::info!(source = "agent_msg", recipient = %recipient, "wake notice expired unread; retrying once when ready");
                }
                Err(Closed::Exited) => {
                    super::pty_gone(&n, &recipient);
                    return;
                }
                Err(c) if c.not_ready() => {
                    let settle = Duration::from_millis(activity::IDLE_AFTER_MS + 50);
                    if !pause(&n, &cancel, settle).await {
                        return;
                    }
                }
                Err(c) => {
                    // NotStarted: no bytes were written. No retry loop; the next BUSY→IDLE
                    // edge re-arms the attempt.
                    tracing::debug!(source = "agent_msg", recipient = %recipient, refused = ?c, "wake notice not started");
                    if !next_output(&n, &cancel, &mut output).await {
                        if !cancel.is_cancelled() && !n.env.shutdown.is_cancelled() {
                            super::pty_gone(&n, &recipient);
                        }
                        return;
                    }
                }
            }
        }
    });
}

/// Why an urgent notice was not written (`urgent_fallback_reason`).
pub(crate) fn urgent_refusal(c: Closed) -> &'static str {
    match c {
        Closed::Exited => "the recipient's terminal has exited",
        Closed::Question => "a question or approval is open in the recipient's terminal",
        Closed::Draft => "the recipient's composer holds a draft",
        Closed::Claimed => "another submission to the recipient's terminal is in flight",
        Closed::Busy | Closed::AgentNotIdle => "the recipient is not ready",
    }
}

/// Agents whose CLI queues an Enter typed during a turn until its next tool boundary.
pub(crate) const URGENT_AGENTS: &[&str] = &["claude", "codex"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composer_is_empty_only_on_a_bare_prompt() {
        let rows = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(composer_empty(&rows(&["hello", "> ", "", ""])));
        assert!(composer_empty(&rows(&["❯"])));
        assert!(!composer_empty(&rows(&["> half typed"])));
        assert!(!composer_empty(&rows(&["", ""])));
    }

    fn life(child: &str, state: &str, code: Option<i32>) -> (u64, InboxMessage) {
        let mut body = serde_json::json!({"child": child, "state": state});
        if let Some(c) = code {
            body["exit_code"] = c.into();
        }
        (
            1,
            InboxMessage {
                message_id: format!("tuic-auto-{child}"),
                from: child.into(),
                from_name: None,
                message: body.to_string(),
                timestamp_ms: 0,
                kind: Some("state_change".into()),
            },
        )
    }

    #[test]
    fn lifecycle_summary_only_for_server_authored_windows_that_fit() {
        let a = "8c261794-0000-4000-8000-000000000000";
        let w = vec![life(a, "idle", None), life(a, "exited", Some(0))];
        assert_eq!(
            lifecycle_summary(&w).as_deref(),
            Some("[TUIC] child agent 8c261794 is now idle; child agent 8c261794 exited (exit 0)")
        );
        // One peer message disqualifies the whole window.
        let mut peer = w.clone();
        peer.push((
            2,
            InboxMessage {
                message_id: "0b6e1f9e-0000-4000-8000-000000000000".into(),
                from: a.into(),
                from_name: None,
                message: r#"{"child":"x","state":"idle"}"#.into(),
                timestamp_ms: 0,
                kind: None,
            },
        ));
        assert_eq!(lifecycle_summary(&peer), None);
        // Longer than 240 characters falls back to the generic notice.
        let many: Vec<_> = (0..10).map(|_| life(a, "completed", None)).collect();
        assert_eq!(lifecycle_summary(&many), None);
        assert_eq!(lifecycle_summary(&[]), None);
    }
}
