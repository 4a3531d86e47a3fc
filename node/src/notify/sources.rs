//! The event sources beyond the PTY: agent mail to the person, workflow runs that block or
//! fail, ACP permission requests, and notifications relayed by a hub for its nodes (and its
//! connections going offline or coming back).
//!
//! Each source turns its event into a [`Notice`] with a dedupe key and context and clears it
//! when the thing is answered or moves on. The lookups ([`WorkflowLookup`], [`AcpLookup`]) are
//! implemented by the composition root; this module reads no workflow or ACP state itself and
//! never answers anything (the routes do, from a [`Choice`]'s [`Answer`]).

use serde_json::Value;

use super::core::{Answer, Choice, Context, Kind, Notice, Out, Record};
use super::{Notify, lock, now_ms};

/// The address agent mail uses for the person: `agent action=send to=human` raises a
/// notification instead of filling an inbox.
pub const HUMAN: &str = "human";

/// Characters of a mail body a notification carries.
const MAIL_EXCERPT: usize = 300;

/// A workflow run as notifications see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunView {
    /// The project (repository path).
    pub project: String,
    /// `running`, `paused`, `awaiting_input`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// The current step.
    pub step: Option<String>,
    /// What the run waits for (`awaiting_input`): the activation that asked, and its question.
    pub pending: Option<(String, String)>,
}

/// Workflow runs, read by id. Cheap (an in-memory map).
pub trait WorkflowLookup: Send + Sync {
    /// The run, if known.
    fn run(&self, run_id: &str) -> Option<RunView>;
}

/// A pending ACP permission request as notifications see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PermissionView {
    /// Where (host, repository, the connection's name as the session).
    pub context: Context,
    /// What the agent asks to do.
    pub text: String,
    /// `(option_id, label)` the agent offers.
    pub options: Vec<(String, String)>,
}

/// ACP connections' pending permission requests. Cheap.
pub trait AcpLookup: Send + Sync {
    /// The request, while it is pending.
    fn permission(&self, connection_id: &str, request_id: &str) -> Option<PermissionView>;
}

/// A lookup that finds nothing (tests, a node without the service).
#[derive(Debug, Default)]
pub struct Nothing;

impl WorkflowLookup for Nothing {
    fn run(&self, _: &str) -> Option<RunView> {
        None
    }
}

impl AcpLookup for Nothing {
    fn permission(&self, _: &str, _: &str) -> Option<PermissionView> {
        None
    }
}

/// A mail body's notification text: the first line is the subject, then an excerpt.
pub fn mail_text(message: &str) -> String {
    let mut lines = message.trim().lines();
    let subject = lines.next().unwrap_or("").trim();
    let rest: String = lines.collect::<Vec<_>>().join("\n");
    let rest = rest.trim();
    let excerpt: String = rest.chars().take(MAIL_EXCERPT).collect();
    let cut = if rest.chars().count() > MAIL_EXCERPT {
        "…"
    } else {
        ""
    };
    if excerpt.is_empty() {
        subject.to_owned()
    } else {
        format!("{subject}\n{excerpt}{cut}")
    }
}

impl Notify {
    /// Agent mail addressed to [`HUMAN`]: a notification naming the sender, with the subject
    /// (first line) and an excerpt. `sender` is the sending identity (a session id when the
    /// agent runs in a tuic terminal), `name` its registered name.
    pub async fn mail_to_human(
        &self,
        sender: &str,
        name: Option<&str>,
        message: &str,
    ) -> Option<Record> {
        let mut context = self.context(sender).await;
        if context.session.is_none() && context.name.is_none() {
            context.name = Some(name.unwrap_or(sender).to_owned());
        }
        let from = name
            .map(str::to_owned)
            .or_else(|| context.session.clone())
            .unwrap_or_else(|| sender.to_owned());
        let n = Notice {
            key: format!("mail:{}", uuid::Uuid::new_v4()),
            kind: Kind::Mail,
            context,
            text: format!("From {from}: {}", mail_text(message)),
            choices: Vec::new(),
        };
        self.raise_now(n)
    }

    /// A workflow run changed: notify when it waits for input (cleared once it moves on) or
    /// fails.
    pub(super) fn on_run(&self, now: u64, run_id: &str) -> Vec<Out> {
        let Some(run) = self.env().workflows.run(run_id) else {
            return Vec::new();
        };
        let prefix = format!("wf:{run_id}:");
        let repo = std::path::Path::new(&run.project)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let context = Context {
            host: self.env().host.clone(),
            name: Some(match &run.step {
                Some(s) => format!("{run_id} · {s}"),
                None => run_id.to_owned(),
            }),
            repo,
            ..Context::default()
        };
        let (key, text) = match (run.status.as_str(), &run.pending) {
            ("awaiting_input", Some((activation, question))) => (
                format!("{prefix}input:{activation}"),
                format!("blocked, waiting for input: {question}"),
            ),
            ("failed", _) => (format!("{prefix}failed"), "failed".to_owned()),
            _ => return lock(&self.0.core).clear_prefix(now, &format!("{prefix}input:"), true),
        };
        let n = Notice {
            key,
            kind: Kind::Workflow,
            context,
            text,
            choices: Vec::new(),
        };
        if lock(&self.0.core).is_open(&n.key) {
            // Every commit of the run wakes this: the same state is not news.
            return Vec::new();
        }
        let gate = self.gate(&n.context);
        let mut core = lock(&self.0.core);
        // A new question (or the failure) replaces the one the run asked before.
        let mut out = core.clear_prefix(now, &format!("{prefix}input:"), true);
        out.extend(core.raise(now, n, gate));
        out
    }

