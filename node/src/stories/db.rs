//! The story service's `redb` tables. Each record is JSON under a composite key; the service
//! decides what to write and commits all of one action's writes in one transaction, so a
//! crash leaves either the whole action or none of it.

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{StoryError, store_err};
use crate::store::Store;

/// Stories: (project, number) → JSON `Story` (the current revision).
pub const STORIES: TableDefinition<'_, (&str, u64), &[u8]> = TableDefinition::new("stories");

/// Story events: (project, seq) → JSON `StoryEvent`. Seq is gapless per project from 1.
pub const STORY_EVENTS: TableDefinition<'_, (&str, u64), &[u8]> =
    TableDefinition::new("story_events");

/// Plan sources: (project, source id) → JSON `PlanSource`.
pub const PLAN_SOURCES: TableDefinition<'_, (&str, &str), &[u8]> =
    TableDefinition::new("story_plan_sources");

/// Idempotency keys: (scope, key) → JSON `{hash, result}`. Scope is a project (stories) or
/// `workflow:<project>` (runs).
pub const IDEMPOTENCY: TableDefinition<'_, (&str, &str), &[u8]> =
    TableDefinition::new("story_idempotency");

/// Counters: `next_story`, `next_run`, `next_source`.
pub const META: TableDefinition<'_, &str, u64> = TableDefinition::new("story_meta");

/// Workflow definitions: (project, definition id, revision) → JSON `Definition`.
pub const DEFINITIONS: TableDefinition<'_, (&str, &str, u64), &[u8]> =
    TableDefinition::new("workflow_definitions");

/// Workflow runs: run id → JSON `Run` (the current snapshot).
pub const RUNS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("workflow_runs");

/// Run events: (run id, seq) → JSON `RunEvent`. Seq is gapless per run from 1.
pub const RUN_EVENTS: TableDefinition<'_, (&str, u64), &[u8]> =
    TableDefinition::new("workflow_run_events");

/// Creates every table (idempotent).
pub fn create_tables(store: &Store) -> Result<(), StoryError> {
    let tx = store.database().begin_write().map_err(store_err)?;
    tx.open_table(STORIES).map_err(store_err)?;
    tx.open_table(STORY_EVENTS).map_err(store_err)?;
    tx.open_table(PLAN_SOURCES).map_err(store_err)?;
    tx.open_table(IDEMPOTENCY).map_err(store_err)?;
    tx.open_table(META).map_err(store_err)?;
    tx.open_table(DEFINITIONS).map_err(store_err)?;
    tx.open_table(RUNS).map_err(store_err)?;
    tx.open_table(RUN_EVENTS).map_err(store_err)?;
    tx.commit().map_err(store_err)
}

/// JSON bytes of a record.
pub fn to_bytes(v: &impl Serialize) -> Result<Vec<u8>, StoryError> {
    serde_json::to_vec(v).map_err(store_err)
}

/// A record from JSON bytes.
pub fn from_bytes<T: DeserializeOwned>(b: &[u8]) -> Result<T, StoryError> {
    serde_json::from_slice(b).map_err(store_err)
}

/// A stored idempotency entry.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct IdemEntry {
    /// What the key was bound to.
    pub hash: String,
    /// The first result.
    pub result: serde_json::Value,
}

/// The idempotency entry of (scope, key), read inside a write transaction.
pub fn idem_get(
    tx: &WriteTransaction,
    scope: &str,
    key: &str,
) -> Result<Option<IdemEntry>, StoryError> {
    let t = tx.open_table(IDEMPOTENCY).map_err(store_err)?;
    let v = t.get((scope, key)).map_err(store_err)?;
    v.map(|v| from_bytes(v.value())).transpose()
}

/// Records an idempotency entry.
pub fn idem_put(
    tx: &WriteTransaction,
    scope: &str,
    key: &str,
    e: &IdemEntry,
) -> Result<(), StoryError> {
    let mut t = tx.open_table(IDEMPOTENCY).map_err(store_err)?;
    t.insert((scope, key), to_bytes(e)?.as_slice())
        .map_err(store_err)?;
    Ok(())
}

/// Reads a counter (`default` when absent).
pub fn meta_get(tx: &WriteTransaction, key: &str, default: u64) -> Result<u64, StoryError> {
    let t = tx.open_table(META).map_err(store_err)?;
    Ok(t.get(key)
        .map_err(store_err)?
        .map_or(default, |v| v.value()))
}

/// Writes a counter.
pub fn meta_put(tx: &WriteTransaction, key: &str, v: u64) -> Result<(), StoryError> {
    let mut t = tx.open_table(META).map_err(store_err)?;
    t.insert(key, v).map_err(store_err)?;
    Ok(())
}
