//! `secret`: credentials an agent uses without seeing them (`crate::secrets`). `request`
//! asks the person through a form, `run` runs a command with the value in its environment
//! and returns output masked of it, `remove` deletes it. No action returns a value.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{Deserializer, Error as _};
use serde_json::{Map, Value, json};
use zeroize::Zeroizing;

use crate::args;
use crate::audit::{Actor, Event};
use crate::mcp::registry::{CallCtx, Exec, ToolDef, ToolError, action, schema};
use crate::secrets::{DEFAULT_RUN_MS, SecretError};
use crate::state::Node;

const ACTIONS: &[&str] = &["request", "run", "remove"];

/// Longest `timeout_ms` of a run (290 s, under the 301 s request deadline).
const MAX_RUN_MS: u64 = 290_000;

pub(super) static TOOL: ToolDef = ToolDef {
    name: "secret",
    summary: "Use a credential the person typed, without ever seeing it",
    description: "Use credentials without seeing them.\n\
- request (name, reason): ask the person (status pending|stored).\n\
- run (name, command, cwd?, timeout_ms?): argv or sh -c string, with $name set; output masked. The person approves each exact argv+cwd once (consent_required: retry after).\n\
- remove (name).",
    actions: ACTIONS,
    schema: || {
        schema(
            ACTIONS,
            json!({
                "name": {"type": "string"},
                "reason": {"type": "string"},
                "command": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
                "cwd": {"type": "string"},
                "timeout_ms": {"type": "integer"}
            }),
        )
    },
    handler,
    exec: &[
        ("request", Exec::Blocking),
        ("run", Exec::Blocking),
        ("remove", Exec::Blocking),
    ],
    passthrough: false,
};

/// The typed arguments of `secret`'s actions (`crate::args`). Each action refuses another
/// action's fields (`deny_unknown_fields`): a `reason` on `run` is a mistake worth naming.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Call {
    Request(RequestArgs),
    Run(RunArgs),
    Remove(RemoveArgs),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestArgs {
    #[serde(deserialize_with = "name")]
    name: String,
    #[serde(default, deserialize_with = "args::string")]
    reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunArgs {
    #[serde(deserialize_with = "name")]
    name: String,
    /// An argv, or a string run by `sh -c`.
    #[serde(deserialize_with = "command")]
    command: Vec<String>,
    #[serde(default, deserialize_with = "args::string")]
    cwd: Option<String>,
    #[serde(default, deserialize_with = "args::uint")]
    timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveArgs {
    #[serde(deserialize_with = "name")]
    name: String,
}

/// The required secret name (checked for shape by `crate::secrets::check_name`).
fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    args::string(d)?.ok_or_else(|| D::Error::custom("is required (a secret name)"))
}

/// `command`: an argv, or a string run as `sh -c <string>`.
fn command<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let bad = || D::Error::custom("must be a string or an array of strings");
    match Value::deserialize(d)? {
        Value::String(s) => Ok(vec!["sh".into(), "-c".into(), s]),
        Value::Array(v) => v
            .into_iter()
            .map(|a| match a {
                Value::String(s) => Ok(s),
                _ => Err(bad()),
            })
            .collect(),
        _ => Err(bad()),
    }
}

/// Reads action `a`'s arguments; a refusal names the action (`secret action=run: ...`).
fn parse(a: &str, args: &Map<String, Value>) -> Result<Call, ToolError> {
    let mut m = args.clone();
    m.remove("action");
    args::action(a, &m).map_err(|e| ToolError::invalid(format!("secret action={a}: {e}")))
}

impl From<SecretError> for ToolError {
    fn from(e: SecretError) -> Self {
        ToolError::new(e.code(), e.to_string())
    }
}

/// The caller as the audit names it.
pub(super) fn caller(ctx: &CallCtx) -> Actor {
    Actor {
        who: ctx
            .tuic_session
            .as_deref()
            .map_or_else(|| "mcp".to_owned(), |s| format!("agent:{s}")),
        via: if ctx.loopback { "ipc" } else { "tcp" }.into(),
        address: None,
    }
}

fn handler(node: &Arc<Node>, ctx: &CallCtx, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let a = action("secret", ACTIONS, args)?;
    let now = crate::logs::now_ms();
    let who = caller(ctx);
    match parse(a, args)? {
        Call::Request(r) => {
            let reason = r.reason.unwrap_or_default();
            crate::secrets::check_name(&r.name)?;
            if node.secrets.list()?.iter().any(|i| i.name == r.name) {
                return Ok(json!({"status": "stored", "name": r.name}));
            }
            let form = node.secrets.request(&r.name, &reason, &who.who, now)?;
            node.audit.record_or_warn(
                Event::new("secret_requested", &who)
                    .with("name", r.name.as_str())
                    .with("reason", reason.as_str()),
            );
            Ok(json!({
                "status": "pending",
                "name": form.name,
                "expires_ms": form.expires_ms,
                "message": "the person was asked through the UI (or `tuic secret`); call run once they answered",
            }))
        }
        Call::Run(r) => {
            let argv = r.command;
            let timeout =
                Duration::from_millis(r.timeout_ms.unwrap_or(DEFAULT_RUN_MS).min(MAX_RUN_MS));
            let program = Zeroizing::new(argv.first().cloned().unwrap_or_default());
            if !node.secrets.list()?.iter().any(|i| i.name == r.name) {
                return Err(SecretError::Missing(r.name).into());
            }
            // The spec's consent templates: only a run the person approved exactly.
            if !node.secrets.consented(&r.name, &argv, r.cwd.as_deref())? {
                let req = node.secrets.request_consent(
                    &r.name,
                    &argv,
                    r.cwd.as_deref(),
                    &who.who,
                    now,
                )?;
                node.audit.record_or_warn(
                    Event::new("secret_consent_requested", &who)
                        .with("name", r.name.as_str())
                        .with("program", program.as_str())
                        .with("args", argv.len())
                        .with("cwd", r.cwd.as_deref().map_or(Value::Null, Value::from)),
                );
                return Err(SecretError::ConsentRequired {
                    name: r.name,
                    expires_ms: req.expires_ms,
                }
                .into());
            }
            let out = node
                .secrets
                .run(&r.name, &argv, r.cwd.as_deref(), timeout)?;
            node.audit.record_or_warn(
                Event::new("secret_used", &who)
                    .with("name", r.name.as_str())
                    .with("program", program.as_str())
                    .with("exit_code", out.exit_code.map_or(Value::Null, Value::from))
                    .with("masked", out.masked),
            );
            Ok(json!(out))
        }
        Call::Remove(r) => {
            let removed = node.secrets.remove(&r.name)?;
            node.audit
                .record_or_warn(Event::new("secret_removed", &who).with("name", r.name.as_str()));
            Ok(json!({"ok": true, "removed": removed}))
        }
    }
}
