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

pub(crate) mod driver;
pub(crate) mod journal;

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

/// The service's settings, read from the config at the moment they are needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `acp_agents`: the agents a request may name.
    pub agents: Vec<AgentSpec>,
    /// `ego_executable`: the agent named `ego`, when set.
    pub ego_executable: Option<String>,
    /// `acp.permission_timeout_ms` (10 min): a permission request unanswered this long is
    /// cancelled.
    pub permission_timeout: Duration,
    /// `acp.journal_max_bytes` (8 MiB per connection): past it the oldest frames go.
    pub journal_max_bytes: usize,
    /// `acp.journal_max_age_secs` (7 days): older frames go.
    pub journal_max_age: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            agents: Vec::new(),
            ego_executable: None,
            permission_timeout: Duration::from_secs(600),
            journal_max_bytes: 8 << 20,
            journal_max_age: Duration::from_secs(7 * 86_400),
        }
    }
}

/// One configured agent (`acp_agents[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSpec {
    /// What a request names.
    pub name: String,
    /// The program.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Tuning {
    permission_timeout_ms: Option<u64>,
    journal_max_bytes: Option<usize>,
    journal_max_age_secs: Option<u64>,
}

impl Settings {
    /// Reads the settings from the config's top-level keys (`acp_agents`, `ego_executable`,
    /// `acp`); malformed entries are skipped with a warning.
    pub fn from_keys(keys: &serde_json::Map<String, Value>) -> Self {
        let mut s = Self::default();
        if let Some(list) = keys.get("acp_agents").and_then(Value::as_array) {
            for a in list {
                match serde_json::from_value::<AgentSpec>(a.clone()) {
                    Ok(spec) => s.agents.push(spec),
                    Err(e) => {
                        tracing::warn!(source = "acp", error = %e, "skipping a malformed acp_agents entry")
                    }
                }
            }
        }
        s.ego_executable = keys
            .get("ego_executable")
            .and_then(Value::as_str)
            .filter(|e| !e.is_empty())
            .map(str::to_owned);
        if let Some(t) = keys
            .get("acp")
            .and_then(|v| serde_json::from_value::<Tuning>(v.clone()).ok())
        {
            if let Some(ms) = t.permission_timeout_ms {
                s.permission_timeout = Duration::from_millis(ms);
            }
            if let Some(b) = t.journal_max_bytes {
                s.journal_max_bytes = b.max(1024);
            }
            if let Some(secs) = t.journal_max_age_secs {
                s.journal_max_age = Duration::from_secs(secs);
            }
        }
        s
    }

    /// The agent a request names.
    fn agent(&self, name: &str) -> Option<AgentSpec> {
        if name == "ego"
            && let Some(exe) = &self.ego_executable
        {
            return Some(AgentSpec {
                name: "ego".into(),
                command: exe.clone(),
                args: Vec::new(),
                env: BTreeMap::new(),
            });
        }
        self.agents.iter().find(|a| a.name == name).cloned()
    }

    /// The names a request may use.
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.agents.iter().map(|a| a.name.clone()).collect();
        if self.ego_executable.is_some() {
            v.push("ego".into());
        }
        v
    }
}

/// Reads the current settings.
pub type SettingsSource = Arc<dyn Fn() -> Settings + Send + Sync>;

/// Lists the registered repository roots (a connection's cwd must be inside one).
pub type RootsSource = Arc<dyn Fn() -> Vec<PathBuf> + Send + Sync>;

/// What the ACP service uses of the node it runs in.
#[derive(Clone)]
pub struct AcpEnv {
    /// `acp-notice` goes here.
    pub bus: Arc<Bus>,
    /// The journal's store.
    pub store: Arc<Store>,
    /// Owner of the drivers, so shutdown waits for them.
    pub tasks: TaskTracker,
    /// Fired once at shutdown: every agent is stopped.
    pub shutdown: CancellationToken,
    /// The settings in force.
    pub settings: SettingsSource,
    /// The registered roots.
    pub roots: RootsSource,
    /// The IPC socket (the agent's `tuic-bridge` MCP server reaches the node through it).
    pub socket: PathBuf,
    /// The named instance, for the bridge's `TUIC_APP_INSTANCE`.
    pub instance: Option<String>,
    /// The PTY sessions `terminal/create` runs commands in (none while the node stops).
    pub sessions: SessionsSource,
}

/// The node's session registry, when it still runs.
pub type SessionsSource = Arc<dyn Fn() -> Option<Arc<crate::session::Registry>> + Send + Sync>;

