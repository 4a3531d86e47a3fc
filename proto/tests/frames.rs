//! Golden peer-link frames: each sample in `tests/data/peer/` decodes to the expected value and
//! the value encodes back to the same JSON, so a change that breaks an old peer fails here.

mod common;

use serde_json::Value;
use tuic_proto::mail::{InboxMessage, Lifecycle};
use tuic_proto::peer::{
    AckOutcome, ErrorCode, Frame, LinkRole, PeerEntry, Receipt, ReceiptOutcome, WireMessage,
};

fn a(n: u8) -> String {
    format!("550e8400-e29b-41d4-a716-446655440a0{n}")
}

fn expected() -> Vec<(&'static str, Frame)> {
    let mid = "076546d8-80b0-4fa1-965f-1e31366e3506".to_owned();
    vec![
        (
            "hello",
            Frame::Hello {
                protocol_version: 1,
                node_id: "hub-main".into(),
                role: LinkRole::Hub,
            },
        ),
        ("ping", Frame::Ping { nonce: 7 }),
        ("pong", Frame::Pong { nonce: 7 }),
        (
            "register",
            Frame::Register {
                id: 1,
                peers: vec![
                    PeerEntry {
                        tuic_session: a(1),
                        name: Some("builder".into()),
                        orchestrator: false,
                        address: None,
                        alias: Some("tu-1".into()),
                        session_id: Some("pty-3".into()),
                        path: Some("/home/op/repo".into()),
                    },
                    PeerEntry {
                        tuic_session: a(2),
                        name: None,
                        orchestrator: true,
                        address: None,
                        alias: None,
                        session_id: None,
                        path: None,
                    },
                ],
            },
        ),
        ("register_ack", Frame::RegisterAck { id: 1 }),
        (
            "list_peers",
            Frame::ListPeers {
                id: 2,
                path: Some("/home/op/repo".into()),
            },
        ),
        (
            "peers",
            Frame::Peers {
                id: 2,
                peers: vec![PeerEntry {
                    tuic_session: a(3),
                    name: Some("reviewer".into()),
                    orchestrator: false,
                    address: Some(format!("nodec/{}", a(3))),
                    alias: None,
                    session_id: None,
                    path: None,
                }],
            },
        ),
        (
            "send",
            Frame::Send {
                id: 3,
                message: WireMessage {
                    message_id: mid.clone(),
                    from: a(1),
                    to: format!("nodec/{}", a(3)),
                    message: "tests pass on B".into(),
                    timestamp_ms: 1_764_684_000_123,
                    from_name: Some("builder".into()),
                    kind: None,
                    lifecycle: None,
                },
            },
        ),
        (
            "send_lifecycle",
            Frame::Send {
                id: 4,
                message: WireMessage {
                    message_id: "tuic-auto-8c261794-idle-1".into(),
                    from: format!("nodeb/{}", a(4)),
                    to: a(1),
                    message: "idle".into(),
                    timestamp_ms: 1_764_684_000_456,
                    from_name: None,
                    kind: Some("state_change".into()),
                    lifecycle: Some(Lifecycle {
                        child: "8c261794".into(),
                        state: "idle".into(),
                    }),
                },
            },
        ),
        (
            "send_ack",
            Frame::SendAck {
                id: 3,
                message_id: mid.clone(),
                outcome: AckOutcome::Delivered,
            },
        ),
        (
            "inbox",
            Frame::Inbox {
                id: 5,
                recipient: a(1),
                since: Some(1_764_684_000_123),
                limit: Some(10),
            },
        ),
        (
            "inbox_page",
            Frame::InboxPage {
                id: 5,
                messages: vec![InboxMessage {
                    message_id: mid.clone(),
                    from: format!("nodec/{}", a(3)),
                    from_name: Some("reviewer".into()),
                    message: "looks good".into(),
                    timestamp_ms: 1_764_684_000_999,
                    kind: None,
                }],
                has_more: false,
                next_since: 1_764_684_000_999,
                missed_count: 0,
            },
        ),
        (
            "wait",
            Frame::Wait {
                id: 6,
                recipient: a(1),
                since: None,
                timeout_ms: Some(60_000),
            },
        ),
        (
            "wait_result",
            Frame::WaitResult {
                id: 6,
                met: false,
                timed_out: true,
                new_messages: vec![],
                next_since: 1_764_684_000_999,
                missed_count: 0,
            },
        ),
        (
            "receipt",
            Frame::Receipt(Receipt {
                message_id: mid.clone(),
                from: a(1),
                to: format!("nodec/{}", a(3)),
                outcome: ReceiptOutcome::Delivered,
                connection: "nodec".into(),
                code: None,
                message: None,
            }),
        ),
        (
            "receipt_refused",
            Frame::Receipt(Receipt {
                message_id: "5f0c1e2a-4b7d-4c1e-9a55-0d2f7e3b9c11".into(),
                from: a(1),
                to: format!("nodec/{}", a(9)),
                outcome: ReceiptOutcome::Refused,
                connection: "nodec".into(),
                code: Some(ErrorCode::UnknownRecipient),
                message: Some("recipient is not registered".into()),
            }),
        ),
        (
            "error",
            Frame::Error {
                id: Some(3),
                code: ErrorCode::OutboxFull,
                connection: "nodec".into(),
                message: "outbox for connection 'nodec' is full (1000 messages, 52000 bytes held)"
                    .into(),
            },
        ),
        (
            "upstream_tools_changed",
            Frame::UpstreamToolsChanged { generation: 7 },
        ),
        ("list_upstream_tools", Frame::ListUpstreamTools { id: 11 }),
        (
            "upstream_tools",
            Frame::UpstreamTools {
                id: 11,
                generation: 7,
                tools: vec![serde_json::json!({
                    "name": "py__echo",
                    "description": "Echo the given text back unchanged.",
                    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
                })],
            },
        ),
        (
            "call_upstream_tool",
            Frame::CallUpstreamTool {
                id: 12,
                name: "py__add".into(),
                arguments: serde_json::json!({"a": 2, "b": 40})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                timeout_ms: 300_000,
                progress: false,
            },
        ),
        (
            "call_upstream_tool_progress",
            Frame::CallUpstreamTool {
                id: 13,
                name: "py__progress_steps".into(),
                arguments: serde_json::json!({"steps": 3})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                timeout_ms: 300_000,
                progress: true,
            },
        ),
        (
            "upstream_progress",
            Frame::UpstreamProgress {
                call_id: 13,
                params: serde_json::json!({"progress": 2, "total": 3, "message": "step 2"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                coalesced: 5,
            },
        ),
        (
            "upstream_result",
            Frame::UpstreamResult {
                id: 12,
                result: serde_json::json!({
                    "content": [{"type": "text", "text": "{\"sum\": 42}"}],
                    "structuredContent": {"sum": 42},
                    "isError": false,
                    "x-extension": {"kept": true}
                }),
            },
        ),
        (
            "error_link",
            Frame::Error {
                id: None,
                code: ErrorCode::VersionMismatch,
                connection: "nodeb".into(),
                message: "peer protocol 2 not supported, this side speaks 1".into(),
            },
        ),
    ]
}

fn sample(name: &str) -> String {
    common::sample("peer", name)
}

#[test]
fn every_golden_frame_decodes_to_its_value() {
    for (name, frame) in expected() {
        let decoded = Frame::decode(&sample(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(decoded, frame, "{name}");
    }
}

#[test]
fn every_frame_encodes_to_its_golden_sample() {
    for (name, frame) in expected() {
        let encoded: Value = serde_json::from_str(&frame.encode()).expect("own output is JSON");
        let golden: Value = serde_json::from_str(&sample(name)).expect("golden is JSON");
        assert_eq!(encoded, golden, "{name}");
    }
}

#[test]
fn every_golden_file_is_covered() {
    let (files, names) = common::sample_names("peer", expected().iter().map(|(n, _)| *n));
    assert_eq!(files, names);
}

#[test]
fn process_creation_and_unknown_frames_do_not_decode() {
    for text in [
        r#"{"type":"spawn","id":9,"prompt":"rm -rf /"}"#,
        r#"{"type":"session_create","id":9}"#,
        r#"{"type":"send","id":3}"#,
        r#"{"id":3}"#,
        "not json",
    ] {
        assert!(Frame::decode(text).is_err(), "{text}");
    }
}
