//! `POST /mcp`, `GET /mcp` (SSE) and `DELETE /mcp`: the Streamable HTTP transport in both
//! eras.
//!
//! Legacy clients `initialize` and get an `Mcp-Session-Id`; modern (2026-07-28) clients send
//! stateless requests that carry their revision, client info and capabilities in
//! `params._meta` and must repeat the method (and tool name) in `Mcp-Method` / `Mcp-Name`.
//! `tools/call` never requires a session: identity is resolved per call, and a stale header
//! is recreated rather than refused. Origin and Host are checked by the request boundary
//! before a request gets here; the body limit (2 MiB) by the router's server limits.
//!
//! Answers are bounded too: a JSON-RPC batch exists only in revision 2025-03-26 (later ones
//! removed batching), carries at most [`p::MAX_BATCH`] messages and at most
//! [`p::MAX_BATCH_ANSWER_BYTES`] of answers; one answer is at most [`p::MAX_ANSWER_BYTES`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Map, Value, json};

use super::protocol::{self as p, Message};
use super::registry::{Answer, CallCtx};
use super::sessions::{Arrival, Binding, Lookup};
use crate::error::ApiError;
use crate::guard::{self, Transport};
use crate::state::Node;

mod handshake;
mod stream;
use handshake::{bind, cache_envelope, call_ctx, discover, enforce_cap, initialize};
pub(crate) use stream::get_stream;
use stream::{call_stream, listen, names_event_stream, streamed_call};

pub(crate) use tuic_proto::mcp::{
    METHOD_HEADER, NAME_HEADER, SESSION_HEADER, TUIC_SESSION_HEADER, VERSION_HEADER,
};

/// The answer to one message: an HTTP status and an optional JSON-RPC body, already rendered
/// as JSON text (a tool's value is written into it once, see [`render_tool_text`]).
#[derive(Debug)]
struct Outcome {
    status: StatusCode,
    body: Option<String>,
    /// A `subscriptions/listen` request: answered with an event stream, not JSON.
    listen: Option<Value>,
    /// A `tools/call` answered as an event stream: its progress, then its result.
    stream: Option<CallStream>,
}

/// The messages of a streamed `tools/call` (progress, then the result).
struct CallStream(futures::stream::BoxStream<'static, String>);

impl std::fmt::Debug for CallStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallStream")
    }
}

impl Outcome {
    fn ok(body: Value) -> Self {
        Self::err(StatusCode::OK, body)
    }
    fn err(status: StatusCode, body: Value) -> Self {
        Self {
            status,
            body: Some(body.to_string()),
            listen: None,
            stream: None,
        }
    }
    fn rendered(body: String) -> Self {
        Self {
            status: StatusCode::OK,
            body: Some(body),
            listen: None,
            stream: None,
        }
    }
    fn accepted() -> Self {
        Self {
            status: StatusCode::ACCEPTED,
            body: None,
            listen: None,
            stream: None,
        }
    }
}

/// What the transport resolved about the request before dispatch.
#[derive(Debug, Clone)]
struct Req {
    transport: Transport,
    session: Option<String>,
    version_header: Option<String>,
    tuic_session: Option<String>,
    /// `Accept` names `text/event-stream` explicitly: a call with a progress token is answered
    /// as an event stream.
    sse: bool,
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

fn transport_of(req_ext: Option<Transport>) -> Transport {
    // No extension: the request did not come through a listener; treat it as remote.
    req_ext.unwrap_or(Transport::Tcp {
        peer: std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
    })
}

fn disabled() -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "mcp_disabled",
        "the MCP endpoint is disabled on this node (mcp_server_enabled is false); the HTTP API stays available",
    )
    .into_response()
}

fn json_response(status: StatusCode, body: &Value, session: Option<&str>) -> Response {
    text_response(status, body.to_string(), session)
}

