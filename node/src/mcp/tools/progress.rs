//! `progress`: an agent reports a finished step or a blocker to the project's journal
//! (`crate::progress`). The input is exactly `{type: done|blocked, text, step?}`; the project
//! and the agent come from the caller. Listed only while `progress_tracking` is on (the
//! registry's filter); an agent whose own flag is off gets `progress_tracking_disabled`.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::mcp::registry::{CallCtx, Exec, ToolDef, ToolError, ToolFuture, on_blocking_pool};
use crate::progress::{MAX_STEP_CHARS, MAX_TEXT_CHARS, Report, ReportError, Reporter};
use crate::state::Node;

pub(super) static TOOL: ToolDef = ToolDef {
    name: "progress",
    summary: "Report a finished step or a blocker to the project's progress journal",
    description: "Report progress on every phase change: type=done when a step is finished, type=blocked when you cannot go on without someone (say what you need). text: one short paragraph (at most 500 characters); step: the plan step it concerns (optional). The project and the reporting agent come from your terminal (or agent register path=); intent is observed by TUIC from your `intent:` line, never reported. Read back with repo action=progress_list.",
    actions: &[],
    schema: || {
        json!({"type": "object", "properties": {
            "type": {"type": "string", "enum": ["done", "blocked"]},
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS},
            "step": {"type": "string", "maxLength": MAX_STEP_CHARS}
        }, "required": ["type", "text"], "additionalProperties": false})
    },
    handler,
    exec: &[("", Exec::Async(record_async))],
    passthrough: false,
};

/// A report's typed error as a tool error.
pub(crate) fn tool_error(e: ReportError) -> ToolError {
    let mut t = ToolError::new(e.code(), e.to_string());
    if let ReportError::TooLong { field, len, max } = &e {
        t = t
            .with("field", json!(field))
            .with("length", json!(len))
            .with("max", json!(max));
    }
    t
}

/// The registry runs this one as a future (`Exec::Async` in its `TOOL`): the arguments are checked
/// inline, the journal commit goes to the blocking pool, never onto an async worker.
pub(super) fn record_async(node: Arc<Node>, ctx: CallCtx, args: Map<String, Value>) -> ToolFuture {
    Box::pin(async move {
        let report = Report::parse(&args).map_err(tool_error)?;
        let who = Reporter {
            tuic_session: ctx.tuic_session.clone(),
        };
        let entry = on_blocking_pool("progress", move || {
            node.progress.report(&who, report).map_err(tool_error)
        })
        .await?;
        Ok(json!({"ok": true, "entry": entry}))
    })
}

fn handler(node: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    // Reached only if the registry ran the handler inline; same path, same answer.
    let report = Report::parse(args).map_err(tool_error)?;
    let who = Reporter {
        tuic_session: ctx.tuic_session.clone(),
    };
    let entry = node.progress.report(&who, report).map_err(tool_error)?;
    Ok(json!({"ok": true, "entry": entry}))
}
