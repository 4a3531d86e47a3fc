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

mod action;
mod compute;
mod record;

pub use action::*;
use compute::*;
pub use record::*;

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

#[cfg(test)]
mod tests;
