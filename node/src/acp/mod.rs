//! The ACP service: the node as an Agent Client Protocol client of configured agents.
//!
//! A connection is one agent process (its own process group), driven over stdio with the
//! official `agent-client-protocol` crate ([`driver`]): `initialize`, `session/new` (or
//! `session/load` on reconnect) in a cwd inside a registered repository, then prompt turns.
//! Everything the phone needs goes into the connection's journal ([`journal`]), which streams
//! answer from and which survives a restart. Permission requests are held here until a UI, the
//! CLI or an MCP client answers (first answer wins) or the configured timeout cancels them.
//!
//! Agents are configured, never sent: a request names an agent from `acp_agents` (or `ego`,
//! the `ego_executable` setting, read per call). This module holds no HTTP: the routes in
//! `routes/acp.rs` are its adapter. It takes an [`AcpEnv`] of handles, not the node.

mod conn;
pub(crate) mod driver;
mod env;
pub(crate) mod journal;

pub use env::*;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tuic_proto::acp::{
    ConnState, ConnectionRow, FrameBody, Interaction, Notice, PermissionOption, Snapshot,
};
use tuic_proto::events::Event;

use crate::events::Bus;
use crate::store::Store;
use journal::{Journal, Kept, Op, Writer};

/// Interactions a connection remembers (answered ones are kept so a late answer gets 409
/// naming who answered; the oldest settled ones go first).
const INTERACTIONS_KEPT: usize = 256;

/// How long a turn whose agent went away waits for the driver to journal the exit (the driver
/// reaps the process right after the pipes close; this only bounds a stuck reap).
const GONE_WAIT: Duration = Duration::from_secs(5);

/// Why a call was refused.
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    /// No connection has that id.
    #[error("no ACP connection {0}")]
    UnknownConnection(String),
    /// The agent name is not configured.
    #[error("agent {name:?} is not configured; configured agents: {configured:?}")]
    UnknownAgent {
        /// The name asked for.
        name: String,
        /// The configured names.
        configured: Vec<String>,
    },
    /// The request is malformed.
    #[error("{0}")]
    BadInput(String),
    /// The connection cannot do that now (a turn runs, it has ended, it is live).
    #[error("{0}")]
    Conflict(String),
    /// The permission request was settled already.
    #[error("permission request {request_id} was already settled by {by}")]
    Answered {
        /// The request.
        request_id: String,
        /// Who answered, or why it was cancelled.
        by: String,
    },
    /// No permission request has that id.
    #[error("no permission request {0}")]
    UnknownRequest(String),
    /// The cwd is not inside a registered repository.
    #[error("{0}")]
    Outside(String),
}

/// A connection's record as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    id: String,
    name: String,
    agent: String,
    cwd: String,
    created_ms: u64,
    generation: u32,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    load_session: bool,
    #[serde(default)]
    turn: u64,
    #[serde(default)]
    ended: Option<String>,
    /// The agent-mail identity the agent's MCP calls act as (a record from before identities
    /// gets a fresh one when it is restored).
    #[serde(default)]
    identity: String,
    /// Opened by `POST /acp/chat/open`: a terminal-less peer in agent mail.
    #[serde(default)]
    chat: bool,
}

/// The live agent of a connection.
struct Live {
    cx: agent_client_protocol::v1::ConnectionTo<agent_client_protocol::Agent>,
    session_id: String,
}

/// A held permission request.
struct Held {
    responder: agent_client_protocol::v1::Responder<
        agent_client_protocol::v1::schema::RequestPermissionResponse,
    >,
    options: Vec<String>,
}

struct Inner {
    rec: Record,
    state: ConnState,
    plan: Option<Value>,
    error: Option<FrameBody>,
    interactions: VecDeque<Interaction>,
    journal: Journal,
    live: Option<Live>,
    /// Stops the current agent process (its driver kills the process group).
    stop: CancellationToken,
    /// Cancelled once the current agent's end is journaled (a turn that failed because the
    /// agent went away waits for it, so the turn settles with the exit reason).
    gone: CancellationToken,
    turn_running: bool,
}

