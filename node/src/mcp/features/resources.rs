//! Resources: each terminal session's screen (`tuic://sessions/{alias}/screen`, text) and its
//! recent output (`…/output`, paged like `session action=output`, query parameters
//! `limit`, `from_line`, `since_cursor`, `format`), the registered repositories
//! (`tuic://repos`, `tuic://repos/{name}` with their declared worktrees) and the caller's own
//! inbox (`tuic://inbox`). What agents read is redacted as the output pager redacts it. On a
//! hub, other hosts' sessions are listed too (`tuic://hosts/{host}/…`, see [`super::remote`]).
//!
//! Subscriptions (`resources/subscribe`) need a protocol session: `notifications/resources/
//! updated` goes to its `GET /mcp` stream (for `tuic://inbox`, when mail arrives: agent mail
//! calls [`inbox_updated`]). One watcher task per terminal session serves every
//! subscriber of it, coalescing output into at most one notification per [`COALESCE`] per
//! subscriber; a protocol session holds at most [`MAX_PER_SESSION`] subscriptions and the node
//! at most [`MAX_TOTAL`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{RESOURCE_NOT_FOUND, RpcError, parse};
use crate::mcp::registry::CallCtx;
use crate::session::output::{self as session_output, OutputQuery};
use crate::session::{Session, redact};
use crate::state::Node;

/// Subscriptions one protocol session may hold.
pub(crate) const MAX_PER_SESSION: usize = 256;
/// Subscriptions the node holds in all.
pub(crate) const MAX_TOTAL: usize = 65_536;
/// Output within this window after a notification folds into the next one.
pub(crate) const COALESCE: Duration = Duration::from_millis(20);
/// Rows of one `resources/list` page.
const PAGE: usize = 100;

const SCHEME: &str = "tuic://";

/// What a `tuic://` URI names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A session's screen.
    Screen(String),
    /// A session's output, with the pager's query.
    Output(String, String),
    /// All repositories.
    Repos,
    /// One repository by name (or path).
    Repo(String),
    /// A repository's progress journal, with the page query (`limit`, `cursor`).
    Progress(String, String),
    /// An inbox: `None` is the caller's own.
    Inbox(Option<String>),
}

/// Parses a `tuic://` URI.
pub(crate) fn target(uri: &str) -> Result<Target, RpcError> {
    let not_found = || RpcError {
        code: RESOURCE_NOT_FOUND,
        message: format!(
            "no resource {uri}; resources/list and resources/templates/list name them"
        ),
    };
    let rest = uri.strip_prefix(SCHEME).ok_or_else(not_found)?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["sessions", alias, "screen"] if !alias.is_empty() && query.is_empty() => {
            Ok(Target::Screen(decode(alias)))
        }
        ["sessions", alias, "output"] if !alias.is_empty() => {
            Ok(Target::Output(decode(alias), query.to_owned()))
        }
        ["repos"] => Ok(Target::Repos),
        ["repos", name] if !name.is_empty() && query.is_empty() => Ok(Target::Repo(decode(name))),
        ["repos", name, "progress"] if !name.is_empty() => {
            Ok(Target::Progress(decode(name), query.to_owned()))
        }
        ["inbox"] => Ok(Target::Inbox(None)),
        ["inbox", who] if !who.is_empty() => Ok(Target::Inbox(Some(decode(who)))),
        _ => Err(not_found()),
    }
}

pub(super) fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Everything but RFC 3986's unreserved characters is escaped in a URI segment.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

pub(super) fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

/// The name a session is addressed by in URIs: its alias, else its PTY id.
fn handle(alias: &str, id: &str) -> String {
    encode(if alias.is_empty() { id } else { alias })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    #[serde(default)]
    cursor: Option<String>,
}

