//! Local clients of a node's IPC endpoint: `tuic-bridge` (a stdio MCP server) and the `tuic`
//! CLI. They hold no server state: everything they show or do is a request to the node.
//!
//! - [`locate`]: which socket (TUIC_SOCKET, else the selected instance's; never another's);
//! - [`ipc`]: blocking (CLI) and tokio (bridge) adapters around the sans-IO HTTP/1.1 parser
//!   in `tuic_proto::ipc_http`;
//! - [`mcp`]: Streamable HTTP request headers and answer decoding;
//! - [`cli`]: the `tuic` commands ([`termcmd`] the tmux-like ones, [`attach`] the attached
//!   terminal, [`keys`] tmux key names, [`target`] session names, [`tty`] the user's terminal); [`stdio`]: the bridge; [`install`]: publishing the
//!   bridge binary into the config dir.

/// `print!` for the CLI's own output: a reader that went away (`tuic ls | head`) ends the
/// process quietly with status 0, as coreutils do, instead of `print!`'s panic.
macro_rules! out {
    ($($t:tt)*) => { $crate::tty::stdout_text(&format!($($t)*)) };
}

/// `println!` with [`out!`]'s broken-pipe rule.
macro_rules! outln {
    () => { $crate::tty::stdout_text("\n") };
    ($($t:tt)*) => { $crate::tty::stdout_text(&(format!($($t)*) + "\n")) };
}

mod acpcmd;
pub mod attach;
pub mod cli;
pub mod cp;
mod ctx;
pub mod install;
pub mod ipc;
pub mod keys;
pub mod locate;
pub mod mcp;
mod mcpcmd;
pub mod migrate;
mod notifycmd;
mod review;
pub mod stdio;
pub mod target;
mod termcmd;
mod trust;
pub mod tty;

/// Jitter for the workspace's one backoff ([`tuic_proto::peer::Backoff`]), which takes its
/// randomness from the caller: the sub-second nanoseconds of the wall clock are random enough to
/// spread reconnecting clients apart.
pub(crate) fn jitter() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::from(d.subsec_nanos()))
        .unwrap_or(0)
}
