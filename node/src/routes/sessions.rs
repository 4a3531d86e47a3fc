//! Session routes: list, create, write, resize, rename, delete, output, raw ring, terminal
//! grid queries, and raw capture diagnostics. The live stream is `stream.rs`.
//!
//! Every `{id}` accepts any of the three addresses (PTY id, `tuic_session`, alias). Output,
//! raw-ring and terminal routes keep answering for an exited session during its tombstone
//! period; write and resize need a live process. Session logic lives in `crate::session`.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::routes::JsonBody;
use crate::session::drive::{DriveError, InputRequest, SubmitRequest};
use crate::session::output::{self, OutputQuery};
use crate::session::{CreateError, CreateRequest, Session, SessionError};
use crate::state::Node;

/// The session route group.
pub(super) fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/sessions", get(super::sessions_list::list).post(create))
        .route("/sessions/agent", post(launch_agent))
        .route("/sessions/{id}", get(row).delete(delete))
        .route("/sessions/{id}/write", post(write))
        .route("/sessions/{id}/input", post(input))
        .route("/sessions/{id}/submit", post(submit))
        .route("/sessions/{id}/resize", post(resize))
        .route("/sessions/{id}/name", axum::routing::put(rename))
        .route("/sessions/{id}/output", get(output))
        .route("/sessions/{id}/raw-ring", get(raw_ring))
        .route("/sessions/{id}/stderr", get(stderr))
        .route("/sessions/{id}/prompt-receipt", get(prompt_receipt))
        .route("/sessions/{id}/terminal/scroll-info", get(scroll_info))
        .route("/sessions/{id}/terminal/lines", get(lines))
        .route("/sessions/{id}/terminal/snapshot", get(snapshot))
        .route(
            "/sessions/{id}/terminal/scroll-to-offset",
            post(scroll_to_offset),
        )
        .route("/sessions/{id}/stream", get(super::stream::ws))
        .route(
            "/diagnostics/capture",
            get(capture_status).post(capture_set),
        )
}

fn unknown(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_session",
        format!("unknown session {id}"),
    )
}

/// A live session or one in its tombstone period.
pub(super) fn find(node: &Node, id: &str) -> Result<Arc<Session>, ApiError> {
    node.sessions.resolve(id).ok_or_else(|| unknown(id))
}

fn session_error(e: SessionError) -> ApiError {
    match e {
        SessionError::Exited { .. } => {
            ApiError::new(StatusCode::CONFLICT, "session_exited", e.to_string())
        }
        SessionError::Io(m) => ApiError::internal(m),
        SessionError::Size(e) => size_error(e),
    }
}

/// A size over the caps (400 `size_limit`) or the node's cell budget (503 `cell_budget`).
fn size_error(e: crate::session::budget::SizeError) -> ApiError {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    ApiError::new(status, e.code(), e.to_string())
}

/// `GET /sessions/{id}`: one live session's row, as `GET /sessions` lists it (the hub's mirror
/// fetches just the row an event names).
async fn row(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let s = node
        .sessions
        .resolve(&id)
        .filter(|s| s.exit().is_none())
        .ok_or_else(|| unknown(&id))?;
    let n = node.clone();
    let row = tokio::task::spawn_blocking(move || n.sessions.placed_row(&s))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(json!(row)))
}

/// The `POST /sessions` body: the flat [`CreateRequest`], or the desktop transport's
/// `{config: CreateRequest}` (`invoke("create_pty", {config})`); nothing else beside `config`.
fn create_body(body: Value) -> Result<CreateRequest, ApiError> {
    let inner = match body {
        Value::Object(mut m) if m.contains_key("config") => {
            let config = m.remove("config").unwrap_or(Value::Null);
            if let Some(k) = m.keys().next() {
                return Err(ApiError::bad_request(format!(
                    "{k} is not allowed beside config: put it inside config"
                )));
            }
            config
        }
        other => other,
    };
    serde_json::from_value(inner).map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_request",
            format!("session config: {e}"),
        )
    })
}

