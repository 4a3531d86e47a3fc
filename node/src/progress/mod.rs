//! Project progress: the journal agents report to (`progress` tool), the `intent:` marker TUIC
//! observes in agents' terminals, the paged read-back (`repo action=progress_list`,
//! `POST /progress/list`), the phone's project selector (`GET /progress/projects`) and the
//! Progress Flow view built from agents' transcript files (`flow`).
//!
//! One write path: every entry — reported, observed, or appended by a workflow run — passes
//! the same gate (global `progress_tracking` and the agent's own flag), the same bounds and
//! redaction, is committed to `redb`, and is then published as `progress-recorded`. The MCP
//! tool and the routes are adapters over [`Progress`]; they map [`ReportError`] and
//! [`ListError`]. This module does not know other hosts (the hub merges lists, see `tuic-hub`).
//! The service holds its [`ProgressEnv`] (registered roots, sessions, bus, config, mail's
//! peer facts), built by the composition root; it holds no node.

pub mod flow;
pub mod intent;
pub mod journal;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tuic_proto::events::Event;

pub use journal::{Entry, Filter, Journal, Kind, NewEntry, Origin, Page};

use crate::config::Config;
use crate::events::Bus;
use crate::repos::Repos;
use crate::session::Registry;

/// Longest `text`, in characters.
pub const MAX_TEXT_CHARS: usize = 500;
/// Longest `step`, in characters.
pub const MAX_STEP_CHARS: usize = 120;
/// Default page size of a list.
pub const DEFAULT_LIMIT: usize = 8;
/// Largest page.
pub const MAX_LIMIT: usize = 100;

/// What a caller is known as in agent mail (the peer registered under its identity).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerFacts {
    /// The peer's display name.
    pub name: Option<String>,
    /// The directory the peer registered with.
    pub path: Option<String>,
}

/// Looks up the mail peer registered under a TUIC identity.
pub type PeerLookup = Arc<dyn Fn(&str) -> Option<PeerFacts> + Send + Sync>;

/// Reads the config in force now (the tracking gate).
pub type ConfigSource = Arc<dyn Fn() -> Arc<Config> + Send + Sync>;

/// What the progress service uses of the node. Cloning shares everything.
#[derive(Clone)]
pub struct ProgressEnv {
    /// The registered roots a report's project is found in.
    pub repos: Arc<Repos>,
    /// Live sessions: a caller's terminal, directory and agent type.
    pub sessions: Arc<Registry>,
    /// `progress-recorded` goes here.
    pub bus: Arc<Bus>,
    /// The current config (`progress_tracking`, `agents.<type>.progress_tracking`).
    pub config: ConfigSource,
    /// Agent mail's peer facts (name, registered path) of an identity.
    pub peers: PeerLookup,
}

impl std::fmt::Debug for ProgressEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressEnv").finish_non_exhaustive()
    }
}

/// The progress service of a node.
#[derive(Debug)]
pub struct Progress {
    /// The journal.
    pub journal: Journal,
    /// Byte cursors and parsed state of transcript files (Progress Flow).
    pub flow: flow::Cache,
    /// Entries appended since start, per kind (`/metrics`).
    appended: [AtomicU64; 3],
    /// What the service uses of the node.
    env: ProgressEnv,
}

impl Progress {
    /// Opens the journal in the node's store.
    pub fn open(store: Arc<crate::store::Store>, env: ProgressEnv) -> anyhow::Result<Self> {
        Ok(Self::with_journal(Journal::open(store)?, env))
    }

    /// A service over an opened journal.
    pub fn with_journal(journal: Journal, env: ProgressEnv) -> Self {
        Self {
            journal,
            flow: flow::Cache::default(),
            appended: Default::default(),
            env,
        }
    }

    /// Entries appended since this process started, of `kind`.
    pub fn appended(&self, kind: Kind) -> u64 {
        self.appended[kind as usize].load(Ordering::Relaxed)
    }
}

/// What the `progress` tool takes: `{type, text, step?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// `done` or `blocked`.
    pub kind: Kind,
    /// What happened.
    pub text: String,
    /// The step it concerns.
    pub step: Option<String>,
}

