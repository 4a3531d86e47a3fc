//! The workflow records: definitions and their steps, runs, attempts, launches, proposals
//! and the run log's events.

use super::*;

/// The report contract version `workflow_report` accepts.
pub const CONTRACT_VERSION: u64 = 1;
/// Most steps a definition has.
pub const MAX_STEPS: usize = 100;
/// Default repairs (failed or lost attempts) a run tolerates.
pub const DEFAULT_MAX_REPAIRS: u32 = 2;
/// Most workers a run's coordinators launch (each is a durable record in the run).
pub const MAX_LAUNCHES: usize = 100;
/// Most stories a run's coordinators propose.
pub const MAX_PROPOSALS: usize = 200;

/// The agent a step's worker runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSpec {
    /// The agent CLI.
    pub command: String,
    /// Its arguments (`{prompt}` substituted where it appears).
    #[serde(default)]
    pub args: Vec<String>,
}

/// What an attempt is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Does the step's work and reports it.
    #[default]
    Worker,
    /// Reviews an artifact: a completed report must carry `review` evidence.
    Reviewer,
    /// While its attempt is active it is the run's coordinator: it launches workers
    /// (`workflow_launch`), proposes stories (`workflow_story_create`) and receives a
    /// `workflow_event` mail after each committed worker report.
    Coordinator,
}

impl Role {
    fn is_default(&self) -> bool {
        *self == Self::Worker
    }
}

/// An agent type a coordinator step may launch, with its pinned prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchDef {
    /// The agent CLI.
    pub agent: WorkerSpec,
    /// Prompt template: the step variables plus `{worktreePath}`, `{agentType}`, `{skills}`.
    pub prompt: String,
    /// `worker` or `reviewer`.
    #[serde(default, skip_serializing_if = "Role::is_default")]
    pub role: Role,
}

/// One step of a definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepDef {
    /// Unique within the definition.
    pub id: String,
    /// The worker.
    pub agent: WorkerSpec,
    /// Prompt template: `{runId}`, `{attemptId}`, `{generation}`, `{stepId}`, `{storyId}`,
    /// `{storyRevision}`, `{storyTitle}`, `{feedback}` are replaced in Rust.
    pub prompt: String,
    /// The step attempt's role (`worker` when omitted).
    #[serde(default, skip_serializing_if = "Role::is_default")]
    pub role: Role,
    /// Coordinator steps only: the agent types `workflow_launch` may start, by `agentType`.
    /// Pinned with the revision, so a coordinator can never launch an unpublished command.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub launches: BTreeMap<String, LaunchDef>,
}

/// A published definition revision (immutable).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    /// Chosen by the publisher (`[a-z0-9_-]`).
    pub definition_id: String,
    /// The project.
    pub project: String,
    /// 1, 2, ... per definition id.
    pub revision: u64,
    /// Display name.
    pub name: String,
    /// The ordered steps.
    pub steps: Vec<StepDef>,
    /// Who published it.
    pub published_by: Actor,
    /// When.
    pub published_at_ms: u64,
}

/// Run limits (Rust defaults when omitted).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Failed or lost attempts tolerated before the run fails.
    #[serde(default = "default_repairs")]
    pub max_repairs: u32,
    /// Seconds a launched attempt has to report; past it the attempt is timed out (its worker
    /// closed) and counted as a repair. No deadline when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_timeout_secs: Option<u64>,
}

fn default_repairs() -> u32 {
    DEFAULT_MAX_REPAIRS
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_repairs: DEFAULT_MAX_REPAIRS,
            attempt_timeout_secs: None,
        }
    }
}

/// A run's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Attempts are being launched and reported.
    Running,
    /// Operator pause: no new attempt starts.
    Paused,
    /// A worker asked for input; `resume_graph` answers it.
    AwaitingInput,
    /// Every step completed.
    Completed,
    /// Repairs exhausted.
    Failed,
    /// Cancelled by an operator.
    Cancelled,
}

impl RunStatus {
    /// Whether nothing more happens.
    pub fn terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// An attempt at one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// `<run>-a<n>`.
    pub attempt_id: String,
    /// The step.
    pub step_id: String,
    /// Bumped per retry of the same activation.
    pub generation: u64,
    /// The worker's PTY, once launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The worker's TUIC identity (who may report), once launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuic_session: Option<String>,
    /// The spawn's task handle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Operator feedback carried into the prompt (after `resume_graph`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// The step's role, pinned at reservation.
    #[serde(default, skip_serializing_if = "Role::is_default")]
    pub role: Role,
    /// When a launched attempt without a report is timed out (wall clock, ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
}