/// `POST /sessions/agent`: `agent action=spawn` over HTTP (the same typed arguments and
/// launch semantics, `mail::launch`); the caller has no peer identity, so the child reports to
/// nobody by mail (the answer's `warning` says so).
async fn launch_agent(
    State(node): State<Arc<Node>>,
    JsonBody(args): JsonBody<crate::mail::launch::SpawnArgs>,
) -> Result<Json<Value>, ApiError> {
    let req = crate::mail::spawn::SpawnRequest::from_args(args);
    let n = node.clone();
    tokio::task::spawn_blocking(move || crate::mail::spawn::spawn_checked(&n.mail, req))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map(Json)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.code, e.message))
}

async fn create(
    State(node): State<Arc<Node>>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let req = create_body(body)?;
    let n = node.clone();
    let s = tokio::task::spawn_blocking(move || n.sessions.create(req))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| match e {
            CreateError::Invalid(m) => ApiError::bad_request(m),
            CreateError::Size(e) => size_error(e),
            CreateError::Spawn(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "spawn_failed", e.to_string())
            }
        })?;
    let mut v = json!({"session_id": s.id, "tuic_session": s.tuic_session});
    if !s.alias.is_empty() {
        v["alias"] = json!(s.alias);
    }
    Ok(Json(v))
}

#[derive(Debug, Deserialize)]
struct WriteBody {
    data: String,
}

async fn write(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    who: Option<axum::Extension<crate::audit::Actor>>,
    JsonBody(body): JsonBody<WriteBody>,
) -> Result<Json<Value>, ApiError> {
    let s = find(&node, &id)?;
    let cap = node.sessions.capture.clone();
    let (sid, bytes) = (s.id.clone(), body.data.len());
    tokio::task::spawn_blocking(move || s.write(body.data.as_bytes(), &cap))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(session_error)?;
    audit_input(&node, who, &sid, bytes).await;
    Ok(Json(json!({"ok": true})))
}

/// Audits input a remote client wrote (who, session, byte count — never the bytes). Local
/// (IPC) input is an agent's or the CLI's on this machine and is not audited.
async fn audit_input(
    node: &Arc<Node>,
    who: Option<axum::Extension<crate::audit::Actor>>,
    session: &str,
    bytes: usize,
) {
    let who = super::audit::actor(who);
    if who.is_remote() {
        super::audit::record(
            node,
            crate::audit::Event::new("input", &who)
                .session(session)
                .with("bytes", bytes),
        )
        .await;
    }
}

/// The REST form of the drive service's error: a status, and the same JSON object an MCP
/// caller gets (`{...fields, error, code}`).
fn drive_error(e: DriveError) -> Response {
    let status = match e {
        DriveError::Unknown(_) => StatusCode::NOT_FOUND,
        DriveError::Exited { .. } | DriveError::Busy { .. } => StatusCode::CONFLICT,
        DriveError::Pty { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        DriveError::Invalid(_) => StatusCode::BAD_REQUEST,
    };
    let mut body = e.fields();
    body.insert("error".into(), json!(e.to_string()));
    body.insert("code".into(), json!(e.code()));
    (status, Json(Value::Object(body))).into_response()
}

/// The body of `POST /sessions/{id}/input|submit`: the MCP `session` arguments (the path
/// names the session).
fn drive_args(body: Value) -> Result<serde_json::Map<String, Value>, ApiError> {
    match body {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad_request("the body must be a JSON object")),
    }
}