/// Who reports, derived from the MCP caller (never claimed by it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reporter {
    /// The caller's TUIC identity.
    pub tuic_session: Option<String>,
}

/// Why a report was not journaled (nothing was written).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Bad arguments (unknown type, empty text, wrong shape).
    #[error("{0}")]
    Invalid(String),
    /// `type: intent` from an agent: that kind is observed, never claimed.
    #[error(
        "type intent is written by TUIC from the agent's intent: marker in its terminal, not reported; report done or blocked"
    )]
    IntentRefused,
    /// Text or step over its bound.
    #[error("{field} is {len} characters; at most {max} are journaled")]
    TooLong {
        /// `text` or `step`.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The caller has no TUIC identity to report as.
    #[error(
        "progress needs to know who reports: call from a TUIC terminal (TUIC_SESSION binds you) or agent action=register with path first"
    )]
    NotBound,
    /// The caller's directory is in no registered repository.
    #[error(
        "{dir} is not inside a registered repository; register the project with repo action=add"
    )]
    NoProject {
        /// The caller's directory.
        dir: String,
    },
    /// Collection is off for this agent (or globally).
    #[error(
        "progress_tracking_disabled: progress collection is off for {who} (config.json: {setting})"
    )]
    Disabled {
        /// `this node` or the agent type.
        who: String,
        /// The setting that turned it off.
        setting: String,
    },
    /// The store failed.
    #[error(transparent)]
    Journal(#[from] journal::JournalError),
}

impl ReportError {
    /// Stable code for tool errors and HTTP bodies.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid_arguments",
            Self::IntentRefused => "intent_is_observed",
            Self::TooLong { .. } => "text_too_long",
            Self::NotBound => "not_bound",
            Self::NoProject { .. } => "no_project",
            Self::Disabled { .. } => "progress_tracking_disabled",
            Self::Journal(_) => "store_error",
        }
    }
}

impl Report {
    /// Parses the tool's arguments (`type`, `text`, `step`; nothing else).
    pub fn parse(args: &Map<String, Value>) -> Result<Self, ReportError> {
        if let Some(k) = args
            .keys()
            .find(|k| !matches!(k.as_str(), "type" | "text" | "step"))
        {
            return Err(ReportError::Invalid(format!(
                "progress takes type, text and step; {k} is not one of them"
            )));
        }
        let kind = match args.get("type") {
            Some(Value::String(t)) if t == "done" => Kind::Done,
            Some(Value::String(t)) if t == "blocked" => Kind::Blocked,
            Some(Value::String(t)) if t == "intent" => return Err(ReportError::IntentRefused),
            Some(Value::String(t)) => {
                return Err(ReportError::Invalid(format!(
                    "type {t:?} is not a progress type; use done or blocked"
                )));
            }
            Some(_) => return Err(ReportError::Invalid("type must be a string".into())),
            None => {
                return Err(ReportError::Invalid(
                    "type is required (done or blocked)".into(),
                ));
            }
        };
        let text = match args.get("text") {
            Some(Value::String(t)) => t.trim().to_owned(),
            Some(_) => return Err(ReportError::Invalid("text must be a string".into())),
            None => return Err(ReportError::Invalid("text is required".into())),
        };
        if text.is_empty() {
            return Err(ReportError::Invalid("text must not be empty".into()));
        }
        bound("text", &text, MAX_TEXT_CHARS)?;
        let step = match args.get("step") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => {
                let s = s.trim().to_owned();
                bound("step", &s, MAX_STEP_CHARS)?;
                Some(s)
            }
            Some(_) => return Err(ReportError::Invalid("step must be a string".into())),
        };
        Ok(Self { kind, text, step })
    }
}

fn bound(field: &'static str, s: &str, max: usize) -> Result<(), ReportError> {
    let len = s.chars().count();
    if len > max {
        return Err(ReportError::TooLong { field, len, max });
    }
    Ok(())
}

/// Cuts `s` to `max` characters, marking the cut with `…`.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    s.chars().take(max - 1).chain(['…']).collect()
}

