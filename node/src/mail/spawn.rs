//! `agent action=spawn`: a child agent in a new managed PTY, its inbox, its task handle and
//! the lifecycle notices (`state_change`: idle / completed / exited) it posts to its parent.
//!
//! Prompt delivery: `{prompt}` in the caller's args is substituted; otherwise a normal CLI gets
//! the prompt as its final positional argument, while a prefill-only interactive TUI (direct
//! interactive Codex) gets it typed into the PTY once its ready prompt appears. A deferred
//! prompt has a one-shot watchdog (`mail_prompt_delivery_timeout_ms`, 30 s): still pending then,
//! it posts one `prompt_delivery_failed` notice to the parent and is not typed later.
//! A managed child that stays quiet after reporting `completed` for
//! `mail_child_idle_close_ms` is closed unless it is marked `keep_open`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tuic_proto::mail::Lifecycle;

use super::Mail;
use super::launch::{self, SpawnArgs};
use super::receipt::{self, Delivery, Launch, PromptState};
use super::wake;
use crate::session::activity::{self, ShellState};
use crate::session::{CreateRequest, Session};

/// Largest derived `pty_description`, in characters.
pub(crate) const DESCRIPTION_MAX: usize = 160;

/// A validated spawn.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpawnRequest {
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
    /// An unregistered caller's protocol session: its children are linked to the identity it
    /// registers later (see [`pending_parent`]).
    pub pending_parent: Option<String>,
    /// Identities allowed to read the task.
    pub owners: Vec<String>,
    /// Exempt from automatic idle closure.
    pub keep_open: bool,
    /// A run configuration by name (`mail::launch`).
    pub run_config: Option<String>,
    /// The model, composed as `--model <m>`.
    pub model: Option<String>,
}

impl SpawnRequest {
    /// A request from the typed arguments; the caller fills in parent and owners.
    pub(crate) fn from_args(a: SpawnArgs) -> Self {
        Self {
            command: a.command.unwrap_or_default(),
            args: a.args,
            cwd: a.cwd,
            prompt: a.prompt,
            env: a.env,
            name: a.name,
            pty_description: a.pty_description,
            keep_open: a.keep_open,
            run_config: a.run_config,
            model: a.model,
            ..Self::default()
        }
    }
}

/// Why a spawn failed: a stable code (`unknown_run_config`, `model_conflict`,
/// `invalid_arguments`, `spawn_failed`) and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpawnFailure {
    pub code: &'static str,
    pub message: String,
}

impl SpawnFailure {
    fn spawn(message: impl Into<String>) -> Self {
        Self {
            code: "spawn_failed",
            message: message.into(),
        }
    }
}

/// The argv the child gets: `{prompt}` substituted where authored, else the prompt appended
/// as the final positional argument.
pub(crate) fn compose_args(args: &[String], prompt: Option<&str>) -> Vec<String> {
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

/// Codex subcommands that run non-interactively and take the task as an argument.
const CODEX_BATCH: &[&str] = &["exec", "e", "review"];
/// Codex root options that take a value (skipped when looking for the subcommand).
const CODEX_VALUE_OPTS: &[&str] = &[
    "-c",
    "--config",
    "-m",
    "--model",
    "-p",
    "--profile",
    "-C",
    "--cd",
    "-s",
    "--sandbox",
    "-a",
    "--ask-for-approval",
    "-i",
    "--image",
    "--enable",
    "--disable",
];

/// Whether `command args` is a prefill-only interactive TUI: direct interactive Codex, whose
/// positional argument only prefills the composer. A Codex `exec`, `e` or `review` subcommand
/// (the first positional before `--`, after root options and their values) is a batch run.
pub(crate) fn prefill_only(command: &str, args: &[String]) -> bool {
    let base = std::path::Path::new(command)
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or(command);
    if base != "codex" {
        return false;
    }
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            return true;
        }
        if a.starts_with('-') {
            if !a.contains('=') && CODEX_VALUE_OPTS.contains(&a.as_str()) {
                it.next();
            }
            continue;
        }
        return !CODEX_BATCH.contains(&a.as_str());
    }
    true
}

/// The flag that lets Claude Code receive `notifications/claude/channel` from this server.
pub(crate) const CLAUDE_CHANNEL_FLAG: [&str; 2] = [
    "--dangerously-load-development-channels",
    "server:tuicommander",
];

