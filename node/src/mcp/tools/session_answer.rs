//! `session action=answer`: an MCP client answers an ACP connection's held permission request
//! (the same first-answer-wins rule as `POST /acp/connections/{id}/interactions/{rid}`). It
//! maps the ACP service's refusals onto tool errors; it holds no state.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::acp::AcpError;
use crate::args;
use crate::mcp::registry::{CallCtx, ToolError};
use crate::state::Node;

/// `answer`'s arguments.
#[derive(Debug, Deserialize)]
pub(super) struct AnswerArgs {
    /// The ACP connection id.
    #[serde(default, deserialize_with = "args::string")]
    session_id: Option<String>,
    /// The held request (`request_id` of its permission frame or interaction).
    #[serde(default, deserialize_with = "args::string")]
    request_id: Option<String>,
    /// One of the request's options.
    #[serde(default, deserialize_with = "args::string")]
    option_id: Option<String>,
}

fn required<'a>(v: &'a Option<String>, what: &str) -> Result<&'a str, ToolError> {
    v.as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ToolError::invalid(format!("{what} is required")))
}

/// Answers as the caller (`mcp:<identity>`, else `mcp:<protocol session>`): that name is what
/// a later answer's refusal shows.
pub(super) fn answer(node: &Arc<Node>, ctx: &CallCtx, a: AnswerArgs) -> Result<Value, ToolError> {
    let id = required(&a.session_id, "session_id (the ACP connection id)")?;
    let rid = required(&a.request_id, "request_id")?;
    let option = required(&a.option_id, "option_id")?;
    let by = format!(
        "mcp:{}",
        ctx.tuic_session
            .as_deref()
            .or(ctx.mcp_session.as_deref())
            .unwrap_or("anonymous")
    );
    let conn = node.acp.get(id).map_err(refusal)?;
    let settled = conn.answer(rid, option, &by).map_err(refusal)?;
    Ok(json!(settled))
}

/// The REST route's codes: `already_answered` is its 409 and names who answered.
fn refusal(e: AcpError) -> ToolError {
    let msg = e.to_string();
    match e {
        AcpError::UnknownConnection(id) => {
            ToolError::new("unknown_connection", msg).with("session_id", json!(id))
        }
        AcpError::Answered { by, .. } => {
            ToolError::new("already_answered", msg).with("answered_by", json!(by))
        }
        AcpError::UnknownRequest(_) => ToolError::new("unknown_request", msg),
        _ => ToolError::invalid(msg),
    }
}
