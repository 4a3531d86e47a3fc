//! Workflow definitions and runs.

use serde_json::Value;

use super::{Actor, StoryError};
use crate::state::Node;

/// `POST /workflows/definition/action`.
pub fn definition_action(
    _node: &Node,
    _project: &str,
    _actor: &Actor,
    _input: &Value,
) -> Result<Value, StoryError> {
    Err(StoryError::Unavailable(
        "workflow definitions are not built yet".into(),
    ))
}

/// `POST /workflows/run/action`.
pub fn run_action(
    _node: &Node,
    _project: &str,
    _actor: &Actor,
    _input: &Value,
) -> Result<Value, StoryError> {
    Err(StoryError::Unavailable(
        "workflow runs are not built yet".into(),
    ))
}
