//! `agent`: peer identity and mail between agents. This file owns the surface, the
//! loopback-only rule, the identity-scoped refusals with their next step, the removed-action
//! routes and the argument handling; the mail itself lives in `crate::mail`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tuic_proto::mail::{DeliveryPath, InboxError};

use crate::args;
use crate::logs::mono_ms;
use crate::mail::{Mail, launch, spawn, wake};
use crate::mcp::registry::{
    CallCtx, Exec, ToolDef, ToolError, ToolFuture, action, on_blocking_pool, schema,
};
use crate::state::Node;

mod identity;
use identity::{own_identity_only, register};

const ACTIONS: &[&str] = &["register", "list_peers", "send", "inbox", "wait", "spawn"];
/// Actions that act as the caller and so need a protocol session.
const IDENTITY_SCOPED: &[&str] = &["register", "send", "inbox", "wait"];

pub(super) static TOOL: ToolDef = ToolDef {
    name: "agent",
    summary: "Agent identity, peer discovery and mail between agents",
    description: "Agents talk through mail. Your identity is bound automatically when your terminal's TUIC_SESSION reaches the server; otherwise call register. register, list_peers, send, inbox: local clients only.\n\
- register (name?, orchestrator?, path?, tuic_session?, replaces?): declare or rename this agent; returns tuic_session and mail_wake.\n\
- list_peers (path?): registered agents: {tuic_session, name, orchestrator, alias?, session_id?}; with a hub, agents on other machines too, each with an address (<connection_id>/<tuic_session>, local/<tuic_session> for the hub's own).\n\
- send (to, message, urgency?, keep_open?): deliver mail (64 KB max); to accepts a tuic_session, a unique name, a PTY id, an alias, or an address from list_peers (crosses hosts through the hub: delivered, accepted (outbox, retried) or uncertain, or an error naming the connection). Returns delivered, delivery_path (waiter, sse, terminal_or_queued, orchestrator_wake[_coalesced], acp_inbox_resource, inbox_only), recipient_state; urgency=urgent adds urgent_delivered (and urgent_fallback_reason). keep_open changes a managed child's idle-closure mark.\n\
- inbox (since?, limit?): read mail; {messages: [{message_id, from, from_name?, message, timestamp_ms, kind?}], has_more, next_since, missed_count}.\n\
- wait (since?, timeout_ms up to 300000, default 60000): block until mail arrives; {met, timed_out, new_messages, next_since}.\n\
- spawn (command or run_config, args?, model?, cwd?, prompt?, env?, name?, pty_description?, keep_open?): start a child agent in a new terminal; returns session_id, task_id (task action=get), launch_warning?.\n\
Orchestrators: children report results with send; read them with inbox or wait, not with session output.",
    actions: ACTIONS,
    schema: || {
        schema(
            ACTIONS,
            json!({
                "name": {"type": "string"},
                "orchestrator": {"type": "boolean"},
                "tuic_session": {"type": "string", "description": "identity to announce (UUID)"},
                "replaces": {"type": "string", "description": "an earlier identity whose mail moves here"},
                "urgency": {"type": "string", "enum": ["normal", "urgent"]},
                "args": {"type": "array", "items": {"type": "string"}},
                "prompt": {"type": "string"},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
                "path": {"type": "string", "description": "repository root"},
                "to": {"type": "string"},
                "from": {"type": "string", "description": "send: your own identity only"},
                "message": {"type": "string", "maxLength": 65536},
                "since": {"type": "integer", "minimum": 0},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                "timeout_ms": {"type": "integer", "minimum": 0, "maximum": 300000},
                "command": {"type": "string"},
                "cwd": {"type": "string"},
                "keep_open": {"type": "boolean"},
                "model": {"type": "string"},
                "run_config": {"type": "string"},
                "pty_description": {"anyOf": [{"type": "string"}, {"type": "null"}]}
            }),
        )
    },
    handler,
    exec: &[
        ("wait", Exec::Async(wait_async)),
        ("send", Exec::Async(send_async)),
        ("spawn", Exec::Blocking),
    ],
    passthrough: false,
};

