//! Native stories and workflow runs: the planning layer's one service.
//!
//! Owns revisioned story records, plan sources, reviews and approvals, dependencies, the
//! per-project cursor-ordered story event log, idempotency keys bound to payload hashes, and
//! (in [`workflow`]) workflow definitions published by immutable revision and the runs that
//! pin them. Every record lives in its own `redb` tables ([`db`]); an in-memory mirror is
//! rebuilt from them at open and only ever updated after a commit.
//!
//! The MCP tools (`story`, `workflow_run`, `workflow_report`, and the coordinator's
//! `workflow_launch` and `workflow_story_create`), the HTTP routes
//! (`/stories/action`, `/workflows/...`, in `routes::stories`) and `tuic story` are thin adapters: they resolve the
//! caller into an [`Actor`] (never from request JSON) and call [`Stories::execute`] or the
//! workflow entry points. Operator authority is enforced here, not in the adapters.
//!
//! Deliberately absent: story import/export (not in the first native slice), plan dispatch
//! (`start_graph` with a plan target answers "unavailable in this build").

pub mod coordinator;
pub mod db;
pub mod env;
pub mod plan;
pub mod runner;
pub mod service;
pub mod workflow;

use serde::{Deserialize, Serialize};

pub use env::StoriesEnv;
pub use service::{Stories, StoryAction};

/// Who is acting, selected by the host from the transport and the MCP binding. Request JSON
/// never selects it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Actor {
    /// Verified HTTP credentials (Basic or a login cookie over TCP).
    Human,
    /// Unauthenticated loopback: the IPC socket, or an HTTP action without `sessionId`.
    LocalApi,
    /// A bound agent session (its TUIC identity).
    Agent {
        /// The caller's `TUIC_SESSION`.
        session: String,
    },
}

impl Actor {
    /// A stable identity string for independence checks and idempotency hashing.
    pub fn identity(&self) -> String {
        match self {
            Self::Human => "human".into(),
            Self::LocalApi => "local_api".into(),
            Self::Agent { session } => format!("agent:{session}"),
        }
    }

    /// The authority level of this actor.
    pub fn authority(&self) -> Authority {
        match self {
            Self::Human => Authority::Human,
            Self::LocalApi => Authority::LocalApi,
            Self::Agent { .. } => Authority::Agent,
        }
    }

    /// The agent session, when the actor is one.
    pub fn session(&self) -> Option<&str> {
        match self {
            Self::Agent { session } => Some(session),
            _ => None,
        }
    }
}

/// Operator authority, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Authority {
    /// A bound agent session.
    Agent,
    /// Local, unauthenticated (IPC socket).
    LocalApi,
    /// Verified credentials.
    Human,
}

impl Authority {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::LocalApi => "local_api",
            Self::Human => "human",
        }
    }
}

/// Why a story or workflow action was refused. Nothing was changed when one is returned.
#[derive(Debug, thiserror::Error)]
pub enum StoryError {
    /// Malformed input (unknown action, missing field, wrong type).
    #[error("{0}")]
    Invalid(String),
    /// No such story (or it belongs to another project).
    #[error("story {0} not found in this project")]
    NotFound(String),
    /// No such record of another kind.
    #[error("{kind} {id} not found")]
    UnknownRecord {
        /// `plan source`, `workflow definition`, `run`, ...
        kind: &'static str,
        /// Its id.
        id: String,
    },
    /// `expected_revision` is not the current revision.
    #[error(
        "stale revision: {id} is at revision {current}, the request expected {expected}; re-read it and retry"
    )]
    StaleRevision {
        /// The record.
        id: String,
        /// What the request said.
        expected: u64,
        /// What is stored.
        current: u64,
    },
    /// The dependency would close a cycle.
    #[error("dependency cycle: {}", path.join(" -> "))]
    Cycle {
        /// The cycle, first and last equal.
        path: Vec<String>,
    },
    /// The caller's authority does not allow the action.
    #[error("{action} requires {needs} authority; this caller has {has}")]
    Forbidden {
        /// What was attempted.
        action: String,
        /// The required level.
        needs: &'static str,
        /// The caller's level.
        has: &'static str,
    },
    /// An approval (or approving review) by the story's author or claimer.
    #[error("{who} cannot approve {id}: it {role} the story; an independent reviewer must approve")]
    NotIndependent {
        /// The story.
        id: String,
        /// The caller's identity.
        who: String,
        /// `created` or `claimed`.
        role: &'static str,
    },
    /// The request id was used before with another payload.
    #[error("request_id {key:?} was already used with a different payload; use a new request_id")]
    IdempotencyConflict {
        /// The key.
        key: String,
    },
    /// A status change the state machine does not allow.
    #[error("{0}")]
    Transition(String),
    /// A capability this build does not contain.
    #[error("{0}")]
    Unavailable(String),
    /// The caller has no project to act in.
    #[error("{0}")]
    NoProject(String),
    /// The store failed.
    #[error("story store: {0}")]
    Store(String),
}

