//! A bounded in-memory ring of recent log records, fed by a `tracing` layer and served at
//! `GET /logs`. It complements, not replaces, the process's stderr log.
//!
//! Records emitted inside a span that carries an `mcp_session` field (the MCP transport opens
//! one around each call of a protocol session) are tagged with it and also offered to
//! [`LogRing::tagged`] listeners, which MCP `logging` turns into `notifications/message` for
//! that session. The offer never waits: a listener that lags loses records, not the logger.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Records kept; older ones are dropped first.
pub const RING_CAPACITY: usize = 2000;
/// Session-tagged records waiting for a slow [`LogRing::tagged`] listener; older ones are lost
/// past it (the listener is told how many).
pub const TAGGED_CAPACITY: usize = 1024;

/// One log record.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// Wall-clock time, unix ms.
    pub timestamp_ms: u64,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub level: &'static str,
    /// The `source` field when the event has one, else its module target.
    pub source: String,
    /// The message.
    pub message: String,
    /// Other fields, rendered.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub fields: serde_json::Map<String, serde_json::Value>,
    /// The MCP protocol session whose call emitted it (the enclosing span's `mcp_session`).
    #[serde(skip)]
    pub mcp_session: Option<String>,
}

/// Shared handle to the ring.
#[derive(Debug, Clone)]
pub struct LogRing {
    inner: Arc<Mutex<VecDeque<Record>>>,
    /// Session-tagged records, for MCP `notifications/message`.
    tagged: tokio::sync::broadcast::Sender<Record>,
}

impl Default for LogRing {
    fn default() -> Self {
        Self {
            inner: Arc::default(),
            tagged: tokio::sync::broadcast::channel(TAGGED_CAPACITY).0,
        }
    }
}

fn level_rank(l: &str) -> u8 {
    match l {
        "error" => 0,
        "warn" => 1,
        "info" => 2,
        "debug" => 3,
        _ => 4,
    }
}

impl LogRing {
    /// Newest-last records matching `source` (exact) and at least as severe as `level`.
    pub fn query(&self, source: Option<&str>, level: Option<&str>, limit: usize) -> Vec<Record> {
        let max_rank = level.map(level_rank).unwrap_or(4);
        let ring = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<Record> = ring
            .iter()
            .rev()
            .filter(|r| source.is_none_or(|s| r.source == s))
            .filter(|r| level_rank(r.level) <= max_rank)
            .take(limit)
            .cloned()
            .collect();
        out.reverse();
        out
    }

    /// Records emitted while serving an MCP protocol session's calls, as they come.
    pub fn tagged(&self) -> tokio::sync::broadcast::Receiver<Record> {
        self.tagged.subscribe()
    }

    fn push(&self, r: Record) {
        if r.mcp_session.is_some() && self.tagged.receiver_count() > 0 {
            let _ = self.tagged.send(r.clone());
        }
        let mut ring = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if ring.len() == RING_CAPACITY {
            ring.pop_front();
        }
        ring.push_back(r);
    }

    /// The `tracing` layer that feeds this ring.
    pub fn layer(&self) -> RingLayer {
        RingLayer { ring: self.clone() }
    }
}

/// `tracing` layer writing into a [`LogRing`].
#[derive(Debug)]
pub struct RingLayer {
    ring: LogRing,
}

#[derive(Default)]
struct Collect {
    message: String,
    source: Option<String>,
    fields: serde_json::Map<String, serde_json::Value>,
}

