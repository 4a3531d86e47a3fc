//! HTTP adapters of the progress service: `POST /progress/list?path=`, `GET /progress/projects`,
//! `POST /progress/flow`, `POST /progress/flow/detail`. Each maps the service's typed error to
//! a status; blocking work runs on the blocking pool.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::blocking;
use crate::error::ApiError;
use crate::progress::flow::{self, FlowError, Target};
use crate::progress::{ListError, ListInput};
use crate::state::Node;

/// The progress routes, merged into the node's router.
pub(crate) fn routes() -> axum::Router<Arc<Node>> {
    axum::Router::new()
        .route("/progress/list", post(list))
        .route("/progress/projects", get(projects))
        .route("/progress/flow", post(flow_summary))
        .route("/progress/flow/detail", post(flow_detail))
}

/// A JSON object body, `{}` when empty.
fn object_body(body: &Bytes) -> Result<serde_json::Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!("the body is not JSON: {e}"))),
    }
}

fn list_error(e: ListError) -> ApiError {
    match e {
        ListError::Invalid(m) => ApiError::bad_request(m),
        ListError::Journal(e) => ApiError::internal(e.to_string()),
    }
}

#[derive(Debug, Deserialize)]
struct PathQuery {
    path: Option<String>,
}

/// `POST /progress/list?path=…` with the `progress_list` input as the body (or `{input: …}`).
async fn list(
    State(node): State<Arc<Node>>,
    Query(q): Query<PathQuery>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let mut m = object_body(&body)?;
    let input = if m.len() == 1 && m.contains_key("input") {
        m.remove("input")
    } else {
        Some(Value::Object(m))
    };
    let input = ListInput::from_value(input.as_ref()).map_err(list_error)?;
    let path = q
        .path
        .ok_or_else(|| ApiError::bad_request("path is required: ?path=<repository root>"))?;
    blocking(move || node.progress.list(&path, &input).map_err(list_error))
        .await
        .map(Json)
}

/// `GET /progress/projects`: the journal's project names, most recently active first.
async fn projects(State(node): State<Arc<Node>>) -> Json<Value> {
    Json(json!({"projects": node.progress.journal.projects()}))
}

fn flow_error(e: FlowError) -> ApiError {
    let status = match &e {
        FlowError::UnknownSession(_) | FlowError::UnknownAgent { .. } => StatusCode::NOT_FOUND,
        FlowError::NotAnAgent { .. } => StatusCode::CONFLICT,
        FlowError::NoTranscript(_) => StatusCode::NOT_FOUND,
        FlowError::Invalid(_) => StatusCode::BAD_REQUEST,
    };
    let code = match &e {
        FlowError::UnknownSession(_) => "unknown_session",
        FlowError::UnknownAgent { .. } => "unknown_agent",
        FlowError::NotAnAgent { .. } => "not_an_agent_session",
        FlowError::NoTranscript(_) => "no_transcript",
        FlowError::Invalid(_) => "bad_request",
    };
    ApiError::new(status, code, e.to_string())
}

fn str_field(m: &serde_json::Map<String, Value>, k: &str) -> Result<Option<String>, ApiError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::bad_request(format!("{k} must be a string"))),
    }
}

/// The flow target of a session reference: the live (or recently exited) PTY, its detected
/// agent refreshed now, the agent process first.
fn target(node: &Node, session: &str) -> Result<Target, FlowError> {
    let s = node
        .sessions
        .resolve(session)
        .ok_or_else(|| FlowError::UnknownSession(session.to_owned()))?;
    let agent_type = if s.exit().is_none() {
        s.row().agent_type
    } else {
        s.agent().map(str::to_owned)
    };
    let mut pids: Vec<i32> = s.foreground_pid().into_iter().collect();
    if let Some(p) = s.pid.map(|p| p as i32)
        && !pids.contains(&p)
    {
        pids.push(p);
    }
    Ok(Target {
        session_id: s.id.clone(),
        cwd: s.cwd.clone(),
        agent_type,
        pids,
    })
}

fn check_keys(m: &serde_json::Map<String, Value>, allowed: &[&str]) -> Result<(), ApiError> {
    if let Some(k) = m.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiError::bad_request(format!(
            "unknown field {k}; this route takes {}",
            allowed.join(", ")
        )));
    }
    Ok(())
}

/// `POST /progress/flow {session_id}`.
async fn flow_summary(State(node): State<Arc<Node>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let m = object_body(&body)?;
    check_keys(&m, &["session_id"])?;
    let sid = str_field(&m, "session_id")?
        .ok_or_else(|| ApiError::bad_request("session_id is required (a PTY id)"))?;
    blocking(move || {
        let t = target(&node, &sid).map_err(flow_error)?;
        flow::flow(&node.progress.flow, &t).map_err(flow_error)
    })
    .await
    .map(Json)
}

/// `POST /progress/flow/detail {session_id, agent_id}`.
async fn flow_detail(State(node): State<Arc<Node>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let m = object_body(&body)?;
    check_keys(&m, &["session_id", "agent_id"])?;
    let sid = str_field(&m, "session_id")?
        .ok_or_else(|| ApiError::bad_request("session_id is required (a PTY id)"))?;
    let agent =
        str_field(&m, "agent_id")?.ok_or_else(|| ApiError::bad_request("agent_id is required"))?;
    blocking(move || {
        let t = target(&node, &sid).map_err(flow_error)?;
        flow::detail(&node.progress.flow, &t, &agent).map_err(flow_error)
    })
    .await
    .map(Json)
}