/// `resources/list`, paged by an opaque cursor ([`PAGE`] rows a page).
pub(crate) fn list(
    node: &Arc<Node>,
    ctx: &CallCtx,
    params: &Map<String, Value>,
) -> Result<Value, RpcError> {
    let ListParams { cursor } = parse("resources/list", params)?;
    let start = match cursor.as_deref() {
        None | Some("") => 0,
        Some(c) => c
            .parse::<usize>()
            .map_err(|_| RpcError::invalid(format!("resources/list: unknown cursor {c:?}")))?,
    };
    let mut all = Vec::new();
    for r in node.sessions.rows() {
        let h = handle(&r.alias, &r.session_id);
        let title = r.display_name.clone().unwrap_or_else(|| h.clone());
        all.push(
            json!({"uri": format!("{SCHEME}sessions/{h}/screen"), "name": format!("{h} screen"),
            "title": format!("{title}: screen"), "mimeType": "text/plain",
            "description": "What the terminal shows now (redacted)"}),
        );
        all.push(
            json!({"uri": format!("{SCHEME}sessions/{h}/output"), "name": format!("{h} output"),
            "title": format!("{title}: output"), "mimeType": "application/json",
            "description": "Recent output, paged like session action=output (redacted)"}),
        );
    }
    // On a hub, other hosts' sessions follow, their host in the URI.
    all.extend(super::remote::list_rows(node));
    all.push(json!({"uri": format!("{SCHEME}repos"), "name": "repos", "title": "Repositories",
        "mimeType": "application/json", "description": "Registered repositories and their worktrees"}));
    if let Ok(repos) = node.repos.list() {
        for r in repos {
            all.push(json!({"uri": format!("{SCHEME}repos/{}", encode(&r.name)), "name": format!("repo {}", r.name),
                "mimeType": "application/json", "description": r.path}));
            all.push(
                json!({"uri": format!("{SCHEME}repos/{}/progress", encode(&r.name)),
                "name": format!("progress {}", r.name), "mimeType": "application/json",
                "description": format!("Progress journal of {}, newest first", r.path)}),
            );
        }
    }
    if ctx.tuic_session.is_some() {
        all.push(json!({"uri": format!("{SCHEME}inbox"), "name": "inbox", "title": "My inbox",
            "mimeType": "application/json", "description": "Mail to the caller's identity (read without marking)"}));
    }
    let page: Vec<Value> = all.iter().skip(start).take(PAGE).cloned().collect();
    let mut out = json!({"resources": page});
    if start + PAGE < all.len() {
        out["nextCursor"] = json!((start + PAGE).to_string());
    }
    Ok(out)
}

/// `resources/templates/list`.
pub(crate) fn templates() -> Value {
    json!({"resourceTemplates": [
        {"uriTemplate": "tuic://sessions/{alias}/screen", "name": "session screen",
         "mimeType": "text/plain", "description": "A terminal session's screen (redacted)"},
        {"uriTemplate": "tuic://sessions/{alias}/output", "name": "session output",
         "mimeType": "application/json",
         "description": "A session's recent output; query: limit, from_line, since_cursor, format=text|raw"},
        {"uriTemplate": "tuic://repos/{name}", "name": "repository", "mimeType": "application/json",
         "description": "A registered repository and its worktrees"},
        {"uriTemplate": "tuic://repos/{name}/progress", "name": "progress journal",
         "mimeType": "application/json",
         "description": "A project's progress journal, newest first; query: limit (1-100), cursor"},
    ]})
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UriParams {
    uri: String,
}

fn session(node: &Node, alias: &str, uri: &str) -> Result<Arc<Session>, RpcError> {
    node.sessions.resolve(alias).ok_or_else(|| RpcError {
        code: RESOURCE_NOT_FOUND,
        message: format!("no session {alias} for {uri}"),
    })
}

/// The screen as text, secrets masked (`[REDACTED]`) as in the output pager.
pub(crate) fn screen_text(s: &Session) -> String {
    let rows = s.screen().grid.screen();
    let mut doc = rows.join("\n").into_bytes();
    let spans = redact::secret_spans(&doc);
    if spans.is_empty() {
        return String::from_utf8(doc).unwrap_or_default();
    }
    redact::mask_with(&mut doc, &spans, redact::SENTINEL);
    redact::sentinel_runs_to_redacted(&String::from_utf8_lossy(&doc))
}

/// The page query of a progress journal URI.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    #[serde(default)]
    limit: Option<u64>,
    #[serde(default)]
    cursor: Option<u64>,
}

