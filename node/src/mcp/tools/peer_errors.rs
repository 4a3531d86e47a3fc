//! The MCP renderings of the peer layer's typed outcomes: `crate::mail` answers
//! [`AddressError`], [`SendError`] and [`peer::Sent`]; the `agent` tool shows them here as tool
//! errors with stable codes (the peer layer itself knows nothing of MCP).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::mcp::registry::ToolError;
use tuic_proto::mail::MAX_MESSAGE_BYTES;
use tuic_proto::peer::AddressError;

use crate::mail::send::{self as peer, SendError};
use crate::mail::{Refusal, error_code};
use crate::state::Node;

/// The MCP rendering of an address that does not parse.
impl From<AddressError> for ToolError {
    fn from(e: AddressError) -> Self {
        ToolError::new("invalid_address", e.to_string())
    }
}

/// The MCP rendering of a refused cross-host send.
impl From<SendError> for ToolError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::TooLarge { bytes } => ToolError::new(
                "too_large",
                format!("message is {bytes} bytes, the limit is {MAX_MESSAGE_BYTES}"),
            ),
            SendError::Refused {
                refusal,
                message_id,
            } => refusal_error(&refusal, message_id.as_deref()),
        }
    }
}

fn refusal_error(r: &Refusal, message_id: Option<&str>) -> ToolError {
    let code = error_code(r.code);
    let mut e = ToolError::new(
        code,
        format!("refused by connection '{}': {}", r.connection, r.message),
    )
    .with("connection", json!(r.connection))
    .with("status", json!("refused"));
    if let Some(id) = message_id {
        e = e.with("message_id", json!(id));
    }
    e
}

/// `agent action=send` to an address, as the MCP tool answers it (see [`peer::send_to_address`]).
pub(super) async fn send_remote(
    node: &Arc<Node>,
    from: &str,
    from_name: Option<String>,
    to: &str,
    message: String,
) -> Result<Value, ToolError> {
    Ok(
        peer::send_to_address(&node.send_env(), from, from_name, to, message)
            .await?
            .to_json(to),
    )
}

#[cfg(test)]
mod tests {
    use tuic_proto::peer::{ErrorCode, parse_address};

    use super::*;

    #[test]
    fn peer_send_refusals_render_with_a_stable_code_and_the_connection() {
        let e = ToolError::from(SendError::TooLarge { bytes: 70_000 });
        assert_eq!(e.code, "too_large");
        let e = ToolError::from(SendError::refused(
            Refusal {
                code: ErrorCode::OutboxFull,
                connection: "nodec".into(),
                message: "full".into(),
            },
            "m1",
        ));
        assert_eq!(e.code, "outbox_full");
        assert_eq!(e.extra["connection"], "nodec");
        assert_eq!(e.extra["status"], "refused");
        assert_eq!(e.extra["message_id"], "m1");
        let e = ToolError::from(parse_address("/x").expect_err("empty connection"));
        assert_eq!(e.code, "invalid_address");
    }
}
