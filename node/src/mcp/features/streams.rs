//! Progress on the request's own stream. A `tools/call` that carries a progress token from a
//! client that accepts `text/event-stream` is answered as an event stream: its
//! `notifications/progress` go there, in order, then its result (the spec: the `GET /mcp`
//! stream SHOULD carry only messages unrelated to a running request). The progress sinks (a
//! local upstream call, a hub-routed one) hand their messages to [`progress_out`], which
//! takes the request's route when there is one and the session's `GET /mcp` stream otherwise.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::state::Node;

/// Progress messages one streamed call may have waiting to be written; more are dropped (and
/// counted) as a full `GET /mcp` stream drops them.
pub(crate) const ROUTE_CAPACITY: usize = 1024;

type Key = (String, String);

/// Open routes: (protocol session or "", the caller's progress token) → the request's stream.
#[derive(Debug, Default)]
pub(crate) struct Routes {
    inner: Mutex<HashMap<Key, mpsc::Sender<String>>>,
    /// Progress messages dropped because a route was full.
    pub(crate) dropped: std::sync::atomic::AtomicU64,
}

fn key(sid: Option<&str>, token: &Value) -> Key {
    let t = token
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| token.to_string());
    (sid.unwrap_or("").to_owned(), t)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes its route when the call it belongs to ends.
pub(crate) struct RouteGuard {
    node: Arc<Node>,
    key: Key,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        lock(&self.node.mcp.features.routes.inner).remove(&self.key);
    }
}

/// Opens the route of one call; `None` when another running call of the same session holds
/// the same token (that call keeps it; this one answers as plain JSON).
pub(crate) fn open(
    node: &Arc<Node>,
    sid: Option<&str>,
    token: &Value,
) -> Option<(RouteGuard, mpsc::Receiver<String>)> {
    let k = key(sid, token);
    let mut g = lock(&node.mcp.features.routes.inner);
    if g.contains_key(&k) {
        return None;
    }
    let (tx, rx) = mpsc::channel(ROUTE_CAPACITY);
    g.insert(k.clone(), tx);
    Some((
        RouteGuard {
            node: node.clone(),
            key: k,
        },
        rx,
    ))
}

/// Sends a progress notification of the call (`sid`, `token`): on its request's stream when
/// it has one, else on the session's `GET /mcp` stream. `false` when it was dropped.
pub(crate) fn progress_out(node: &Node, sid: Option<&str>, token: &Value, msg: &Value) -> bool {
    let routes = &node.mcp.features.routes;
    {
        // Sent under the lock: once the route is removed (the call ended), nothing more is
        // queued behind its result.
        let g = lock(&routes.inner);
        if let Some(tx) = g.get(&key(sid, token)) {
            let ok = tx.try_send(msg.to_string()).is_ok();
            if !ok {
                routes
                    .dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            return ok;
        }
    }
    match sid {
        Some(s) => node.mcp.sessions.push_to_session(s, msg),
        None => false,
    }
}