fn text_response(status: StatusCode, body: String, session: Option<&str>) -> Response {
    let mut r = (status, [(CONTENT_TYPE, "application/json")], body).into_response();
    if let Some(v) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
        r.headers_mut().insert(SESSION_HEADER, v);
    }
    r
}

/// `POST /mcp`.
pub(crate) async fn post(
    State(node): State<Arc<Node>>,
    transport: Option<axum::Extension<Transport>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if !node.config().mcp_server_enabled {
        return disabled();
    }
    let body = match body {
        Ok(b) => b,
        Err(r) => {
            let status = r.status();
            let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
                "too_large"
            } else {
                "bad_request"
            };
            return ApiError::new(status, code, r.body_text()).into_response();
        }
    };
    let accept = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok());
    if !p::accepts_json(accept) {
        return ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            "not_acceptable",
            "POST /mcp answers application/json; the Accept header excludes it",
        )
        .into_response();
    }
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &p::error(Value::Null, p::PARSE_ERROR, format!("parse error: {e}")),
                None,
            );
        }
    };
    let transport = transport_of(transport.map(|e| e.0));
    // `x-tuic-session` proves an identity because only a process that inherited the terminal's
    // environment has it; such a process is on this host. From a remote caller it proves
    // nothing (it would join a live owner as a sibling), so it is not honoured there.
    let tuic_session = header(&headers, TUIC_SESSION_HEADER)
        .filter(|t| {
            let local = guard::is_loopback_caller(transport, &headers);
            if !local {
                tracing::debug!(source = "mcp", asserted = %t, "ignoring x-tuic-session from a remote caller");
            }
            local
        })
        .map(str::to_owned);
    let req = Req {
        transport,
        session: header(&headers, SESSION_HEADER).map(str::to_owned),
        version_header: header(&headers, VERSION_HEADER).map(str::to_owned),
        tuic_session,
        sse: names_event_stream(&headers),
    };
    if let Some(v) = &req.version_header
        && !p::SUPPORTED.contains(&v.as_str())
    {
        let id = parsed.get("id").cloned().unwrap_or(Value::Null);
        return json_response(
            StatusCode::BAD_REQUEST,
            &p::error_with(
                id,
                p::INVALID_PARAMS,
                format!("unsupported protocol version {v}"),
                json!({"supported": p::SUPPORTED, "requested": v}),
            ),
            None,
        );
    }
    match parsed {
        Value::Array(batch) => post_batch(&node, &req, &headers, batch).await,
        single => {
            let mut minted = None;
            let out = handle(&node, &req, &headers, &single, &mut minted, false).await;
            if let Some(filter) = out.listen {
                return listen(&node, filter);
            }
            if let Some(stream) = out.stream {
                return call_stream(&node, stream);
            }
            let session = minted.as_deref();
            match out.body {
                Some(b) if b.len() > p::MAX_ANSWER_BYTES => json_response(
                    StatusCode::OK,
                    &too_large(single.get("id").cloned().unwrap_or(Value::Null), b.len()),
                    session,
                ),
                Some(b) => text_response(out.status, b, session),
                None => {
                    let mut r = out.status.into_response();
                    if let Some(v) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
                        r.headers_mut().insert(SESSION_HEADER, v);
                    }
                    r
                }
            }
        }
    }
}

/// The error that replaces an answer over [`p::MAX_ANSWER_BYTES`] (or a batch member's past
/// the batch's answer budget).
fn too_large(id: Value, bytes: usize) -> Value {
    p::error_with(
        id,
        p::INTERNAL_ERROR,
        format!("the answer is too large ({bytes} bytes); ask for less (limit, paging)"),
        json!({"code": "answer_too_large", "bytes": bytes}),
    )
}

/// The revision a batch is judged by: the request's header, else its session's, else
/// 2025-03-26 (what a 2025-06-18 server assumes of a request that names none).
fn batch_revision(node: &Arc<Node>, req: &Req) -> String {
    req.version_header
        .clone()
        .or_else(|| {
            req.session
                .as_deref()
                .and_then(|s| node.mcp.sessions.with(s, |x| x.protocol_version.to_owned()))
        })
        .unwrap_or_else(|| p::BATCHING.to_owned())
}

