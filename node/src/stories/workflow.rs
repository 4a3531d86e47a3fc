//! Workflow definitions (project-scoped, published by immutable revision) and runs.
//!
//! A run pins one published definition revision and the story revision it started from
//! (`start_graph`). Its graph is the definition's ordered steps; each step is an *activation*
//! carried out by attempts, each attempt a worker agent spawned through the managed-agent
//! path (`crate::mail::spawn`, see [`super::runner`]). A worker reports with
//! `workflow_report`; only that report advances the graph (a worker's exit is an observation
//! that costs a repair). Every change is one transaction: the run snapshot plus its gapless
//! event log (`seq` from 1), so after a crash the run continues from its last durable event.
//!
//! Commands that change a running run (`pause`, `resume`, `cancel`) are fenced by
//! `expected_sequence`: the run's last event seq the caller saw.
//!
//! A step with `role: coordinator` makes its attempt the run's active coordinator: an agent
//! that launches workers (`workflow_launch`) and proposes stories (`workflow_story_create`)
//! through [`super::coordinator`]. Steps without it are carried out by the daemon executor.
//!
//! Not in this build: plan targets (`start_graph` with `target.type = plan` says so),
//! delivery policies.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use redb::ReadableTable;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::db::{self, IdemEntry};
use super::service::{Status, parse_cursor};
use super::{Actor, Authority, StoryError, payload_hash, require, store_err};
use crate::state::Node;
use crate::store::Store;

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

/// The workflow service state.
#[derive(Default)]
struct Inner {
    /// (project, definition id) → revisions.
    defs: HashMap<(String, String), BTreeMap<u64, Definition>>,
    runs: BTreeMap<String, Run>,
    next_run: u64,
}

/// Called after every committed run change: (project, run id, sequence).
pub type RunNotify = Arc<dyn Fn(&str, &str, u64) + Send + Sync>;

/// Definitions and runs.
pub struct Workflows {
    store: Arc<Store>,
    inner: Mutex<Inner>,
    notify: Mutex<Option<RunNotify>>,
    /// Attempts whose worker is being spawned right now (a second kick must not spawn twice).
    pub(crate) launching: Mutex<std::collections::HashSet<String>>,
    /// Wakes the attempt timer when a launch sets a deadline.
    pub(crate) timer: tokio::sync::Notify,
}

impl std::fmt::Debug for Workflows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workflows").finish_non_exhaustive()
    }
}

/// A change to one run: the new snapshot and its events.
pub struct RunChange {
    /// The new snapshot (its `sequence` is set on commit).
    pub run: Run,
    /// Events to append, in order.
    pub events: Vec<(String, Value)>,
}

impl Workflows {
    /// Opens (the tables are created by the story service) and loads everything.
    pub fn open(store: Arc<Store>) -> Result<Self, StoryError> {
        db::create_tables(&store)?;
        let mut inner = Inner::default();
        {
            let tx = store.database().begin_read().map_err(store_err)?;
            let t = tx.open_table(db::DEFINITIONS).map_err(store_err)?;
            for row in t.iter().map_err(store_err)? {
                let (_, v) = row.map_err(store_err)?;
                if let Ok(d) = db::from_bytes::<Definition>(v.value()) {
                    inner
                        .defs
                        .entry((d.project.clone(), d.definition_id.clone()))
                        .or_default()
                        .insert(d.revision, d);
                }
            }
            let t = tx.open_table(db::RUNS).map_err(store_err)?;
            for row in t.iter().map_err(store_err)? {
                let (_, v) = row.map_err(store_err)?;
                if let Ok(r) = db::from_bytes::<Run>(v.value()) {
                    if let Some(n) = r.run_id.strip_prefix("run-").and_then(|n| n.parse().ok()) {
                        inner.next_run = inner.next_run.max(n);
                    }
                    inner.runs.insert(r.run_id.clone(), r);
                }
            }
        }
        Ok(Self {
            store,
            inner: Mutex::new(inner),
            notify: Mutex::new(None),
            launching: Mutex::new(Default::default()),
            timer: tokio::sync::Notify::new(),
        })
    }