impl Visit for Collect {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            "source" => self.source = Some(value.to_owned()),
            n => {
                self.fields.insert(n.to_owned(), value.into());
            }
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let s = format!("{value:?}");
        match field.name() {
            "message" => self.message = s,
            "source" => self.source = Some(s.trim_matches('"').to_owned()),
            n => {
                self.fields.insert(n.to_owned(), s.into());
            }
        }
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.fields.insert(field.name().to_owned(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.fields.insert(field.name().to_owned(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.fields.insert(field.name().to_owned(), value.into());
    }
}

/// The `mcp_session` of a span, kept in its extensions.
struct McpSession(String);

/// Reads a span's `mcp_session` field.
#[derive(Default)]
struct SessionField(Option<String>);

impl Visit for SessionField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "mcp_session" {
            self.0 = Some(value.to_owned());
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "mcp_session" {
            self.0 = Some(format!("{value:?}").trim_matches('"').to_owned());
        }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for RingLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().fields().field("mcp_session").is_none() {
            return;
        }
        let mut f = SessionField::default();
        attrs.record(&mut f);
        if let (Some(sid), Some(span)) = (f.0, ctx.span(id)) {
            span.extensions_mut().insert(McpSession(sid));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mcp_session = ctx.event_scope(event).and_then(|scope| {
            scope
                .into_iter()
                .find_map(|span| span.extensions().get::<McpSession>().map(|m| m.0.clone()))
        });
        let mut c = Collect::default();
        event.record(&mut c);
        let level = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warn",
            Level::INFO => "info",
            Level::DEBUG => "debug",
            Level::TRACE => "trace",
        };
        self.ring.push(Record {
            timestamp_ms: now_ms(),
            level,
            source: c
                .source
                .unwrap_or_else(|| event.metadata().target().to_owned()),
            message: c.message,
            fields: c.fields,
            mcp_session,
        });
    }
}

/// Wall-clock unix milliseconds: the node's one wall clock, for times people read and records
/// that outlive the process.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The node's one deadline clock, in unix milliseconds: the wall clock read once (at first
/// use), advanced by monotonic time since. It never steps with the wall clock (NTP, a manual
/// change), so a deadline computed from it is a true duration; it matches [`now_ms`] as long
/// as the wall clock is not stepped, so it stays comparable with wall-clock readings of the
/// same moment (`proto::mail` cursors, a peer link's `now`). Mail hands it to `proto::mail`
/// as `now` (wait deadlines, the reading window, cursors); message timestamps stay on
/// [`now_ms`].
pub fn mono_ms() -> u64 {
    static ORIGIN: std::sync::LazyLock<(std::time::Instant, u64)> =
        std::sync::LazyLock::new(|| (std::time::Instant::now(), now_ms()));
    let (at, wall) = *ORIGIN;
    wall.saturating_add(at.elapsed().as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    /// The deadline clock never goes back and starts on the wall clock.
    #[test]
    fn the_deadline_clock_is_monotonic_and_starts_at_the_wall_clock() {
        let wall = now_ms();
        let first = mono_ms();
        assert!(first.abs_diff(wall) < 60_000, "{first} vs {wall}");
        let mut last = first;
        for _ in 0..10_000 {
            let t = mono_ms();
            assert!(t >= last, "{t} < {last}");
            last = t;
        }
    }

    #[test]
    fn ring_filters_by_source_and_level() {
        let ring = LogRing::default();
        let sub = tracing_subscriber::registry().with(ring.layer());
        tracing::subscriber::with_default(sub, || {
            tracing::info!(source = "mcp_initialize", client = "x", "initialize");
            tracing::warn!("careful");
            tracing::debug!("chatter");
        });
        assert_eq!(ring.query(None, None, 10).len(), 3);
        let only = ring.query(Some("mcp_initialize"), None, 10);
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].fields["client"], "x");
        assert_eq!(ring.query(None, Some("warn"), 10).len(), 1);
        assert_eq!(ring.query(None, None, 1)[0].message, "chatter");
    }

    /// Events inside a span with `mcp_session` (at any depth) are tagged and offered to the
    /// listeners; others are not.
    #[test]
    fn events_in_an_mcp_session_span_are_tagged() {
        let ring = LogRing::default();
        let mut rx = ring.tagged();
        let sub = tracing_subscriber::registry().with(ring.layer());
        tracing::subscriber::with_default(sub, || {
            tracing::info!("outside");
            let call = tracing::info_span!("mcp_call", mcp_session = %"s-1");
            let _g = call.enter();
            let inner = tracing::info_span!("work", step = 1);
            let _i = inner.enter();
            tracing::warn!(source = "agent_spawn", "inside");
        });
        let r = rx.try_recv().unwrap();
        assert_eq!(
            (r.message.as_str(), r.mcp_session.as_deref()),
            ("inside", Some("s-1"))
        );
        assert!(rx.try_recv().is_err(), "the untagged event is not offered");
        assert_eq!(ring.query(None, None, 10).len(), 2);
    }
}