/// A JSON-RPC batch (2025-03-26 clients): every member handled, the answers in one array;
/// `initialize` may not be batched, an empty batch is an invalid request. Refused whole,
/// before any member runs, for a later revision (they removed batching) or over
/// [`p::MAX_BATCH`] messages; members whose answers would pass [`p::MAX_BATCH_ANSWER_BYTES`]
/// are answered with an error each.
async fn post_batch(
    node: &Arc<Node>,
    req: &Req,
    headers: &HeaderMap,
    batch: Vec<Value>,
) -> Response {
    let refuse = |message: String| {
        json_response(
            StatusCode::BAD_REQUEST,
            &p::error(Value::Null, p::INVALID_REQUEST, message),
            None,
        )
    };
    if batch.is_empty() {
        return refuse("empty batch".into());
    }
    let revision = batch_revision(node, req);
    if revision != p::BATCHING {
        return refuse(format!(
            "JSON-RPC batches exist only in protocol revision {}; {revision} removed them: send one message per request",
            p::BATCHING
        ));
    }
    if batch.len() > p::MAX_BATCH {
        return refuse(format!(
            "a batch of {} messages is over the limit of {}: send smaller batches",
            batch.len(),
            p::MAX_BATCH
        ));
    }
    let mut answers = String::from("[");
    let mut minted = None;
    for m in &batch {
        if answers.len() > p::MAX_BATCH_ANSWER_BYTES {
            // The budget is spent: a request still gets an answer, a small error.
            if let Some(id) = m.get("id").filter(|_| m.get("method").is_some()) {
                answers.push(',');
                answers.push_str(
                    &p::error_with(
                        id.clone(),
                        p::INTERNAL_ERROR,
                        format!(
                            "the batch's answers passed their limit of {} bytes: send smaller batches",
                            p::MAX_BATCH_ANSWER_BYTES
                        ),
                        json!({"code": "answer_too_large"}),
                    )
                    .to_string(),
                );
            }
            continue;
        }
        let out = handle(node, req, headers, m, &mut minted, true).await;
        if let Some(b) = out.body {
            if answers.len() > 1 {
                answers.push(',');
            }
            answers.push_str(&b);
        }
    }
    if answers.len() == 1 {
        return StatusCode::ACCEPTED.into_response();
    }
    answers.push(']');
    text_response(StatusCode::OK, answers, None)
}