    /// Installs the post-commit hook.
    pub fn set_notify(&self, f: RunNotify) {
        *self.notify.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One run.
    pub fn run(&self, run_id: &str) -> Option<Run> {
        self.lock().runs.get(run_id).cloned()
    }

    /// Runs that are not terminal.
    pub fn live_runs(&self) -> Vec<Run> {
        self.lock()
            .runs
            .values()
            .filter(|r| !r.status.terminal())
            .cloned()
            .collect()
    }

    /// A pinned definition revision.
    pub fn definition(&self, project: &str, id: &str, revision: u64) -> Option<Definition> {
        self.lock()
            .defs
            .get(&(project.to_owned(), id.to_owned()))?
            .get(&revision)
            .cloned()
    }

    /// Applies `f` to a run under the lock: `f` returns the change (or an error, and nothing
    /// is written). Commits the snapshot and events in one transaction, then notifies.
    pub fn update(
        &self,
        run_id: &str,
        now_ms: u64,
        f: impl FnOnce(&Run) -> Result<Option<RunChange>, StoryError>,
    ) -> Result<Run, StoryError> {
        let mut g = self.lock();
        let cur = g
            .runs
            .get(run_id)
            .cloned()
            .ok_or(StoryError::UnknownRecord {
                kind: "run",
                id: run_id.to_owned(),
            })?;
        let Some(ch) = f(&cur)? else {
            return Ok(cur);
        };
        let run = self.commit(&mut g, ch, now_ms, None)?;
        drop(g);
        self.notify_run(&run);
        Ok(run)
    }

    fn commit(
        &self,
        g: &mut Inner,
        ch: RunChange,
        now_ms: u64,
        idem: Option<(&str, &str, &str)>,
    ) -> Result<Run, StoryError> {
        let mut run = ch.run;
        let tx = self.store.database().begin_write().map_err(store_err)?;
        {
            let mut ev = tx.open_table(db::RUN_EVENTS).map_err(store_err)?;
            for (kind, detail) in ch.events {
                run.sequence += 1;
                let e = RunEvent {
                    seq: run.sequence,
                    at_ms: now_ms,
                    kind,
                    detail,
                };
                ev.insert(
                    (run.run_id.as_str(), run.sequence),
                    db::to_bytes(&e)?.as_slice(),
                )
                .map_err(store_err)?;
            }
            run.updated_at_ms = now_ms;
            tx.open_table(db::RUNS)
                .map_err(store_err)?
                .insert(run.run_id.as_str(), db::to_bytes(&run)?.as_slice())
                .map_err(store_err)?;
        }
        // A start's idempotency entry: its first answer, `{run}` as committed.
        if let Some((scope, key, hash)) = idem {
            db::idem_put(
                &tx,
                scope,
                key,
                &IdemEntry {
                    hash: hash.to_owned(),
                    result: json!({"run": run}),
                },
            )?;
            if let Some(n) = run.run_id.strip_prefix("run-").and_then(|n| n.parse().ok()) {
                db::meta_put(&tx, "next_run", n)?;
            }
        }
        tx.commit().map_err(store_err)?;
        if let Some(n) = run.run_id.strip_prefix("run-").and_then(|n| n.parse().ok()) {
            g.next_run = g.next_run.max(n);
        }
        g.runs.insert(run.run_id.clone(), run.clone());
        Ok(run)
    }

    fn notify_run(&self, run: &Run) {
        if let Some(f) = self
            .notify
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            f(&run.project, &run.run_id, run.sequence);
        }
    }

