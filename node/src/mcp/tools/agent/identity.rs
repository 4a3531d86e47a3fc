//! Who an agent is: `agent action=register` (claim, bind, rename, mail carried over from a
//! replaced identity), the takeover guard that refuses an identity another live session or
//! terminal holds, and the own-identity rule of `send`, `inbox` and `wait`.

use super::*;

pub(super) fn has_pty(node: &Node, tuic: &str) -> bool {
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
pub(super) enum Held {
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
pub(super) fn refuse_if_held(
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
pub(super) fn claim_refusal(
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
pub(super) fn refusal(node: &Arc<Node>, ctx: &CallCtx, target: &str, held: Held) -> ToolError {
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
pub(super) fn own_identity_only(
    node: &Arc<Node>,
    ctx: &CallCtx,
    a: &str,
    who: [(&str, Option<&str>); 2],
) -> Result<(), ToolError> {
    for (k, v) in who {
        let Some(v) = v else { continue };
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

pub(super) fn register(
    node: &Arc<Node>,
    ctx: &CallCtx,
    args: RegisterArgs,
) -> Result<Value, ToolError> {
    let sid = ctx.mcp_session.clone().unwrap_or_default();
    let name = args.name.as_deref().map(str::trim).map(str::to_owned);
    if name.as_deref() == Some("") {
        return Err(ToolError::invalid("name must not be empty"));
    }
    let orchestrator = args.orchestrator;
    let path = args.path;
    let announced = args.tuic_session;
    if let Some(a) = &announced
        && uuid::Uuid::parse_str(a).is_err()
    {
        return Err(ToolError::invalid("tuic_session must be a UUID"));
    }
    let replaces = args.replaces;
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
        node.mail.ensure(&mut g, &identity);
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
                let n = node.mail.carry_over(&mut g, old, &identity);
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
            let n = node.mail.carry_over(&mut g, &pending, &identity);
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
    node.mail.act(actions);
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
