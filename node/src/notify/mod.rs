//! The notification service: "an agent needs you" reaches the person, once, on every channel
//! they configured, and goes away when it is answered anywhere.
//!
//! Fed by the event bus (a question or permission menu detected on a PTY, `ui action=confirm`,
//! a non-zero exit, a watched session finishing), it keeps one [`core::Core`] — the sans-IO
//! dedupe, coalescing and clearing rules — and hands what to send to one worker per channel
//! ([`deliver`]): Web Push ([`webpush`]), an ntfy topic, a signed webhook. A worker retries
//! with backoff and records the outcome on the notification; the bus loop only ever
//! `try_send`s to a worker, so a hanging receiver never slows the bus or a session.
//!
//! It holds no node: [`NotifyEnv`] is the handles it uses, built in the composition root.

pub mod config;
pub mod core;
pub mod deliver;
pub mod sources;
pub mod tokens;
pub mod webpush;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tuic_proto::events::Event;

use self::config::NotifyConfig;
use self::core::{Answer, Choice, Context, Core, Gate, Kind, Notice, Out, Record};
use crate::events::Bus;

/// What a session looks like to a notification (alias, repository, branch, agent).
pub trait SessionLookup: Send + Sync {
    /// The context of a live session, or `None`. Blocking (reads the session's `.git/HEAD`).
    fn context(&self, session_id: &str) -> Option<Context>;
}

/// The vault, as far as notifications use it. Blocking.
pub trait Secrets: Send + Sync {
    /// A secret, if set.
    fn get(&self, name: &str) -> anyhow::Result<Option<String>>;
    /// A secret, created with `make` on first use.
    fn get_or_create(&self, name: &str, make: fn() -> String) -> anyhow::Result<String>;
}

/// Reads `notifications` from the config in force.
pub type ConfigSource = Arc<dyn Fn() -> NotifyConfig + Send + Sync>;

/// The service's environment, built once in the composition root (`state.rs`).
#[derive(Clone)]
pub struct NotifyEnv {
    /// Where events come from, and where `notification` events go.
    pub bus: Arc<Bus>,
    /// Owner of the service's tasks.
    pub tasks: TaskTracker,
    /// Fired once at shutdown.
    pub shutdown: CancellationToken,
    /// The settings in force.
    pub config: ConfigSource,
    /// This host's name.
    pub host: String,
    /// Session context.
    pub sessions: Arc<dyn SessionLookup>,
    /// The VAPID key, the ntfy token, the webhook key.
    pub secrets: Arc<dyn Secrets>,
    /// `push-subscriptions.json`.
    pub subscriptions_file: PathBuf,
    /// Whether a hub's peer link is attached right now (the node's link state). While it is,
    /// the hub notifies for this node (it relays the `notification` events of `/events`) and
    /// the node's own channels stay silent; when it drops, the node notifies by itself.
    pub hub_attached: Arc<dyn Fn() -> bool + Send + Sync>,
    /// Workflow runs (blocked or failed runs notify).
    pub workflows: Arc<dyn sources::WorkflowLookup>,
    /// ACP connections' pending permission requests.
    pub acp: Arc<dyn sources::AcpLookup>,
}

impl std::fmt::Debug for NotifyEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyEnv")
            .field("host", &self.host)
            .field("subscriptions_file", &self.subscriptions_file)
            .finish_non_exhaustive()
    }
}

/// What a watch waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchOn {
    /// The session's process exits (any code).
    Exit,
    /// The session goes idle or done (an agent finished its turn), or exits.
    Done,
}

/// Why an answer from a notification was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AnswerError {
    /// No notification has that id (or it left the recent list).
    #[error("no notification {0}")]
    NotFound(u64),
    /// It was answered or went away already.
    #[error("notification {0} was already answered")]
    AlreadyAnswered(u64),
    /// The choice number is not one it offers.
    #[error("notification {id} offers choices 1 to {max}")]
    BadChoice {
        /// The notification.
        id: u64,
        /// How many it offers.
        max: usize,
    },
}

