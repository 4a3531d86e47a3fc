//! The story service: [`StoryAction`] in, JSON out, every mutation one `redb` transaction.
//!
//! A mutation is computed against an immutable view of the project ([`Change`]), committed
//! with its events and its idempotency entry, and only then installed in the in-memory mirror,
//! so a refused or failed action changes nothing anywhere.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use redb::ReadableTable;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::db::{self, IdemEntry};
use super::plan::{self, PlanSource};
use super::{Actor, Authority, StoryError, payload_hash, require, store_err};
use crate::store::Store;

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

    fn abandoned(self) -> bool {
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
    fn number(&self) -> u64 {
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

    fn request_id(&self) -> Option<&str> {
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

#[derive(Debug, Default, Clone)]
struct ProjectState {
    stories: BTreeMap<u64, Story>,
    sources: BTreeMap<String, PlanSource>,
    next_event: u64,
}

#[derive(Debug, Default)]
struct Inner {
    projects: HashMap<String, ProjectState>,
    next_story: u64,
    next_source: u64,
}

/// What one mutation writes (computed before anything is written).
#[derive(Debug, Default)]
struct Change {
    stories: Vec<Story>,
    sources_put: Vec<PlanSource>,
    sources_del: Vec<String>,
    events: Vec<(String, Option<String>, Option<u64>, Value)>,
    next_story: Option<u64>,
    next_source: Option<u64>,
    result: Value,
}

/// A post-commit hook: (project, last event seq).
pub type Notify = Arc<dyn Fn(&str, u64) + Send + Sync>;

/// The story service.
pub struct Stories {
    store: Arc<Store>,
    inner: Mutex<Inner>,
    /// Called with (project, last event seq) after every committed mutation.
    notify: Mutex<Option<Notify>>,
}

impl std::fmt::Debug for Stories {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stories").finish_non_exhaustive()
    }
}

impl Stories {
    /// Opens the tables and rebuilds the mirror.
    pub fn open(store: Arc<Store>) -> Result<Self, StoryError> {
        db::create_tables(&store)?;
        let mut inner = Inner::default();
        {
            let tx = store.database().begin_read().map_err(store_err)?;
            let t = tx.open_table(db::STORIES).map_err(store_err)?;
            for row in t.iter().map_err(store_err)? {
                let (k, v) = row.map_err(store_err)?;
                let (project, n) = k.value();
                let Ok(s) = db::from_bytes::<Story>(v.value()) else {
                    tracing::warn!(project, n, "unreadable story skipped");
                    continue;
                };
                inner.next_story = inner.next_story.max(n);
                inner
                    .projects
                    .entry(project.to_owned())
                    .or_default()
                    .stories
                    .insert(n, s);
            }
            let t = tx.open_table(db::PLAN_SOURCES).map_err(store_err)?;
            for row in t.iter().map_err(store_err)? {
                let (k, v) = row.map_err(store_err)?;
                let (project, id) = k.value();
                if let Ok(s) = db::from_bytes::<PlanSource>(v.value()) {
                    inner.next_source = inner.next_source.max(
                        id.strip_prefix("ps-")
                            .and_then(|n| n.parse().ok())
                            .unwrap_or(0),
                    );
                    inner
                        .projects
                        .entry(project.to_owned())
                        .or_default()
                        .sources
                        .insert(id.to_owned(), s);
                }
            }
            let t = tx.open_table(db::STORY_EVENTS).map_err(store_err)?;
            // Keys sort by (project, seq): the last key per project is its newest event.
            for row in t.iter().map_err(store_err)? {
                let (k, _) = row.map_err(store_err)?;
                let (project, seq) = k.value();
                let p = inner.projects.entry(project.to_owned()).or_default();
                p.next_event = p.next_event.max(seq);
            }
            let m = tx.open_table(db::META).map_err(store_err)?;
            if let Some(v) = m.get("next_story").map_err(store_err)? {
                inner.next_story = inner.next_story.max(v.value());
            }
            if let Some(v) = m.get("next_source").map_err(store_err)? {
                inner.next_source = inner.next_source.max(v.value());
            }
        }
        Ok(Self {
            store,
            inner: Mutex::new(inner),
            notify: Mutex::new(None),
        })
    }

    /// Installs the post-commit hook (the node publishes an event on the bus).
    pub fn set_notify(&self, f: Notify) {
        *self.notify.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One story of a project.
    pub fn get(&self, project: &str, id: &str) -> Option<Story> {
        let n = story_number(id)?;
        self.lock().projects.get(project)?.stories.get(&n).cloned()
    }

    /// Runs one action. Blocking (a `redb` commit for mutations).
    pub fn execute(&self, ctx: &Ctx, action: StoryAction) -> Result<Value, StoryError> {
        match &action {
            StoryAction::List {
                status,
                plan_source,
                limit,
                cursor,
            } => self.list(
                ctx,
                *status,
                plan_source.as_deref(),
                *limit,
                cursor.as_ref(),
            ),
            StoryAction::Get { id } => {
                let s = self
                    .get(&ctx.project, id)
                    .ok_or_else(|| StoryError::NotFound(id.clone()))?;
                Ok(json!({"story": s}))
            }
            StoryAction::ListPlanSources {} => {
                let recorded: Vec<PlanSource> = self
                    .lock()
                    .projects
                    .get(&ctx.project)
                    .map(|p| p.sources.values().cloned().collect())
                    .unwrap_or_default();
                let discovered = plan::discover(std::path::Path::new(&ctx.project));
                let discovered: Vec<Value> = discovered
                    .into_iter()
                    .map(|d| {
                        let id = recorded.iter().find(|r| r.path == d.path).map(|r| &r.id);
                        json!({"path": d.path, "title": d.title, "source_id": id})
                    })
                    .collect();
                Ok(json!({"discovered": discovered, "sources": recorded}))
            }
            StoryAction::PlanView { plan_source } => self.plan_view(ctx, plan_source.as_deref()),
            StoryAction::Events { cursor, limit } => {
                let (events, next) =
                    self.events(&ctx.project, parse_cursor(cursor.as_ref())?, page(*limit))?;
                Ok(json!({"events": events, "next_cursor": next}))
            }
            _ => self.mutate(ctx, &action, None),
        }
    }

    /// Creates a story proposed by a run's coordinator (`workflow_story_create`): a `create`
    /// whose origin is `plan_step` with the run and proposal key. Only the workflow service
    /// calls this; request JSON can never select an origin.
    pub fn create_proposed(
        &self,
        ctx: &Ctx,
        action: StoryAction,
        origin: StoryOrigin,
    ) -> Result<Value, StoryError> {
        if !matches!(action, StoryAction::Create { .. }) {
            return Err(StoryError::Invalid("a proposal creates a story".into()));
        }
        self.mutate(ctx, &action, Some(origin))
    }

    fn list(
        &self,
        ctx: &Ctx,
        status: Option<Status>,
        plan_source: Option<&str>,
        limit: Option<usize>,
        cursor: Option<&Value>,
    ) -> Result<Value, StoryError> {
        let after = parse_cursor(cursor)?.unwrap_or(0);
        let limit = page(limit);
        let g = self.lock();
        let Some(p) = g.projects.get(&ctx.project) else {
            return Ok(json!({"stories": [], "total": 0, "next_cursor": null}));
        };
        let matches = |s: &Story| {
            status.is_none_or(|st| s.status == st)
                && plan_source.is_none_or(|ps| s.plan_source.as_deref() == Some(ps))
        };
        let total = if status.is_none() && plan_source.is_none() {
            p.stories.len()
        } else {
            p.stories.values().filter(|s| matches(s)).count()
        };
        let mut out = Vec::with_capacity(limit);
        let mut more = false;
        for s in p.stories.range(after + 1..).map(|(_, s)| s) {
            if !matches(s) {
                continue;
            }
            if out.len() == limit {
                more = true;
                break;
            }
            out.push(s);
        }
        let next = if more {
            out.last().map(|s| s.number())
        } else {
            None
        };
        Ok(json!({"stories": out, "total": total, "next_cursor": next}))
    }

    /// A page of a project's events with seq > `after` (gapless), and the cursor of the next
    /// page (`None` when this page reached the end).
    pub fn events(
        &self,
        project: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<(Vec<StoryEvent>, Option<u64>), StoryError> {
        let after = after.unwrap_or(0);
        let last = self
            .lock()
            .projects
            .get(project)
            .map_or(0, |p| p.next_event);
        let tx = self.store.database().begin_read().map_err(store_err)?;
        let t = tx.open_table(db::STORY_EVENTS).map_err(store_err)?;
        let mut out = Vec::new();
        for row in t
            .range((project, after + 1)..=(project, last))
            .map_err(store_err)?
            .take(limit)
        {
            let (_, v) = row.map_err(store_err)?;
            out.push(db::from_bytes::<StoryEvent>(v.value())?);
        }
        let next = out.last().map(|e| e.seq).filter(|&s| s < last);
        Ok((out, next))
    }

    fn plan_view(&self, ctx: &Ctx, plan_source: Option<&str>) -> Result<Value, StoryError> {
        let g = self.lock();
        let Some(p) = g.projects.get(&ctx.project) else {
            return Ok(
                json!({"stories": [], "counts": {}, "abandoned": [], "blocked_by_abandoned": [], "summary": "no stories"}),
            );
        };
        let stories: Vec<&Story> = p
            .stories
            .values()
            .filter(|s| plan_source.is_none_or(|ps| s.plan_source.as_deref() == Some(ps)))
            .collect();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &stories {
            *counts.entry(s.status.as_str()).or_default() += 1;
        }
        let abandoned: Vec<Value> = stories
            .iter()
            .filter(|s| s.status.abandoned())
            .map(|s| json!({"id": s.id, "status": s.status}))
            .collect();
        let by_id: HashMap<&str, &Story> = p.stories.values().map(|s| (s.id.as_str(), s)).collect();
        let blocked: Vec<Value> = stories
            .iter()
            .filter(|s| !s.status.abandoned() && s.status != Status::Done)
            .filter_map(|s| {
                let gone: Vec<&str> = s
                    .dependencies
                    .iter()
                    .filter(|d| by_id.get(d.as_str()).is_some_and(|x| x.status.abandoned()))
                    .map(String::as_str)
                    .collect();
                (!gone.is_empty()).then(|| json!({"id": s.id, "abandoned_prerequisites": gone}))
            })
            .collect();
        let done = counts.get("done").copied().unwrap_or(0);
        let summary = format!(
            "{} stories: {done} done, {} abandoned or cancelled, {} blocked by an abandoned prerequisite",
            stories.len(),
            abandoned.len(),
            blocked.len()
        );
        let rows: Vec<Value> = stories
            .iter()
            .map(|s| json!({"id": s.id, "title": s.title, "status": s.status, "revision": s.revision, "dependencies": s.dependencies}))
            .collect();
        Ok(
            json!({"stories": rows, "counts": counts, "abandoned": abandoned, "blocked_by_abandoned": blocked, "summary": summary}),
        )
    }

    /// Commits one mutation (with its idempotency entry) and installs it.
    fn mutate(
        &self,
        ctx: &Ctx,
        action: &StoryAction,
        origin: Option<StoryOrigin>,
    ) -> Result<Value, StoryError> {
        let mut g = self.lock();
        let key = action.request_id().map(str::to_owned);
        let hash = payload_hash(&ctx.actor, action);
        let tx = self.store.database().begin_write().map_err(store_err)?;
        if let Some(k) = &key
            && let Some(e) = db::idem_get(&tx, &ctx.project, k)?
        {
            return if e.hash == hash {
                Ok(e.result)
            } else {
                Err(StoryError::IdempotencyConflict { key: k.clone() })
            };
        }
        let empty = ProjectState::default();
        let p = g.projects.get(&ctx.project).unwrap_or(&empty);
        let change = compute(ctx, &g, p, action, origin)?;
        let mut next_event = p.next_event;
        {
            let mut st = tx.open_table(db::STORIES).map_err(store_err)?;
            for s in &change.stories {
                st.insert(
                    (ctx.project.as_str(), s.number()),
                    db::to_bytes(s)?.as_slice(),
                )
                .map_err(store_err)?;
            }
            let mut ps = tx.open_table(db::PLAN_SOURCES).map_err(store_err)?;
            for s in &change.sources_put {
                ps.insert(
                    (ctx.project.as_str(), s.id.as_str()),
                    db::to_bytes(s)?.as_slice(),
                )
                .map_err(store_err)?;
            }
            for id in &change.sources_del {
                ps.remove((ctx.project.as_str(), id.as_str()))
                    .map_err(store_err)?;
            }
            let mut ev = tx.open_table(db::STORY_EVENTS).map_err(store_err)?;
            for (kind, story_id, revision, detail) in &change.events {
                next_event += 1;
                let e = StoryEvent {
                    seq: next_event,
                    at_ms: ctx.now_ms,
                    kind: kind.clone(),
                    story_id: story_id.clone(),
                    revision: *revision,
                    actor: ctx.actor.clone(),
                    detail: detail.clone(),
                };
                ev.insert(
                    (ctx.project.as_str(), next_event),
                    db::to_bytes(&e)?.as_slice(),
                )
                .map_err(store_err)?;
            }
        }
        if let Some(n) = change.next_story {
            db::meta_put(&tx, "next_story", n)?;
        }
        if let Some(n) = change.next_source {
            db::meta_put(&tx, "next_source", n)?;
        }
        if let Some(k) = &key {
            db::idem_put(
                &tx,
                &ctx.project,
                k,
                &IdemEntry {
                    hash,
                    result: change.result.clone(),
                },
            )?;
        }
        tx.commit().map_err(store_err)?;
        if let Some(n) = change.next_story {
            g.next_story = n;
        }
        if let Some(n) = change.next_source {
            g.next_source = n;
        }
        let p = g.projects.entry(ctx.project.clone()).or_default();
        p.next_event = next_event;
        for s in change.stories {
            p.stories.insert(s.number(), s);
        }
        for s in change.sources_put {
            p.sources.insert(s.id.clone(), s);
        }
        for id in &change.sources_del {
            p.sources.remove(id);
        }
        drop(g);
        if !change.events.is_empty()
            && let Some(f) = self
                .notify
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        {
            f(&ctx.project, next_event);
        }
        Ok(change.result)
    }
}

fn page(limit: Option<usize>) -> usize {
    limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT)
}

/// A cursor: a number or a string of digits.
pub fn parse_cursor(v: Option<&Value>) -> Result<Option<u64>, StoryError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| StoryError::Invalid("cursor must be a next_cursor value".into())),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| StoryError::Invalid(format!("cursor {s:?} is not a next_cursor value"))),
        Some(_) => Err(StoryError::Invalid(
            "cursor must be a next_cursor value".into(),
        )),
    }
}

