//! The handshake: each end's `hello` is its first frame ([`PeerLink::new`] queues ours); the
//! far side's must name the other role and this protocol version, or the link goes down.

use crate::peer::frame::{ErrorCode, Frame, PEER_PROTOCOL_VERSION};

use super::{DownReason, LinkEvent, LinkState, PeerLink};

impl PeerLink {
    /// Handles a frame while the far side's `hello` is awaited: a `hello` brings the link up,
    /// a link-level `error` or anything else takes it down.
    pub(super) fn handshake(&mut self, frame: Frame) {
        match frame {
            Frame::Hello {
                protocol_version,
                node_id,
                role,
            } => {
                if role == self.config.role {
                    self.send_error(
                        None,
                        ErrorCode::Malformed,
                        "both ends of a peer link claim the same role",
                    );
                    self.go_down(DownReason::ProtocolViolation(format!(
                        "far side is also a {role:?}"
                    )));
                    return;
                }
                if protocol_version != PEER_PROTOCOL_VERSION {
                    self.send_error(
                        None,
                        ErrorCode::VersionMismatch,
                        &format!(
                            "peer protocol {protocol_version} not supported, this side speaks {PEER_PROTOCOL_VERSION}"
                        ),
                    );
                    self.go_down(DownReason::VersionMismatch {
                        remote: protocol_version,
                    });
                    return;
                }
                self.state = LinkState::Up;
                self.remote_id = Some(node_id.clone());
                self.events.push_back(LinkEvent::Up { remote_id: node_id });
            }
            Frame::Error { code, message, .. } => {
                self.go_down(DownReason::RemoteError { code, message });
            }
            other => {
                self.send_error(
                    other.request_id(),
                    ErrorCode::HandshakeRequired,
                    "hello must be the first frame",
                );
                self.go_down(DownReason::ProtocolViolation(
                    "frame before hello".to_owned(),
                ));
            }
        }
    }
}
