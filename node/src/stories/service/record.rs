//! The story records: a story, its lifecycle, reviews and findings, and its log events.

use super::*;

/// Default page size of `list` and `events`.
pub const DEFAULT_LIMIT: usize = 50;
/// Largest page.
pub const MAX_LIMIT: usize = 500;
/// Longest title, in characters.
pub const MAX_TITLE: usize = 200;
/// Longest description, in characters.
pub const MAX_DESCRIPTION: usize = 20_000;
/// Most acceptance criteria a story carries.
pub const MAX_CRITERIA: usize = 50;

/// A story's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Written, not yet approved.
    Backlog,
    /// Approved by an independent reviewer; may be started.
    Ready,
    /// Claimed and being worked on.
    InProgress,
    /// Work reported done, awaiting an independent approval.
    Review,
    /// Approved after review.
    Done,
    /// Abandoned on purpose.
    WontFix,
    /// Stopped.
    Cancelled,
}

impl Status {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Backlog => "backlog",
            Self::Ready => "ready",
            Self::InProgress => "in_progress",
            Self::Review => "review",
            Self::Done => "done",
            Self::WontFix => "wont_fix",
            Self::Cancelled => "cancelled",
        }
    }

    pub(super) fn abandoned(self) -> bool {
        matches!(self, Self::WontFix | Self::Cancelled)
    }
}

/// Where a story came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoryOrigin {
    /// `manual` or `plan_step`.
    pub kind: String,
    /// The run that proposed it (`plan_step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The coordinator's proposal key (`plan_step`, from `workflow_story_create`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal_key: Option<String>,
}

/// One criterion-indexed finding of a review.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    /// Index into `acceptance_criteria`.
    pub criterion: usize,
    /// Whether the criterion holds.
    pub ok: bool,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A durable review.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Review {
    /// Who reviewed (provenance).
    pub by: Actor,
    /// `approve` or `changes_requested`.
    pub decision: Decision,
    /// The revision reviewed.
    pub revision: u64,
    /// Criterion-indexed findings.
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// When.
    pub at_ms: u64,
}

/// A review's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The criteria hold.
    Approve,
    /// Something is missing.
    ChangesRequested,
}

/// One story record (its current revision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Story {
    /// `st-<n>`.
    pub id: String,
    /// The project (canonical repository root).
    pub project: String,
    /// Bumped by every change; what `expected_revision` is checked against.
    pub revision: u64,
    /// Title.
    pub title: String,
    /// Description (Markdown).
    #[serde(default)]
    pub description: String,
    /// Acceptance criteria, indexed by review findings.
    #[serde(default)]
    pub acceptance_criteria: Vec<String>,
    /// Lifecycle state.
    pub status: Status,
    /// Prerequisite story ids (direct).
    #[serde(default)]
    pub dependencies: Vec<String>,
    /// The plan source it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_source: Option<String>,
    /// Where it came from.
    pub origin: StoryOrigin,
    /// Who created it.
    pub created_by: Actor,
    /// The agent session that claimed it (moved it to in_progress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<String>,
    /// Reviews, oldest first.
    #[serde(default)]
    pub reviews: Vec<Review>,
    /// The standing approval: who and at which revision (cleared by a content update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<Actor>,
    /// Created, wall-clock ms.
    pub created_at_ms: u64,
    /// Last change, wall-clock ms.
    pub updated_at_ms: u64,
}

impl Story {
    pub(super) fn number(&self) -> u64 {
        story_number(&self.id).unwrap_or(0)
    }
}

/// One entry of a project's story event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoryEvent {
    /// Gapless per project from 1; the page cursor.
    pub seq: u64,
    /// When.
    pub at_ms: u64,
    /// `created`, `updated`, `transitioned`, `reviewed`, `dependency_added`, ...
    pub kind: String,
    /// The story concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub story_id: Option<String>,
    /// Its revision after the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// Who.
    pub actor: Actor,
    /// The change's payload.
    #[serde(default)]
    pub detail: Value,
}

/// `story_number("st-12") == Some(12)`.
pub fn story_number(id: &str) -> Option<u64> {
    id.strip_prefix("st-")?.parse().ok()
}
