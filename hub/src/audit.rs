//! The hub's audit: `GET /audit` on a hub answers the hub's own entries and every connected
//! node's, each with its `host` (`local` for the hub, else the connection id), newest first,
//! filtered like a node's page (`kind`, `session`, `since_ms`, `until_ms`) plus `host`, and
//! paged across hosts by one `cursor` (`host:before,...`, each host's own `before`). A node
//! that is down or refuses is named in `hosts` with its error; the others still answer.
//!
//! Also the hub's own acts on its connections (`hub_connected`, `hub_disconnected`,
//! `hub_connection_removed`, `token_rotated`), recorded in the hub's log, and the caller the
//! hub forwards to a node on a relayed call ([`forwarded_user`]), so the node records an
//! attach or input through the hub as `via: hub` with the hub's user.
//!
//! It deliberately keeps no copy of a node's log: each page is read from the nodes when asked.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tuic_node::ext::ApiError;
use tuic_node::ext::audit::{Actor, Event, Query};

use crate::connections::{Conn, describe};
use crate::federation::Federation;

/// The host name of the hub's own entries.
pub const LOCAL: &str = "local";

/// Most entries one page returns (the node's own page bound).
const MAX_PAGE: usize = 1_000;

/// Longest wait for one node's page: a slow node delays the view at most this long.
const NODE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The hub acting on its own connections.
fn hub_actor() -> Actor {
    Actor {
        who: "hub".into(),
        via: "hub".into(),
        address: None,
    }
}

/// Records one of the hub's acts on connection `conn` (`url` where it dials), committed before
/// this returns. Blocking (a store commit): for the reconcile path.
pub(crate) fn record_blocking(fed: &Federation, kind: &str, conn: &str, url: &str) {
    fed.node.audit.record_or_warn(
        Event::new(kind, &hub_actor())
            .with("connection", conn)
            .with("url", url),
    );
}

/// [`record_blocking`] off the async workers.
pub(crate) async fn record(fed: &Federation, kind: &str, conn: &Conn, error: Option<&str>) {
    let mut ev = Event::new(kind, &hub_actor())
        .with("connection", conn.id.as_str())
        .with("url", conn.url.as_str());
    if let Some(e) = error {
        ev = ev.with("error", e);
    }
    let node = fed.node.clone();
    let _ = tokio::task::spawn_blocking(move || node.audit.record_or_warn(ev)).await;
}

/// The caller of a request the hub relays, for the node's audit
/// ([`tuic_node::ext::audit::FORWARDED_USER_HEADER`]): its `who` on the hub.
pub(crate) fn forwarded_user(req: &Request) -> Option<String> {
    req.extensions().get::<Actor>().map(|a| a.who.clone())
}

/// The hub's view of `GET /audit` (installed inside the node's request boundary, so only an
/// authenticated caller gets here).
pub async fn intercept(State(fed): State<Arc<Federation>>, req: Request, next: Next) -> Response {
    if req.uri().path() != "/audit" || req.method() != axum::http::Method::GET {
        return next.run(req).await;
    }
    let params = match axum::extract::Query::<BTreeMap<String, String>>::try_from_uri(req.uri()) {
        Ok(axum::extract::Query(p)) => p,
        Err(e) => return ApiError::bad_request(e.body_text()).into_response(),
    };
    match page(&fed, &params).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

fn num<T: std::str::FromStr>(p: &BTreeMap<String, String>, k: &str) -> Result<Option<T>, ApiError> {
    p.get(k)
        .map(|v| {
            v.parse()
                .map_err(|_| ApiError::bad_request(format!("{k} must be a number")))
        })
        .transpose()
}

/// Parses `host:before,host:before` (0: that host is exhausted).
fn parse_cursor(c: &str) -> Result<BTreeMap<String, u64>, ApiError> {
    c.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (h, b) = p
                .rsplit_once(':')
                .ok_or_else(|| ApiError::bad_request("cursor is host:before,..."))?;
            let b = b
                .parse()
                .map_err(|_| ApiError::bad_request("cursor is host:before,..."))?;
            Ok((h.to_owned(), b))
        })
        .collect()
}

/// One host's page: its entries (newest first, each with `host`), whether it has more, and
/// its totals or its error.
struct HostPage {
    host: String,
    entries: Vec<Value>,
    more: bool,
    summary: Value,
}