    /// A gapless page of a run's events after `after`.
    pub fn events(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<(Vec<RunEvent>, Option<u64>), StoryError> {
        let last = self
            .run(run_id)
            .map(|r| r.sequence)
            .ok_or(StoryError::UnknownRecord {
                kind: "run",
                id: run_id.to_owned(),
            })?;
        let tx = self.store.database().begin_read().map_err(store_err)?;
        let t = tx.open_table(db::RUN_EVENTS).map_err(store_err)?;
        let mut out = Vec::new();
        for row in t
            .range((run_id, after + 1)..=(run_id, last))
            .map_err(store_err)?
            .take(limit)
        {
            let (_, v) = row.map_err(store_err)?;
            out.push(db::from_bytes::<RunEvent>(v.value())?);
        }
        let next = out.last().map(|e| e.seq).filter(|&s| s < last);
        Ok((out, next))
    }
}

/// Definition actions (`POST /workflows/definition/action`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum DefinitionAction {
    /// Publishes a new immutable revision (previous + 1).
    Publish {
        definition_id: String,
        name: String,
        steps: Vec<StepDef>,
        /// The revision the publisher last saw (0 for a new definition).
        #[serde(default)]
        expected_revision: Option<u64>,
    },
    /// Every definition's latest revision.
    List {},
    /// One revision (the latest without `revision`).
    Get {
        definition_id: String,
        #[serde(default)]
        revision: Option<u64>,
    },
}

/// `POST /workflows/definition/action`. Publication is a workflow policy write: Human only.
pub fn definition_action(
    node: &Node,
    project: &str,
    actor: &Actor,
    input: &Value,
) -> Result<Value, StoryError> {
    let a: DefinitionAction = serde_json::from_value(input.clone())
        .map_err(|e| StoryError::Invalid(format!("input: {e}")))?;
    let w = &node.workflows;
    match a {
        DefinitionAction::List {} => {
            let g = w.lock();
            let mut v: Vec<&Definition> = g
                .defs
                .iter()
                .filter(|((p, _), _)| p == project)
                .filter_map(|(_, revs)| revs.values().next_back())
                .collect();
            v.sort_by(|a, b| a.definition_id.cmp(&b.definition_id));
            Ok(json!({"definitions": v}))
        }
        DefinitionAction::Get {
            definition_id,
            revision,
        } => {
            let g = w.lock();
            let revs = g.defs.get(&(project.to_owned(), definition_id.clone()));
            let d = match revision {
                Some(r) => revs.and_then(|x| x.get(&r)),
                None => revs.and_then(|x| x.values().next_back()),
            };
            d.map(|d| json!({"definition": d}))
                .ok_or(StoryError::UnknownRecord {
                    kind: "workflow definition revision",
                    id: format!(
                        "{definition_id}@{}",
                        revision.map_or("latest".into(), |r| r.to_string())
                    ),
                })
        }
        DefinitionAction::Publish {
            definition_id,
            name,
            steps,
            expected_revision,
        } => {
            require(actor, Authority::Human, "publishing a workflow definition")?;
            if definition_id.is_empty()
                || definition_id.len() > 64
                || !definition_id
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
            {
                return Err(StoryError::Invalid(
                    "definition_id must be 1-64 characters of a-z, 0-9, - and _".into(),
                ));
            }
            if steps.is_empty() || steps.len() > MAX_STEPS {
                return Err(StoryError::Invalid(format!(
                    "a definition has 1 to {MAX_STEPS} steps"
                )));
            }
            let mut ids = std::collections::HashSet::new();
            for s in &steps {
                if s.id.is_empty() || !ids.insert(s.id.clone()) {
                    return Err(StoryError::Invalid(format!(
                        "step ids must be unique and non-empty ({:?})",
                        s.id
                    )));
                }
                if s.agent.command.trim().is_empty() {
                    return Err(StoryError::Invalid(format!(
                        "step {}: agent.command must not be empty",
                        s.id
                    )));
                }
                if !s.launches.is_empty() && s.role != Role::Coordinator {
                    return Err(StoryError::Invalid(format!(
                        "step {}: only a coordinator step declares launches",
                        s.id
                    )));
                }
                for (t, l) in &s.launches {
                    if t.is_empty() || t.len() > 64 || l.agent.command.trim().is_empty() {
                        return Err(StoryError::Invalid(format!(
                            "step {}: launch {t:?} needs a name of 1-64 characters and an agent.command",
                            s.id
                        )));
                    }
                    if l.role == Role::Coordinator {
                        return Err(StoryError::Invalid(format!(
                            "step {}: launch {t:?} is a worker or a reviewer, not a coordinator",
                            s.id
                        )));
                    }
                }
            }
            let mut g = w.lock();
            let key = (project.to_owned(), definition_id.clone());
            let latest = g
                .defs
                .get(&key)
                .and_then(|r| r.keys().next_back().copied())
                .unwrap_or(0);
            if let Some(e) = expected_revision
                && e != latest
            {
                return Err(StoryError::StaleRevision {
                    id: definition_id,
                    expected: e,
                    current: latest,
                });
            }
            let d = Definition {
                definition_id: definition_id.clone(),
                project: project.to_owned(),
                revision: latest + 1,
                name,
                steps,
                published_by: actor.clone(),
                published_at_ms: crate::logs::now_ms(),
            };
            let tx = w.store.database().begin_write().map_err(store_err)?;
            tx.open_table(db::DEFINITIONS)
                .map_err(store_err)?
                .insert(
                    (project, definition_id.as_str(), d.revision),
                    db::to_bytes(&d)?.as_slice(),
                )
                .map_err(store_err)?;
            tx.commit().map_err(store_err)?;
            g.defs.entry(key).or_default().insert(d.revision, d.clone());
            Ok(json!({"definition": d}))
        }
    }
}

