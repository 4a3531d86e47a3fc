//! Atomic submission (`session action=submit`) and the waits of `session action=wait`.
//!
//! Submit accepts only a confirmed-idle session with an empty composer and never queues: the
//! readiness checks run under the session's submit claim before the first byte, the write plan
//! of `input::submit_plan` runs under one PTY writer lock, the raw output offset is captured
//! immediately before Enter, and the turn epoch advances exactly once after the full write.
//! The receipt then says what followed: output past that offset, the timeout, the exit, a
//! superseding epoch, or an uncertain (partial) write. It never claims semantic acceptance.
//!
//! Both entry points are async: they sleep on the session's watch channels, never on a thread;
//! only the write itself (with its scheduling gaps) runs on the blocking pool.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::activity::{AgentState, IDLE_AFTER_MS, ShellState};
use super::capture::Capture;
use super::input;
use super::{Session, SessionError, now_ms};

/// Default acknowledgement timeout.
pub const DEFAULT_ACK_MS: u64 = 3_000;
/// Accepted range of `timeout_ms` for submit.
pub const ACK_RANGE_MS: (u64, u64) = (250, 10_000);

/// The acknowledgement kinds of a receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ack {
    /// The child wrote output after Enter.
    Output,
    /// Nothing arrived within the timeout.
    Timeout,
    /// The session exited after the complete write.
    Exited,
    /// Another submission advanced the turn epoch first.
    Superseded,
    /// The write failed part-way: some bytes may have reached the child.
    Uncertain,
}

/// The submit receipt (API.md "MCP shapes").
#[derive(Debug, Clone, Serialize)]
pub struct Receipt {
    /// Whether the full write happened and something acknowledged it.
    pub ok: bool,
    /// Whether resending is safe: only before any byte was written, so never on a receipt.
    pub retry_safe: bool,
    /// What followed the write.
    pub ack: Ack,
    /// Milliseconds from Enter to the acknowledgement (absent on timeout or uncertain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_ms: Option<u64>,
    /// The session's turn epoch after this submission.
    pub turn_epoch: u64,
}

/// Why a submission was refused before its first byte (always safe to retry later).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The session has exited.
    #[error("session {0} has exited")]
    Exited(String),
    /// Not confirmed idle, half-typed, or another submission holds the session.
    #[error("session {id} is not ready for a submission: {reason}")]
    Busy {
        /// Session id.
        id: String,
        /// Why, in words.
        reason: String,
    },
    /// Empty input.
    #[error("input must not be empty")]
    EmptyInput,
}

/// Why a session is not ready for a submission, or `None` when it is.
pub fn not_ready(s: &Session) -> Option<String> {
    if s.composer_dirty() {
        return Some("half-typed: the composer holds text typed since the last Enter".into());
    }
    // Input the child has not had time to answer (a command just started) is not idleness.
    if s.last_input_ms()
        .is_some_and(|i| now_ms().saturating_sub(i) < IDLE_AFTER_MS)
    {
        return Some("not confirmed idle: input was written in the last 500 ms".into());
    }
    let row = s.row();
    match row.shell_state {
        None => return Some("not confirmed idle: no output observed yet".into()),
        Some(ShellState::Busy) => return Some("busy: output is still arriving".into()),
        Some(ShellState::Idle) => {}
    }
    match row.agent_state {
        Some(AgentState::Working) => Some("busy: the agent is working".into()),
        Some(AgentState::AwaitingInput) => Some("a question awaits input".into()),
        Some(AgentState::Starting) => Some("not confirmed idle: the agent is starting".into()),
        Some(AgentState::Idle | AgentState::Completed) => None,
        None if s.foreground_job_running() == Some(true) => Some(format!(
            "busy: {} is running in the foreground",
            row.foreground_process.as_deref().unwrap_or("a command")
        )),
        None => None,
    }
}

/// Submits `text` atomically and waits for the acknowledgement. The claim, the readiness
/// check and the write run on the blocking pool (the write plan sleeps its scheduling gaps
/// under the writer lock); the acknowledgement is awaited on the session's output events,
/// with the claim still held, so a second submission is refused until this one is answered.
pub async fn submit(
    s: &Arc<Session>,
    text: &str,
    timeout: Duration,
    capture: &Arc<Capture>,
) -> Result<Receipt, Refusal> {
    if text.is_empty() {
        return Err(Refusal::EmptyInput);
    }
    if s.exit().is_some() {
        return Err(Refusal::Exited(s.id.clone()));
    }
    let (sess, cap, plan) = (s.clone(), capture.clone(), input::submit_plan(text));
    let written = match tokio::task::spawn_blocking(move || write_claimed(&sess, &plan, &cap)).await
    {
        Ok(w) => w?,
        Err(e) => match e.try_into_panic() {
            Ok(p) => std::panic::resume_unwind(p),
            // Cancelled before it ran (the runtime is shutting down): nothing was written.
            Err(_) => {
                return Err(Refusal::Busy {
                    id: s.id.clone(),
                    reason: "the node is shutting down".into(),
                });
            }
        },
    };
    let (_claim, offset, entered, epoch) = match written {
        Written::Complete {
            claim,
            offset,
            entered,
            epoch,
        } => (claim, offset, entered, epoch),
        Written::Partial { epoch } => {
            return Ok(Receipt {
                ok: false,
                retry_safe: false,
                ack: Ack::Uncertain,
                ack_ms: None,
                turn_epoch: epoch,
            });
        }
    };
    let mut wake = s.wake();
    let deadline = entered + timeout;
    let ack = loop {
        wake.borrow_and_update();
        if s.stream().total() > offset {
            break Ack::Output;
        }
        if s.exit().is_some() {
            break Ack::Exited;
        }
        if s.turn_epoch() != epoch {
            break Ack::Superseded;
        }
        let now = Instant::now();
        if now >= deadline {
            break Ack::Timeout;
        }
        wait_change(&mut wake, deadline - now).await;
    };
    Ok(Receipt {
        ok: ack == Ack::Output,
        retry_safe: false,
        ack,
        ack_ms: (ack != Ack::Timeout).then(|| entered.elapsed().as_millis() as u64),
        turn_epoch: epoch,
    })
}

