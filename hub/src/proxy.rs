//! Routing on the hub: a session route or stream whose id is an address
//! `<connection_id>/<session_id>` (URL-encoded) goes to the owning node with that node's token
//! in place of the caller's credential; 503 names the connection when it is down. A live
//! stream rides its own QUIC stream of the peer link when the link is QUIC
//! (`tuic_node::link::quic_stream`), else a WebSocket of its own. Also `GET /hub/connections` and `POST /hub/reload`. (`GET /sessions` lists the
//! remote rows through the node's own route: `remote.rs` is its `ext::SessionSource`.)

use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::ws::{Message as AxMsg, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message as TMsg;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tuic_node::ext::ApiError;
use tuic_node::ext::audit::FORWARDED_USER_HEADER;

use crate::connections::{Conn, describe};
use crate::federation::Federation;

/// Largest proxied request body (the node's own limit).
const MAX_PROXY_BODY: usize = 2 * 1024 * 1024;

pub(crate) fn unavailable(id: &str, why: &str) -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "owner_unavailable",
        format!("connection {id} is unavailable: {why}"),
    )
    .into_response()
}

/// Whose credential a relayed call or stream carries to the node.
#[derive(Debug, Clone)]
pub(crate) enum Via {
    /// The hub's token for the connection, with the caller the hub forwards for.
    Hub {
        /// The caller's `who` on the hub, for the node's audit.
        user: Option<String>,
    },
    /// A share link's viewer (`crate::share`): no credential of the hub's, the owner's share
    /// token in the query, so the owner applies the link's scope. Never over QUIC: a stream on
    /// the link is the hub's own (authenticated by the link), not the viewer's.
    Share,
}

/// Longest wait for the owner's answer to a share viewer's call.
const SHARE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Splits `/sessions/<id>[/rest]` into the percent-decoded id and the rest.
pub(crate) fn session_target(path: &str) -> Option<(String, &str)> {
    let after = path.strip_prefix("/sessions/")?;
    let (raw_id, rest) = after.split_at(after.find('/').unwrap_or(after.len()));
    let id = percent_encoding::percent_decode_str(raw_id)
        .decode_utf8()
        .ok()?
        .into_owned();
    Some((id, rest))
}

/// The middleware (installed inside the node's request boundary).
pub async fn intercept(State(fed): State<Arc<Federation>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if path == "/sessions"
        && req.method() == axum::http::Method::POST
        && let Some(host) = create_host(req.uri().query())
    {
        return create_remote(&fed, req, &host).await;
    }
    if let Some((id, rest)) = session_target(&path)
        && id.contains('/')
    {
        // Empty connection ids and session ids are refused before any owner is chosen.
        let (conn_id, sid) = match tuic_proto::peer::parse_address(&id) {
            Ok(tuic_proto::peer::Address::Local(sid)) => {
                return next.run(rewrite(req, sid, rest)).await;
            }
            Ok(tuic_proto::peer::Address::Remote { connection, peer }) => (connection, peer),
            Err(e) => return ApiError::bad_request(e.to_string()).into_response(),
        };
        let Some(conn) = fed.get(conn_id) else {
            return ApiError::not_found(format!("unknown connection {conn_id}")).into_response();
        };
        let is_ws = req
            .headers()
            .get(header::UPGRADE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
        let screen_stream = is_ws && rest == "/stream" && is_screen_mode(req.uri().query());
        if !conn.snapshot().up {
            // A down node's session stays viewable: its last relayed screen, then close.
            if screen_stream && let Some(last) = fed.screens.get(&id) {
                return last_screen(req, last).await;
            }
            return unavailable(&conn.id, "not connected");
        }
        let rest = rest.to_owned();
        let sid = sid.to_owned();
        return if is_ws {
            let follow = screen_stream.then(|| (fed.clone(), id.clone()));
            proxy_ws(conn, req, &sid, &rest, follow, None).await
        } else {
            let url = target_url(&conn, &sid, &rest, req.uri().query());
            proxy_http(&fed, conn, req, url).await
        };
    }
    next.run(req).await
}

/// `local/<id>` names the hub's own session: strip the prefix and serve it here.
fn rewrite(mut req: Request, sid: &str, rest: &str) -> Request {
    let q = req
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let enc = percent_encoding::utf8_percent_encode(sid, percent_encoding::NON_ALPHANUMERIC);
    if let Ok(uri) = format!("/sessions/{enc}{rest}{q}").parse() {
        *req.uri_mut() = uri;
    }
    req
}

pub(crate) fn target_url(conn: &Conn, sid: &str, rest: &str, query: Option<&str>) -> String {
    let enc = percent_encoding::utf8_percent_encode(sid, percent_encoding::NON_ALPHANUMERIC);
    let q = query.map(|q| format!("?{q}")).unwrap_or_default();
    format!("{}/sessions/{enc}{rest}{q}", conn.url)
}

/// The `host` of `POST /sessions?host=<connection_id>`, unless it names this hub itself.
fn create_host(query: Option<&str>) -> Option<String> {
    let host = query?.split('&').find_map(|kv| kv.strip_prefix("host="))?;
    let host = percent_encoding::percent_decode_str(host)
        .decode_utf8()
        .ok()?
        .into_owned();
    (!host.is_empty() && host != "local").then_some(host)
}

/// `POST /sessions?host=<connection_id>`: creates the session on that node; the answer is the
/// node's, plus the `address` (`<connection_id>/<session_id>`) every other route takes.
async fn create_remote(fed: &Federation, req: Request, host: &str) -> Response {
    let Some(conn) = fed.get(host) else {
        return ApiError::not_found(format!("unknown connection {host}")).into_response();
    };
    if !conn.snapshot().up {
        return unavailable(&conn.id, "not connected");
    }
    let url = format!("{}/sessions", conn.url);
    let resp = proxy_http(fed, conn, req, url).await;
    if !resp.status().is_success() {
        return resp;
    }
    let body = match resp.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return ApiError::internal(e.to_string()).into_response(),
    };
    let mut v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Some(sid) = v["session_id"].as_str().map(str::to_owned) {
        v["address"] = json!(format!("{host}/{sid}"));
        v["connection_id"] = json!(host);
    }
    Json(v).into_response()
}