/// The run actions (`workflow_run` tool, `POST /workflows/run/action`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum RunAction {
    /// Starts a run of a story with a pinned definition revision.
    StartGraph {
        target: Value,
        #[serde(default)]
        expected_revision: Option<u64>,
        definition_id: String,
        definition_revision: u64,
        request_id: String,
        #[serde(default)]
        limits: Option<Limits>,
    },
    /// One run snapshot.
    Get { run_id: String },
    /// The project's runs, newest first.
    List {
        #[serde(default)]
        limit: Option<usize>,
    },
    /// A gapless page of a run's events after `cursor`.
    Events {
        run_id: String,
        #[serde(default)]
        cursor: Option<Value>,
        #[serde(default)]
        limit: Option<usize>,
    },
    /// Stops launching new attempts (fenced).
    Pause {
        run_id: String,
        expected_sequence: u64,
    },
    /// Continues a paused run at its graph position (fenced).
    Resume {
        run_id: String,
        expected_sequence: u64,
    },
    /// Cancels the run (fenced).
    Cancel {
        run_id: String,
        expected_sequence: u64,
    },
    /// Answers pending input of an explicit activation and continues the graph.
    ResumeGraph {
        execution_id: String,
        activation_id: String,
        resolution: String,
    },
}

/// Action names of [`RunAction`].
pub const RUN_ACTIONS: &[&str] = &[
    "start_graph",
    "get",
    "list",
    "events",
    "pause",
    "resume",
    "cancel",
    "resume_graph",
];

fn fence(run: &Run, expected: u64) -> Result<(), StoryError> {
    if run.sequence != expected {
        return Err(StoryError::StaleRevision {
            id: run.run_id.clone(),
            expected,
            current: run.sequence,
        });
    }
    Ok(())
}

fn own_run(node: &Node, project: &str, run_id: &str) -> Result<Run, StoryError> {
    node.workflows
        .run(run_id)
        .filter(|r| r.project == project)
        .ok_or(StoryError::UnknownRecord {
            kind: "run",
            id: run_id.to_owned(),
        })
}

