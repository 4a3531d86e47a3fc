//! `ui`: talk to the user through connected UIs. `toast` is published on the event bus with
//! its sound resolved here, so every client plays a concrete sound.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tuic_proto::events::Event;

use crate::args;
use crate::mcp::registry::{CallCtx, Exec, ToolDef, ToolError, action, schema};
use crate::state::Node;

const ACTIONS: &[&str] = &["toast", "confirm", "tab"];
const SOUNDS: &[&str] = &[
    "question",
    "completion",
    "error",
    "warning",
    "info",
    "attention",
];
const LEVELS: &[&str] = &["info", "warn", "error"];

pub(super) static TOOL: ToolDef = ToolDef {
    name: "ui",
    summary: "Show a toast, ask a yes/no question, or open a tab in the UI",
    description: "Reach the user through the connected UIs.\n\
- toast (message, title?, level=info|warn|error, sound?): sound is true/false or one of question, completion, error, warning, info, attention; true follows the level. Use attention when you are blocked on the user.\n\
- confirm (message, title?): a yes/no dialog; blocks up to 300 s.\n\
- tab (url, title?, focus?, id?): tuic://open/<abs path>, tuic://edit/<abs path> or http(s), in every attached UI; the path must be in a registered repository; other tuic:// refused.",
    actions: ACTIONS,
    schema: || {
        schema(
            ACTIONS,
            json!({
                "message": {"type": "string"},
                "title": {"type": "string"},
                "level": {"type": "string", "enum": LEVELS},
                "sound": {"oneOf": [{"type": "boolean"}, {"type": "string", "enum": SOUNDS}]},
                "url": {"type": "string"},
                "focus": {"type": "boolean"},
                "id": {"type": "string"}
            }),
        )
    },
    handler,
    exec: &[("confirm", Exec::Blocking)],
    passthrough: false,
};

/// Resolves the `sound` argument: `true` follows the level, a name overrides it, an unknown
/// name is an error (never a silently silent toast). `None` is no sound.
pub(crate) fn resolve_sound(
    level: &str,
    sound: Option<&Value>,
) -> Result<Option<String>, ToolError> {
    match sound {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(None),
        Some(Value::Bool(true)) => Ok(Some(
            match level {
                "warn" => "warning",
                "error" => "error",
                _ => "info",
            }
            .into(),
        )),
        Some(Value::String(s)) if SOUNDS.contains(&s.as_str()) => Ok(Some(s.clone())),
        Some(other) => Err(ToolError::invalid(format!(
            "ui: unknown sound {other}; one of true, false, {}",
            SOUNDS.join(", ")
        ))),
    }
}

/// The typed arguments of `ui`'s actions (`crate::args`); `tab`'s are `ui_tab::TabArgs`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Call {
    Toast(ToastArgs),
    Confirm(ConfirmArgs),
    Tab(super::ui_tab::TabArgs),
}

#[derive(Debug, Deserialize)]
struct ToastArgs {
    #[serde(default, deserialize_with = "args::string")]
    message: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    title: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    level: Option<String>,
    /// `true`/`false` or a sound name: checked by [`resolve_sound`].
    #[serde(default)]
    sound: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ConfirmArgs {
    #[serde(default, deserialize_with = "args::string")]
    message: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    title: Option<String>,
}

/// A non-empty `message`, which toast and confirm both require.
fn message(m: Option<String>) -> Result<String, ToolError> {
    m.filter(|m| !m.is_empty())
        .ok_or_else(|| ToolError::invalid("ui: message is required"))
}

fn handler(node: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    match args::action(action("ui", ACTIONS, args)?, args)? {
        Call::Toast(t) => {
            let message = message(t.message)?;
            let level = t.level.unwrap_or_else(|| "info".into());
            if !LEVELS.contains(&level.as_str()) {
                return Err(ToolError::invalid(format!("ui: unknown level {level}")));
            }
            let sound = resolve_sound(&level, t.sound.as_ref())?;
            let origin = caller_origin(node, ctx);
            node.bus.publish(Event::McpToast {
                title: t.title,
                message,
                level: level.clone(),
                sound: sound.clone(),
                origin_repo_path: origin.repo_path,
                origin_session_id: origin.session_id,
            });
            let mut out = json!({"ok": true, "level": level});
            if let Some(s) = sound {
                out["sound"] = json!(s);
            }
            Ok(out)
        }
        Call::Confirm(c) => confirm(node, ctx, c),
        Call::Tab(t) => {
            let o = caller_origin(node, ctx);
            super::ui_tab::tab(node, t, o.repo_path, o.session_id)
        }
    }
}

/// Where a toast came from, resolved from the caller's binding (callers never supply it).
struct Origin {
    /// The caller's peer project, else its PTY's working directory.
    repo_path: Option<String>,
    /// The caller's TUIC session, only when it is bound to a live terminal: a wrong id would
    /// send the user's click to somebody else's terminal.
    session_id: Option<String>,
}

fn caller_origin(node: &Node, ctx: &CallCtx) -> Origin {
    let Some(t) = ctx.tuic_session.as_deref() else {
        return Origin {
            repo_path: None,
            session_id: None,
        };
    };
    let project = node.mail.lock().peers.get(t).and_then(|p| p.path.clone());
    let pty = node.sessions.live(t);
    Origin {
        repo_path: project.or_else(|| pty.as_ref().map(|s| s.cwd.clone())),
        session_id: pty.map(|s| s.tuic_session.clone()),
    }
}

/// Publishes the question and blocks (on the blocking pool) until a UI answers through
/// `POST /mcp/confirm-response` or the answer window closes.
fn confirm(node: &Arc<Node>, ctx: &CallCtx, c: ConfirmArgs) -> Result<Value, ToolError> {
    let message = message(c.message)?;
    let request_id = uuid::Uuid::new_v4().to_string();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    node.mcp
        .confirms
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(request_id.clone(), tx);
    node.bus.publish(Event::McpConfirm {
        request_id: request_id.clone(),
        message,
        title: c.title,
        origin_session_id: caller_origin(node, ctx).session_id,
    });
    let window = std::time::Duration::from_millis(node.config().tuning.mcp_confirm_timeout_ms);
    let answer = rx.recv_timeout(window).ok();
    // Whoever wins, the entry goes and every UI is told to drop the dialog.
    node.mcp
        .confirms
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&request_id);
    let confirmed = answer.unwrap_or(false);
    node.bus.publish(Event::McpConfirmResolved {
        request_id: request_id.clone(),
        confirmed,
    });
    Ok(match answer {
        Some(c) => json!({"confirmed": c, "request_id": request_id}),
        None => json!({"confirmed": false, "request_id": request_id,
            "reason": format!("no answer within {}s", window.as_secs())}),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sound_resolution() {
        assert_eq!(
            resolve_sound("warn", Some(&json!(true)))
                .unwrap()
                .as_deref(),
            Some("warning")
        );
        assert_eq!(
            resolve_sound("info", Some(&json!("attention")))
                .unwrap()
                .as_deref(),
            Some("attention")
        );
        assert_eq!(resolve_sound("error", None).unwrap(), None);
        assert!(resolve_sound("info", Some(&json!("kazoo"))).is_err());
    }
}
