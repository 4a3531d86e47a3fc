//! The MCP wire contract every tuic process shares: protocol revisions, the Streamable HTTP
//! header names, JSON-RPC error codes, and the blocking-wait timing rules.
//!
//! One list of each. The node negotiates with these, the bridge falls back and computes its
//! deadlines with these, so a revision or a wait default cannot disagree between the two (a
//! bridge that assumed a 30 s wait default while the node waited 60 s cut every default
//! `agent action=wait` off at 35 s).

/// The modern, stateless revision (SEP-2549 `server/discover`).
pub const MODERN: &str = "2026-07-28";
/// What a legacy `initialize` answers when the client names no version it echoes, and what
/// the bridge sends when a request carries none.
pub const LEGACY_DEFAULT: &str = "2025-11-25";
/// Versions `initialize` echoes (spec "Streamable HTTP"); anything else gets
/// [`LEGACY_DEFAULT`].
pub const ECHOED: &[&str] = &[MODERN, LEGACY_DEFAULT, "2025-03-26"];
/// Versions `server/discover` lists, newest first, and `MCP-Protocol-Version` may carry.
pub const SUPPORTED: &[&str] = &[MODERN, LEGACY_DEFAULT, "2025-06-18", "2025-03-26"];

/// The one revision with JSON-RPC batches: 2025-06-18 removed them. It is also what a server
/// assumes of a request that names no revision and belongs to no session (the 2025-06-18
/// transport's backwards-compatibility rule).
pub const BATCHING: &str = "2025-03-26";
/// Most messages one batch may carry.
pub const MAX_BATCH: usize = 100;
/// Most bytes the answers of one batch may take together; members past it are answered
/// with an error each instead of their result.
pub const MAX_BATCH_ANSWER_BYTES: usize = 8 * 1024 * 1024;
/// Most bytes one answer may take; a larger result is replaced by an error.
pub const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// Picks the revision an `initialize` answers.
pub fn negotiate(requested: Option<&str>) -> &'static str {
    requested
        .and_then(|r| ECHOED.iter().find(|v| **v == r))
        .copied()
        .unwrap_or(LEGACY_DEFAULT)
}

/// The protocol session header.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The per-request revision header.
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// SEP-2243 method header (modern requests).
pub const METHOD_HEADER: &str = "mcp-method";
/// SEP-2243 name header (modern `tools/call`).
pub const NAME_HEADER: &str = "mcp-name";
/// The TUIC identity header the bridge sends from `$TUIC_SESSION`.
pub const TUIC_SESSION_HEADER: &str = "x-tuic-session";

/// `_meta` key of a stateless request's revision.
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of a stateless request's client info.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key of a stateless request's client capabilities.
pub const META_CLIENT_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key of the server info on results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// JSON-RPC parse error.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC invalid request.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC method not found.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC invalid params.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// An MCP standard header disagrees with the body (SEP-2243).
pub const HEADER_MISMATCH: i64 = -32020;
/// The bridge's "node unreachable" error for non-tool requests.
pub const NODE_UNREACHABLE: i64 = -32000;

/// A blocking wait (`agent action=wait`, `session action=wait`) without `timeout_ms` runs
/// this long (spec "Wait": the default is 60 seconds).
pub const WAIT_DEFAULT_MS: u64 = 60_000;
/// The advertised wait cap; a request at or above it runs as [`WAIT_CLAMPED_MS`].
pub const WAIT_CAP_MS: u64 = 300_000;
/// What a capped wait really runs: 5 s under the cap, so a client whose own deadline is
/// exactly the cap still receives `timed_out` instead of its own transport error.
pub const WAIT_CLAMPED_MS: u64 = 295_000;
/// What the bridge adds to a wait's own timeout for framing and scheduling before it gives up
/// on the node.
pub const WAIT_MARGIN_MS: u64 = 5_000;

/// How long a wait asked for `requested` milliseconds really runs.
pub fn wait_ms(requested: Option<u64>) -> u64 {
    match requested {
        None => WAIT_DEFAULT_MS,
        Some(t) if t >= WAIT_CAP_MS => WAIT_CLAMPED_MS,
        Some(t) => t,
    }
}

/// How long a client of the node (the bridge) should wait for the answer to a wait that asked
/// for `requested` milliseconds: what the node runs plus the transport margin.
pub fn wait_deadline_ms(requested: Option<u64>) -> u64 {
    wait_ms(requested) + WAIT_MARGIN_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_rules() {
        assert_eq!(wait_ms(None), 60_000);
        assert_eq!(wait_ms(Some(0)), 0);
        assert_eq!(wait_ms(Some(299_999)), 299_999);
        assert_eq!(wait_ms(Some(300_000)), 295_000);
        assert_eq!(wait_ms(Some(u64::MAX)), 295_000);
        assert_eq!(wait_deadline_ms(None), 65_000);
        assert_eq!(wait_deadline_ms(Some(300_000)), 300_000);
    }

    #[test]
    fn negotiation() {
        assert_eq!(negotiate(Some("2026-07-28")), "2026-07-28");
        assert_eq!(negotiate(Some("2025-03-26")), "2025-03-26");
        // Listed as supported for the header, but initialize does not echo it (spec).
        assert_eq!(negotiate(Some("2025-06-18")), "2025-11-25");
        assert_eq!(negotiate(None), "2025-11-25");
        for v in ECHOED {
            assert!(SUPPORTED.contains(v));
        }
    }
}
