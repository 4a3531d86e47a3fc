//! `GET /health` and `GET /logs`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::state::Node;

/// `{ok, uptime_secs, session_count, protocol_version, host_name, instance, tcp?, quic?}`;
/// public on every listener. `tcp: {port, requested_port}` is there while remote access
/// serves (the two differ when the asked-for port was taken and the next one was bound).
/// `quic: {port, fingerprint}` is there while the QUIC peer-link listener runs (remote access
/// on), for hubs to dial and pin.
pub(super) async fn health(State(node): State<Arc<Node>>) -> Json<Value> {
    let mut v = json!({
        "ok": true,
        "uptime_secs": node.started.elapsed().as_secs(),
        "session_count": node.sessions.count(),
        "protocol_version": tuic_proto::PROTOCOL_VERSION,
    });
    let tcp = node.tcp.lock().await;
    if let Some((port, requested)) = tcp.ports() {
        v["tcp"] = json!({"port": port, "requested_port": requested});
    }
    if let Some((port, fingerprint)) = tcp.quic() {
        v["quic"] = json!({"port": port, "fingerprint": fingerprint});
    }
    v["fds"] = json!({
        "used": crate::server::fds::used(),
        "limit": crate::server::fds::limit(),
    });
    v["host_name"] = json!(host_name());
    v["instance"] = json!(node.paths.instance.id().unwrap_or("default"));
    Json(v)
}

/// The machine's host name (`uname -n`), so a page and `tuic status` name the node they
/// reach.
fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// What Tailscale detection found last (`{state, dns_name?|backend_state?|reason?}`).
pub(super) async fn tailscale(State(node): State<Arc<Node>>) -> Json<Value> {
    let d = node.tailscale.current();
    Json(serde_json::to_value(d).unwrap_or(Value::Null))
}

#[derive(Debug, Deserialize)]
pub(super) struct LogsQuery {
    source: Option<String>,
    level: Option<String>,
    limit: Option<usize>,
}

/// Recent log records, newest last.
pub(super) async fn logs(State(node): State<Arc<Node>>, Query(q): Query<LogsQuery>) -> Json<Value> {
    let limit = q.limit.unwrap_or(200).min(crate::logs::RING_CAPACITY);
    let records = node
        .logs
        .query(q.source.as_deref(), q.level.as_deref(), limit);
    Json(json!({ "records": records }))
}