/// Spawned Claude Code agents get the development-channel flag automatically (first, so a
/// trailing positional prompt stays last); an explicit one is left as the caller wrote it.
pub(crate) fn with_channel_flag(command: &str, args: &[String]) -> Vec<String> {
    let base = std::path::Path::new(command)
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or(command);
    if base != "claude" || args.iter().any(|a| a == CLAUDE_CHANNEL_FLAG[0]) {
        return args.to_vec();
    }
    let mut v: Vec<String> = CLAUDE_CHANNEL_FLAG.iter().map(|s| s.to_string()).collect();
    v.extend_from_slice(args);
    v
}

/// Prefix of the internal parent id of an unregistered spawner (never listed, never an
/// address anyone can send to).
pub(crate) const PENDING_PREFIX: &str = "mcp-pending:";

/// The internal parent id standing for protocol session `sid` until it registers.
pub(crate) fn pending_parent(sid: &str) -> String {
    format!("{PENDING_PREFIX}{sid}")
}

/// The child's current parent: a registered identity, or a pending one.
fn current_parent(mail: &Mail, child: &str) -> Option<String> {
    mail.lock().peers.get(child).and_then(|p| p.parent.clone())
}

/// Display metadata derived from a prompt: whitespace-normalised, at most 160 characters.
pub(crate) fn derive_description(prompt: &str) -> Option<String> {
    let norm = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    if norm.is_empty() {
        return None;
    }
    Some(norm.chars().take(DESCRIPTION_MAX).collect())
}

/// Starts the child. Blocking (fork/exec): call off the async workers.
pub(crate) fn spawn(mail: &Arc<Mail>, req: SpawnRequest) -> Result<Value, String> {
    spawn_checked(mail, req).map_err(|e| e.message)
}

