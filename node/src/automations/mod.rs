//! Automations: definitions with a cron schedule, the scheduler that fires them, and the
//! ledger of firings, all in this module's own `redb` tables.
//!
//! One entry point, [`Automations::execute`] with a [`DefinitionAction`], serves the MCP
//! `automations` tool and `POST /automations/action`. The tool keeps the definition-only
//! contract (list, get, create, update, pause, resume, delete); the HTTP route also reads the
//! ledger (`firings`). Deleting a definition does not touch its ledger.
//!
//! A firing is recorded (committed) first, then performed: with an `agent` the definition
//! spawns it through the managed-agent spawn path (`crate::mail::spawn`), with `prompt` as
//! its task; without one the firing is only recorded and published (`automation-fired`).
//! Missed firings during downtime: the spec is silent, so at start an enabled automation whose
//! schedule passed an occurrence since its last firing fires once (`catch_up: true`), then
//! follows its schedule; a backlog is never replayed. A scheduler that falls behind likewise
//! skips to the next occurrence after now rather than bursting.
//!
//! Schedules are cron expressions parsed by `croner` (5 fields, or 6 with leading seconds),
//! evaluated in the definition's `tz`: an IANA zone name (`Europe/Berlin`, from `chrono-tz`'s
//! bundled database) or a fixed UTC offset (`UTC`, `+02:00`, `-05:30`); UTC when omitted.
//! Daylight-saving edges in a named zone follow `croner` (the Open Cron Pattern Specification):
//! a fixed-time occurrence in a skipped hour fires once, at the first valid instant after the
//! gap (02:30 on a spring-forward night fires at 03:00); a fixed-time occurrence in a repeated
//! hour fires once, on its first pass. Interval schedules (`*/15 * * * *`) keep their interval
//! in real time: nothing fires for wall times that do not exist, and the repeated hour's
//! occurrences fire on both passes. The spec names no automation action other than the firing
//! itself, so a firing spawns an agent or is only recorded.

pub(crate) mod scheduler;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{FixedOffset, TimeZone};
use chrono_tz::Tz;
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::store::Store;

/// Definitions: id → JSON [`Definition`].
const DEFINITIONS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("automations");

/// The run ledger: (automation id, seq) → JSON [`Firing`]; seq gapless per automation.
const FIRINGS: TableDefinition<'_, (&str, u64), &[u8]> = TableDefinition::new("automation_firings");

/// Counters: `next_id`.
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("automation_meta");

/// Most definitions a node keeps.
pub(crate) const MAX_DEFINITIONS: usize = 1_000;

/// The agent a firing spawns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// The agent CLI.
    pub command: String,
    /// Its arguments (`{prompt}` is substituted where it appears).
    #[serde(default)]
    pub args: Vec<String>,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// A stored definition (snake_case fields, the wire shape of `get`/`list`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    /// `au-<n>`.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Cron expression.
    pub schedule: String,
    /// The zone the schedule is read in: an IANA name (`Europe/Berlin`) or a fixed UTC
    /// offset (`+02:00`); UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// Paused when false.
    pub enabled: bool,
    /// The task prompt of a spawned agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The agent a firing spawns; none: the firing is only recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentSpec>,
    /// Set by the host from the MCP binding; preserved by updates; absent on old records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by_session: Option<String>,
    /// Created, ms.
    pub created_at_ms: u64,
    /// Last change, ms.
    pub updated_at_ms: u64,
}