impl StoryError {
    /// Stable code for tool errors and HTTP bodies.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid_arguments",
            Self::NotFound(_) | Self::UnknownRecord { .. } => "not_found",
            Self::StaleRevision { .. } => "stale_revision",
            Self::Cycle { .. } => "dependency_cycle",
            Self::Forbidden { .. } => "forbidden",
            Self::NotIndependent { .. } => "not_independent",
            Self::IdempotencyConflict { .. } => "idempotency_conflict",
            Self::Transition(_) => "invalid_transition",
            Self::Unavailable(_) => "not_available",
            Self::NoProject(_) => "no_project",
            Self::Store(_) => "store_error",
        }
    }
}

/// Maps any store-layer error.
pub(crate) fn store_err(e: impl std::fmt::Display) -> StoryError {
    StoryError::Store(e.to_string())
}

/// Requires `needs` of `actor` for `action`.
pub(crate) fn require(actor: &Actor, needs: Authority, action: &str) -> Result<(), StoryError> {
    if actor.authority() >= needs {
        return Ok(());
    }
    Err(StoryError::Forbidden {
        action: action.to_owned(),
        needs: needs.as_str(),
        has: actor.authority().as_str(),
    })
}

/// The sha256 of a payload's canonical JSON plus the actor, hex: what an idempotency key binds.
pub(crate) fn payload_hash(actor: &Actor, payload: &impl Serialize) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(actor.identity().as_bytes());
    h.update([0]);
    h.update(serde_json::to_vec(payload).unwrap_or_default());
    hex::encode(h.finalize())
}

/// The directory a TUIC identity works in: its live PTY's cwd, else its registered path.
fn identity_dir(env: &StoriesEnv, tuic: &str) -> Option<String> {
    if let Some(s) = env.live_session(tuic).filter(|s| s.exit().is_none()) {
        return Some(s.cwd.clone());
    }
    env.identity_path(tuic)
}

/// The registered project of an identity or an explicit path.
fn project_for(env: &StoriesEnv, dir: &str) -> Result<String, StoryError> {
    env.project_of(dir).ok_or_else(|| {
        StoryError::NoProject(format!(
            "{dir} is not inside a registered repository; register it with repo action=add"
        ))
    })
}

/// Resolves a caller: `bound` is an MCP caller's own terminal (`tuic_session` of its binding),
/// `loopback` whether it came over the local socket. A bound caller acts as its own agent
/// identity in its own project;
/// caller-supplied `project_path` and `session_id` are ignored for it. An unbound caller (the
/// `tuic story` CLI) names the project with `project_path` and may act as a live terminal's
/// agent with `session_id`; otherwise it is `local_api` on loopback and `human` over
/// authenticated remote TCP.
pub fn resolve_caller(
    env: &StoriesEnv,
    bound: Option<&str>,
    loopback: bool,
    project_path: Option<&str>,
    session_id: Option<&str>,
) -> Result<(String, Actor), StoryError> {
    if let Some(t) = bound {
        let dir = identity_dir(env, t).ok_or_else(|| {
            StoryError::NoProject(
                "this caller has no working directory: call from a TUIC terminal or agent action=register with path".into(),
            )
        })?;
        return Ok((
            project_for(env, &dir)?,
            Actor::Agent {
                session: t.to_owned(),
            },
        ));
    }
    if let Some(sid) = session_id.filter(|s| !s.is_empty()) {
        let s = env
            .live_session(sid)
            .ok_or_else(|| StoryError::Invalid(format!("session_id {sid}: no live terminal")))?;
        let project = match project_path {
            Some(p) => project_for(env, p)?,
            None => project_for(env, &s.cwd)?,
        };
        return Ok((
            project,
            Actor::Agent {
                session: s.tuic_session.clone(),
            },
        ));
    }
    let p = project_path.filter(|p| !p.is_empty()).ok_or_else(|| {
        StoryError::NoProject(
            "an unbound caller must name the project: project_path (tuic story --project PATH)"
                .into(),
        )
    })?;
    let actor = if loopback {
        Actor::LocalApi
    } else {
        Actor::Human
    };
    Ok((project_for(env, p)?, actor))
}

/// Resolves an HTTP caller: `sessionId` acts as that terminal's agent; otherwise verified
/// TCP credentials are `human` and the IPC socket is `local_api`.
pub fn http_caller(
    env: &StoriesEnv,
    transport: Option<crate::guard::Transport>,
    project_path: Option<&str>,
    session_id: Option<&str>,
) -> Result<(String, Actor), StoryError> {
    let loopback = matches!(transport, Some(crate::guard::Transport::Ipc));
    resolve_caller(env, None, loopback, project_path, session_id)
}
