//! The `story` tool's actions and who performs them.

use super::*;

/// The `story` tool's input (`{input: StoryAction}`), also the body of `POST /stories/action`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum StoryAction {
    /// A page of stories by number.
    List {
        #[serde(default)]
        status: Option<Status>,
        #[serde(default)]
        plan_source: Option<String>,
        #[serde(default)]
        limit: Option<usize>,
        #[serde(default)]
        cursor: Option<Value>,
    },
    /// One story.
    Get { id: String },
    /// A new story in `backlog`.
    Create {
        title: String,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        acceptance_criteria: Option<Vec<String>>,
        #[serde(default)]
        dependencies: Option<Vec<String>>,
        #[serde(default)]
        plan_source: Option<String>,
        #[serde(default)]
        request_id: Option<String>,
    },
    /// Content change; clears a standing approval.
    Update {
        id: String,
        expected_revision: u64,
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        acceptance_criteria: Option<Vec<String>>,
        #[serde(default)]
        request_id: Option<String>,
    },
    /// A status change.
    Transition {
        id: String,
        expected_revision: u64,
        to: Status,
        #[serde(default)]
        reason: Option<String>,
        #[serde(default)]
        request_id: Option<String>,
    },
    /// Adds a direct prerequisite (refused when it would close a cycle).
    AddDependency {
        id: String,
        expected_revision: u64,
        depends_on: String,
        #[serde(default)]
        request_id: Option<String>,
    },
    /// Removes a direct prerequisite (refused for bound agent sessions).
    RemoveDependency {
        id: String,
        expected_revision: u64,
        depends_on: String,
        #[serde(default)]
        request_id: Option<String>,
    },
    /// A durable review; `approve` by an independent identity advances backlog → ready and
    /// review → done, `changes_requested` sends review back to in_progress.
    Review {
        id: String,
        expected_revision: u64,
        decision: Decision,
        #[serde(default)]
        findings: Option<Vec<Finding>>,
        #[serde(default)]
        note: Option<String>,
        #[serde(default)]
        request_id: Option<String>,
    },
    /// `review` with `decision: approve`.
    Approve {
        id: String,
        expected_revision: u64,
        #[serde(default)]
        findings: Option<Vec<Finding>>,
        #[serde(default)]
        note: Option<String>,
        #[serde(default)]
        request_id: Option<String>,
    },
    /// Markdown plans under `plans/` and `.claude/plans/`, plus the recorded sources.
    ListPlanSources {},
    /// Records a plan document as a source (reusing an existing record for it).
    AddPlanSource {
        path: String,
        #[serde(default)]
        request_id: Option<String>,
    },
    /// Forgets a plan source record.
    RemovePlanSource {
        id: String,
        #[serde(default)]
        request_id: Option<String>,
    },
    /// Stories grouped with derived abandonment/cancellation summaries (never stored).
    PlanView {
        #[serde(default)]
        plan_source: Option<String>,
    },
    /// A gapless page of the project's story event log after `cursor`.
    Events {
        #[serde(default)]
        cursor: Option<Value>,
        #[serde(default)]
        limit: Option<usize>,
    },
}

impl StoryAction {
    /// Parses an action object, with messages that name the fix.
    pub fn from_value(v: &Value) -> Result<Self, StoryError> {
        if !v.is_object() {
            return Err(StoryError::Invalid(
                "input must be an object {action: ..., ...}".into(),
            ));
        }
        if v.get("action").and_then(Value::as_str).is_none() {
            return Err(StoryError::Invalid(format!(
                "input.action is required: one of {}",
                ACTION_NAMES.join(", ")
            )));
        }
        serde_json::from_value(v.clone()).map_err(|e| StoryError::Invalid(format!("input: {e}")))
    }

    pub(super) fn request_id(&self) -> Option<&str> {
        match self {
            Self::Create { request_id, .. }
            | Self::Update { request_id, .. }
            | Self::Transition { request_id, .. }
            | Self::AddDependency { request_id, .. }
            | Self::RemoveDependency { request_id, .. }
            | Self::Review { request_id, .. }
            | Self::Approve { request_id, .. }
            | Self::AddPlanSource { request_id, .. }
            | Self::RemovePlanSource { request_id, .. } => request_id.as_deref(),
            _ => None,
        }
    }
}

/// Every action name, for messages and schemas.
pub const ACTION_NAMES: &[&str] = &[
    "list",
    "get",
    "create",
    "update",
    "transition",
    "add_dependency",
    "remove_dependency",
    "review",
    "approve",
    "list_plan_sources",
    "add_plan_source",
    "remove_plan_source",
    "plan_view",
    "events",
];

/// Who acts where.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// Canonical project root.
    pub project: String,
    /// The host-selected actor.
    pub actor: Actor,
    /// Wall clock, ms.
    pub now_ms: u64,
}
