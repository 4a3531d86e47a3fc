//! The node's embedded store: one `redb` file, `state.redb`, in the config dir.
//!
//! Durable records live here: login sessions, repositories, and the cross-host outboxes and
//! dedupe rings of federated mail (`crate::peer`); the progress journal and stories as those
//! features land. What the
//! spec keeps in memory (inboxes, tasks, protocol sessions) deliberately is not.
//! Every call is blocking; async callers use `spawn_blocking`.

use std::path::Path;

use anyhow::Context;
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};

/// Login sessions: sha256(token) hex → expiry, unix ms.
const LOGIN_SESSIONS: TableDefinition<'_, &str, u64> = TableDefinition::new("login_sessions");

/// Repositories: canonical path → JSON record.
const REPOS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("repositories");

/// Cross-host outboxes: key (a connection id, or [`UPLINK_KEY`]) → JSON `peer::Outbox`.
const PEER_OUTBOXES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("peer_outboxes");

/// Dedupe rings of forwarded mail: recipient → JSON of that recipient's ring
/// (`DedupeRings::export_ring`), so a delivery rewrites one ring, not all of them.
const PEER_DEDUPE: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("peer_dedupe");

/// The key of a node's outbox towards its hub (never a valid connection id: it has `@`).
pub const UPLINK_KEY: &str = "@uplink";

/// Handle to the store.
#[derive(Debug)]
pub struct Store {
    db: Database,
}

impl Store {
    /// Opens (creating) the store file.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let db = Database::create(path)
            .with_context(|| format!("opening the store {}", path.display()))?;
        let tx = db.begin_write()?;
        tx.open_table(LOGIN_SESSIONS)?;
        tx.open_table(REPOS)?;
        tx.open_table(PEER_OUTBOXES)?;
        tx.open_table(PEER_DEDUPE)?;
        tx.commit()?;
        Ok(Self { db })
    }

    /// Every stored outbox (key → JSON).
    pub fn peer_outboxes(&self) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(PEER_OUTBOXES)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push((k.value().to_owned(), v.value().to_vec()));
        }
        Ok(out)
    }

    /// Replaces one outbox record. Committed (durable) before it returns, so a send answered
    /// `accepted` after this survives a `kill -9`.
    pub fn put_peer_outbox(&self, key: &str, json: &[u8]) -> anyhow::Result<()> {
        let tx = self.db.begin_write()?;
        tx.open_table(PEER_OUTBOXES)?.insert(key, json)?;
        tx.commit()?;
        Ok(())
    }

    /// Every stored dedupe ring (recipient → JSON).
    pub fn peer_rings(&self) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(PEER_DEDUPE)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push((k.value().to_owned(), v.value().to_vec()));
        }
        Ok(out)
    }

    /// Replaces (or, with `None`, removes) one recipient's ring; committed before it returns.
    pub fn put_peer_ring(&self, recipient: &str, json: Option<&[u8]>) -> anyhow::Result<()> {
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(PEER_DEDUPE)?;
            match json {
                Some(j) => {
                    t.insert(recipient, j)?;
                }
                None => {
                    t.remove(recipient)?;
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// All repositories, ordered by path.
    pub fn repos(&self) -> anyhow::Result<Vec<crate::repos::Repo>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(REPOS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (_, v) = row?;
            out.push(serde_json::from_slice(v.value())?);
        }
        Ok(out)
    }

    /// One repository by canonical path.
    pub fn repo(&self, path: &str) -> anyhow::Result<Option<crate::repos::Repo>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(REPOS)?;
        Ok(match t.get(path)? {
            Some(v) => Some(serde_json::from_slice(v.value())?),
            None => None,
        })
    }

    /// Inserts or replaces a repository record.
    pub fn put_repo(&self, repo: &crate::repos::Repo) -> anyhow::Result<()> {
        let bytes = serde_json::to_vec(repo)?;
        let tx = self.db.begin_write()?;
        tx.open_table(REPOS)?
            .insert(repo.path.as_str(), bytes.as_slice())?;
        tx.commit()?;
        Ok(())
    }

    /// All login sessions (hash → expiry ms).
    pub fn login_sessions(&self) -> anyhow::Result<Vec<(String, u64)>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(LOGIN_SESSIONS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push((k.value().to_owned(), v.value()));
        }
        Ok(out)
    }

    /// Inserts or extends a login session.
    pub fn put_login_session(&self, hash: &str, expires_ms: u64) -> anyhow::Result<()> {
        let tx = self.db.begin_write()?;
        tx.open_table(LOGIN_SESSIONS)?.insert(hash, expires_ms)?;
        tx.commit()?;
        Ok(())
    }

    /// Removes login sessions that expired before `now_ms`.
    pub fn prune_login_sessions(&self, now_ms: u64) -> anyhow::Result<usize> {
        let tx = self.db.begin_write()?;
        let removed = {
            let mut t = tx.open_table(LOGIN_SESSIONS)?;
            let before = t.len()?;
            t.retain(|_, exp| exp >= now_ms)?;
            (before - t.len()?) as usize
        };
        tx.commit()?;
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_sessions_persist_and_prune() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.redb");
        {
            let s = Store::open(&p).unwrap();
            s.put_login_session("a", 10).unwrap();
            s.put_login_session("b", 100).unwrap();
        }
        let s = Store::open(&p).unwrap();
        assert_eq!(s.login_sessions().unwrap().len(), 2);
        assert_eq!(s.prune_login_sessions(50).unwrap(), 1);
        assert_eq!(s.login_sessions().unwrap(), vec![("b".to_owned(), 100)]);
    }

    #[test]
    fn peer_outboxes_and_rings_persist_per_key() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.redb");
        {
            let s = Store::open(&p).unwrap();
            s.put_peer_outbox(UPLINK_KEY, b"{\"a\":1}").unwrap();
            s.put_peer_outbox("nodeb", b"{}").unwrap();
            s.put_peer_outbox(UPLINK_KEY, b"{\"a\":2}").unwrap();
            s.put_peer_ring("bob", Some(b"[]")).unwrap();
            s.put_peer_ring("carol", Some(b"[1]")).unwrap();
            s.put_peer_ring("carol", None).unwrap();
        }
        let s = Store::open(&p).unwrap();
        let mut o = s.peer_outboxes().unwrap();
        o.sort();
        assert_eq!(
            o,
            vec![
                ("@uplink".to_owned(), b"{\"a\":2}".to_vec()),
                ("nodeb".to_owned(), b"{}".to_vec())
            ]
        );
        assert_eq!(
            s.peer_rings().unwrap(),
            vec![("bob".to_owned(), b"[]".to_vec())]
        );
    }
}