/// What `create`/`update` take: the complete user-owned part of a definition. Host-owned
/// fields (`id`, `created_by_session`, times) are accepted and ignored, so a read-modify-write
/// of a `get` result works and cannot impersonate a creator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefinitionInput {
    /// Display name.
    pub name: String,
    /// Cron expression.
    pub schedule: String,
    /// An IANA zone name (`Europe/Berlin`) or a fixed UTC offset (`UTC`, `+02:00`, `-0530`);
    /// UTC when omitted.
    #[serde(default)]
    pub tz: Option<String>,
    /// Defaults to true.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Task prompt.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Agent to spawn.
    #[serde(default)]
    pub agent: Option<AgentSpec>,
    #[serde(default, skip_serializing)]
    id: Option<Value>,
    #[serde(default, skip_serializing)]
    created_by_session: Option<Value>,
    #[serde(default, skip_serializing)]
    created_at_ms: Option<Value>,
    #[serde(default, skip_serializing)]
    updated_at_ms: Option<Value>,
}

/// One firing in the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Firing {
    /// Gapless per automation from 1.
    pub seq: u64,
    /// The automation.
    pub automation_id: String,
    /// The schedule occurrence it stands for, ms.
    pub scheduled_at_ms: u64,
    /// When it was recorded, ms.
    pub fired_at_ms: u64,
    /// The one catch-up firing for occurrences missed while the node was down.
    #[serde(default)]
    pub catch_up: bool,
}

/// The shared actions (`automations` tool, `POST /automations/action`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum DefinitionAction {
    /// Every definition.
    List {},
    /// One.
    Get { id: String },
    /// A new one.
    Create { definition: DefinitionInput },
    /// Replaces the user-owned fields.
    Update {
        id: String,
        definition: DefinitionInput,
    },
    /// `enabled = false`.
    Pause { id: String },
    /// `enabled = true`.
    Resume { id: String },
    /// Removes the definition (not its ledger).
    Delete { id: String },
    /// A page of the ledger (HTTP only).
    Firings {
        id: String,
        #[serde(default)]
        cursor: Option<u64>,
        #[serde(default)]
        limit: Option<usize>,
    },
}

/// The tool's actions.
pub(crate) const TOOL_ACTIONS: &[&str] = &[
    "list", "get", "create", "update", "pause", "resume", "delete",
];

/// Why an action was refused (nothing changed).
#[derive(Debug, thiserror::Error)]
pub enum AutomationError {
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// No such definition.
    #[error("automation {0} not found")]
    NotFound(String),
    /// `create` without a bound agent session (MCP).
    #[error(
        "creating an automation requires a bound agent session (call from a TUIC terminal or agent action=register first)"
    )]
    NotBound,
    /// The store failed.
    #[error("automation store: {0}")]
    Store(String),
}

impl AutomationError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid_arguments",
            Self::NotFound(_) => "not_found",
            Self::NotBound => "not_bound",
            Self::Store(_) => "store_error",
        }
    }
}

fn store_err(e: impl std::fmt::Display) -> AutomationError {
    AutomationError::Store(e.to_string())
}

/// Parses a cron expression.
pub(crate) fn parse_schedule(s: &str) -> Result<croner::Cron, AutomationError> {
    croner::parser::CronParser::new().parse(s).map_err(|e| {
        AutomationError::Invalid(format!("schedule {s:?} is not a cron expression: {e}"))
    })
}

/// The zone a schedule is read in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ScheduleTz {
    /// A fixed UTC offset: no daylight-saving shifts.
    Fixed(FixedOffset),
    /// An IANA zone from the bundled database, with its daylight-saving rules.
    Zone(Tz),
}

/// Parses a `tz`: `UTC`/`Z`, an IANA zone name (`Europe/Berlin`, exact spelling), or a fixed
/// offset `+HH:MM`, `-HH:MM`, `+HHMM`, `+HH` (at most 14 hours).
pub(crate) fn parse_tz(tz: Option<&str>) -> Result<ScheduleTz, AutomationError> {
    let utc = || ScheduleTz::Fixed(FixedOffset::east_opt(0).expect("zero offset"));
    let Some(s) = tz.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(utc());
    };
    if s.eq_ignore_ascii_case("utc") || s == "Z" {
        return Ok(utc());
    }
    if !s.starts_with(['+', '-']) {
        return s.parse::<Tz>().map(ScheduleTz::Zone).map_err(|_| {
            AutomationError::Invalid(format!(
                "tz {s:?} is not a known time zone: use an IANA zone name (Europe/Berlin, \
                 America/New_York) or a fixed UTC offset (UTC, +02:00, -05:30)"
            ))
        });
    }
    parse_offset(s).map(ScheduleTz::Fixed)
}

