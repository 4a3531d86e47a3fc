//! `session`: the PTY sessions of this node, on the real registry (`crate::session`). This file
//! owns the MCP surface: argument parsing, the caller identity
//! (`is_caller`, own-session refusals) and the removed-action routes. Session behaviour (create,
//! writes, submit receipts, waits, the output serializer) lives in `crate::session` and is
//! shared with the REST routes. Actions whose backend a headless node does not have (a UI for
//! `suspend`, managed children for `keep_open`) answer a precise structured error, never a
//! fake success. `declare_worktree` is the git service's placement (`crate::git::placement`).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::args;
use crate::mcp::registry::{CallCtx, Exec, ToolDef, ToolError, ToolFuture, action, schema, typed};
use crate::session::drive::{DriveError, InputRequest, SubmitRequest};
use crate::session::output::{self as session_output, OutputQuery};
use crate::session::submit;
use crate::session::{CreateError, CreateRequest, Session, SessionError};
use crate::state::Node;
use tuic_proto::events::Event;

const ACTIONS: &[&str] = &[
    "list",
    "create",
    "input",
    "submit",
    "output",
    "status",
    "wait",
    "resize",
    "rename",
    "close",
    "kill",
    "suspend",
    "keep_open",
    "declare_worktree",
    "pause",
    "resume",
    "answer",
];

pub(super) static TOOL: ToolDef = ToolDef {
    name: "session",
    summary: "List, create, drive and read this node's terminal sessions",
    description: "Terminal sessions (PTYs) on this node. session_id accepts the PTY id, the tuic_session or the alias (tu-1).\n\
- list: every session with alias, tuic_session, shell_state, agent_state, is_caller; limit/cursor page it.\n\
- create: start a shell (rows, cols: 1-1000 each, cwd, shell, name). Local clients only.\n\
- input: raw write (input text and/or special_key); proves the write only, never a submission. Local clients only.\n\
- submit: one-call submission of input to a confirmed-idle agent with an empty composer; returns {ok, retry_safe, ack, ack_ms?, turn_epoch}; busy or half-typed sessions are refused before the first byte. timeout_ms 250-10000 (3000). Local clients only.\n\
- output: clean text by default (format=raw keeps escapes); pages with from_line/from_byte/next_cursor, deltas with since_cursor.\n\
- status: one session's state. wait: until=idle|exited, timeout_ms default 60000, up to 300000 (local clients only).\n\
- resize (rows, cols: 1-1000 each), rename (name), close, kill, pause/resume: local clients only.\n\
- suspend: ask the UI to end the PTY and keep the tab restorable; errors when no UI is attached.\n\
- keep_open (enabled): automatic idle closure of a managed child. declare_worktree (worktree_path): place the caller's own tab.\n\
- answer (session_id: ACP connection id, request_id, option_id): answer its permission request; first answer wins.",
    actions: ACTIONS,
    schema: || {
        schema(
            ACTIONS,
            json!({
                "session_id": {"type": "string", "description": "PTY id, tuic_session or alias"},
                "input": {"type": "string"},
                "special_key": {"type": "string", "enum": ["enter", "tab", "escape", "ctrl-c", "ctrl-d", "ctrl-u", "up", "down", "left", "right", "backspace"]},
                "pty_description": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "timeout_ms": {"type": "integer", "minimum": 0},
                "format": {"type": "string", "enum": ["text", "raw"]},
                "limit": {"type": "integer", "minimum": 1},
                "from_line": {"type": "integer", "minimum": 0},
                "from_byte": {"type": "integer", "minimum": 0},
                "since_cursor": {"type": "integer", "minimum": 0},
                "cursor": {"type": "string"},
                "until": {"type": "string", "enum": ["idle", "exited"]},
                "rows": {"type": "integer", "minimum": 1, "maximum": 1000},
                "cols": {"type": "integer", "minimum": 1, "maximum": 1000},
                "cwd": {"type": "string"},
                "shell": {"type": "string"},
                "name": {"type": "string", "maxLength": 256},
                "enabled": {"type": "boolean"},
                "worktree_path": {"type": "string"},
                "request_id": {"type": "string"},
                "option_id": {"type": "string"}
            }),
        )
    },
    handler,
    exec: &[
        ("*", Exec::Async(serve_async)),
        ("list", Exec::Rendered(super::session_list::list_rendered)),
        ("create", Exec::Blocking),
        ("input", Exec::Blocking),
        ("close", Exec::Blocking),
        ("kill", Exec::Blocking),
        ("resize", Exec::Blocking),
        ("pause", Exec::Blocking),
        ("resume", Exec::Blocking),
        ("declare_worktree", Exec::Blocking),
    ],
    passthrough: false,
};