/// Is collection on for this agent type? `global AND (agents.<type>.progress_tracking ?? true)`.
pub fn tracking_enabled(cfg: &crate::config::Config, agent_type: Option<&str>) -> bool {
    tracking_gate(cfg, agent_type).is_ok()
}

fn tracking_gate(cfg: &crate::config::Config, agent_type: Option<&str>) -> Result<(), ReportError> {
    if !cfg.progress_tracking {
        return Err(ReportError::Disabled {
            who: "this node".into(),
            setting: "progress_tracking: false".into(),
        });
    }
    let Some(agent) = agent_type else {
        return Ok(());
    };
    // `agents.<agent type>.progress_tracking` (the typed `agents` section holds it).
    let off = cfg.agents.progress_tracking(agent) == Some(false);
    if off {
        return Err(ReportError::Disabled {
            who: format!("agent {agent}"),
            setting: format!("agents.{agent}.progress_tracking: false"),
        });
    }
    Ok(())
}

impl Progress {
    /// The registered project holding `dir`: the innermost registered repository root, else —
    /// for a linked worktree (`<repo>__wt/<branch>`) — the registered repository owning it.
    pub fn project_of(&self, dir: &str) -> Option<String> {
        let canon = std::fs::canonicalize(dir).unwrap_or_else(|_| PathBuf::from(dir));
        let roots = self.env.repos.roots();
        roots
            .iter()
            .filter(|r| canon.starts_with(r))
            .max_by_key(|r| r.as_os_str().len())
            .or_else(|| {
                let main = crate::git::main_checkout_of_worktree(&canon)?;
                roots.iter().find(|r| **r == main)
            })
            .map(|r| r.to_string_lossy().into_owned())
    }

    fn caller(&self, tuic: &str) -> Caller {
        let pty = self
            .env
            .sessions
            .live(tuic)
            .filter(|s| s.tuic_session == tuic && s.exit().is_none());
        let peer = (self.env.peers)(tuic);
        let agent_name = peer
            .as_ref()
            .and_then(|p| p.name.clone())
            .or_else(|| pty.as_ref().and_then(|s| s.display_name()));
        Caller {
            tuic_session: tuic.to_owned(),
            pty_id: pty.as_ref().map(|s| s.id.clone()),
            dir: pty
                .as_ref()
                .map(|s| s.cwd.clone())
                .or_else(|| peer.and_then(|p| p.path)),
            agent_name,
            agent_type: pty.as_ref().and_then(|s| s.agent()).map(str::to_owned),
        }
    }

    /// Journals an agent's report. Blocking (a `redb` commit).
    pub fn report(&self, who: &Reporter, r: Report) -> Result<Entry, ReportError> {
        let tuic = who.tuic_session.as_deref().ok_or(ReportError::NotBound)?;
        let c = self.caller(tuic);
        tracking_gate(&(self.env.config)(), c.agent_type.as_deref())?;
        let dir = c.dir.ok_or(ReportError::NotBound)?;
        let project = self
            .project_of(&dir)
            .ok_or(ReportError::NoProject { dir })?;
        self.append(NewEntry {
            project,
            kind: r.kind,
            text: crate::session::redact::replace_redacted(&r.text),
            step: r.step.map(|s| crate::session::redact::replace_redacted(&s)),
            origin: Origin::Agent,
            pty_id: c.pty_id,
            tuic_session: Some(c.tuic_session),
            agent_name: c.agent_name,
            agent_type: c.agent_type,
            run_id: None,
        })
    }

    /// Journals an `intent:` marker seen in a session's output (the observed kind). Returns
    /// `None` when collection is off for that agent or the terminal is in no registered project.
    /// Blocking.
    pub fn observe_intent(&self, s: &crate::session::Session, text: &str) -> Option<Entry> {
        let agent_type = s.agent();
        if !tracking_enabled(&(self.env.config)(), agent_type) {
            return None;
        }
        let project = self.project_of(&s.cwd)?;
        let text = clip(
            &crate::session::redact::replace_redacted(text.trim()),
            MAX_TEXT_CHARS,
        );
        let agent_name = (self.env.peers)(&s.tuic_session)
            .and_then(|p| p.name)
            .or_else(|| s.display_name());
        let r = self.append(NewEntry {
            project,
            kind: Kind::Intent,
            text,
            step: None,
            origin: Origin::Observed,
            pty_id: Some(s.id.clone()),
            tuic_session: Some(s.tuic_session.clone()),
            agent_name,
            agent_type: agent_type.map(str::to_owned),
            run_id: None,
        });
        match r {
            Ok(e) => Some(e),
            Err(e) => {
                tracing::warn!(session = %s.id, error = %e, "intent not journaled");
                None
            }
        }
    }

