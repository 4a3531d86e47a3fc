//! The hub's view of its nodes: one driver task per configured connection keeps that node's
//! session list mirrored and its health known.
//!
//! A driver subscribes to the node's `/events` (session lifecycle, and the node's
//! notifications for `crate::notify`), reads `GET /sessions`
//! once per connected period, then decodes the stream (`proto::sse`, typed `Event`s) and
//! applies each event as a delta to the mirrored rows (a `lagged` re-reads the list); a health probe every 5 s marks the connection down after 3
//! misses, and a reset stream marks it down at once. Reconnects back off 1 s → 30 s with
//! jitter. While down, the connection has no rows and its routes answer 503.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tuic_node::ext::NodeApi;

use crate::connections::{self, Conn, ConnState, ConnectionConfig, describe};
use crate::peerlink::PeerHub;
use tuic_node::ext::RemoteRow;
use tuic_proto::events::Event;
use tuic_proto::sse::{SseDecoder, SseEvent};

/// Deadline of one session-list or row read from a node.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Health probe interval.
const PING_EVERY: Duration = Duration::from_secs(5);
/// Consecutive missed probes before a connection is down.
const MISSES_DOWN: u32 = 3;

/// The hub's federation state.
#[derive(Debug)]
pub struct Federation {
    /// The local node.
    pub node: Arc<NodeApi>,
    conns: RwLock<HashMap<String, Arc<Conn>>>,
    /// Shared HTTP client (connection pooling; `TCP_NODELAY` on every dialed connection).
    pub(crate) http: reqwest::Client,
    /// Cross-host mail: per-connection outboxes, shadows, peer-link tasks.
    pub mail: Arc<PeerHub>,
    /// The last screen relayed per remote session, shown while its node is down.
    pub screens: crate::lastscreen::LastScreens,
    /// Every node's rows as `GET /sessions` lists them (hub addresses, `host_offline` while
    /// down), with revisions: kept from mirror events (each change re-syncs only its
    /// connection's rows), so an unchanged list and a change feed cost what changed.
    feed: std::sync::Mutex<tuic_node::ext::RowFeed>,
    /// Session links connecting at once (event stream opened, whole list read): at most
    /// [`CONNECTS_AT_ONCE`], so the lists of many returning nodes come one batch at a time.
    connects: tokio::sync::Semaphore,
}

/// The most session links that open their stream and read their node's whole list at once.
const CONNECTS_AT_ONCE: usize = 32;

/// The window a (re)started hub spreads its first dials over: 4 ms per connection, at most 2 s
/// (500 nodes over 2 s; one node at once).
pub(crate) fn spread_window(connections: usize) -> Duration {
    Duration::from_millis(4 * connections as u64).min(Duration::from_secs(2))
}

