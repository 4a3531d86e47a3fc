//! The progress journal in `redb`: append-only per project, newest entries kept, oldest pruned.
//!
//! Every entry gets a node-wide monotonic id (the list cursor). An in-memory index per project
//! (ids in order, split by blocked and by PTY) is rebuilt from the table at open, so a page and
//! its `total` cost a binary search and a few point reads, whatever the journal's size. The
//! table is the truth; the index only mirrors it. Callers validate; this file only stores.
//!
//! Retention: each project keeps its newest [`PROJECT_RETENTION`] entries; the append that
//! goes past the bound removes that project's oldest entry in the same transaction. Nothing
//! else ever deletes, and no entry is rewritten.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::store::Store;

/// Entries: (project, id) → JSON [`Entry`].
const ENTRIES: TableDefinition<'_, (&str, u64), &[u8]> = TableDefinition::new("progress_entries");

/// Counters: `next_id` → the id the next append gets.
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("progress_meta");

/// Entries one project keeps; the oldest go first past this.
pub const PROJECT_RETENTION: usize = 10_000;

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A step finished (reported by the agent).
    Done,
    /// The agent cannot go on without someone (reported by the agent).
    Blocked,
    /// What the agent set out to do, observed by TUIC from its `intent:` marker.
    Intent,
}

impl Kind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Blocked => "blocked",
            Self::Intent => "intent",
        }
    }
}

/// Who wrote an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// The agent, through the `progress` tool.
    Agent,
    /// TUIC, from the agent's terminal output.
    Observed,
    /// A workflow run (issue 19's runner appends through [`Journal::append`] with this).
    Workflow,
}

/// One journal entry, as stored and as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Node-wide monotonic id; the list cursor.
    pub id: u64,
    /// The project (canonical repository root) the entry belongs to.
    pub project: String,
    /// `done`, `blocked` or `intent`.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// What happened, one short paragraph (bounded by the service).
    pub text: String,
    /// The plan step it concerns, when the agent named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Wall-clock ms when it was journaled.
    pub created_at_ms: u64,
    /// Who wrote it.
    pub origin: Origin,
    /// The reporting terminal, when the caller had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty_id: Option<String>,
    /// The reporting agent's TUIC identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuic_session: Option<String>,
    /// The agent's display name (registered name, else the terminal's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// The detected agent CLI (`claude`, `codex`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
    /// The workflow run that appended it, for [`Origin::Workflow`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// An entry to append: everything but the id and the time, which the journal assigns.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEntry {
    /// Canonical project root.
    pub project: String,
    /// Kind.
    pub kind: Kind,
    /// Text (already validated and redacted).
    pub text: String,
    /// Step.
    pub step: Option<String>,
    /// Writer.
    pub origin: Origin,
    /// Terminal.
    pub pty_id: Option<String>,
    /// Identity.
    pub tuic_session: Option<String>,
    /// Display name.
    pub agent_name: Option<String>,
    /// Agent CLI.
    pub agent_type: Option<String>,
    /// Workflow run.
    pub run_id: Option<String>,
}

/// Filters of a list, applied before paging.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Only `blocked` entries.
    pub blocked_only: bool,
    /// Only entries of this terminal.
    pub pty_id: Option<String>,
}

/// One page, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The entries.
    pub entries: Vec<Entry>,
    /// Matching entries before the cursor (this page included).
    pub total: usize,
    /// The cursor of the next page; `None` on the final page.
    pub next_cursor: Option<u64>,
}

/// A project's summary for `GET /progress/projects`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProjectSummary {
    /// Canonical project root.
    pub project: String,
    /// Retained entries.
    pub entries: usize,
    /// Retained `blocked` entries.
    pub blocked: usize,
    /// Time of the newest entry.
    pub last_at_ms: u64,
}

/// Why the journal failed.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The store refused (disk, corruption); nothing was appended.
    #[error("progress journal store: {0}")]
    Store(String),
}

fn store_err(e: impl std::fmt::Display) -> JournalError {
    JournalError::Store(e.to_string())
}

