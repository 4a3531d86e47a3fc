//! `config`: read and save `config.json` through the same redaction and `{base, config}`
//! three-way save as `GET/PUT /config`. Disabled by default (`disabled_native_tools`).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tuic_proto::events::Event;

use crate::args;
use crate::config::SaveError;
use crate::mcp::registry::{CallCtx, Exec, ToolDef, ToolError, action, schema};
use crate::state::Node;

const ACTIONS: &[&str] = &["get", "save"];

pub(super) static TOOL: ToolDef = ToolDef {
    name: "config",
    summary: "Read or change this node's settings (secrets redacted)",
    description: "This node's config.json.\n\
- get: the redacted document (secrets appear only as *_exists booleans).\n\
- save (base, config): base is the document you read, config your edited copy; only your changes are applied to the latest file. Secrets cannot be written. Local clients only.",
    actions: ACTIONS,
    schema: || {
        schema(
            ACTIONS,
            json!({"base": {"type": "object"}, "config": {"type": "object"}}),
        )
    },
    handler,
    exec: &[("save", Exec::Blocking)],
    passthrough: false,
};

/// The typed arguments of `config`'s actions (`crate::args`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Call {
    Get {},
    Save {
        #[serde(default)]
        base: Option<Value>,
        #[serde(default)]
        config: Option<Value>,
    },
}

fn handler(node: &Arc<Node>, _: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    // `save` is local-only: the remote rights table (`mcp::rights`) refused it at dispatch.
    match args::action(action("config", ACTIONS, args)?, args)? {
        Call::Get {} => Ok(node.config().redacted()),
        Call::Save { base, config } => {
            let (Some(base), Some(edited)) = (
                base.filter(Value::is_object),
                config.filter(Value::is_object),
            ) else {
                return Err(ToolError::invalid(
                    "config: base and config must be JSON objects",
                ));
            };
            let saved = node
                .config_file
                .save_delta(&base, &edited)
                .map_err(|e| match e {
                    SaveError::SecretField(_) | SaveError::Invalid(_) => {
                        ToolError::invalid(e.to_string())
                    }
                    SaveError::Io(_) => ToolError::new("internal", e.to_string()),
                })?;
            let remote = saved.remote_access_enabled;
            node.set_config(saved);
            node.bus.publish(Event::ConfigChanged {
                remote_access_enabled: remote,
            });
            // A changed tool surface is announced by the registry's watcher.
            node.mcp.surface_maybe_changed(node);
            Ok(node.config().redacted())
        }
    }
}