/// Parses a fixed offset `+HH:MM`, `-HH:MM`, `+HHMM`, `+HH` (at most 14 hours).
fn parse_offset(s: &str) -> Result<FixedOffset, AutomationError> {
    let bad = |s: &str| {
        AutomationError::Invalid(format!(
            "tz {s:?} is not a fixed UTC offset (UTC, +02:00, -05:30) nor a zone name"
        ))
    };
    let (sign, rest) = match s.as_bytes().first() {
        Some(b'+') => (1, &s[1..]),
        Some(b'-') => (-1, &s[1..]),
        _ => return Err(bad(s)),
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    let colon_ok = !rest.contains(':') || (rest.len() == 5 && rest.as_bytes()[2] == b':');
    if !colon_ok || !matches!(digits.len(), 2 | 4) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(s));
    }
    let h: i32 = digits[..2].parse().map_err(|_| bad(s))?;
    let m: i32 = if digits.len() == 4 {
        digits[2..].parse().map_err(|_| bad(s))?
    } else {
        0
    };
    if h > 14 || m > 59 || (h == 14 && m > 0) {
        return Err(bad(s));
    }
    FixedOffset::east_opt(sign * (h * 3600 + m * 60)).ok_or_else(|| bad(s))
}

/// A parsed schedule: the cron expression and the offset it is read in.
#[derive(Debug)]
pub(crate) struct Schedule {
    cron: croner::Cron,
    tz: ScheduleTz,
}

impl Schedule {
    /// Parses a definition's `schedule` and `tz`.
    pub(crate) fn parse(schedule: &str, tz: Option<&str>) -> Result<Self, AutomationError> {
        Ok(Self {
            cron: parse_schedule(schedule)?,
            tz: parse_tz(tz)?,
        })
    }
}

/// The first occurrence of `s` strictly after `after_ms`.
pub(crate) fn next_after(s: &Schedule, after_ms: u64) -> Option<u64> {
    fn next_in<Z: TimeZone>(cron: &croner::Cron, zone: Z, after_ms: u64) -> Option<u64> {
        // An instant is never ambiguous; only wall times are, and croner resolves those.
        let t = zone.timestamp_millis_opt(after_ms as i64).single()?;
        cron.find_next_occurrence(&t, false)
            .ok()
            .map(|d| d.timestamp_millis().max(0) as u64)
    }
    match s.tz {
        ScheduleTz::Fixed(o) => next_in(&s.cron, o, after_ms),
        ScheduleTz::Zone(z) => next_in(&s.cron, z, after_ms),
    }
}

#[derive(Debug)]
struct Slot {
    def: Definition,
    cron: Schedule,
    /// The occurrence the scheduler waits for; `None` while paused.
    next_due: Option<u64>,
    /// A one-off catch-up firing owed since start.
    catch_up: bool,
    last_seq: u64,
}

#[derive(Debug, Default)]
struct Inner {
    slots: BTreeMap<String, Slot>,
    next_id: u64,
}

/// The automation service and its scheduler's state.
#[derive(Debug)]
pub struct Automations {
    store: Arc<Store>,
    inner: Mutex<Inner>,
    /// Wakes the scheduler after a change.
    pub wake: tokio::sync::Notify,
    /// Firings since start (`/metrics`-style counter, and tests).
    pub fired: std::sync::atomic::AtomicU64,
}

