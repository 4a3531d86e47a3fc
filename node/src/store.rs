//! The node's embedded store: one `redb` file, `state.redb`, in the config dir.
//!
//! It opens the database (`state.redb` backups and restores are `crate::ops::service`'s).
//! Records still kept here: login sessions (`logins`), the cross-host outboxes and dedupe rings
//! of federated mail (`crate::mail`) and the sessions kept by holder processes
//! (`crate::session::held`). Services that own their tables open them through
//! [`Store::database`]: repository records (`crate::repos`), the progress journal, stories,
//! workflows, automations, audit, shares. What the spec keeps in memory (inboxes, tasks,
//! protocol sessions) deliberately is not.
//! Every call is blocking; async callers use `spawn_blocking`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};

/// Login sessions as earlier versions kept them: sha256(token) hex → expiry, unix ms. Moved
/// into [`LOGINS`] when the store opens.
const LOGIN_SESSIONS: TableDefinition<'_, &str, u64> = TableDefinition::new("login_sessions");

/// Login sessions: sha256(token) hex → JSON `auth::LoginSession` (creation, last use,
/// expiry, address, user agent).
const LOGINS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("logins");

/// Cross-host outboxes as whole records (key → JSON `peer::Outbox`): written by earlier
/// versions, read once and moved into [`PEER_OUTBOX_MESSAGES`].
const PEER_OUTBOXES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("peer_outboxes");

/// Cross-host outboxes, one record per held message: (outbox key — a connection id, or
/// [`UPLINK_KEY`] — and the message's sequence number) → JSON record. A change writes or
/// removes one message's record, however full the outbox is.
const PEER_OUTBOX_MESSAGES: TableDefinition<'_, (&str, u64), &[u8]> =
    TableDefinition::new("peer_outbox_messages");

/// Dedupe rings of forwarded mail: recipient → JSON of that recipient's ring
/// (`DedupeRings::export_ring`), so a delivery rewrites one ring, not all of them.
const PEER_DEDUPE: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("peer_dedupe");

/// Sessions whose PTY a holder process keeps (`crate::session::held`): PTY id → JSON record,
/// so a restarted node re-adopts them under the same names.
const HELD_SESSIONS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("held_sessions");

/// One outbox's stored message records: `(seq, record)` in sequence order.
pub type OutboxRecords = Vec<(u64, Vec<u8>)>;

/// The key of a node's outbox towards its hub (never a valid connection id: it has `@`).
pub const UPLINK_KEY: &str = "@uplink";

/// One write of a group commit ([`Store::apply_peer_ops`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerOp {
    /// Write (`Some`) or remove (`None`) one outbox message record.
    Outbox {
        /// Outbox key: a connection id or [`UPLINK_KEY`].
        key: String,
        /// The message's sequence number.
        seq: u64,
        /// The record.
        record: Option<Vec<u8>>,
    },
    /// Replace (`Some`) or remove (`None`) one recipient's dedupe ring.
    Ring {
        /// The recipient.
        recipient: String,
        /// The ring's JSON.
        json: Option<Vec<u8>>,
    },
}

/// Handle to the store.
#[derive(Debug)]
pub struct Store {
    db: Database,
}

