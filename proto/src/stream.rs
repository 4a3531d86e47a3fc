//! The byte stream of `WS /sessions/{id}/stream` (every mode but `screen`): the server's text
//! frames, JSON with a `type` tag. Binary frames (`?binary=1`) are raw PTY bytes and have no
//! type here; frames from the client are input and have none either.
//!
//! The node encodes these and the `tuic attach` client decodes them, so the two cannot drift;
//! golden samples of each frame live in `proto/tests/data/stream/`. Screen-sync streams
//! (`mode=screen`) speak [`crate::screen::ServerFrame`], which shares [`Hello`] with this.

use serde::{Deserialize, Serialize};

pub use crate::screen::Hello;

/// A text frame from the server on a byte stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamFrame {
    /// The first frame: the mode and where the stream starts in the session's raw output.
    Hello(Hello),
    /// Output as UTF-8 text (decoded with state kept across reads; with `?format=text` the
    /// ANSI sequences are stripped).
    Output {
        /// The text.
        data: String,
    },
    /// New clean-log lines (`?format=log`).
    Log {
        /// The lines, oldest first.
        lines: Vec<String>,
        /// The log line number of the first of them.
        offset: u64,
    },
    /// The client fell behind the raw ring; this many bytes were skipped and the stream
    /// resumed at the oldest retained byte.
    Lagged {
        /// Bytes never sent.
        missed: u64,
    },
    /// A `pty-parsed` event of the session (question, agent state, rate limit, error, …).
    Parsed {
        /// The event, as published on the bus.
        event: serde_json::Value,
    },
    /// The process exited; every byte it wrote came before this, then the socket closes.
    Exit {
        /// Exit status, when it exited normally.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    /// The node is shutting down.
    Closed,
}

impl StreamFrame {
    /// The frame as the JSON text the socket carries.
    pub fn to_text(&self) -> String {
        // A tagged enum of strings, numbers and JSON values always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }
}
