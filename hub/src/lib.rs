//! tuic-hub: everything a node is for its own machine, plus federation of other nodes.
//!
//! The hub keeps one connection per configured node: it mirrors that node's session list
//! (its `/events` stream plus `GET /sessions`), watches its health, and routes session-scoped
//! HTTP and WebSocket calls addressed `<connection_id>/<session_id>` to it with the node's
//! connection token, answering 503 while the connection is down. It never owns another host's
//! PTYs and never asks a node to start a process.

pub mod acp;
pub mod audit;
pub mod cli;
pub mod connections;
pub mod federation;
pub mod lastscreen;
pub mod link;
pub mod mailroute;
pub mod notify;
pub mod ops;
pub mod peerlink;
pub mod progress_relay;
pub mod proxy;
pub mod remote;
pub mod remote_git;
pub mod share;
pub mod stories;