impl Store {
    /// Opens (creating) the store file, readable by this user only (0600; a file an earlier
    /// version created 0644 is narrowed).
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(path)
                .with_context(|| format!("creating the store {}", path.display()))?;
            f.set_permissions(std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("narrowing the mode of {}", path.display()))?;
        }
        // The previous holder of the file lock (a node that just exited) may release it a few
        // milliseconds after its node lock (see `server::claim_instance`): retry briefly.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let db = loop {
            match Database::create(path) {
                Err(redb::DatabaseError::DatabaseAlreadyOpen)
                    if std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => break r,
            }
        }
        .with_context(|| format!("opening the store {}", path.display()))?;
        let tx = db.begin_write()?;
        migrate_logins(&tx)?;
        tx.open_table(LOGINS)?;
        tx.open_table(PEER_OUTBOXES)?;
        tx.open_table(PEER_OUTBOX_MESSAGES)?;
        tx.open_table(PEER_DEDUPE)?;
        tx.open_table(HELD_SESSIONS)?;
        tx.commit()?;
        Ok(Self { db })
    }

    /// The database, for services that own their tables (the repository registry, the
    /// progress journal, the automations, ...).
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Every outbox stored whole by an earlier version (key → JSON).
    pub fn legacy_peer_outboxes(&self) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(PEER_OUTBOXES)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push((k.value().to_owned(), v.value().to_vec()));
        }
        Ok(out)
    }

    /// Every stored outbox message record: key → `(seq, record)` in sequence order.
    pub fn peer_outbox_messages(&self) -> anyhow::Result<BTreeMap<String, OutboxRecords>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(PEER_OUTBOX_MESSAGES)?;
        let mut out: BTreeMap<String, OutboxRecords> = BTreeMap::new();
        for row in t.iter()? {
            let (k, v) = row?;
            let (key, seq) = k.value();
            out.entry(key.to_owned())
                .or_default()
                .push((seq, v.value().to_vec()));
        }
        Ok(out)
    }

    /// Applies one outbox's changes — `(seq, Some(record))` writes, `(seq, None)` removes — in
    /// one transaction, committed (durable) before it returns, so a send answered `accepted`
    /// after this survives a `kill -9`. `drop_legacy` also removes the outbox's whole record
    /// of an earlier version (its messages being among the writes).
    pub fn apply_peer_outbox(
        &self,
        key: &str,
        changes: &[(u64, Option<&[u8]>)],
        drop_legacy: bool,
    ) -> anyhow::Result<()> {
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(PEER_OUTBOX_MESSAGES)?;
            for (seq, record) in changes {
                match record {
                    Some(r) => {
                        t.insert((key, *seq), *r)?;
                    }
                    None => {
                        t.remove((key, *seq))?;
                    }
                }
            }
            if drop_legacy {
                tx.open_table(PEER_OUTBOXES)?.remove(key)?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Applies a group of outbox-record and dedupe-ring writes in one transaction, committed
    /// (durable) before it returns: the group committer's one write (`crate::link::commit`).
    /// Nothing is written when any part fails.
    pub fn apply_peer_ops(&self, ops: &[PeerOp]) -> anyhow::Result<()> {
        let tx = self.db.begin_write()?;
        {
            let mut outboxes = tx.open_table(PEER_OUTBOX_MESSAGES)?;
            let mut rings = tx.open_table(PEER_DEDUPE)?;
            for op in ops {
                match op {
                    PeerOp::Outbox { key, seq, record } => match record {
                        Some(r) => {
                            outboxes.insert((key.as_str(), *seq), r.as_slice())?;
                        }
                        None => {
                            outboxes.remove((key.as_str(), *seq))?;
                        }
                    },
                    PeerOp::Ring { recipient, json } => match json {
                        Some(j) => {
                            rings.insert(recipient.as_str(), j.as_slice())?;
                        }
                        None => {
                            rings.remove(recipient.as_str())?;
                        }
                    },
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Writes an outbox as one whole record, the way earlier versions did (tests of the move
    /// to per-message records).
    #[doc(hidden)]
    pub fn put_legacy_peer_outbox(&self, key: &str, json: &[u8]) -> anyhow::Result<()> {
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

    /// Every held session record (PTY id → JSON), ordered by id.
    pub fn held_sessions(&self) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(HELD_SESSIONS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push((k.value().to_owned(), v.value().to_vec()));
        }
        Ok(out)
    }

    /// Writes a held session's record; committed before it returns.
    pub fn put_held_session(&self, id: &str, json: &[u8]) -> anyhow::Result<()> {
        let tx = self.db.begin_write()?;
        tx.open_table(HELD_SESSIONS)?.insert(id, json)?;
        tx.commit()?;
        Ok(())
    }

    /// Removes a held session's record.
    pub fn remove_held_session(&self, id: &str) -> anyhow::Result<()> {
        let tx = self.db.begin_write()?;
        tx.open_table(HELD_SESSIONS)?.remove(id)?;
        tx.commit()?;
        Ok(())
    }

    /// All login sessions (sha256 of the token → record).
    pub fn login_sessions(&self) -> anyhow::Result<Vec<(String, crate::auth::LoginSession)>> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(LOGINS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            match serde_json::from_slice(v.value()) {
                Ok(s) => out.push((k.value().to_owned(), s)),
                // An unreadable record is a login nobody can use: skip it, say so.
                Err(e) => tracing::warn!(error = %e, "skipping an unreadable login record"),
            }
        }
        Ok(out)
    }

    /// Inserts or updates a login session.
    pub fn put_login_session(
        &self,
        hash: &str,
        session: &crate::auth::LoginSession,
    ) -> anyhow::Result<()> {
        let bytes = serde_json::to_vec(session)?;
        let tx = self.db.begin_write()?;
        tx.open_table(LOGINS)?.insert(hash, bytes.as_slice())?;
        tx.commit()?;
        Ok(())
    }

    /// Removes the named login sessions (revocation).
    pub fn remove_login_sessions(&self, hashes: &[String]) -> anyhow::Result<()> {
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(LOGINS)?;
            for h in hashes {
                t.remove(h.as_str())?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Removes every login session (a password change); how many there were.
    pub fn clear_login_sessions(&self) -> anyhow::Result<u64> {
        let tx = self.db.begin_write()?;
        let removed = {
            let mut t = tx.open_table(LOGINS)?;
            let n = t.len()?;
            t.retain(|_, _| false)?;
            n
        };
        tx.commit()?;
        Ok(removed)
    }

    /// Removes login sessions that expired before `now_ms`.
    pub fn prune_login_sessions(&self, now_ms: u64) -> anyhow::Result<usize> {
        let expired: Vec<String> = self
            .login_sessions()?
            .into_iter()
            .filter(|(_, s)| s.expires_ms < now_ms)
            .map(|(h, _)| h)
            .collect();
        self.remove_login_sessions(&expired)?;
        Ok(expired.len())
    }
}

/// Moves logins an earlier version kept as bare expiries into [`LOGINS`] (created and last
/// used unknown: 0), then drops the old table.
fn migrate_logins(tx: &redb::WriteTransaction) -> anyhow::Result<()> {
    let old: Vec<(String, u64)> = {
        let t = tx.open_table(LOGIN_SESSIONS)?;
        t.iter()?
            .map(|r| r.map(|(k, v)| (k.value().to_owned(), v.value())))
            .collect::<Result<_, _>>()?
    };
    {
        let mut logins = tx.open_table(LOGINS)?;
        for (hash, expires_ms) in old {
            let rec = crate::auth::LoginSession {
                created_ms: 0,
                last_used_ms: 0,
                expires_ms,
                address: String::new(),
                user_agent: String::new(),
            };
            logins.insert(hash.as_str(), serde_json::to_vec(&rec)?.as_slice())?;
        }
    }
    tx.delete_table(LOGIN_SESSIONS)?;
    Ok(())
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
            s.put_login_session("a", &login(10)).unwrap();
            s.put_login_session("b", &login(100)).unwrap();
        }
        let s = Store::open(&p).unwrap();
        assert_eq!(s.login_sessions().unwrap().len(), 2);
        assert_eq!(s.prune_login_sessions(50).unwrap(), 1);
        assert_eq!(
            s.login_sessions().unwrap(),
            vec![("b".to_owned(), login(100))]
        );
        s.remove_login_sessions(&["b".to_owned()]).unwrap();
        assert!(s.login_sessions().unwrap().is_empty());
    }

    fn login(expires_ms: u64) -> crate::auth::LoginSession {
        crate::auth::LoginSession {
            created_ms: 1,
            last_used_ms: 2,
            expires_ms,
            address: "10.0.0.1".into(),
            user_agent: "ua".into(),
        }
    }

    #[test]
    fn logins_of_an_earlier_version_are_kept_and_the_file_is_0600() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.redb");
        {
            let db = Database::create(&p).unwrap();
            let tx = db.begin_write().unwrap();
            tx.open_table(LOGIN_SESSIONS)
                .unwrap()
                .insert("old", 77)
                .unwrap();
            tx.commit().unwrap();
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let s = Store::open(&p).unwrap();
        let logins = s.login_sessions().unwrap();
        assert_eq!(logins.len(), 1);
        assert_eq!((logins[0].0.as_str(), logins[0].1.expires_ms), ("old", 77));
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(s.clear_login_sessions().unwrap(), 1);
    }

    #[test]
    fn peer_outboxes_and_rings_persist_per_key() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.redb");
        {
            let s = Store::open(&p).unwrap();
            s.put_legacy_peer_outbox("nodec", b"{}").unwrap();
            s.apply_peer_outbox(UPLINK_KEY, &[(0, Some(b"a")), (1, Some(b"b"))], false)
                .unwrap();
            s.apply_peer_outbox("nodeb", &[(7, Some(b"x"))], false)
                .unwrap();
            s.apply_peer_outbox(UPLINK_KEY, &[(0, None), (2, Some(b"c"))], false)
                .unwrap();
            s.apply_peer_outbox("nodec", &[(0, Some(b"moved"))], true)
                .unwrap();
            s.put_peer_ring("bob", Some(b"[]")).unwrap();
            s.put_peer_ring("carol", Some(b"[1]")).unwrap();
            s.put_peer_ring("carol", None).unwrap();
        }
        let s = Store::open(&p).unwrap();
        let o = s.peer_outbox_messages().unwrap();
        let want = |v: &[(u64, &[u8])]| v.iter().map(|(q, r)| (*q, r.to_vec())).collect::<Vec<_>>();
        assert_eq!(o["@uplink"], want(&[(1, b"b"), (2, b"c")]));
        assert_eq!(o["nodeb"], want(&[(7, b"x")]));
        assert_eq!(o["nodec"], want(&[(0, b"moved")]));
        assert!(s.legacy_peer_outboxes().unwrap().is_empty(), "moved");
        assert_eq!(
            s.peer_rings().unwrap(),
            vec![("bob".to_owned(), b"[]".to_vec())]
        );
    }
}