/// The typed arguments of every `session` action (`crate::args`): one struct per action, only
/// that action's fields read. `input` and `submit` bodies are the drive service's own typed
/// requests (`InputRequest`, `SubmitRequest`), shared with the REST routes.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Call {
    List(super::session_list::ListArgs),
    Create(CreateArgs),
    Input(Target),
    Submit(Target),
    Output(OutputArgs),
    Status(Target),
    Wait(WaitArgs),
    Resize(ResizeArgs),
    Rename(RenameArgs),
    Close(Target),
    Kill(Target),
    Suspend(Target),
    KeepOpen(KeepOpenArgs),
    DeclareWorktree(DeclareArgs),
    Pause(Target),
    Resume(Target),
    Answer(super::session_answer::AnswerArgs),
}

/// An action on one session.
#[derive(Debug, Deserialize)]
struct Target {
    #[serde(default, deserialize_with = "args::string")]
    session_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct CreateArgs {
    #[serde(default, deserialize_with = "args::dim")]
    rows: Option<u16>,
    #[serde(default, deserialize_with = "args::dim")]
    cols: Option<u16>,
    #[serde(default, deserialize_with = "args::string")]
    shell: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    cwd: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct OutputArgs {
    #[serde(default, deserialize_with = "args::string")]
    session_id: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    format: Option<String>,
    #[serde(default, deserialize_with = "args::uint")]
    limit: Option<u64>,
    #[serde(default, deserialize_with = "args::uint")]
    from_line: Option<u64>,
    #[serde(default, deserialize_with = "args::uint")]
    from_byte: Option<u64>,
    #[serde(default, deserialize_with = "args::uint")]
    since_cursor: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct WaitArgs {
    #[serde(default, deserialize_with = "args::string")]
    session_id: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    until: Option<String>,
    #[serde(default, deserialize_with = "args::uint")]
    timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ResizeArgs {
    #[serde(default, deserialize_with = "args::string")]
    session_id: Option<String>,
    #[serde(default, deserialize_with = "args::dim")]
    rows: Option<u16>,
    #[serde(default, deserialize_with = "args::dim")]
    cols: Option<u16>,
}

#[derive(Debug, Deserialize)]
struct RenameArgs {
    #[serde(default, deserialize_with = "args::string")]
    session_id: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct KeepOpenArgs {
    #[serde(default, deserialize_with = "args::string")]
    session_id: Option<String>,
    /// Anything but a boolean is refused as missing (`enabled (boolean) is required`).
    #[serde(default, deserialize_with = "required_bool")]
    enabled: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct DeclareArgs {
    #[serde(default, deserialize_with = "args::string")]
    session_id: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    worktree_path: Option<String>,
}

/// `keep_open`'s `enabled`: a boolean, else the refusal names the type.
fn required_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        Some(Value::Bool(b)) => Ok(Some(b)),
        None | Some(Value::Null) => Ok(None),
        Some(_) => Err(serde::de::Error::custom("(boolean) is required")),
    }
}

/// Where a call is served, after the checks every action shares.
enum Prelude {
    /// The owner of a remote session answered (hub).
    Answered(Value),
    /// Serve it here, with these arguments (`local/<session>` rewritten).
    Here(Map<String, Value>),
}

/// The checks every action shares: removed actions, the action list (the remote rights were
/// checked at dispatch, `mcp::rights`), then the extension router for an address of another
/// host (which may wait for the owner).
async fn prelude(node: &Arc<Node>, args: &Map<String, Value>) -> Result<Prelude, ToolError> {
    if args.get("action").and_then(Value::as_str) == Some("process_stats") {
        return Err(ToolError::removed(
            "session",
            "process_stats",
            "GET /process/stats",
        ));
    }
    let a = action("session", ACTIONS, args)?;
    // Extension hook (`ext::HostRouter`): an address of another host goes to its owner, and
    // the router may name a session of this host under another name.
    Ok(match node.ext.route_session(a, args).await? {
        Some(crate::ext::Routed::Answered(v)) => Prelude::Answered(v),
        Some(crate::ext::Routed::Local(rewritten)) => Prelude::Here(rewritten),
        None => Prelude::Here(args.clone()),
    })
}

/// Every `session` call: the shared checks and a hub's routing (awaited, never on a parked
/// thread), then the action here — `submit` and `wait` as futures that sleep on events, the
/// rest through the synchronous [`handler`] (blocking actions on the blocking pool).
async fn serve(
    node: Arc<Node>,
    ctx: CallCtx,
    args: Map<String, Value>,
) -> Result<Value, ToolError> {
    let args = match prelude(&node, &args).await? {
        Prelude::Answered(v) => return Ok(v),
        Prelude::Here(args) => args,
    };
    match typed("session", ACTIONS, &args)? {
        Call::Submit(t) => submit(&node, &t, &args).await,
        Call::Wait(w) => wait(&node, w).await,
        Call::Suspend(t) => suspend(&node, &ctx, &t).await,
        _ => crate::mcp::registry::run_here(&node, &ctx, &TOOL, args).await,
    }
}

/// The registry's entry for every `session` action (`Exec::Async` in `TOOL`).
pub(super) fn serve_async(node: Arc<Node>, ctx: CallCtx, args: Map<String, Value>) -> ToolFuture {
    Box::pin(serve(node, ctx, args))
}

/// One action served here, after [`serve`]'s checks and routing (`args` already rewritten
/// for a `local/<id>` address).
fn handler(node: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    match typed("session", ACTIONS, args)? {
        Call::List(a) => super::session_list::list(node, ctx, &a),
        Call::Create(c) => create(node, c),
        Call::Input(t) => input(node, &t, args),
        Call::Output(o) => output(node, o),
        Call::Status(t) => status(node, ctx, &t),
        Call::Resize(r) => resize(node, r),
        Call::Rename(r) => rename(node, r),
        Call::Close(t) => close(node, ctx, &t, "close"),
        Call::Kill(t) => close(node, ctx, &t, "kill"),
        Call::Pause(t) => pause(node, &t, true),
        Call::Resume(t) => pause(node, &t, false),
        Call::KeepOpen(k) => keep_open(node, k),
        Call::DeclareWorktree(d) => declare_worktree(node, ctx, d),
        Call::Answer(a) => super::session_answer::answer(node, ctx, a),
        // `submit`, `wait` and `suspend` sleep on events: `serve` runs them as futures, never
        // through this synchronous handler.
        Call::Submit(_) | Call::Wait(_) | Call::Suspend(_) => Err(ToolError::new(
            "internal",
            "session action=submit|wait|suspend runs asynchronously",
        )),
    }
}

fn session_id(id: &Option<String>) -> Result<&str, ToolError> {
    id.as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ToolError::invalid("session_id is required (PTY id, tuic_session or alias)"))
}

fn unknown(r: &str) -> ToolError {
    ToolError::new(
        "unknown_session",
        format!("unknown session {r}; session action=list shows the live ones"),
    )
    .with("session_id", json!(r))
}

/// A live session or one in its tombstone period (output, status, wait read those).
fn resolve(node: &Node, id: &Option<String>) -> Result<Arc<Session>, ToolError> {
    let r = session_id(id)?;
    node.sessions.resolve(r).ok_or_else(|| unknown(r))
}

/// A live session (writes, resize, rename need the process).
fn live(node: &Node, id: &Option<String>) -> Result<Arc<Session>, ToolError> {
    node.sessions.drivable(session_id(id)?).map_err(drive_error)
}

/// The MCP form of the drive service's error: the same code and fields, as a tool error.
fn drive_error(e: DriveError) -> ToolError {
    ToolError {
        message: e.to_string(),
        code: e.code(),
        extra: e.fields(),
    }
}

/// A size over the caps (`size_limit`) or the node's cell budget (`cell_budget`).
fn size_error(e: crate::session::budget::SizeError) -> ToolError {
    ToolError::new(e.code(), e.to_string())
}

fn session_error(s: &Session, e: SessionError) -> ToolError {
    match e {
        SessionError::Size(e) => size_error(e),
        SessionError::Exited { .. } => drive_error(DriveError::exited(s)),
        SessionError::Io(m) => ToolError::new("pty_error", m).with("session_id", json!(s.id)),
    }
}

/// A list/status row with `is_caller`: the caller's identity is bound to this PTY.
fn row_json(node: &Node, s: &Session, ctx: &CallCtx) -> Value {
    let mut v = json!(node.sessions.placed_row(s));
    v["is_caller"] = json!(ctx.tuic_session.as_deref() == Some(s.tuic_session.as_str()));
    v
}

fn create(node: &Arc<Node>, c: CreateArgs) -> Result<Value, ToolError> {
    let req = CreateRequest {
        rows: c.rows,
        cols: c.cols,
        shell: c.shell,
        cwd: c.cwd,
        name: c.name,
        ..CreateRequest::default()
    };
    let s = node.sessions.create(req).map_err(|e| match e {
        CreateError::Invalid(m) => ToolError::invalid(m),
        CreateError::Size(e) => size_error(e),
        CreateError::Spawn(_) => ToolError::new("spawn_failed", e.to_string()),
    })?;
    Ok(json!({"session_id": s.id, "alias": s.alias, "tuic_session": s.tuic_session}))
}

/// `input`; the drive service's `Session::input`, which `POST /sessions/{id}/input` (a hub's
/// remote `input`) adapts too.
fn input(node: &Arc<Node>, t: &Target, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let s = live(node, &t.session_id)?;
    let req = InputRequest::from_args(args).map_err(drive_error)?;
    s.input(&req, &node.sessions.capture).map_err(drive_error)?;
    if let Some(d) = req.description {
        node.sessions.describe(&s, d);
    }
    Ok(json!({"ok": true, "session_id": s.id}))
}

/// `submit`; the drive service's `Session::submit`, which `POST /sessions/{id}/submit` (a
/// hub's remote `submit`) adapts too.
async fn submit(
    node: &Arc<Node>,
    t: &Target,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    let s = live(node, &t.session_id)?;
    let req = SubmitRequest::from_args(args).map_err(drive_error)?;
    let receipt = s
        .submit(&req, &node.sessions.capture)
        .await
        .map_err(drive_error)?;
    if let Some(d) = req.description {
        node.sessions.describe(&s, d);
    }
    Ok(json!(receipt))
}

fn output(node: &Arc<Node>, o: OutputArgs) -> Result<Value, ToolError> {
    let s = resolve(node, &o.session_id)?;
    let format = match o.format.as_deref() {
        None | Some("text" | "mcp") => "mcp",
        Some("raw" | "mcp_raw") => "mcp_raw",
        Some(f) => {
            return Err(ToolError::invalid(format!(
                "unknown format {f}; text (default) or raw"
            )));
        }
    };
    let q = OutputQuery {
        format: Some(format.into()),
        limit: o.limit,
        offset: None,
        from_line: o.from_line,
        from_byte: o.from_byte,
        since_cursor: o.since_cursor,
    };
    session_output::render(&s, &q).map_err(|e| ToolError::invalid(e.0))
}

fn status(node: &Arc<Node>, ctx: &CallCtx, t: &Target) -> Result<Value, ToolError> {
    let s = resolve(node, &t.session_id)?;
    let mut v = row_json(node, &s, ctx);
    v["turn_epoch"] = json!(s.turn_epoch());
    if s.exit().is_some() {
        v["exited"] = json!(true);
    }
    Ok(v)
}

async fn wait(node: &Arc<Node>, w: WaitArgs) -> Result<Value, ToolError> {
    let s = resolve(node, &w.session_id)?;
    let until = match w.until.as_deref().unwrap_or("idle") {
        "idle" => submit::Until::Idle,
        "exited" => submit::Until::Exited,
        u => {
            return Err(ToolError::invalid(format!(
                "until must be idle or exited, not {u}"
            )));
        }
    };
    // The shared rule: 60 s by default, a request at or above the 300,000 ms cap runs
    // 295,000 ms (the bridge computes its deadline from the same function).
    let timeout_ms = tuic_proto::mcp::wait_ms(w.timeout_ms);
    let started = std::time::Instant::now();
    let waited = submit::wait(&s, until, std::time::Duration::from_millis(timeout_ms)).await;
    node.sessions.count_wait_checks(waited.checks);
    let reached = waited.reached;
    let row = s.row();
    let mut v = json!({
        "session_id": s.id,
        "until": if until == submit::Until::Idle { "idle" } else { "exited" },
        "reached": reached,
        "waited_ms": started.elapsed().as_millis() as u64,
    });
    if !reached {
        v["timed_out"] = json!(true);
    }
    if let Some(st) = row.shell_state {
        v["shell_state"] = json!(st);
    }
    if let Some(st) = row.agent_state {
        v["agent_state"] = json!(st);
    }
    if let Some(e) = s.exit() {
        v["exited"] = json!(true);
        if let Some(c) = e.code {
            v["exit_code"] = json!(c);
        }
    }
    Ok(v)
}

fn resize(node: &Arc<Node>, r: ResizeArgs) -> Result<Value, ToolError> {
    let s = live(node, &r.session_id)?;
    let (Some(rows), Some(cols)) = (r.rows, r.cols) else {
        return Err(ToolError::invalid("rows and cols are required"));
    };
    s.resize(rows, cols).map_err(|e| session_error(&s, e))?;
    Ok(json!({"ok": true, "session_id": s.id, "rows": rows, "cols": cols}))
}

fn rename(node: &Arc<Node>, r: RenameArgs) -> Result<Value, ToolError> {
    let s = live(node, &r.session_id)?;
    let name = r
        .name
        .ok_or_else(|| ToolError::invalid("name is required"))?;
    node.sessions
        .rename(&s, name.clone())
        .map_err(ToolError::invalid)?;
    Ok(json!({"ok": true, "session_id": s.id, "name": name}))
}

fn close(node: &Arc<Node>, ctx: &CallCtx, t: &Target, a: &str) -> Result<Value, ToolError> {
    let s = resolve(node, &t.session_id)?;
    let was_live = s.close();
    let mut v = json!({"ok": true, "session_id": s.id, "was_running": was_live});
    if ctx.tuic_session.as_deref() == Some(s.tuic_session.as_str()) {
        // Closing one's own terminal is allowed, but say so: the caller's process ends with it.
        v["note"] = json!(format!("session action={a} ended the caller's own session"));
    }
    Ok(v)
}

fn pause(node: &Arc<Node>, t: &Target, stop: bool) -> Result<Value, ToolError> {
    let s = live(node, &t.session_id)?;
    let sig = if stop {
        rustix::process::Signal::STOP
    } else {
        rustix::process::Signal::CONT
    };
    s.signal_foreground(sig).map_err(|e| session_error(&s, e))?;
    Ok(json!({"ok": true, "session_id": s.id, "paused": stop}))
}

/// Asks the attached UIs to suspend a session (spec: the tab ends the PTY and keeps the tab
/// restorable, then answers through `POST /mcp/suspend-response`); the call returns the tab's
/// verdict. Refused while the session is busy, for an exited session, for the caller's own
/// session, with no UI attached, and when no tab answers within the window (20 s).
async fn suspend(node: &Arc<Node>, ctx: &CallCtx, t: &Target) -> Result<Value, ToolError> {
    let s = resolve(node, &t.session_id)?;
    let refuse = |reason: String| {
        ToolError::new("cannot_suspend", format!("Cannot suspend: {reason}"))
            .with("session_id", json!(s.id))
    };
    if s.exit().is_some() {
        return Err(refuse("the session already exited".into()));
    }
    if ctx.tuic_session.as_deref() == Some(s.tuic_session.as_str()) {
        return Err(refuse("a session cannot suspend itself".into()));
    }
    if let Some(reason) = submit::not_ready(&s) {
        return Err(refuse(reason));
    }
    if node.bus.uis_attached() == 0 {
        return Err(refuse(
            "no UI is attached to this node (suspend keeps a tab restorable; a headless node with no open /events stream has no tabs) — use session action=close to end the session".into(),
        )
        .with("next_step", json!("session action=close")));
    }
    let request_id = uuid::Uuid::new_v4().to_string();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let table = || node.mcp.suspends.lock().unwrap_or_else(|p| p.into_inner());
    table().insert(request_id.clone(), tx);
    node.bus.publish(Event::SessionSuspendRequested {
        session_id: s.id.clone(),
        request_id: request_id.clone(),
    });
    let window = Duration::from_millis(node.config().tuning.mcp_suspend_timeout_ms);
    let answer = tokio::time::timeout(window, rx).await;
    table().remove(&request_id);
    match answer {
        Ok(Ok(Ok(()))) => Ok(json!({"ok": true, "session_id": s.id, "request_id": request_id})),
        Ok(Ok(Err(reason))) => Err(refuse(reason).with("request_id", json!(request_id))),
        _ => Err(
            refuse(format!("no tab answered within {} s", window.as_secs_f64()))
                .with("request_id", json!(request_id)),
        ),
    }
}

fn keep_open(node: &Arc<Node>, k: KeepOpenArgs) -> Result<Value, ToolError> {
    let s = resolve(node, &k.session_id)?;
    let Some(enabled) = k.enabled else {
        return Err(ToolError::invalid("enabled (boolean) is required"));
    };
    // Managed children come from agent action=spawn; the mark lives with their peer entry.
    if let Some(p) = node
        .mail
        .lock()
        .peers
        .get_mut(&s.tuic_session)
        .filter(|p| p.managed)
    {
        p.keep_open = enabled;
        return Ok(json!({"session_id": s.id, "keep_open": enabled}));
    }
    Err(ToolError::new(
        "user_session",
        format!(
            "session {} is a user-created session; keep_open applies only to managed children started by agent action=spawn",
            s.id
        ),
    )
    .with("session_id", json!(s.id)))
}

fn declare_worktree(node: &Arc<Node>, ctx: &CallCtx, d: DeclareArgs) -> Result<Value, ToolError> {
    if let Some(r) = d.session_id.as_deref() {
        let own = ctx
            .tuic_session
            .as_deref()
            .and_then(|t| node.sessions.live(t));
        if own
            .as_ref()
            .is_none_or(|o| node.sessions.live(r).is_none_or(|x| x.id != o.id))
        {
            return Err(ToolError::invalid(
                "declare_worktree places the caller's own session: omit session_id (a foreign session target is rejected)",
            ));
        }
    }
    let Some(t) = ctx.tuic_session.as_deref() else {
        return Err(ToolError::new(
            "not_bound",
            "declare_worktree needs the calling terminal's identity: call from a tuic PTY (tuic-bridge sends $TUIC_SESSION as x-tuic-session)",
        ));
    };
    let Some(own) = node.sessions.live(t) else {
        return Err(ToolError::new(
            "not_bound",
            format!("the caller's identity {t} owns no live PTY on this node"),
        ));
    };
    let path = d
        .worktree_path
        .as_deref()
        .ok_or_else(|| ToolError::invalid("worktree_path is required (an absolute path)"))?;
    super::repo_git::declare(node, t, &own.id, &own.cwd, path)
}