#[derive(Debug, Default)]
struct ProjectIndex {
    all: VecDeque<u64>,
    blocked: VecDeque<u64>,
    by_pty: HashMap<String, VecDeque<u64>>,
    blocked_by_pty: HashMap<String, VecDeque<u64>>,
    last_at_ms: u64,
}

impl ProjectIndex {
    fn add(&mut self, id: u64, kind: Kind, pty: Option<&str>, at_ms: u64) {
        self.all.push_back(id);
        let blocked = kind == Kind::Blocked;
        if blocked {
            self.blocked.push_back(id);
        }
        if let Some(p) = pty {
            self.by_pty.entry(p.to_owned()).or_default().push_back(id);
            if blocked {
                self.blocked_by_pty
                    .entry(p.to_owned())
                    .or_default()
                    .push_back(id);
            }
        }
        self.last_at_ms = self.last_at_ms.max(at_ms);
    }

    /// Drops the oldest entry (`id`, the front of every list that holds it).
    fn remove_oldest(&mut self, id: u64, kind: Kind, pty: Option<&str>) {
        fn pop(q: &mut VecDeque<u64>, id: u64) {
            if q.front() == Some(&id) {
                q.pop_front();
            }
        }
        pop(&mut self.all, id);
        if kind == Kind::Blocked {
            pop(&mut self.blocked, id);
        }
        if let Some(p) = pty {
            for map in [&mut self.by_pty, &mut self.blocked_by_pty] {
                if let Some(q) = map.get_mut(p) {
                    pop(q, id);
                    if q.is_empty() {
                        map.remove(p);
                    }
                }
            }
        }
    }

