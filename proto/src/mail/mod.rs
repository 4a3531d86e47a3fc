//! Agent mail cores: the per-recipient inbox with its cursors and delivery lease.
//!
//! Everything here is a plain state machine: the node passes time (unix milliseconds) and
//! identifiers in and reads decisions out. It owns no PTY, no MCP transport and no clock;
//! writing a wake notice into a terminal or answering an MCP call is the node's job.

#![warn(missing_docs)]

pub mod inbox;

pub use inbox::{
    DeliveryPath, INBOX_CAPACITY, InboxError, InboxEvent, InboxMessage, InboxPage, Inboxes,
    Lifecycle, MAX_MESSAGE_BYTES, NewMessage, READER_ACTIVE_MS, SendReceipt, WAIT_CAP_MS,
    WAIT_CLAMPED_MS, WAIT_DEFAULT_MS, WaitId, WaitOutcome, WaitStart, WakeOwner,
};