/// The handle the node keeps (cheap to clone).
#[derive(Clone, Debug)]
pub struct Notify(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    env: NotifyEnv,
    core: Mutex<Core>,
    subs: Mutex<webpush::Subscriptions>,
    watches: Mutex<HashMap<String, WatchOn>>,
    contexts: Mutex<HashMap<String, Context>>,
    vapid: OnceLock<webpush::Vapid>,
    /// The ntfy action buttons' answer tokens.
    tokens: Mutex<tokens::Tokens>,
    /// Tells the loop the next timeout may have moved (a raise from a route).
    wake: tokio::sync::Notify,
    workers: OnceLock<deliver::Workers>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    crate::logs::now_ms()
}

impl Notify {
    /// The service (not running until [`Notify::start`]).
    pub fn new(env: NotifyEnv) -> Self {
        let c = (env.config)();
        Self(Arc::new(Inner {
            core: Mutex::new(Core::new(c.coalesce_ms, c.clear_grace_ms)),
            subs: Mutex::new(webpush::Subscriptions::load(env.subscriptions_file.clone())),
            watches: Mutex::default(),
            contexts: Mutex::default(),
            vapid: OnceLock::new(),
            tokens: Mutex::default(),
            wake: tokio::sync::Notify::new(),
            workers: OnceLock::new(),
            env,
        }))
    }

