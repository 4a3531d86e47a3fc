//! The carrier room: how a peer link's frames travel, with no knowledge of what they carry.
//!
//! - [`driver`]: one task per link runs a `tuic_proto::peer::PeerLink` over any [`FrameIo`]
//!   (a WebSocket through [`driver::WsIo`], a QUIC stream through [`quic::QuicIo`]); the hub
//!   drives its ends with the same driver.
//! - [`commit`]: the group committer of link state (outboxes and dedupe rings): one `redb`
//!   transaction for everything journaled since the last one; a hub adds its outboxes to it.
//! - [`quic`]: the node's QUIC listener (the listening side only; the hub dials in
//!   `tuic-hub`'s `link.rs`) and the shared frame codec and transport settings.
//! - [`quic_udp`]: the UDP socket wrapper that counts and drops undecodable datagrams.
//! - [`quic_stream`]: session streams over an authenticated QUIC link; the node serves each
//!   through a [`quic_stream::StreamHook`] the composition root supplies (no route module).
//! - [`tls`]: the node's self-signed certificate and the pinned client configuration.
//!
//! What runs on the node's end of a link (mail, upstream tools) is `crate::mail::endpoint`,
//! reached through the [`LinkEnv::serve`] hook. Nothing here imports the node's state.

pub mod commit;
pub mod driver;
pub mod quic;
pub mod quic_stream;
pub mod quic_udp;
pub mod tls;

/// The store's write of one link change (outbox record or dedupe ring), as a committer
/// source journals it.
pub use crate::store::{PeerOp, UPLINK_KEY};
pub use driver::{End, Ended, FrameIo};
