//! The audit log: an append-only, bounded record of security-relevant acts (logins, logouts
//! and revocations, attaches and detaches, remote input, config changes, token rotations,
//! share links, secret requests and uses, branch deletions), kept in the store's
//! `audit_log` table.
//!
//! An entry is committed (durable) before [`Audit::record`] returns, so a caller that records
//! before it answers never loses the entry of an act that happened, even to a `kill -9`.
//! The log is bounded by count (`tuning.audit_max_entries`) and age
//! (`tuning.audit_max_age_days`), and each entry by [`MAX_FIELD_CHARS`] per field: the oldest
//! entries go first and are counted in `dropped`.
//!
//! It deliberately records no payload: never input bytes (only their count), never a secret's
//! value (only its name), never a token (only the id of the login or link it opened). It holds
//! no node: it gets the store and a bounds source from the composition root.

use std::sync::{Arc, Mutex};

use anyhow::Context;
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::store::Store;

#[cfg(test)]
mod tests;

/// Entries: sequence number → JSON [`Entry`].
const AUDIT_LOG: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("audit_log");

/// Counters: `next` (the next sequence number) and `dropped` (entries the bound removed).
const AUDIT_META: TableDefinition<'_, &str, u64> = TableDefinition::new("audit_meta");

/// Longest text of one field, in characters: an entry stays under ~1 KiB whatever a caller
/// passes (a user name and a user agent are the client's choice).
pub const MAX_FIELD_CHARS: usize = 200;

/// The header a hub sets on a call it relays to a node: the caller's `who` on the hub. The
/// node believes it only from a caller holding its node token (the hub), and records such an
/// act as `via: hub`, `who: hub:<user>`.
pub const FORWARDED_USER_HEADER: &str = "x-tuic-hub-user";

/// Most entries one `GET /audit` page returns.
pub const MAX_PAGE: usize = 1_000;

/// The log's bounds, read from the tuning each time an entry is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Entries kept.
    pub max_entries: u64,
    /// Age past which an entry goes, in ms.
    pub max_age_ms: u64,
}

/// Reads the bounds in force.
pub type BoundsSource = Arc<dyn Fn() -> Bounds + Send + Sync>;

/// What the audit log uses of the node.
#[derive(Clone)]
pub struct AuditEnv {
    /// The store holding the tables.
    pub store: Arc<Store>,
    /// The bounds in force (`tuning.audit_max_entries`, `tuning.audit_max_age_days`).
    pub bounds: BoundsSource,
}

impl std::fmt::Debug for AuditEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditEnv")
            .field("bounds", &(self.bounds)())
            .finish_non_exhaustive()
    }
}

/// Who acted and from where, as the request boundary established it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// `local` (the IPC socket), `node-token` (a hub or another machine with the node token),
    /// `login:<id>` (a person's login), `basic:<user>`, `share:<link id>`, `agent:<tuic
    /// session>`, or a user name for a login attempt.
    pub who: String,
    /// `ipc`, `tcp` or `hub`.
    pub via: String,
    /// The client address (TCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

impl Actor {
    /// The local IPC caller.
    pub fn local() -> Self {
        Self {
            who: "local".into(),
            via: "ipc".into(),
            address: None,
        }
    }

    /// Whether the caller came over the network (its input is audited).
    pub fn is_remote(&self) -> bool {
        self.via != "ipc"
    }
}

/// One audit entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Sequence number, increasing; never reused.
    pub seq: u64,
    /// When, unix ms.
    pub at_ms: u64,
    /// What happened: `login`, `login_failed`, `logout`, `login_revoked`, `token_rotated`,
    /// `attach`, `detach`, `input`, `config_changed`, `share_created`, `share_used`,
    /// `share_revoked`, `share_refused`, `secret_requested`, `secret_stored`, `secret_used`,
    /// `secret_removed`, `branch_deleted`, `oauth_granted`.
    pub kind: String,
    /// Who.
    #[serde(flatten)]
    pub actor: Actor,
    /// The session acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Small facts of the act (`mode`, `bytes`, `keys`, `name`, `link`, ...): never payloads.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub detail: serde_json::Map<String, serde_json::Value>,
}

