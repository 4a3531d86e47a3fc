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
mod session_answer;
mod session_list;
mod story;
pub(crate) mod task;
mod ui;
mod ui_tab;
mod voice;
mod workflow;

use crate::mcp::registry::ToolDef;

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
    use crate::mcp::registry::Exec;

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
            for (a, mode) in t.exec {
                // `""` is a tool without an action field as a whole; `"*"` an async front
                // over every action.
                assert!(
                    t.actions.contains(a)
                        || (a.is_empty() && t.actions.is_empty())
                        || (*a == "*" && matches!(mode, Exec::Async(_))),
                    "{} exec {a}",
                    t.name
                );
            }
        }
    }
}