async fn page(fed: &Arc<Federation>, p: &BTreeMap<String, String>) -> Result<Value, ApiError> {
    let limit = num::<usize>(p, "limit")?.unwrap_or(100).clamp(1, MAX_PAGE);
    let cursor = p.get("cursor").map(|c| parse_cursor(c)).transpose()?;
    let mut host_filter = p.get("host").cloned();
    let mut session = p.get("session").cloned();
    // A hub address names its host: `nodeb/<id>` is session `<id>` on host `nodeb`.
    if let Some(s) = session.clone()
        && let Some((h, sid)) = s.split_once('/')
    {
        host_filter = Some(h.to_owned());
        session = Some(sid.to_owned());
    }
    let q = Query {
        kind: p.get("kind").cloned(),
        session,
        since_ms: num(p, "since_ms")?,
        until_ms: num(p, "until_ms")?,
        before: None,
        limit: Some(limit),
    };
    let before = |host: &str| cursor.as_ref().and_then(|c| c.get(host).copied());
    let wanted = |host: &str| host_filter.as_deref().is_none_or(|h| h == host);
    let exhausted = |host: &str| before(host) == Some(0);

    let mut pages: Vec<HostPage> = Vec::new();
    let mut bounds = json!({});
    if wanted(LOCAL) && !exhausted(LOCAL) {
        let mut q = q.clone();
        q.before = before(LOCAL);
        let node = fed.node.clone();
        let own = tokio::task::spawn_blocking(move || node.audit.page(&q))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::internal(format!("reading the audit log: {e:#}")))?;
        bounds = json!({"max_entries": own.max_entries, "max_age_days": own.max_age_days});
        pages.push(HostPage {
            host: LOCAL.to_owned(),
            more: own.next_before.is_some(),
            summary: json!({"host": LOCAL, "total": own.total, "dropped": own.dropped}),
            entries: own
                .entries
                .iter()
                .map(|e| with_host(serde_json::to_value(e).unwrap_or(Value::Null), LOCAL))
                .collect(),
        });
    }
    let remote: Vec<Arc<Conn>> = fed
        .all()
        .into_iter()
        .filter(|c| wanted(&c.id) && !exhausted(&c.id))
        .collect();
    let asks = remote.iter().map(|c| node_page(fed, c, &q, before(&c.id)));
    pages.extend(futures::future::join_all(asks).await);

    // Merge newest first, taking each host's entries in its own order (a prefix of each
    // page), so a host's cursor is the last of its entries shown.
    let mut taken = vec![0usize; pages.len()];
    let mut entries = Vec::with_capacity(limit);
    while entries.len() < limit {
        let head = (0..pages.len())
            .filter(|h| taken[*h] < pages[*h].entries.len())
            .max_by_key(|h| {
                let at = pages[*h].entries[taken[*h]]["at_ms"].as_u64().unwrap_or(0);
                (at, std::cmp::Reverse(*h))
            });
        let Some(h) = head else { break };
        entries.push(pages[h].entries[taken[h]].clone());
        taken[h] += 1;
    }
    // The next cursor: each host resumes below the last entry of it shown; a host shown to
    // its end with nothing more is exhausted (0); an untouched host keeps its place.
    let mut next: BTreeMap<String, u64> = cursor.clone().unwrap_or_default();
    let mut more = false;
    for (h, pg) in pages.iter().enumerate() {
        if taken[h] > 0 {
            let last = &pg.entries[taken[h] - 1];
            let done = taken[h] == pg.entries.len() && !pg.more;
            let b = if done {
                0
            } else {
                last["seq"].as_u64().unwrap_or(0)
            };
            next.insert(pg.host.clone(), b);
            more |= !done;
        } else if !pg.entries.is_empty() || pg.more {
            more = true;
        } else if pg.summary.get("error").is_none() {
            next.insert(pg.host.clone(), 0);
        }
    }
    let hosts: Vec<Value> = pages.iter().map(|p| p.summary.clone()).collect();
    let total: u64 = hosts.iter().filter_map(|h| h["total"].as_u64()).sum();
    let dropped: u64 = hosts.iter().filter_map(|h| h["dropped"].as_u64()).sum();
    let next_cursor = more.then(|| {
        next.iter()
            .map(|(h, b)| format!("{h}:{b}"))
            .collect::<Vec<_>>()
            .join(",")
    });
    let mut out = json!({
        "entries": entries,
        "next_cursor": next_cursor,
        "hosts": hosts,
        "total": total,
        "dropped": dropped,
    });
    if let Some(b) = bounds.as_object() {
        for (k, v) in b {
            out[k] = v.clone();
        }
    }
    Ok(out)
}

fn with_host(mut e: Value, host: &str) -> Value {
    if let Some(o) = e.as_object_mut() {
        o.insert("host".into(), json!(host));
    }
    e
}

/// One node's page with the hub's credential for it; a down or refusing node is a summary
/// with its error and no entries.
async fn node_page(fed: &Federation, conn: &Arc<Conn>, q: &Query, before: Option<u64>) -> HostPage {
    let failed = |why: String| HostPage {
        host: conn.id.clone(),
        entries: Vec::new(),
        more: false,
        summary: json!({"host": conn.id, "error": why}),
    };
    if !conn.snapshot().up {
        return failed("not connected".into());
    }
    let mut params: Vec<(&str, String)> = Vec::new();
    if let Some(k) = &q.kind {
        params.push(("kind", k.clone()));
    }
    if let Some(s) = &q.session {
        params.push(("session", s.clone()));
    }
    for (k, v) in [
        ("since_ms", q.since_ms),
        ("until_ms", q.until_ms),
        ("before", before),
        ("limit", q.limit.map(|l| l as u64)),
    ] {
        if let Some(v) = v {
            params.push((k, v.to_string()));
        }
    }
    let resp = fed
        .http
        .get(format!("{}/audit", conn.url))
        .query(&params)
        .header(axum::http::header::COOKIE, conn.cookie())
        .timeout(NODE_TIMEOUT)
        .send()
        .await;
    let resp = match resp {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => return failed(format!("node answered {}", r.status())),
        Err(e) => return failed(describe(&e)),
    };
    let v: Value = match resp.json().await {
        Ok(v) => v,
        Err(e) => return failed(describe(&e)),
    };
    HostPage {
        host: conn.id.clone(),
        more: v.get("next_before").is_some_and(|b| !b.is_null()),
        summary: json!({"host": conn.id, "total": v["total"], "dropped": v["dropped"]}),
        entries: v["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| with_host(e.clone(), &conn.id))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_bad_ones_are_refused() {
        let c = parse_cursor("local:12,nodeb:0").unwrap();
        assert_eq!(c["local"], 12);
        assert_eq!(c["nodeb"], 0);
        assert!(parse_cursor("local").is_err());
        assert!(parse_cursor("local:x").is_err());
    }
}