fn check_text(field: &str, s: &str, max: usize, required: bool) -> Result<(), StoryError> {
    let n = s.chars().count();
    if required && s.trim().is_empty() {
        return Err(StoryError::Invalid(format!("{field} must not be empty")));
    }
    if n > max {
        return Err(StoryError::Invalid(format!(
            "{field} is {n} characters; at most {max}"
        )));
    }
    Ok(())
}

fn check_criteria(c: &[String]) -> Result<(), StoryError> {
    if c.len() > MAX_CRITERIA {
        return Err(StoryError::Invalid(format!(
            "{} acceptance criteria; at most {MAX_CRITERIA}",
            c.len()
        )));
    }
    for x in c {
        check_text("an acceptance criterion", x, 1_000, true)?;
    }
    Ok(())
}

fn current<'a>(p: &'a ProjectState, id: &str, expected: u64) -> Result<&'a Story, StoryError> {
    let s = story_number(id)
        .and_then(|n| p.stories.get(&n))
        .ok_or_else(|| StoryError::NotFound(id.to_owned()))?;
    if s.revision != expected {
        return Err(StoryError::StaleRevision {
            id: id.to_owned(),
            expected,
            current: s.revision,
        });
    }
    Ok(s)
}

/// The path `from → … → to` through dependencies, if there is one.
fn dependency_path(p: &ProjectState, from: &str, to: &str) -> Option<Vec<String>> {
    let mut stack = vec![(from.to_owned(), vec![from.to_owned()])];
    let mut seen = HashSet::new();
    while let Some((id, path)) = stack.pop() {
        if id == to {
            return Some(path);
        }
        if !seen.insert(id.clone()) {
            continue;
        }
        if let Some(s) = story_number(&id).and_then(|n| p.stories.get(&n)) {
            for d in &s.dependencies {
                let mut np = path.clone();
                np.push(d.clone());
                stack.push((d.clone(), np));
            }
        }
    }
    None
}

