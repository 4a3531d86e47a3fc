//! Progress and operations across the hub's nodes: `POST /progress/list` merged newest first
//! over the hub and every connection (paged with one cursor that holds each source's
//! position), `GET /progress/projects`, `GET /agents` and `GET /metrics` merged with the
//! connection named, Progress Flow routed to the owner of a `<connection>/<session>`
//! address, and each node's `progress-recorded` events relayed onto the hub's bus.
//!
//! A connection that is down (or fails to answer) is named in the answer's `hosts` /
//! `connections` rows with its error; its entries are simply absent. The hub only reads the
//! nodes' own routes with their tokens; it never writes to a node's journal.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::{Map, Value, json};
use tuic_node::ext::ApiError;

use crate::connections::{Conn, describe};
use crate::federation::Federation;

mod metrics;
mod progress;

/// Longest wait for one node's answer to a merged view.
const NODE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request body read here (the node's own limit).
const MAX_BODY: usize = 2 * 1024 * 1024;
/// The name of the hub's own rows.
const LOCAL: &str = "local";

/// The middleware (installed inside the node's request boundary, beside `proxy::intercept`).
pub async fn intercept(State(fed): State<Arc<Federation>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let m = req.method().clone();
    match (m, path) {
        (Method::POST, "/progress/list") => progress::progress_list(fed, req, next).await,
        (Method::GET, "/progress/projects") => projects(fed, req, next).await,
        (Method::GET, "/agents") => agents(fed, req, next).await,
        (Method::GET, "/metrics") => metrics::metrics(fed, req, next).await,
        (Method::POST, "/progress/flow" | "/progress/flow/detail") => flow(fed, req, next).await,
        _ => next.run(req).await,
    }
}

fn bad(msg: impl Into<String>) -> Response {
    ApiError::bad_request(msg).into_response()
}

fn unavailable(id: &str, why: &str) -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "owner_unavailable",
        format!("connection {id} is unavailable: {why}"),
    )
    .into_response()
}

async fn split_body(req: Request) -> Result<(axum::http::request::Parts, Bytes), Response> {
    let (parts, body) = req.into_parts();
    match http_body_util::Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => Ok((parts, b.to_bytes())),
        Err(_) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "request body too large",
        )
        .into_response()),
    }
}

/// Runs the hub's own handler for `parts` with `body` and reads its JSON answer.
async fn local_json(
    next: Next,
    parts: axum::http::request::Parts,
    body: Bytes,
) -> (StatusCode, Value) {
    let resp = next.run(Request::from_parts(parts, Body::from(body))).await;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// One node's answer to `method path` (JSON), or why there is none.
async fn node_json(
    fed: &Federation,
    conn: &Conn,
    method: reqwest::Method,
    path_and_query: &str,
    body: Option<Value>,
) -> Result<(u16, Value), String> {
    if !conn.snapshot().up {
        return Err("not connected".into());
    }
    let mut req = fed
        .http
        .request(method, format!("{}{path_and_query}", conn.url))
        .header(reqwest::header::COOKIE, conn.cookie())
        .timeout(NODE_TIMEOUT);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.map_err(|e| describe(&e))?;
    let status = r.status().as_u16();
    let v = r.json::<Value>().await.map_err(|e| describe(&e))?;
    Ok((status, v))
}

/// Names the connection on every entry of a node's list answer.
fn tag_entries(v: &mut Value, conn: &str) {
    if let Some(a) = v.get_mut("entries").and_then(Value::as_array_mut) {
        for e in a {
            e["host"] = json!(conn);
            e["connection_id"] = json!(conn);
            if let Some(p) = e.get("pty_id").and_then(Value::as_str).map(str::to_owned) {
                e["pty_address"] = json!(format!("{conn}/{p}"));
            }
        }
    }
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn serde_urlencoded_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let d = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (d(k), d(v))
        })
        .collect()
}

/// Rows of every connection for `path`, each tagged, plus per-connection status rows.
async fn gather(fed: &Arc<Federation>, path: &str) -> (Vec<(Arc<Conn>, Value)>, Vec<Value>) {
    let conns = fed.all();
    let fetches = conns.iter().map(|c| {
        let fed = fed.clone();
        let c = c.clone();
        let path = path.to_owned();
        async move {
            let r = node_json(&fed, &c, reqwest::Method::GET, &path, None).await;
            (c, r)
        }
    });
    let mut ok = Vec::new();
    let mut rows = Vec::new();
    for (c, r) in futures::future::join_all(fetches).await {
        match r {
            Ok((200, v)) => {
                rows.push(json!({"connection_id": c.id, "up": true}));
                ok.push((c, v));
            }
            Ok((s, v)) => rows.push(json!({"connection_id": c.id, "up": true,
                "error": format!("{s}: {}", v["error"].as_str().unwrap_or("error"))})),
            Err(e) => {
                rows.push(json!({"connection_id": c.id, "up": false, "offline": true, "error": e}))
            }
        }
    }
    (ok, rows)
}