/// An act to record ([`Audit::record`]).
#[derive(Debug, Clone, Default)]
pub struct Event {
    /// [`Entry::kind`].
    pub kind: String,
    /// [`Entry::actor`].
    pub actor: Actor,
    /// [`Entry::session`].
    pub session: Option<String>,
    /// [`Entry::detail`].
    pub detail: serde_json::Map<String, serde_json::Value>,
}

impl Event {
    /// An act of `kind` by `actor`.
    pub fn new(kind: &str, actor: &Actor) -> Self {
        Self {
            kind: kind.to_owned(),
            actor: actor.clone(),
            ..Self::default()
        }
    }

    /// On session `id`.
    pub fn session(mut self, id: &str) -> Self {
        self.session = Some(id.to_owned());
        self
    }

    /// With one detail field.
    pub fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.detail.insert(key.to_owned(), value.into());
        self
    }
}

/// A page query (`GET /audit`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Query {
    /// Only this kind (or a comma-separated list).
    pub kind: Option<String>,
    /// Only entries on this session.
    pub session: Option<String>,
    /// Only entries at or after this time, unix ms.
    pub since_ms: Option<u64>,
    /// Only entries before this time, unix ms.
    pub until_ms: Option<u64>,
    /// Only entries with a sequence number below this (paging backwards: the previous page's
    /// `next_before`).
    pub before: Option<u64>,
    /// Page size (100; at most [`MAX_PAGE`]).
    pub limit: Option<usize>,
}

/// One page, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    /// The matching entries, newest first.
    pub entries: Vec<Entry>,
    /// `before` for the next (older) page; absent at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_before: Option<u64>,
    /// Entries held now.
    pub total: u64,
    /// Entries the bounds removed since the log began.
    pub dropped: u64,
    /// The bounds in force.
    pub max_entries: u64,
    /// Age bound in days.
    pub max_age_days: u64,
}

/// The audit log service.
#[derive(Debug)]
pub struct Audit {
    env: AuditEnv,
    /// Serializes appends, so sequence numbers follow commit order.
    append: Mutex<()>,
}

/// Creates the log's tables (once, when the node opens its store).
pub fn create_tables(store: &Store) -> anyhow::Result<()> {
    let tx = store.database().begin_write()?;
    tx.open_table(AUDIT_LOG)?;
    tx.open_table(AUDIT_META)?;
    tx.commit()?;
    Ok(())
}

impl Audit {
    /// The log over tables [`create_tables`] made.
    pub fn new(env: AuditEnv) -> Self {
        Self {
            env,
            append: Mutex::new(()),
        }
    }

    /// Opens the log's tables and the log.
    pub fn open(env: AuditEnv) -> anyhow::Result<Self> {
        create_tables(&env.store)?;
        Ok(Self::new(env))
    }

    /// Records one act, committed before it returns. Blocking (a `redb` commit).
    pub fn record(&self, ev: Event) -> anyhow::Result<u64> {
        let now = crate::logs::now_ms();
        self.record_many(std::iter::once(ev), now)
    }

    /// Records one act, logging (never failing) when the store refuses it: for acts whose
    /// refusal would be worse than a missing entry (a login must not fail on a full disk).
    pub fn record_or_warn(&self, ev: Event) {
        let kind = ev.kind.clone();
        if let Err(e) = self.record(ev) {
            tracing::warn!(source = "audit", kind = %kind, error = %format!("{e:#}"), "audit entry not written");
        }
    }