/// Checks independence of an approver.
fn independent(s: &Story, actor: &Actor) -> Result<(), StoryError> {
    let who = actor.identity();
    if s.created_by.identity() == who {
        return Err(StoryError::NotIndependent {
            id: s.id.clone(),
            who,
            role: "created",
        });
    }
    if s.claimed_by.is_some() && s.claimed_by.as_deref() == actor.session() {
        return Err(StoryError::NotIndependent {
            id: s.id.clone(),
            who,
            role: "claimed",
        });
    }
    Ok(())
}

/// Whether `from → to` is an ordinary transition (any authority) rather than an
/// administrative one (Human only). Approval-gated moves (→ ready, review → done) go through
/// `review`/`approve`, never through `transition`.
fn ordinary(from: Status, to: Status) -> bool {
    use Status::*;
    matches!(
        (from, to),
        (Ready, InProgress)
            | (Ready, Backlog)
            | (InProgress, Review)
            | (InProgress, Ready)
            | (Review, InProgress)
    )
}

fn compute(
    ctx: &Ctx,
    g: &Inner,
    p: &ProjectState,
    action: &StoryAction,
    origin: Option<StoryOrigin>,
) -> Result<Change, StoryError> {
    let mut ch = Change::default();
    let bump = |s: &Story| {
        let mut n = s.clone();
        n.revision += 1;
        n.updated_at_ms = ctx.now_ms;
        n
    };
    match action {
        StoryAction::Create {
            title,
            description,
            acceptance_criteria,
            dependencies,
            plan_source,
            ..
        } => {
            check_text("title", title, MAX_TITLE, true)?;
            check_text(
                "description",
                description.as_deref().unwrap_or(""),
                MAX_DESCRIPTION,
                false,
            )?;
            let criteria = acceptance_criteria.clone().unwrap_or_default();
            check_criteria(&criteria)?;
            let deps = dependencies.clone().unwrap_or_default();
            for d in &deps {
                if story_number(d).and_then(|n| p.stories.get(&n)).is_none() {
                    return Err(StoryError::NotFound(d.clone()));
                }
            }
            if let Some(ps) = plan_source
                && !p.sources.contains_key(ps)
            {
                return Err(StoryError::UnknownRecord {
                    kind: "plan source",
                    id: ps.clone(),
                });
            }
            let n = g.next_story + 1;
            let s = Story {
                id: format!("st-{n}"),
                project: ctx.project.clone(),
                revision: 1,
                title: title.trim().to_owned(),
                description: description.clone().unwrap_or_default(),
                acceptance_criteria: criteria,
                status: Status::Backlog,
                dependencies: dedup(deps),
                plan_source: plan_source.clone(),
                origin: origin.unwrap_or(StoryOrigin {
                    kind: "manual".into(),
                    run_id: None,
                    proposal_key: None,
                }),
                created_by: ctx.actor.clone(),
                claimed_by: None,
                reviews: Vec::new(),
                approved_by: None,
                created_at_ms: ctx.now_ms,
                updated_at_ms: ctx.now_ms,
            };
            ch.next_story = Some(n);
            ch.events.push((
                "created".into(),
                Some(s.id.clone()),
                Some(1),
                json!({"title": s.title}),
            ));
            ch.result = json!({"story": s});
            ch.stories.push(s);
        }
        StoryAction::Update {
            id,
            expected_revision,
            title,
            description,
            acceptance_criteria,
            ..
        } => {
            let s = current(p, id, *expected_revision)?;
            if s.status.abandoned() || s.status == Status::Done {
                require(&ctx.actor, Authority::Human, "updating a closed story")?;
            }
            let mut n = bump(s);
            if let Some(t) = title {
                check_text("title", t, MAX_TITLE, true)?;
                n.title = t.trim().to_owned();
            }
            if let Some(d) = description {
                check_text("description", d, MAX_DESCRIPTION, false)?;
                n.description = d.clone();
            }
            if let Some(c) = acceptance_criteria {
                check_criteria(c)?;
                n.acceptance_criteria = c.clone();
            }
            // A content change invalidates the standing approval: what was approved changed.
            if n.approved_by.take().is_some() && n.status == Status::Ready {
                n.status = Status::Backlog;
            }
            ch.events.push((
                "updated".into(),
                Some(n.id.clone()),
                Some(n.revision),
                json!({"title": title, "description_changed": description.is_some(), "criteria_changed": acceptance_criteria.is_some()}),
            ));
            ch.result = json!({"story": n});
            ch.stories.push(n);
        }
        StoryAction::Transition {
            id,
            expected_revision,
            to,
            reason,
            ..
        } => {
            let s = current(p, id, *expected_revision)?;
            let from = s.status;
            if from == *to {
                return Err(StoryError::Transition(format!(
                    "{id} is already {}",
                    to.as_str()
                )));
            }
            if matches!(to, Status::Ready | Status::Done) && !matches!(ctx.actor, Actor::Human) {
                return Err(StoryError::Transition(format!(
                    "{} → {} needs an independent approval: use review with decision approve (or approve)",
                    from.as_str(),
                    to.as_str()
                )));
            }
            if !ordinary(from, *to) {
                require(
                    &ctx.actor,
                    Authority::Human,
                    &format!(
                        "the administrative transition {} → {}",
                        from.as_str(),
                        to.as_str()
                    ),
                )?;
            }
            let mut n = bump(s);
            n.status = *to;
            if *to == Status::InProgress && from == Status::Ready {
                let open: Vec<&String> = s
                    .dependencies
                    .iter()
                    .filter(|d| {
                        story_number(d)
                            .and_then(|x| p.stories.get(&x))
                            .is_none_or(|x| x.status != Status::Done)
                    })
                    .collect();
                if !open.is_empty() && !matches!(ctx.actor, Actor::Human) {
                    return Err(StoryError::Transition(format!(
                        "{id} cannot start: prerequisites not done: {}",
                        open.iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                n.claimed_by = ctx.actor.session().map(str::to_owned);
            }
            if matches!(to, Status::Backlog | Status::Ready) {
                n.claimed_by = None;
            }
            ch.events.push((
                "transitioned".into(),
                Some(n.id.clone()),
                Some(n.revision),
                json!({"from": from, "to": to, "reason": reason}),
            ));
            ch.result = json!({"story": n});
            ch.stories.push(n);
        }
        StoryAction::AddDependency {
            id,
            expected_revision,
            depends_on,
            ..
        } => {
            let s = current(p, id, *expected_revision)?;
            if story_number(depends_on)
                .and_then(|n| p.stories.get(&n))
                .is_none()
            {
                return Err(StoryError::NotFound(depends_on.clone()));
            }
            if s.dependencies.contains(depends_on) {
                return Err(StoryError::Invalid(format!(
                    "{id} already depends on {depends_on}"
                )));
            }
            // id → depends_on closes a cycle when depends_on already reaches id.
            if let Some(mut path) = dependency_path(p, depends_on, id) {
                path.insert(0, id.clone());
                return Err(StoryError::Cycle { path });
            }
            let mut n = bump(s);
            n.dependencies.push(depends_on.clone());
            ch.events.push((
                "dependency_added".into(),
                Some(n.id.clone()),
                Some(n.revision),
                json!({"depends_on": depends_on}),
            ));
            ch.result = json!({"story": n});
            ch.stories.push(n);
        }
        StoryAction::RemoveDependency {
            id,
            expected_revision,
            depends_on,
            ..
        } => {
            if matches!(ctx.actor, Actor::Agent { .. }) {
                return Err(StoryError::Forbidden {
                    action: "remove_dependency".into(),
                    needs: "human (not a bound agent session)",
                    has: "agent",
                });
            }
            let s = current(p, id, *expected_revision)?;
            if !s.dependencies.contains(depends_on) {
                return Err(StoryError::Invalid(format!(
                    "{id} does not depend on {depends_on}"
                )));
            }
            let mut n = bump(s);
            n.dependencies.retain(|d| d != depends_on);
            ch.events.push((
                "dependency_removed".into(),
                Some(n.id.clone()),
                Some(n.revision),
                json!({"depends_on": depends_on}),
            ));
            ch.result = json!({"story": n});
            ch.stories.push(n);
        }
        StoryAction::Review {
            id,
            expected_revision,
            decision,
            findings,
            note,
            ..
        } => review(
            ctx,
            p,
            &mut ch,
            id,
            *expected_revision,
            *decision,
            findings,
            note,
        )?,
        StoryAction::Approve {
            id,
            expected_revision,
            findings,
            note,
            ..
        } => review(
            ctx,
            p,
            &mut ch,
            id,
            *expected_revision,
            Decision::Approve,
            findings,
            note,
        )?,
        StoryAction::AddPlanSource { path, .. } => {
            let doc = plan::resolve(std::path::Path::new(&ctx.project), path)?;
            if let Some(existing) = p.sources.values().find(|s| s.path == doc.path) {
                ch.result = json!({"source": existing, "reused": true});
            } else {
                let n = g.next_source + 1;
                let src = PlanSource {
                    id: format!("ps-{n}"),
                    path: doc.path,
                    title: doc.title,
                    added_by: ctx.actor.clone(),
                    added_at_ms: ctx.now_ms,
                };
                ch.next_source = Some(n);
                ch.events.push((
                    "plan_source_added".into(),
                    None,
                    None,
                    json!({"source_id": src.id, "path": src.path}),
                ));
                ch.result = json!({"source": src, "reused": false});
                ch.sources_put.push(src);
            }
        }
        StoryAction::RemovePlanSource { id, .. } => {
            if !p.sources.contains_key(id) {
                return Err(StoryError::UnknownRecord {
                    kind: "plan source",
                    id: id.clone(),
                });
            }
            ch.sources_del.push(id.clone());
            ch.events.push((
                "plan_source_removed".into(),
                None,
                None,
                json!({"source_id": id}),
            ));
            ch.result = json!({"ok": true, "removed": id});
        }
        StoryAction::List { .. }
        | StoryAction::Get { .. }
        | StoryAction::ListPlanSources {}
        | StoryAction::PlanView { .. }
        | StoryAction::Events { .. } => {
            return Err(StoryError::Invalid("not a mutation".into()));
        }
    }
    Ok(ch)
}

#[allow(clippy::too_many_arguments)]
fn review(
    ctx: &Ctx,
    p: &ProjectState,
    ch: &mut Change,
    id: &str,
    expected: u64,
    decision: Decision,
    findings: &Option<Vec<Finding>>,
    note: &Option<String>,
) -> Result<(), StoryError> {
    let s = current(p, id, expected)?;
    if s.status.abandoned() || s.status == Status::Done {
        return Err(StoryError::Transition(format!(
            "{id} is {}: nothing to review",
            s.status.as_str()
        )));
    }
    independent(s, &ctx.actor)?;
    let findings = findings.clone().unwrap_or_default();
    for f in &findings {
        if f.criterion >= s.acceptance_criteria.len() {
            return Err(StoryError::Invalid(format!(
                "finding for criterion {} but {id} has {} acceptance criteria",
                f.criterion,
                s.acceptance_criteria.len()
            )));
        }
    }
    if decision == Decision::Approve && findings.iter().any(|f| !f.ok) {
        return Err(StoryError::Invalid(
            "an approving review cannot carry a failed finding; use decision changes_requested"
                .into(),
        ));
    }
    let mut n = s.clone();
    n.revision += 1;
    n.updated_at_ms = ctx.now_ms;
    n.reviews.push(Review {
        by: ctx.actor.clone(),
        decision,
        revision: s.revision,
        findings,
        note: note.clone(),
        at_ms: ctx.now_ms,
    });
    let from = s.status;
    match (decision, from) {
        (Decision::Approve, Status::Backlog) => n.status = Status::Ready,
        (Decision::Approve, Status::Review) => n.status = Status::Done,
        (Decision::ChangesRequested, Status::Review) => n.status = Status::InProgress,
        _ => {}
    }
    if decision == Decision::Approve {
        n.approved_by = Some(ctx.actor.clone());
    }
    ch.events.push((
        "reviewed".into(),
        Some(n.id.clone()),
        Some(n.revision),
        json!({"decision": decision, "reviewed_revision": s.revision, "from": from, "to": n.status}),
    ));
    ch.result = json!({"story": n});
    ch.stories.push(n);
    Ok(())
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    v.into_iter().filter(|x| seen.insert(x.clone())).collect()
}

#[cfg(test)]
mod tests;