/// A worker attempt a coordinator launched with `workflow_launch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// The coordinator-chosen attempt id (unique in the run).
    pub attempt_id: String,
    /// Always 1: a relaunch is a new attempt id.
    pub generation: u64,
    /// The pinned launch definition used.
    pub agent_type: String,
    /// `worker` or `reviewer`.
    #[serde(default, skip_serializing_if = "Role::is_default")]
    pub role: Role,
    /// The registered linked worktree the worker runs in.
    pub worktree: String,
    /// The coordinator attempt that launched it.
    pub coordinator_attempt: String,
    /// The launch payload's hash (a retry with another payload is refused).
    pub hash: String,
    /// The worker's PTY, once launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The worker's TUIC identity, once launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuic_session: Option<String>,
    /// The spawn's task handle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Its report was committed.
    #[serde(default)]
    pub reported: bool,
    /// When the bound worker, without a report, is timed out (wall clock, ms): the run's
    /// `attempt_timeout_secs` from its launch, the same timer a step attempt has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// Its deadline passed without a report: the worker was closed, `attempt_timed_out`
    /// recorded and the coordinator mailed a `workflow_event` cursor; later reports are refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
}

impl Launch {
    /// Still owed a report: neither reported nor timed out (it holds its worktree).
    pub fn awaited(&self) -> bool {
        !self.reported && !self.timed_out
    }

    /// The deadline the attempt timer waits for, while the launch is bound and awaited.
    pub fn pending_deadline(&self) -> Option<u64> {
        self.deadline_ms
            .filter(|_| self.awaited() && self.session_id.is_some())
    }
}

/// A story proposal of a coordinator (`workflow_story_create`), by proposal key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    /// The proposed story's hash: the same key with another payload is refused.
    pub hash: String,
    /// The created story, once the story transaction committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub story_id: Option<String>,
}

/// Pending input of an activation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingInput {
    /// The activation (attempt) that asked.
    pub activation_id: String,
    /// The question.
    pub question: String,
    /// The options offered.
    #[serde(default)]
    pub options: Vec<String>,
}

/// A run snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// `run-<n>`.
    pub run_id: String,
    /// The project.
    pub project: String,
    /// `{type: story, id}`.
    pub target: Value,
    /// The pinned story revision.
    pub story_revision: u64,
    /// The pinned definition.
    pub definition_id: String,
    /// The pinned revision.
    pub definition_revision: u64,
    /// Limits in force.
    pub limits: Limits,
    /// State.
    pub status: RunStatus,
    /// The pinned definition's step ids, in order.
    pub step_ids: Vec<String>,
    /// The pinned steps' roles, in order (absent in runs started before roles: all workers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_roles: Vec<Role>,
    /// Index of the current step.
    pub step_index: usize,
    /// The active attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<Attempt>,
    /// Attempts made (ids are numbered by it).
    pub attempts_made: u64,
    /// Repairs used (failed, lost or exited-without-report attempts).
    pub repairs: u32,
    /// Recoveries after a node restart (lost attempts relaunched).
    pub recoveries: u32,
    /// Awaiting input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_input: Option<PendingInput>,
    /// Last event seq (the fence of commands).
    pub sequence: u64,
    /// Who started it.
    pub started_by: Actor,
    /// Created, ms.
    pub created_at_ms: u64,
    /// Last change, ms.
    pub updated_at_ms: u64,
    /// Report payload hash and event seq by `attempt_id#generation` (idempotent reports).
    #[serde(default)]
    pub reports: BTreeMap<String, (String, u64)>,
    /// Workers launched by the coordinator, by attempt id (at most [`MAX_LAUNCHES`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub launches: BTreeMap<String, Launch>,
    /// Story proposals by proposal key (at most [`MAX_PROPOSALS`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub proposals: BTreeMap<String, Proposal>,
}

impl Run {
    /// The active coordinator attempt: the current attempt of a coordinator step, launched
    /// and the run not ended.
    /// Holds the active coordinator attempt's deadline at `until` or later: a coordinator
    /// waiting on its launched workers is not silent, and it gets a full timeout window after
    /// each worker's report or expiry to act on it.
    pub fn hold_coordinator(&mut self, until: u64) {
        if let Some(a) = self
            .attempt
            .as_mut()
            .filter(|a| a.role == Role::Coordinator && a.session_id.is_some())
            && let Some(d) = a.deadline_ms.as_mut()
        {
            *d = (*d).max(until);
        }
    }

    /// The attempt timeout in ms from `now`, when the run has one.
    pub fn timeout_from(&self, now_ms: u64) -> Option<u64> {
        self.limits
            .attempt_timeout_secs
            .map(|s| now_ms.saturating_add(s.saturating_mul(1000)))
    }

    pub fn active_coordinator(&self) -> Option<&Attempt> {
        self.attempt.as_ref().filter(|a| {
            a.role == Role::Coordinator && a.tuic_session.is_some() && !self.status.terminal()
        })
    }
}

/// One run event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEvent {
    /// Gapless per run from 1.
    pub seq: u64,
    /// When.
    pub at_ms: u64,
    /// `started`, `attempt_launched`, `report`, `step_completed`, `repair`, ...
    pub kind: String,
    /// The complete payload.
    pub detail: Value,
}
