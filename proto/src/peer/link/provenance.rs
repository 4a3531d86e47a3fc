//! Sender provenance: whom a frame from the far side may speak for, stamped or refused.

use crate::peer::frame::{ErrorCode, LinkRole};

use super::PeerLink;

impl PeerLink {
    /// Peers the far side registered over this link (hub end only).
    pub fn registered(&self) -> impl Iterator<Item = &str> {
        self.registered.iter().map(String::as_str)
    }

    /// Applies provenance to a claimed sender (or inbox owner).
    pub(super) fn stamp(&self, claimed: &str) -> Result<String, (ErrorCode, String)> {
        match self.config.role {
            LinkRole::Hub => {
                if claimed.contains('/') {
                    return Err((
                        ErrorCode::SenderForged,
                        format!(
                            "'{claimed}' is an address; connection '{}' speaks only for its own peers",
                            self.config.connection_id
                        ),
                    ));
                }
                if !self.registered.contains(claimed) {
                    return Err((
                        ErrorCode::SenderNotRegistered,
                        format!(
                            "'{claimed}' is not registered on connection '{}'",
                            self.config.connection_id
                        ),
                    ));
                }
                Ok(format!("{}/{claimed}", self.config.connection_id))
            }
            LinkRole::Node => {
                let valid = claimed
                    .split_once('/')
                    .is_some_and(|(c, p)| !c.is_empty() && !p.is_empty());
                if valid {
                    Ok(claimed.to_owned())
                } else {
                    Err((
                        ErrorCode::SenderForged,
                        format!("'{claimed}' is not a federation address"),
                    ))
                }
            }
        }
    }

    /// Applies provenance to the owner of an inbox being read or waited on: only an identity
    /// the far side registered over this link (issue 40, finding 7). On the hub end that is
    /// the sender rule (a peer this node registered, stamped). On a node's end nothing
    /// qualifies: a node's agents register on the node itself, never over the link (the hub's
    /// `register` is its directory, kept for `list_peers`), so every `inbox`/`wait` naming one
    /// of them is refused here and never surfaces — a token holder on the link cannot read or
    /// consume a local agent's mail.
    pub(super) fn owner(&self, claimed: &str) -> Result<String, (ErrorCode, String)> {
        match self.config.role {
            LinkRole::Hub => self.stamp(claimed),
            LinkRole::Node => {
                if claimed.is_empty() || claimed.contains('/') {
                    Err((
                        ErrorCode::UnknownRecipient,
                        format!("'{claimed}' is not a peer of this node"),
                    ))
                } else {
                    Err((
                        ErrorCode::SenderNotRegistered,
                        format!(
                            "'{claimed}' did not register over this link: a node's agents read their mail on their own node, never over connection '{}'",
                            self.config.connection_id
                        ),
                    ))
                }
            }
        }
    }
}
