//! `agent`: peer identity and mail between agents. This file owns the surface, the
//! loopback-only rule, the identity-scoped refusals with their next step, the removed-action
//! routes and the argument handling; the mail itself lives in `crate::mail`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tuic_proto::mail::{DeliveryPath, InboxError};

use crate::logs::mono_ms;
use crate::mail::{Mail, launch, spawn, wake};
use crate::mcp::registry::{
    CallCtx, ToolDef, ToolError, ToolFuture, action, on_blocking_pool, schema,
};
use crate::state::Node;

const ACTIONS: &[&str] = &["register", "list_peers", "send", "inbox", "wait", "spawn"];
/// Actions that act as the caller and so need a protocol session.
const IDENTITY_SCOPED: &[&str] = &["register", "send", "inbox", "wait"];

pub(super) static TOOL: ToolDef = ToolDef {
    name: "agent",
    summary: "Agent identity, peer discovery and mail between agents",
    description: "Agents talk through mail. Your identity is bound automatically when your terminal's TUIC_SESSION reaches the server; otherwise call register. register, list_peers, send, inbox: local clients only.\n\
- register (name?, orchestrator?, path?, tuic_session?, replaces?): declare or rename this agent; returns tuic_session and mail_wake.\n\
- list_peers (path?): registered agents: {tuic_session, name, orchestrator, alias?, session_id?}; with a hub, agents on other machines too, each with an address (<connection_id>/<tuic_session>, local/<tuic_session> for the hub's own).\n\
- send (to, message, urgency?, keep_open?): deliver mail (64 KB max); to accepts a tuic_session, a unique name, a PTY id, an alias, or an address from list_peers (crosses hosts through the hub: delivered, accepted (outbox, retried) or uncertain, or an error naming the connection). Returns delivered, delivery_path (waiter, sse, terminal_or_queued, orchestrator_wake[_coalesced], inbox_only), recipient_state; urgency=urgent adds urgent_delivered (and urgent_fallback_reason). keep_open changes a managed child's idle-closure mark.\n\
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
    blocking: &["spawn"],
    passthrough: false,
};

/// The checks every action passes first: removed actions, the action enum, loopback-only and
/// the protocol-session requirement.
fn precheck<'a>(
    node: &Arc<Node>,
    ctx: &CallCtx,
    args: &'a Map<String, Value>,
) -> Result<&'a str, ToolError> {
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
    if matches!(a, "send" | "inbox" | "wait") {
        own_identity_only(node, ctx, a, args)?;
    }
    Ok(a)
}

fn handler(node: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let a = precheck(node, ctx, args)?;
    match a {
        "register" => register(node, ctx, args),
        "list_peers" => list_peers(node, args),
        "inbox" => inbox(node, ctx, args),
        "spawn" => spawn_child(node, ctx, args),
        // `wait` and `send` are dispatched to `wait_async`/`send_async` by the registry;
        // reaching here is a bug.
        _ => Err(ToolError::new(
            "internal",
            format!("agent action={a} runs asynchronously"),
        )),
    }
}

/// `agent action=wait`, run as a future: it sleeps on the inbox, not on a thread.
pub(super) fn wait_async(node: Arc<Node>, ctx: CallCtx, args: Map<String, Value>) -> ToolFuture {
    Box::pin(async move {
        precheck(&node, &ctx, &args)?;
        let me = caller(&node, &ctx)?;
        let since = opt_u64(&args, "since")?;
        let timeout = opt_u64(&args, "timeout_ms")?;
        let o = Mail::wait(&node, &me, since, timeout)
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

fn opt_str<'a>(args: &'a Map<String, Value>, k: &str) -> Result<Option<&'a str>, ToolError> {
    match args.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ToolError::invalid(format!("{k} must be a string"))),
    }
}

fn opt_u64(args: &Map<String, Value>, k: &str) -> Result<Option<u64>, ToolError> {
    match args.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| ToolError::invalid(format!("{k} must be a non-negative integer"))),
    }
}

fn opt_bool(args: &Map<String, Value>, k: &str) -> Result<Option<bool>, ToolError> {
    match args.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ToolError::invalid(format!("{k} must be a boolean"))),
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
    Mail::ensure(node, &mut g, &me);
    Ok(me)
}