impl Automations {
    /// Opens the tables and loads the definitions, marking owed catch-up firings.
    pub fn open(store: Arc<Store>, now_ms: u64) -> Result<Self, AutomationError> {
        {
            let tx = store.database().begin_write().map_err(store_err)?;
            tx.open_table(DEFINITIONS).map_err(store_err)?;
            tx.open_table(FIRINGS).map_err(store_err)?;
            tx.open_table(META).map_err(store_err)?;
            tx.commit().map_err(store_err)?;
        }
        let mut inner = Inner::default();
        let tx = store.database().begin_read().map_err(store_err)?;
        let mut last: HashMap<String, (u64, u64)> = HashMap::new();
        for row in tx
            .open_table(FIRINGS)
            .map_err(store_err)?
            .iter()
            .map_err(store_err)?
        {
            let (k, v) = row.map_err(store_err)?;
            let (id, seq) = k.value();
            if let Ok(f) = serde_json::from_slice::<Firing>(v.value()) {
                last.insert(id.to_owned(), (seq, f.scheduled_at_ms));
            }
        }
        for row in tx
            .open_table(DEFINITIONS)
            .map_err(store_err)?
            .iter()
            .map_err(store_err)?
        {
            let (_, v) = row.map_err(store_err)?;
            let Ok(def) = serde_json::from_slice::<Definition>(v.value()) else {
                continue;
            };
            let Ok(cron) = Schedule::parse(&def.schedule, def.tz.as_deref()) else {
                tracing::warn!(id = %def.id, "automation with an unparsable schedule skipped");
                continue;
            };
            if let Some(n) = def.id.strip_prefix("au-").and_then(|n| n.parse().ok()) {
                inner.next_id = inner.next_id.max(n);
            }
            let (last_seq, last_at) = last.get(&def.id).copied().unwrap_or((0, def.updated_at_ms));
            let missed = def.enabled && next_after(&cron, last_at).is_some_and(|t| t < now_ms);
            let next_due = def.enabled.then(|| next_after(&cron, now_ms)).flatten();
            inner.slots.insert(
                def.id.clone(),
                Slot {
                    def,
                    cron,
                    next_due,
                    catch_up: missed,
                    last_seq,
                },
            );
        }
        if let Some(v) = tx
            .open_table(META)
            .map_err(store_err)?
            .get("next_id")
            .map_err(store_err)?
        {
            inner.next_id = inner.next_id.max(v.value());
        }
        drop(tx);
        Ok(Self {
            store,
            inner: Mutex::new(inner),
            wake: tokio::sync::Notify::new(),
            fired: Default::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn put(&self, def: &Definition, next_id: Option<u64>) -> Result<(), AutomationError> {
        let tx = self.store.database().begin_write().map_err(store_err)?;
        tx.open_table(DEFINITIONS)
            .map_err(store_err)?
            .insert(
                def.id.as_str(),
                serde_json::to_vec(def).map_err(store_err)?.as_slice(),
            )
            .map_err(store_err)?;
        if let Some(n) = next_id {
            tx.open_table(META)
                .map_err(store_err)?
                .insert("next_id", n)
                .map_err(store_err)?;
        }
        tx.commit().map_err(store_err)
    }

    /// Runs one action. `creator_session` is the MCP-bound identity (`None` over HTTP);
    /// `require_creator` makes `create` refuse without one (the MCP contract). Blocking.
    pub fn execute(
        &self,
        action: DefinitionAction,
        creator_session: Option<&str>,
        require_creator: bool,
        now_ms: u64,
    ) -> Result<Value, AutomationError> {
        let r = self.execute_inner(action, creator_session, require_creator, now_ms);
        self.wake.notify_one();
        r
    }

    fn execute_inner(
        &self,
        action: DefinitionAction,
        creator_session: Option<&str>,
        require_creator: bool,
        now_ms: u64,
    ) -> Result<Value, AutomationError> {
        let mut g = self.lock();
        match action {
            DefinitionAction::List {} => {
                Ok(json!(g.slots.values().map(|s| &s.def).collect::<Vec<_>>()))
            }
            DefinitionAction::Get { id } => g
                .slots
                .get(&id)
                .map(|s| json!(s.def))
                .ok_or(AutomationError::NotFound(id)),
            DefinitionAction::Create { definition } => {
                if require_creator && creator_session.is_none() {
                    return Err(AutomationError::NotBound);
                }
                if g.slots.len() >= MAX_DEFINITIONS {
                    return Err(AutomationError::Invalid(format!(
                        "at most {MAX_DEFINITIONS} automations; delete one first"
                    )));
                }
                let cron = validate(&definition)?;
                let n = g.next_id + 1;
                let def = Definition {
                    id: format!("au-{n}"),
                    name: definition.name.trim().to_owned(),
                    schedule: definition.schedule.trim().to_owned(),
                    tz: definition.tz.as_deref().map(str::trim).map(str::to_owned),
                    enabled: definition.enabled.unwrap_or(true),
                    prompt: definition.prompt,
                    agent: definition.agent,
                    created_by_session: creator_session.map(str::to_owned),
                    created_at_ms: now_ms,
                    updated_at_ms: now_ms,
                };
                self.put(&def, Some(n))?;
                g.next_id = n;
                let next_due = def.enabled.then(|| next_after(&cron, now_ms)).flatten();
                let id = def.id.clone();
                g.slots.insert(
                    id.clone(),
                    Slot {
                        def,
                        cron,
                        next_due,
                        catch_up: false,
                        last_seq: 0,
                    },
                );
                Ok(json!({"ok": true, "id": id}))
            }
            DefinitionAction::Update { id, definition } => {
                let cron = validate(&definition)?;
                let slot = g
                    .slots
                    .get_mut(&id)
                    .ok_or(AutomationError::NotFound(id.clone()))?;
                let mut def = slot.def.clone();
                def.name = definition.name.trim().to_owned();
                def.schedule = definition.schedule.trim().to_owned();
                def.tz = definition.tz.as_deref().map(str::trim).map(str::to_owned);
                def.enabled = definition.enabled.unwrap_or(def.enabled);
                def.prompt = definition.prompt;
                def.agent = definition.agent;
                def.updated_at_ms = now_ms;
                self.put(&def, None)?;
                slot.next_due = def.enabled.then(|| next_after(&cron, now_ms)).flatten();
                slot.cron = cron;
                slot.def = def;
                Ok(json!({"ok": true}))
            }
            DefinitionAction::Pause { id } => self.set_enabled(&mut g, &id, false, now_ms),
            DefinitionAction::Resume { id } => self.set_enabled(&mut g, &id, true, now_ms),
            DefinitionAction::Delete { id } => {
                if !g.slots.contains_key(&id) {
                    return Err(AutomationError::NotFound(id));
                }
                let tx = self.store.database().begin_write().map_err(store_err)?;
                tx.open_table(DEFINITIONS)
                    .map_err(store_err)?
                    .remove(id.as_str())
                    .map_err(store_err)?;
                tx.commit().map_err(store_err)?;
                g.slots.remove(&id);
                Ok(json!({"ok": true}))
            }
            DefinitionAction::Firings { id, cursor, limit } => {
                drop(g);
                let limit = limit.unwrap_or(50).clamp(1, 500);
                let after = cursor.unwrap_or(0);
                let tx = self.store.database().begin_read().map_err(store_err)?;
                let t = tx.open_table(FIRINGS).map_err(store_err)?;
                let mut out = Vec::new();
                for row in t
                    .range((id.as_str(), after + 1)..=(id.as_str(), u64::MAX))
                    .map_err(store_err)?
                    .take(limit + 1)
                {
                    let (_, v) = row.map_err(store_err)?;
                    out.push(serde_json::from_slice::<Firing>(v.value()).map_err(store_err)?);
                }
                let more = out.len() > limit;
                out.truncate(limit);
                let next = if more {
                    out.last().map(|f| f.seq)
                } else {
                    None
                };
                Ok(json!({"firings": out, "next_cursor": next}))
            }
        }
    }

    fn set_enabled(
        &self,
        g: &mut Inner,
        id: &str,
        enabled: bool,
        now_ms: u64,
    ) -> Result<Value, AutomationError> {
        let slot = g
            .slots
            .get_mut(id)
            .ok_or_else(|| AutomationError::NotFound(id.to_owned()))?;
        let mut def = slot.def.clone();
        def.enabled = enabled;
        def.updated_at_ms = now_ms;
        self.put(&def, None)?;
        slot.def = def;
        slot.next_due = enabled.then(|| next_after(&slot.cron, now_ms)).flatten();
        if !enabled {
            slot.catch_up = false;
        }
        Ok(json!({"ok": true}))
    }

    /// The firings due at `now_ms` (recorded, committed, advanced) and the next wake time.
    /// Blocking. The caller performs each returned firing's effect.
    pub fn take_due(&self, now_ms: u64) -> (Vec<(Firing, Definition)>, Option<u64>) {
        let mut g = self.lock();
        let mut due = Vec::new();
        for slot in g.slots.values_mut() {
            if !slot.def.enabled {
                continue;
            }
            let (scheduled, catch_up) = if slot.catch_up {
                (now_ms, true)
            } else {
                match slot.next_due {
                    Some(t) if t <= now_ms => (t, false),
                    _ => continue,
                }
            };
            let f = Firing {
                seq: slot.last_seq + 1,
                automation_id: slot.def.id.clone(),
                scheduled_at_ms: scheduled,
                fired_at_ms: now_ms,
                catch_up,
            };
            if let Err(e) = self.record(&f) {
                tracing::warn!(id = %slot.def.id, error = %e, "automation firing not recorded");
                continue;
            }
            slot.last_seq = f.seq;
            slot.catch_up = false;
            if !catch_up {
                // Never burst through a backlog: the next occurrence after now.
                slot.next_due = next_after(&slot.cron, scheduled.max(now_ms));
            }
            due.push((f, slot.def.clone()));
        }
        let next = g
            .slots
            .values()
            .filter(|s| s.def.enabled)
            .filter_map(|s| if s.catch_up { Some(now_ms) } else { s.next_due })
            .min();
        (due, next)
    }

    fn record(&self, f: &Firing) -> Result<(), AutomationError> {
        let tx = self.store.database().begin_write().map_err(store_err)?;
        tx.open_table(FIRINGS)
            .map_err(store_err)?
            .insert(
                (f.automation_id.as_str(), f.seq),
                serde_json::to_vec(f).map_err(store_err)?.as_slice(),
            )
            .map_err(store_err)?;
        tx.commit().map_err(store_err)?;
        self.fired
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

fn validate(d: &DefinitionInput) -> Result<Schedule, AutomationError> {
    if d.name.trim().is_empty() {
        return Err(AutomationError::Invalid(
            "definition.name must not be empty".into(),
        ));
    }
    if d.name.chars().count() > 200 {
        return Err(AutomationError::Invalid(
            "definition.name is longer than 200 characters".into(),
        ));
    }
    if let Some(a) = &d.agent
        && a.command.trim().is_empty()
    {
        return Err(AutomationError::Invalid(
            "definition.agent.command must not be empty".into(),
        ));
    }
    Schedule::parse(d.schedule.trim(), d.tz.as_deref())
}

/// Parses the shared input `{action, ...}`.
pub(crate) fn parse_action(v: &Value) -> Result<DefinitionAction, AutomationError> {
    if v.get("action").and_then(Value::as_str).is_none() {
        return Err(AutomationError::Invalid(format!(
            "action is required: one of {}",
            TOOL_ACTIONS.join(", ")
        )));
    }
    serde_json::from_value(v.clone()).map_err(|e| AutomationError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests;
