//! `GET /sessions`: the session list, a page of it, or what changed since a revision.
//!
//! Every answer carries the list's revision (`x-revision`, and the `ETag`): this node's
//! stamp, its own rows' revision (`session::feed`, diffed against the rows at each list: this
//! host's sessions only) and the other hosts' revision (the hub keeps its mirrored rows
//! incrementally from mirror events). An unchanged list answers `If-None-Match` with 304
//! without building the other hosts' rows; `?since=REVISION` answers only the rows added,
//! changed and removed since then, or 410 `cursor_gone` ("refetch") when that revision is
//! older than the kept window or from another process.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::session::SessionRow;
use crate::state::Node;

/// This node's rows, then other hosts' rows from the extension's `ext::SessionSource` (the
/// same two lists MCP `session action=list` gives), one JSON array — or one page of it.
struct Listing<'a> {
    local: &'a [SessionRow],
    remote: &'a [crate::ext::RemoteRow],
}

impl serde::Serialize for Listing<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.local.len() + self.remote.len()))?;
        for r in self.local {
            seq.serialize_element(r)?;
        }
        for r in self.remote {
            seq.serialize_element(r)?;
        }
        seq.end()
    }
}

/// The most rows one page may ask for.
const PAGE_MAX: usize = 10_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    /// Rows per page (1..=10,000); absent: the whole list.
    limit: Option<usize>,
    /// The `x-next-cursor` of the previous page: the key of its last row.
    cursor: Option<String>,
    /// An earlier `x-revision`: answer what changed since.
    since: Option<String>,
}

/// Whether an `If-None-Match` value names `etag` (a list of tags, or `*`).
fn none_match(header: Option<&header::HeaderValue>, etag: &str) -> bool {
    header.and_then(|v| v.to_str().ok()).is_some_and(|v| {
        v.split(',')
            .map(str::trim)
            .any(|t| t == "*" || t == etag || t.strip_prefix("W/") == Some(etag))
    })
}

/// A list revision: `<stamp>.<local>.<remote>` (hex stamp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Revision {
    epoch: u64,
    local: u64,
    remote: u64,
}

impl Revision {
    fn parse(s: &str) -> Option<Self> {
        let mut it = s.split('.');
        let r = Self {
            epoch: u64::from_str_radix(it.next()?, 16).ok()?,
            local: it.next()?.parse().ok()?,
            remote: it.next()?.parse().ok()?,
        };
        it.next().is_none().then_some(r)
    }
}

impl std::fmt::Display for Revision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}.{}.{}", self.epoch, self.local, self.remote)
    }
}

fn gone(since: &str) -> ApiError {
    ApiError::new(
        StatusCode::GONE,
        "cursor_gone",
        format!(
            "revision {since} is older than the changes this node keeps (or from before a restart): refetch the whole list"
        ),
    )
}

/// The local rows (ready state; the blocking pool only for a session never probed).
async fn local_rows(node: &Arc<Node>) -> Result<Vec<SessionRow>, ApiError> {
    match node.sessions.ready_rows() {
        Some(rows) => Ok(rows),
        None => {
            let n = node.clone();
            tokio::task::spawn_blocking(move || n.sessions.rows())
                .await
                .map_err(|e| ApiError::internal(e.to_string()))
        }
    }
}

/// Brings the local feed in line with `rows`: its revision and stamp.
fn sync_local(node: &Node, rows: &[SessionRow]) -> (u64, u64) {
    let keyed = rows
        .iter()
        .map(|r| {
            (
                r.session_id.clone(),
                serde_json::to_value(r).unwrap_or(Value::Null),
            )
        })
        .collect();
    let mut f = node.sessions.feed.lock().unwrap_or_else(|p| p.into_inner());
    f.sync("", keyed);
    (f.epoch(), f.revision())
}

