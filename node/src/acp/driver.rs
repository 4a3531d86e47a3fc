//! One agent process and its ACP connection: the task that owns them.
//!
//! It spawns the configured program in its own process group (stderr goes to the node's log
//! ring line by line), speaks newline-delimited JSON-RPC on its stdio through the official
//! crate's `Lines` transport, answers the agent's client-side requests (permission requests
//! are handed to the connection to hold; `fs/*` are served beneath the connection's cwd), and
//! ends the whole group when the connection is stopped. A line that is not JSON is logged and
//! skipped: the connection survives it.
//!
//! It deliberately does not decide anything about turns or answers: [`super::Conn`] does.

use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    CreateTerminalRequest, CreateTerminalResponse, InitializeRequest, KillTerminalRequest,
    KillTerminalResponse, LoadSessionRequest, NewSessionRequest, ReadTextFileRequest,
    ReadTextFileResponse, ReleaseTerminalRequest, ReleaseTerminalResponse,
    RequestPermissionRequest, SessionNotification, TerminalOutputRequest, TerminalOutputResponse,
    WaitForTerminalExitRequest, WriteTextFileRequest, WriteTextFileResponse,
};
use agent_client_protocol::{Agent, Client, Lines};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;
use tuic_proto::acp::{ConnState, FrameBody, PermissionOption};

use super::{AgentSpec, Conn, Live, lock};

/// Longest stderr line kept in the log (longer lines are cut).
const STDERR_LINE_MAX: usize = 2000;

/// Runs the agent until it exits or `stop` fires; journals the exit.
pub(crate) async fn run(
    conn: Arc<Conn>,
    spec: AgentSpec,
    load: Option<String>,
    stop: CancellationToken,
) {
    let (cwd, identity) = {
        let i = lock(&conn.inner);
        (i.rec.cwd.clone(), i.rec.identity.clone())
    };
    let env = &conn.shared.env;
    let mut cmd = tokio::process::Command::new(&spec.command);
    // `TUIC_SESSION` is the connection's identity: a `tuic-bridge` the agent starts on its
    // own (its configured MCP servers) acts as the connection, as the one offered below does.
    cmd.args(&spec.args)
        .envs(&spec.env)
        .env("TUIC_SOCKET", &env.socket)
        .env("TUIC_ACP_CONNECTION", &conn.id)
        .env("TUIC_SESSION", &identity)
        .current_dir(&cwd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(i) = &env.instance {
        cmd.env("TUIC_APP_INSTANCE", i);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(source = "acp", conn = %conn.id, agent = %spec.name, error = %e, "starting the agent");
            conn.ended(None, format!("spawn_failed: {e}"));
            return;
        }
    };
    let pgid = child.id();
    tracing::info!(source = "acp", conn = %conn.id, agent = %spec.name, pid = ?pgid, "agent started");
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        conn.ended(None, "spawn_failed: no stdio".into());
        return;
    };
    let id = conn.id.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(mut l)) = lines.next_line().await {
            if l.len() > STDERR_LINE_MAX {
                let mut cut = STDERR_LINE_MAX;
                while !l.is_char_boundary(cut) {
                    cut -= 1;
                }
                l.truncate(cut);
            }
            tracing::info!(source = "acp", conn = %id, line = %l, "agent stderr");
        }
    });
    let id = conn.id.clone();
    let lines = futures::stream::unfold(BufReader::new(stdout).lines(), |mut l| async move {
        match l.next_line().await {
            Ok(Some(line)) => Some((Ok(line), l)),
            Ok(None) => None,
            Err(e) => Some((Err(e), l)),
        }
    });
    let incoming = lines
        .filter_map(move |line| {
            let out = match line {
                Ok(l) if l.trim().is_empty() => None,
                Ok(l) if serde_json::from_str::<serde::de::IgnoredAny>(&l).is_err() => {
                    tracing::warn!(source = "acp", conn = %id, bytes = l.len(), "agent wrote a line that is not JSON; skipped");
                    None
                }
                other => Some(other),
            };
            futures::future::ready(out)
        });
    let outgoing = futures::sink::unfold(stdin, |mut w, line: String| async move {
        w.write_all(line.as_bytes()).await?;
        if !line.ends_with('\n') {
            w.write_all(b"\n").await?;
        }
        w.flush().await?;
        Ok::<_, std::io::Error>(w)
    });
    let transport = Lines::new(Box::pin(outgoing), Box::pin(incoming));
    let main = connect(conn.clone(), transport, load, stop.clone());
    let mut status = None;
    tokio::select! {
        r = main => {
            if let Err(e) = r {
                tracing::debug!(source = "acp", conn = %conn.id, error = %e.message, "acp connection ended");
            }
        }
        s = child.wait() => status = s.ok(),
        _ = stop.cancelled() => {}
    }
    if let Some(pid) = pgid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let status = match status {
        Some(s) => Some(s),
        None => child.wait().await.ok(),
    };
    let reason = if let Some(r) = lock(&conn.inner).rec.ended.clone() {
        r
    } else if stop.is_cancelled() {
        if conn.shared.env.shutdown.is_cancelled() {
            "node_stopped".to_owned()
        } else {
            "deleted".to_owned()
        }
    } else {
        "exited".to_owned()
    };
    conn.ended(status.and_then(|s| s.code()), reason);
}

