//! `completion/complete` for prompt arguments and resource-template variables: session
//! aliases, hosts, repository and worktree paths, agent names, branch names. At most
//! [`MAX_VALUES`] values, matched by prefix (case-insensitive); an argument value over
//! [`MAX_VALUE_BYTES`] is refused before any work.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{RpcError, parse};
use crate::state::Node;

/// Values in one answer (the spec's maximum).
pub(crate) const MAX_VALUES: usize = 100;
/// Longest argument value completed.
pub(crate) const MAX_VALUE_BYTES: usize = 1024;

#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
enum Ref {
    #[serde(rename = "ref/prompt")]
    Prompt { name: String },
    #[serde(rename = "ref/resource")]
    Resource { uri: String },
}

#[derive(Debug, Deserialize)]
struct Argument {
    name: String,
    value: String,
}

#[derive(Debug, Deserialize)]
struct CompleteParams {
    #[serde(rename = "ref")]
    reference: Ref,
    argument: Argument,
    /// Values of other arguments already chosen (unused: no completion here depends on them).
    #[serde(default)]
    #[allow(dead_code)]
    context: Option<Value>,
}

/// What kind of value an argument takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Alias,
    Host,
    Path,
    Agent,
    Branch,
    RepoName,
    None,
}

fn kind(reference: &Ref, arg: &str) -> Result<Kind, RpcError> {
    Ok(match reference {
        Ref::Prompt { name } => {
            if !super::prompts::PROMPTS.iter().any(|(n, ..)| n == name) {
                return Err(RpcError::invalid(format!(
                    "no prompt {name}; prompts/list names them"
                )));
            }
            match arg {
                "worktree" | "cwd" => Kind::Path,
                "agent" => Kind::Agent,
                "host" => Kind::Host,
                "branch" => Kind::Branch,
                "session" | "alias" => Kind::Alias,
                _ => Kind::None,
            }
        }
        Ref::Resource { uri } => match (uri.as_str(), arg) {
            (u, "alias") if u.starts_with("tuic://sessions/{alias}") => Kind::Alias,
            ("tuic://repos/{name}", "name") => Kind::RepoName,
            _ => {
                return Err(RpcError::invalid(format!(
                    "no template variable {arg} in {uri}; resources/templates/list names them"
                )));
            }
        },
    })
}

fn candidates(node: &Arc<Node>, k: Kind) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    match k {
        Kind::Alias => {
            for r in node.sessions.rows() {
                out.insert(if r.alias.is_empty() {
                    r.session_id
                } else {
                    r.alias
                });
            }
        }
        Kind::Host => {
            out.insert(
                rustix::system::uname()
                    .nodename()
                    .to_string_lossy()
                    .into_owned(),
            );
            for r in node.ext.remote_rows() {
                if let Some(h) = r.row.get("host").and_then(Value::as_str) {
                    out.insert(h.to_owned());
                }
            }
        }
        Kind::Path | Kind::Branch | Kind::RepoName => {
            for r in node.repos.list().unwrap_or_default() {
                match k {
                    Kind::Path => {
                        out.insert(r.path.clone());
                        for w in r.declared_worktrees.values() {
                            out.insert(w.worktree_path.clone());
                        }
                    }
                    Kind::Branch => {
                        out.extend(r.branch.clone());
                        for w in r.declared_worktrees.values() {
                            out.extend(w.worktree_branch.clone());
                        }
                    }
                    _ => {
                        out.insert(r.name.clone());
                    }
                }
            }
        }
        Kind::Agent => {
            out.extend(
                crate::session::activity::AGENTS
                    .iter()
                    .map(|a| (*a).to_owned()),
            );
        }
        Kind::None => {}
    }
    out
}

/// `completion/complete`.
pub(crate) fn complete(node: &Arc<Node>, params: &Map<String, Value>) -> Result<Value, RpcError> {
    let big = params
        .get("argument")
        .and_then(|a| a.get("value"))
        .and_then(Value::as_str)
        .is_some_and(|v| v.len() > MAX_VALUE_BYTES);
    if big {
        return Err(RpcError::invalid(format!(
            "completion/complete: argument.value is over {MAX_VALUE_BYTES} bytes; complete a shorter prefix"
        )));
    }
    let p: CompleteParams = parse("completion/complete", params)?;
    let k = kind(&p.reference, &p.argument.name)?;
    let prefix = p.argument.value.to_lowercase();
    let matches: Vec<String> = candidates(node, k)
        .into_iter()
        .filter(|c| c.to_lowercase().starts_with(&prefix))
        .collect();
    let total = matches.len();
    let values: Vec<String> = matches.into_iter().take(MAX_VALUES).collect();
    Ok(json!({"completion": {"values": values, "total": total, "hasMore": total > MAX_VALUES}}))
}
