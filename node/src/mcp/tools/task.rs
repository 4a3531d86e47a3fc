//! `task`: handles for long-running orchestration past the 300 s wait ceiling, and the
//! in-memory task table behind them (24 h retention, reaped with the protocol sessions).
//!
//! Tasks are created by `agent action=spawn` (the mail issue); this file owns their states,
//! ownership and retention. Terminal states are immutable, so a cancel that lands first is
//! never overwritten by a later exit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::args;
use crate::mcp::registry::{CallCtx, ToolDef, ToolError, action, schema};
use crate::state::Node;

const ACTIONS: &[&str] = &["get", "cancel"];

/// How often a client should poll, returned with every task.
pub(crate) const POLL_INTERVAL_MS: u64 = 1000;

/// The MCP 2026-07-28 Tasks vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// The agent is running.
    Working,
    /// Exit code 0.
    Completed,
    /// Non-zero exit.
    Failed,
    /// Cancelled by its owner (the agent keeps running).
    Cancelled,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone)]
struct Task {
    /// Identities allowed to read or cancel it: the spawner's pending id and its TUIC id.
    owners: Vec<String>,
    status: Status,
    status_message: Option<String>,
    result: Option<Value>,
    error_detail: Option<String>,
    created: Instant,
}

/// The task table.
#[derive(Debug, Default)]
pub struct TaskTable {
    tasks: Mutex<HashMap<String, Task>>,
}

impl TaskTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Task>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates a working task owned by `owners`; returns its id.
    pub fn create(&self, owners: Vec<String>, now: Instant) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        self.lock().insert(
            id.clone(),
            Task {
                owners,
                status: Status::Working,
                status_message: None,
                result: None,
                error_detail: None,
                created: now,
            },
        );
        id
    }

    /// Records a spawned session's exit: completed on 0, failed otherwise. No-op once terminal.
    pub fn finish(&self, id: &str, session_id: &str, exit_code: Option<i32>) {
        if let Some(t) = self.lock().get_mut(id)
            && t.status == Status::Working
        {
            if exit_code == Some(0) {
                t.status = Status::Completed;
                t.result = Some(json!({"session_id": session_id, "exit_code": 0}));
            } else {
                t.status = Status::Failed;
                t.error_detail = Some(match exit_code {
                    Some(c) => format!("agent exited with code {c}"),
                    None => "agent ended without an exit code".into(),
                });
            }
        }
    }

    fn owned(&self, id: &str, ctx: &CallCtx) -> Result<Task, ToolError> {
        let g = self.lock();
        let t = g.get(id).filter(|t| {
            [ctx.tuic_session.as_ref(), ctx.mcp_session.as_ref()]
                .into_iter()
                .flatten()
                .any(|c| t.owners.contains(c))
        });
        t.cloned().ok_or_else(|| {
            // Unknown and foreign look the same: a task id is a capability.
            ToolError::new("unknown_task", format!("no task {id} owned by this caller"))
        })
    }

    /// Cancels; a finished task reports the state that stands with `cancelled: false`.
    fn cancel(&self, id: &str) -> (bool, Status) {
        let mut g = self.lock();
        match g.get_mut(id) {
            Some(t) if t.status == Status::Working => {
                t.status = Status::Cancelled;
                (true, t.status)
            }
            Some(t) => (false, t.status),
            None => (false, Status::Cancelled),
        }
    }

    /// Drops tasks older than `retention`. Returns how many went.
    pub fn reap(&self, now: Instant, retention: Duration) -> usize {
        let mut g = self.lock();
        let before = g.len();
        g.retain(|_, t| now.duration_since(t.created) < retention);
        before - g.len()
    }

    /// Number of retained tasks.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none are retained.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn view(id: &str, t: &Task) -> Value {
    let mut m = Map::new();
    m.insert("task_id".into(), json!(id));
    m.insert("status".into(), json!(t.status.as_str()));
    if let Some(s) = &t.status_message {
        m.insert("status_message".into(), json!(s));
    }
    if let Some(r) = &t.result {
        m.insert("result".into(), r.clone());
    }
    if let Some(e) = &t.error_detail {
        m.insert("error_detail".into(), json!(e));
    }
    m.insert("poll_interval_ms".into(), json!(POLL_INTERVAL_MS));
    Value::Object(m)
}

pub(super) static TOOL: ToolDef = ToolDef {
    name: "task",
    summary: "Poll or cancel a spawned agent's task handle",
    description: "Task handles returned by agent action=spawn; poll instead of holding a wait open.\n\
- get (task_id): {task_id, status: working|completed|failed|cancelled, status_message?, result?, error_detail?, poll_interval_ms}.\n\
- cancel (task_id): marks the task cancelled; the agent keeps running (session action=kill ends it). Cancelling a finished task reports cancelled:false. Local clients only.\n\
Only the agent that spawned a task can see it. Tasks are kept in memory for 24 h.",
    actions: ACTIONS,
    schema: || schema(ACTIONS, json!({"task_id": {"type": "string"}})),
    handler,
    exec: &[],
    passthrough: false,
};

/// The typed arguments of `task`'s actions (`crate::args`): both name one task.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Call {
    Get(TaskId),
    Cancel(TaskId),
}

#[derive(Debug, Deserialize)]
struct TaskId {
    #[serde(default, deserialize_with = "args::string")]
    task_id: Option<String>,
}

impl TaskId {
    fn required(self) -> Result<String, ToolError> {
        self.task_id
            .ok_or_else(|| ToolError::invalid("task: task_id is required"))
    }
}

fn handler(node: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let table = &node.mcp.tasks;
    match args::action(action("task", ACTIONS, args)?, args)? {
        Call::Get(t) => {
            let id = t.required()?;
            Ok(view(&id, &table.owned(&id, ctx)?))
        }
        Call::Cancel(t) => {
            let id = t.required()?;
            table.owned(&id, ctx)?;
            let (cancelled, status) = table.cancel(&id);
            Ok(json!({"task_id": id, "cancelled": cancelled, "status": status.as_str()}))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_are_immutable_and_ownership_is_checked() {
        let t = TaskTable::default();
        let now = Instant::now();
        let id = t.create(vec!["pending-1".into(), "T".into()], now);
        let mine = CallCtx {
            tuic_session: Some("T".into()),
            ..Default::default()
        };
        let other = CallCtx {
            tuic_session: Some("U".into()),
            ..Default::default()
        };
        assert!(t.owned(&id, &mine).is_ok());
        assert_eq!(t.owned(&id, &other).unwrap_err().code, "unknown_task");
        assert_eq!(t.cancel(&id), (true, Status::Cancelled));
        t.finish(&id, "s", Some(0));
        assert_eq!(t.owned(&id, &mine).unwrap().status, Status::Cancelled);
        let id2 = t.create(vec!["T".into()], now);
        t.finish(&id2, "s", Some(3));
        assert_eq!(t.cancel(&id2), (false, Status::Failed));
        let v = view(&id2, &t.owned(&id2, &mine).unwrap());
        assert_eq!(v["error_detail"], "agent exited with code 3");
        assert!(v.get("result").is_none());
        assert_eq!(
            t.reap(
                now + Duration::from_secs(86_400),
                Duration::from_secs(86_400)
            ),
            2
        );
    }
}