/// Relays one HTTP request to `conn`'s node with the hub's credential for it: the body bounded,
/// the node's status, content type and `x-` headers passed back (also the ACP relay's).
pub(crate) async fn proxy_http(
    fed: &Federation,
    conn: Arc<Conn>,
    req: Request,
    url: String,
) -> Response {
    let user = crate::audit::forwarded_user(&req);
    relay_http(fed, conn, req, url, Via::Hub { user }).await
}

/// [`proxy_http`] with the credential `via` says.
pub(crate) async fn relay_http(
    fed: &Federation,
    conn: Arc<Conn>,
    req: Request,
    url: String,
    via: Via,
) -> Response {
    let method = req.method().clone();
    let content_type = req.headers().get(header::CONTENT_TYPE).cloned();
    let body = match http_body_util::Limited::new(req.into_body(), MAX_PROXY_BODY)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                "request body too large",
            )
            .into_response();
        }
    };
    // The caller's credential stays here; the node sees the hub's token for this connection
    // (or, for a share viewer, only the owner's share token in the URL).
    let mut out = fed.http.request(method, url).body(body);
    match via {
        Via::Hub { user } => {
            out = out.header(header::COOKIE, conn.cookie());
            if let Some(u) = user.and_then(|u| HeaderValue::from_str(&u).ok()) {
                out = out.header(FORWARDED_USER_HEADER, u);
            }
        }
        Via::Share => out = out.timeout(SHARE_TIMEOUT),
    }
    if let Some(ct) = content_type {
        out = out.header(header::CONTENT_TYPE, ct);
    }
    match out.send().await {
        Ok(r) => {
            let status = r.status();
            let ct = r.headers().get(header::CONTENT_TYPE).cloned();
            // The node's own `x-` headers carry a route's answer beside its body (the stderr
            // offsets, the raw ring's total): they pass through; hop-by-hop ones do not.
            let own: Vec<_> = r
                .headers()
                .iter()
                .filter(|(n, _)| n.as_str().starts_with("x-"))
                .map(|(n, v)| (n.clone(), v.clone()))
                .collect();
            let bytes: Bytes = match r.bytes().await {
                Ok(b) => b,
                Err(e) => return unavailable(&conn.id, &describe(&e)),
            };
            let mut resp = (status, Body::from(bytes)).into_response();
            if let Some(ct) = ct {
                resp.headers_mut().insert(header::CONTENT_TYPE, ct);
            }
            resp.headers_mut().extend(own);
            resp
        }
        Err(e) => unavailable(&conn.id, &describe(&e)),
    }
}

/// Whether a stream query asks for screen sync (`mode=screen`).
fn is_screen_mode(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|p| p == "mode=screen"))
}

