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
use super::env::StoriesEnv;
use super::service::{Status, parse_cursor};
use super::{Actor, Authority, StoryError, payload_hash, require, store_err};
use crate::store::Store;

mod actions;
mod model;

pub use actions::*;
pub use model::*;

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
