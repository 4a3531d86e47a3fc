//! `agent action=spawn`: a child agent in a new managed PTY, its inbox, its task handle and
//! the lifecycle notices (`state_change`: idle / completed / exited) it posts to its parent.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_proto::mail::Lifecycle;

use super::Mail;
use crate::session::activity::{self, ShellState};
use crate::session::{CreateRequest, Session};
use crate::state::Node;

/// Largest derived `pty_description`, in characters.
pub const DESCRIPTION_MAX: usize = 160;

/// A validated spawn.
#[derive(Debug, Clone, Default)]
pub struct SpawnRequest {
    /// The agent CLI.
    pub command: String,
    /// Its arguments (`{prompt}` is substituted where it appears).
    pub args: Vec<String>,
    /// Working directory.
    pub cwd: Option<String>,
    /// The task prompt.
    pub prompt: Option<String>,
    /// Extra environment (TUIC_SESSION / TUIC_PARENT are applied after it).
    pub env: HashMap<String, String>,
    /// Peer and PTY display name.
    pub name: Option<String>,
    /// `None`: derive from the prompt; `Some(None)`: explicitly none.
    pub pty_description: Option<Option<String>>,
    /// The identity of a registered caller.
    pub parent: Option<String>,
    /// Identities allowed to read the task.
    pub owners: Vec<String>,
}

/// The argv the child gets: `{prompt}` substituted where authored, else the prompt appended
/// as the final positional argument.
pub fn compose_args(args: &[String], prompt: Option<&str>) -> Vec<String> {
    let Some(p) = prompt else {
        return args.to_vec();
    };
    if args.iter().any(|a| a.contains("{prompt}")) {
        return args.iter().map(|a| a.replace("{prompt}", p)).collect();
    }
    let mut v = args.to_vec();
    v.push(p.to_owned());
    v
}

/// Display metadata derived from a prompt: whitespace-normalised, at most 160 characters.
pub fn derive_description(prompt: &str) -> Option<String> {
    let norm = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    if norm.is_empty() {
        return None;
    }
    Some(norm.chars().take(DESCRIPTION_MAX).collect())
}

/// Starts the child. Blocking (fork/exec): call off the async workers.
pub fn spawn(node: &Arc<Node>, req: SpawnRequest) -> Result<Value, String> {
    let mut env = req.env.clone();
    env.remove("TUIC_SESSION");
    env.remove("TUIC_PARENT");
    if let Some(p) = &req.parent {
        env.insert("TUIC_PARENT".into(), p.clone());
    }
    let description = match &req.pty_description {
        Some(Some(d)) if !d.is_empty() => Some(d.chars().take(DESCRIPTION_MAX).collect()),
        Some(_) => None,
        None => req.prompt.as_deref().and_then(derive_description),
    };
    let session = node
        .sessions
        .create(
            node,
            CreateRequest {
                shell: Some(req.command.clone()),
                args: compose_args(&req.args, req.prompt.as_deref()),
                cwd: req.cwd.clone(),
                env,
                name: req.name.clone(),
                ..Default::default()
            },
        )
        .map_err(|e| e.to_string())?;
    let child = session.tuic_session.clone();
    {
        let mut g = node.mail.lock();
        Mail::ensure(node, &mut g, &child);
        let p = g.peers.entry(child.clone()).or_default();
        if req.name.is_some() {
            p.name = req.name.clone();
        }
        p.parent = req.parent.clone();
        if let Some(parent) = &req.parent {
            Mail::ensure(node, &mut g, parent);
        }
    }
    let task_id = node.mcp.tasks.create(req.owners.clone(), Instant::now());
    tracing::info!(
        source = "agent_spawn",
        session = %session.id,
        child = %child,
        command = %req.command,
        env_keys = ?req.env.keys().collect::<Vec<_>>(),
        "spawned a child agent"
    );
    watch(node, session.clone(), req.parent.clone(), task_id.clone());
    let mut v = json!({
        "session_id": session.id,
        "tuic_session": child,
        "alias": session.alias,
        "task_id": task_id,
        "poll_interval_ms": crate::mcp::tools::task::POLL_INTERVAL_MS,
    });
    if let Some(n) = &req.name {
        v["name"] = json!(n);
    }
    if let Some(d) = description {
        v["pty_description"] = json!(d);
    }
    match &req.parent {
        Some(p) => v["parent_session_id"] = json!(p),
        None => {
            v["warning"] = json!(
                "the caller is not a registered peer: the child cannot report back by mail and no lifecycle notices are posted; call agent action=register first"
            )
        }
    }
    Ok(v)
}