/// Handles one message. `minted` receives a session id to answer in the header.
async fn handle(
    node: &Arc<Node>,
    req: &Req,
    headers: &HeaderMap,
    msg: &Value,
    minted: &mut Option<String>,
    in_batch: bool,
) -> Outcome {
    let (id, method, params) = match p::classify(msg) {
        Err(e) => return Outcome::err(StatusCode::BAD_REQUEST, e),
        Ok(Message::Response) => return Outcome::accepted(),
        Ok(Message::Notification { method }) => {
            if let Some(s) = &req.session
                && node
                    .mcp
                    .sessions
                    .touch(s, Instant::now(), p::LEGACY_DEFAULT)
                    == Lookup::Retired
            {
                return Outcome::err(StatusCode::NOT_FOUND, terminated(Value::Null));
            }
            tracing::debug!(source = "mcp", method = %method, "notification");
            return Outcome::accepted();
        }
        Ok(Message::Request { id, method, params }) => (id, method, params),
    };

    // A request is stateless-modern when it has no session and says 2026-07-28 (header or
    // _meta); server/discover is modern by definition.
    let stateless = req.session.is_none()
        && (method == "server/discover"
            || p::meta_version(&params).is_some()
            || req.version_header.as_deref() == Some(p::MODERN));
    if stateless && let Err(o) = check_modern(req, headers, &id, &method, &params) {
        return o;
    }
    // Methods 2026-07-28 removed (subscriptions go through `subscriptions/listen` there).
    if stateless
        && matches!(
            method.as_str(),
            "initialize"
                | "ping"
                | "logging/setLevel"
                | "resources/subscribe"
                | "resources/unsubscribe"
        )
    {
        return method_not_found(&id, &method, true);
    }
    if method == "initialize" {
        if in_batch {
            return Outcome::err(
                StatusCode::BAD_REQUEST,
                p::error(
                    id,
                    p::INVALID_REQUEST,
                    "initialize cannot be part of a batch",
                ),
            );
        }
        return initialize(node, req, id, &params, minted);
    }

    // Legacy session bookkeeping: refresh, recover a stale id, refuse a DELETEd one.
    let now = Instant::now();
    if let Some(s) = &req.session {
        match node.mcp.sessions.touch(s, now, p::LEGACY_DEFAULT) {
            Lookup::Retired => return Outcome::err(StatusCode::NOT_FOUND, terminated(id)),
            Lookup::Recovered => {
                tracing::info!(source = "mcp", session = %s, method = %method, "recovered a stale protocol session");
                enforce_cap(node);
            }
            Lookup::Live => {}
        }
        bind(node, s, req.tuic_session.as_deref(), now);
    }
    let session_version = req
        .session
        .as_deref()
        .and_then(|s| node.mcp.sessions.with(s, |x| x.protocol_version));
    // The revision is re-read per request: header, else _meta, else the session's.
    let version = req
        .version_header
        .as_deref()
        .or_else(|| p::meta_version(&params))
        .or(session_version);
    let modern = version == Some(p::MODERN);
    let ctx = call_ctx(node, req, headers, &params);

    match method.as_str() {
        "ping" => Outcome::ok(p::result(id, json!({}))),
        "server/discover" => Outcome::ok(p::result(id, discover(node, &ctx))),
        "tools/list" => {
            let cfg = node.config();
            let mut r = json!({"tools": node.mcp.registry.list(&cfg, ctx.collapsed(&cfg))});
            if modern {
                cache_envelope(&mut r);
            }
            Outcome::ok(p::result(id, r))
        }
        "tools/call" if req.sse && !in_batch && ctx.progress_token.is_some() => {
            streamed_call(node, ctx, id, params, modern).await
        }
        "tools/call" => tools_call(node, &ctx, id, &params, modern).await,
        "subscriptions/listen" if stateless && !in_batch => Outcome {
            status: StatusCode::OK,
            body: None,
            listen: Some(params.get("notifications").cloned().unwrap_or(json!({}))),
            stream: None,
        },
        _ => match super::features::dispatch(node, &ctx, &method, &params).await {
            Some(Ok(mut v)) => {
                if modern {
                    // 2026-07-28: the listings and reads are cacheable results; every result
                    // says it is complete.
                    if super::features::cacheable(&method) {
                        cache_envelope(&mut v);
                    } else {
                        v["resultType"] = json!("complete");
                    }
                }
                Outcome::ok(p::result(id, v))
            }
            Some(Err(e)) => Outcome::ok(p::error(id, e.code, e.message)),
            None => method_not_found(&id, &method, stateless),
        },
    }
}

fn terminated(id: Value) -> Value {
    p::error(
        id,
        p::INVALID_REQUEST,
        "this MCP session was terminated (DELETE /mcp); send initialize to start a new one",
    )
}

fn method_not_found(id: &Value, method: &str, modern: bool) -> Outcome {
    // The stateless revision answers an unknown method with HTTP 404.
    let status = if modern {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::OK
    };
    Outcome::err(
        status,
        p::error(
            id.clone(),
            p::METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        ),
    )
}