/// The ACP client on `transport`: handlers for the agent's requests and notifications, and the
/// start-up (`initialize`, `session/new` or `session/load`), then it waits for `stop`.
async fn connect(
    conn: Arc<Conn>,
    transport: impl agent_client_protocol::ConnectTo<Client> + 'static,
    load: Option<String>,
    stop: CancellationToken,
) -> Result<(), agent_client_protocol::Error> {
    let on_update = conn.clone();
    let on_permission = conn.clone();
    let on_read = conn.clone();
    let on_write = conn.clone();
    let on_term = conn.clone();
    let on_output = conn.clone();
    let on_wait = conn.clone();
    let on_kill = conn.clone();
    let on_release = conn.clone();
    Client
        .v1()
        .name("tuic")
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                let update = serde_json::to_value(&n.update).unwrap_or(Value::Null);
                on_update.push(FrameBody::Update { update });
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: RequestPermissionRequest, responder, _cx| {
                let v = serde_json::to_value(&req).unwrap_or(Value::Null);
                let options = v["options"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|o| PermissionOption {
                                option_id: o["optionId"].as_str().unwrap_or_default().to_owned(),
                                name: o["name"].as_str().unwrap_or_default().to_owned(),
                                kind: o["kind"].as_str().unwrap_or_default().to_owned(),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                on_permission.hold_permission(v["toolCall"].clone(), options, responder);
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ReadTextFileRequest, responder, _cx| {
                let path = req.path.display().to_string();
                match on_read.read_file(&path, req.line, req.limit).await {
                    Ok(content) => {
                        let resp: ReadTextFileResponse =
                            serde_json::from_value(json!({"content": content}))
                                .map_err(|_| agent_client_protocol::Error::internal_error())?;
                        responder.respond(resp)
                    }
                    Err(msg) => responder.respond_with_error(refusal(msg)),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: WriteTextFileRequest, responder, _cx| {
                let path = req.path.display().to_string();
                match on_write.write_file(&path, req.content).await {
                    Ok(()) => {
                        let resp: WriteTextFileResponse = serde_json::from_value(json!({}))
                            .map_err(|_| agent_client_protocol::Error::internal_error())?;
                        responder.respond(resp)
                    }
                    Err(msg) => responder.respond_with_error(refusal(msg)),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: CreateTerminalRequest, responder, _cx| {
                let v = serde_json::to_value(&req).unwrap_or(Value::Null);
                match on_term.create_terminal(&v) {
                    Ok(id) => {
                        let resp: CreateTerminalResponse =
                            serde_json::from_value(json!({"terminalId": id}))
                                .map_err(|_| agent_client_protocol::Error::internal_error())?;
                        responder.respond(resp)
                    }
                    Err(msg) => responder.respond_with_error(refusal(msg)),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: TerminalOutputRequest, responder, _cx| {
                let v = serde_json::to_value(&req).unwrap_or(Value::Null);
                match on_output.terminal_output(&v) {
                    Ok(out) => {
                        let resp: TerminalOutputResponse = serde_json::from_value(out)
                            .map_err(|_| agent_client_protocol::Error::internal_error())?;
                        responder.respond(resp)
                    }
                    Err(msg) => responder.respond_with_error(refusal(msg)),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: WaitForTerminalExitRequest, responder, _cx| {
                let v = serde_json::to_value(&req).unwrap_or(Value::Null);
                match on_wait.terminal(&v) {
                    Ok(s) => {
                        tokio::spawn(wait_exit(s, responder));
                        Ok(())
                    }
                    Err(msg) => responder.respond_with_error(refusal(msg)),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: KillTerminalRequest, responder, _cx| {
                let v = serde_json::to_value(&req).unwrap_or(Value::Null);
                match on_kill.terminal(&v) {
                    Ok(s) => {
                        s.kill();
                        let resp: KillTerminalResponse = serde_json::from_value(json!({}))
                            .map_err(|_| agent_client_protocol::Error::internal_error())?;
                        responder.respond(resp)
                    }
                    Err(msg) => responder.respond_with_error(refusal(msg)),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ReleaseTerminalRequest, responder, _cx| {
                let v = serde_json::to_value(&req).unwrap_or(Value::Null);
                let id = v["terminalId"].as_str().unwrap_or_default().to_owned();
                match lock(&on_release.terminals).remove(&id) {
                    Some(t) => {
                        if t.session.exit().is_none() {
                            t.session.kill();
                        }
                        let resp: ReleaseTerminalResponse = serde_json::from_value(json!({}))
                            .map_err(|_| agent_client_protocol::Error::internal_error())?;
                        responder.respond(resp)
                    }
                    None => responder.respond_with_error(refusal(format!("no terminal {id}"))),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async move |cx| {
            start(&conn, cx, load).await?;
            stop.cancelled().await;
            Ok(())
        })
        .await
}

fn refusal(msg: String) -> agent_client_protocol::Error {
    let mut e = agent_client_protocol::Error::invalid_params();
    e.message = msg;
    e
}

/// `initialize`, then `session/load` (when asked and supported) or `session/new`.
async fn start(
    conn: &Arc<Conn>,
    cx: agent_client_protocol::v1::ConnectionTo<Agent>,
    load: Option<String>,
) -> Result<(), agent_client_protocol::Error> {
    let cwd = lock(&conn.inner).rec.cwd.clone();
    let init: InitializeRequest = serde_json::from_value(json!({
        "protocolVersion": 1,
        "clientCapabilities": {
            "fs": {"readTextFile": true, "writeTextFile": true},
            "terminal": true
        },
        "clientInfo": {"name": "tuic", "version": env!("CARGO_PKG_VERSION")}
    }))
    .map_err(|_| agent_client_protocol::Error::internal_error())?;
    let init = match cx.send_request(init).block_task().await {
        Ok(r) => serde_json::to_value(&r).unwrap_or(Value::Null),
        Err(e) => {
            conn.agent_error("initialize", &e, Vec::new());
            return Err(e);
        }
    };
    let caps = &init["agentCapabilities"];
    let load_session = caps["loadSession"].as_bool().unwrap_or(false);
    let auth_methods = init["authMethods"].as_array().cloned().unwrap_or_default();
    let protocol_version = init["protocolVersion"].as_u64().unwrap_or(1) as u16;
    let agent_info = init.get("agentInfo").cloned();
    let http = match caps["mcpCapabilities"]["http"].as_bool() {
        Some(true) => (conn.shared.env.http)().await,
        _ => None,
    };
    let mcp = mcp_servers(conn, http);
    let (session_id, loaded) = match load.filter(|_| load_session) {
        Some(sid) => {
            let req = LoadSessionRequest::new(sid.clone(), cwd.clone()).mcp_servers(mcp);
            match cx.send_request(req).block_task().await {
                Ok(_) => (sid, true),
                Err(e) => {
                    conn.agent_error("session/load", &e, auth_methods);
                    return Err(e);
                }
            }
        }
        None => {
            let req = NewSessionRequest::new(cwd.clone()).mcp_servers(mcp);
            match cx.send_request(req).block_task().await {
                Ok(r) => (r.session_id.to_string(), false),
                Err(e) => {
                    conn.agent_error("session/new", &e, auth_methods);
                    return Err(e);
                }
            }
        }
    };
    let seq = {
        let mut i = lock(&conn.inner);
        i.rec.session_id = Some(session_id.clone());
        i.rec.load_session = load_session;
        i.live = Some(Live {
            cx,
            session_id: session_id.clone(),
        });
        i.state = ConnState::Ready;
        drop(i);
        conn.persist();
        conn.push(FrameBody::Ready {
            session_id,
            protocol_version,
            agent_info,
            load_session,
            loaded,
        })
    };
    conn.notice("ready", seq, None);
    Ok(())
}

/// tuic offered to the agent as an MCP server, bound to the connection's identity: the node's
/// `/mcp` over loopback HTTP when the agent advertises `mcpCapabilities.http` and the node
/// serves one (`x-tuic-session` and the node token's cookie as headers), else `tuic-bridge`
/// over stdio (installed beside the node) with `TUIC_SESSION`. None when neither is there.
fn mcp_servers(
    conn: &Conn,
    http: Option<super::HttpMcp>,
) -> Vec<agent_client_protocol::v1::schema::McpServer> {
    let identity = lock(&conn.inner).rec.identity.clone();
    if let Some(h) = http {
        return serde_json::from_value(json!([{
            "type": "http",
            "name": "tuic",
            "url": h.url,
            "headers": [
                {"name": tuic_proto::mcp::TUIC_SESSION_HEADER, "value": identity},
                {"name": "cookie", "value": h.cookie}
            ]
        }]))
        .unwrap_or_default();
    }
    let Some(bridge) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("tuic-bridge")))
        .filter(|b| b.exists())
    else {
        return Vec::new();
    };
    let env = &conn.shared.env;
    let mut vars = vec![
        json!({"name": "TUIC_SOCKET", "value": env.socket.display().to_string()}),
        json!({"name": "TUIC_ACP_CONNECTION", "value": conn.id}),
        json!({"name": "TUIC_SESSION", "value": identity}),
    ];
    if let Some(i) = &env.instance {
        vars.push(json!({"name": "TUIC_APP_INSTANCE", "value": i}));
    }
    serde_json::from_value(json!([{
        "name": "tuic",
        "command": bridge.display().to_string(),
        "args": [],
        "env": vars
    }]))
    .unwrap_or_default()
}

impl Conn {
    /// Journals a start-up error as a card.
    fn agent_error(&self, method: &str, e: &agent_client_protocol::Error, auth: Vec<Value>) {
        let body = FrameBody::AgentError {
            method: method.to_owned(),
            code: i64::from(e.code.value()),
            message: e.message.clone(),
            data: e.data.clone(),
            auth_methods: auth,
        };
        lock(&self.inner).error = Some(body.clone());
        {
            let mut i = lock(&self.inner);
            i.rec.ended = Some(format!("{method} failed: {}", e.message));
        }
        let seq = self.push(body);
        self.notice("card", seq, None);
    }

    /// The agent is gone: settle what waits on it, journal the exit, mark the connection ended.
    pub(super) fn ended(&self, code: Option<i32>, reason: String) {
        self.cancel_all_held("agent_exit");
        let turn = {
            let mut i = lock(&self.inner);
            i.live = None;
            i.state = ConnState::Ended;
            i.rec.ended = Some(reason.clone());
            let t = i.turn_running.then_some(i.rec.turn);
            i.turn_running = false;
            t
        };
        if let Some(turn) = turn {
            self.push(FrameBody::TurnEnd {
                turn,
                stop_reason: "agent_exit".into(),
                error: Some(reason.clone()),
            });
        }
        let seq = self.push(FrameBody::Exit { code, reason });
        self.persist();
        self.notice("ended", seq, None);
        lock(&self.inner).gone.cancel();
    }

    /// Reads a text file beneath the connection's cwd.
    async fn read_file(
        &self,
        path: &str,
        line: Option<u32>,
        limit: Option<u32>,
    ) -> Result<String, String> {
        let root = std::path::PathBuf::from(lock(&self.inner).rec.cwd.clone());
        let p = path.to_owned();
        let r = tokio::task::spawn_blocking(move || {
            crate::fs::read(&[root], &p, crate::fs::STANDARD_READ_CAP)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.message));
        let r = r.map(|v| {
            let text = v["content"].as_str().unwrap_or_default().to_owned();
            match (line, limit) {
                (None, None) => text,
                (l, n) => text
                    .lines()
                    .skip(l.unwrap_or(1).saturating_sub(1) as usize)
                    .take(n.map(|n| n as usize).unwrap_or(usize::MAX))
                    .collect::<Vec<_>>()
                    .join("\n"),
            }
        });
        self.capability("fs/read_text_file", path, r.as_ref().err());
        r
    }

    /// Writes a text file beneath the connection's cwd.
    async fn write_file(&self, path: &str, content: String) -> Result<(), String> {
        let root = std::path::PathBuf::from(lock(&self.inner).rec.cwd.clone());
        let p = path.to_owned();
        let r =
            tokio::task::spawn_blocking(move || crate::fs::write(&[root], &p, content.as_bytes()))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.message));
        self.capability("fs/write_text_file", path, r.as_ref().err());
        r
    }

    fn capability(&self, method: &str, target: &str, error: Option<&String>) {
        if let Some(e) = error {
            tracing::warn!(source = "acp", conn = %self.id, method, path = %target, error = %e, "agent request refused");
        }
        self.push(FrameBody::Capability {
            method: method.to_owned(),
            target: target.to_owned(),
            ok: error.is_none(),
            error: error.cloned(),
            session_id: None,
        });
    }
}

/// A `terminal/create` terminal: the tuic PTY session it runs in, and its output bound.
pub(super) struct Terminal {
    session: Arc<crate::session::Session>,
    limit: Option<u64>,
}

fn terminal_error(msg: String) -> agent_client_protocol::Error {
    refusal(msg)
}

impl Conn {
    /// `terminal/create`: the command runs as a tuic PTY session (listed, attachable).
    fn create_terminal(&self, v: &Value) -> Result<String, String> {
        let Some(sessions) = (self.shared.env.sessions)() else {
            return Err("the node is stopping".into());
        };
        let command = v["command"].as_str().unwrap_or_default().to_owned();
        let root = lock(&self.inner).rec.cwd.clone();
        let cwd = v["cwd"].as_str().map(str::to_owned).unwrap_or(root.clone());
        let r = (|| {
            if !std::path::Path::new(&cwd).starts_with(&root) {
                return Err(format!(
                    "cwd {cwd} is outside the connection's directory {root}"
                ));
            }
            let args = v["args"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let env = v["env"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|e| {
                            Some((
                                e["name"].as_str()?.to_owned(),
                                e["value"].as_str()?.to_owned(),
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let req = crate::session::CreateRequest {
                shell: Some(command.clone()),
                args,
                cwd: Some(cwd.clone()),
                env,
                name: Some(format!("acp: {command}")),
                ..Default::default()
            };
            let s = sessions.create(req).map_err(|e| e.to_string())?;
            let id = s.id.clone();
            lock(&self.terminals).insert(
                id.clone(),
                Terminal {
                    session: s,
                    limit: v["outputByteLimit"].as_u64(),
                },
            );
            Ok(id)
        })();
        if let Err(e) = &r {
            tracing::warn!(source = "acp", conn = %self.id, command = %command, error = %e, "agent terminal refused");
        }
        self.push(FrameBody::Capability {
            method: "terminal/create".into(),
            target: command,
            ok: r.is_ok(),
            error: r.as_ref().err().cloned(),
            session_id: r.as_ref().ok().cloned(),
        });
        r
    }

    fn terminal(&self, v: &Value) -> Result<Arc<crate::session::Session>, String> {
        let id = v["terminalId"].as_str().unwrap_or_default();
        lock(&self.terminals)
            .get(id)
            .map(|t| t.session.clone())
            .ok_or_else(|| format!("no terminal {id}"))
    }

    /// `terminal/output`: the retained output as text (escapes stripped), cut from the front to
    /// the terminal's byte limit, and the exit status once it exited.
    fn terminal_output(&self, v: &Value) -> Result<Value, String> {
        let s = self.terminal(v)?;
        let limit = lock(&self.terminals)
            .get(&s.id)
            .and_then(|t| t.limit)
            .unwrap_or(1 << 20) as usize;
        let raw = s.stream().ring();
        let mut text = crate::session::cleanlog::Stripper::default().strip(&raw);
        let truncated = text.len() > limit;
        if truncated {
            let mut cut = text.len() - limit;
            while !text.is_char_boundary(cut) {
                cut += 1;
            }
            text = text[cut..].to_owned();
        }
        let mut out = json!({"output": text, "truncated": truncated});
        if let Some(e) = s.exit() {
            out["exitStatus"] = json!({"exitCode": e.code, "signal": null});
        }
        Ok(out)
    }
}

/// Waits for a terminal's exit off the dispatch loop, then answers.
async fn wait_exit(
    s: Arc<crate::session::Session>,
    responder: agent_client_protocol::v1::Responder<
        agent_client_protocol::v1::schema::WaitForTerminalExitResponse,
    >,
) {
    let mut life = s.lifecycle();
    loop {
        life.borrow_and_update();
        if let Some(e) = s.exit() {
            let r = serde_json::from_value(json!({"exitCode": e.code, "signal": null}));
            match r {
                Ok(r) => {
                    let _ = responder.respond(r);
                }
                Err(_) => {
                    let _ = responder
                        .respond_with_error(agent_client_protocol::Error::internal_error());
                }
            }
            return;
        }
        if life.changed().await.is_err() {
            let _ = responder
                .respond_with_error(terminal_error("the terminal's session is gone".into()));
            return;
        }
    }
}
