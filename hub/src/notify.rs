//! The hub half of notifications: the hub notifies for every host it federates, and its nodes
//! stay silent while it is attached.
//!
//! A node publishes each notification it raises, clears or updates as a `notification` event
//! (`op` `show`, `clear`, `update`); the federation driver already mirrors each node's
//! `/events` and hands those here, and this module raises them on the hub's own notification
//! service under the connection's name (`tuic_node::ext::notify`), through the hub's channels.
//! The node learns that a hub speaks for it from its peer link (`mail::PeerState::hub_attached`)
//! and then sends nothing itself; when the link drops (the hub is gone) the node notifies by
//! itself, and what it sent meanwhile the hub never sees again (the event stream has no
//! replay), so the hub's return brings no duplicate. The hub also tells the person when a
//! connection goes offline (open until it is back) and when it comes back.
//!
//! Deliberately not here: answering a relayed question from the hub's notification (a tap
//! opens the session through the hub, where the usual answer buttons work).

use serde_json::Value;
use tuic_node::ext::NodeApi;
use tuic_node::ext::notify::service;

/// A node's `notification` event, seen on connection `conn`'s event stream.
pub fn relay(node: &NodeApi, conn: &str, event: &Value) {
    if let Some(op @ ("show" | "clear")) = event.get("op").and_then(Value::as_str) {
        service(node).relay(conn, op, event);
    }
}

/// Connection `conn` went down (`up == false`) after being up, or came back.
pub fn host(node: &NodeApi, conn: &str, up: bool) {
    service(node).host_state(conn, up);
}