/// The typed arguments of every `agent` action (`crate::args`); `spawn` reads its own
/// (`launch::SpawnArgs`, shared with `POST /sessions/agent`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Call {
    Register(RegisterArgs),
    ListPeers(ListPeersArgs),
    Send(SendArgs),
    Inbox(InboxArgs),
    Wait(WaitArgs),
    Spawn {},
}

#[derive(Debug, Deserialize)]
struct RegisterArgs {
    #[serde(default, deserialize_with = "args::string")]
    name: Option<String>,
    #[serde(default, deserialize_with = "args::boolean")]
    orchestrator: Option<bool>,
    #[serde(default, deserialize_with = "args::string")]
    path: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    tuic_session: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    replaces: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ListPeersArgs {
    #[serde(default, deserialize_with = "args::string")]
    path: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SendArgs {
    #[serde(default, deserialize_with = "args::string")]
    tuic_session: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    from: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    to: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    message: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    urgency: Option<String>,
    #[serde(default, deserialize_with = "args::boolean")]
    keep_open: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct InboxArgs {
    #[serde(default, deserialize_with = "args::string")]
    tuic_session: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    from: Option<String>,
    #[serde(default, deserialize_with = "args::uint")]
    since: Option<u64>,
    #[serde(default, deserialize_with = "args::uint")]
    limit: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct WaitArgs {
    #[serde(default, deserialize_with = "args::string")]
    tuic_session: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    from: Option<String>,
    #[serde(default, deserialize_with = "args::uint")]
    since: Option<u64>,
    #[serde(default, deserialize_with = "args::uint")]
    timeout_ms: Option<u64>,
}

impl Call {
    /// The identities a mail action names as its caller (`tuic_session`, `from`).
    fn who(&self) -> Option<[(&'static str, Option<&str>); 2]> {
        let (t, f) = match self {
            Call::Send(a) => (&a.tuic_session, &a.from),
            Call::Inbox(a) => (&a.tuic_session, &a.from),
            Call::Wait(a) => (&a.tuic_session, &a.from),
            _ => return None,
        };
        Some([("tuic_session", t.as_deref()), ("from", f.as_deref())])
    }
}

/// The checks every action passes first: removed actions, the action enum, loopback-only and
/// the protocol-session requirement, then the typed arguments and the own-identity rule.
fn precheck(node: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Call, ToolError> {
    match args.get("action").and_then(Value::as_str) {
        Some("detect") => return Err(ToolError::removed("agent", "detect", "GET /agents")),
        Some("stats") => return Err(ToolError::removed("agent", "stats", "GET /stats")),
        Some("metrics") => return Err(ToolError::removed("agent", "metrics", "GET /metrics")),
        _ => {}
    }
    let a = action("agent", ACTIONS, args)?;
    if IDENTITY_SCOPED.contains(&a) && ctx.mcp_session.is_none() {
        let next = if a == "register" {
            "send initialize first (POST /mcp method=initialize) and pass the Mcp-Session-Id it returns"
        } else {
            "send initialize first and pass its Mcp-Session-Id, then call agent action=register (or start from a TUIC terminal so TUIC_SESSION binds you)"
        };
        return Err(ToolError::new(
            "no_protocol_session",
            format!(
                "agent action={a} acts as the caller and needs an MCP protocol session; {next}"
            ),
        )
        .with("next_step", json!(next)));
    }
    let call: Call = args::action(a, args)?;
    if let Some(who) = call.who() {
        own_identity_only(node, ctx, a, who)?;
    }
    Ok(call)
}

fn handler(node: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    match precheck(node, ctx, args)? {
        Call::Register(r) => register(node, ctx, r),
        Call::ListPeers(l) => list_peers(node, l.path.as_deref()),
        Call::Inbox(i) => inbox(node, ctx, i),
        Call::Spawn {} => spawn_child(node, ctx, args),
        // `wait` and `send` are dispatched to `wait_async`/`send_async` by the registry;
        // reaching here is a bug.
        Call::Wait(_) | Call::Send(_) => Err(ToolError::new(
            "internal",
            "agent action=wait|send runs asynchronously",
        )),
    }
}

/// `agent action=wait`, run as a future: it sleeps on the inbox, not on a thread.
pub(super) fn wait_async(node: Arc<Node>, ctx: CallCtx, args: Map<String, Value>) -> ToolFuture {
    Box::pin(async move {
        let Call::Wait(w) = precheck(&node, &ctx, &args)? else {
            return Err(ToolError::invalid("agent action=wait expected"));
        };
        let me = caller(&node, &ctx)?;
        let o = node
            .mail
            .wait(&me, w.since, w.timeout_ms)
            .await
            .map_err(mail_error)?;
        Ok(serde_json::to_value(o).unwrap_or(Value::Null))
    })
}

fn mail_error(e: InboxError) -> ToolError {
    match e {
        InboxError::UnknownRecipient { .. } => ToolError::new("not_registered", e.to_string()),
        InboxError::TooLarge { .. } => ToolError::new("too_large", e.to_string()),
        _ => ToolError::invalid(e.to_string()),
    }
}

/// The caller's identity; a bound identity is auto-registered on first use.
fn caller(node: &Arc<Node>, ctx: &CallCtx) -> Result<String, ToolError> {
    let Some(me) = ctx.tuic_session.clone() else {
        let next = "call agent action=register first (it returns your tuic_session)";
        return Err(ToolError::new(
            "not_registered",
            format!("this MCP session has no peer identity; {next}"),
        )
        .with("next_step", json!(next)));
    };
    let mut g = node.mail.lock();
    node.mail.ensure(&mut g, &me);
    Ok(me)
}

fn list_peers(node: &Arc<Node>, path: Option<&str>) -> Result<Value, ToolError> {
    let peers: Vec<(String, crate::mail::Peer)> = node
        .mail
        .lock()
        .peers
        .iter()
        .filter(|(_, p)| path.is_none() || p.path.as_deref() == path)
        .map(|(k, p)| (k.clone(), p.clone()))
        .collect();
    let list: Vec<Value> = peers
        .into_iter()
        .map(|(k, p)| {
            let mut v = json!({"tuic_session": k, "name": p.name, "orchestrator": p.orchestrator});
            if let Some(s) = node.sessions.live(&k).filter(|s| s.tuic_session == k) {
                v["alias"] = json!(s.alias);
                v["session_id"] = json!(s.id);
            }
            if let Some(path) = p.path {
                v["path"] = json!(path);
            }
            v
        })
        // Federation hook: peers behind the peer link, with their addresses.
        .chain(crate::mail::remote_peers(&node.send_env(), path))
        .collect();
    Ok(json!({"peers": list}))
}

/// Resolves `to`: a registered identity, a live PTY (id, identity or alias), or a unique name.
fn resolve(node: &Arc<Node>, to: &str) -> Result<String, ToolError> {
    if node.mail.lock().inboxes.is_registered(to) {
        return Ok(to.to_owned());
    }
    if let Some(s) = node.sessions.live(to) {
        let mut g = node.mail.lock();
        node.mail.ensure(&mut g, &s.tuic_session);
        return Ok(s.tuic_session.clone());
    }
    let g = node.mail.lock();
    let named: Vec<&String> = g
        .peers
        .iter()
        .filter(|(_, p)| p.name.as_deref() == Some(to))
        .map(|(k, _)| k)
        .collect();
    match named.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(ToolError::new(
            "unknown_recipient",
            format!(
                "recipient '{to}' is not registered (use a tuic_session, a unique name, a PTY id or an alias from agent action=list_peers)"
            ),
        )),
        many => Err(ToolError::new(
            "ambiguous_recipient",
            format!(
                "{} peers are named '{to}'; send to one tuic_session",
                many.len()
            ),
        )
        .with("candidates", json!(many))),
    }
}

/// Why `urgency=urgent` did nothing for a recipient on another host.
const REMOTE_URGENCY: &str = "urgency applies to recipients on this host only; the message was sent to the other host as normal mail";

/// Where `agent action=send` goes: a local recipient (delivered on the blocking pool: an
/// urgent notice writes to a PTY) or an address on another host (awaited: the verdict comes
/// from the peer link, no thread waits for it).
enum SendPlan {
    Local(LocalSend),
    /// Mail to the person: a notification.
    Human {
        me: String,
        from_name: Option<String>,
        message: String,
    },
    Remote {
        me: String,
        to: String,
        from_name: Option<String>,
        message: String,
        urgent: bool,
    },
}

/// A send to a recipient on this node.
struct LocalSend {
    me: String,
    recipient: String,
    from_name: Option<String>,
    message: String,
    urgent: bool,
    keep_open: Option<bool>,
}

/// `agent action=send`, run as a future (see [`SendPlan`]).
pub(super) fn send_async(node: Arc<Node>, ctx: CallCtx, args: Map<String, Value>) -> ToolFuture {
    Box::pin(async move {
        let Call::Send(send) = precheck(&node, &ctx, &args)? else {
            return Err(ToolError::invalid("agent action=send expected"));
        };
        match plan_send(&node, &ctx, send)? {
            SendPlan::Remote {
                me,
                to,
                from_name,
                message,
                urgent,
            } => {
                let mut v =
                    super::peer_errors::send_remote(&node, &me, from_name, &to, message).await?;
                if urgent {
                    // The peer link carries no urgency: say so instead of dropping it quietly.
                    v["urgent_delivered"] = json!(false);
                    v["urgent_fallback_reason"] = json!(REMOTE_URGENCY);
                }
                Ok(v)
            }
            SendPlan::Local(local) => {
                on_blocking_pool("agent", move || send_local(&node, local)).await
            }
            SendPlan::Human {
                me,
                from_name,
                message,
            } => {
                let rec = node
                    .notify
                    .mail_to_human(&me, from_name.as_deref(), &message)
                    .await;
                Ok(json!({
                    "to": crate::notify::sources::HUMAN,
                    "status": "notified",
                    "notification_id": rec.map(|r| r.id),
                }))
            }
        }
    })
}

fn plan_send(node: &Arc<Node>, ctx: &CallCtx, args: SendArgs) -> Result<SendPlan, ToolError> {
    let me = caller(node, ctx)?;
    let to = args
        .to
        .as_deref()
        .ok_or_else(|| ToolError::invalid("to is required"))?;
    let message = args
        .message
        .ok_or_else(|| ToolError::invalid("message is required"))?;
    let urgent = match args.urgency.as_deref() {
        None | Some("normal") => false,
        Some("urgent") => true,
        Some(u) => return Err(ToolError::invalid(format!("unknown urgency {u}"))),
    };
    let keep_open = args.keep_open;
    let from_name = node.mail.lock().peers.get(&me).and_then(|p| p.name.clone());
    // `to=human` is the person: a notification, not an inbox (docs/mcp-tools.md).
    if to == crate::notify::sources::HUMAN {
        if message.len() > tuic_proto::mail::MAX_MESSAGE_BYTES {
            return Err(ToolError::new(
                "too_large",
                format!(
                    "message is {} bytes; mail carries at most {}",
                    message.len(),
                    tuic_proto::mail::MAX_MESSAGE_BYTES
                ),
            ));
        }
        return Ok(SendPlan::Human {
            me,
            from_name,
            message,
        });
    }
    // Federation hook (`crate::mail`): a `to` that is no local recipient but an address
    // (`<connection_id>/<peer>`, `local/<peer>`) crosses hosts through the peer link.
    let recipient = match resolve(node, to) {
        Ok(r) => r,
        Err(e) => match crate::mail::route(&node.mail, to)? {
            crate::mail::Route::NotAnAddress => return Err(e),
            crate::mail::Route::Local(peer) => resolve(node, &peer)?,
            crate::mail::Route::Remote if keep_open.is_none() => {
                return Ok(SendPlan::Remote {
                    me,
                    to: to.to_owned(),
                    from_name,
                    message,
                    urgent,
                });
            }
            crate::mail::Route::Remote => {
                return Err(ToolError::new(
                    "user_session",
                    format!(
                        "{to} is on another host: keep_open applies only to managed children of this node (nothing was sent)"
                    ),
                ));
            }
        },
    };
    Ok(SendPlan::Local(LocalSend {
        me,
        recipient,
        from_name,
        message,
        urgent,
        keep_open,
    }))
}

/// A local delivery (blocking).
fn send_local(node: &Arc<Node>, send: LocalSend) -> Result<Value, ToolError> {
    let LocalSend {
        me,
        recipient,
        from_name,
        message,
        urgent,
        keep_open,
    } = send;
    if keep_open.is_some()
        && !node
            .mail
            .lock()
            .peers
            .get(&recipient)
            .is_some_and(|p| p.managed)
    {
        return Err(ToolError::new(
            "user_session",
            format!(
                "{recipient} is not a managed child started by agent action=spawn; keep_open applies only to those (nothing was sent)"
            ),
        ));
    }
    let sent = node
        .mail
        .post(&recipient, &me, from_name, message, None, None)
        .map_err(mail_error)?;
    let path = match sent.receipt.delivery {
        DeliveryPath::Waiter => "waiter",
        // An orchestrator's terminal gets the generic inbox wake; a message arriving while
        // one is pending joins it (coalesced).
        DeliveryPath::TerminalOrQueued if sent.orchestrator && sent.coalesced => {
            "orchestrator_wake_coalesced"
        }
        DeliveryPath::TerminalOrQueued if sent.orchestrator => "orchestrator_wake",
        DeliveryPath::TerminalOrQueued => "terminal_or_queued",
        DeliveryPath::InboxOnly if sent.inbox_resource => "acp_inbox_resource",
        DeliveryPath::InboxOnly if sent.channel => "sse",
        DeliveryPath::InboxOnly => "inbox_only",
    };
    let mut v = json!({
        "delivered": true,
        "message_id": sent.message_id,
        "to": recipient,
        "delivery_path": path,
    });
    let pty = node
        .sessions
        .live(&recipient)
        .filter(|s| s.tuic_session == recipient);
    if let Some(s) = &pty {
        let row = s.row();
        v["recipient_state"] =
            json!({"shell_state": row.shell_state, "agent_state": row.agent_state});
    }
    if let Some(k) = keep_open
        && let Some(p) = node.mail.lock().peers.get_mut(&recipient)
    {
        p.keep_open = k;
        v["keep_open"] = json!(k);
    }
    if urgent && sent.inbox_resource {
        // The subscribed resource told the terminal-less recipient (spec: urgent send reports
        // urgent_delivered there too).
        v["urgent_delivered"] = json!(true);
    } else if urgent {
        match urgent_notice(node, &me, &recipient, &sent, pty.as_deref()) {
            Ok(()) => v["urgent_delivered"] = json!(true),
            Err(reason) => {
                v["urgent_delivered"] = json!(false);
                v["urgent_fallback_reason"] = json!(reason);
            }
        }
    }
    tracing::info!(source = "agent_msg", from = %me, to = %recipient, message_id = %sent.message_id, delivery_path = path, urgent, "agent message sent");
    Ok(v)
}

/// `urgency=urgent`: the peer body stays in the inbox; a busy managed Claude Code or Codex
/// session with a safe, empty composer gets the payload-free notice plus Enter through the
/// guarded writer (both CLIs queue it until their next tool boundary). `Err` carries the
/// fallback reason.
fn urgent_notice(
    node: &Arc<Node>,
    me: &str,
    recipient: &str,
    sent: &crate::mail::Sent,
    pty: Option<&crate::session::Session>,
) -> Result<(), String> {
    if sent.receipt.delivery == DeliveryPath::Waiter || sent.channel {
        return Ok(());
    }
    let Some(s) = pty else {
        return Err(
            "no waiter, no channel stream and no managed terminal: the message is queued in the inbox"
                .into(),
        );
    };
    let key = (me.to_owned(), recipient.to_owned());
    if node.mail.lock().urgent.contains(&key) {
        // An unread urgent notice from this sender already covers it.
        return Ok(());
    }
    if !s.agent().is_some_and(|a| wake::URGENT_AGENTS.contains(&a)) {
        return Err("the recipient's agent type is unknown (urgent notices go to managed Claude Code and Codex sessions only): the message is queued in the inbox".into());
    }
    match wake::ready(s) {
        Err(wake::Closed::Exited) => {
            return Err(wake::urgent_refusal(wake::Closed::Exited).into());
        }
        // Idle: the ordinary wake writes the notice through the same gate.
        Ok(()) => {
            return wake::gate(s).map_err(|c| wake::urgent_refusal(c).to_owned());
        }
        Err(_) => {}
    }
    let check = |s: &crate::session::Session| {
        if s.exit().is_some() {
            return Err(wake::Closed::Exited);
        }
        wake::composer_safe(s, false)
    };
    wake::claim_and_write(&node.mail, s, wake::NOTICE, check)
        .map_err(|c| wake::urgent_refusal(c).to_owned())?;
    node.mail.lock().urgent.insert(key);
    tracing::info!(source = "agent_msg", from = %me, to = %recipient, "urgent notice written");
    Ok(())
}

fn inbox(node: &Arc<Node>, ctx: &CallCtx, args: InboxArgs) -> Result<Value, ToolError> {
    let me = caller(node, ctx)?;
    let since = args.since;
    let limit = args.limit.map(|l| l as usize);
    let page = node.mail.inbox(&me, since, limit).map_err(mail_error)?;
    let ids: Vec<&str> = page
        .messages
        .iter()
        .map(|m| m.message_id.as_str())
        .collect();
    // The consumption audit: ids only, never bodies; caller and owner are bound by registration.
    let ids = serde_json::to_string(&ids).unwrap_or_default();
    tracing::info!(
        source = "agent_msg",
        event = "inbox_read",
        caller_session_id = ctx.mcp_session.as_deref().unwrap_or(""),
        caller_peer_id = %me,
        inbox_owner = %me,
        message_ids = %ids,
        missed_count = page.missed_count,
        "inbox read"
    );
    Ok(serde_json::to_value(page).unwrap_or(Value::Null))
}

fn spawn_child(
    node: &Arc<Node>,
    ctx: &CallCtx,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    // Typed: the same arguments as `POST /sessions/agent` (unknown fields are refused).
    let mut fields = args.clone();
    fields.remove("action");
    let typed: launch::SpawnArgs = serde_json::from_value(Value::Object(fields))
        .map_err(|e| ToolError::invalid(format!("spawn: {e}")))?;
    let parent = ctx.tuic_session.clone();
    if let Some(p) = &parent {
        let mut g = node.mail.lock();
        node.mail.ensure(&mut g, p);
    }
    let owners: Vec<String> = [ctx.mcp_session.clone(), parent.clone()]
        .into_iter()
        .flatten()
        .collect();
    let req = spawn::SpawnRequest {
        pending_parent: match &parent {
            None => ctx.mcp_session.as_deref().map(spawn::pending_parent),
            Some(_) => None,
        },
        parent,
        owners,
        ..spawn::SpawnRequest::from_args(typed)
    };
    spawn::spawn_checked(&node.mail, req).map_err(|e| ToolError::new(e.code, e.message))
}