fn repo(node: &Node, name: &str) -> Result<crate::repos::Repo, RpcError> {
    let repos = node
        .repos
        .list()
        .map_err(|e| RpcError::invalid(format!("reading the repositories: {e}")))?;
    repos
        .into_iter()
        .find(|r| r.name == name || r.path == name)
        .ok_or_else(|| RpcError {
            code: RESOURCE_NOT_FOUND,
            message: format!("no registered repository {name}"),
        })
}

/// `resources/read`.
pub(crate) fn read(
    node: &Arc<Node>,
    ctx: &CallCtx,
    params: &Map<String, Value>,
) -> Result<Value, RpcError> {
    let UriParams { uri } = parse("resources/read", params)?;
    let (mime, text) = match target(&uri)? {
        Target::Screen(a) => ("text/plain", screen_text(&*session(node, &a, &uri)?)),
        Target::Output(a, query) => {
            let s = session(node, &a, &uri)?;
            let mut q: OutputQuery = serde_urlencoded::from_str(&query)
                .map_err(|e| RpcError::invalid(format!("{uri}: {e}")))?;
            // Agents read the redacted formats only.
            q.format = Some(
                match q.format.as_deref() {
                    None | Some("text" | "mcp") => "mcp",
                    Some("raw" | "mcp_raw") => "mcp_raw",
                    Some(f) => {
                        return Err(RpcError::invalid(format!(
                            "{uri}: unknown format {f}; text (default) or raw"
                        )));
                    }
                }
                .into(),
            );
            let v = session_output::render(&s, &q)
                .map_err(|e| RpcError::invalid(format!("{uri}: {}", e.0)))?;
            ("application/json", v.to_string())
        }
        Target::Repos => {
            let repos = node
                .repos
                .list()
                .map_err(|e| RpcError::invalid(format!("reading the repositories: {e}")))?;
            ("application/json", json!({"repos": repos}).to_string())
        }
        Target::Repo(name) => ("application/json", json!(repo(node, &name)?).to_string()),
        Target::Progress(name, query) => {
            let r = repo(node, &name)?;
            let q: PageQuery = serde_urlencoded::from_str(&query)
                .map_err(|e| RpcError::invalid(format!("{uri}: {e}")))?;
            let mut input = json!({});
            if let Some(l) = q.limit {
                input["limit"] = json!(l);
            }
            if let Some(c) = q.cursor {
                input["cursor"] = json!(c);
            }
            let input = crate::progress::ListInput::from_value(Some(&input))
                .map_err(|e| RpcError::invalid(format!("{uri}: {e}")))?;
            let v = node
                .progress
                .list(&r.path, &input)
                .map_err(|e| RpcError::invalid(format!("{uri}: {e}")))?;
            ("application/json", v.to_string())
        }
        Target::Inbox(who) => {
            let me = ctx.tuic_session.as_deref().ok_or_else(|| {
                RpcError::invalid(
                    "tuic://inbox is the caller's own inbox: the protocol session has no identity (send x-tuic-session or agent action=register)",
                )
            })?;
            if let Some(w) = who.as_deref().filter(|w| *w != me) {
                return Err(RpcError::invalid(format!(
                    "refused: tuic://inbox/{w} is another identity's inbox; an agent reads only its own (tuic://inbox)"
                )));
            }
            let msgs = node.mail.peek(me);
            (
                "application/json",
                json!({"recipient": me, "messages": msgs}).to_string(),
            )
        }
    };
    Ok(json!({"contents": [{"uri": uri, "mimeType": mime, "text": text}]}))
}

/// Who is subscribed to what.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    inner: Mutex<Subs>,
}