    fn ids(&self, f: &Filter) -> Option<&VecDeque<u64>> {
        match (&f.pty_id, f.blocked_only) {
            (None, false) => Some(&self.all),
            (None, true) => Some(&self.blocked),
            (Some(p), false) => self.by_pty.get(p),
            (Some(p), true) => self.blocked_by_pty.get(p),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    projects: HashMap<String, ProjectIndex>,
    next_id: u64,
}

/// The journal: the table plus its index. Blocking calls; async callers use `spawn_blocking`.
#[derive(Debug)]
pub struct Journal {
    store: Arc<Store>,
    inner: Mutex<Inner>,
    /// Entries a project keeps ([`PROJECT_RETENTION`]; smaller in tests).
    retention: usize,
}

impl Journal {
    /// Opens the journal's tables and rebuilds the index from them.
    pub fn open(store: Arc<Store>) -> anyhow::Result<Self> {
        Self::open_with_retention(store, PROJECT_RETENTION)
    }

    /// [`Journal::open`] with another per-project bound.
    pub fn open_with_retention(store: Arc<Store>, retention: usize) -> anyhow::Result<Self> {
        let retention = retention.max(1);
        let db = store.database();
        let tx = db.begin_write()?;
        tx.open_table(ENTRIES)?;
        tx.open_table(META)?;
        tx.commit()?;
        let mut inner = Inner::default();
        let tx = db.begin_read()?;
        let t = tx.open_table(ENTRIES)?;
        let mut max_id = 0;
        for row in t.iter()? {
            let (k, v) = row?;
            let (project, id) = k.value();
            max_id = max_id.max(id);
            // An unreadable record stays in the table but out of the index (never listed).
            let Ok(e) = serde_json::from_slice::<Entry>(v.value()) else {
                tracing::warn!(id, "unreadable progress entry skipped");
                continue;
            };
            inner.projects.entry(project.to_owned()).or_default().add(
                id,
                e.kind,
                e.pty_id.as_deref(),
                e.created_at_ms,
            );
        }
        let meta = tx.open_table(META)?;
        let stored_next = meta.get("next_id")?.map(|v| v.value()).unwrap_or(1);
        inner.next_id = stored_next.max(max_id + 1);
        drop(meta);
        drop(t);
        Ok(Self {
            store,
            inner: Mutex::new(inner),
            retention,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends one entry, committed (durable) before it returns; prunes the project's oldest
    /// entry past [`PROJECT_RETENTION`] in the same transaction.
    pub fn append(&self, new: NewEntry, now_ms: u64) -> Result<Entry, JournalError> {
        let mut g = self.lock();
        let id = g.next_id;
        let entry = Entry {
            id,
            project: new.project,
            kind: new.kind,
            text: new.text,
            step: new.step,
            created_at_ms: now_ms,
            origin: new.origin,
            pty_id: new.pty_id,
            tuic_session: new.tuic_session,
            agent_name: new.agent_name,
            agent_type: new.agent_type,
            run_id: new.run_id,
        };
        let bytes = serde_json::to_vec(&entry).map_err(store_err)?;
        let oldest = g
            .projects
            .get(&entry.project)
            .filter(|p| p.all.len() >= self.retention)
            .and_then(|p| p.all.front().copied());
        let tx = self.store.database().begin_write().map_err(store_err)?;
        let pruned = {
            let mut t = tx.open_table(ENTRIES).map_err(store_err)?;
            t.insert((entry.project.as_str(), id), bytes.as_slice())
                .map_err(store_err)?;
            let pruned = match oldest {
                Some(old) => t
                    .remove((entry.project.as_str(), old))
                    .map_err(store_err)?
                    .and_then(|v| serde_json::from_slice::<Entry>(v.value()).ok())
                    .map(|e| (old, e.kind, e.pty_id)),
                None => None,
            };
            tx.open_table(META)
                .map_err(store_err)?
                .insert("next_id", id + 1)
                .map_err(store_err)?;
            pruned
        };
        tx.commit().map_err(store_err)?;
        g.next_id = id + 1;
        let p = g.projects.entry(entry.project.clone()).or_default();
        if let Some((old, kind, pty)) = pruned {
            p.remove_oldest(old, kind, pty.as_deref());
        }
        p.add(id, entry.kind, entry.pty_id.as_deref(), now_ms);
        Ok(entry)
    }

    /// One page of a project, newest first: the `limit` matching entries older than
    /// `cursor` (all, without one). `limit` must already be clamped.
    pub fn list(
        &self,
        project: &str,
        filter: &Filter,
        limit: usize,
        cursor: Option<u64>,
    ) -> Result<Page, JournalError> {
        let (ids, total) = {
            let g = self.lock();
            match g.projects.get(project).and_then(|p| p.ids(filter)) {
                None => (Vec::new(), 0),
                Some(q) => {
                    let n = match cursor {
                        Some(c) => q.partition_point(|&id| id < c),
                        None => q.len(),
                    };
                    let from = n.saturating_sub(limit.max(1));
                    (q.range(from..n).rev().copied().collect::<Vec<_>>(), n)
                }
            }
        };
        let next_cursor = if total > ids.len() {
            ids.last().copied()
        } else {
            None
        };
        let mut entries = Vec::with_capacity(ids.len());
        if !ids.is_empty() {
            let tx = self.store.database().begin_read().map_err(store_err)?;
            let t = tx.open_table(ENTRIES).map_err(store_err)?;
            for id in ids {
                if let Some(v) = t.get((project, id)).map_err(store_err)?
                    && let Ok(e) = serde_json::from_slice::<Entry>(v.value())
                {
                    entries.push(e);
                }
            }
        }
        Ok(Page {
            entries,
            total,
            next_cursor,
        })
    }

    /// Every project with retained entries, most recently active first.
    pub fn projects(&self) -> Vec<ProjectSummary> {
        let g = self.lock();
        let mut v: Vec<ProjectSummary> = g
            .projects
            .iter()
            .filter(|(_, p)| !p.all.is_empty())
            .map(|(name, p)| ProjectSummary {
                project: name.clone(),
                entries: p.all.len(),
                blocked: p.blocked.len(),
                last_at_ms: p.last_at_ms,
            })
            .collect();
        v.sort_by(|a, b| {
            b.last_at_ms
                .cmp(&a.last_at_ms)
                .then_with(|| a.project.cmp(&b.project))
        });
        v
    }

    /// Retained entries over every project.
    pub fn len(&self) -> usize {
        self.lock().projects.values().map(|p| p.all.len()).sum()
    }

    /// Whether the journal holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(project: &str, kind: Kind, pty: Option<&str>, text: &str) -> NewEntry {
        NewEntry {
            project: project.into(),
            kind,
            text: text.into(),
            step: None,
            origin: Origin::Agent,
            pty_id: pty.map(str::to_owned),
            tuic_session: None,
            agent_name: None,
            agent_type: None,
            run_id: None,
        }
    }

    fn open(dir: &std::path::Path) -> Journal {
        let store = Arc::new(Store::open(&dir.join("state.redb")).unwrap());
        Journal::open_with_retention(store, RETAIN).unwrap()
    }

    const RETAIN: usize = 50;

    #[test]
    fn pages_newest_first_without_overlap_and_filters_before_paging() {
        let d = tempfile::tempdir().unwrap();
        let j = open(d.path());
        for i in 0..20u64 {
            let kind = if i % 3 == 0 {
                Kind::Blocked
            } else {
                Kind::Done
            };
            let pty = if i % 2 == 0 { "pty-a" } else { "pty-b" };
            j.append(new("/p", kind, Some(pty), &format!("e{i}")), 1_000 + i)
                .unwrap();
        }
        j.append(new("/q", Kind::Done, None, "other"), 5_000)
            .unwrap();
        let mut seen = Vec::new();
        let mut cursor = None;
        let mut totals = Vec::new();
        loop {
            let p = j.list("/p", &Filter::default(), 6, cursor).unwrap();
            totals.push(p.total);
            seen.extend(p.entries.iter().map(|e| e.text.clone()));
            match p.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        let want: Vec<String> = (0..20).rev().map(|i| format!("e{i}")).collect();
        assert_eq!(seen, want);
        assert_eq!(totals, [20, 14, 8, 2]);
        let blocked = j
            .list(
                "/p",
                &Filter {
                    blocked_only: true,
                    pty_id: Some("pty-a".into()),
                },
                100,
                None,
            )
            .unwrap();
        let texts: Vec<_> = blocked.entries.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(texts, ["e18", "e12", "e6", "e0"]);
        assert_eq!(blocked.total, 4);
        assert_eq!(blocked.next_cursor, None);
        let projects = j.projects();
        assert_eq!(projects[0].project, "/q");
        assert_eq!(projects[1].entries, 20);
        assert_eq!(projects[1].blocked, 7);
    }

    #[test]
    fn survives_reopen_and_keeps_ids_monotonic() {
        let d = tempfile::tempdir().unwrap();
        let first = {
            let j = open(d.path());
            j.append(new("/p", Kind::Done, None, "a"), 1).unwrap();
            j.append(new("/p", Kind::Blocked, Some("x"), "b"), 2)
                .unwrap()
                .id
        };
        let j = open(d.path());
        let p = j.list("/p", &Filter::default(), 8, None).unwrap();
        assert_eq!(p.entries.len(), 2);
        assert_eq!(p.entries[0].text, "b");
        let next = j.append(new("/p", Kind::Done, None, "c"), 3).unwrap();
        assert!(next.id > first);
    }

    #[test]
    fn retention_prunes_the_oldest_of_that_project_only() {
        let d = tempfile::tempdir().unwrap();
        let j = open(d.path());
        j.append(new("/other", Kind::Done, None, "keep"), 0)
            .unwrap();
        for i in 0..(RETAIN + 3) {
            let kind = if i < 2 { Kind::Blocked } else { Kind::Done };
            j.append(new("/p", kind, Some("t"), &format!("e{i}")), i as u64)
                .unwrap();
        }
        let p = j.list("/p", &Filter::default(), 1, Some(u64::MAX)).unwrap();
        assert_eq!(p.total, RETAIN);
        let oldest = j.list("/p", &Filter::default(), 100, None).unwrap();
        assert_eq!(oldest.total, RETAIN);
        let blocked = j
            .list(
                "/p",
                &Filter {
                    blocked_only: true,
                    pty_id: None,
                },
                10,
                None,
            )
            .unwrap();
        assert_eq!(blocked.total, 0, "both blocked entries were the oldest");
        assert_eq!(
            j.list("/other", &Filter::default(), 8, None).unwrap().total,
            1
        );
        // The index rebuilt from the table agrees.
        drop(j);
        let j = open(d.path());
        assert_eq!(j.len(), RETAIN + 1);
    }
}