/// Serves a stored last screen to a page: `hello`, the whole screen, then a normal close.
async fn last_screen(req: Request, last: crate::lastscreen::LastScreen) -> Response {
    let (mut parts, _body) = req.into_parts();
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(u) => u,
        Err(e) => return e.into_response(),
    };
    upgrade.on_upgrade(move |mut client| async move {
        for f in crate::lastscreen::LastScreens::frames(&last) {
            if client.send(AxMsg::Text(f.into())).await.is_err() {
                return;
            }
        }
        let _ = client.close().await;
    })
}

/// A relayed stream's upstream: the node's messages both ways, whichever carrier.
type Upstream = (
    std::pin::Pin<Box<dyn futures::Sink<AxMsg, Error = std::io::Error> + Send>>,
    std::pin::Pin<Box<dyn futures::Stream<Item = std::io::Result<AxMsg>> + Send>>,
);

/// A session stream on its own QUIC stream of the link, as axum messages.
fn from_link(carrier: tuic_node::link::quic_stream::Carrier) -> Upstream {
    use tuic_node::link::quic_stream::Frame;
    let (tx, rx) = carrier;
    let tx = tx.with(|m: AxMsg| {
        futures::future::ready(Ok::<_, std::io::Error>(match m {
            AxMsg::Text(t) => Frame::Text(t.as_str().to_owned()),
            AxMsg::Binary(b) => Frame::Binary(b),
            AxMsg::Close(_) => Frame::Close,
            AxMsg::Ping(_) | AxMsg::Pong(_) => Frame::Other,
        }))
    });
    let rx = rx.map(|r| {
        r.map(|f| match f {
            Frame::Text(t) => AxMsg::Text(t.into()),
            Frame::Binary(b) => AxMsg::Binary(b),
            Frame::Close => AxMsg::Close(None),
            Frame::Other => AxMsg::Pong(Default::default()),
        })
    });
    (Box::pin(tx), Box::pin(rx))
}

/// Opens the upstream of a relayed stream: its own stream on the link's QUIC connection when
/// the link is QUIC (so a flooding session never delays the link's mail or another session),
/// else (or when that fails short of a refusal) a WebSocket to the node. `Err` is the answer
/// for the caller: the node's refusal, or 503.
async fn open_upstream(
    conn: &Conn,
    sid: &str,
    rest: &str,
    query: Option<&str>,
    via: &Via,
) -> Result<Upstream, Response> {
    use tuic_node::link::quic_stream::{self, OpenError, Request as StreamRequest};
    let user = match via {
        Via::Hub { user } => user.clone(),
        Via::Share => None,
    };
    if rest == "/stream"
        && let Via::Hub { .. } = via
        && let Some(link) = conn.quic_link()
    {
        let req = StreamRequest {
            session: sid.to_owned(),
            query: query.map(str::to_owned),
            forwarded_user: user.clone(),
        };
        match quic_stream::open(&link, req).await {
            Ok(up) => {
                conn.set(|s| s.quic_session_streams += 1);
                return Ok(from_link(up));
            }
            Err(OpenError::Refused { status, body }) => {
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
                return Err((status, Json(body)).into_response());
            }
            Err(OpenError::Unavailable(e)) => {
                tracing::debug!(conn = %conn.id, error = %e, "session stream over QUIC unavailable; dialing a WebSocket");
            }
        }
    }
    let url = target_url(conn, sid, rest, query).replacen("http", "ws", 1);
    let mut upstream_req = match url.into_client_request() {
        Ok(r) => r,
        Err(_) => return Err(ApiError::bad_request("invalid session address").into_response()),
    };
    if let Via::Hub { .. } = via
        && let Ok(v) = HeaderValue::from_str(&conn.cookie())
    {
        upstream_req.headers_mut().insert(header::COOKIE, v);
    }
    if let Some(u) = user.and_then(|u| HeaderValue::from_str(&u).ok()) {
        upstream_req.headers_mut().insert(FORWARDED_USER_HEADER, u);
    }
    let upstream = match tokio_tungstenite::connect_async(upstream_req).await {
        Ok((ws, _)) => ws,
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            let status =
                StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let body = r.body().clone().unwrap_or_default();
            return Err(
                (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
            );
        }
        Err(_) => return Err(unavailable(&conn.id, "stream connection failed")),
    };
    if let Some(s) = upstream.get_ref().get_ref_tcp() {
        let _ = s.set_nodelay(true);
    }
    let (up_tx, up_rx) = upstream.split();
    let tx = up_tx.sink_map_err(std::io::Error::other).with(|m: AxMsg| {
        futures::future::ready(Ok::<_, std::io::Error>(match m {
            AxMsg::Text(t) => TMsg::Text(t.as_str().into()),
            AxMsg::Binary(b) => TMsg::Binary(b),
            AxMsg::Close(_) => TMsg::Close(None),
            AxMsg::Ping(p) => TMsg::Ping(p),
            AxMsg::Pong(p) => TMsg::Pong(p),
        }))
    });
    let rx = up_rx.filter_map(|m| {
        futures::future::ready(match m {
            Ok(TMsg::Text(t)) => Some(Ok(AxMsg::Text(t.as_str().into()))),
            Ok(TMsg::Binary(b)) => Some(Ok(AxMsg::Binary(b))),
            Ok(TMsg::Close(_)) => Some(Ok(AxMsg::Close(None))),
            Ok(_) => None,
            Err(e) => Some(Err(std::io::Error::other(e))),
        })
    });
    Ok((Box::pin(tx), Box::pin(rx)))
}

