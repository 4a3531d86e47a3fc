//! HTTP adapters of the story service: `POST /stories/action`, `GET /stories/capabilities`,
//! `POST /workflows/definition/action`, `POST /workflows/run/action`. Each resolves the
//! caller's authority from the transport (never from the body), runs the service on the
//! blocking pool and maps its typed error to a status. A hub relaying an IPC caller's action
//! sends [`FORWARDED_ACTOR_HEADER`]`: local_api`, which can only lower the authority its token
//! carries (`human`), never raise it.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::guard::Transport;
use crate::state::Node;
use crate::stories::{Actor, StoryAction, StoryError};

/// The story and workflow routes, merged into the node's router.
pub fn routes() -> axum::Router<Arc<Node>> {
    axum::Router::new()
        .route("/stories/action", post(story_action))
        .route("/stories/capabilities", get(capabilities))
        .route("/workflows/definition/action", post(definition_action))
        .route("/workflows/run/action", post(run_action))
}

/// `GET /stories/capabilities`: `true`, without opening anything (a backend probe).
async fn capabilities() -> Json<Value> {
    Json(Value::Bool(true))
}

/// A relaying hub's statement that its own caller was `local_api` (the only value).
pub const FORWARDED_ACTOR_HEADER: &str = "x-tuic-actor";

/// The authority a relaying hub asked for: `true` lowers a `human` caller to `local_api`.
fn forwarded_local(headers: &HeaderMap) -> Result<bool, ApiError> {
    match headers.get(FORWARDED_ACTOR_HEADER).map(|v| v.to_str()) {
        None => Ok(false),
        Some(Ok("local_api")) => Ok(true),
        Some(_) => Err(ApiError::bad_request(format!(
            "{FORWARDED_ACTOR_HEADER} takes only local_api"
        ))),
    }
}

/// The common body: `{input, project_path? | repoPath?, sessionId? | session_id?}`.
pub(crate) struct Envelope {
    pub input: Value,
    pub project: Option<String>,
    pub session: Option<String>,
}

pub(crate) fn envelope(body: &Bytes) -> Result<Envelope, ApiError> {
    let mut m: Map<String, Value> = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return Err(ApiError::bad_request("the body must be a JSON object")),
        Err(e) => return Err(ApiError::bad_request(format!("the body is not JSON: {e}"))),
    };
    let input = m
        .remove("input")
        .ok_or_else(|| ApiError::bad_request("input is required: {input: {action: ...}}"))?;
    let take = |m: &mut Map<String, Value>, keys: &[&str]| {
        keys.iter()
            .find_map(|k| m.remove(*k))
            .and_then(|v| v.as_str().map(str::to_owned))
    };
    let project = take(
        &mut m,
        &["project_path", "projectPath", "repoPath", "repo_path"],
    );
    let session = take(&mut m, &["sessionId", "session_id"]);
    if let Some(k) = m.keys().next() {
        return Err(ApiError::bad_request(format!(
            "unknown field {k}: the body is {{input, project_path?, sessionId?}}"
        )));
    }
    Ok(Envelope {
        input,
        project,
        session,
    })
}

fn caller(
    node: &Node,
    transport: Option<Transport>,
    env: &Envelope,
    lowered: bool,
) -> Result<(String, Actor), StoryError> {
    let (project, actor) = crate::stories::http_caller(
        &node.planning,
        transport,
        env.project.as_deref(),
        env.session.as_deref(),
    )?;
    let actor = match actor {
        Actor::Human if lowered => Actor::LocalApi,
        a => a,
    };
    Ok((project, actor))
}

async fn blocking(
    f: impl FnOnce() -> Result<Value, StoryError> + Send + 'static,
) -> Result<Json<Value>, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map(Json)
        .map_err(|e| to_api(&e))
}

async fn story_action(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let lowered = forwarded_local(&headers)?;
    let env = envelope(&body)?;
    let transport = transport.map(|t| t.0);
    blocking(move || {
        let action = StoryAction::from_value(&env.input)?;
        let (project, actor) = caller(&node, transport, &env, lowered)?;
        node.stories.execute(
            &crate::stories::service::Ctx {
                project,
                actor,
                now_ms: crate::logs::now_ms(),
            },
            action,
        )
    })
    .await
}

async fn definition_action(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let lowered = forwarded_local(&headers)?;
    let env = envelope(&body)?;
    let transport = transport.map(|t| t.0);
    blocking(move || {
        let (project, actor) = caller(&node, transport, &env, lowered)?;
        crate::stories::workflow::definition_action(&node.planning, &project, &actor, &env.input)
    })
    .await
}

async fn run_action(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let lowered = forwarded_local(&headers)?;
    let env = envelope(&body)?;
    let transport = transport.map(|t| t.0);
    blocking(move || {
        let (project, actor) = caller(&node, transport, &env, lowered)?;
        crate::stories::workflow::run_action(&node.planning, &project, &actor, &env.input)
    })
    .await
}

/// The HTTP status of a story error.
fn status(e: &StoryError) -> StatusCode {
    use StoryError as E;
    match e {
        E::Invalid(_) | E::NoProject(_) => StatusCode::BAD_REQUEST,
        E::NotFound(_) | E::UnknownRecord { .. } => StatusCode::NOT_FOUND,
        E::StaleRevision { .. }
        | E::Cycle { .. }
        | E::IdempotencyConflict { .. }
        | E::Transition(_) => StatusCode::CONFLICT,
        E::Forbidden { .. } | E::NotIndependent { .. } => StatusCode::FORBIDDEN,
        E::Unavailable(_) => StatusCode::NOT_IMPLEMENTED,
        E::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The HTTP form of a story error.
fn to_api(e: &StoryError) -> ApiError {
    ApiError::new(status(e), e.code(), e.to_string())
}