#[derive(Debug, Default)]
struct Subs {
    /// PTY id → URI → protocol sessions.
    by_pty: HashMap<String, HashMap<String, HashSet<String>>>,
    /// Protocol session → how many subscriptions it holds.
    per_session: HashMap<String, usize>,
    total: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Subscriptions {
    /// Adds one; `Ok(true)` when the PTY had no watcher yet (the caller starts one).
    pub(super) fn add(&self, pty: &str, uri: &str, sid: &str) -> Result<bool, RpcError> {
        let mut g = lock(&self.inner);
        let had = g
            .by_pty
            .get(pty)
            .and_then(|u| u.get(uri))
            .is_some_and(|s| s.contains(sid));
        if had {
            return Ok(false);
        }
        let mine = g.per_session.get(sid).copied().unwrap_or(0);
        if mine >= MAX_PER_SESSION {
            return Err(RpcError::invalid(format!(
                "subscription limit reached: a protocol session holds at most {MAX_PER_SESSION} resource subscriptions; unsubscribe first"
            )));
        }
        if g.total >= MAX_TOTAL {
            return Err(RpcError::invalid(format!(
                "subscription limit reached: the node holds at most {MAX_TOTAL} resource subscriptions"
            )));
        }
        let first = !g.by_pty.contains_key(pty);
        g.by_pty
            .entry(pty.to_owned())
            .or_default()
            .entry(uri.to_owned())
            .or_default()
            .insert(sid.to_owned());
        *g.per_session.entry(sid.to_owned()).or_default() += 1;
        g.total += 1;
        Ok(first)
    }

    pub(super) fn remove(&self, pty: &str, uri: &str, sid: &str) -> bool {
        let mut g = lock(&self.inner);
        let removed = g
            .by_pty
            .get_mut(pty)
            .and_then(|u| u.get_mut(uri))
            .is_some_and(|s| s.remove(sid));
        if removed {
            g.total -= 1;
            if let Some(n) = g.per_session.get_mut(sid) {
                *n -= 1;
                if *n == 0 {
                    g.per_session.remove(sid);
                }
            }
            if let Some(u) = g.by_pty.get_mut(pty)
                && u.get(uri).is_some_and(HashSet::is_empty)
            {
                u.remove(uri);
            }
        }
        removed
    }

    /// The subscribers of one PTY's resources, `None` (and the PTY forgotten) when there are
    /// none left: its watcher ends.
    pub(super) fn targets(&self, pty: &str) -> Option<Vec<(String, Vec<String>)>> {
        let mut g = lock(&self.inner);
        let empty = g.by_pty.get(pty).is_none_or(HashMap::is_empty);
        if empty {
            g.by_pty.remove(pty);
            return None;
        }
        Some(
            g.by_pty[pty]
                .iter()
                .map(|(u, s)| (u.clone(), s.iter().cloned().collect()))
                .collect(),
        )
    }

    /// Drops everything of one PTY (it ended).
    pub(super) fn forget_pty(&self, pty: &str) {
        let mut g = lock(&self.inner);
        if let Some(u) = g.by_pty.remove(pty) {
            for sid in u.into_values().flatten() {
                g.total -= 1;
                if let Some(n) = g.per_session.get_mut(&sid) {
                    *n -= 1;
                    if *n == 0 {
                        g.per_session.remove(&sid);
                    }
                }
            }
        }
    }

    /// Subscriptions held in all.
    pub(crate) fn total(&self) -> usize {
        lock(&self.inner).total
    }
}

fn subscribable(
    node: &Arc<Node>,
    ctx: &CallCtx,
    params: &Map<String, Value>,
    method: &str,
) -> Result<(String, String, Arc<Session>), RpcError> {
    let UriParams { uri } = parse(method, params)?;
    let sid = ctx.mcp_session.clone().ok_or_else(|| {
        RpcError::invalid(format!(
            "{method} needs a protocol session (initialize, then open GET /mcp for the updates)"
        ))
    })?;
    let alias = match target(&uri)? {
        Target::Screen(a) | Target::Output(a, _) => a,
        _ => {
            return Err(RpcError::invalid(format!(
                "{uri} does not change by itself; only session screen and output resources and tuic://inbox take subscriptions"
            )));
        }
    };
    let s = session(node, &alias, &uri)?;
    Ok((uri, sid, s))
}

/// The subscription key of an identity's `tuic://inbox`: mail tells its subscribers
/// ([`inbox_updated`]); no watcher task runs for it.
fn inbox_key(identity: &str) -> String {
    format!("inbox:{identity}")
}

/// `(key, uri, protocol session)` when `params` name the caller's own `tuic://inbox` (a
/// terminal-less peer, such as an ACP chat, reads its mail through it).
fn inbox_subscription(
    ctx: &CallCtx,
    params: &Map<String, Value>,
    method: &str,
) -> Result<Option<(String, String, String)>, RpcError> {
    let UriParams { uri } = parse(method, params)?;
    if target(&uri)? != Target::Inbox(None) {
        return Ok(None);
    }
    let sid = ctx.mcp_session.clone().ok_or_else(|| {
        RpcError::invalid(format!(
            "{method} needs a protocol session (initialize, then open GET /mcp for the updates)"
        ))
    })?;
    let me = ctx.tuic_session.as_deref().ok_or_else(|| {
        RpcError::invalid(
            "tuic://inbox is the caller's own inbox: the protocol session has no identity (send x-tuic-session or agent action=register)",
        )
    })?;
    Ok(Some((inbox_key(me), uri, sid)))
}

/// New mail for `identity`: one `notifications/resources/updated` for `tuic://inbox` to each
/// subscribed protocol session's `GET /mcp` stream; whether one took it. Subscriptions of
/// sessions that are gone are dropped.
pub(crate) fn inbox_updated(node: &Arc<Node>, identity: &str) -> bool {
    let key = inbox_key(identity);
    let Some(targets) = node.mcp.features.subs.targets(&key) else {
        return false;
    };
    let mut told = false;
    for (uri, sids) in targets {
        let note = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
            "params": {"uri": uri}});
        for sid in sids {
            if node.mcp.sessions.with(&sid, |_| ()).is_none() {
                node.mcp.features.subs.remove(&key, &uri, &sid);
                continue;
            }
            told |= node.mcp.sessions.push_to_session(&sid, &note);
        }
    }
    told
}

