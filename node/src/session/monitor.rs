//! The session monitor: a node task that notices state changes of live sessions (agent state,
//! a question, and on agents' screens a rate limit or an error appearing) and publishes them as
//! `pty-parsed` events, which the session stream forwards as `parsed` frames.
//!
//! Each tick it also probes every live session (`Session::probe`: the foreground process from
//! the PTY and `/proc`, an agent's screen marks when its screen changed) and stores the result,
//! so listing sessions reads ready rows; a list is never more than one tick behind. Sessions
//! with no new output since their last check and a settled state publish nothing. It does not
//! classify anything itself (see `activity`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use tuic_proto::events::Event;

use super::{Registry, Session, activity, lock};

/// How often live sessions are looked at.
const TICK: Duration = Duration::from_millis(250);

/// What the monitor last reported for one session.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// Output time (ms) at the last check.
    output_ms: u64,
    /// Whether the last check found the shell settled (idle).
    settled: bool,
    agent_state: Option<activity::AgentState>,
    /// The row's `state` last published (a `state` parsed event on each change).
    state: Option<activity::SessionState>,
    question: Option<String>,
    rate_limit: Option<String>,
    error: Option<String>,
    /// Clean-log lines already looked at for `intent:` markers.
    log_seen: u64,
    /// The last `intent:` text journaled, so a redrawn line is not journaled twice.
    last_intent: Option<String>,
}

/// Starts the monitor (once per registry).
pub(super) fn start(registry: &Arc<Registry>) {
    let r = registry.clone();
    registry.env().tasks.spawn(async move {
        let env = r.env().clone();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = env.shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let sessions = r.live_sessions();
            let on_intent = env.on_intent.clone();
            let found = tokio::task::spawn_blocking(move || {
                let mut found = Vec::new();
                for s in &sessions {
                    let probe = s.probe();
                    let (parsed, intents) = check(s, &probe);
                    found.extend(parsed.into_iter().map(|p| (s.id.clone(), p)));
                    // The progress journal's observed kind (a narrow hook: one call per marker).
                    if let Some(hook) = &on_intent {
                        for text in intents {
                            hook(s, &text);
                        }
                    }
                }
                found
            })
            .await
            .unwrap_or_default();
            r.monitor_ticked();
            for (session_id, parsed) in found {
                env.bus.publish(Event::PtyParsed { session_id, parsed });
            }
        }
    });
}

/// Parsed events for one session since its last check (`probe`: taken this tick), and the
/// `intent:` markers of an agent's new clean-log lines.
fn check(s: &Session, probe: &super::probe::Probe) -> (Vec<Value>, Vec<String>) {
    let out_ms = s.last_output_ms.load(Ordering::Relaxed);
    let row = s.build_row(probe);
    let log_seen = {
        let seen = lock(&s.seen);
        // The state also moves without output (a silent command starts or ends).
        if seen.output_ms == out_ms && seen.settled && seen.state == Some(row.state) {
            return (Vec::new(), Vec::new());
        }
        seen.log_seen
    };
    // Bulk plain text is still arriving: the screen is a moving target and reading it would
    // apply the held-back text on every tick. Look again once output pauses for a tick.
    if s.screen_pending() && super::now_ms().saturating_sub(out_ms) < TICK.as_millis() as u64 {
        return (Vec::new(), Vec::new());
    }
    let (screen, new_lines, log_total) = {
        let scr = s.screen();
        let (_, lines) = if row.agent_type.is_some() {
            scr.log.since(log_seen)
        } else {
            (0, Vec::new())
        };
        (scr.grid.screen().join("\n"), lines, scr.log.total())
    };
    let detail = activity::question_detail(&screen);
    let question = detail.as_ref().map(|q| q.text.clone());
    let mut seen = lock(&s.seen);
    let mut out = Vec::new();
    if row.agent_state.is_some() && row.agent_state != seen.agent_state {
        out.push(json!({"type": "agent_state", "state": row.agent_state}));
    }
    // The first observation is not a change: the row carries it.
    if seen.state.is_some_and(|st| st != row.state) {
        out.push(json!({"type": "state", "state": row.state}));
    }
    if let Some(q) = detail.as_ref().filter(|_| question != seen.question) {
        out.push(super::screensync::question_event(q));
    }
    // Rate limits and errors are read from agents' screens only (a shell printing those words
    // is not reporting its own state). Each distinct line is reported once while it shows.
    let agent = row.agent_type.is_some();
    let rate = agent
        .then(|| activity::rate_limit_on_screen(&screen))
        .flatten();
    if let Some((text, reset_at)) = &rate
        && seen.rate_limit.as_ref() != Some(text)
    {
        let mut ev = json!({"type": "rate_limit", "text": text});
        if let Some(r) = reset_at {
            ev["reset_at"] = json!(r);
        }
        out.push(ev);
    }
    let error = agent.then(|| activity::error_on_screen(&screen)).flatten();
    if error.is_some() && error != seen.error {
        out.push(json!({"type": "error", "text": error}));
    }
    let settled = row.shell_state == Some(activity::ShellState::Idle);
    if settled != seen.settled
        || row.agent_state != seen.agent_state
        || Some(row.state) != seen.state
    {
        // `session action=wait` sleeps on this instead of polling the state itself.
        s.lifecycle_changed();
    }
    seen.output_ms = out_ms;
    seen.settled = settled;
    seen.agent_state = row.agent_state;
    seen.state = Some(row.state);
    seen.question = question;
    seen.rate_limit = rate.map(|(t, _)| t);
    seen.error = error;
    seen.log_seen = log_total;
    let mut intents = Vec::new();
    for l in &new_lines {
        if let Some(t) = crate::progress::intent::marker(l)
            && seen.last_intent.as_deref() != Some(t)
        {
            seen.last_intent = Some(t.to_owned());
            intents.push(t.to_owned());
        }
    }
    (out, intents)
}
