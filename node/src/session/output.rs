//! The output serializer behind `GET /sessions/{id}/output` and MCP `session action=output`
//! (`format=mcp|mcp_raw` use it unchanged): reads the session's retained buffers, redacts with
//! the whole retained context, pages with `pager`, and shapes the JSON.
//!
//! Formats: `raw`/`mcp_raw` page the raw ring by source bytes; `text`/`mcp` page the clean log
//! by line (`from_line`, `since_cursor`) or, without a position, return the tail of the
//! terminal grid; `log` returns clean-log lines plus the visible screen.
//!
//! Redaction follows one rule (docs/http-api.md, "Redaction"): what agents read is redacted
//! — the MCP serializer formats `mcp`/`mcp_raw`, which MCP `session action=output` and the
//! hub's remote output use — while the views of a person's own terminal show it as it is: the
//! `raw`, `text` and `log` pages here, like the session stream, `raw-ring` and the grid.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Session;
use super::pager::{self, Window};
use super::redact;

/// Default page size for raw formats, in bytes.
pub const DEFAULT_RAW_LIMIT: u64 = 64 * 1024;
/// Default page size for line formats, in lines.
pub const DEFAULT_LINE_LIMIT: u64 = 1000;

/// Query of an output read.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct OutputQuery {
    /// `raw | text | log | mcp | mcp_raw` (default `text`).
    pub format: Option<String>,
    /// Page size: bytes for raw formats, lines otherwise.
    pub limit: Option<u64>,
    /// Same as `from_line` / `from_byte`, for the format in use.
    pub offset: Option<u64>,
    /// First clean-log line of a text page.
    pub from_line: Option<u64>,
    /// First source byte of a raw page.
    pub from_byte: Option<u64>,
    /// Delta read: lines (text) or source bytes (raw) after this position.
    pub since_cursor: Option<u64>,
}

/// An invalid output query.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadQuery(pub String);

/// Renders one output response.
pub fn render(s: &Session, q: &OutputQuery) -> Result<Value, BadQuery> {
    let format = q.format.as_deref().unwrap_or("text");
    let mut v = match format {
        "raw" => raw(s, q, format, false),
        "mcp_raw" => raw(s, q, format, true),
        "text" => text(s, q, format, false),
        "mcp" => text(s, q, format, true),
        "log" => log(s, q),
        other => {
            return Err(BadQuery(format!(
                "unknown format {other:?} (expected raw, text, log, mcp or mcp_raw)"
            )));
        }
    };
    if let (Some(e), Some(obj)) = (s.exit(), v.as_object_mut()) {
        if let Some(c) = e.code {
            obj.insert("exit_code".into(), json!(c));
        }
        obj.insert("exited".into(), json!(true));
    }
    Ok(v)
}

fn paging(obj: &mut Map<String, Value>, w: &Window, s: &Session, format: &str, key: &str) {
    obj.insert("start_offset".into(), json!(w.start_offset));
    obj.insert("oldest_offset".into(), json!(w.oldest_offset));
    obj.insert("has_more".into(), json!(w.has_more));
    obj.insert("next_cursor".into(), json!(w.next_cursor));
    obj.insert("truncated".into(), json!(w.truncated()));
    if w.missed_count > 0 {
        obj.insert("missed_count".into(), json!(w.missed_count));
    }
    if let Some(from) = w.continue_from() {
        let fmt = if format.starts_with("mcp") {
            format.trim_start_matches("mcp_")
        } else {
            format
        };
        let fmt = if fmt == "mcp" { "text" } else { fmt };
        obj.insert(
            "continuation".into(),
            json!({
                "tool": "session",
                "action": "output",
                "session_id": s.id,
                "format": fmt,
                key: from,
            }),
        );
    }
}

fn raw(s: &Session, q: &OutputQuery, format: &str, agent: bool) -> Value {
    let (mut ring, total) = {
        let st = s.stream();
        (st.ring(), st.total())
    };
    if agent {
        // Secrets are found in the whole retained ring before any slicing.
        redact::mask_all(&mut ring);
    }
    let from = q.from_byte.or(q.since_cursor).or(q.offset);
    let limit = q.limit.unwrap_or(DEFAULT_RAW_LIMIT);
    let (w, data) = pager::raw_page(&ring, total, from, limit);
    let mut obj = Map::new();
    obj.insert("data_length".into(), json!(data.len()));
    obj.insert("data".into(), json!(data));
    obj.insert("total_written".into(), json!(total));
    obj.insert("cursor".into(), json!(w.end));
    paging(&mut obj, &w, s, format, "from_byte");
    Value::Object(obj)
}