/// `POST /sessions/{id}/input`: the drive service's `Session::input` (agent-aware framing), as
/// REST so a hub can route the `session` tool's `input` to the owner. Errors are the MCP
/// error objects.
async fn input(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> Response {
    let args = match drive_args(body) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let served = tokio::task::spawn_blocking(move || {
        let s = node.sessions.drivable(&id)?;
        let req = InputRequest::from_args(&args)?;
        s.input(&req, &node.sessions.capture)?;
        if let Some(d) = req.description {
            node.sessions.describe(&s, d);
        }
        Ok(json!({"ok": true, "session_id": s.id}))
    })
    .await;
    match served {
        Ok(Ok(v)) => Json(v).into_response(),
        Ok(Err(e)) => drive_error(e),
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}

/// `POST /sessions/{id}/submit`: the drive service's `Session::submit` (the semantic submit
/// with its receipt), as REST for the same reason as `input`.
async fn submit(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> Response {
    let args = match drive_args(body) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    // Its own task, so a panic answers 500 as every other route's does.
    let served = tokio::spawn(async move {
        let s = node.sessions.drivable(&id)?;
        let req = SubmitRequest::from_args(&args)?;
        let receipt = s.submit(&req, &node.sessions.capture).await?;
        if let Some(d) = req.description {
            node.sessions.describe(&s, d);
        }
        Ok(receipt)
    })
    .await;
    match served {
        Ok(Ok(receipt)) => Json(json!(receipt)).into_response(),
        Ok(Err(e)) => drive_error(e),
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}

#[derive(Debug, Deserialize)]
struct ResizeBody {
    rows: u16,
    cols: u16,
}

async fn resize(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<ResizeBody>,
) -> Result<Json<Value>, ApiError> {
    let s = find(&node, &id)?;
    s.resize(b.rows, b.cols).map_err(session_error)?;
    Ok(Json(json!({"ok": true})))
}

#[derive(Debug, Deserialize)]
struct NameBody {
    name: String,
}

async fn rename(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<NameBody>,
) -> Result<Json<Value>, ApiError> {
    let s = node.sessions.live(&id).ok_or_else(|| unknown(&id))?;
    node.sessions
        .rename(&s, b.name)
        .map_err(ApiError::bad_request)?;
    Ok(Json(json!({"ok": true})))
}

async fn delete(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    find(&node, &id)?.close();
    Ok(Json(json!({"ok": true})))
}

async fn output(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    Query(q): Query<OutputQuery>,
) -> Result<Json<Value>, ApiError> {
    let s = find(&node, &id)?;
    // Redaction scans the whole retained context: keep it off the async workers.
    let v = tokio::task::spawn_blocking(move || output::render(&s, &q))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::bad_request(e.0))?;
    Ok(Json(v))
}

async fn raw_ring(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let s = find(&node, &id)?;
    let (ring, total) = {
        let st = s.stream();
        (st.ring(), st.total())
    };
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (
                header::HeaderName::from_static("x-total-written"),
                total.to_string(),
            ),
        ],
        Bytes::from(ring),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StderrQuery {
    #[serde(default)]
    from_byte: u64,
}

/// The program's stderr of a session created with `separate_stderr`, from `from_byte` (at
/// most 1 MiB per answer): `x-next-byte` is where to ask next, `x-stderr-complete: true` once
/// the session has exited and nothing is left to read.
async fn stderr(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    Query(q): Query<StderrQuery>,
) -> Result<Response, ApiError> {
    let s = find(&node, &id)?;
    let Some(file) = s.stderr_file().map(ToOwned::to_owned) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_stderr",
            format!(
                "session {id} was not created with separate_stderr: its stderr is on its terminal"
            ),
        ));
    };
    // Read the exit before the file: every byte the program wrote is in the file by then.
    let exited = s.exit().is_some();
    let from = q.from_byte;
    let (bytes, len) =
        tokio::task::spawn_blocking(move || crate::session::stderr::read_from(&file, from))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::internal(format!("reading the stderr file: {e}")))?;
    if from > len {
        return Err(ApiError::bad_request(format!(
            "from_byte {from} is past the {len} bytes written"
        )));
    }
    let next = from + bytes.len() as u64;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (
                header::HeaderName::from_static("x-next-byte"),
                next.to_string(),
            ),
            (
                header::HeaderName::from_static("x-stderr-complete"),
                (exited && next == len).to_string(),
            ),
        ],
        Bytes::from(bytes),
    )
        .into_response())
}