/// The quiet-state name of a session, `None` while busy or before any output.
fn quiet_state(s: &Session) -> Option<&'static str> {
    let row = s.row();
    if row.shell_state != Some(ShellState::Idle) {
        return None;
    }
    let tail = s.screen().grid.screen().join("\n");
    if activity::question_on_screen(&tail).is_some() {
        return Some("awaiting_input");
    }
    Some(if tail.contains("suggest: [") {
        "completed"
    } else {
        "idle"
    })
}

/// Posts a `state_change` notice about `child` to `parent`.
pub fn notify_parent(node: &Arc<Node>, parent: &str, s: &Session, state: &str, code: Option<i32>) {
    let child = &s.tuic_session;
    let mut body = json!({"child": child, "session_id": s.id, "state": state});
    if state == "exited" {
        body["exit_code"] = json!(code);
    }
    {
        let mut g = node.mail.lock();
        Mail::ensure(node, &mut g, parent);
    }
    let r = Mail::post(
        node,
        parent,
        child,
        s.display_name(),
        body.to_string(),
        Some("state_change".into()),
        Some(Lifecycle {
            child: child.clone(),
            state: state.to_owned(),
        }),
    );
    if let Err(e) = r {
        tracing::warn!(source = "agent_msg", %parent, error = %e, "lifecycle notice not delivered");
    }
}

/// Follows the child until it exits: lifecycle notices on quiet edges, the task's end state.
fn watch(node: &Arc<Node>, s: Arc<Session>, parent: Option<String>, task_id: String) {
    let n = node.clone();
    let rt = tokio::runtime::Handle::current();
    let _g = rt.enter();
    node.tasks.spawn(async move {
        let mut out = s.wake();
        let mut last: Option<&'static str> = None;
        loop {
            if let Some(e) = s.exit() {
                n.mcp.tasks.finish(&task_id, &s.id, e.code);
                if let Some(p) = &parent {
                    notify_parent(&n, p, &s, "exited", e.code);
                }
                return;
            }
            let s2 = s.clone();
            let now = tokio::task::spawn_blocking(move || quiet_state(&s2))
                .await
                .unwrap_or(None);
            if now != last
                && let (Some(p), Some(state)) = (&parent, now)
            {
                notify_parent(&n, p, &s, state, None);
            }
            last = now;
            let busy = now.is_none();
            tokio::select! {
                _ = n.shutdown.cancelled() => return,
                r = out.changed() => if r.is_err() { return; },
                _ = tokio::time::sleep(Duration::from_millis(activity::IDLE_AFTER_MS + 50)), if busy => {}
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_is_substituted_or_appended_and_description_is_capped() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            compose_args(&a(&["-p", "{prompt}"]), Some("hi")),
            a(&["-p", "hi"])
        );
        assert_eq!(compose_args(&a(&["-q"]), Some("hi")), a(&["-q", "hi"]));
        assert_eq!(compose_args(&a(&["-q"]), None), a(&["-q"]));
        let long = "word ".repeat(100);
        assert_eq!(derive_description(&long).unwrap().chars().count(), 160);
        assert_eq!(derive_description("  a\n b "), Some("a b".into()));
    }
}
