//! The bridge's pure decisions: retry backoff, per-call deadlines, the protocol revision a
//! request carries, and the answers it gives while the node is unreachable.
//!
//! No IO and no clock reads here: `now` is passed in, so each rule is a unit test.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::mcp::{DEFAULT_PROTOCOL_VERSION, MODERN_PROTOCOL_VERSION};

/// Pause after the first failed upstream initialize.
pub const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// Longest pause between attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(8);
/// Read deadline of an ordinary call.
pub const ORDINARY_DEADLINE: Duration = Duration::from_secs(10);
/// Confirmations and long workspace operations: the confirm window (300 s) plus 5 s.
pub const LONG_DEADLINE: Duration = Duration::from_secs(305);

/// Backoff between upstream connection attempts, shared by every retry path of one bridge
/// (request-triggered, the client's initialize, and the background loop): the workspace's one
/// backoff ([`tuic_proto::peer::Backoff`]) with the bridge's limits, plus the instant before
/// which no attempt is made.
#[derive(Debug, Clone)]
pub struct Backoff {
    delays: tuic_proto::peer::Backoff,
    not_before: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            delays: tuic_proto::peer::Backoff::with_limits(BACKOFF_MIN, BACKOFF_MAX),
            not_before: None,
        }
    }
}

impl Backoff {
    /// How long until the next attempt is allowed; zero when it is allowed now.
    pub fn wait(&self, now: Instant) -> Duration {
        self.not_before
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }

    /// Records a failed attempt: the next waits the current pause (plus up to a quarter of it
    /// from `random`), which then doubles.
    pub fn failed(&mut self, now: Instant, random: u64) {
        self.not_before = Some(now + self.delays.next(random));
    }

    /// Records a successful connection: the next failure starts from the minimum again.
    pub fn succeeded(&mut self) {
        *self = Self::default();
    }
}

/// Why the node cannot be used right now; worded for the agent reading a tool error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offline {
    /// No process listens on the socket.
    NotRunning(String),
    /// Something listens (IPC works) but `/mcp` is not served.
    McpUnavailable(String),
    /// Another failure (timeout, invalid response, refused initialize).
    Other(String),
}

impl Offline {
    /// The message an agent sees.
    pub fn message(&self) -> String {
        match self {
            Self::NotRunning(d) => format!(
                "TUIC node not running ({d}). tuic-bridge reconnects automatically; retry shortly."
            ),
            Self::McpUnavailable(d) => format!(
                "TUIC node is running but its MCP endpoint is unavailable ({d}). \
                 tuic-bridge retries automatically."
            ),
            Self::Other(d) => {
                format!("TUIC node unreachable ({d}). tuic-bridge retries automatically.")
            }
        }
    }
}

/// The revision a stdio request carries: its `_meta` protocol version, else what the
/// client's initialize negotiated, else the 2025-11-25 fallback.
pub fn request_version(msg: &Value, negotiated: Option<&str>) -> String {
    msg.pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str)
        .or(negotiated)
        .unwrap_or(DEFAULT_PROTOCOL_VERSION)
        .to_owned()
}

/// The (tool, arguments) a `tools/call` really targets, looking through the collapsed
/// `call_tool` meta-tool.
fn target_tool(params: &Value) -> (String, Value) {
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    let args = params.get("arguments").cloned().unwrap_or(Value::Null);
    if name == "call_tool" {
        let inner = ["name", "tool", "tool_name"]
            .iter()
            .find_map(|k| args.get(*k).and_then(Value::as_str))
            .unwrap_or("");
        let inner_args = args.get("arguments").cloned().unwrap_or(Value::Null);
        return (inner.to_owned(), inner_args);
    }
    (name.to_owned(), args)
}

/// How long the bridge waits for the node's answer to `msg`.
///
/// Ordinary calls 10 s; `wait` actions the clamped requested timeout plus 5 s; `ui confirm`
/// and the git-backed `repo` actions (worktrees, branch proofs over a big repository, orphan
/// cleanup) 305 s.
pub fn deadline_for(msg: &Value) -> Duration {
    if msg.get("method").and_then(Value::as_str) != Some("tools/call") {
        return ORDINARY_DEADLINE;
    }
    let params = msg.get("params").cloned().unwrap_or(Value::Null);
    let (tool, args) = target_tool(&params);
    let action = args.get("action").and_then(Value::as_str).unwrap_or("");
    match (tool.as_str(), action) {
        ("ui", "confirm")
        | (
            "repo",
            "worktree_create"
            | "worktree_remove"
            | "worktree_list"
            | "worktree_lifecycle"
            | "branch_integrations"
            | "branch_integration"
            | "branch_delete"
            | "orphan_cleanup_answer",
        ) => LONG_DEADLINE,
        (_, "wait") => {
            // The node's own rule (`tuic_proto::mcp::wait_ms`) plus the transport margin, so the
            // bridge never gives up on a wait the node is still running.
            let requested = args.get("timeout_ms").and_then(Value::as_u64).or_else(|| {
                args.get("timeout")
                    .and_then(Value::as_f64)
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(|s| (s.min(1e9) * 1000.0) as u64)
            });
            Duration::from_millis(tuic_proto::mcp::wait_deadline_ms(requested))
        }
        _ => ORDINARY_DEADLINE,
    }
}

