//! Prompts a person (or an agent) picks to drive agents through tuic: review a worktree, hand
//! a task to an agent on a host, summarise what every agent is doing. Each renders one user
//! message that names the tools and actions to use, filled with the node's current state.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{RpcError, parse};
use crate::state::Node;

/// One prompt argument: name, description, required.
type Arg = (&'static str, &'static str, bool);
/// One prompt: name, title, description, arguments.
type Prompt = (&'static str, &'static str, &'static str, &'static [Arg]);

/// The prompts.
pub(crate) const PROMPTS: &[Prompt] = &[
    (
        "spawn_reviewer",
        "Spawn a reviewer for a worktree",
        "Start a coding agent in a worktree to review its changes and report back by mail",
        &[
            (
                "worktree",
                "Path of the worktree (or repository) to review",
                true,
            ),
            (
                "agent",
                "Agent CLI to run (claude, codex, gemini, ...)",
                false,
            ),
            ("focus", "What the review should look at", false),
        ],
    ),
    (
        "hand_off_task",
        "Hand a task to an agent on a host",
        "Spawn an agent on this node or another host with a task, and follow it",
        &[
            ("task", "What the agent should do", true),
            ("host", "Host to run it on (default: this node)", false),
            ("agent", "Agent CLI to run", false),
            ("cwd", "Directory to start in", false),
        ],
    ),
    (
        "summarise_agents",
        "Summarise what every agent is doing",
        "A status report over every terminal session and agent this node sees",
        &[],
    ),
];

/// `prompts/list`.
pub(crate) fn list() -> Value {
    let prompts: Vec<Value> = PROMPTS
        .iter()
        .map(|(name, title, description, args)| {
            let arguments: Vec<Value> = args
                .iter()
                .map(|(n, d, r)| json!({"name": n, "description": d, "required": r}))
                .collect();
            json!({"name": name, "title": title, "description": description, "arguments": arguments})
        })
        .collect();
    json!({"prompts": prompts})
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GetParams {
    name: String,
    #[serde(default)]
    arguments: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReviewerArgs {
    worktree: String,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    focus: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HandOffArgs {
    task: String,
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

fn args<T: serde::de::DeserializeOwned>(name: &str, a: Map<String, Value>) -> Result<T, RpcError> {
    serde_json::from_value(Value::Object(a))
        .map_err(|e| RpcError::invalid(format!("prompt {name}: {e}")))
}

fn message(text: String) -> Value {
    json!({"role": "user", "content": {"type": "text", "text": text}})
}

/// `prompts/get`.
pub(crate) fn get(node: &Arc<Node>, params: &Map<String, Value>) -> Result<Value, RpcError> {
    let GetParams { name, arguments } = parse("prompts/get", params)?;
    let (description, text) = match name.as_str() {
        "spawn_reviewer" => {
            let a: ReviewerArgs = args(&name, arguments)?;
            let agent = a.agent.as_deref().unwrap_or("claude");
            let focus = a
                .focus
                .map(|f| format!(" Focus on: {f}."))
                .unwrap_or_default();
            (
                "Spawn a reviewer for a worktree",
                format!(
                    "Spawn a {agent} reviewer in {wt} with the tuic `agent` tool (action=spawn, \
                     command={agent}, cwd={wt}, prompt=<the review request>). Tell it to review the changes on that worktree's branch against its base \
                     (correctness, tests, style), not to edit files, and to send its findings to me \
                     with `agent` action=send when done.{focus} Then wait for its mail \
                     (`agent` action=wait) and give me the review.",
                    wt = a.worktree
                ),
            )
        }
        "hand_off_task" => {
            let a: HandOffArgs = args(&name, arguments)?;
            let agent = a.agent.as_deref().unwrap_or("claude");
            let place = match (&a.host, &a.cwd) {
                (Some(h), Some(c)) => format!(" on host {h} in {c}"),
                (Some(h), None) => format!(" on host {h}"),
                (None, Some(c)) => format!(" in {c}"),
                (None, None) => String::new(),
            };
            (
                "Hand a task to an agent",
                format!(
                    "Hand this task to a {agent} agent{place} using the tuic `agent` tool \
                     (action=spawn, command={agent}, prompt=the task{host}): \"{task}\". Ask it to report progress and its result to \
                     me with `agent` action=send. Follow its terminal with `session` action=output \
                     and tell me when it is done or stuck.",
                    task = a.task,
                    host = a
                        .host
                        .as_deref()
                        .map(|h| format!("; for host {h} use the address of its sessions in `session` action=list"))
                        .unwrap_or_default()
                ),
            )
        }
        "summarise_agents" => {
            let _: NoArgs = args(&name, arguments)?;
            let rows: Vec<Value> = node
                .sessions
                .rows()
                .into_iter()
                .map(|r| {
                    json!({"session": if r.alias.is_empty() { r.session_id.clone() } else { r.alias.clone() },
                        "name": r.display_name, "cwd": r.cwd, "agent": r.agent_type,
                        "state": r.state, "agent_state": r.agent_state})
                })
                .collect();
            (
                "Summarise what every agent is doing",
                format!(
                    "Summarise what every agent on this node is doing. These are its terminal \
                     sessions now:\n{}\nFor each one that runs an agent, read its screen \
                     (resource tuic://sessions/<session>/screen, or `session` action=output) and \
                     say in one line what it works on, whether it is busy, idle or waiting for an \
                     answer, and what needs my attention.",
                    serde_json::to_string_pretty(&rows).unwrap_or_default()
                ),
            )
        }
        other => {
            return Err(RpcError::invalid(format!(
                "no prompt {other}; prompts/list names them"
            )));
        }
    };
    Ok(json!({"description": description, "messages": [message(text)]}))
}