/// Runs one [`RunAction`]. Authority: starting, pausing, resuming and cancelling need the
/// local API or a human (not an agent); answering pending input (`resume_graph`) is a human
/// decision. Blocking.
pub fn run_action(
    node: &Arc<Node>,
    project: &str,
    actor: &Actor,
    input: &Value,
) -> Result<Value, StoryError> {
    let a: RunAction = serde_json::from_value(input.clone())
        .map_err(|e| StoryError::Invalid(format!("input: {e}")))?;
    let now = crate::logs::now_ms();
    let w = &node.workflows;
    let out = match a {
        RunAction::StartGraph { .. } => return start_graph(node, project, actor, &a, now),
        RunAction::Get { run_id } => json!({"run": own_run(node, project, &run_id)?}),
        RunAction::List { limit } => {
            let g = w.lock();
            let runs: Vec<&Run> = g
                .runs
                .values()
                .rev()
                .filter(|r| r.project == project)
                .take(limit.unwrap_or(50).clamp(1, 500))
                .collect();
            json!({"runs": runs})
        }
        RunAction::Events {
            run_id,
            cursor,
            limit,
        } => {
            own_run(node, project, &run_id)?;
            let (events, next) = w.events(
                &run_id,
                parse_cursor(cursor.as_ref())?.unwrap_or(0),
                limit.unwrap_or(100).clamp(1, 500),
            )?;
            json!({"events": events, "next_cursor": next})
        }
        RunAction::Pause {
            run_id,
            expected_sequence,
        } => {
            require(actor, Authority::LocalApi, "pausing a run")?;
            own_run(node, project, &run_id)?;
            let r = w.update(&run_id, now, |r| {
                fence(r, expected_sequence)?;
                if r.status != RunStatus::Running {
                    return Err(StoryError::Transition(format!(
                        "{run_id} is {:?}, not running",
                        r.status
                    )));
                }
                let mut n = r.clone();
                n.status = RunStatus::Paused;
                Ok(Some(RunChange {
                    run: n,
                    events: vec![(
                        "paused".into(),
                        json!({"by": actor, "pause_target": {"step_index": r.step_index, "attempt": r.attempt.as_ref().map(|a| &a.attempt_id)}}),
                    )],
                }))
            })?;
            json!({"run": r})
        }
        RunAction::Resume {
            run_id,
            expected_sequence,
        } => {
            require(actor, Authority::LocalApi, "resuming a run")?;
            own_run(node, project, &run_id)?;
            let r = w.update(&run_id, now, |r| {
                fence(r, expected_sequence)?;
                if r.status != RunStatus::Paused {
                    return Err(StoryError::Transition(format!(
                        "{run_id} is {:?}; only a paused run resumes (pending input needs resume_graph)",
                        r.status
                    )));
                }
                let mut n = r.clone();
                n.status = RunStatus::Running;
                Ok(Some(RunChange {
                    run: n,
                    events: vec![("resumed".into(), json!({"by": actor}))],
                }))
            })?;
            super::runner::kick(node, &run_id);
            json!({"run": r})
        }
        RunAction::Cancel {
            run_id,
            expected_sequence,
        } => {
            require(actor, Authority::LocalApi, "cancelling a run")?;
            own_run(node, project, &run_id)?;
            let r = w.update(&run_id, now, |r| {
                fence(r, expected_sequence)?;
                if r.status.terminal() {
                    return Err(StoryError::Transition(format!(
                        "{run_id} already ended ({:?})",
                        r.status
                    )));
                }
                let mut n = r.clone();
                n.status = RunStatus::Cancelled;
                Ok(Some(RunChange {
                    run: n,
                    events: vec![("cancelled".into(), json!({"by": actor}))],
                }))
            })?;
            super::runner::stop_worker(node, &r);
            json!({"run": r})
        }
        RunAction::ResumeGraph {
            execution_id,
            activation_id,
            resolution,
        } => {
            require(actor, Authority::Human, "answering a run's pending input")?;
            own_run(node, project, &execution_id)?;
            let r = w.update(&execution_id, now, |r| {
                let Some(p) = &r.pending_input else {
                    return Err(StoryError::Transition(format!(
                        "{execution_id} has no pending input"
                    )));
                };
                if p.activation_id != activation_id {
                    return Err(StoryError::Transition(format!(
                        "{execution_id} awaits input on activation {}, not {activation_id}",
                        p.activation_id
                    )));
                }
                let mut n = r.clone();
                n.pending_input = None;
                n.status = RunStatus::Running;
                let feedback = resolution.clone();
                // The same activation continues with a new generation carrying the answer.
                let next = super::runner::next_attempt(&n, Some(feedback));
                n.attempts_made += 1;
                let reserved = super::runner::reserved_event(&next);
                n.attempt = Some(next);
                Ok(Some(RunChange {
                    run: n,
                    events: vec![
                        (
                            "input_resolved".into(),
                            json!({"activation_id": activation_id, "resolution": resolution, "by": actor}),
                        ),
                        reserved,
                    ],
                }))
            })?;
            super::runner::kick(node, &execution_id);
            json!({"run": r})
        }
    };
    Ok(out)
}