/// What the bridge answers to `msg` (a request) while the node is unreachable: `tools/list`
/// gets the last known tool list (empty if none) and `tools/call` a tool error, each with
/// the complete/private/zero-TTL discriminators on 2026-07-28; other methods a JSON-RPC
/// error.
pub fn offline_answer(
    msg: &Value,
    version: &str,
    why: &Offline,
    cached_tools: Option<&Value>,
) -> Value {
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let modern = version == MODERN_PROTOCOL_VERSION;
    match msg.get("method").and_then(Value::as_str) {
        Some("tools/list") => {
            let mut result = json!({"tools": cached_tools.cloned().unwrap_or_else(|| json!([]))});
            if modern {
                result["resultType"] = json!("complete");
                result["ttlMs"] = json!(0);
                result["cacheScope"] = json!("private");
            }
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        }
        Some("tools/call") => {
            let mut result = json!({
                "content": [{"type": "text", "text": why.message()}],
                "isError": true,
            });
            if modern {
                result["resultType"] = json!("complete");
            }
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        }
        _ => error_answer(id, tuic_proto::mcp::NODE_UNREACHABLE, &why.message()),
    }
}

/// A JSON-RPC error response.
pub fn error_answer(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The initialize result the bridge gives a client while the node is unreachable, so the
/// agent's session starts; the tools arrive with `notifications/tools/list_changed` once the
/// node answers.
pub fn offline_initialize(msg: &Value, why: &Offline) -> Value {
    let requested = msg
        .pointer("/params/protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let version = if crate::mcp::KNOWN_PROTOCOL_VERSIONS.contains(&requested) {
        requested
    } else {
        DEFAULT_PROTOCOL_VERSION
    };
    json!({
        "jsonrpc": "2.0",
        "id": msg.get("id").cloned().unwrap_or(Value::Null),
        "result": {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "tuic-bridge", "version": env!("CARGO_PKG_VERSION")},
            "instructions": why.message(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_eight_and_resets() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        assert_eq!(b.wait(t0), Duration::ZERO);
        let mut waits = Vec::new();
        for _ in 0..6 {
            b.failed(t0, 0);
            waits.push(b.wait(t0).as_secs());
        }
        assert_eq!(waits, [1, 2, 4, 8, 8, 8]);
        assert_eq!(b.wait(t0 + Duration::from_secs(9)), Duration::ZERO);
        b.succeeded();
        b.failed(t0, 0);
        assert_eq!(b.wait(t0), Duration::from_secs(1));
        b.succeeded();
        b.failed(t0, u64::MAX);
        assert!(b.wait(t0) <= Duration::from_millis(1_250));
        b.succeeded();
        b.failed(t0, 0);
        assert_eq!(b.wait(t0), Duration::from_secs(1));
    }

    fn call(tool: &str, args: Value) -> Value {
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":tool,"arguments":args}})
    }

    #[test]
    fn deadlines() {
        assert_eq!(
            deadline_for(&json!({"method":"tools/list"})),
            Duration::from_secs(10)
        );
        assert_eq!(
            deadline_for(&call("session", json!({"action":"list"}))),
            Duration::from_secs(10)
        );
        assert_eq!(
            deadline_for(&call(
                "session",
                json!({"action":"wait","timeout_ms":20_000})
            )),
            Duration::from_secs(25)
        );
        assert_eq!(
            deadline_for(&call(
                "agent",
                json!({"action":"wait","timeout_ms":9_999_999})
            )),
            Duration::from_secs(300)
        );
        // No timeout: the node waits its 60 s default, the bridge 60 s + 5 s.
        assert_eq!(
            deadline_for(&call("agent", json!({"action":"wait"}))),
            Duration::from_secs(65)
        );
        assert_eq!(
            deadline_for(&call(
                "call_tool",
                json!({"name":"session","arguments":{"action":"wait","timeout_ms":1000}})
            )),
            Duration::from_secs(6)
        );
        assert_eq!(
            deadline_for(&call("ui", json!({"action":"confirm"}))),
            Duration::from_secs(305)
        );
        for a in ["worktree_remove", "worktree_list", "branch_integrations"] {
            assert_eq!(
                deadline_for(&call("repo", json!({"action": a}))),
                Duration::from_secs(305),
                "{a}"
            );
        }
        assert_eq!(
            deadline_for(&call("repo", json!({"action":"list"}))),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn versions() {
        let m =
            json!({"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}});
        assert_eq!(request_version(&m, Some("2025-03-26")), "2026-07-28");
        assert_eq!(
            request_version(&json!({}), Some("2025-03-26")),
            "2025-03-26"
        );
        assert_eq!(request_version(&json!({}), None), "2025-11-25");
    }

    #[test]
    fn offline_envelopes() {
        let why = Offline::NotRunning("socket /s".into());
        let list = json!({"jsonrpc":"2.0","id":7,"method":"tools/list"});
        assert_eq!(
            offline_answer(&list, "2026-07-28", &why, None),
            json!({"jsonrpc":"2.0","id":7,"result":{"tools":[],"resultType":"complete","ttlMs":0,"cacheScope":"private"}})
        );
        assert_eq!(
            offline_answer(
                &list,
                "2025-11-25",
                &why,
                Some(&json!([{"name":"session"}]))
            ),
            json!({"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"session"}]}})
        );
        let c = offline_answer(&call("session", json!({})), "2026-07-28", &why, None);
        assert_eq!(c["result"]["isError"], json!(true));
        assert_eq!(c["result"]["resultType"], json!("complete"));
        assert!(
            c["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("not running")
        );
        let legacy = offline_answer(&call("session", json!({})), "2025-11-25", &why, None);
        assert!(legacy["result"].get("resultType").is_none());
        let other = offline_answer(
            &json!({"id":1,"method":"resources/list"}),
            "2025-11-25",
            &why,
            None,
        );
        assert_eq!(other["error"]["code"], json!(-32000));
    }
}