impl std::fmt::Debug for AcpEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpEnv")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

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

    /// Ends the agent and forgets the connection and its journal.
    pub fn delete(&self, id: &str) -> Result<(), AcpError> {
        let conn = lock(&self.conns)
            .remove(id)
            .ok_or_else(|| AcpError::UnknownConnection(id.to_owned()))?;
        conn.cancel_all_held("deleted");
        lock(&conn.inner).stop.cancel();
        self.shared.writer.send(Op::Forget(id.to_owned()));
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

impl Conn {
    fn row_of(&self, i: &Inner) -> ConnectionRow {
        ConnectionRow {
            id: self.id.clone(),
            name: i.rec.name.clone(),
            agent: i.rec.agent.clone(),
            cwd: i.rec.cwd.clone(),
            state: i.state,
            generation: i.rec.generation,
            last_seq: i.journal.last_seq(),
            pending: i
                .interactions
                .iter()
                .filter(|x| x.state == "pending")
                .count(),
            session_id: i.rec.session_id.clone(),
            created_ms: i.rec.created_ms,
            ended: i.rec.ended.clone(),
            host: None,
        }
    }

    /// The connection's row.
    pub fn row(&self) -> ConnectionRow {
        self.row_of(&lock(&self.inner))
    }

    /// The snapshot: row, plan, pending interactions, the kept range.
    pub fn snapshot(&self) -> (Snapshot, usize) {
        let i = lock(&self.inner);
        (
            Snapshot {
                row: self.row_of(&i),
                first_seq: i.journal.first_seq(),
                plan: i.plan.clone(),
                interactions: i
                    .interactions
                    .iter()
                    .filter(|x| x.state == "pending")
                    .cloned()
                    .collect(),
                error: i.error.clone(),
            },
            i.journal.bytes(),
        )
    }

    /// Every remembered interaction, oldest first.
    pub fn interactions(&self) -> Vec<Interaction> {
        lock(&self.inner).interactions.iter().cloned().collect()
    }

    /// Frames after `after` (up to `max`); `Err(first_seq)` when some were dropped.
    pub(crate) fn frames_after(&self, after: u64, max: usize) -> Result<Vec<Kept>, u64> {
        lock(&self.inner).journal.after(after, max)
    }

    /// The oldest sequence kept.
    pub fn first_seq(&self) -> u64 {
        lock(&self.inner).journal.first_seq()
    }

    /// A receiver of the newest sequence.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.seq.subscribe()
    }

    /// Appends a frame, persists it and wakes the streams. Returns its sequence.
    fn push(&self, body: FrameBody) -> u64 {
        let (max_bytes, max_age) = *lock(&self.shared.bounds);
        let mut i = lock(&self.inner);
        if let FrameBody::Update { update } = &body
            && update["sessionUpdate"] == "plan"
        {
            i.plan = Some(update["entries"].clone());
        }
        let a = i.journal.append(body, now_ms(), max_bytes, max_age);
        let seq = a.kept.frame.seq;
        drop(i);
        self.shared.persist_frame(&self.id, &a);
        self.seq.send_replace(seq);
        seq
    }

    fn notice(&self, kind: &str, sequence: u64, request_id: Option<String>) {
        let (generation, session_id) = {
            let i = lock(&self.inner);
            (i.rec.generation, i.rec.session_id.clone())
        };
        self.shared.env.bus.publish(Event::AcpNotice(Notice {
            kind: kind.into(),
            connection_id: self.id.clone(),
            generation,
            sequence,
            session_id,
            request_id,
        }));
    }

    fn persist(&self) {
        let rec = lock(&self.inner).rec.clone();
        self.shared.persist_record(&rec);
    }

    fn launch(self: &Arc<Self>, spec: AgentSpec, load: Option<String>) {
        let stop = self.shared.env.shutdown.child_token();
        let generation = {
            let mut i = lock(&self.inner);
            i.rec.generation += 1;
            i.stop = stop.clone();
            i.gone = CancellationToken::new();
            i.rec.generation
        };
        self.persist();
        self.push(FrameBody::Started {
            agent: spec.name.clone(),
            generation,
        });
        let conn = self.clone();
        self.shared
            .env
            .tasks
            .spawn(driver::run(conn, spec, load, stop));
    }

    /// Starts a prompt turn; its end is journaled as `turn_end`. Returns the turn number.
    pub fn prompt(self: &Arc<Self>, content: Vec<Value>) -> Result<u64, AcpError> {
        if content.is_empty() {
            return Err(AcpError::BadInput("content must not be empty".into()));
        }
        let mut blocks = Vec::with_capacity(content.len());
        for (n, c) in content.iter().enumerate() {
            let kind = c["type"].as_str().unwrap_or_default();
            if !matches!(kind, "text" | "image" | "resource_link" | "resource") {
                return Err(AcpError::BadInput(format!(
                    "content[{n}]: type must be text, image, resource_link or resource"
                )));
            }
            let block: agent_client_protocol::v1::schema::ContentBlock =
                serde_json::from_value(c.clone())
                    .map_err(|e| AcpError::BadInput(format!("content[{n}]: {e}")))?;
            blocks.push(block);
        }
        self.shared.settings();
        let (cx, session_id, turn, gone) = {
            let mut i = lock(&self.inner);
            match i.state {
                ConnState::Ready | ConnState::Settled => {}
                s => {
                    return Err(AcpError::Conflict(format!(
                        "connection {} is {}; a prompt needs it ready or settled",
                        self.id,
                        state_name(s)
                    )));
                }
            }
            let Some(live) = &i.live else {
                return Err(AcpError::Conflict(format!(
                    "connection {} has no agent",
                    self.id
                )));
            };
            let cx = live.cx.clone();
            let sid = live.session_id.clone();
            i.rec.turn += 1;
            i.turn_running = true;
            i.state = ConnState::Working;
            (cx, sid, i.rec.turn, i.gone.clone())
        };
        self.persist();
        self.push(FrameBody::Prompt { turn, content });
        let conn = self.clone();
        self.shared.env.tasks.spawn(async move {
            let req = agent_client_protocol::v1::schema::PromptRequest::new(session_id, blocks);
            let r = cx.send_request(req).block_task().await;
            let body = match r {
                Ok(resp) => FrameBody::TurnEnd {
                    turn,
                    stop_reason: serde_json::to_value(resp.stop_reason)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_else(|| "end_turn".into()),
                    error: None,
                },
                Err(e) => {
                    if agent_client_protocol::is_connection_terminated(&e)
                        || agent_client_protocol::is_incoming_transport_closed(&e)
                    {
                        // The agent went away: its driver settles the turn with the reason.
                        let _ = tokio::time::timeout(GONE_WAIT, gone.cancelled()).await;
                    }
                    FrameBody::TurnEnd {
                        turn,
                        stop_reason: "error".into(),
                        error: Some(conn.exit_reason().unwrap_or_else(|| e.message.clone())),
                    }
                }
            };
            conn.end_turn(body);
        });
        Ok(turn)
    }

    fn end_turn(&self, body: FrameBody) {
        {
            let mut i = lock(&self.inner);
            if !i.turn_running {
                return;
            }
            i.turn_running = false;
            if i.state != ConnState::Ended {
                i.state = ConnState::Settled;
            }
        }
        let seq = self.push(body);
        self.notice("settled", seq, None);
    }

    fn exit_reason(&self) -> Option<String> {
        lock(&self.inner).rec.ended.clone()
    }

    /// Cancels the running turn (`session/cancel`); held permission requests are cancelled.
    pub fn cancel(&self) -> Result<(), AcpError> {
        let (cx, sid) = {
            let i = lock(&self.inner);
            let Some(live) = &i.live else {
                return Err(AcpError::Conflict(format!(
                    "connection {} has no agent",
                    self.id
                )));
            };
            (live.cx.clone(), live.session_id.clone())
        };
        self.cancel_all_held("cancel");
        cx.send_notification(agent_client_protocol::v1::schema::CancelNotification::new(
            sid,
        ))
        .map_err(|e| AcpError::Conflict(e.message))?;
        Ok(())
    }

    /// Answers a held permission request with one of its options. First answer wins.
    pub fn answer(&self, rid: &str, option_id: &str, by: &str) -> Result<Interaction, AcpError> {
        let held = {
            let mut h = lock(&self.held);
            match h.get(rid) {
                Some(x) if !x.options.iter().any(|o| o == option_id) => {
                    return Err(AcpError::BadInput(format!(
                        "option {option_id:?} is not one of {:?}",
                        x.options
                    )));
                }
                Some(_) => h.remove(rid),
                None => None,
            }
        };
        let Some(held) = held else {
            let i = lock(&self.inner);
            return match i.interactions.iter().find(|x| x.request_id == rid) {
                Some(x) => Err(AcpError::Answered {
                    request_id: rid.to_owned(),
                    by: x.by.clone().unwrap_or_default(),
                }),
                None => Err(AcpError::UnknownRequest(rid.to_owned())),
            };
        };
        let resp: agent_client_protocol::v1::schema::RequestPermissionResponse =
            serde_json::from_value(serde_json::json!({
                "outcome": {"outcome": "selected", "optionId": option_id}
            }))
            .map_err(|e| AcpError::BadInput(e.to_string()))?;
        if let Err(e) = held.responder.respond(resp) {
            tracing::debug!(source = "acp", conn = %self.id, error = %e.message, "permission answer not delivered");
        }
        Ok(self.settle(rid, Some(option_id.to_owned()), by))
    }

    /// Journals the outcome and updates the interaction and the state.
    fn settle(&self, rid: &str, option_id: Option<String>, by: &str) -> Interaction {
        let seq = self.push(FrameBody::PermissionOutcome {
            request_id: rid.to_owned(),
            option_id: option_id.clone(),
            by: by.to_owned(),
        });
        let out = {
            let mut i = lock(&self.inner);
            let mut out = None;
            if let Some(x) = i.interactions.iter_mut().find(|x| x.request_id == rid) {
                x.state = if option_id.is_some() {
                    "answered"
                } else {
                    "cancelled"
                }
                .into();
                x.option_id = option_id;
                x.by = Some(by.to_owned());
                out = Some(x.clone());
            }
            let pending = i.interactions.iter().any(|x| x.state == "pending");
            if i.state == ConnState::NeedsYou && !pending {
                i.state = if i.turn_running {
                    ConnState::Working
                } else {
                    ConnState::Settled
                };
            }
            out
        };
        self.notice("interaction_settled", seq, Some(rid.to_owned()));
        out.unwrap_or(Interaction {
            request_id: rid.to_owned(),
            tool_call: Value::Null,
            options: Vec::new(),
            seq,
            state: "cancelled".into(),
            option_id: None,
            by: Some(by.to_owned()),
        })
    }

    /// Cancels one held request (timeout) if it is still held.
    fn cancel_held(&self, rid: &str, why: &str) {
        let held = lock(&self.held).remove(rid);
        if let Some(h) = held {
            let resp: Result<agent_client_protocol::v1::schema::RequestPermissionResponse, _> =
                serde_json::from_value(serde_json::json!({"outcome": {"outcome": "cancelled"}}));
            if let Ok(r) = resp {
                let _ = h.responder.respond(r);
            }
            self.settle(rid, None, why);
        }
    }

    fn cancel_all_held(&self, why: &str) {
        let ids: Vec<String> = lock(&self.held).keys().cloned().collect();
        for rid in ids {
            self.cancel_held(&rid, why);
        }
    }

    /// Holds a permission request from the agent (called by the driver's handler).
    fn hold_permission(
        self: &Arc<Self>,
        tool_call: Value,
        options: Vec<PermissionOption>,
        responder: agent_client_protocol::v1::Responder<
            agent_client_protocol::v1::schema::RequestPermissionResponse,
        >,
    ) {
        let n = self
            .next_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rid = format!("p{}-{n}", lock(&self.inner).rec.generation);
        lock(&self.held).insert(
            rid.clone(),
            Held {
                responder,
                options: options.iter().map(|o| o.option_id.clone()).collect(),
            },
        );
        let seq = self.push(FrameBody::Permission {
            request_id: rid.clone(),
            tool_call: tool_call.clone(),
            options: options.clone(),
        });
        {
            let mut i = lock(&self.inner);
            i.interactions.push_back(Interaction {
                request_id: rid.clone(),
                tool_call,
                options,
                seq,
                state: "pending".into(),
                option_id: None,
                by: None,
            });
            while i.interactions.len() > INTERACTIONS_KEPT {
                match i.interactions.iter().position(|x| x.state != "pending") {
                    Some(p) => {
                        i.interactions.remove(p);
                    }
                    None => break,
                }
            }
            if i.state != ConnState::Ended {
                i.state = ConnState::NeedsYou;
            }
        }
        self.notice("interaction_pending", seq, Some(rid.clone()));
        let timeout = self.shared.settings().permission_timeout;
        let conn = self.clone();
        let stop = lock(&self.inner).stop.clone();
        self.shared.env.tasks.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(timeout) => conn.cancel_held(&rid, "timeout"),
                _ = stop.cancelled() => {}
            }
        });
    }
}

/// The snake_case name of a state.
pub fn state_name(s: ConnState) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