fn start_graph(
    node: &Arc<Node>,
    project: &str,
    actor: &Actor,
    a: &RunAction,
    now: u64,
) -> Result<Value, StoryError> {
    let RunAction::StartGraph {
        target,
        expected_revision,
        definition_id,
        definition_revision,
        request_id,
        limits,
    } = a
    else {
        unreachable!("start_graph only")
    };
    require(actor, Authority::LocalApi, "starting a run")?;
    let scope = format!("workflow:{project}");
    let hash = payload_hash(actor, a);
    let w = &node.workflows;
    let mut g = w.lock();
    {
        let tx = w.store.database().begin_write().map_err(store_err)?;
        if let Some(e) = db::idem_get(&tx, &scope, request_id)? {
            return if e.hash == hash {
                Ok(e.result)
            } else {
                Err(StoryError::IdempotencyConflict {
                    key: request_id.clone(),
                })
            };
        }
    }
    let kind = target.get("type").and_then(Value::as_str).unwrap_or("");
    let id = target.get("id").and_then(Value::as_str).unwrap_or("");
    match kind {
        "story" => {}
        "plan" => {
            return Err(StoryError::Unavailable(
                "plan dispatch is unavailable in this build: start a story target".into(),
            ));
        }
        _ => {
            return Err(StoryError::Invalid(
                "target must be {type: story|plan, id}".into(),
            ));
        }
    }
    let story = node
        .stories
        .get(project, id)
        .ok_or_else(|| StoryError::NotFound(id.to_owned()))?;
    if let Some(e) = expected_revision
        && *e != story.revision
    {
        return Err(StoryError::StaleRevision {
            id: id.to_owned(),
            expected: *e,
            current: story.revision,
        });
    }
    if story.status != Status::Ready {
        return Err(StoryError::Transition(format!(
            "{id} is {}; a run starts from an approved (ready) story",
            story.status.as_str()
        )));
    }
    let Some(def) = g
        .defs
        .get(&(project.to_owned(), definition_id.clone()))
        .and_then(|r| r.get(definition_revision))
    else {
        return Err(StoryError::UnknownRecord {
            kind: "workflow definition revision",
            id: format!("{definition_id}@{definition_revision}"),
        });
    };
    let step_ids: Vec<String> = def.steps.iter().map(|s| s.id.clone()).collect();
    let step_roles: Vec<Role> = def.steps.iter().map(|s| s.role).collect();
    let n = g.next_run + 1;
    let mut run = Run {
        run_id: format!("run-{n}"),
        project: project.to_owned(),
        target: json!({"type": "story", "id": id}),
        story_revision: story.revision,
        definition_id: definition_id.clone(),
        definition_revision: *definition_revision,
        limits: limits.unwrap_or_default(),
        status: RunStatus::Running,
        step_ids,
        step_roles,
        step_index: 0,
        attempt: None,
        attempts_made: 0,
        repairs: 0,
        recoveries: 0,
        pending_input: None,
        sequence: 0,
        started_by: actor.clone(),
        created_at_ms: now,
        updated_at_ms: now,
        reports: BTreeMap::new(),
        launches: BTreeMap::new(),
        proposals: BTreeMap::new(),
    };
    let first = super::runner::next_attempt(&run, None);
    run.attempts_made = 1;
    let reserved = super::runner::reserved_event(&first);
    run.attempt = Some(first);
    let ch = RunChange {
        events: vec![
            (
                "started".into(),
                json!({"target": run.target, "story_revision": run.story_revision,
                       "definition_id": definition_id, "definition_revision": definition_revision,
                       "limits": run.limits, "by": actor}),
            ),
            reserved,
        ],
        run,
    };
    let run = w.commit(&mut g, ch, now, Some((&scope, request_id, &hash)))?;
    drop(g);
    w.notify_run(&run);
    super::runner::kick(node, &run.run_id);
    Ok(json!({"run": run}))
}