fn has_pty(node: &Node, tuic: &str) -> bool {
    node.sessions
        .live(tuic)
        .is_some_and(|s| s.tuic_session == tuic)
}

/// The spec's refusal of an identity claim, word for word (spec: "identity binding").
pub(crate) const ALREADY_REGISTERED: &str = "already registered to another active MCP session";

/// How many (claimant, identity) pairs the refusal WARN remembers; past it the set starts
/// over, so a flood of claimants costs bounded memory and at worst repeats a WARN.
pub(crate) const CLAIM_WARNINGS: usize = 4096;

/// Why an identity claim was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Another protocol session holds it and is live (stream, or used within the grace).
    Live,
    /// A live terminal owns it: only a bridge in that terminal (`x-tuic-session`) binds it.
    Terminal,
    /// Only idle sessions hold it: reclaiming is for the header-bound caller.
    Stale,
}

impl Held {
    fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live_owner",
            Self::Terminal => "terminal",
            Self::Stale => "stale_owner",
        }
    }
}

/// Refuses a claim on `target` (by announcement, `replaces=`, or acting as it) when anyone
/// but the caller holds it: another protocol session, live or stale, or a live terminal the
/// caller is not bound to.
fn refuse_if_held(
    node: &Arc<Node>,
    ctx: &CallCtx,
    target: &str,
    now: Instant,
    grace: Duration,
) -> Result<(), ToolError> {
    if ctx.tuic_session.as_deref() == Some(target) {
        return Ok(());
    }
    let sid = ctx.mcp_session.as_deref().unwrap_or_default();
    let held = match node.mcp.sessions.holder(sid, target, now, grace) {
        crate::mcp::sessions::Holder::Live(_) => Some(Held::Live),
        _ if has_pty(node, target) => Some(Held::Terminal),
        crate::mcp::sessions::Holder::Stale(_) => Some(Held::Stale),
        crate::mcp::sessions::Holder::Nobody => None,
    };
    match held {
        Some(h) => Err(refusal(node, ctx, target, h)),
        None => Ok(()),
    }
}

/// The refusal of a claim the session table turned down atomically.
fn claim_refusal(
    node: &Arc<Node>,
    ctx: &CallCtx,
    target: &str,
    h: &crate::mcp::sessions::Holder,
) -> ToolError {
    let held = match h {
        crate::mcp::sessions::Holder::Stale(_) => Held::Stale,
        _ => Held::Live,
    };
    refusal(node, ctx, target, held)
}

/// The refusal itself, with its WARN throttled to one per (claimant session, identity).
fn refusal(node: &Arc<Node>, ctx: &CallCtx, target: &str, held: Held) -> ToolError {
    let claimant = ctx.mcp_session.clone().unwrap_or_default();
    let key = (claimant.clone(), target.to_owned());
    let first = {
        let mut w = node
            .mcp
            .claim_warnings
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if w.len() >= CLAIM_WARNINGS && !w.contains(&key) {
            w.clear();
        }
        w.insert(key)
    };
    if first {
        tracing::warn!(source = "mcp", claimant_session = %claimant, claimant_identity = ctx.tuic_session.as_deref().unwrap_or(""), identity = %target, held = held.as_str(), "refused an identity claim: {ALREADY_REGISTERED}");
    }
    let why = match held {
        Held::Live => "",
        Held::Terminal => {
            " (it belongs to a live terminal: only a bridge in that terminal, sending it as x-tuic-session, is bound to it)"
        }
        Held::Stale => {
            " (its session is idle: only a bridge in its own terminal, sending it as x-tuic-session, may reclaim it)"
        }
    };
    let next = "omit tuic_session to get an identity of your own (agent action=register), or start from a TUIC terminal so TUIC_SESSION binds you";
    ToolError::new(
        "identity_in_use",
        format!("{target} is {ALREADY_REGISTERED}{why}; {next}"),
    )
    .with("tuic_session", json!(target))
    .with("held_by", json!(held.as_str()))
    .with("next_step", json!(next))
}

