//! The peer link between a hub and its nodes, and the cross-host mail cores behind it.
//!
//! - [`frame`]: the wire frames (JSON, `type`-tagged, versioned `hello`, request ids).
//! - [`link`]: the per-connection state machine (handshake, liveness, provenance).
//! - [`outbox`]: the bounded per-connection outbox with sender outcomes.
//! - [`dedupe`]: the per-recipient rings that make resends harmless.
//! - [`deliver`](mod@deliver): what a receiving side does with a `send` (deliver locally or relay).
//! - [`address`]: `<connection_id>/<peer>` addresses.
//! - [`backoff`]: reconnect delays.
//! - [`progress`]: the bounded, coalescing queue of a relayed upstream call's progress.
//! - [`relay`](mod@relay): the hub's side of its links (outboxes, shadows, directory, routing
//!   of outcomes) as link events in, frames and typed outputs out.
//! - [`uplink`]: the node's side of its link to a hub (register gate, vouching, settling).
//! - [`cut`]: the relay steps of a node link waiting for their destinations' answers
//!   (cut-through), with their deadlines.
//!
//! None of these touch a socket, a clock or a random source; the simulators in
//! `proto/tests/sim.rs` and `sim_scale.rs` drive them with virtual time.

#![warn(missing_docs)]

pub mod address;
pub mod backoff;
pub mod cut;
pub mod dedupe;
pub mod deliver;
pub mod frame;
pub mod link;
pub mod outbox;
pub mod progress;
pub mod relay;
pub mod uplink;

pub use address::{Address, AddressError, LOCAL, format_address, parse_address};
pub use backoff::{Backoff, Flaps};
pub use cut::CutThroughWaits;
pub use dedupe::{DedupeError, DedupeRings, Verdict};
pub use deliver::{Routed, deliver, deliver_stamped, relay};
pub use frame::{
    AckOutcome, ErrorCode, Frame, FrameError, LinkRole, PEER_PROTOCOL_VERSION, PeerEntry, Receipt,
    ReceiptOutcome, RequestId, WireMessage,
};
pub use link::{
    DownReason, LinkConfig, LinkError, LinkEvent, LinkState, PeerLink, Request, Response,
};
pub use outbox::{
    Outbox, OutboxChange, OutboxError, OutboxEvent, OutboxLimits, Pushed, SenderOutcome, Withdrawn,
};
pub use progress::{PROGRESS_QUEUE_CAP, ProgressQueue};
pub use relay::{Relay, RelayEnd, RelayOutput, Route, Settled, Step};
pub use uplink::{Uplink, UplinkOutput};
