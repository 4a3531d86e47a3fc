//! ACP routes: launch (and `POST /acp/chat/open`, a terminal-less chat), list, snapshot, prompt, cancel, interactions and their answers,
//! delete, and the journal stream (`WS /acp/connections/{id}/stream?after=SEQ`).
//!
//! The service is `crate::acp`; this file only maps HTTP onto it. Only the two launching
//! routes start a process; every other route needs a connection id they handed out.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::ws::{Message, WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::extract::{Path, Query, State};
use axum::http::{Extensions, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tuic_proto::acp::{AnswerBody, ChatOpen, NewConnection, PromptBody};

use crate::acp::{AcpError, Conn};
use crate::error::ApiError;
use crate::guard::Transport;
use crate::routes::JsonBody;
use crate::state::Node;

/// Most frames one stream read takes from the journal before sending (then coalesced).
const STREAM_BATCH: usize = 512;

/// The ACP route group.
pub(super) fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/acp/connections", get(list).post(create))
        .route("/acp/chat/open", post(chat_open))
        .route("/acp/connections/{id}", get(snapshot).delete(delete))
        .route("/acp/connections/{id}/reconnect", post(reconnect))
        .route("/acp/connections/{id}/prompt", post(prompt))
        .route("/acp/connections/{id}/cancel", post(cancel))
        .route("/acp/connections/{id}/interactions", get(interactions))
        .route("/acp/connections/{id}/interactions/{rid}", post(answer))
        .route("/acp/connections/{id}/stream", get(stream))
}

impl From<AcpError> for ApiError {
    fn from(e: AcpError) -> Self {
        let msg = e.to_string();
        match e {
            AcpError::UnknownConnection(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "unknown_connection", msg)
            }
            AcpError::UnknownAgent { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "unknown_agent", msg)
            }
            AcpError::BadInput(_) => ApiError::bad_request(msg),
            AcpError::Conflict(_) => ApiError::new(StatusCode::CONFLICT, "busy", msg),
            AcpError::Answered { .. } => {
                ApiError::new(StatusCode::CONFLICT, "already_answered", msg)
            }
            AcpError::UnknownRequest(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "unknown_request", msg)
            }
            AcpError::Outside(_) => ApiError::new(StatusCode::FORBIDDEN, "outside_root", msg),
        }
    }
}

fn conn(node: &Node, id: &str) -> Result<Arc<Conn>, ApiError> {
    Ok(node.acp.get(id)?)
}

async fn list(State(node): State<Arc<Node>>) -> Json<Value> {
    Json(json!(node.acp.list()))
}

async fn create(
    State(node): State<Arc<Node>>,
    JsonBody(req): JsonBody<NewConnection>,
) -> Result<Response, ApiError> {
    let acp = node.acp.clone();
    let c = tokio::task::spawn_blocking(move || acp.create(req))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok((StatusCode::CREATED, Json(json!(c.row()))).into_response())
}

/// `POST /acp/chat/open`: an ACP peer without a terminal (see `Acp::chat_open`).
async fn chat_open(
    State(node): State<Arc<Node>>,
    JsonBody(req): JsonBody<ChatOpen>,
) -> Result<Response, ApiError> {
    let acp = node.acp.clone();
    let c = tokio::task::spawn_blocking(move || acp.chat_open(req))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok((StatusCode::CREATED, Json(json!(c.row()))).into_response())
}

async fn reconnect(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!(node.acp.reconnect(&id)?.row())))
}

async fn snapshot(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (snap, bytes) = conn(&node, &id)?.snapshot();
    let mut v = json!(snap);
    v["journal_bytes"] = json!(bytes);
    Ok(Json(v))
}

async fn delete(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    node.acp.delete(&id)?;
    Ok(Json(json!({"ok": true})))
}

async fn prompt(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<PromptBody>,
) -> Result<Json<Value>, ApiError> {
    let turn = conn(&node, &id)?.prompt(body.content)?;
    Ok(Json(json!({"ok": true, "turn": turn})))
}

async fn cancel(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    conn(&node, &id)?.cancel()?;
    Ok(Json(json!({"ok": true})))
}

async fn interactions(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!(conn(&node, &id)?.interactions())))
}

async fn answer(
    State(node): State<Arc<Node>>,
    Path((id, rid)): Path<(String, String)>,
    ext: Extensions,
    JsonBody(body): JsonBody<AnswerBody>,
) -> Result<Json<Value>, ApiError> {
    let c = conn(&node, &id)?;
    let by = match body.by.as_deref().map(str::trim).filter(|b| !b.is_empty()) {
        Some(b) => {
            crate::session::registry::check_name(b).map_err(ApiError::bad_request)?;
            b.to_owned()
        }
        None => match ext.get::<Transport>() {
            Some(Transport::Ipc) => "ipc".to_owned(),
            _ => "tcp".to_owned(),
        },
    };
    Ok(Json(json!(c.answer(&rid, &body.option_id, &by)?)))
}

/// The stream's query.
#[derive(Debug, Clone, Default, Deserialize)]
struct StreamQuery {
    /// Send frames after this sequence (0: everything kept).
    #[serde(default)]
    after: u64,
}

async fn stream(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    q: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let c = conn(&node, &id)?;
    let first = c.first_seq();
    if q.after + 1 < first {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "cursor_dropped",
            format!(
                "the journal of {id} no longer holds frames after {}; it starts at {first}",
                q.after
            ),
        ));
    }
    let ws = ws.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let shutdown = node.shutdown.clone();
    Ok(ws
        .on_upgrade(move |sock| async move {
            let (mut tx, mut rx) = sock.split();
            let mut seq = c.watch();
            let mut cursor = q.after;
            loop {
                // Marks the current sequence seen before reading, so a frame pushed after the
                // read wakes the wait below.
                seq.borrow_and_update();
                match c.frames_after(cursor, STREAM_BATCH) {
                    Ok(batch) if !batch.is_empty() => {
                        cursor = batch.last().map(|k| k.frame.seq).unwrap_or(cursor);
                        for text in crate::acp::journal::coalesce(batch) {
                            if tx.send(Message::Text(text.as_ref().into())).await.is_err() {
                                return;
                            }
                        }
                        continue;
                    }
                    Ok(_) => {}
                    Err(first_seq) => {
                        let gap = tuic_proto::acp::Gap {
                            after: cursor,
                            first_seq,
                        };
                        let _ = tx.send(Message::Text(json!(gap).to_string().into())).await;
                        let _ = tx.close().await;
                        return;
                    }
                }
                tokio::select! {
                    r = seq.changed() => if r.is_err() { return },
                    m = rx.next() => match m {
                        Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                        _ => {}
                    },
                    _ = shutdown.cancelled() => {
                        let _ = tx.close().await;
                        return;
                    }
                }
            }
        })
        .into_response())
}