    /// The one write path: bounds the text, commits, counts, publishes `progress-recorded`.
    /// Workflow runs call this with [`Origin::Workflow`] and their `run_id`. Blocking.
    pub fn append(&self, mut new: NewEntry) -> Result<Entry, ReportError> {
        new.text = clip(&new.text, MAX_TEXT_CHARS);
        new.step = new.step.map(|s| clip(&s, MAX_STEP_CHARS));
        let e = self.journal.append(new, crate::logs::now_ms())?;
        self.appended[e.kind as usize].fetch_add(1, Ordering::Relaxed);
        self.env.bus.publish(Event::ProgressRecorded(
            serde_json::to_value(&e).unwrap_or(Value::Null),
        ));
        Ok(e)
    }

    /// One page of a project's journal, as `{project, entries, total, nextCursor}`.
    pub fn list(&self, path: &str, input: &ListInput) -> Result<Value, ListError> {
        let project = project_key(path)?;
        let pty_id = input.pty_id.as_deref().filter(|p| !p.is_empty()).map(|p| {
            self.env
                .sessions
                .resolve(p)
                .map(|s| s.id.clone())
                .unwrap_or_else(|| p.to_owned())
        });
        let filter = Filter {
            blocked_only: input.blocked_only.unwrap_or(false),
            pty_id,
        };
        let page = self
            .journal
            .list(&project, &filter, input.limit(), input.cursor_id()?)?;
        Ok(json!({
            "project": project,
            "entries": page.entries,
            "total": page.total,
            "nextCursor": page.next_cursor,
        }))
    }
}

/// The identity facts of a caller: terminal, directory, names.
struct Caller {
    tuic_session: String,
    pty_id: Option<String>,
    dir: Option<String>,
    agent_name: Option<String>,
    agent_type: Option<String>,
}

/// The list input shared by `repo action=progress_list` (`input`) and `POST /progress/list`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListInput {
    /// Only `blocked` entries.
    #[serde(default)]
    pub blocked_only: Option<bool>,
    /// Only this terminal's entries (PTY id, alias or TUIC identity).
    #[serde(default)]
    pub pty_id: Option<String>,
    /// Page size, clamped to 1–100 (default 8).
    #[serde(default)]
    pub limit: Option<i64>,
    /// `nextCursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<Value>,
}

/// The JSON schema of [`ListInput`] (the `input` property of `repo action=progress_list`).
pub fn list_input_schema() -> Value {
    json!({"type": "object", "description": "progress_list paging and filters", "properties": {
        "blockedOnly": {"type": "boolean"},
        "ptyId": {"type": "string"},
        "limit": {"type": "integer", "description": "1-100, default 8"},
        "cursor": {"type": "integer", "description": "the previous nextCursor"}
    }, "additionalProperties": false})
}

/// Why a list was refused.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// The store failed.
    #[error(transparent)]
    Journal(#[from] journal::JournalError),
}

impl ListInput {
    /// Parses an input object (`null` and absent are the defaults).
    pub fn from_value(v: Option<&Value>) -> Result<Self, ListError> {
        match v {
            None | Some(Value::Null) => Ok(Self::default()),
            Some(v @ Value::Object(_)) => serde_json::from_value(v.clone())
                .map_err(|e| ListError::Invalid(format!("progress_list input: {e}"))),
            Some(_) => Err(ListError::Invalid(
                "progress_list input must be an object {blockedOnly?, ptyId?, limit?, cursor?}"
                    .into(),
            )),
        }
    }