/// One ACP connection.
pub struct Conn {
    /// The id handed out by `POST /acp/connections`.
    pub id: String,
    shared: Arc<Shared>,
    inner: Mutex<Inner>,
    held: Mutex<HashMap<String, Held>>,
    /// The agent's `terminal/create` terminals, by terminal id (the PTY session id).
    terminals: Mutex<HashMap<String, driver::Terminal>>,
    /// The newest sequence; streams wait on it.
    seq: watch::Sender<u64>,
    next_request: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("id", &self.id).finish()
    }
}

struct Shared {
    env: AcpEnv,
    writer: Writer,
    /// The journal bounds of the settings last read: a frame append uses them instead of
    /// reading the config per chunk (they are refreshed at every launch, prompt and request).
    bounds: Mutex<(usize, Duration)>,
}

/// The service.
pub struct Acp {
    shared: Arc<Shared>,
    conns: Mutex<HashMap<String, Arc<Conn>>>,
}

impl std::fmt::Debug for Acp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acp").finish_non_exhaustive()
    }
}

fn now_ms() -> u64 {
    crate::logs::now_ms()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Acp {
    /// The service, with every stored connection restored as ended-with-history (blocking).
    pub fn open(env: AcpEnv) -> Self {
        let d = Settings::default();
        let shared = Arc::new(Shared {
            writer: Writer::start(env.store.clone()),
            env,
            bounds: Mutex::new((d.journal_max_bytes, d.journal_max_age)),
        });
        let acp = Self {
            shared: shared.clone(),
            conns: Mutex::new(HashMap::new()),
        };
        match journal::load(&shared.env.store) {
            Ok(rows) => {
                for (rec, frames) in rows {
                    let Ok(mut rec) = serde_json::from_slice::<Record>(&rec) else {
                        continue;
                    };
                    if rec.identity.is_empty() {
                        rec.identity = uuid::Uuid::new_v4().to_string();
                    }
                    let last = frames.last().map(|f| f.seq).unwrap_or(0);
                    let mut journal = Journal::restored(frames, last);
                    let mut plan = None;
                    let mut error = None;
                    for k in journal
                        .after(journal.first_seq().saturating_sub(1), usize::MAX)
                        .unwrap_or_default()
                    {
                        match &k.frame.body {
                            FrameBody::Update { update } if update["sessionUpdate"] == "plan" => {
                                plan = Some(update["entries"].clone());
                            }
                            FrameBody::AgentError { .. } => error = Some(k.frame.body.clone()),
                            _ => {}
                        }
                    }
                    let s = shared.settings();
                    if rec.ended.is_none() {
                        rec.ended = Some("node_restarted".into());
                        let a = journal.append(
                            FrameBody::Exit {
                                code: None,
                                reason: "node_restarted".into(),
                            },
                            now_ms(),
                            s.journal_max_bytes,
                            s.journal_max_age,
                        );
                        shared.persist_frame(&rec.id, &a);
                        shared.persist_record(&rec);
                    }
                    let last = journal.last_seq();
                    let conn = Arc::new(Conn {
                        id: rec.id.clone(),
                        shared: shared.clone(),
                        inner: Mutex::new(Inner {
                            rec,
                            state: ConnState::Ended,
                            plan,
                            error,
                            interactions: VecDeque::new(),
                            journal,
                            live: None,
                            stop: CancellationToken::new(),
                            gone: CancellationToken::new(),
                            turn_running: false,
                        }),
                        held: Mutex::new(HashMap::new()),
                        terminals: Mutex::new(HashMap::new()),
                        seq: watch::Sender::new(last),
                        next_request: 1.into(),
                    });
                    lock(&acp.conns).insert(conn.id.clone(), conn);
                }
            }
            Err(e) => {
                tracing::warn!(source = "acp", error = %format!("{e:#}"), "loading the acp journal")
            }
        }
        acp
    }

    /// The connection with this id.
    pub fn get(&self, id: &str) -> Result<Arc<Conn>, AcpError> {
        lock(&self.conns)
            .get(id)
            .cloned()
            .ok_or_else(|| AcpError::UnknownConnection(id.to_owned()))
    }

    /// Every connection's row, "needs you" first, then newest first.
    pub fn list(&self) -> Vec<ConnectionRow> {
        let conns: Vec<Arc<Conn>> = lock(&self.conns).values().cloned().collect();
        let mut rows: Vec<ConnectionRow> = conns.iter().map(|c| c.row()).collect();
        rows.sort_by(|a, b| {
            (b.state == ConnState::NeedsYou)
                .cmp(&(a.state == ConnState::NeedsYou))
                .then(b.created_ms.cmp(&a.created_ms))
                .then(a.id.cmp(&b.id))
        });
        rows
    }

    /// Launches a configured agent in `cwd` (`POST /acp/connections`).
    pub fn create(&self, req: tuic_proto::acp::NewConnection) -> Result<Arc<Conn>, AcpError> {
        self.open_conn(req, false)
    }

    /// `POST /acp/chat/open`: a connection whose identity is registered in agent mail as a
    /// terminal-less peer (its name and cwd as the peer's name and path) before the agent
    /// starts, so mail reaches it at once; the agent reads it through `tuic://inbox`.
    pub fn chat_open(&self, req: tuic_proto::acp::ChatOpen) -> Result<Arc<Conn>, AcpError> {
        let cwd = match req.cwd {
            Some(c) => c,
            None => (self.shared.env.roots)()
                .first()
                .map(|r| r.display().to_string())
                .ok_or_else(|| {
                    AcpError::BadInput(
                        "no cwd given and no repository is registered (POST /repos)".into(),
                    )
                })?,
        };
        let conn = self.open_conn(
            tuic_proto::acp::NewConnection {
                agent: req.agent.unwrap_or_else(|| "ego".into()),
                cwd,
                name: req.name,
            },
            true,
        )?;
        let (identity, name, cwd) = {
            let i = lock(&conn.inner);
            (
                i.rec.identity.clone(),
                i.rec.name.clone(),
                i.rec.cwd.clone(),
            )
        };
        self.shared.env.peers.register(&identity, &name, &cwd);
        Ok(conn)
    }

    /// Registers every chat the node holds in agent mail again (its peers live in memory, so
    /// a restarted node has none until this runs): a restored chat stays addressable, as it
    /// was before the restart, and reads the mail that queued while it was ended once it
    /// reconnects. Called once the node is built (the sink reaches mail through it).
    pub fn register_chat_peers(&self) {
        let chats: Vec<(String, String, String)> = lock(&self.conns)
            .values()
            .filter_map(|c| {
                let i = lock(&c.inner);
                i.rec.chat.then(|| {
                    (
                        i.rec.identity.clone(),
                        i.rec.name.clone(),
                        i.rec.cwd.clone(),
                    )
                })
            })
            .collect();
        for (identity, name, cwd) in chats {
            self.shared.env.peers.register(&identity, &name, &cwd);
        }
    }

    /// Whether `identity` is a chat's (a connection the node still holds): mail keeps such a
    /// peer addressable after its protocol sessions end.
    pub fn holds_chat_identity(&self, identity: &str) -> bool {
        lock(&self.conns).values().any(|c| {
            let i = lock(&c.inner);
            i.rec.chat && i.rec.identity == identity
        })
    }

    fn open_conn(
        &self,
        req: tuic_proto::acp::NewConnection,
        chat: bool,
    ) -> Result<Arc<Conn>, AcpError> {
        let settings = self.shared.settings();
        let spec = settings
            .agent(&req.agent)
            .ok_or_else(|| AcpError::UnknownAgent {
                name: req.agent.clone(),
                configured: settings.names(),
            })?;
        let cwd = self.shared.check_cwd(&req.cwd)?;
        if let Some(n) = &req.name {
            crate::session::registry::check_name(n).map_err(AcpError::BadInput)?;
        }
        let id = uuid::Uuid::new_v4().to_string();
        let rec = Record {
            name: req
                .name
                .clone()
                .unwrap_or_else(|| format!("{} · {}", spec.name, short(&cwd))),
            id: id.clone(),
            agent: spec.name.clone(),
            cwd: cwd.display().to_string(),
            created_ms: now_ms(),
            generation: 0,
            session_id: None,
            load_session: false,
            turn: 0,
            ended: None,
            identity: uuid::Uuid::new_v4().to_string(),
            chat,
        };
        let conn = Arc::new(Conn {
            id: id.clone(),
            shared: self.shared.clone(),
            inner: Mutex::new(Inner {
                rec,
                state: ConnState::Starting,
                plan: None,
                error: None,
                interactions: VecDeque::new(),
                journal: Journal::default(),
                live: None,
                stop: CancellationToken::new(),
                gone: CancellationToken::new(),
                turn_running: false,
            }),
            held: Mutex::new(HashMap::new()),
            terminals: Mutex::new(HashMap::new()),
            seq: watch::Sender::new(0),
            next_request: 1.into(),
        });
        lock(&self.conns).insert(id, conn.clone());
        conn.launch(spec, None);
        Ok(conn)
    }

    /// Relaunches an ended connection's agent, loading its session where the agent can.
    pub fn reconnect(&self, id: &str) -> Result<Arc<Conn>, AcpError> {
        let conn = self.get(id)?;
        let settings = self.shared.settings();
        let (agent, load) = {
            let mut i = lock(&conn.inner);
            if i.state != ConnState::Ended {
                return Err(AcpError::Conflict(format!(
                    "connection {id} is {:?}; only an ended connection reconnects",
                    i.state
                )));
            }
            i.state = ConnState::Starting;
            i.rec.ended = None;
            i.error = None;
            let load = i
                .rec
                .load_session
                .then(|| i.rec.session_id.clone())
                .flatten();
            (i.rec.agent.clone(), load)
        };
        let Some(spec) = settings.agent(&agent) else {
            let mut i = lock(&conn.inner);
            i.state = ConnState::Ended;
            i.rec.ended = Some("agent_not_configured".into());
            return Err(AcpError::UnknownAgent {
                name: agent,
                configured: settings.names(),
            });
        };
        conn.launch(spec, load);
        Ok(conn)
    }

    /// Waits (blocking, up to `limit`) until every journal write queued so far is committed;
    /// whether it was. The node's shutdown calls it once its tasks (the drivers journaling
    /// `node_stopped`) have drained.
    pub fn flush(&self, limit: Duration) -> bool {
        self.shared.writer.flush(limit)
    }

    /// Ends the agent and forgets the connection and its journal; a chat's identity leaves
    /// agent mail.
    pub fn delete(&self, id: &str) -> Result<(), AcpError> {
        let conn = lock(&self.conns)
            .remove(id)
            .ok_or_else(|| AcpError::UnknownConnection(id.to_owned()))?;
        conn.cancel_all_held("deleted");
        let (chat, identity) = {
            let i = lock(&conn.inner);
            i.stop.cancel();
            (i.rec.chat, i.rec.identity.clone())
        };
        self.shared.writer.send(Op::Forget(id.to_owned()));
        // Out of `conns` already, so mail no longer counts the identity as held.
        if chat {
            self.shared.env.peers.retire(&identity);
        }
        Ok(())
    }
}

fn short(p: &std::path::Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

impl Shared {
    fn settings(&self) -> Settings {
        let s = (self.env.settings)();
        *lock(&self.bounds) = (s.journal_max_bytes, s.journal_max_age);
        s
    }

    /// The cwd, canonical, inside a registered root.
    fn check_cwd(&self, cwd: &str) -> Result<PathBuf, AcpError> {
        let p = std::path::Path::new(cwd);
        if !p.is_absolute() {
            return Err(AcpError::BadInput(format!("cwd must be absolute: {cwd}")));
        }
        let canon =
            std::fs::canonicalize(p).map_err(|e| AcpError::BadInput(format!("cwd {cwd}: {e}")))?;
        if !canon.is_dir() {
            return Err(AcpError::BadInput(format!("cwd {cwd} is not a directory")));
        }
        if !(self.env.roots)().iter().any(|r| canon.starts_with(r)) {
            return Err(AcpError::Outside(format!(
                "{} is outside every registered repository",
                canon.display()
            )));
        }
        Ok(canon)
    }

    fn persist_record(&self, rec: &Record) {
        if let Ok(json) = serde_json::to_vec(rec) {
            self.writer.send(Op::Record(rec.id.clone(), json));
        }
    }

    fn persist_frame(&self, id: &str, a: &journal::Appended) {
        self.writer.send(Op::Frame(
            id.to_owned(),
            a.kept.frame.seq,
            a.kept.json.clone(),
        ));
        if let Some((from, to)) = a.dropped {
            self.writer.send(Op::Trim(id.to_owned(), from, to));
        }
    }
}
/// The snake_case name of a state.
pub fn state_name(s: ConnState) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
