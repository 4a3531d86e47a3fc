//! Test-only fixture tools of the official MCP conformance suite, registered as run-time tools
//! when `mcp_conformance_fixtures` is true in config.json (default false; never enable it on a
//! node agents use). They let the suite's `tools-call-*` scenarios score; they are not part of
//! the tuic tool family and do not appear in `GET /mcp/status`'s `native_tools`.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::registry::{CallCtx, ToolDef, ToolError};
use crate::state::Node;

/// A 1×1 transparent PNG.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/// A 44-byte empty WAV header.
const WAV_EMPTY: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";

fn empty_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

fn resource() -> Value {
    json!({"type": "resource", "resource": {"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}})
}

fn handler(_: &Arc<Node>, _: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let which = args
        .get("__fixture")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Ok(match which {
        "image" => {
            json!({"content": [{"type": "image", "data": PNG_1X1, "mimeType": "image/png"}]})
        }
        "audio" => {
            json!({"content": [{"type": "audio", "data": WAV_EMPTY, "mimeType": "audio/wav"}]})
        }
        "resource" => json!({"content": [resource()]}),
        "mixed" => json!({"content": [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": PNG_1X1, "mimeType": "image/png"},
            resource()
        ]}),
        "error" => {
            json!({"content": [{"type": "text", "text": "This tool intentionally returns an error for testing"}], "isError": true})
        }
        "logging" => {
            json!({"content": [{"type": "text", "text": "Tool with logging executed successfully"}]})
        }
        _ => {
            json!({"content": [{"type": "text", "text": "This is a simple text response for testing."}]})
        }
    })
}

macro_rules! fixture {
    ($name:literal, $which:literal) => {{
        fn h(n: &Arc<Node>, c: &CallCtx, a: &Map<String, Value>) -> Result<Value, ToolError> {
            let mut a = a.clone();
            a.insert("__fixture".into(), json!($which));
            handler(n, c, &a)
        }
        ToolDef {
            name: $name,
            summary: "conformance fixture",
            description: "Conformance-suite fixture tool (test-only switch mcp_conformance_fixtures).",
            actions: &[],
            schema: empty_schema,
            handler: h,
            exec: &[],
            passthrough: true,
        }
    }};
}

/// Registers the fixtures as run-time tools.
pub(crate) fn register(registry: &super::registry::Registry) {
    for def in [
        fixture!("test_simple_text", "text"),
        fixture!("test_image_content", "image"),
        fixture!("test_audio_content", "audio"),
        fixture!("test_embedded_resource", "resource"),
        fixture!("test_multiple_content_types", "mixed"),
        fixture!("test_error_handling", "error"),
        fixture!("test_logging_tool", "logging"),
    ] {
        registry.add(Arc::new(def));
    }
    registry.add(Arc::new(ToolDef {
        name: "test_trigger_tool_change",
        summary: "conformance fixture",
        description: "Conformance-suite fixture: adds or removes a temporary tool, so the tool list changes.",
        actions: &[],
        schema: empty_schema,
        handler: trigger,
        exec: &[],
        passthrough: true,
    }));
}

fn trigger(node: &Arc<Node>, _: &CallCtx, _: &Map<String, Value>) -> Result<Value, ToolError> {
    let name = "test_temporary_tool";
    if !node.mcp.remove_tool(name) {
        node.mcp
            .add_tool(Arc::new(fixture!("test_temporary_tool", "text")));
    }
    Ok(json!({"content": [{"type": "text", "text": "tool list changed"}]}))
}
