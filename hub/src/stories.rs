//! Stories and workflow runs on a hub's nodes: `POST /stories/action`,
//! `/workflows/definition/action` and `/workflows/run/action` with a `host` field in the body
//! are answered by that connection's node (the owner of the story database, as the spec's
//! "owning-daemon service" says), with the node's connection token; `host: "local"` or no
//! `host` is the hub's own service. The answer is the node's, status and body, with `host`
//! added; an unknown connection is 404, a connection that is down 503 naming it.
//!
//! Authority is never raised by the hop: the node sees the hub's token (verified credentials,
//! so `human`), and a hub caller that came over the IPC socket (`local_api` on the hub) is
//! forwarded with `x-tuic-actor: local_api`, which the node honours by lowering the actor.
//! Deliberately absent: merging every node's stories into one list (stories are per project,
//! and a project lives on one host), and the MCP `story` tool (it acts for the caller's own
//! terminal, which is local to the hub).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::{Map, Value};
use tuic_node::ext::ApiError;
use tuic_node::ext::FORWARDED_ACTOR_HEADER;
use tuic_node::ext::Transport;

use crate::connections::describe;
use crate::federation::Federation;

/// Longest wait for the owning node's answer (story actions commit once; a start spawns).
const NODE_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest request body read here (the node's own limit).
const MAX_BODY: usize = 2 * 1024 * 1024;
/// The hub's own service.
const LOCAL: &str = "local";

/// The middleware (installed inside the node's request boundary, beside `ops::intercept`).
pub async fn intercept(State(fed): State<Arc<Federation>>, req: Request, next: Next) -> Response {
    let routed = req.method() == Method::POST
        && matches!(
            req.uri().path(),
            "/stories/action" | "/workflows/definition/action" | "/workflows/run/action"
        );
    if !routed {
        return next.run(req).await;
    }
    route(fed, req, next).await
}

fn error(status: StatusCode, code: &'static str, msg: impl Into<String>) -> Response {
    ApiError::new(status, code, msg.into()).into_response()
}

async fn route(fed: Arc<Federation>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let body = match http_body_util::Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                "request body too large",
            );
        }
    };
    // A body that is not an object, or names no host, is the hub's own (its service answers
    // a malformed body itself).
    let mut m: Map<String, Value> = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(m)) if m.contains_key("host") => m,
        _ => return next.run(Request::from_parts(parts, Body::from(body))).await,
    };
    let host = match m.remove("host") {
        Some(Value::String(h)) if !h.is_empty() => h,
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_arguments",
                "host must be a connection id (or \"local\")",
            );
        }
    };
    if host == LOCAL {
        let b = Bytes::from(serde_json::to_vec(&Value::Object(m)).unwrap_or_default());
        return tag(
            next.run(Request::from_parts(parts, Body::from(b))).await,
            LOCAL,
        )
        .await;
    }
    let Some(conn) = fed.get(&host) else {
        let known: Vec<String> = fed.all().iter().map(|c| c.id.clone()).collect();
        return error(
            StatusCode::NOT_FOUND,
            "unknown_connection",
            format!(
                "host {host:?} is not a connection of this hub (known: local{}{})",
                if known.is_empty() { "" } else { ", " },
                known.join(", ")
            ),
        );
    };
    if !conn.snapshot().up {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "owner_unavailable",
            format!("connection {host} is unavailable: not connected"),
        );
    }
    // Only verified TCP credentials are `human` on the hub; anything else must not become
    // `human` on the node through the hub's token.
    let human = matches!(
        parts.extensions.get::<Transport>(),
        Some(Transport::Tcp { .. })
    );
    let mut r = fed
        .http
        .post(format!("{}{}", conn.url, parts.uri.path()))
        .header(reqwest::header::COOKIE, conn.cookie())
        .timeout(NODE_TIMEOUT)
        .json(&Value::Object(m));
    if !human {
        r = r.header(FORWARDED_ACTOR_HEADER, "local_api");
    }
    let resp = match r.send().await {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "owner_unavailable",
                format!("connection {host} is unavailable: {}", describe(&e)),
            );
        }
    };
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    match resp.json::<Value>().await {
        Ok(mut v) => {
            if let Some(o) = v.as_object_mut() {
                o.insert("host".into(), Value::String(host));
            }
            (status, Json(v)).into_response()
        }
        Err(e) => error(
            StatusCode::BAD_GATEWAY,
            "bad_gateway",
            format!("connection {host} answered without JSON: {}", describe(&e)),
        ),
    }
}

/// Adds `host` to the hub's own JSON object answer.
async fn tag(resp: Response, host: &str) -> Response {
    let (mut parts, body) = resp.into_parts();
    let Ok(b) = body.collect().await.map(|b| b.to_bytes()) else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "reading the answer",
        );
    };
    let out = match serde_json::from_slice::<Value>(&b) {
        Ok(Value::Object(mut o)) => {
            o.insert("host".into(), Value::String(host.to_owned()));
            Bytes::from(serde_json::to_vec(&o).unwrap_or_default())
        }
        _ => b,
    };
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out))
}
