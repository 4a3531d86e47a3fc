//! Share links (`crate::share`): `POST /shares` (create), `GET /shares?session=` (list, with
//! live viewers), `DELETE /shares/{id}` (revoke), `GET /share/info` (what a share token opens)
//! and `POST /sessions/{id}/answer` (answer the question a session shows: the one act an
//! answer-only link may do). The boundary has already applied the link's scope. On a hub, links
//! to other hosts' sessions (`<connection>/…`) are made, listed and revoked on their owners
//! through `crate::ext::ShareRelay`.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::audit::{actor, record};
use crate::audit::{Actor, Event};
use crate::error::ApiError;
use crate::routes::JsonBody;
use crate::share::{Grant, Scope};
use crate::state::Node;

pub(super) fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/shares", get(list).post(create))
        .route("/shares/{id}", delete(revoke))
        .route("/share/info", get(info))
        .route("/sessions/{id}/answer", post(answer))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    /// Any of the session's addresses.
    session: String,
    /// `read_only` (default) or `answer`.
    #[serde(default)]
    scope: Option<Scope>,
    /// `90s`, `15m`, `1h`, `2d`; default `1h`, at most 7 days.
    #[serde(default)]
    ttl: Option<String>,
}

async fn create(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
    JsonBody(b): JsonBody<CreateBody>,
) -> Result<Json<Value>, ApiError> {
    let who = actor(who);
    let ttl_ms = match b.ttl.as_deref() {
        None => 3_600_000,
        Some(t) => crate::share::parse_ttl(t).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_ttl",
                format!("ttl {t:?} is not a duration such as 90s, 15m, 1h or 2d"),
            )
        })?,
    };
    if ttl_ms > crate::share::MAX_TTL_MS {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_ttl",
            "a share link lives at most 7 days",
        ));
    }
    let scope = b.scope.unwrap_or(Scope::ReadOnly);
    let s = match super::sessions::find(&node, &b.session) {
        Ok(s) => s,
        // A session of another host: its owner makes the link; the link is on this address.
        Err(e) => {
            let Some((relay, connection, session)) = node.ext.share_target(&b.session) else {
                return Err(e);
            };
            let share = crate::ext::NewShare {
                session: session.to_owned(),
                scope,
                ttl: b.ttl.clone().unwrap_or_else(|| "1h".to_owned()),
            };
            let mut v = relay.create(connection, share, &who.who).await?;
            let token = v["token"].as_str().unwrap_or_default().to_owned();
            let (path, url) = link_at(&node, &token).await;
            v["path"] = json!(path);
            v["url"] = json!(url);
            return Ok(Json(v));
        }
    };
    let shares = node.shares.clone();
    let (sid, aliases, by) = (
        s.id.clone(),
        vec![s.alias.clone(), s.tuic_session.clone()],
        who.who.clone(),
    );
    let (link, token) = super::blocking(move || {
        shares
            .create(&sid, aliases, scope, ttl_ms, &by, crate::logs::now_ms())
            .map_err(|e| ApiError::conflict(format!("{e:#}")))
    })
    .await?;
    record(
        &node,
        Event::new("share_created", &who)
            .session(&link.session_id)
            .with("link", link.id.as_str())
            .with("scope", scope_name(scope))
            .with("expires_ms", link.expires_ms),
    )
    .await;
    let (path, url) = link_at(&node, &token).await;
    Ok(Json(json!({
        "id": link.id,
        "session_id": link.session_id,
        "scope": link.scope,
        "expires_ms": link.expires_ms,
        "token": token,
        "path": path,
        "url": url,
    })))
}

/// The share page's path for `token`, and its URL on this node's TCP address (none while
/// remote access is off).
async fn link_at(node: &Node, token: &str) -> (String, Option<String>) {
    let path = format!("/share.html#{token}");
    let url = node
        .tcp
        .lock()
        .await
        .addr()
        .map(|a| format!("http://{a}{path}"));
    (path, url)
}

fn scope_name(s: Scope) -> &'static str {
    match s {
        Scope::ReadOnly => "read_only",
        Scope::Answer => "answer",
    }
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    session: Option<String>,
}

