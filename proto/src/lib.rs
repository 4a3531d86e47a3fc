//! tuic-proto: the wire types and pure logic that every tuic process shares.
//!
//! Nothing in this crate does IO, reads a clock or looks at the environment: callers pass
//! time, paths and identities in. That keeps the protocol cores testable without sockets
//! and lets a simulator drive them with virtual time.
//!
//! - [`mail`]: the per-recipient inbox (retention, cursors, waits, the delivery lease).
//! - [`mcp`]: MCP revisions, header names, JSON-RPC codes and the wait timing rules.
//! - [`screen`]: screen-sync frames of `WS /sessions/{id}/stream?mode=screen`, the row diff and
//!   the client mirror.
//! - [`stream`]: the byte-stream frames of `WS /sessions/{id}/stream` (every other mode).
//! - [`natural`]: natural order of aliases (`ro-8` before `ro-10`).
//! - [`peer`]: the hub↔node peer link, the cross-host outbox, dedupe rings and routing.
//!   See `docs/mail-protocol.md`.

pub mod acp;
pub mod endpoint;
pub mod events;
pub mod ipc_http;
pub mod mail;
pub mod mcp;
pub mod natural;
pub mod peer;
pub mod screen;
pub mod sse;
pub mod stream;

/// Version of the node's HTTP/peer protocol, reported by `GET /health`.
pub const PROTOCOL_VERSION: u32 = 1;
