//! Channel push: `notifications/claude/channel` on the `GET /mcp` stream of a registered
//! external client that has no managed PTY.
//!
//! A push is a best-effort notification, not delivery: it takes no delivery lease, so the
//! message stays in the inbox and a later `agent action=wait` or `inbox` still returns it
//! (recipients dedupe on `meta.message_id`). The sender is named by its validated UUID, never by
//! its peer-controlled display name. Bodies of at most [`INLINE_MAX`] bytes may travel inline;
//! a larger body (or any peer mail to a registered orchestrator, whose peer payloads stay in the
//! inbox) becomes a pointer notice under [`POINTER_MAX`] bytes.

use serde_json::{Value, json};

use super::wake::NOTICE;

/// Largest body sent inline, in bytes.
pub(crate) const INLINE_MAX: usize = 200;
/// A pointer notice stays under this many bytes (checked by the tests).
#[cfg(test)]
pub(crate) const POINTER_MAX: usize = 300;
/// Bytes of the first line quoted in a pointer notice.
const PREVIEW_MAX: usize = 80;

/// The JSON-RPC notification for one message.
pub(crate) fn notification(
    from: &str,
    message_id: &str,
    body: &str,
    inline_allowed: bool,
) -> Value {
    let content = if inline_allowed && body.len() <= INLINE_MAX {
        body.to_owned()
    } else {
        pointer(from, message_id, body)
    };
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/claude/channel",
        "params": {
            "content": content,
            "meta": {"from_tuic_session": from, "message_id": message_id},
        }
    })
}

/// The pointer notice: the inbox wake line, then sender UUID, message id, byte count and up to
/// 80 bytes of the first line with control characters removed.
pub(crate) fn pointer(from: &str, message_id: &str, body: &str) -> String {
    let first: String = body
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    let preview = truncate_bytes(&first, PREVIEW_MAX);
    format!(
        "{NOTICE}\nfrom {from} id {message_id} {} bytes: {preview}",
        body.len()
    )
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn truncate_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    const FROM: &str = "550e8400-e29b-41d4-a716-446655440a01";
    const ID: &str = "076546d8-80b0-4fa1-965f-1e31366e3506";

    #[test]
    fn small_bodies_inline_large_ones_point_at_the_inbox() {
        let n = notification(FROM, ID, "hello", true);
        assert_eq!(n["method"], "notifications/claude/channel");
        assert_eq!(n["params"]["content"], "hello");
        assert_eq!(n["params"]["meta"]["from_tuic_session"], FROM);
        assert_eq!(n["params"]["meta"]["message_id"], ID);
        let big = format!("Large report\u{7}\n{}", "x".repeat(10_000));
        let p = notification(FROM, ID, &big, true);
        let c = p["params"]["content"].as_str().unwrap();
        assert_eq!(
            c,
            format!(
                "{NOTICE}\nfrom {FROM} id {ID} {} bytes: Large report",
                big.len()
            )
        );
        assert!(c.len() < POINTER_MAX);
        // An orchestrator never gets the payload, however small.
        let o = notification(FROM, ID, "hello", false);
        assert!(o["params"]["content"].as_str().unwrap().starts_with(NOTICE));
    }

    #[test]
    fn the_preview_is_cut_on_a_character_boundary_and_stays_under_the_bound() {
        let body = "é".repeat(300);
        let c = pointer(FROM, &format!("tuic-auto-{ID}"), &body);
        assert!(c.len() < POINTER_MAX, "{}", c.len());
        assert!(c.ends_with(&"é".repeat(40)));
    }
}
