//! The native tool family, one file per tool. The names are public contract (users' ego rule
//! files match them); actions may be added or renamed under the deprecation rules.

mod agent;
mod automations;
mod config;
mod debug;
mod plugin_dev_guide;
mod progress;
mod remote;
mod repo;
mod repo_git;
pub(crate) mod session;
mod story;
pub mod task;
mod ui;
mod voice;
mod workflow;

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::mcp::registry::{AsyncHandler, CallCtx, Handler, RenderedHandler, ToolDef, ToolError};
use crate::state::Node;

/// The future an [`AsyncHandler`] returns.
pub(super) type ToolFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, ToolError>> + Send>>;

/// Runs a synchronous handler that commits or spawns on the blocking pool, as an async action
/// (the tools without an `action` field that `blocking` cannot name); a panic is a tool error
/// naming the tool.
fn on_blocking_pool(
    tool: &'static str,
    handler: Handler,
    node: Arc<Node>,
    ctx: CallCtx,
    args: Map<String, Value>,
) -> ToolFuture {
    Box::pin(async move {
        tokio::task::spawn_blocking(move || handler(&node, &ctx, &args))
            .await
            .map_err(|_| ToolError::new("internal", format!("{tool} failed unexpectedly")))?
    })
}

/// Actions that run as futures on the async workers (they sleep on events, not on a thread):
/// `(tool, action, handler)`. Checked by the registry before the blocking/inline split.
pub static ASYNC_ACTIONS: &[(&str, &str, AsyncHandler)] = &[
    ("agent", "wait", agent::wait_async),
    ("progress", "", progress::record_async),
    ("story", "", story::call_async),
    ("workflow_report", "", workflow::report_async),
    ("workflow_launch", "", workflow::launch_async),
    ("workflow_story_create", "", workflow::story_create_async),
];

/// Actions whose answer is rendered JSON text (hot listings serialized from typed rows):
/// `(tool, action, handler)`. Checked by the registry first.
pub static RENDERED_ACTIONS: &[(&str, &str, RenderedHandler)] =
    &[("session", "list", session::list_rendered)];

/// Every native tool, in catalogue order.
pub static NATIVE: &[&ToolDef] = &[
    &session::TOOL,
    &agent::TOOL,
    &task::TOOL,
    &remote::TOOL,
    &repo::TOOL,
    &story::TOOL,
    &automations::TOOL,
    &workflow::RUN_TOOL,
    &workflow::REPORT_TOOL,
    &workflow::LAUNCH_TOOL,
    &workflow::STORY_CREATE_TOOL,
    &progress::TOOL,
    &ui::TOOL,
    &plugin_dev_guide::TOOL,
    &voice::TOOL,
    &config::TOOL,
    &debug::TOOL,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_names_summaries_and_actions_are_consistent() {
        let names: Vec<_> = NATIVE.iter().map(|t| t.name).collect();
        assert_eq!(
            names,
            [
                "session",
                "agent",
                "task",
                "remote",
                "repo",
                "story",
                "automations",
                "workflow_run",
                "workflow_report",
                "workflow_launch",
                "workflow_story_create",
                "progress",
                "ui",
                "plugin_dev_guide",
                "voice",
                "config",
                "debug"
            ]
        );
        for t in NATIVE {
            assert!(
                t.summary.chars().count() <= 70,
                "{} summary too long",
                t.name
            );
            let schema = (t.schema)();
            assert_eq!(schema["type"], "object", "{}", t.name);
            if !t.actions.is_empty() {
                let en: Vec<&str> = schema["properties"]["action"]["enum"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap())
                    .collect();
                assert_eq!(en, t.actions, "{} schema enum", t.name);
                // Every action is documented in the description (debug points at help).
                if t.name != "debug" {
                    for a in t.actions {
                        assert!(
                            t.description.contains(a),
                            "{} does not document {a}",
                            t.name
                        );
                    }
                }
            }
            for b in t.blocking {
                assert!(t.actions.contains(b), "{} blocking {b}", t.name);
            }
        }
    }
}