/// SEP-2243/2575 checks on a stateless request: `Mcp-Method`/`Mcp-Name` match the body,
/// `_meta` carries revision and capabilities, and the revision header matches `_meta`.
fn check_modern(
    req: &Req,
    headers: &HeaderMap,
    id: &Value,
    method: &str,
    params: &Map<String, Value>,
) -> Result<(), Outcome> {
    let mismatch = |msg: String| {
        Outcome::err(
            StatusCode::BAD_REQUEST,
            p::error(id.clone(), p::HEADER_MISMATCH, msg),
        )
    };
    match header(headers, METHOD_HEADER) {
        Some(m) if m == method => {}
        Some(m) => {
            return Err(mismatch(format!(
                "Mcp-Method {m} does not match method {method}"
            )));
        }
        None => return Err(mismatch("Mcp-Method header is required".into())),
    }
    if let Some(name) = p::call_name(method, params) {
        match header(headers, NAME_HEADER) {
            Some(n) if n == name => {}
            Some(n) => return Err(mismatch(format!("Mcp-Name {n} does not match {name}"))),
            None => return Err(mismatch("Mcp-Name header is required".into())),
        }
    }
    if let Err(e) = p::check_stateless_meta(params) {
        return Err(Outcome::err(
            StatusCode::BAD_REQUEST,
            p::error(id.clone(), p::INVALID_PARAMS, e),
        ));
    }
    let meta = p::meta_version(params).unwrap_or_default();
    if req.version_header.as_deref() != Some(meta) {
        return Err(mismatch(format!(
            "MCP-Protocol-Version header {:?} does not match params._meta protocolVersion {meta}",
            req.version_header
        )));
    }
    if !p::SUPPORTED.contains(&meta) {
        return Err(Outcome::err(
            StatusCode::BAD_REQUEST,
            p::error_with(
                id.clone(),
                p::INVALID_PARAMS,
                format!("unsupported protocol version {meta}"),
                json!({"supported": p::SUPPORTED, "requested": meta}),
            ),
        ));
    }
    Ok(())
}

async fn tools_call(
    node: &Arc<Node>,
    ctx: &CallCtx,
    id: Value,
    params: &Map<String, Value>,
    modern: bool,
) -> Outcome {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Outcome::ok(p::error(
            id,
            p::INVALID_PARAMS,
            "tools/call needs params.name",
        ));
    };
    let args = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            return Outcome::ok(p::error(
                id,
                p::INVALID_PARAMS,
                "params.arguments must be an object",
            ));
        }
    };
    let action = args
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let started = Instant::now();
    // The call's span names its protocol session: the node's own log lines emitted while
    // serving it also go to that session as `notifications/message` (`features::logging`).
    let span = match ctx.mcp_session.as_deref() {
        Some(sid) => tracing::info_span!("mcp_call", mcp_session = %sid, tool = %name),
        None => tracing::Span::none(),
    };
    let (r, passthrough) =
        match tracing::Instrument::instrument(node.mcp.registry.call(node, ctx, name, args), span)
            .await
        {
            Err(e) => return Outcome::ok(p::error(id, p::INVALID_PARAMS, e)),
            Ok(r) => r,
        };
    super::features::logging::tool_called(
        node,
        ctx,
        name,
        &action,
        started.elapsed().as_millis() as u64,
        r.as_ref().err().map(|e| e.code),
    );
    // An upstream-style value that already is a CallToolResult becomes the result unchanged;
    // a malformed one falls back to the compact JSON text envelope below.
    if passthrough
        && let Ok(Answer::Value(v)) = &r
        && v.get("content").is_some_and(Value::is_array)
    {
        let mut result = v.clone();
        if modern {
            result["resultType"] = json!("complete");
        }
        return Outcome::ok(p::result(id, result));
    }
    let (text, is_error) = match r {
        Ok(Answer::Json(s)) => (s, false),
        Ok(Answer::Value(v)) => (v.to_string(), false),
        Err(e) => {
            tracing::debug!(source = "mcp", tool = name, action = %action, code = e.code, "tool error");
            (e.to_json().to_string(), true)
        }
    };
    // Native values travel as compact JSON text in the content envelope.
    Outcome::rendered(render_tool_text(&id, &text, is_error, modern))
}