/// [`spawn`] with the failure's stable code.
pub(crate) fn spawn_checked(mail: &Arc<Mail>, req: SpawnRequest) -> Result<Value, SpawnFailure> {
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/".into());
    let cwd = req
        .cwd
        .as_deref()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| home.clone());
    let cwd = cwd.canonicalize().unwrap_or(cwd);
    let composed = launch::compose(
        &mail.config().agents,
        &SpawnArgs {
            command: Some(req.command.clone()).filter(|c| !c.is_empty()),
            run_config: req.run_config.clone(),
            args: req.args.clone(),
            env: req.env.clone(),
            model: req.model.clone(),
            ..SpawnArgs::default()
        },
        &cwd,
        &home,
        &|k| std::env::var(k).ok(),
    )
    .map_err(|e| SpawnFailure {
        code: e.code(),
        message: e.to_string(),
    })?;
    if let Some(dir) = &composed.create_dir {
        std::fs::create_dir_all(dir).map_err(|e| {
            SpawnFailure::spawn(format!(
                "creating CLAUDE_CODE_TMPDIR {}: {e}",
                dir.display()
            ))
        })?;
    }
    let mut env = composed.env.clone();
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
    let command = composed.command.clone();
    let placeholder = composed.args.iter().any(|a| a.contains("{prompt}"));
    // A run configuration's argv is authoritative: substituted or appended, never deferred.
    let deferred = req.prompt.is_some()
        && !placeholder
        && composed.run_config.is_none()
        && prefill_only(&command, &composed.args);
    let base_args = with_channel_flag(&command, &composed.args);
    let args = if deferred {
        base_args
    } else {
        compose_args(&base_args, req.prompt.as_deref())
    };
    let sessions = &mail.env.sessions;
    let session = sessions
        .create(CreateRequest {
            shell: Some(command.clone()),
            args: args.clone(),
            cwd: req.cwd.clone(),
            env,
            name: req.name.clone(),
            name_from_spawn: true,
            // Only a registered identity is published; a pending placeholder never is.
            parent_session: req.parent.clone(),
            ..Default::default()
        })
        .map_err(|e| SpawnFailure::spawn(e.to_string()))?;
    if description.is_some() {
        sessions.describe(&session, description.clone());
    }
    if composed.answer_claude_trust {
        super::trust::answer_claude(
            super::trust::TrustWatch {
                tasks: mail.env.tasks.clone(),
                shutdown: mail.env.shutdown.clone(),
                capture: sessions.capture.clone(),
                limit: Duration::from_millis(mail.config().tuning.mail_prompt_delivery_timeout_ms),
            },
            session.clone(),
        );
    }
    let child = session.tuic_session.clone();
    {
        let mut g = mail.lock();
        mail.ensure(&mut g, &child);
        let p = g.peers.entry(child.clone()).or_default();
        if req.name.is_some() {
            p.name = req.name.clone();
        }
        p.parent = req.parent.clone().or_else(|| req.pending_parent.clone());
        p.managed = true;
        p.keep_open = req.keep_open;
        if let Some(parent) = &req.parent {
            mail.ensure(&mut g, parent);
        } else if let Some(pending) = &req.pending_parent
            && !g.inboxes.is_registered(pending)
        {
            // Lifecycle notices collect here until the spawner registers.
            g.inboxes.register(pending);
        }
    }
    let prompt_delivery = match (&req.prompt, placeholder, deferred) {
        (None, _, _) => Delivery::None,
        (Some(_), true, _) => Delivery::Placeholder,
        (Some(_), false, true) => Delivery::DeferredPty,
        (Some(_), false, false) => Delivery::Argv,
    };
    receipt::launched(
        mail,
        &child,
        &session.id,
        Launch {
            command: command.clone(),
            args,
            prompt: req.prompt.clone(),
            prompt_delivery,
            prompt_state: if deferred {
                PromptState::Pending
            } else {
                PromptState::Launched
            },
            parent_session_id: req.parent.clone(),
            spawned_at_ms: crate::session::now_ms(),
            delivered_at_ms: None,
        },
    );
    if deferred && let Some(p) = &req.prompt {
        deliver_prompt(mail, session.clone(), p.clone());
    }
    let (task_id, poll_interval_ms) = mail.clients().open_task(req.owners.clone());
    tracing::info!(
        source = "agent_spawn",
        session = %session.id,
        child = %child,
        command = %command,
        env_keys = ?req.env.keys().collect::<Vec<_>>(),
        "spawned a child agent"
    );
    watch(mail, session.clone(), task_id.clone());
    let mut v = json!({
        "session_id": session.id,
        "tuic_session": child,
        "alias": session.alias,
        "task_id": task_id,
        "poll_interval_ms": poll_interval_ms,
    });
    if let Some(n) = &req.name {
        v["name"] = json!(n);
    }
    if let Some(d) = description {
        v["pty_description"] = json!(d);
    }
    if req.keep_open {
        v["keep_open"] = json!(true);
    }
    if deferred {
        v["prompt_delivery"] = json!("deferred_pty");
    }
    if let Some(rc) = &composed.run_config {
        v["run_config"] = json!(rc);
    }
    if !composed.warnings.is_empty() {
        v["launch_warning"] = json!(composed.warnings.join("; "));
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

/// Types a deferred prompt once the TUI shows its ready prompt (idle, bare prompt, nothing
/// typed), under the same claim as a wake notice. The one-shot watchdog gives up after
/// `mail_prompt_delivery_timeout_ms` and tells the parent once.
fn deliver_prompt(mail: &Arc<Mail>, s: Arc<Session>, prompt: String) {
    let n = mail.clone();
    let rt = tokio::runtime::Handle::current();
    let _g = rt.enter();
    mail.env.tasks.spawn(async move {
        let limit = Duration::from_millis(n.config().tuning.mail_prompt_delivery_timeout_ms);
        let deadline = tokio::time::Instant::now() + limit;
        let mut out = s.wake();
        let text = prompt.replace(['\r', '\n'], " ");
        loop {
            let verdict = {
                let (s2, n2, t) = (s.clone(), n.clone(), text.clone());
                tokio::task::spawn_blocking(move || wake::claim_and_write(&n2, &s2, &t, wake::gate))
                    .await
                    .unwrap_or(Err(wake::Closed::Exited))
            };
            match verdict {
                Ok(()) => {
                    receipt::prompt_state(&n, &s.tuic_session, PromptState::Delivered);
                    tracing::info!(source = "agent_spawn", session = %s.id, "deferred prompt delivered");
                    return;
                }
                Err(wake::Closed::Exited) => return,
                Err(_) => {}
            }
            // Re-check on the next output or idle edge, until the watchdog fires.
            let settle = Duration::from_millis(activity::IDLE_AFTER_MS + 50);
            tokio::select! {
                _ = n.env.shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(deadline) => break,
                r = out.changed() => if r.is_err() { return; },
                _ = tokio::time::sleep(settle) => {}
            }
        }
        receipt::prompt_state(&n, &s.tuic_session, PromptState::Failed);
        tracing::warn!(source = "agent_spawn", session = %s.id, "deferred prompt not delivered: prompt_delivery_failed");
        if let Some(p) = current_parent(&n, &s.tuic_session) {
            let body = json!({"child": s.tuic_session, "session_id": s.id, "state": "prompt_delivery_failed", "timeout_ms": limit.as_millis() as u64});
            ensure_parent(&n, &p);
            let r = n.post(
                &p,
                &s.tuic_session,
                s.display_name(),
                body.to_string(),
                Some("prompt_delivery_failed".into()),
                Some(Lifecycle {
                    child: s.tuic_session.clone(),
                    state: "prompt_delivery_failed".into(),
                }),
            );
            if let Err(e) = r {
                tracing::warn!(source = "agent_msg", parent = %p, error = %e, "prompt_delivery_failed not delivered");
            }
        }
    });
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
pub(crate) fn notify_parent(
    mail: &Arc<Mail>,
    parent: &str,
    s: &Session,
    state: &str,
    code: Option<i32>,
) {
    let child = &s.tuic_session;
    let mut body = json!({"child": child, "session_id": s.id, "state": state});
    if state == "exited" {
        body["exit_code"] = json!(code);
    }
    ensure_parent(mail, parent);
    let r = mail.post(
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

/// Makes sure a parent can receive: a registered identity gets its peer entry, a pending one
/// only its inbox (it is not a peer anyone can list or address).
fn ensure_parent(mail: &Mail, parent: &str) {
    let mut g = mail.lock();
    if parent.starts_with(PENDING_PREFIX) {
        if !g.inboxes.is_registered(parent) {
            g.inboxes.register(parent);
        }
    } else {
        mail.ensure(&mut g, parent);
    }
}

/// Follows the child until it exits: lifecycle notices on quiet edges, the task's end state.
/// The parent is looked up at each notice, so a spawner that registers later receives them.
fn watch(mail: &Arc<Mail>, s: Arc<Session>, task_id: String) {
    let n = mail.clone();
    let rt = tokio::runtime::Handle::current();
    let _g = rt.enter();
    mail.env.tasks.spawn(async move {
        let mut out = s.wake();
        let mut last: Option<&'static str> = None;
        let mut completed_since: Option<tokio::time::Instant> = None;
        loop {
            if let Some(e) = s.exit() {
                // The notice first: a task seen finished implies its exit notice is posted.
                if let Some(p) = current_parent(&n, &s.tuic_session) {
                    notify_parent(&n, &p, &s, "exited", e.code);
                }
                n.clients().finish_task(&task_id, &s.id, e.code);
                return;
            }
            let s2 = s.clone();
            let now = tokio::task::spawn_blocking(move || quiet_state(&s2))
                .await
                .unwrap_or(None);
            if now != last
                && let Some(state) = now
                && let Some(p) = current_parent(&n, &s.tuic_session)
            {
                notify_parent(&n, &p, &s, state, None);
            }
            last = now;
            let busy = now.is_none();
            // Automatic idle closure: quiet in `completed` for the whole period, not kept open.
            completed_since = match now {
                Some("completed") => completed_since.or(Some(tokio::time::Instant::now())),
                _ => None,
            };
            let close_after = Duration::from_millis(n.config().tuning.mail_child_idle_close_ms);
            let close_at = completed_since.map(|t| t + close_after);
            tokio::select! {
                _ = n.env.shutdown.cancelled() => return,
                r = out.changed() => if r.is_err() { return; },
                _ = tokio::time::sleep(Duration::from_millis(activity::IDLE_AFTER_MS + 50)), if busy => {}
                _ = sleep_until_opt(close_at), if close_at.is_some() => {
                    let keep = n.lock().peers.get(&s.tuic_session).is_some_and(|p| p.keep_open);
                    if !keep {
                        tracing::info!(source = "agent_spawn", session = %s.id, "closing a completed managed child after its idle period");
                        s.close();
                    }
                    completed_since = None;
                }
            }
        }
    });
}

async fn sleep_until_opt(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
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

    #[test]
    fn spawned_claude_gets_the_channel_flag_once() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            with_channel_flag("/opt/bin/claude", &a(&["--model", "x"])),
            a(&[
                "--dangerously-load-development-channels",
                "server:tuicommander",
                "--model",
                "x"
            ])
        );
        let explicit = a(&["--dangerously-load-development-channels", "server:other"]);
        assert_eq!(with_channel_flag("claude", &explicit), explicit);
        assert_eq!(with_channel_flag("codex", &a(&["-q"])), a(&["-q"]));
    }

    #[test]
    fn only_direct_interactive_codex_is_prefill_only() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(prefill_only("codex", &[]));
        assert!(prefill_only(
            "/usr/bin/codex",
            &a(&["-m", "exec", "--full-auto"])
        ));
        assert!(prefill_only("codex", &a(&["-p", "review"])));
        assert!(!prefill_only("codex", &a(&["exec"])));
        assert!(!prefill_only("codex", &a(&["-c", "x=1", "e"])));
        assert!(!prefill_only("codex", &a(&["--model=o3", "review"])));
        assert!(prefill_only("codex", &a(&["--", "exec"])));
        assert!(!prefill_only("claude", &[]));
        assert!(!prefill_only("codex-wrapper", &[]));
    }
}