/// `follow`: for a screen stream, the store and the session's address, so the last screen
/// relayed is kept when the relay ends. `share`: a share viewer's stream, with the query to
/// send the owner (its share token in place of the viewer's): relayed without the hub's
/// credential, and read-only here too (nothing the viewer sends that would reach the PTY is
/// passed on; the owner drops it as well).
pub(crate) async fn proxy_ws(
    conn: Arc<Conn>,
    req: Request,
    sid: &str,
    rest: &str,
    follow: Option<(Arc<Federation>, String)>,
    share: Option<String>,
) -> Response {
    let read_only = share.is_some();
    let (query, via) = match share {
        Some(q) => (Some(q), Via::Share),
        None => (
            req.uri().query().map(str::to_owned),
            Via::Hub {
                user: crate::audit::forwarded_user(&req),
            },
        ),
    };
    let (mut parts, _body) = req.into_parts();
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(u) => u,
        Err(e) => return e.into_response(),
    };
    // Open upstream before upgrading, so an unreachable owner is a 503, not an empty socket.
    let (mut up_tx, mut up_rx) = match open_upstream(&conn, sid, rest, query.as_deref(), &via).await
    {
        Ok(up) => up,
        Err(answer) => return answer,
    };
    let mut down = conn.downs.subscribe();
    down.borrow_and_update();
    upgrade.on_upgrade(move |client| async move {
        let (mut cl_tx, mut cl_rx) = client.split();
        let mut follower = follow
            .as_ref()
            .map(|_| crate::lastscreen::Follower::default());
        let to_node = async {
            while let Some(Ok(m)) = cl_rx.next().await {
                match &m {
                    AxMsg::Text(_) | AxMsg::Binary(_) => {}
                    AxMsg::Close(_) => break,
                    _ => continue,
                }
                if read_only && !viewer_may_send(&m) {
                    continue;
                }
                if up_tx.send(m).await.is_err() {
                    break;
                }
            }
            let _ = up_tx.close().await;
        };
        let to_client = async {
            while let Some(Ok(m)) = up_rx.next().await {
                match &m {
                    AxMsg::Text(t) => {
                        if let Some(f) = follower.as_mut() {
                            f.on_text(t.as_str());
                        }
                    }
                    AxMsg::Binary(_) => {}
                    AxMsg::Close(_) => break,
                    _ => continue,
                }
                if cl_tx.send(m).await.is_err() {
                    break;
                }
            }
            if let (Some((fed, address)), Some(f)) = (&follow, follower.take()) {
                fed.screens.store(address, f);
            }
            let _ = cl_tx.close().await;
        };
        // The node found down ends the relay even when no reset reached it (a cut link): the
        // page gets a close, retries, and is served the stored last screen.
        tokio::select! {
            _ = async { tokio::join!(to_node, to_client) } => {}
            _ = down.changed() => {}
        }
        if let (Some((fed, address)), Some(f)) = (&follow, follower.take()) {
            fed.screens.store(address, f);
        }
        let _ = cl_tx.close().await;
    })
}

/// What a read-only viewer's message may carry to the node: a screen client's acks, view-only
/// resizes and scrolls; never input, a paste, an applied resize or a byte stream's text.
fn viewer_may_send(m: &AxMsg) -> bool {
    use tuic_proto::screen::ClientFrame;
    match m {
        AxMsg::Text(t) => matches!(
            serde_json::from_str::<ClientFrame>(t.as_str()),
            Ok(ClientFrame::Ack { .. }
                | ClientFrame::Scroll { .. }
                | ClientFrame::Resize { apply: false, .. })
        ),
        _ => false,
    }
}

trait TcpRef {
    fn get_ref_tcp(&self) -> Option<&tokio::net::TcpStream>;
}

