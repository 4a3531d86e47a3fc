//! The protocol session's handshake: `initialize` and `server/discover` (capabilities, server
//! info), the session-table cap, and binding a terminal's `x-tuic-session` to the session that
//! `tools/call` then runs as (its [`CallCtx`]).

use super::*;

/// What the server offers: `stateless` for `server/discover` (2026-07-28 has no
/// `resources/subscribe` and no `logging/setLevel`, so neither is claimed there).
pub(super) fn capabilities(stateless: bool) -> Value {
    let mut c = json!({"tools": {"listChanged": true}, "experimental": {"claude/channel": {}}});
    crate::mcp::features::capabilities(&mut c, stateless);
    c
}

pub(super) fn server_info() -> Value {
    json!({"name": crate::mcp::SERVER_NAME, "version": env!("CARGO_PKG_VERSION")})
}

pub(super) fn cache_envelope(r: &mut Value) {
    r["resultType"] = json!("complete");
    r["ttlMs"] = json!(0);
    r["cacheScope"] = json!("private");
}

pub(super) fn discover(node: &Arc<Node>, ctx: &CallCtx) -> Value {
    let collapsed = ctx.collapsed(&node.config());
    let mut r = json!({
        "supportedVersions": p::SUPPORTED,
        "capabilities": capabilities(true),
        "instructions": crate::mcp::current_instructions(node, collapsed),
        "serverInfo": server_info(),
        "_meta": {p::META_SERVER_INFO: server_info()},
    });
    cache_envelope(&mut r);
    r
}

pub(super) fn initialize(
    node: &Arc<Node>,
    req: &Req,
    id: Value,
    params: &Map<String, Value>,
    minted: &mut Option<String>,
) -> Outcome {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let version = p::negotiate(requested);
    let client = params
        .get("clientInfo")
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let now = Instant::now();
    let (sid, arrival) =
        node.mcp
            .sessions
            .initialize(req.session.as_deref(), now, version, client.clone());
    if arrival != Arrival::Reused {
        enforce_cap(node);
    }
    let binding = bind(node, &sid, req.tuic_session.as_deref(), now);
    tracing::info!(
        source = "mcp_initialize",
        event = arrival.as_str(),
        session = %sid,
        client = client.as_deref().unwrap_or(""),
        requested = requested.unwrap_or(""),
        version,
        tuic_session = req.tuic_session.as_deref().unwrap_or(""),
        binding = binding.as_deref().unwrap_or("none"),
        pty_backed = req
            .tuic_session
            .as_deref()
            .is_some_and(|t| node.sessions.owns_live_pty(t)),
        "mcp initialize"
    );
    let collapsed = node.config().collapse_tools
        || crate::mcp::registry::client_requires_meta_tools(client.as_deref());
    let instructions = crate::mcp::current_instructions(node, collapsed);
    // The launch receipt keeps what was served to a PTY identity, after auto-binding.
    if let Some(t) = req.tuic_session.as_deref().filter(|_| binding.is_some()) {
        crate::mail::receipt::served(&node.mail, t, &sid, &instructions);
    }
    *minted = Some(sid);
    Outcome::ok(p::result(
        id,
        json!({
            "protocolVersion": version,
            "capabilities": capabilities(false),
            "serverInfo": server_info(),
            "instructions": instructions,
        }),
    ))
}

/// Applies the session-table cap after a request may have added a session; evicted
/// sessions' identities and pending parents are retired as after a TTL reap.
pub(super) fn enforce_cap(node: &Arc<Node>) {
    let sweep = node.mcp.enforce_cap(&node.config());
    if !sweep.reaped.is_empty() {
        crate::mail::evict_peers_for_reaped_mcp_session(&node.mail, &sweep.retired);
        crate::mail::forget_pending(&node.mail, &sweep.reaped);
    }
}

/// Binds a valid `x-tuic-session` to the protocol session. Returns how it bound.
pub(super) fn bind(
    node: &Arc<Node>,
    sid: &str,
    tuic: Option<&str>,
    now: Instant,
) -> Option<String> {
    let tuic = tuic?;
    if uuid::Uuid::parse_str(tuic).is_err() {
        tracing::warn!(source = "mcp", session = %sid, "ignoring a malformed x-tuic-session header");
        return Some("invalid".into());
    }
    // Identities are ranked by whether they resolve to a live PTY: a session bound to a
    // terminal-backed identity never wanders onto one no terminal backs.
    let current = node
        .mcp
        .sessions
        .with(sid, |s| s.tuic_session.map(str::to_owned))
        .flatten();
    if let Some(cur) = current.filter(|c| c != tuic)
        && node.sessions.owns_live_pty(&cur)
        && !node.sessions.owns_live_pty(tuic)
    {
        tracing::warn!(source = "mcp", session = %sid, bound = %cur, asserted = %tuic,
            "kept the terminal-backed identity; the asserted one owns no live PTY");
        return Some("kept_pty_identity".into());
    }
    let grace = Duration::from_millis(node.config().tuning.mcp_identity_grace_ms);
    let b = node.mcp.sessions.bind_identity(sid, tuic, now, grace);
    if let Binding::Reclaimed { previous } = &b {
        tracing::info!(source = "mcp", session = %sid, previous = %previous, "reclaimed a stale identity binding");
    }
    Some(
        match b {
            Binding::Owner => "owner",
            Binding::Sibling => "sibling",
            Binding::Unchanged => "unchanged",
            Binding::Reclaimed { .. } => "reclaimed",
        }
        .into(),
    )
}

pub(super) fn call_ctx(
    node: &Arc<Node>,
    req: &Req,
    headers: &HeaderMap,
    params: &Map<String, Value>,
) -> CallCtx {
    let (tuic, session_meta_tools, session_claude_code) = req
        .session
        .as_deref()
        .and_then(|s| {
            node.mcp.sessions.with(s, |x| {
                (
                    x.tuic_session.map(str::to_owned),
                    x.meta_tools,
                    x.claude_code,
                )
            })
        })
        .unwrap_or((None, false, false));
    CallCtx {
        loopback: guard::is_loopback_caller(req.transport, headers),
        mcp_session: req.session.clone(),
        tuic_session: tuic,
        client_name: p::meta_client_name(params).map(str::to_owned),
        session_meta_tools,
        session_claude_code,
        progress_token: params
            .get("_meta")
            .and_then(|m| m.get("progressToken"))
            .filter(|t| t.is_string() || t.is_number())
            .cloned(),
    }
}