/// `resources/subscribe`.
pub(crate) fn subscribe(
    node: &Arc<Node>,
    ctx: &CallCtx,
    params: &Map<String, Value>,
) -> Result<Value, RpcError> {
    if let Some((key, uri, sid)) = inbox_subscription(ctx, params, "resources/subscribe")? {
        node.mcp.features.subs.add(&key, &uri, &sid)?;
        return Ok(json!({}));
    }
    let (uri, sid, s) = subscribable(node, ctx, params, "resources/subscribe")?;
    if node.mcp.features.subs.add(&s.id, &uri, &sid)? {
        watch(node, s);
    }
    Ok(json!({}))
}

/// `resources/unsubscribe`.
pub(crate) fn unsubscribe(
    node: &Arc<Node>,
    ctx: &CallCtx,
    params: &Map<String, Value>,
) -> Result<Value, RpcError> {
    if let Some((key, uri, sid)) = inbox_subscription(ctx, params, "resources/unsubscribe")? {
        node.mcp.features.subs.remove(&key, &uri, &sid);
        return Ok(json!({}));
    }
    let (uri, sid, s) = subscribable(node, ctx, params, "resources/unsubscribe")?;
    node.mcp.features.subs.remove(&s.id, &uri, &sid);
    Ok(json!({}))
}

