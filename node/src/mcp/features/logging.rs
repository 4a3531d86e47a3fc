//! `logging/setLevel` per protocol session and `notifications/message` to that session's
//! `GET /mcp` stream, at or above the level it set: the node's own log lines (`tracing`
//! events) emitted while serving that session's tool calls — the transport runs each call in
//! an `mcp_call` span with `mcp_session`, `logs::LogRing::tagged` hands the tagged records to
//! [`spawn_forwarder`] — and one record of each call (tool, action, duration, outcome; errors
//! at `error`). Bounded: a token bucket of [`BURST`] messages refilled at [`PER_SEC`] a second
//! per session; what does not fit is counted and said in the next message that does. Lines
//! below the process's own filter (`TUIC_LOG`, `info` by default) are never produced, so
//! `debug` asks for what the node logs, not more.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{RpcError, parse};
use crate::mcp::registry::CallCtx;
use crate::state::Node;

/// Messages one session may receive at once.
pub(crate) const BURST: f64 = 20.0;
/// Messages per second a session's bucket refills.
pub(crate) const PER_SEC: f64 = 10.0;
/// Sessions with a level kept at most (oldest settings go first past it).
const MAX_SESSIONS: usize = 20_000;

/// RFC 5424 severities, as MCP names them (most severe last).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Level {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Notice => "notice",
            Self::Warning => "warning",
            Self::Error => "error",
            Self::Critical => "critical",
            Self::Alert => "alert",
            Self::Emergency => "emergency",
        }
    }
}

#[derive(Debug)]
struct Setting {
    level: Level,
    tokens: f64,
    refilled: Instant,
    dropped: u64,
    set_at: Instant,
}

/// Levels per protocol session.
#[derive(Debug, Default)]
pub(crate) struct Levels {
    inner: Mutex<HashMap<String, Setting>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Levels {
    fn set(&self, sid: &str, level: Level, now: Instant) {
        let mut g = lock(&self.inner);
        if g.len() >= MAX_SESSIONS && !g.contains_key(sid) {
            let oldest = g
                .iter()
                .min_by_key(|(_, s)| s.set_at)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                g.remove(&k);
            }
        }
        g.insert(
            sid.to_owned(),
            Setting {
                level,
                tokens: BURST,
                refilled: now,
                dropped: 0,
                set_at: now,
            },
        );
    }

    /// Whether a message at `level` goes to `sid` now; `Some(dropped before)` when it does.
    fn admit(&self, sid: &str, level: Level, now: Instant) -> Option<u64> {
        let mut g = lock(&self.inner);
        let s = g.get_mut(sid)?;
        if level < s.level {
            return None;
        }
        let dt = now.duration_since(s.refilled).as_secs_f64();
        s.tokens = (s.tokens + dt * PER_SEC).min(BURST);
        s.refilled = now;
        if s.tokens < 1.0 {
            s.dropped += 1;
            return None;
        }
        s.tokens -= 1.0;
        Some(std::mem::take(&mut s.dropped))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetLevel {
    level: Level,
}

/// `logging/setLevel`.
pub(crate) fn set_level(
    node: &Arc<Node>,
    ctx: &CallCtx,
    params: &Map<String, Value>,
) -> Result<Value, RpcError> {
    let SetLevel { level } = parse("logging/setLevel", params)?;
    let sid = ctx.mcp_session.as_deref().ok_or_else(|| {
        RpcError::invalid(
            "logging/setLevel needs a protocol session (initialize first; messages go to its GET /mcp stream)",
        )
    })?;
    node.mcp.features.logging.set(sid, level, Instant::now());
    tracing::debug!(source = "mcp", session = %sid, level = level.as_str(), "logging level set");
    Ok(json!({}))
}

/// After a tool call of `ctx`'s protocol session: one `notifications/message` about it, when
/// the session asked for messages at that level and its bucket has room.
pub(crate) fn tool_called(
    node: &Node,
    ctx: &CallCtx,
    tool: &str,
    action: &str,
    ms: u64,
    error: Option<&str>,
) {
    let Some(sid) = ctx.mcp_session.as_deref() else {
        return;
    };
    let level = if error.is_some() {
        Level::Error
    } else {
        Level::Info
    };
    let Some(dropped) = node.mcp.features.logging.admit(sid, level, Instant::now()) else {
        return;
    };
    let mut data = json!({"tool": tool, "ms": ms, "ok": error.is_none()});
    if !action.is_empty() {
        data["action"] = json!(action);
    }
    if let Some(code) = error {
        data["error"] = json!(code);
    }
    if dropped > 0 {
        data["dropped_before"] = json!(dropped);
    }
    node.mcp.sessions.push_to_session(
        sid,
        &json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": level.as_str(), "logger": "tuic", "data": data}}),
    );
}

/// The MCP level of a log record's level.
fn level_of(record_level: &str) -> Level {
    match record_level {
        "error" => Level::Error,
        "warn" => Level::Warning,
        "info" => Level::Info,
        _ => Level::Debug,
    }
}

/// Forwards the node's log lines tagged with a protocol session (emitted while serving its
/// calls) to that session as `notifications/message`, under its level and bucket. A lag of
/// the tagged channel loses lines, never blocks the logger.
pub(crate) fn spawn_forwarder(node: &Arc<Node>) {
    use tokio::sync::broadcast::error::RecvError;
    let n = node.clone();
    let mut rx = node.logs.tagged();
    node.tasks.spawn(async move {
        loop {
            let r = tokio::select! {
                _ = n.shutdown.cancelled() => break,
                r = rx.recv() => r,
            };
            let rec = match r {
                Ok(rec) => rec,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => break,
            };
            let Some(sid) = rec.mcp_session.as_deref() else {
                continue;
            };
            let level = level_of(rec.level);
            let Some(dropped) = n.mcp.features.logging.admit(sid, level, Instant::now()) else {
                continue;
            };
            let mut data = serde_json::Map::new();
            data.insert("message".into(), json!(rec.message));
            data.insert("source".into(), json!(rec.source));
            data.insert("timestamp_ms".into(), json!(rec.timestamp_ms));
            for (k, v) in &rec.fields {
                data.entry(k.clone()).or_insert_with(|| v.clone());
            }
            if dropped > 0 {
                data.insert("dropped_before".into(), json!(dropped));
            }
            n.mcp.sessions.push_to_session(
                sid,
                &json!({"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": level.as_str(), "logger": rec.source, "data": data}}),
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_filter_and_the_bucket_bounds_the_rate() {
        let l = Levels::default();
        let t0 = Instant::now();
        assert_eq!(
            l.admit("s", Level::Error, t0),
            None,
            "no level set: nothing"
        );
        l.set("s", Level::Warning, t0);
        assert_eq!(l.admit("s", Level::Info, t0), None, "below the level");
        let sent = (0..100)
            .filter(|_| l.admit("s", Level::Error, t0).is_some())
            .count();
        assert_eq!(sent, BURST as usize, "a burst is bounded");
        // A second later the bucket holds PER_SEC again; the next message says what was dropped.
        let t1 = t0 + std::time::Duration::from_secs(1);
        assert_eq!(l.admit("s", Level::Error, t1), Some(100 - BURST as u64));
        assert!(serde_json::from_value::<Level>(json!("verbose")).is_err());
    }
}