impl TcpRef for tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream> {
    fn get_ref_tcp(&self) -> Option<&tokio::net::TcpStream> {
        match self {
            tokio_tungstenite::MaybeTlsStream::Plain(s) => Some(s),
            _ => None,
        }
    }
}

/// `GET /hub/connections`.
pub async fn list_connections(State(fed): State<Arc<Federation>>) -> Json<Value> {
    use tuic_node::ext::fds;
    let limit = fds::limit();
    Json(json!({
        "connections": fed.connection_rows(),
        "fds": {"used": fds::used(), "limit": limit, "reserve": fds::reserve(limit),
                "refused_total": fds::refused_total()},
    }))
}

/// `POST /hub/reload`: re-read `config.json` and apply connection changes at once.
pub async fn reload(State(fed): State<Arc<Federation>>) -> Result<Json<Value>, ApiError> {
    let file = fed.node.config_file.clone();
    let cfg = tokio::task::spawn_blocking(move || file.load())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    fed.node.set_config(cfg);
    fed.reconcile();
    Ok(Json(json!({"ok": true, "connections": fed.all().len()})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_decoded() {
        assert_eq!(
            session_target("/sessions/boxb%2F12/write"),
            Some(("boxb/12".into(), "/write"))
        );
        assert_eq!(session_target("/sessions/12"), Some(("12".into(), "")));
        assert_eq!(session_target("/sessionsx"), None);
    }

    #[test]
    fn a_share_viewer_sends_only_what_changes_nothing_on_the_node() {
        for (m, may) in [
            (AxMsg::Text(r#"{"type":"ack","seq":3}"#.into()), true),
            (AxMsg::Text(r#"{"type":"scroll","offset":10}"#.into()), true),
            (
                AxMsg::Text(r#"{"type":"resize","rows":40,"cols":90}"#.into()),
                true,
            ),
            (
                AxMsg::Text(r#"{"type":"resize","rows":40,"cols":90,"apply":true}"#.into()),
                false,
            ),
            (
                AxMsg::Text(r#"{"type":"input","data":"ls\r"}"#.into()),
                false,
            ),
            (AxMsg::Text(r#"{"type":"paste","data":"ls"}"#.into()), false),
            (AxMsg::Text("echo typed\n".into()), false),
            (AxMsg::Binary(b"ls\r".to_vec().into()), false),
        ] {
            assert_eq!(viewer_may_send(&m), may, "{m:?}");
        }
    }
}

/// Query of `POST /hub/upload`.
#[derive(Debug, serde::Deserialize)]
pub struct UploadQuery {
    /// Connection id of the receiving node.
    conn: String,
    /// Absolute directory inside a repository registered on that node.
    path: String,
}

/// `POST /hub/upload?conn=&path=` (IPC only): forwards a tar stream from `tuic cp` on this
/// machine to the node's `/fs/upload-copy`, with the connection's token. Over TCP it is
/// refused: no HTTP caller may make this machine send data to another host.
pub async fn upload(
    State(fed): State<Arc<Federation>>,
    transport: Option<axum::Extension<tuic_node::ext::Transport>>,
    axum::extract::Query(q): axum::extract::Query<UploadQuery>,
    body: Body,
) -> Response {
    if !matches!(
        transport.map(|axum::Extension(t)| t),
        Some(tuic_node::ext::Transport::Ipc)
    ) {
        return ApiError::forbidden(
            "uploads to other hosts start only from this machine's IPC socket",
        )
        .into_response();
    }
    let Some(conn) = fed.get(&q.conn) else {
        return ApiError::not_found(format!("unknown connection {}", q.conn)).into_response();
    };
    if !conn.snapshot().up {
        return unavailable(&conn.id, "not connected");
    }
    let mut url = match reqwest::Url::parse(&format!("{}/fs/upload-copy", conn.url)) {
        Ok(u) => u,
        Err(_) => return ApiError::internal("invalid connection url").into_response(),
    };
    url.query_pairs_mut().append_pair("path", &q.path);
    let stream = body.into_data_stream();
    let r = fed
        .http
        .post(url)
        .header(header::COOKIE, conn.cookie())
        .header(header::CONTENT_TYPE, "application/x-tar")
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await;
    match r {
        Ok(r) => {
            let status = r.status();
            match r.bytes().await {
                Ok(b) => (status, [(header::CONTENT_TYPE, "application/json")], b).into_response(),
                Err(e) => unavailable(&conn.id, &describe(&e)),
            }
        }
        Err(e) => unavailable(&conn.id, &describe(&e)),
    }
}