pub(super) async fn list(
    State(node): State<Arc<Node>>,
    Query(q): Query<ListQuery>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(l) = q.limit
        && !(1..=PAGE_MAX).contains(&l)
    {
        return Err(ApiError::bad_request(format!(
            "limit must be between 1 and {PAGE_MAX} (got {l})"
        )));
    }
    if q.since.is_some() && (q.limit.is_some() || q.cursor.is_some()) {
        return Err(ApiError::bad_request(
            "since is a change feed: it takes no limit or cursor",
        ));
    }
    let local = local_rows(&node).await?;
    let (epoch, local_rev) = sync_local(&node, &local);
    let rev = Revision {
        epoch,
        local: local_rev,
        remote: node.ext.remote_revision(),
    };
    let mut resp = match &q.since {
        Some(since) => changes(&node, since, rev)?,
        None => {
            // The tag is the revision (the page's query is the URL): an unchanged list is
            // answered 304 before any other host's row is built.
            let etag = format!("\"{rev}\"");
            if none_match(headers.get(header::IF_NONE_MATCH), &etag) {
                let mut r = StatusCode::NOT_MODIFIED.into_response();
                if let Ok(v) = header::HeaderValue::from_str(&etag) {
                    r.headers_mut().insert(header::ETAG, v);
                }
                r
            } else {
                page(&node, &q, local, &etag)?
            }
        }
    };
    let h = resp.headers_mut();
    if let Ok(v) = header::HeaderValue::from_str(&rev.to_string()) {
        h.insert(header::HeaderName::from_static("x-revision"), v);
    }
    // A browser keeps the list but asks again each time, with the tag: a page polling the
    // list gets 304s from the node and the kept copy from its cache.
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    Ok(resp)
}

/// The whole list or one page of it.
fn page(
    node: &Node,
    q: &ListQuery,
    local: Vec<SessionRow>,
    etag: &str,
) -> Result<Response, ApiError> {
    // Extension hook: other hosts' rows, typed, serialized with the local ones.
    let remote = node.ext.remote_rows();
    let key = |i: usize| -> String {
        match local.get(i) {
            Some(r) => r.session_id.clone(),
            None => remote[i - local.len()].address(),
        }
    };
    let total = local.len() + remote.len();
    let start = match &q.cursor {
        None => 0,
        Some(c) => (0..total).find(|&i| key(i) == *c).map(|i| i + 1).ok_or_else(|| {
            ApiError::new(
                StatusCode::GONE,
                "cursor_gone",
                format!("the row {c} the cursor names has left the list: refetch from the first page"),
            )
        })?,
    };
    let end = q
        .limit
        .map_or(total, |l| start.saturating_add(l).min(total));
    let nl = local.len();
    let page = Listing {
        local: &local[start.min(nl)..end.min(nl)],
        remote: &remote[start.saturating_sub(nl)..end.saturating_sub(nl)],
    };
    let body = serde_json::to_vec(&page).map_err(|e| ApiError::internal(e.to_string()))?;
    let mut resp = (
        [(header::CONTENT_TYPE, "application/json")],
        Bytes::from(body),
    )
        .into_response();
    let h = resp.headers_mut();
    if let Ok(v) = header::HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    if end < total
        && let Ok(v) = header::HeaderValue::from_str(&key(end - 1))
    {
        h.insert(header::HeaderName::from_static("x-next-cursor"), v);
    }
    Ok(resp)
}

/// `?since=`: the rows added, changed and removed after that revision, and the revision now.
fn changes(node: &Node, since: &str, now: Revision) -> Result<Response, ApiError> {
    let from = Revision::parse(since).ok_or_else(|| gone(since))?;
    if from.epoch != now.epoch {
        return Err(gone(since));
    }
    let local = node
        .sessions
        .feed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .since(from.local)
        .ok_or_else(|| gone(since))?;
    let remote = node
        .ext
        .remote_changes(from.remote)
        .ok_or_else(|| gone(since))?;
    let rows = |a: &[Arc<Value>], b: &[Arc<Value>]| -> Vec<Value> {
        a.iter().chain(b).map(|r| (**r).clone()).collect()
    };
    // The feeds' own revisions: a change that landed after `now` was read is in this
    // delta already and counts as seen.
    let revision = Revision {
        epoch: now.epoch,
        local: local.revision,
        remote: remote.revision.max(from.remote),
    };
    let body = json!({
        "revision": revision.to_string(),
        "added": rows(&local.added, &remote.added),
        "changed": rows(&local.changed, &remote.changed),
        "removed": local.removed.iter().chain(&remote.removed).collect::<Vec<_>>(),
    });
    Ok(axum::Json(body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_round_trip_and_garbage_does_not_parse() {
        let r = Revision {
            epoch: 0x19a_bcde,
            local: 3,
            remote: 4_000,
        };
        assert_eq!(Revision::parse(&r.to_string()), Some(r));
        for bad in ["", "1.2", "x.1.2", "1.2.3.4", "1.-2.3"] {
            assert_eq!(Revision::parse(bad), None, "{bad}");
        }
    }
}