async fn list(State(node): State<Arc<Node>>, Query(q): Query<ListQuery>) -> Json<Value> {
    let now = crate::logs::now_ms();
    let mut rows: Vec<Value> = node
        .shares
        .list(q.session.as_deref())
        .into_iter()
        .map(|(l, viewers)| {
            let state = if l.revoked_ms.is_some() {
                "revoked"
            } else if l.expires_ms <= now {
                "expired"
            } else {
                "active"
            };
            json!({
                "id": l.id,
                "session_id": l.session_id,
                "scope": l.scope,
                "created_by": l.created_by,
                "created_ms": l.created_ms,
                "expires_ms": l.expires_ms,
                "revoked_ms": l.revoked_ms,
                "state": state,
                "viewers": viewers,
            })
        })
        .collect();
    // Other hosts' links, through the relay (a hub), after this node's own.
    if let Some(relay) = node.ext.share_relay() {
        rows.extend(relay.list(q.session.as_deref()).await);
    }
    Json(json!({ "shares": rows }))
}

async fn revoke(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let who = actor(who);
    let shares = node.shares.clone();
    let rid = id.clone();
    let found = super::blocking(move || {
        shares
            .revoke(&rid, crate::logs::now_ms())
            .map_err(|e| ApiError::internal(format!("{e:#}")))
    })
    .await?;
    let link = match found {
        Some(link) => link,
        // `<connection>/<id>`: a link on another host, revoked (and audited) by its owner.
        None => {
            let Some((relay, connection, rest)) = node.ext.share_target(&id) else {
                return Err(ApiError::not_found(format!("no share link {id}")));
            };
            return relay.revoke(connection, rest, &who.who).await.map(Json);
        }
    };
    record(
        &node,
        Event::new("share_revoked", &who)
            .session(&link.session_id)
            .with("link", link.id.as_str()),
    )
    .await;
    Ok(Json(json!({"ok": true, "id": link.id})))
}

async fn info(grant: Option<Extension<Grant>>) -> Result<Json<Value>, ApiError> {
    let Some(Extension(g)) = grant else {
        return Err(ApiError::bad_request(
            "GET /share/info describes a share token: pass it as ?share=",
        ));
    };
    Ok(Json(json!({
        "link": g.link,
        "session_id": g.session_id,
        "scope": g.scope,
        "expires_ms": g.expires_ms,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerBody {
    /// `y` or `n` for a yes/no question; a choice's number for a menu.
    answer: String,
}

/// `POST /sessions/{id}/answer {answer}`: answers the question the session shows now, and
/// nothing else: `y`/`n` for a yes/no prompt, a choice's number for a numbered menu. 409
/// `no_question` when none is showing.
async fn answer(
    State(node): State<Arc<Node>>,
    who: Option<Extension<Actor>>,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<AnswerBody>,
) -> Result<Json<Value>, ApiError> {
    let s = super::sessions::find(&node, &id)?;
    let probe = s.clone();
    let row = tokio::task::spawn_blocking(move || probe.row())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let Some(q) = row.question else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_question",
            "the session shows no question to answer",
        ));
    };
    let a = b.answer.trim();
    let keys = if q.options.is_empty() {
        match a {
            "y" | "n" => format!("{a}\r"),
            _ => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_answer",
                    "a yes/no question takes y or n",
                ));
            }
        }
    } else {
        match a.parse::<usize>() {
            Ok(n) if (1..=q.options.len()).contains(&n) && n < 10 => {
                if q.select {
                    n.to_string()
                } else {
                    format!("{n}\r")
                }
            }
            _ => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_answer",
                    format!("the question takes a choice from 1 to {}", q.options.len()),
                ));
            }
        }
    };
    let (w, cap) = (s.clone(), node.sessions.capture.clone());
    let bytes = keys.len();
    tokio::task::spawn_blocking(move || w.write(keys.as_bytes(), &cap))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::conflict(e.to_string()))?;
    record(
        &node,
        Event::new("answer", &actor(who))
            .session(&s.id)
            .with("bytes", bytes),
    )
    .await;
    Ok(Json(json!({"ok": true})))
}