    /// An ACP connection's notice: a pending permission request notifies (its options are the
    /// answers when there are at most three); settled or ended clears it.
    pub(super) fn on_acp(&self, now: u64, n: &tuic_proto::acp::Notice) -> Vec<Out> {
        let conn = &n.connection_id;
        match (n.kind.as_str(), &n.request_id) {
            ("interaction_pending", Some(rid)) => {
                let Some(p) = self.env().acp.permission(conn, rid) else {
                    return Vec::new();
                };
                let choices = if p.options.len() <= 3 {
                    p.options
                        .iter()
                        .map(|(id, label)| Choice {
                            label: label.clone(),
                            answer: Answer::Acp {
                                connection: conn.clone(),
                                request: rid.clone(),
                                option: id.clone(),
                            },
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let notice = Notice {
                    key: format!("acp:{conn}:{rid}"),
                    kind: Kind::Acp,
                    context: p.context,
                    text: p.text,
                    choices,
                };
                let gate = self.gate(&notice.context);
                lock(&self.0.core).raise(now, notice, gate)
            }
            ("interaction_settled", Some(rid)) => {
                lock(&self.0.core).clear(now, &format!("acp:{conn}:{rid}"), true)
            }
            ("ended", _) => lock(&self.0.core).clear_prefix(now, &format!("acp:{conn}:"), true),
            _ => Vec::new(),
        }
    }

    /// A hub relays a node's notification (`op` `show` or `clear`, the record as the node's
    /// `notification` event carries it): one notification here, naming the node's
    /// connection as its host. Choices are not relayed: the node answers its own questions
    /// (a tap opens the session through the hub).
    pub fn relay(&self, connection: &str, op: &str, rec: &Value) {
        let Some(key) = rec.get("key").and_then(Value::as_str) else {
            return;
        };
        let key = format!("via:{connection}:{key}");
        let now = now_ms();
        let out = match op {
            "show" => {
                let kind = rec
                    .get("kind")
                    .cloned()
                    .and_then(|k| serde_json::from_value::<Kind>(k).ok())
                    .unwrap_or(Kind::Question);
                let s = |f: &str| rec.get(f).and_then(Value::as_str).map(str::to_owned);
                let context = Context {
                    host: connection.to_owned(),
                    session_id: s("session_id").map(|id| format!("{connection}/{id}")),
                    session: s("session"),
                    name: s("name"),
                    repo: s("repo"),
                    branch: s("branch"),
                    agent: s("agent"),
                };
                let n = Notice {
                    key,
                    kind: if kind == Kind::Test { Kind::Test } else { kind },
                    context,
                    text: s("text").unwrap_or_default(),
                    choices: Vec::new(),
                };
                let gate = self.gate(&n.context);
                lock(&self.0.core).raise(now, n, gate)
            }
            "clear" => lock(&self.0.core).clear(now, &key, true),
            _ => Vec::new(),
        };
        self.emit(out);
        self.0.wake.notify_one();
    }

    /// A hub's connection to a node went down (`up == false`) or came back: an open
    /// "offline" notification until it returns, then a "back online" one.
    pub fn host_state(&self, connection: &str, up: bool) {
        let now = now_ms();
        let off_key = format!("host:{connection}:offline");
        let context = Context {
            host: connection.to_owned(),
            ..Context::default()
        };
        let out = if up {
            let mut core = lock(&self.0.core);
            if !core.is_open(&off_key) {
                return;
            }
            let mut out = core.clear(now, &off_key, true);
            drop(core);
            let n = Notice {
                // `news:` keys are never open: "back" has nothing to clear later.
                key: format!("news:host:{connection}:{now}"),
                kind: Kind::Host,
                context,
                text: format!("{connection} is back online"),
                choices: Vec::new(),
            };
            let gate = self.gate(&n.context);
            out.extend(lock(&self.0.core).raise(now, n, gate));
            out
        } else {
            let n = Notice {
                key: off_key,
                kind: Kind::Host,
                context,
                text: format!("{connection} went offline"),
                choices: Vec::new(),
            };
            let gate = self.gate(&n.context);
            lock(&self.0.core).raise(now, n, gate)
        };
        self.emit(out);
        self.0.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mail_text_is_the_subject_then_a_bounded_excerpt() {
        assert_eq!(
            mail_text("Deploy done\n\nAll green."),
            "Deploy done\nAll green."
        );
        assert_eq!(mail_text("  just a line "), "just a line");
        let long = format!("Subject\n{}", "x".repeat(1000));
        let t = mail_text(&long);
        assert!(t.starts_with("Subject\n") && t.ends_with('…'), "{t}");
        assert_eq!(t.chars().count(), "Subject\n".len() + MAIL_EXCERPT + 1);
    }
}
