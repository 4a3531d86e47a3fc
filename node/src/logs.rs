//! A bounded in-memory ring of recent log records, fed by a `tracing` layer and served at
//! `GET /logs`. It complements, not replaces, the process's stderr log.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;

/// Records kept; older ones are dropped first.
pub const RING_CAPACITY: usize = 2000;

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
}

/// Shared handle to the ring.
#[derive(Debug, Clone, Default)]
pub struct LogRing {
    inner: Arc<Mutex<VecDeque<Record>>>,
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

    fn push(&self, r: Record) {
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

impl<S: Subscriber> Layer<S> for RingLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
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
}
