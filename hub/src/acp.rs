//! ACP connections across hosts: the hub lists every node's connections beside its own
//! (`host` set, `id` the address `<connection_id>/<id>`), launches on a node with
//! `POST /acp/connections?host=<connection_id>`, and relays every route of an address —
//! snapshot, prompt, cancel, interactions and their answers, delete, reconnect — and the
//! journal stream (a WebSocket of its own per relayed stream) to the owning node with that
//! node's token. An unknown connection is 404; a connection that is down is 503 naming it.
//!
//! Deliberately absent: relaying the stream over the link's QUIC connection (session streams
//! do; an ACP stream is one low-rate WebSocket per open chat view).

use std::sync::Arc;

use axum::Json;
use axum::extract::ws::{Message as AxMsg, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message as TMsg;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tuic_node::ext::ApiError;

use crate::connections::Conn;
use crate::federation::Federation;

use crate::proxy::unavailable;

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The middleware (installed inside the node's request boundary, beside `proxy::intercept`).
pub async fn intercept(State(fed): State<Arc<Federation>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if path == "/acp/connections" {
        if req.method() == Method::GET {
            return list(&fed, req, next).await;
        }
        if req.method() == Method::POST
            && let Some(host) = host_of(req.uri().query())
        {
            let Some(conn) = fed.get(&host) else {
                return ApiError::not_found(format!("unknown connection {host}")).into_response();
            };
            let url = format!("{}/acp/connections", conn.url);
            return addressed(crate::proxy::proxy_http(&fed, conn, req, url).await, &host).await;
        }
        return next.run(req).await;
    }
    let Some(after) = path.strip_prefix("/acp/connections/") else {
        return next.run(req).await;
    };
    let (raw, rest) = after.split_at(after.find('/').unwrap_or(after.len()));
    let Ok(id) = percent_encoding::percent_decode_str(raw).decode_utf8() else {
        return next.run(req).await;
    };
    let Some((host, cid)) = id.split_once('/') else {
        return next.run(req).await;
    };
    if host == "local" {
        let q = req
            .uri()
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        let mut req = req;
        if let Ok(uri) = format!("/acp/connections/{}{rest}{q}", enc(cid)).parse() {
            *req.uri_mut() = uri;
        }
        return next.run(req).await;
    }
    let Some(conn) = fed.get(host) else {
        return ApiError::not_found(format!("unknown connection {host}")).into_response();
    };
    if !conn.snapshot().up {
        return unavailable(&conn.id, "not connected");
    }
    let q = req
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let url = format!("{}/acp/connections/{}{rest}{q}", conn.url, enc(cid));
    let is_ws = req
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    if is_ws {
        return relay_ws(conn, req, url).await;
    }
    let host = host.to_owned();
    addressed(crate::proxy::proxy_http(&fed, conn, req, url).await, &host).await
}

/// `host=<connection_id>` of a launch, unless it names the hub itself.
fn host_of(query: Option<&str>) -> Option<String> {
    let host = query?.split('&').find_map(|kv| kv.strip_prefix("host="))?;
    let host = percent_encoding::percent_decode_str(host)
        .decode_utf8()
        .ok()?
        .into_owned();
    (!host.is_empty() && host != "local").then_some(host)
}

/// A node's row (or snapshot) as the hub shows it: `id` is the address, `host` the connection.
fn address_row(v: &mut Value, host: &str) {
    if let Some(id) = v["id"].as_str().map(str::to_owned) {
        v["id"] = json!(format!("{host}/{id}"));
        v["host"] = json!(host);
    }
}

/// Rewrites a relayed JSON answer's `id` into the address.
async fn addressed(resp: Response, host: &str) -> Response {
    if !resp.status().is_success() {
        return resp;
    }
    let status = resp.status();
    let body = match resp.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return ApiError::internal(e.to_string()).into_response(),
    };
    match serde_json::from_slice::<Value>(&body) {
        Ok(mut v) if v.is_object() => {
            address_row(&mut v, host);
            (status, Json(v)).into_response()
        }
        _ => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
    }
}

/// `GET /acp/connections` on the hub: its own rows, then every connected node's.
async fn list(fed: &Federation, req: Request, next: Next) -> Response {
    let local = next.run(req).await;
    let body = match local.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return ApiError::internal(e.to_string()).into_response(),
    };
    let mut rows: Vec<Value> = serde_json::from_slice(&body).unwrap_or_default();
    let asks = fed
        .all()
        .into_iter()
        .filter(|c| c.snapshot().up)
        .map(|c| async move {
            let r = fed
                .http
                .get(format!("{}/acp/connections", c.url))
                .header(header::COOKIE, c.cookie())
                .send()
                .await;
            match r {
                Ok(r) if r.status().is_success() => {
                    let mut v: Vec<Value> = r.json().await.unwrap_or_default();
                    for row in &mut v {
                        address_row(row, &c.id);
                    }
                    v
                }
                _ => Vec::new(),
            }
        });
    for v in futures::future::join_all(asks).await {
        rows.extend(v);
    }
    rows.sort_by_key(|r| r["state"] != "needs_you");
    Json(Value::Array(rows)).into_response()
}

/// Relays the journal stream: the node's refusal (404 for a dropped cursor) is the caller's.
async fn relay_ws(conn: Arc<Conn>, req: Request, url: String) -> Response {
    let (mut parts, _body) = req.into_parts();
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(u) => u,
        Err(e) => return e.into_response(),
    };
    let mut up_req = match url.replacen("http", "ws", 1).into_client_request() {
        Ok(r) => r,
        Err(_) => return ApiError::bad_request("invalid connection address").into_response(),
    };
    if let Ok(v) = HeaderValue::from_str(&conn.cookie()) {
        up_req.headers_mut().insert(header::COOKIE, v);
    }
    let upstream = match tokio_tungstenite::connect_async(up_req).await {
        Ok((ws, _)) => ws,
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            let status =
                StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let body = r.body().clone().unwrap_or_default();
            return (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        }
        Err(_) => return unavailable(&conn.id, "stream connection failed"),
    };
    let mut down = conn.downs.subscribe();
    down.borrow_and_update();
    upgrade.on_upgrade(move |client| async move {
        let (mut cl_tx, mut cl_rx) = client.split();
        let (mut up_tx, mut up_rx) = upstream.split();
        let to_client = async {
            while let Some(Ok(m)) = up_rx.next().await {
                let m = match m {
                    TMsg::Text(t) => AxMsg::Text(t.as_str().into()),
                    TMsg::Close(_) => break,
                    _ => continue,
                };
                if cl_tx.send(m).await.is_err() {
                    break;
                }
            }
            let _ = cl_tx.close().await;
        };
        let to_node = async {
            while let Some(Ok(m)) = cl_rx.next().await {
                if matches!(m, AxMsg::Close(_)) {
                    break;
                }
            }
            let _ = up_tx.close().await;
        };
        tokio::select! {
            _ = to_client => {}
            _ = to_node => {}
            _ = down.changed() => {}
        }
    })
}