    /// Starts the bus loop and the channel workers (once; needs a runtime).
    pub fn start(&self) {
        if self
            .0
            .workers
            .set(deliver::Workers::start(self.clone()))
            .is_err()
        {
            return;
        }
        // The node's config could not be read while the node was being built: take it now.
        let c = self.config();
        lock(&self.0.core).set_intervals(c.coalesce_ms, c.clear_grace_ms);
        let me = self.clone();
        let mut rx = self.0.env.bus.subscribe();
        self.0.env.tasks.spawn(async move {
            let shutdown = me.0.env.shutdown.clone();
            loop {
                let due = lock(&me.0.core).poll_timeout();
                let sleep = async {
                    match due {
                        Some(t) => {
                            let wait = t.saturating_sub(now_ms());
                            tokio::time::sleep(Duration::from_millis(wait)).await;
                        }
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = me.0.wake.notified() => {}
                    _ = sleep => {
                        let out = lock(&me.0.core).handle_timeout(now_ms());
                        me.emit(out);
                    }
                    ev = rx.recv() => match ev {
                        Ok(env) => me.on_event(&env.event).await,
                        Err(RecvError::Lagged(n)) => {
                            tracing::warn!(source = "notify", missed = n, "notification service fell behind the bus");
                        }
                        Err(RecvError::Closed) => break,
                    }
                }
            }
        });
    }

    fn config(&self) -> NotifyConfig {
        (self.0.env.config)()
    }

    /// The recent notifications, newest first.
    pub fn recent(&self) -> Vec<Record> {
        lock(&self.0.core).recent()
    }

    /// One notification.
    pub fn get(&self, id: u64) -> Option<Record> {
        lock(&self.0.core).get(id).cloned()
    }

    /// The Web Push subscriptions.
    pub fn subscriptions(&self) -> Vec<webpush::Subscription> {
        lock(&self.0.subs).list().to_vec()
    }

    /// Adds a subscription. Blocking (writes the file).
    pub fn subscribe(&self, s: webpush::Subscription) -> anyhow::Result<webpush::Subscription> {
        lock(&self.0.subs).upsert(s)
    }

    /// Removes a subscription by id or endpoint. Blocking.
    pub fn unsubscribe(&self, id_or_endpoint: &str) -> anyhow::Result<bool> {
        lock(&self.0.subs).remove(id_or_endpoint)
    }

    /// The VAPID key, created and stored in the vault on first use. Blocking (the vault).
    pub fn vapid(&self) -> anyhow::Result<webpush::Vapid> {
        if let Some(v) = self.0.vapid.get() {
            return Ok(v.clone());
        }
        let stored = self
            .0
            .env
            .secrets
            .get_or_create(config::VAPID_PRIVATE_KEY, webpush::Vapid::generate)?;
        let v = webpush::Vapid::from_b64(&stored)?;
        Ok(self.0.vapid.get_or_init(|| v).clone())
    }

    /// Watches a session: a notification when it exits (or finishes its work, for `Done`).
    pub fn watch(&self, session_id: &str, on: WatchOn) {
        lock(&self.0.watches).insert(session_id.to_owned(), on);
    }

    /// The watched sessions.
    pub fn watches(&self) -> Vec<(String, WatchOn)> {
        lock(&self.0.watches)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Sends a test notification on every channel; returns its record.
    pub fn test(&self, text: Option<String>) -> Option<Record> {
        let n = Notice {
            key: format!("test:{}", uuid::Uuid::new_v4()),
            kind: Kind::Test,
            context: Context {
                host: self.0.env.host.clone(),
                ..Context::default()
            },
            text: text.unwrap_or_else(|| "Test notification from tuic".into()),
            choices: Vec::new(),
        };
        self.raise_now(n)
    }

    /// What answering notification `id` with choice `choice` (1-based) does; the caller (a
    /// route) performs it.
    pub fn answer_of(&self, id: u64, choice: usize) -> Result<(Record, Answer), AnswerError> {
        let core = lock(&self.0.core);
        let r = core.get(id).ok_or(AnswerError::NotFound(id))?;
        if r.cleared {
            return Err(AnswerError::AlreadyAnswered(id));
        }
        let c =
            choice
                .checked_sub(1)
                .and_then(|i| r.choices.get(i))
                .ok_or(AnswerError::BadChoice {
                    id,
                    max: r.choices.len(),
                })?;
        Ok((r.clone(), c.answer.clone()))
    }

    /// The login-free answer token of notification `id` (issued on first use; revoked when it
    /// clears or is spent), for ntfy's action buttons.
    pub fn answer_token(&self, id: u64) -> String {
        lock(&self.0.tokens).issue(id)
    }

    /// What answering with `token` and `choice` does; the token is spent on success (the
    /// caller performs the answer). An unknown, spent or revoked token is `NotFound(0)`.
    pub fn answer_with_token(
        &self,
        token: &str,
        choice: usize,
    ) -> Result<(Record, Answer), AnswerError> {
        let mut tokens = lock(&self.0.tokens);
        let id = tokens.lookup(token).ok_or(AnswerError::NotFound(0))?;
        let r = self.answer_of(id, choice)?;
        tokens.revoke(id);
        Ok(r)
    }

    /// Whether a hub's link is attached (the hub notifies for this node meanwhile).
    pub fn hub_attached(&self) -> bool {
        (self.0.env.hub_attached)()
    }

    /// Raises a notice from outside the bus loop (tests, `POST /notifications/test`).
    pub(crate) fn raise_now(&self, n: Notice) -> Option<Record> {
        let gate = self.gate(&n.context);
        let out = lock(&self.0.core).raise(now_ms(), n, gate);
        let rec = out.first().map(|o| match o {
            Out::Send(r) | Out::Changed(r) | Out::Clear(r) => r.clone(),
        });
        self.emit(out);
        self.0.wake.notify_one();
        rec
    }

    /// What gates a notice now; also takes the intervals in force (a hand edit of
    /// `config.json` is reloaded without a `config-changed` event).
    fn gate(&self, ctx: &Context) -> Gate {
        let c = self.config();
        lock(&self.0.core).set_intervals(c.coalesce_ms, c.clear_grace_ms);
        let muted_session = [&ctx.session_id, &ctx.session, &ctx.name]
            .iter()
            .filter_map(|s| s.as_deref())
            .any(|s| c.muted_sessions.iter().any(|m| m == s));
        Gate {
            disabled: !c.enabled,
            muted: muted_session || c.muted_hosts.contains(&ctx.host),
            quiet: c.quiet_hours.as_ref().is_some_and(|q| q.contains(now_ms())),
        }
    }

    /// Publishes what the core decided: `notification` events for open pages, jobs for the
    /// channel workers.
    fn emit(&self, out: Vec<Out>) {
        for o in out {
            let (op, mut rec) = match o {
                Out::Send(r) => ("show", r),
                Out::Clear(r) => ("clear", r),
                Out::Changed(r) => ("update", r),
            };
            if rec.cleared {
                lock(&self.0.tokens).revoke(rec.id);
            }
            // While a hub is attached it sends this node's notifications (it relays the
            // event published below); a clear goes where the show went.
            let relayed = match op {
                "show" => self.hub_attached(),
                "clear" => rec.deliveries.keys().all(|k| k == deliver::HUB),
                _ => true,
            };
            if op == "show" && relayed {
                let d = core::Delivery {
                    state: "relayed".into(),
                    attempts: 0,
                    error: None,
                };
                if let Some(r) = lock(&self.0.core).set_delivery(rec.id, deliver::HUB, d) {
                    rec = r;
                }
            }
            self.publish(op, &rec);
            if relayed {
                continue;
            }
            if let Some(w) = self.0.workers.get() {
                let c = self.config();
                w.dispatch(self, &c, op == "clear", rec);
            }
        }
    }

    fn publish(&self, op: &str, rec: &Record) {
        let mut v = serde_json::to_value(rec).unwrap_or(Value::Null);
        v["op"] = json!(op);
        self.0.env.bus.publish(Event::Notification(v));
    }

    /// Records a channel's outcome for a notification and tells open pages.
    pub(crate) fn set_delivery(&self, id: u64, channel: &str, d: core::Delivery) {
        let changed = lock(&self.0.core).set_delivery(id, channel, d);
        if let Some(r) = changed {
            self.publish("update", &r);
        }
    }

    pub(crate) fn env(&self) -> &NotifyEnv {
        &self.0.env
    }

    /// The session's context, cached until it is renamed or closed.
    async fn context(&self, session_id: &str) -> Context {
        if let Some(c) = lock(&self.0.contexts).get(session_id) {
            return c.clone();
        }
        let lookup = self.0.env.sessions.clone();
        let sid = session_id.to_owned();
        let found = tokio::task::spawn_blocking(move || lookup.context(&sid))
            .await
            .ok()
            .flatten();
        let ctx = found.unwrap_or_else(|| Context {
            host: self.0.env.host.clone(),
            session_id: Some(session_id.to_owned()),
            ..Context::default()
        });
        lock(&self.0.contexts).insert(session_id.to_owned(), ctx.clone());
        ctx
    }

    async fn on_event(&self, ev: &Event) {
        let now = now_ms();
        let out = match ev {
            Event::PtyParsed { session_id, parsed } => {
                self.on_parsed(now, session_id, parsed).await
            }
            Event::PtyExit {
                session_id,
                exit_code,
            } => {
                let mut out = lock(&self.0.core).clear_session(now, session_id, "", true);
                let watched = lock(&self.0.watches).remove(session_id).is_some();
                let failed = exit_code.is_some_and(|c| c != 0);
                if watched || (failed && self.config().on_exit_nonzero) {
                    let context = self.context(session_id).await;
                    let text = match exit_code {
                        Some(c) => format!("exited with code {c}"),
                        None => "exited".into(),
                    };
                    let n = Notice {
                        key: format!("exit:{session_id}"),
                        kind: Kind::Exit,
                        context,
                        text,
                        choices: Vec::new(),
                    };
                    let gate = self.gate(&n.context);
                    out.extend(lock(&self.0.core).raise(now, n, gate));
                }
                out
            }
            Event::SessionClosed { session_id } => {
                lock(&self.0.contexts).remove(session_id);
                lock(&self.0.watches).remove(session_id);
                lock(&self.0.core).clear_session(now, session_id, "", true)
            }
            Event::TermAliasAssigned { session_id, .. }
            | Event::SessionRenamed { session_id, .. } => {
                lock(&self.0.contexts).remove(session_id);
                Vec::new()
            }
            Event::McpConfirm {
                request_id,
                message,
                title,
                origin_session_id,
            } => {
                let context = match origin_session_id {
                    Some(s) => self.context(s).await,
                    None => Context {
                        host: self.0.env.host.clone(),
                        ..Context::default()
                    },
                };
                let text = match title {
                    Some(t) if !t.is_empty() => format!("{t}\n{message}"),
                    _ => message.clone(),
                };
                let n = Notice {
                    key: format!("confirm:{request_id}"),
                    kind: Kind::Confirm,
                    context,
                    text,
                    choices: vec![
                        Choice {
                            label: "Yes".into(),
                            answer: Answer::Confirm(true),
                        },
                        Choice {
                            label: "No".into(),
                            answer: Answer::Confirm(false),
                        },
                    ],
                };
                let gate = self.gate(&n.context);
                lock(&self.0.core).raise(now, n, gate)
            }
            Event::McpConfirmResolved { request_id, .. } => {
                lock(&self.0.core).clear(now, &format!("confirm:{request_id}"), true)
            }
            Event::WorkflowRunChanged { payload, .. } => match payload["runId"].as_str() {
                Some(run) => self.on_run(now, run),
                None => Vec::new(),
            },
            Event::AcpNotice(n) => self.on_acp(now, n),
            Event::ConfigChanged { .. } => {
                let c = self.config();
                lock(&self.0.core).set_intervals(c.coalesce_ms, c.clear_grace_ms);
                Vec::new()
            }
            _ => Vec::new(),
        };
        self.emit(out);
    }

    async fn on_parsed(&self, now: u64, session_id: &str, parsed: &Value) -> Vec<Out> {
        let kind = parsed.get("type").and_then(Value::as_str).unwrap_or("");
        let state = parsed.get("state").and_then(Value::as_str).unwrap_or("");
        match kind {
            "question" => {
                let text = parsed
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let options: Vec<String> = parsed
                    .get("options")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|o| o.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                let select = parsed
                    .get("select")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let context = self.context(session_id).await;
                let n = Notice {
                    key: question_key(session_id, &text, &options),
                    kind: Kind::Question,
                    context,
                    text,
                    choices: question_choices(&options, select),
                };
                let gate = self.gate(&n.context);
                let mut core = lock(&self.0.core);
                // A different question replaced the last one: that one was answered.
                let mut out = core.clear_session(now, session_id, "q:", false);
                out.extend(core.raise(now, n, gate));
                out
            }
            "state" | "agent_state" => {
                let asking = matches!(state, "needs_input" | "awaiting_input");
                let mut out = if asking {
                    Vec::new()
                } else {
                    lock(&self.0.core).clear_session(now, session_id, "q:", false)
                };
                let finished = kind == "state" && matches!(state, "idle" | "done");
                if finished && lock(&self.0.watches).get(session_id) == Some(&WatchOn::Done) {
                    lock(&self.0.watches).remove(session_id);
                    let context = self.context(session_id).await;
                    let n = Notice {
                        key: format!("done:{session_id}:{now}"),
                        kind: Kind::Done,
                        context,
                        text: format!("finished ({state})"),
                        choices: Vec::new(),
                    };
                    let gate = self.gate(&n.context);
                    out.extend(lock(&self.0.core).raise(now, n, gate));
                }
                out
            }
            _ => Vec::new(),
        }
    }
}

/// A question's identity: its session, its text and its choices.
fn question_key(session_id: &str, text: &str, options: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(text.as_bytes());
    for o in options {
        h.update([0]);
        h.update(o.as_bytes());
    }
    format!("q:{session_id}:{}", &hex::encode(h.finalize())[..16])
}

/// What a question's buttons type: a numbered menu's digit (Enter after it unless it is a `❯`
/// selector), else `y`/`n` and Enter.
fn question_choices(options: &[String], select: bool) -> Vec<Choice> {
    if options.is_empty() {
        return vec![
            Choice {
                label: "Yes".into(),
                answer: Answer::Keys("y\r".into()),
            },
            Choice {
                label: "No".into(),
                answer: Answer::Keys("n\r".into()),
            },
        ];
    }
    options
        .iter()
        .enumerate()
        .map(|(i, o)| Choice {
            label: o.clone(),
            answer: Answer::Keys(if select {
                format!("{}", i + 1)
            } else {
                format!("{}\r", i + 1)
            }),
        })
        .collect()
}

/// The repository (its directory's name) and checked-out branch of `dir`: the nearest
/// ancestor with a `.git` (a directory, or a linked worktree's `gitdir:` file), and its
/// `HEAD`. Blocking (small file reads); `None`s outside a repository or on a detached head.
pub fn repo_and_branch(dir: &std::path::Path) -> (Option<String>, Option<String>) {
    for d in dir.ancestors() {
        let git = d.join(".git");
        let head = if git.is_dir() {
            git.join("HEAD")
        } else if git.is_file() {
            let Ok(s) = std::fs::read_to_string(&git) else {
                break;
            };
            let Some(g) = s.trim().strip_prefix("gitdir:") else {
                break;
            };
            let g = std::path::PathBuf::from(g.trim());
            let g = if g.is_absolute() { g } else { d.join(g) };
            g.join("HEAD")
        } else {
            continue;
        };
        let repo = d.file_name().map(|n| n.to_string_lossy().into_owned());
        let branch = std::fs::read_to_string(head)
            .ok()
            .and_then(|h| h.trim().strip_prefix("ref: refs/heads/").map(str::to_owned));
        return (repo, branch);
    }
    (None, None)
}

#[cfg(test)]
mod tests;