/// The launch receipt (`crate::mail::receipt`).
async fn prompt_receipt(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let s = find(&node, &id)?;
    Ok(Json(crate::mail::receipt::read(
        &node.mail,
        &s.id,
        &s.tuic_session,
    )))
}

async fn scroll_info(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let s = find(&node, &id)?;
    let info = s.screen().grid.scroll_info();
    let mut v = json!(info);
    if let Some(c) = s.exit().and_then(|e| e.code) {
        v["exit_code"] = json!(c);
    }
    Ok(Json(v))
}

#[derive(Debug, Deserialize)]
struct LinesQuery {
    start: Option<usize>,
    end: Option<usize>,
}

async fn lines(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    Query(q): Query<LinesQuery>,
) -> Result<Json<Value>, ApiError> {
    let s = find(&node, &id)?;
    let (lines, total) = {
        let scr = s.screen();
        let total = scr.grid.scroll_info().total_lines;
        let start = q.start.unwrap_or(0);
        let end = q.end.unwrap_or(total);
        if end < start {
            return Err(ApiError::bad_request("end must not be before start"));
        }
        (scr.grid.lines(start, end), total)
    };
    let mut v = json!({"lines": lines, "total_lines": total});
    if let Some(c) = s.exit().and_then(|e| e.code) {
        v["exit_code"] = json!(c);
    }
    Ok(Json(v))
}

/// `GET /sessions/{id}/terminal/snapshot`: the visible screen as the escape sequences that
/// redraw it, with the raw stream offset it reflects, so a client paints it and then streams
/// `from_byte=offset` with no gap and no repeat (`tuic attach`). A person's view: like the
/// live stream it is not redacted (see docs/http-api.md, "Redaction").
async fn snapshot(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let s = find(&node, &id)?;
    let exit = s.exit();
    let v = tokio::task::spawn_blocking(move || {
        let scr = s.screen();
        let (rows, cols) = scr.grid.size();
        let (row, col, visible) = scr.grid.cursor();
        json!({
            "ansi": scr.grid.render_ansi(),
            "offset": scr.fed(),
            "rows": rows,
            "cols": cols,
            "cursor": {"row": row, "col": col, "visible": visible},
            "alt_screen": scr.grid.alt_screen(),
        })
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut v = v;
    if let Some(e) = exit {
        v["exited"] = json!(true);
        if let Some(c) = e.code {
            v["exit_code"] = json!(c);
        }
    }
    Ok(Json(v))
}

#[derive(Debug, Deserialize)]
struct OffsetBody {
    offset: usize,
}

async fn scroll_to_offset(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<OffsetBody>,
) -> Result<Json<Value>, ApiError> {
    let s = find(&node, &id)?;
    s.screen().grid.scroll_to_offset(b.offset);
    Ok(Json(json!({"ok": true})))
}

async fn capture_status(State(node): State<Arc<Node>>) -> Json<Value> {
    Json(json!(node.sessions.capture.status()))
}

#[derive(Debug, Deserialize)]
struct CaptureBody {
    enabled: bool,
    session_id: Option<String>,
}

async fn capture_set(
    State(node): State<Arc<Node>>,
    JsonBody(b): JsonBody<CaptureBody>,
) -> Result<Json<Value>, ApiError> {
    // A capture filter names the live PTY id whatever address the caller used.
    let filter = b
        .session_id
        .map(|r| node.sessions.resolve(&r).map_or(r, |s| s.id.clone()));
    let cap = node.sessions.capture.clone();
    tokio::task::spawn_blocking(move || cap.set(b.enabled, filter))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "capture_unavailable", e))?;
    Ok(Json(json!(node.sessions.capture.status())))
}