    /// Records several acts at `now_ms` in one transaction; the last sequence number.
    pub fn record_many(
        &self,
        events: impl IntoIterator<Item = Event>,
        now_ms: u64,
    ) -> anyhow::Result<u64> {
        let bounds = (self.env.bounds)();
        let _g = self.append.lock().unwrap_or_else(|p| p.into_inner());
        let tx = self.env.store.database().begin_write()?;
        let mut seq;
        {
            let mut log = tx.open_table(AUDIT_LOG)?;
            let mut meta = tx.open_table(AUDIT_META)?;
            seq = meta.get("next")?.map_or(1, |v| v.value());
            let mut dropped = meta.get("dropped")?.map_or(0, |v| v.value());
            for ev in events {
                let entry = Entry {
                    seq,
                    at_ms: now_ms,
                    kind: clip(&ev.kind),
                    actor: Actor {
                        who: clip(&ev.actor.who),
                        via: clip(&ev.actor.via),
                        address: ev.actor.address.as_deref().map(clip),
                    },
                    session: ev.session.as_deref().map(clip),
                    detail: ev
                        .detail
                        .into_iter()
                        .take(16)
                        .map(|(k, v)| (clip(&k), clip_value(v)))
                        .collect(),
                };
                log.insert(seq, serde_json::to_vec(&entry)?.as_slice())?;
                seq += 1;
            }
            // The bounds: the oldest entries go while there are too many or they are too old.
            // Keys are contiguous (only the oldest are ever removed), so the excess is the
            // range from the first key; age is checked from there on until a young entry.
            let cutoff = now_ms.saturating_sub(bounds.max_age_ms);
            let len = log.len()?;
            let first = log.first()?.map_or(seq, |(k, _)| k.value());
            let mut cut = first + len.saturating_sub(bounds.max_entries.max(1));
            for row in log.range(cut..)? {
                let (k, v) = row?;
                let too_old = serde_json::from_slice::<Entry>(v.value())
                    .map(|e| e.at_ms < cutoff)
                    .unwrap_or(true);
                if !too_old {
                    break;
                }
                cut = k.value() + 1;
            }
            if cut > first {
                log.retain_in(first..cut, |_, _| false)?;
                dropped += cut - first;
            }
            meta.insert("next", seq)?;
            meta.insert("dropped", dropped)?;
        }
        tx.commit().context("committing an audit entry")?;
        Ok(seq - 1)
    }

    /// A page of entries, newest first. Blocking.
    pub fn page(&self, q: &Query) -> anyhow::Result<Page> {
        let bounds = (self.env.bounds)();
        let limit = q.limit.unwrap_or(100).clamp(1, MAX_PAGE);
        let kinds: Option<Vec<&str>> = q.kind.as_deref().map(|k| k.split(',').collect());
        let tx = self.env.store.database().begin_read()?;
        let log = tx.open_table(AUDIT_LOG)?;
        let meta = tx.open_table(AUDIT_META)?;
        let dropped = meta.get("dropped")?.map_or(0, |v| v.value());
        let total = log.len()?;
        let mut entries = Vec::new();
        let mut next_before = None;
        let upper = q.before.unwrap_or(u64::MAX);
        for row in log.range(..upper)?.rev() {
            let (k, v) = row?;
            let Ok(e) = serde_json::from_slice::<Entry>(v.value()) else {
                continue;
            };
            if q.since_ms.is_some_and(|s| e.at_ms < s) {
                break;
            }
            if q.until_ms.is_some_and(|u| e.at_ms >= u)
                || kinds
                    .as_ref()
                    .is_some_and(|ks| !ks.contains(&e.kind.as_str()))
                || q.session
                    .as_ref()
                    .is_some_and(|s| e.session.as_ref() != Some(s))
            {
                continue;
            }
            if entries.len() == limit {
                next_before = Some(k.value() + 1);
                break;
            }
            entries.push(e);
        }
        Ok(Page {
            entries,
            next_before,
            total,
            dropped,
            max_entries: bounds.max_entries,
            max_age_days: bounds.max_age_ms / 86_400_000,
        })
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() <= MAX_FIELD_CHARS {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(MAX_FIELD_CHARS).collect();
    out.push('…');
    out
}

fn clip_value(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::String(s) => serde_json::Value::String(clip(&s)),
        serde_json::Value::Array(a) => serde_json::Value::Array(
            a.into_iter()
                .take(32)
                .map(|x| match x {
                    serde_json::Value::String(s) => serde_json::Value::String(clip(&s)),
                    other if other.is_number() || other.is_boolean() => other,
                    _ => serde_json::Value::Null,
                })
                .collect(),
        ),
        other if other.is_number() || other.is_boolean() || other.is_null() => other,
        _ => serde_json::Value::String("(object)".into()),
    }
}
