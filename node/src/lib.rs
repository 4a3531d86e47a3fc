//! tuic-node: the per-machine daemon.
//!
//! It owns this machine's PTYs, its registered file roots, its embedded store and its agents'
//! inboxes, and serves them over the always-on IPC socket and, when remote access is on, an
//! authenticated TCP listener. It knows no other host by itself: a hub dials its `/mcp/peer`
//! link (`peer`), and a process built on a node adds other hosts only through [`ext`], the
//! extension API (`tuic-hub` is such a process).
//!
//! Exported: [`ext`] and what the hub, the tests and the binaries use; modules nobody outside
//! uses are private. `ext` re-exports the few types of private modules an extension names
//! (`GitError`, the tool registry's `ToolSource`/`ToolError`/`CallCtx`, `RouterHook`).
//! `peer` stays public because the hub's side of the link is built from its IO pieces
//! (committer, driver, QUIC transport, outbox persistence), and `routes` exports only the
//! router and its body limit for the boundary tests; agent mail (`mail`) and MCP (`mcp`) are
//! private.

pub mod acp;
mod args;
pub mod audit;
mod auth;
mod automations;
mod beneath;
pub mod cli;
pub mod config;
pub mod error;
mod events;
pub mod ext;
mod fs;
mod git;
pub mod github;
pub mod guard;
pub mod link;
pub mod logs;
mod mail;
mod mcp;
pub mod notify;
pub mod ops;
pub mod paths;
pub mod progress;
mod repos;
pub mod review;
pub mod routes;
pub mod secrets;
mod server;
pub mod session;
pub mod share;
pub mod state;
pub mod store;
pub mod stories;
mod tailscale;
pub mod upstream;
pub mod vault;
mod web;

/// The allocator option `tuic-node` re-executes itself with (see `main.rs`): the node's own
/// setting, removed from every child's environment so a user's programs never inherit it.
pub const ALLOCATOR_ENV: &str = "GLIBC_TUNABLES";