/// `send`, `inbox` and `wait` act as the caller's own identity only: a `tuic_session` or
/// `from` naming anyone else is refused, never honoured or silently ignored.
fn own_identity_only(
    node: &Arc<Node>,
    ctx: &CallCtx,
    a: &str,
    args: &Map<String, Value>,
) -> Result<(), ToolError> {
    for k in ["tuic_session", "from"] {
        let Some(v) = opt_str(args, k)? else { continue };
        if ctx.tuic_session.as_deref() == Some(v) {
            continue;
        }
        let grace = Duration::from_millis(node.config().tuning.mcp_identity_grace_ms);
        refuse_if_held(node, ctx, v, Instant::now(), grace)?;
        return Err(ToolError::new(
            "not_your_identity",
            format!(
                "agent action={a} acts only as this session's own identity ({}); {k}={v} is not it",
                ctx.tuic_session
                    .as_deref()
                    .unwrap_or("none yet: call agent action=register")
            ),
        ));
    }
    Ok(())
}

fn register(
    node: &Arc<Node>,
    ctx: &CallCtx,
    args: &Map<String, Value>,
) -> Result<Value, ToolError> {
    let sid = ctx.mcp_session.clone().unwrap_or_default();
    let name = opt_str(args, "name")?.map(str::trim).map(str::to_owned);
    if name.as_deref() == Some("") {
        return Err(ToolError::invalid("name must not be empty"));
    }
    let orchestrator = opt_bool(args, "orchestrator")?;
    let path = opt_str(args, "path")?.map(str::to_owned);
    let announced = opt_str(args, "tuic_session")?.map(str::to_owned);
    if let Some(a) = &announced
        && uuid::Uuid::parse_str(a).is_err()
    {
        return Err(ToolError::invalid("tuic_session must be a UUID"));
    }
    let replaces = opt_str(args, "replaces")?.map(str::to_owned);
    let current = ctx.tuic_session.clone();
    let now = Instant::now();
    let grace = Duration::from_millis(node.config().tuning.mcp_identity_grace_ms);
    // The identity this session may act as. A caller that proves an identity by its
    // terminal's `x-tuic-session` was bound to it by the transport before this call, so an
    // announced identity other than the bound one is always a claim by announcement.
    let (identity, claimed) = match (announced, current) {
        (Some(a), Some(c)) if a != c => {
            // The takeover guard comes before the ranking rule: a terminal-backed or owned
            // identity is never taken by announcing it (no "repair" onto someone's terminal).
            refuse_if_held(node, ctx, &a, now, grace)?;
            if has_pty(node, &c) {
                return Err(ToolError::new(
                    "identity_bound",
                    format!("this MCP session is bound to {c}, which owns a live terminal; register with tuic_session={c} (or omit it)"),
                )
                .with("tuic_session", json!(c)));
            }
            return Err(ToolError::new(
                "identity_bound",
                format!("this MCP session is already bound to a different peer identity ({c})"),
            )
            .with("tuic_session", json!(c)));
        }
        (Some(a), None) => {
            refuse_if_held(node, ctx, &a, now, grace)?;
            (a, true)
        }
        (Some(a), Some(_)) => (a, false),
        (None, Some(c)) => (c, false),
        (None, None) => (uuid::Uuid::new_v4().to_string(), true),
    };
    // `replaces=` moves another identity's mail: only one no other session holds.
    if let Some(old) = replaces.as_deref().filter(|o| *o != identity)
        && !has_pty(node, old)
    {
        refuse_if_held(node, ctx, old, now, grace)?;
    }
    if claimed {
        // Check and bind are one step: a claimant racing this one cannot slip in between.
        node.mcp
            .sessions
            .claim_identity(&sid, &identity, now, grace)
            .map_err(|h| claim_refusal(node, ctx, &identity, &h))?;
    } else {
        node.mcp.sessions.bind_identity(&sid, &identity, now, grace);
    }
    let mut out = Map::new();
    let actions = {
        let mut g = node.mail.lock();
        Mail::ensure(node, &mut g, &identity);
        g.inboxes.mark_reading(mono_ms(), &identity);
        if let Some(old) = replaces.as_deref().filter(|o| *o != identity) {
            out.insert("superseded_identity".into(), json!(old));
            if has_pty(node, old) {
                let stranded = g.inboxes.peek(old).len();
                out.insert("mail_migrated".into(), json!(0));
                out.insert("mail_stranded".into(), json!(stranded));
                out.insert(
                    "identity_warning".into(),
                    json!(format!(
                        "{old} still owns a live terminal: its mail stays with it"
                    )),
                );
            } else if g.inboxes.is_registered(old) {
                let n = Mail::carry_over(node, &mut g, old, &identity);
                out.insert("mail_migrated".into(), json!(n));
            } else {
                out.insert("mail_migrated".into(), json!(0));
            }
        }
        // Children spawned before this session registered: link them and migrate their
        // lifecycle notices.
        let pending = spawn::pending_parent(&sid);
        if g.inboxes.is_registered(&pending) {
            let linked = g
                .peers
                .values()
                .filter(|p| p.parent.as_deref() == Some(pending.as_str()))
                .count();
            let n = Mail::carry_over(node, &mut g, &pending, &identity);
            out.insert("children_linked".into(), json!(linked));
            out.insert("lifecycle_migrated".into(), json!(n));
        }
        let p = g.peers.entry(identity.clone()).or_default();
        if let Some(n) = name {
            p.name = Some(n);
        }
        if let Some(o) = orchestrator {
            p.orchestrator = o;
        }
        if path.is_some() {
            p.path = path;
        }
        out.insert("tuic_session".into(), json!(identity));
        out.insert("name".into(), json!(p.name));
        out.insert("orchestrator".into(), json!(p.orchestrator));
        Mail::drain(&mut g)
    };
    Mail::act(node, actions);
    out.insert(
        "mail_wake".into(),
        json!(if has_pty(node, &identity) {
            "managed_pty_lifecycle"
        } else {
            "none"
        }),
    );
    Ok(Value::Object(out))
}