/// What the blocking half of [`submit`] wrote.
enum Written {
    /// The whole plan: the claim (held until the acknowledgement), the raw offset and the
    /// time immediately before Enter, and the advanced epoch.
    Complete {
        claim: tokio::sync::OwnedMutexGuard<()>,
        offset: u64,
        entered: Instant,
        epoch: u64,
    },
    /// The write failed part-way.
    Partial { epoch: u64 },
}

/// Claims the session, checks readiness and writes the plan. Blocking.
fn write_claimed(s: &Session, plan: &[input::Part], capture: &Capture) -> Result<Written, Refusal> {
    let busy = |reason: String| Refusal::Busy {
        id: s.id.clone(),
        reason,
    };
    // A peer that wins the claim first makes this submit reject; one that arrives after it
    // queues behind it on the writer lock.
    let Some(claim) = s.try_claim_submit() else {
        return Err(busy("another submission is in flight".into()));
    };
    if let Some(reason) = not_ready(s) {
        return Err(busy(reason));
    }
    let mut offset = 0;
    let mut entered = Instant::now();
    let written = s.write_parts(plan, capture, || {
        offset = s.stream().total();
        entered = Instant::now();
    });
    let epoch = s.advance_turn();
    match written {
        Ok(()) => Ok(Written::Complete {
            claim,
            offset,
            entered,
            epoch,
        }),
        Err((0, SessionError::Exited { .. })) => Err(Refusal::Exited(s.id.clone())),
        Err(_) => Ok(Written::Partial { epoch }),
    }
}

/// Clamps a requested acknowledgement timeout to the spec's range.
pub fn ack_timeout(requested: Option<u64>) -> Duration {
    Duration::from_millis(
        requested
            .unwrap_or(DEFAULT_ACK_MS)
            .clamp(ACK_RANGE_MS.0, ACK_RANGE_MS.1),
    )
}

/// What `wait` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// Shell idle (or the agent idle/completed/awaiting input), or exited.
    Idle,
    /// The process exited.
    Exited,
}

/// Whether `until` is reached now.
fn reached(s: &Session, until: Until) -> bool {
    if s.exit().is_some() {
        return true;
    }
    match until {
        Until::Exited => false,
        Until::Idle => {
            let row = s.row();
            row.shell_state == Some(ShellState::Idle)
                && !matches!(
                    row.agent_state,
                    Some(AgentState::Working | AgentState::Starting)
                )
        }
    }
}

/// Waits until `until` or the timeout; returns whether it was reached. It sleeps on the
/// session's lifecycle events (the monitor publishes each observed change of shell or agent
/// state, the waiter thread the exit), subscribing before the first check so a transition in
/// between still wakes it; it runs no polling loop of its own.
pub async fn wait(s: &Session, until: Until, timeout: Duration) -> Waited {
    let deadline = Instant::now() + timeout;
    let mut life = s.lifecycle();
    let mut checks = 0;
    loop {
        life.borrow_and_update();
        checks += 1;
        if reached(s, until) {
            return Waited {
                reached: true,
                checks,
            };
        }
        let now = Instant::now();
        if now >= deadline {
            return Waited {
                reached: false,
                checks,
            };
        }
        wait_change(&mut life, deadline - now).await;
    }
}

/// How a [`wait`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waited {
    /// The condition held before the deadline.
    pub reached: bool,
    /// Times the condition was evaluated: one at the start, one per lifecycle change, one at
    /// the deadline (a quiet session costs two, never one per polling tick).
    pub checks: u64,
}

/// Sleeps until `watch` changes (output, lifecycle) or `d` passes.
async fn wait_change(watch: &mut tokio::sync::watch::Receiver<u64>, d: Duration) {
    let _ = tokio::time::timeout(d, watch.changed()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeout_is_clamped() {
        assert_eq!(ack_timeout(None), Duration::from_millis(3000));
        assert_eq!(ack_timeout(Some(1)), Duration::from_millis(250));
        assert_eq!(ack_timeout(Some(60_000)), Duration::from_millis(10_000));
    }

    #[test]
    fn receipt_shape_omits_absent_ack_ms() {
        let r = Receipt {
            ok: false,
            retry_safe: false,
            ack: Ack::Timeout,
            ack_ms: None,
            turn_epoch: 3,
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"ok": false, "retry_safe": false, "ack": "timeout", "turn_epoch": 3})
        );
    }
}
