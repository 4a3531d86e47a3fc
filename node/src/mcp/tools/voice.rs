//! `voice`: hands-free voice. Always listed, so a model reads one contract on every build; a
//! headless node has no audio, so `status` answers `available: false` with a reason — after
//! the binding check, because the fields alone say what somebody's conversation is doing.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::mcp::registry::{CallCtx, ToolDef, ToolError, action, schema};
use crate::state::Node;

const ACTIONS: &[&str] = &["status", "speak", "listen"];

pub(super) static TOOL: ToolDef = ToolDef {
    name: "voice",
    summary: "Hands-free voice for the calling terminal (unavailable headless)",
    description: "Hands-free voice for your own terminal. The language and the voice come from the user's dictation settings; you cannot choose them.\n\
- status: whether hands-free is armed for this terminal, and the language (available:false with a reason when it cannot be).\n\
- speak (text, turn?, utterance_id?): speak a reply.\n\
- listen (turn?): wait for the user's next utterance.\n\
Notices arrive as terminal input: a mode entry notice when hands-free starts and a final exit notice when it ends; obey the exit notice. The user can turn the notices off, so their absence proves nothing: ask status.",
    actions: ACTIONS,
    schema: || {
        schema(
            ACTIONS,
            json!({"text": {"type": "string"}, "turn": {"type": "integer"}, "utterance_id": {"type": "string"}}),
        )
    },
    handler,
    exec: &[],
    passthrough: false,
};

fn handler(_: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let a = action("voice", ACTIONS, args)?;
    // The binding check comes first: an unbound connection learns nothing.
    if ctx.tuic_session.is_none() {
        return Err(ToolError::new(
            "not_bound",
            "voice is bound to the calling terminal: this connection has no TUIC session (start the agent from a TUIC terminal so TUIC_SESSION binds it)",
        ));
    }
    match a {
        "status" => Ok(json!({
            "available": false,
            "reason": "this is a headless node: it has no audio capture or playback",
        })),
        _ => Err(ToolError::new(
            "unavailable",
            format!(
                "voice action={a}: hands-free voice is unavailable on a headless node (no audio)"
            ),
        )),
    }
}