/// The watcher of one PTY: after each output, one `notifications/resources/updated` per
/// subscribed URI to each subscriber; then a pause of [`COALESCE`] into which further output
/// folds. Ends when the PTY ends or has no subscriber left.
fn watch(node: &Arc<Node>, s: Arc<Session>) {
    let n = node.clone();
    node.tasks.spawn(async move {
        let mut wake = s.wake();
        wake.mark_unchanged();
        loop {
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                r = wake.changed() => if r.is_err() { break },
            }
            let Some(targets) = n.mcp.features.subs.targets(&s.id) else {
                return;
            };
            for (uri, sids) in targets {
                let note = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                    "params": {"uri": uri}});
                for sid in sids {
                    if n.mcp.sessions.with(&sid, |_| ()).is_none() {
                        // The protocol session is gone (reaped, deleted): so is its interest.
                        n.mcp.features.subs.remove(&s.id, &uri, &sid);
                        continue;
                    }
                    n.mcp.sessions.push_to_session(&sid, &note);
                }
            }
            if s.exit().is_some() {
                break;
            }
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                _ = tokio::time::sleep(COALESCE) => {}
            }
        }
        n.mcp.features.subs.forget_pty(&s.id);
    });
}

/// Announces `notifications/resources/list_changed` to every `GET /mcp` stream when sessions
/// come, go or are renamed (the URIs name them); a burst within [`COALESCE`] is one message.
pub(crate) fn spawn_list_changes(node: &Arc<Node>) {
    use tuic_proto::events::Event;
    let n = node.clone();
    let mut rx = node.bus.subscribe();
    node.tasks.spawn(async move {
        loop {
            let relevant = tokio::select! {
                _ = n.shutdown.cancelled() => break,
                r = rx.recv() => match r {
                    Ok(env) => matches!(
                        env.event,
                        Event::SessionCreated { .. } | Event::SessionClosed { .. } | Event::SessionRenamed { .. }
                    ),
                    // Lagged: something may have changed.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                    Err(_) => break,
                },
            };
            if !relevant {
                continue;
            }
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                _ = tokio::time::sleep(COALESCE) => {}
            }
            // What arrived meanwhile is covered by this one message.
            while rx.try_recv().is_ok() {}
            n.mcp.sessions.broadcast(
                &json!({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}),
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_and_unknown_ones_are_not_found() {
        assert_eq!(
            target("tuic://sessions/dev-1/screen"),
            Ok(Target::Screen("dev-1".into()))
        );
        assert_eq!(
            target("tuic://sessions/a%20b/output?limit=5"),
            Ok(Target::Output("a b".into(), "limit=5".into()))
        );
        assert_eq!(target("tuic://inbox"), Ok(Target::Inbox(None)));
        assert_eq!(target("tuic://repos/x"), Ok(Target::Repo("x".into())));
        assert_eq!(
            target("tuic://repos/x/progress?limit=3"),
            Ok(Target::Progress("x".into(), "limit=3".into()))
        );
        for bad in [
            "file:///etc/passwd",
            "tuic://sessions//screen",
            "tuic://nope",
        ] {
            assert_eq!(target(bad).unwrap_err().code, RESOURCE_NOT_FOUND, "{bad}");
        }
    }

    #[test]
    fn subscriptions_are_capped_per_session_and_counted() {
        let s = Subscriptions::default();
        assert_eq!(s.add("p", "u0", "a"), Ok(true));
        assert_eq!(
            s.add("p", "u0", "a"),
            Ok(false),
            "a repeat is not a second one"
        );
        for i in 1..MAX_PER_SESSION {
            s.add("p", &format!("u{i}"), "a").unwrap();
        }
        let e = s.add("p", "one-more", "a").unwrap_err();
        assert_eq!(e.code, crate::mcp::protocol::INVALID_PARAMS);
        assert!(e.message.contains("at most 256"), "{}", e.message);
        // Another session is not affected.
        assert_eq!(s.add("p", "u0", "b"), Ok(false));
        assert_eq!(s.total(), MAX_PER_SESSION + 1);
        assert!(s.remove("p", "u0", "a"));
        s.forget_pty("p");
        assert_eq!(s.total(), 0);
        assert!(s.targets("p").is_none());
    }
}