fn list_peers(node: &Arc<Node>, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let path = opt_str(args, "path")?;
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
        Mail::ensure(node, &mut g, &s.tuic_session);
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
        precheck(&node, &ctx, &args)?;
        match plan_send(&node, &ctx, &args)? {
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
        }
    })
}

fn plan_send(
    node: &Arc<Node>,
    ctx: &CallCtx,
    args: &Map<String, Value>,
) -> Result<SendPlan, ToolError> {
    let me = caller(node, ctx)?;
    let to = opt_str(args, "to")?.ok_or_else(|| ToolError::invalid("to is required"))?;
    let message = opt_str(args, "message")?
        .ok_or_else(|| ToolError::invalid("message is required"))?
        .to_owned();
    let urgent = match opt_str(args, "urgency")? {
        None | Some("normal") => false,
        Some("urgent") => true,
        Some(u) => return Err(ToolError::invalid(format!("unknown urgency {u}"))),
    };
    let keep_open = opt_bool(args, "keep_open")?;
    let from_name = node.mail.lock().peers.get(&me).and_then(|p| p.name.clone());
    // Federation hook (`crate::mail`): a `to` that is no local recipient but an address
    // (`<connection_id>/<peer>`, `local/<peer>`) crosses hosts through the peer link.
    let recipient = match resolve(node, to) {
        Ok(r) => r,
        Err(e) => match crate::mail::route(node, to)? {
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
    let sent =
        Mail::post(node, &recipient, &me, from_name, message, None, None).map_err(mail_error)?;
    let path = match sent.receipt.delivery {
        DeliveryPath::Waiter => "waiter",
        // An orchestrator's terminal gets the generic inbox wake; a message arriving while
        // one is pending joins it (coalesced).
        DeliveryPath::TerminalOrQueued if sent.orchestrator && sent.coalesced => {
            "orchestrator_wake_coalesced"
        }
        DeliveryPath::TerminalOrQueued if sent.orchestrator => "orchestrator_wake",
        DeliveryPath::TerminalOrQueued => "terminal_or_queued",
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
    if urgent {
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
    wake::claim_and_write(node, s, wake::NOTICE, check)
        .map_err(|c| wake::urgent_refusal(c).to_owned())?;
    node.mail.lock().urgent.insert(key);
    tracing::info!(source = "agent_msg", from = %me, to = %recipient, "urgent notice written");
    Ok(())
}

fn inbox(node: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let me = caller(node, ctx)?;
    let since = opt_u64(args, "since")?;
    let limit = opt_u64(args, "limit")?.map(|l| l as usize);
    let page = Mail::inbox(node, &me, since, limit).map_err(mail_error)?;
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
        Mail::ensure(node, &mut g, p);
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
    spawn::spawn_checked(node, req).map_err(|e| ToolError::new(e.code, e.message))
}
