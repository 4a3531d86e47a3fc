//! The event streams of the transport: `GET /mcp` (the session's notification stream), a
//! `tools/call` answered as SSE (progress, then the result), and `subscriptions/listen`.

use super::*;

/// `subscriptions/listen` (2026-07-28): an event stream whose first message acknowledges the
/// subscription; afterwards `notifications/tools/list_changed`, tagged with the subscription id,
/// when the client asked for `toolsListChanged` (the only change tuic announces).
pub(super) fn listen(node: &Arc<Node>, filter: Value) -> Response {
    let id = uuid::Uuid::new_v4().to_string();
    let meta = json!({"io.modelcontextprotocol/subscriptionId": id});
    let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": meta.clone()}});
    let wants_tools = filter.get("toolsListChanged").and_then(Value::as_bool) == Some(true);
    let changes = tokio_stream::wrappers::BroadcastStream::new(node.mcp.changes.subscribe());
    let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
        "params": {"_meta": meta}});
    let stop = node.shutdown.clone().cancelled_owned();
    let stream = futures::stream::once(async move { ack })
        .chain(
            changes
                .filter(move |_| std::future::ready(wants_tools))
                .map(move |_| note.clone()),
        )
        .map(|v| {
            Ok::<_, std::convert::Infallible>(
                SseEvent::default().event("message").data(v.to_string()),
            )
        })
        .take_until(stop);
    let keepalive = Duration::from_millis(node.config().tuning.sse_keepalive_ms.max(1000));
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(keepalive))
        .into_response()
}

/// Whether `Accept` names `text/event-stream` itself (not only through `*/*` or no header: a
/// plain client keeps getting JSON).
pub(super) fn names_event_stream(headers: &HeaderMap) -> bool {
    let values = || {
        headers
            .get_all(ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
    };
    values().any(|v| v.to_ascii_lowercase().contains("text/event-stream"))
        && p::accepts_sse(values())
}

/// A `tools/call` with a progress token from a client that reads event streams: the call runs
/// inside the response's stream, its progress (routed here by
/// [`crate::mcp::features::streams::progress_out`]) is written as it comes, then the result, then
/// the stream ends. A dropped response cancels the call, as a dropped JSON request does.
pub(super) async fn streamed_call(
    node: &Arc<Node>,
    ctx: CallCtx,
    id: Value,
    params: Map<String, Value>,
    modern: bool,
) -> Outcome {
    let token = ctx.progress_token.clone().unwrap_or(Value::Null);
    let Some((route, rx)) =
        crate::mcp::features::streams::open(node, ctx.mcp_session.as_deref(), &token)
    else {
        // The same token is in use by a running call of this session: plain JSON.
        return tools_call(node, &ctx, id, &params, modern).await;
    };
    let n = node.clone();
    let call = async move {
        let out = tools_call(&n, &ctx, id, &params, modern).await;
        // The route goes before the result is written: nothing queues behind it.
        drop(route);
        out.body.unwrap_or_default()
    };
    enum St {
        Running(
            futures::future::BoxFuture<'static, String>,
            tokio::sync::mpsc::Receiver<String>,
        ),
        Draining(tokio::sync::mpsc::Receiver<String>, String),
        Done,
    }
    let stream = futures::stream::unfold(St::Running(Box::pin(call), rx), |st| async move {
        match st {
            St::Running(mut call, mut rx) => {
                tokio::select! {
                    biased;
                    Some(m) = rx.recv() => Some((m, St::Running(call, rx))),
                    result = &mut call => match rx.try_recv() {
                        Ok(m) => Some((m, St::Draining(rx, result))),
                        Err(_) => Some((result, St::Done)),
                    },
                }
            }
            St::Draining(mut rx, result) => match rx.try_recv() {
                Ok(m) => Some((m, St::Draining(rx, result))),
                Err(_) => Some((result, St::Done)),
            },
            St::Done => None,
        }
    });
    Outcome {
        status: StatusCode::OK,
        body: None,
        listen: None,
        stream: Some(CallStream(Box::pin(stream))),
    }
}

/// The event-stream answer of a [`streamed_call`].
pub(super) fn call_stream(node: &Arc<Node>, CallStream(stream): CallStream) -> Response {
    let keepalive = Duration::from_millis(node.config().tuning.sse_keepalive_ms.max(1000));
    Sse::new(
        stream.map(|m| {
            Ok::<_, std::convert::Infallible>(SseEvent::default().event("message").data(m))
        }),
    )
    .keep_alive(KeepAlive::new().interval(keepalive))
    .into_response()
}

/// Releases a stream's sender when the stream is dropped, only while it holds its generation.
pub(super) struct StreamGuard {
    node: Arc<Node>,
    session: String,
    generation: u64,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let released = self
            .node
            .mcp
            .sessions
            .release_stream(&self.session, self.generation);
        tracing::debug!(source = "mcp", session = %self.session, generation = self.generation, released, "mcp stream closed");
    }
}

/// `GET /mcp`: the server-notification stream of one protocol session.
pub(crate) async fn get_stream(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    if !node.config().mcp_server_enabled {
        return disabled();
    }
    let Some(sid) = header(&headers, SESSION_HEADER).map(str::to_owned) else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "session_required",
            "GET /mcp needs an Mcp-Session-Id header (send initialize first)",
        )
        .into_response();
    };
    let accept = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok());
    if !p::accepts_sse(accept) {
        return ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            "not_acceptable",
            "GET /mcp answers text/event-stream; the Accept header excludes it",
        )
        .into_response();
    }
    let (generation, rx) = node
        .mcp
        .sessions
        .subscribe(&sid, Instant::now(), p::LEGACY_DEFAULT);
    tracing::debug!(source = "mcp", session = %sid, generation, "mcp stream opened");
    enforce_cap(&node);
    let guard = StreamGuard {
        node: node.clone(),
        session: sid.clone(),
        generation,
    };
    let stop = node.shutdown.clone().cancelled_owned();
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx)
        .map(move |v| {
            let _held = &guard;
            Ok::<_, std::convert::Infallible>(
                SseEvent::default().event("message").data(v.to_string()),
            )
        })
        .take_until(stop);
    let keepalive = Duration::from_millis(node.config().tuning.sse_keepalive_ms.max(1000));
    let mut r = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(keepalive))
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&sid) {
        r.headers_mut().insert(SESSION_HEADER, v);
    }
    r
}
