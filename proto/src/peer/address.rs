//! Federation addresses: `<connection_id>/<peer>` for a node's peer, `local/<peer>` for the
//! hub's own. One namespace, defined by the hub.
//!
//! Parsing refuses empty connection ids and empty peers before any owner is selected, so an
//! address like `/x`, `nodeb/` or `` can never be routed to a default.

/// The connection id that names the hub itself.
pub const LOCAL: &str = "local";

/// A parsed federation address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Address<'a> {
    /// A peer on the hub itself (`local/<peer>`).
    Local(&'a str),
    /// A peer on a connected node.
    Remote {
        /// The connection the peer lives behind.
        connection: &'a str,
        /// The peer's id on that node.
        peer: &'a str,
    },
}

/// Errors of [`parse_address`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// No `/` separates a connection from a peer.
    #[error("'{0}' is not an address of the form <connection_id>/<peer>")]
    NotAnAddress(String),
    /// The connection part is empty.
    #[error("address '{0}' has an empty connection id")]
    EmptyConnection(String),
    /// The peer part is empty.
    #[error("address '{0}' has an empty peer")]
    EmptyPeer(String),
}

/// Splits an address at its first `/`.
pub fn parse_address(address: &str) -> Result<Address<'_>, AddressError> {
    let (connection, peer) = address
        .split_once('/')
        .ok_or_else(|| AddressError::NotAnAddress(address.to_owned()))?;
    if connection.trim().is_empty() {
        return Err(AddressError::EmptyConnection(address.to_owned()));
    }
    if peer.trim().is_empty() {
        return Err(AddressError::EmptyPeer(address.to_owned()));
    }
    Ok(if connection == LOCAL {
        Address::Local(peer)
    } else {
        Address::Remote { connection, peer }
    })
}

/// Formats a node peer's address.
pub fn format_address(connection: &str, peer: &str) -> String {
    format!("{connection}/{peer}")
}
