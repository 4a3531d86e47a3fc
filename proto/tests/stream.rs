//! Golden byte-stream frames (`WS /sessions/{id}/stream`): each sample in `tests/data/stream/`
//! decodes to the expected value and the value encodes back to the same JSON, so a change that
//! breaks an existing client (`tuic attach`, the web UI's history view, scripts) fails here.

mod common;

use serde_json::{Value, json};
use tuic_proto::stream::{Hello, StreamFrame};

fn expected() -> Vec<(&'static str, StreamFrame)> {
    vec![
        (
            "hello",
            StreamFrame::Hello(Hello {
                mode: "output".into(),
                offset: 4096,
                total_written: 5000,
                oldest_offset: 0,
            }),
        ),
        (
            "output",
            StreamFrame::Output {
                data: "$ ls\r\nCargo.toml  src\r\n\u{1b}[32mdone\u{1b}[0m é".into(),
            },
        ),
        (
            "log",
            StreamFrame::Log {
                lines: vec!["$ cargo build".into(), "   Compiling tuic v0.1.0".into()],
                offset: 17,
            },
        ),
        ("lagged", StreamFrame::Lagged { missed: 1_048_576 }),
        (
            "parsed",
            StreamFrame::Parsed {
                event: json!({"type": "question", "text": "Proceed? (y/n)", "options": ["y", "n"]}),
            },
        ),
        ("exit", StreamFrame::Exit { exit_code: Some(2) }),
        ("exit_signal", StreamFrame::Exit { exit_code: None }),
        ("closed", StreamFrame::Closed),
    ]
}

fn sample(name: &str) -> String {
    common::sample("stream", name)
}

#[test]
fn every_golden_stream_frame_decodes_to_its_value() {
    for (name, frame) in expected() {
        let decoded: StreamFrame =
            serde_json::from_str(&sample(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(decoded, frame, "{name}");
    }
}

#[test]
fn every_stream_frame_encodes_to_its_golden_sample() {
    for (name, frame) in expected() {
        let encoded: Value = serde_json::from_str(&frame.to_text()).expect("own output is JSON");
        let golden: Value = serde_json::from_str(&sample(name)).expect("golden is JSON");
        assert_eq!(encoded, golden, "{name}");
    }
}

#[test]
fn every_golden_stream_file_is_covered() {
    let (files, names) = common::sample_names("stream", expected().iter().map(|(n, _)| *n));
    assert_eq!(files, names);
}

#[test]
fn malformed_and_unknown_stream_frames_do_not_decode() {
    for text in [
        r#"{"type":"output"}"#,
        r#"{"type":"lagged","missed":-1}"#,
        r#"{"type":"exit","exit_code":"x"}"#,
        r#"{"type":"diff","seq":1}"#,
        r#"{"data":"no tag"}"#,
        "not json",
    ] {
        assert!(serde_json::from_str::<StreamFrame>(text).is_err(), "{text}");
    }
}
