//! A session list that costs what changed: rows by key, each with the revision of its last
//! change, and a bounded log of removals, so `GET /sessions?since=REVISION` answers the rows
//! added, changed and removed since then without rebuilding the list, and an unchanged list
//! is known by its revision alone (the `ETag`).
//!
//! Pure: no clock, no IO. Deliberately absent: which rows exist — the owner feeds them in
//! ([`RowFeed::sync`] per key prefix: the whole local list, or one connection's rows as its
//! mirror changes).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;

/// Removals remembered: a `since` older than the oldest one forgotten is answered "gone"
/// (refetch the whole list). 4,096 covers a hub of 500 nodes losing and regaining 8 rows
/// each between two polls.
pub const KEPT_REMOVALS: usize = 4_096;

#[derive(Debug)]
struct Entry {
    /// The revision that added it (a row added and changed since `since` is "added").
    created: u64,
    /// The revision of its last change.
    rev: u64,
    row: Arc<Value>,
}

/// Rows with revisions (see the module docs).
#[derive(Debug)]
pub struct RowFeed {
    rev: u64,
    rows: BTreeMap<String, Entry>,
    /// Keys by the revision of their last change: a delta walks only what changed.
    by_rev: BTreeMap<u64, String>,
    /// Removals, oldest first, at most `window`.
    removed: VecDeque<(u64, String)>,
    /// Changes at or before this revision may have lost their removals.
    floor: u64,
    window: usize,
    /// Names this feed's revisions apart from another process's (a restarted hub counts from
    /// 0 again): the owner stamps it, e.g. with its start time.
    epoch: u64,
}

impl Default for RowFeed {
    fn default() -> Self {
        Self::with_window(KEPT_REMOVALS)
    }
}

/// What changed since a revision.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Delta {
    /// The revision now: the next `since`.
    pub revision: u64,
    /// Rows that were not there at `since`.
    pub added: Vec<Arc<Value>>,
    /// Rows that were there and changed.
    pub changed: Vec<Arc<Value>>,
    /// Keys of rows that left (and are not back).
    pub removed: Vec<String>,
}

impl RowFeed {
    /// An empty feed remembering `window` removals.
    pub fn with_window(window: usize) -> Self {
        Self {
            rev: 0,
            rows: BTreeMap::new(),
            by_rev: BTreeMap::new(),
            removed: VecDeque::new(),
            floor: 0,
            window: window.max(1),
            epoch: 0,
        }
    }

    /// An empty feed whose revisions carry `epoch`.
    pub fn stamped(epoch: u64) -> Self {
        Self {
            epoch,
            ..Self::default()
        }
    }

    /// The stamp given at creation.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The revision of the last change.
    pub fn revision(&self) -> u64 {
        self.rev
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Adds or replaces the row `key`; an equal row changes nothing.
    pub fn upsert(&mut self, key: &str, row: Value) {
        if let Some(e) = self.rows.get_mut(key) {
            if *e.row == row {
                return;
            }
            self.rev += 1;
            self.by_rev.remove(&e.rev);
            e.rev = self.rev;
            e.row = Arc::new(row);
        } else {
            self.rev += 1;
            self.rows.insert(
                key.to_owned(),
                Entry {
                    created: self.rev,
                    rev: self.rev,
                    row: Arc::new(row),
                },
            );
        }
        self.by_rev.insert(self.rev, key.to_owned());
    }

    /// Removes the row `key`, remembered within the window.
    pub fn remove(&mut self, key: &str) {
        let Some(e) = self.rows.remove(key) else {
            return;
        };
        self.by_rev.remove(&e.rev);
        self.rev += 1;
        self.removed.push_back((self.rev, key.to_owned()));
        while self.removed.len() > self.window {
            if let Some((r, _)) = self.removed.pop_front() {
                self.floor = r;
            }
        }
    }

    /// Makes the rows whose key starts with `prefix` exactly `rows` (key, row): the changed
    /// ones get a new revision, the missing ones are removed. Costs the rows under `prefix`.
    pub fn sync(&mut self, prefix: &str, rows: Vec<(String, Value)>) {
        let gone: Vec<String> = self
            .rows
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(k, _)| !rows.iter().any(|(r, _)| r == *k))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            self.remove(&k);
        }
        for (k, row) in rows {
            self.upsert(&k, row);
        }
    }

    /// What changed after revision `since`; `None` when that is older than the removals
    /// kept, or newer than this feed (another process's revision): refetch the whole list.
    pub fn since(&self, since: u64) -> Option<Delta> {
        if since < self.floor || since > self.rev {
            return None;
        }
        let mut d = Delta {
            revision: self.rev,
            ..Delta::default()
        };
        for k in self.by_rev.range(since + 1..).map(|(_, k)| k) {
            let e = &self.rows[k];
            if e.created > since {
                d.added.push(e.row.clone());
            } else {
                d.changed.push(e.row.clone());
            }
        }
        let first = self.removed.partition_point(|(r, _)| *r <= since);
        for (_, k) in self.removed.range(first..) {
            if !self.rows.contains_key(k) && !d.removed.contains(k) {
                d.removed.push(k.clone());
            }
        }
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ids(v: &[Arc<Value>]) -> Vec<String> {
        v.iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn a_delta_names_what_was_added_changed_and_removed_and_nothing_else() {
        let mut f = RowFeed::default();
        f.sync(
            "b/",
            vec![
                ("b/1".into(), json!({"id": "1"})),
                ("b/2".into(), json!({"id": "2"})),
            ],
        );
        f.sync("c/", vec![("c/1".into(), json!({"id": "c1"}))]);
        let r0 = f.revision();
        // Unchanged rows change nothing.
        f.sync("c/", vec![("c/1".into(), json!({"id": "c1"}))]);
        assert_eq!(f.revision(), r0);
        assert_eq!(
            f.since(r0).unwrap(),
            Delta {
                revision: r0,
                ..Delta::default()
            }
        );

        f.sync(
            "b/",
            vec![
                ("b/1".into(), json!({"id": "1", "state": "busy"})),
                ("b/3".into(), json!({"id": "3"})),
            ],
        );
        let d = f.since(r0).unwrap();
        assert_eq!(ids(&d.added), ["3"]);
        assert_eq!(ids(&d.changed), ["1"]);
        assert_eq!(d.removed, ["b/2"]);
        assert_eq!(d.revision, f.revision());
        // Other prefixes are untouched; an added-then-changed row is still "added".
        f.upsert("b/3", json!({"id": "3", "x": 1}));
        let d = f.since(r0).unwrap();
        assert_eq!(ids(&d.added), ["3"]);
        assert_eq!(f.len(), 3);
        // A row removed and back is not "removed".
        f.remove("b/3");
        f.upsert("b/3", json!({"id": "3"}));
        assert!(f.since(r0).unwrap().removed.iter().all(|k| k != "b/3"));
        // Nothing after the present revision.
        assert!(f.since(f.revision()).unwrap().added.is_empty());
    }

    #[test]
    fn a_revision_older_than_the_kept_removals_or_from_elsewhere_is_gone() {
        let mut f = RowFeed::with_window(2);
        for i in 0..3 {
            f.upsert(&format!("k{i}"), json!(i));
        }
        let r = f.revision();
        f.remove("k0");
        f.remove("k1");
        assert_eq!(f.since(r).unwrap().removed, ["k0", "k1"]);
        f.remove("k2");
        // k0's removal is forgotten: a client at `r` cannot be told about it.
        assert!(f.since(r).is_none());
        assert!(f.since(r + 1).is_some());
        assert!(f.since(f.revision() + 1).is_none());
    }
}