/// The JSON-RPC answer `{"jsonrpc","id","result":{"content":[{"type":"text","text":…}],
/// "isError"[,"resultType"]}}` around `json`, a value's compact JSON text as serde_json writes
/// it. That text holds no raw control characters (serde_json escapes them inside its strings
/// and writes no whitespace), so only `"` and `\` need escaping: a `memchr2` scan copies the
/// runs between them.
fn render_tool_text(id: &Value, json: &str, is_error: bool, modern: bool) -> String {
    let mut out = Vec::with_capacity(json.len() + json.len() / 8 + 128);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    // Writing into a Vec cannot fail; a Value always serializes.
    let _ = serde_json::to_writer(&mut out, id);
    out.extend_from_slice(br#","result":{"content":[{"type":"text","text":""#);
    let bytes = json.as_bytes();
    debug_assert!(
        !bytes.iter().any(|b| *b < 0x20),
        "compact JSON text expected"
    );
    let mut start = 0;
    for i in memchr::memchr2_iter(b'"', b'\\', bytes) {
        out.extend_from_slice(&bytes[start..i]);
        out.push(b'\\');
        out.push(bytes[i]);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.extend_from_slice(br#""}],"isError":"#);
    out.extend_from_slice(if is_error { b"true" } else { b"false" });
    if modern {
        out.extend_from_slice(br#","resultType":"complete""#);
    }
    out.extend_from_slice(b"}}");
    // Both parts are valid UTF-8 (serde_json output, ASCII framing).
    String::from_utf8(out).unwrap_or_default()
}

/// `DELETE /mcp`: ends a protocol session; the id answers 404 afterwards.
pub(crate) async fn delete(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    if !node.config().mcp_server_enabled {
        return disabled();
    }
    let Some(sid) = header(&headers, SESSION_HEADER) else {
        return ApiError::bad_request("DELETE /mcp needs an Mcp-Session-Id header").into_response();
    };
    if let Some(retired) = node.mcp.sessions.end(sid) {
        tracing::info!(source = "mcp", session = %sid, "mcp session deleted");
        crate::mail::evict_peers_for_reaped_mcp_session(&node.mail, retired.as_slice());
        crate::mail::forget_pending(&node.mail, &[sid.to_owned()]);
        (StatusCode::OK, axum::Json(json!({"ok": true}))).into_response()
    } else {
        ApiError::not_found("no such MCP session").into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass rendering equals building the envelope as a `Value` and serializing it.
    #[test]
    fn tool_text_renders_like_the_value_envelope() {
        let tricky = json!({
            "quote": "say \"hi\"", "back": "C:\\dir\\", "lines": "a\nb\r\tc\u{1}\u{1f}",
            "unicode": "héllo ✓ 日本 \u{2028}", "nested": {"arr": [1, -2.5, null, true, "x"]},
            "empty": "", "esc_seq": "\\n is not a newline"
        });
        for (id, value, is_error, modern) in [
            (json!(1), tricky.clone(), false, false),
            (json!("req-\"7\""), tricky.clone(), true, true),
            (Value::Null, json!([]), false, true),
            (json!(u64::MAX), json!("plain string"), false, false),
        ] {
            let text = render_tool_text(&id, &value.to_string(), is_error, modern);
            let got: Value = serde_json::from_str(&text).expect("valid JSON");
            let mut result = json!({
                "content": [{"type": "text", "text": value.to_string()}],
                "isError": is_error,
            });
            if modern {
                result["resultType"] = json!("complete");
            }
            assert_eq!(got, p::result(id, result), "{text}");
            // The embedded text is exactly the value's compact JSON.
            assert_eq!(
                got["result"]["content"][0]["text"].as_str().unwrap(),
                value.to_string()
            );
        }
    }
}
