//! The payload-free wake notice typed into a managed PTY that owns unread mail.
//!
//! The notice is written only when the composer-safety gate passes: the session is quiet
//! (shell idle; a detected agent idle or completed), no question is on screen, and the cursor
//! line is a bare prompt (nothing half-typed). A closed gate leaves the notice queued; it is
//! re-evaluated on the session's next output (typing, clearing or submitting the composer)
//! and on its next idle edge. Peer payloads never reach the terminal: only [`NOTICE`].

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::session::Session;
use crate::session::activity::{self, AgentState, ShellState};
use crate::state::Node;

/// The notice text (spec "Inter-Agent Messaging"); it carries no payload.
pub const NOTICE: &str = "[TUIC] message available — read it with: agent action=inbox";

/// Prompt endings that mark an empty composer on the cursor line.
const PROMPTS: &[&str] = &[">", "❯", "$", "#", "%"];

/// Why the gate is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The process has exited.
    Exited,
    /// Output arrived recently (or none was observed yet).
    Busy,
    /// A detected agent is starting, working or asking.
    AgentNotIdle,
    /// A question or approval is on screen.
    Question,
    /// Something is typed after the prompt.
    Draft,
}

/// Whether the last non-blank screen line is a bare prompt.
pub fn composer_empty(rows: &[String]) -> bool {
    rows.iter()
        .rev()
        .find(|l| !l.trim().is_empty())
        .is_some_and(|l| {
            let t = l.trim_end();
            PROMPTS.iter().any(|p| t.ends_with(p))
        })
}

/// The composer-safety gate.
pub fn gate(s: &Session) -> Result<(), Closed> {
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
    let rows = s.screen().grid.screen();
    if activity::question_on_screen(&rows.join("\n")).is_some() {
        return Err(Closed::Question);
    }
    if !composer_empty(&rows) {
        return Err(Closed::Draft);
    }
    Ok(())
}

/// Runs one pending wake for `recipient` until the notice is written, withdrawn, or the
/// PTY goes away.
pub fn start(node: &Arc<Node>, recipient: String, generation: u64, cancel: CancellationToken) {
    let n = node.clone();
    node.tasks.spawn(async move {
        let Some(s) = n.sessions.live(&recipient) else {
            super::pty_gone(&n, &recipient);
            return;
        };
        let mut output = s.wake();
        loop {
            if cancel.is_cancelled() || n.shutdown.is_cancelled() {
                return;
            }
            let verdict = {
                let s = s.clone();
                let n2 = n.clone();
                // The final check and the write run together off the async workers, so the
                // window between observing the empty composer and typing is one blocking step.
                tokio::task::spawn_blocking(move || match gate(&s) {
                    Ok(()) => {
                        let line = format!("{NOTICE}\r");
                        s.write(line.as_bytes(), &n2.sessions.capture)
                            .map_err(|_| Closed::Exited)
                    }
                    Err(c) => Err(c),
                })
                .await
                .unwrap_or(Err(Closed::Exited))
            };
            match verdict {
                Ok(()) => {
                    tracing::info!(source = "agent_msg", recipient = %recipient, "wake notice written");
                    super::wake_done(&n, &recipient, generation);
                    return;
                }
                Err(Closed::Exited) => {
                    super::pty_gone(&n, &recipient);
                    return;
                }
                Err(Closed::Busy) => {
                    // Re-check at the idle edge.
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = n.shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(activity::IDLE_AFTER_MS + 50)) => {}
                    }
                }
                Err(_) => {
                    // A draft, a question or a busy agent changes only with output; the slow
                    // tick covers agent-state changes that print nothing.
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = n.shutdown.cancelled() => return,
                        r = output.changed() => if r.is_err() { super::pty_gone(&n, &recipient); return; },
                        _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                    }
                }
            }
        }
    });
}

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
}
