//! Local clients of a node's IPC endpoint: `tuic-bridge` and the `tuic` CLI.
