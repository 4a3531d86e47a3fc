//! tuic-node: the per-machine daemon.
//!
//! It owns this machine's PTYs, its registered file roots, its embedded store and its agents'
//! inboxes, and serves them over the always-on IPC socket and, when remote access is on, an
//! authenticated TCP listener. It knows no other host by itself: a hub dials its `/mcp/peer`
//! link (`peer`) and federation is the hub's job (`tuic-hub`), which is a node plus peer links.

pub mod auth;
pub mod automations;
pub mod cli;
pub mod config;
pub mod error;
pub mod events;
pub mod fs;
pub mod git;
pub mod guard;
pub mod logs;
pub mod mail;
pub mod mcp;
pub mod ops;
pub mod paths;
pub mod peer;
pub mod progress;
pub mod repos;
pub mod routes;
pub mod server;
pub mod session;
pub mod state;
pub mod store;
pub mod stories;
pub mod tailscale;
pub mod tls;
pub mod upstream;
pub mod vault;
pub mod web;