/// Lines of `ctx` masked as one document (secrets spanning lines are found), split back.
fn mask_lines(lines: Vec<String>, with: u8) -> Vec<String> {
    let mut doc = lines.join("\n").into_bytes();
    let spans = redact::secret_spans(&doc);
    if spans.is_empty() {
        return lines;
    }
    redact::mask_with(&mut doc, &spans, with);
    String::from_utf8_lossy(&doc)
        .split('\n')
        .map(str::to_owned)
        .collect()
}

fn text(s: &Session, q: &OutputQuery, format: &str, agent: bool) -> Value {
    let from = q.from_line.or(q.offset);
    let limit = q.limit.unwrap_or(DEFAULT_LINE_LIMIT);
    let mut obj = Map::new();
    if from.is_none() && q.since_cursor.is_none() {
        // Tail snapshot: the end of the terminal grid, `[REDACTED]` style.
        let (rows, log_total, log_oldest) = {
            let scr = s.screen();
            let n = scr.grid.scroll_info().total_lines;
            (scr.grid.lines(0, n), scr.log.total(), scr.log.oldest())
        };
        let mut rows = if agent {
            mask_lines(rows, redact::SENTINEL)
        } else {
            rows
        };
        while rows.last().is_some_and(|r| r.is_empty()) {
            rows.pop();
        }
        let start = rows.len().saturating_sub(limit as usize);
        let tail = rows[start..].join("\n");
        let data = if agent {
            redact::sentinel_runs_to_redacted(&tail)
        } else {
            tail
        };
        let w = Window {
            start_offset: log_total,
            end: log_total,
            oldest_offset: log_oldest,
            total: log_total,
            has_more: false,
            next_cursor: None,
            missed_count: 0,
            tail_omitted: start > 0,
        };
        obj.insert("data_length".into(), json!(data.len()));
        obj.insert("data".into(), json!(data));
        obj.insert("cursor".into(), json!(log_total));
        obj.insert("total_written".into(), json!(log_total));
        paging(&mut obj, &w, s, format, "from_line");
        return Value::Object(obj);
    }
    let (w, rows) = log_page(s, from.or(q.since_cursor), limit, agent);
    let data = rows.join("\n");
    obj.insert("data_length".into(), json!(data.len()));
    obj.insert("data".into(), json!(data));
    obj.insert("cursor".into(), json!(w.end));
    obj.insert("total_written".into(), json!(w.total));
    paging(&mut obj, &w, s, format, "from_line");
    Value::Object(obj)
}

/// A page of clean-log lines; for agents masked with the retained log plus screen as context.
fn log_page(s: &Session, from: Option<u64>, limit: u64, agent: bool) -> (Window, Vec<String>) {
    let (mut lines, total, screen) = {
        let scr = s.screen();
        let lines: Vec<String> = scr.log.lines().iter().cloned().collect();
        (lines, scr.log.total(), scr.grid.screen())
    };
    if !agent {
        return pager::row_page(lines.iter().map(String::as_str), total, from, limit);
    }
    let n_log = lines.len();
    lines.extend(screen);
    let mut masked = mask_lines(lines, b'*');
    masked.truncate(n_log);
    pager::row_page(masked.iter().map(String::as_str), total, from, limit)
}

fn log(s: &Session, q: &OutputQuery) -> Value {
    let from = q.from_line.or(q.since_cursor).or(q.offset);
    let limit = q.limit.unwrap_or(DEFAULT_LINE_LIMIT);
    let (w, lines) = log_page(s, from, limit, false);
    let screen = s.screen().grid.screen();
    let mut obj = Map::new();
    obj.insert("lines".into(), json!(lines));
    obj.insert("total_lines".into(), json!(w.total));
    obj.insert("screen".into(), json!(screen));
    obj.insert("cursor".into(), json!(w.end));
    paging(&mut obj, &w, s, "log", "from_line");
    Value::Object(obj)
}