    /// The clamped page size.
    pub fn limit(&self) -> usize {
        self.limit
            .unwrap_or(DEFAULT_LIMIT as i64)
            .clamp(1, MAX_LIMIT as i64) as usize
    }

    /// The cursor as an entry id (a number, or a string of digits).
    pub fn cursor_id(&self) -> Result<Option<u64>, ListError> {
        match &self.cursor {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .map(Some)
                .ok_or_else(|| ListError::Invalid("cursor must be a nextCursor value".into())),
            Some(Value::String(s)) => s
                .parse::<u64>()
                .map(Some)
                .map_err(|_| ListError::Invalid(format!("cursor {s:?} is not a nextCursor value"))),
            Some(_) => Err(ListError::Invalid(
                "cursor must be a nextCursor value".into(),
            )),
        }
    }
}

/// The project key of a list path: the canonical path (as entries were filed).
fn project_key(path: &str) -> Result<String, ListError> {
    if path.is_empty() || !Path::new(path).is_absolute() {
        return Err(ListError::Invalid(
            "path is required: the absolute repository root".into(),
        ));
    }
    Ok(std::fs::canonicalize(path)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| path.trim_end_matches('/').to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn report_input_is_the_spec_shape_and_nothing_else() {
        let r = Report::parse(&args(
            json!({"type": "done", "text": " built ", "step": "2"}),
        ))
        .unwrap();
        assert_eq!(r.kind, Kind::Done);
        assert_eq!(r.text, "built");
        assert_eq!(r.step.as_deref(), Some("2"));
        let e = |v| Report::parse(&args(v)).unwrap_err().code();
        assert_eq!(
            e(json!({"type": "intent", "text": "x"})),
            "intent_is_observed"
        );
        assert_eq!(
            e(json!({"type": "working", "text": "x"})),
            "invalid_arguments"
        );
        assert_eq!(e(json!({"type": "done"})), "invalid_arguments");
        assert_eq!(
            e(json!({"type": "done", "text": "  "})),
            "invalid_arguments"
        );
        assert_eq!(
            e(json!({"type": "done", "text": "x", "path": "/p"})),
            "invalid_arguments"
        );
        assert_eq!(
            e(json!({"type": "done", "text": "é".repeat(MAX_TEXT_CHARS + 1)})),
            "text_too_long"
        );
        assert!(
            Report::parse(&args(
                json!({"type": "blocked", "text": "é".repeat(MAX_TEXT_CHARS)})
            ))
            .is_ok()
        );
    }

    #[test]
    fn the_flag_is_global_and_the_agent_override() {
        let cfg = crate::config::Config::default();
        assert!(tracking_enabled(&cfg, None));
        assert!(tracking_enabled(&cfg, Some("claude")));
        // As config.json holds it: the typed `agents` section keeps every agent type's flag.
        let mut cfg: crate::config::Config = serde_json::from_value(json!({"agents": {
            "claude": {"progress_tracking": false}, "codex": {},
            "gemini": {"progress_tracking": false},
        }}))
        .unwrap();
        assert!(!tracking_enabled(&cfg, Some("claude")));
        assert!(tracking_enabled(&cfg, Some("codex")));
        assert!(!tracking_enabled(&cfg, Some("gemini")));
        assert!(tracking_enabled(&cfg, None));
        cfg.progress_tracking = false;
        assert!(!tracking_enabled(&cfg, None));
    }

    #[test]
    fn list_input_clamps_and_reads_cursors() {
        let i = ListInput::from_value(Some(&json!({"limit": 0}))).unwrap();
        assert_eq!(i.limit(), 1);
        let i = ListInput::from_value(Some(&json!({"limit": 5000, "cursor": "17"}))).unwrap();
        assert_eq!(i.limit(), 100);
        assert_eq!(i.cursor_id().unwrap(), Some(17));
        assert_eq!(ListInput::default().limit(), 8);
        assert!(ListInput::from_value(Some(&json!({"blocked_only": true}))).is_err());
        assert!(
            ListInput::from_value(Some(&json!({"cursor": "x"})))
                .unwrap()
                .cursor_id()
                .is_err()
        );
    }
}
