//! The native tool family, one file per tool. The names are public contract (users' ego rule
//! files match them); actions may be added or renamed under the deprecation rules.

mod agent;
mod automations;
mod config;
mod debug;
mod peer_errors;
mod plugin_dev_guide;
mod progress;
mod remote;
mod repo;
mod repo_diff;
mod repo_git;
mod secret;
pub(crate) mod session;
mod story;
pub(crate) mod task;
mod ui;
mod ui_tab;
mod voice;
mod workflow;

use crate::mcp::registry::{AsyncHandler, RenderedHandler, ToolDef};

/// Actions that run as futures on the async workers (they sleep on events, not on a thread;
/// their blocking steps go through `registry::on_blocking_pool`): `(tool, action, handler)`,
/// `"*"` for every action of the tool. Checked by the registry before the blocking/inline
/// split. `session` and `repo` are async as a whole: a hub's router may first wait for
/// another host (`ext::HostRouter`), then a local call takes the usual split
/// (`registry::run_here`).
pub(crate) static ASYNC_ACTIONS: &[(&str, &str, AsyncHandler)] = &[
    ("session", "*", session::serve_async),
    ("repo", "*", repo::serve_async),
    ("agent", "wait", agent::wait_async),
    ("agent", "send", agent::send_async),
    ("progress", "", progress::record_async),
];

/// Actions whose answer is rendered JSON text (hot listings serialized from typed rows):
/// `(tool, action, handler)`. Checked by the registry first.
pub(crate) static RENDERED_ACTIONS: &[(&str, &str, RenderedHandler)] =
    &[("session", "list", session::list_rendered)];

/// Every native tool, in catalogue order.
pub(crate) static NATIVE: &[&ToolDef] = &[
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
    &secret::TOOL,
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
                "secret",
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
                // `""` is a tool without an action field, blocking as a whole.
                assert!(
                    t.actions.contains(b) || (b.is_empty() && t.actions.is_empty()),
                    "{} blocking {b}",
                    t.name
                );
            }
        }
    }
}