/// `GET /progress/projects`: the hub's and every node's projects, with the host named.
async fn projects(fed: Arc<Federation>, req: Request, next: Next) -> Response {
    let (parts, body) = match split_body(req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let (s, local) = local_json(next, parts, body).await;
    if !s.is_success() {
        return (s, Json(local)).into_response();
    }
    let mut projects: Vec<Value> = local["projects"].as_array().cloned().unwrap_or_default();
    for p in &mut projects {
        p["host"] = json!(LOCAL);
    }
    let (remote, connections) = gather(&fed, "/progress/projects").await;
    for (c, v) in remote {
        for mut p in v["projects"].as_array().cloned().unwrap_or_default() {
            p["host"] = json!(c.id);
            p["connection_id"] = json!(c.id);
            projects.push(p);
        }
    }
    projects.sort_by(|a, b| {
        b["last_at_ms"]
            .as_u64()
            .cmp(&a["last_at_ms"].as_u64())
            .then_with(|| a["host"].as_str().cmp(&b["host"].as_str()))
    });
    Json(json!({"projects": projects, "connections": connections})).into_response()
}

/// `GET /agents`: the hub's and every node's detected agents, with addresses.
async fn agents(fed: Arc<Federation>, req: Request, next: Next) -> Response {
    let (parts, body) = match split_body(req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let (s, local) = local_json(next, parts, body).await;
    if !s.is_success() {
        return (s, Json(local)).into_response();
    }
    let mut agents: Vec<Value> = local["agents"].as_array().cloned().unwrap_or_default();
    let mut scanned = local["sessions_scanned"].as_u64().unwrap_or(0);
    for a in &mut agents {
        a["host"] = json!(LOCAL);
    }
    let (remote, connections) = gather(&fed, "/agents").await;
    for (c, v) in remote {
        scanned += v["sessions_scanned"].as_u64().unwrap_or(0);
        for mut a in v["agents"].as_array().cloned().unwrap_or_default() {
            let sid = a["session_id"].as_str().unwrap_or_default().to_owned();
            a["host"] = json!(c.id);
            a["connection_id"] = json!(c.id);
            a["is_remote"] = json!(true);
            a["address"] = json!(format!("{}/{sid}", c.id));
            agents.push(a);
        }
    }
    Json(json!({"agents": agents, "sessions_scanned": scanned, "connections": connections}))
        .into_response()
}

/// `POST /progress/flow[/detail]` with `session_id` = `<connection>/<session>`: read on the
/// owning node (`local/<id>` on the hub itself); a plain id is the hub's own session.
async fn flow(fed: Arc<Federation>, req: Request, next: Next) -> Response {
    let (parts, body) = match split_body(req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let mut v: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return next.run(Request::from_parts(parts, Body::from(body))).await,
    };
    let Some(addr) = v["session_id"]
        .as_str()
        .filter(|s| s.contains('/'))
        .map(str::to_owned)
    else {
        return next.run(Request::from_parts(parts, Body::from(body))).await;
    };
    let (conn_id, sid) = match tuic_proto::peer::parse_address(&addr) {
        Ok(tuic_proto::peer::Address::Local(sid)) => (LOCAL.to_owned(), sid.to_owned()),
        Ok(tuic_proto::peer::Address::Remote { connection, peer }) => {
            (connection.to_owned(), peer.to_owned())
        }
        Err(e) => return bad(e.to_string()),
    };
    v["session_id"] = json!(sid);
    if conn_id == LOCAL {
        return next
            .run(Request::from_parts(parts, Body::from(v.to_string())))
            .await;
    }
    let Some(conn) = fed.get(&conn_id) else {
        return ApiError::not_found(format!("unknown connection {conn_id}")).into_response();
    };
    match node_json(
        &fed,
        &conn,
        reqwest::Method::POST,
        parts.uri.path(),
        Some(v),
    )
    .await
    {
        Ok((s, mut out)) => {
            if out.is_object() {
                out["connection_id"] = json!(conn.id);
            }
            (
                StatusCode::from_u16(s).unwrap_or(StatusCode::BAD_GATEWAY),
                Json(out),
            )
                .into_response()
        }
        Err(e) => unavailable(&conn.id, &e),
    }
}
