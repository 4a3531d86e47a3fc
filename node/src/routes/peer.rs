//! `WS /mcp/peer`: the upgrade of the link a hub dials; the link itself is the mail room's
//! (`crate::mail::endpoint::serve_on`). Served on the TCP listener only: on the IPC socket the
//! route answers 403.

use std::sync::Arc;

use axum::extract::ws::{
    Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection,
};
use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::guard::Transport;
use crate::link::driver;
use crate::state::Node;

/// `GET /mcp/peer` (WebSocket upgrade).
pub(crate) async fn peer_ws(
    State(node): State<Arc<Node>>,
    transport: Option<Extension<Transport>>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if !matches!(transport, Some(Extension(Transport::Tcp { .. }))) {
        return ApiError::forbidden(
            "the peer link is served on the TCP listener only (a hub dials http://host:port/mcp/peer with the node token)",
        )
        .into_response();
    }
    let ws = match ws {
        Ok(ws) => ws,
        Err(e) => return ApiError::bad_request(e.body_text()).into_response(),
    };
    ws.on_upgrade(move |sock| serve(node, sock)).into_response()
}

/// axum's WebSocket messages, for the peer driver's one adapter ([`driver::WsIo`]).
struct Axum;

impl driver::MessageKind<Message> for Axum {
    fn text(text: String) -> Message {
        Message::Text(text.into())
    }

    fn close() -> Message {
        Message::Close(None)
    }

    fn read(message: Message) -> driver::Incoming {
        match message {
            Message::Text(t) => driver::Incoming::Text(t.as_str().to_owned()),
            Message::Close(_) => driver::Incoming::Close,
            _ => driver::Incoming::Other,
        }
    }
}

async fn serve(node: Arc<Node>, sock: WebSocket) {
    crate::mail::endpoint::serve_on(node.mail.clone(), driver::WsIo::<_, Axum>::new(sock)).await;
}