impl Federation {
    /// A federation with no connections yet (stored outboxes loaded, the hub's mail routes
    /// installed on the node); call [`Federation::reconcile`].
    pub fn new(node: Arc<NodeApi>) -> anyhow::Result<Arc<Self>> {
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(5))
            .build()
            .expect("HTTP client");
        let mail = PeerHub::load(node.clone())?;
        node.ext.set_mail_router(mail.clone());
        let fed = Arc::new(Self {
            node: node.clone(),
            conns: RwLock::new(HashMap::new()),
            http,
            mail,
            screens: Default::default(),
            connects: tokio::sync::Semaphore::new(CONNECTS_AT_ONCE),
            feed: Default::default(),
        });
        node.ext.set_session_source(fed.clone());
        node.ext.set_router(fed.clone());
        node.ext
            .set_share_relay(Arc::new(crate::share::HubShares(fed.clone())));
        Ok(fed)
    }

    /// A connection by id.
    pub fn get(&self, id: &str) -> Option<Arc<Conn>> {
        self.conns
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// All connections.
    pub fn all(&self) -> Vec<Arc<Conn>> {
        let mut v: Vec<_> = self
            .conns
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Brings the running drivers in line with `config.json` and the secret store.
    pub fn reconcile(self: &Arc<Self>) {
        let wanted: Vec<ConnectionConfig> = connections::from_config(&self.node.config().extra);
        let default_transport = connections::default_transport(&self.node.config().extra);
        let mut conns = self.conns.write().unwrap_or_else(|p| p.into_inner());
        let mut acts = Vec::new();
        conns.retain(|id, c| {
            let listed = wanted.iter().find(|w| &w.id == id);
            let same = listed.is_some_and(|w| {
                w.url == c.url
                    && w.transport.unwrap_or(default_transport) == c.transport
                    && w.quic_fingerprint == *c.pin.lock().unwrap_or_else(|p| p.into_inner())
            });
            // A new token for the same connection (`tuic-hub connect` again): redial with it.
            let rotated = listed.is_some()
                && self
                    .node
                    .vault
                    .get(&connections::token_key(id))
                    .ok()
                    .flatten()
                    .is_some_and(|t| t != c.token);
            let keep = same && !rotated;
            if !keep {
                c.stop.cancel();
                self.feed().sync(&format!("{id}/"), Vec::new());
                tracing::info!(conn = %id, "connection removed");
                let kind = match (rotated, listed.is_some()) {
                    (true, _) => "token_rotated",
                    (false, true) => "hub_connection_changed",
                    (false, false) => "hub_connection_removed",
                };
                acts.push((kind, id.clone(), c.url.clone()));
            }
            keep
        });
        for (kind, id, url) in &acts {
            crate::audit::record_blocking(self, kind, id, url);
        }
        let new = wanted.iter().filter(|w| !conns.contains_key(&w.id)).count();
        let window = spread_window(new);
        let now = tokio::time::Instant::now();
        for w in wanted {
            if conns.contains_key(&w.id) {
                continue;
            }
            let token = match self.node.vault.get(&connections::token_key(&w.id)) {
                Ok(Some(t)) => t,
                _ => {
                    tracing::warn!(conn = %w.id, "no token stored for connection; not dialing");
                    continue;
                }
            };
            let conn = Arc::new(Conn::new(
                &w,
                token,
                w.transport.unwrap_or(default_transport),
                self.node.shutdown.child_token(),
                now + window.mul_f64(rand::random::<f64>()),
            ));
            conns.insert(w.id.clone(), conn.clone());
            self.mail.ensure_outbox(&w.id);
            self.node
                .tasks
                .spawn(crate::peerlink::drive(self.mail.clone(), conn.clone()));
            self.node.tasks.spawn(crate::progress_relay::relay_progress(
                self.http.clone(),
                self.node.clone(),
                conn.clone(),
            ));
            let fed = self.clone();
            self.node.tasks.spawn(async move { fed.drive(conn).await });
        }
    }

    /// Changes a connection's mirrored state and tells the hub's own pages what that changed
    /// in the hub's list, under each row's hub address (`<conn>/<id>`): a row's listed `state`
    /// (`host_offline` while the node is down) as `pty-parsed {type:"state"}`, a row that left
    /// as `session-closed`, a new row as `session-created`. Without these a page on the hub
    /// would see a remote session's state, or its host going offline, only at its next timed
    /// list refresh.
    pub(crate) fn update(&self, conn: &Conn, f: impl FnOnce(&mut ConnState)) {
        let events = {
            let mut st = conn.state.write().unwrap_or_else(|p| p.into_inner());
            let before = listed_states(&st);
            f(&mut st);
            // The merged list follows under the same lock, so the feed's order of changes
            // is the mirror's: this connection's rows only.
            let rows = listed_rows(&conn.id, &st)
                .into_iter()
                .map(|r| (r.address(), r.to_value()))
                .collect();
            self.feed().sync(&format!("{}/", conn.id), rows);
            listing_changes(&conn.id, &before, &st)
        };
        for e in events {
            self.node.bus.publish(e);
        }
    }

    /// One row per connection, as `GET /hub/connections` and MCP `remote` list them: the mirror
    /// and the peer link, never the token.
    pub fn connection_rows(&self) -> Vec<Value> {
        self.all()
            .into_iter()
            .map(|c| {
                // Each row is one connection; the process's descriptor budget is in
                // `GET /hub/connections`' `fds` and `/metrics`.
                let s = c.snapshot();
                let mut v = json!({
                    "id": c.id,
                    "url": c.url,
                    "up": s.up,
                    "session_count": s.sessions.len(),
                    "peer_link_up": s.peer_up,
                    "full_refreshes": s.full_refreshes,
                    "row_fetches": s.row_fetches,
                    "outbox_held": self.mail.held(&c.id),
                    "outbox_recipient_full": self.mail.recipient_full(&c.id),
                    "transport": s.transport,
                    "peer_link_ups": s.peer_link_ups,
                    "quic_session_streams": s.quic_session_streams,
                    "flaps": c.flaps().count(),
                    "transport_preference": c.transport,
                    "quic_fingerprint": *c.pin.lock().unwrap_or_else(|p| p.into_inner()),
                });
                if let Some(e) = s.last_error {
                    v["last_error"] = json!(e);
                }
                if let Some(e) = s.peer_error {
                    v["peer_last_error"] = json!(e);
                }
                v
            })
            .collect()
    }

    /// Every remote session row, tagged with its connection and address. A node that is down
    /// keeps its last known rows, with `state: "host_offline"` (until it comes back and its
    /// list is read again, or its connection is removed).
    pub fn remote_rows(&self) -> Vec<RemoteRow> {
        let mut rows = Vec::new();
        for c in self.all() {
            let st = c.state.read().unwrap_or_else(|p| p.into_inner());
            rows.extend(listed_rows(&c.id, &st));
        }
        rows
    }

    /// The merged list's revisions (`GET /sessions?since=`).
    pub(crate) fn feed(&self) -> std::sync::MutexGuard<'_, tuic_node::ext::RowFeed> {
        self.feed.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn drive(self: Arc<Self>, conn: Arc<Conn>) {
        let mut backoff =
            crate::connections::reconnect_backoff(self.node.config().tuning.peer_reconnect_max_ms);
        tokio::select! {
            _ = conn.stop.cancelled() => return,
            _ = tokio::time::sleep_until(conn.first_dial) => {}
        }
        loop {
            let ran_ok = tokio::select! {
                _ = conn.stop.cancelled() => return,
                r = self.session_once(&conn) => r,
            };
            let was_up = conn.snapshot().up;
            self.update(&conn, |s| {
                // The rows stay (shown as host offline); the next connect reads the whole list.
                s.up = false;
                if let Err(e) = &ran_ok {
                    s.last_error = Some(e.clone());
                }
            });
            if was_up {
                tracing::warn!(conn = %conn.id, error = ?ran_ok.as_ref().err(), "connection down");
                conn.downs.send_modify(|n| *n += 1);
                conn.flaps().down(tuic_node::ext::mono_ms());
                crate::notify::host(&self.node, &conn.id, false);
                let why = ran_ok.as_ref().err().map(String::as_str);
                crate::audit::record(&self, "hub_disconnected", &conn, why).await;
            }
            if ran_ok.is_ok() {
                // A clean end after being up: start over from the smallest delay.
                backoff = crate::connections::reconnect_backoff(
                    self.node.config().tuning.peer_reconnect_max_ms,
                );
            }
            // While the host is down it is probed at a short capped interval, so a node that
            // returns after a long outage has its sessions back within about a second.
            // A flapping host (its links end as soon as they are up) waits a growing hold
            // instead: it gets at most one dial per hold and never the others' dial slots.
            let (flaps, hold) = {
                let f = conn.flaps();
                (f.count(), Duration::from_millis(f.hold_ms(rand::random())))
            };
            if was_up && !hold.is_zero() {
                tracing::warn!(conn = %conn.id, flaps, hold_ms = hold.as_millis() as u64, "host flapping: its next dial is held back");
            }
            let delay = backoff
                .next()
                .unwrap_or(Duration::from_secs(30))
                .min(PROBE_WHILE_DOWN)
                .max(hold);
            tokio::select! {
                _ = conn.stop.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// One connected period: subscribe, mirror, probe. Returns when the node is lost.
    async fn session_once(&self, conn: &Conn) -> Result<(), String> {
        let types = "session-created,session-closed,session-renamed,term-alias-assigned,pty-exit,pty-parsed,session-worktree-declared,worktree-removed,notification";
        // Connects are paced: the stream and the whole list of at most `CONNECTS_AT_ONCE`
        // nodes at a time.
        let permit = self.connects.acquire().await.map_err(|e| e.to_string())?;
        // Near the descriptor limit no new link is opened: the hub's IPC socket and the links
        // already up keep the last descriptors (`server::fds`).
        // The claim holds the link's two descriptors (its event stream, the list's read)
        // until they are open, so a burst of connects cannot overshoot the budget.
        let claim = match tuic_node::ext::fds::claim("session link", 2) {
            Ok(c) => c,
            Err(why) => {
                // Once per run of refusals: the connection's `last_error` keeps the reason.
                let again = conn
                    .snapshot()
                    .last_error
                    .is_some_and(|e| tuic_node::ext::fds::is_refusal(&e));
                if !again {
                    tracing::warn!(conn = %conn.id, "{why}");
                }
                return Err(why);
            }
        };
        let resp = self
            .node_get(conn, &format!("/events?types={types}"))
            .send()
            .await
            .map_err(|e| describe(&e))?;
        if !resp.status().is_success() {
            return Err(format!(
                "node answered {} to the event stream",
                resp.status()
            ));
        }
        self.refresh(conn).await?;
        drop((permit, claim));
        self.update(conn, |s| {
            s.up = true;
            s.last_error = None;
        });
        conn.flaps().up(tuic_node::ext::mono_ms());
        conn.ups.send_modify(|n| *n += 1);
        tracing::info!(conn = %conn.id, "connection up");
        crate::notify::host(&self.node, &conn.id, true);
        crate::audit::record(self, "hub_connected", conn, None).await;
        let mut events = resp.bytes_stream();
        let mut decoder = SseDecoder::new(MAX_EVENT_BYTES);
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        let mut misses = 0;
        loop {
            tokio::select! {
                chunk = events.next() => match chunk {
                    Some(Ok(b)) => {
                        decoder.feed(&b).map_err(|e| e.to_string())?;
                        while let Some(e) = decoder.poll_event() {
                            self.apply(conn, &e).await?;
                        }
                    }
                    Some(Err(e)) => return Err(describe(&e)),
                    None => return Err("event stream ended".into()),
                },
                _ = ping.tick() => {
                    let ok = self
                        .http
                        .get(format!("{}/health", conn.url))
                        .timeout(Duration::from_secs(2))
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                    misses = if ok { 0 } else { misses + 1 };
                    if misses >= MISSES_DOWN {
                        return Err(format!("{MISSES_DOWN} health probes missed"));
                    }
                }
            }
        }
    }

    /// Applies one decoded event to the mirror as a delta: `session-created` (and an exit or a
    /// parser state change, whose payloads lack the row's fields) re-reads just that row,
    /// `session-closed` drops it, a rename or an alias edits it in place, a worktree
    /// declaration re-reads that row, a worktree removal or `lagged` (events were lost)
    /// re-reads the whole list. Other events leave the rows alone.
    async fn apply(&self, conn: &Conn, e: &SseEvent) -> Result<(), String> {
        let data: Value = serde_json::from_str(&e.data).unwrap_or(Value::Null);
        let Ok(event) = serde_json::from_value::<Event>(json!({"type": e.event, "data": data}))
        else {
            tracing::debug!(conn = %conn.id, event = %e.event, "ignoring an undecodable event");
            return Ok(());
        };
        match event {
            Event::SessionCreated { session_id, .. }
            | Event::PtyExit { session_id, .. }
            | Event::PtyParsed { session_id, .. } => self.refresh_row(conn, &session_id).await,
            Event::PtyDescriptionChanged {
                session_id,
                pty_description,
            } => {
                let found = edit_row(self, conn, &session_id, |o| match &pty_description {
                    Some(d) => {
                        o.insert("pty_description".into(), json!(d));
                    }
                    None => {
                        o.remove("pty_description");
                    }
                });
                if found {
                    Ok(())
                } else {
                    self.refresh_row(conn, &session_id).await
                }
            }
            Event::SessionClosed { session_id } => {
                self.update(conn, |s| s.sessions.retain(|r| !row_is(r, &session_id)));
                Ok(())
            }
            Event::SessionRenamed {
                session_id,
                name,
                is_custom,
            } => {
                let found = edit_row(self, conn, &session_id, |o| {
                    o.insert("display_name".into(), json!(name));
                    if o.contains_key("display_name_is_custom") {
                        o.insert("display_name_is_custom".into(), json!(is_custom));
                    }
                });
                if found {
                    Ok(())
                } else {
                    self.refresh_row(conn, &session_id).await
                }
            }
            Event::TermAliasAssigned { session_id, alias } => {
                let found = edit_row(self, conn, &session_id, |o| {
                    o.insert("alias".into(), json!(alias));
                });
                if found {
                    Ok(())
                } else {
                    self.refresh_row(conn, &session_id).await
                }
            }
            // A declaration moves one row's placement; a removal drops every placement naming
            // that worktree (rare: the whole list is re-read).
            Event::SessionWorktreeDeclared(v) => match v["session_id"].as_str() {
                Some(id) => self.refresh_row(conn, id).await,
                None => self.refresh(conn).await,
            },
            Event::WorktreeRemoved(_) | Event::Lagged { .. } => self.refresh(conn).await,
            // The hub notifies for its nodes (`crate::notify`).
            Event::Notification(v) => {
                crate::notify::relay(&self.node, &conn.id, &v);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Re-reads one row: replaced or added when the node lists it, dropped when it answers
    /// 404 (the session ended meanwhile).
    async fn refresh_row(&self, conn: &Conn, session_id: &str) -> Result<(), String> {
        // Node session ids are UUIDs; anything that would need escaping in a path gets the
        // whole list instead.
        if session_id.is_empty()
            || !session_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return self.refresh(conn).await;
        }
        let resp = self
            .node_get(conn, &format!("/sessions/{session_id}"))
            .timeout(READ_TIMEOUT)
            .send()
            .await
            .map_err(|e| describe(&e))?;
        let status = resp.status();
        let row: Option<Value> = if status.is_success() {
            Some(resp.json().await.map_err(|e| describe(&e))?)
        } else if status == reqwest::StatusCode::NOT_FOUND {
            None
        } else {
            return Err(format!("node answered {status} to a session row read"));
        };
        self.update(conn, |s| {
            s.row_fetches += 1;
            match row {
                Some(row) => match s.sessions.iter_mut().find(|r| row_is(r, session_id)) {
                    Some(r) => *r = row,
                    None => s.sessions.push(row),
                },
                None => s.sessions.retain(|r| !row_is(r, session_id)),
            }
        });
        Ok(())
    }

    /// A GET of `path` on the connection's node, authenticated with its token cookie.
    fn node_get(&self, conn: &Conn, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", conn.url))
            .header("cookie", conn.cookie())
    }

    async fn refresh(&self, conn: &Conn) -> Result<(), String> {
        let rows: Vec<Value> = self
            .node_get(conn, "/sessions")
            .timeout(READ_TIMEOUT)
            .send()
            .await
            .map_err(|e| describe(&e))?
            .json()
            .await
            .map_err(|e| describe(&e))?;
        self.update(conn, |s| {
            s.sessions = rows;
            s.full_refreshes += 1;
        });
        Ok(())
    }
}

/// The longest pause between two attempts to reach a host whose session link is down (the
/// shared backoff's first steps are shorter): cheap (`GET /events` refused or a connect
/// refused), and it bounds how long a returned node waits to be seen.
const PROBE_WHILE_DOWN: Duration = Duration::from_secs(1);

/// Largest event the mirror decodes (session payloads are small; a parser event may carry
/// some text).
const MAX_EVENT_BYTES: usize = 1 << 20;

/// A connection's rows as the hub lists them: objects only (a node's rows), `host_offline`
/// while the node is down.
fn listed_rows(conn: &str, st: &ConnState) -> Vec<RemoteRow> {
    st.sessions
        .iter()
        .filter_map(|r| {
            let Value::Object(row) = r else { return None };
            let mut row = row.clone();
            if !st.up {
                row.insert("state".into(), json!("host_offline"));
            }
            Some(RemoteRow {
                connection_id: conn.to_owned(),
                row,
            })
        })
        .collect()
}

fn row_is(row: &Value, session_id: &str) -> bool {
    row.get("session_id").and_then(Value::as_str) == Some(session_id)
}

/// Each listed row's session id and the `state` the hub lists it with.
fn listed_states(st: &ConnState) -> HashMap<String, String> {
    st.sessions
        .iter()
        .filter_map(|r| {
            let id = r.get("session_id")?.as_str()?.to_owned();
            Some((id, listed_state(st, r)))
        })
        .collect()
}

/// The `state` the hub lists a row with (see [`Federation::remote_rows`]).
fn listed_state(st: &ConnState, row: &Value) -> String {
    if st.up {
        row.get("state")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    } else {
        "host_offline".to_owned()
    }
}

/// The events that describe how connection `conn`'s listed rows went from `before` to `st`.
fn listing_changes(conn: &str, before: &HashMap<String, String>, st: &ConnState) -> Vec<Event> {
    let mut out = Vec::new();
    let mut now = std::collections::HashSet::new();
    for r in &st.sessions {
        let Some(id) = r.get("session_id").and_then(Value::as_str) else {
            continue;
        };
        now.insert(id);
        let address = format!("{conn}/{id}");
        let state = listed_state(st, r);
        match before.get(id) {
            Some(old) if *old == state => {}
            Some(_) => out.push(Event::PtyParsed {
                session_id: address,
                parsed: json!({"type": "state", "state": state}),
            }),
            None => {
                let text = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_owned);
                out.push(Event::SessionCreated {
                    session_id: address,
                    cwd: text("cwd").unwrap_or_default(),
                    agent_type: text("agent_type"),
                    display_name: text("display_name"),
                    parent_session: text("parent_session"),
                    tuic_session: text("tuic_session").unwrap_or_default(),
                });
            }
        }
    }
    for id in before.keys().filter(|id| !now.contains(id.as_str())) {
        out.push(Event::SessionClosed {
            session_id: format!("{conn}/{id}"),
        });
    }
    out
}

/// Edits one mirrored row in place; false when the mirror has no such row.
fn edit_row(
    fed: &Federation,
    conn: &Conn,
    session_id: &str,
    f: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> bool {
    let mut found = false;
    // Through `update`, so the merged list's feed sees the edit.
    fed.update(conn, |s| {
        if let Some(o) = s
            .sessions
            .iter_mut()
            .find(|r| row_is(r, session_id))
            .and_then(Value::as_object_mut)
        {
            f(o);
            found = true;
        }
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(up: bool, rows: &[(&str, &str)]) -> ConnState {
        ConnState {
            up,
            sessions: rows
                .iter()
                .map(|(id, state)| json!({"session_id": id, "state": state, "cwd": "/w", "tuic_session": "t"}))
                .collect(),
            ..Default::default()
        }
    }

    fn names(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::PtyParsed { session_id, parsed } => {
                    format!("state {session_id} {}", parsed["state"].as_str().unwrap())
                }
                Event::SessionCreated { session_id, .. } => format!("created {session_id}"),
                Event::SessionClosed { session_id } => format!("closed {session_id}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn listing_changes_name_state_moves_new_rows_and_rows_that_left_under_hub_addresses() {
        let up = st(true, &[("a", "working"), ("b", "done")]);
        // The node goes down: every kept row is now listed host offline.
        let before = listed_states(&up);
        let down = ConnState {
            up: false,
            ..up.clone()
        };
        assert_eq!(
            names(&listing_changes("nb", &before, &down)),
            ["state nb/a host_offline", "state nb/b host_offline"]
        );
        // Back, with `b` gone, `c` new and `a` changed meanwhile.
        let back = st(true, &[("a", "done"), ("c", "needs_input")]);
        let mut got = names(&listing_changes("nb", &listed_states(&down), &back));
        got.sort();
        assert_eq!(got, ["closed nb/b", "created nb/c", "state nb/a done"]);
        // Nothing listed changed: nothing is said.
        assert!(listing_changes("nb", &listed_states(&back), &back).is_empty());
    }
}

#[cfg(test)]
mod spread_tests {
    use super::*;

    #[test]
    fn first_dials_spread_with_the_number_of_nodes_up_to_two_seconds() {
        assert_eq!(spread_window(1), Duration::from_millis(4));
        assert_eq!(spread_window(100), Duration::from_millis(400));
        assert_eq!(spread_window(500), Duration::from_secs(2));
        assert_eq!(spread_window(10_000), Duration::from_secs(2));
    }
}
