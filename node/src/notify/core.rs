//! The notification state machine, sans IO: what to send, replace or clear, given the events
//! the service feeds it and the time it passes in.
//!
//! Inputs: [`Core::raise`] (a notice with its dedupe key), [`Core::clear`] /
//! [`Core::clear_session`] (the question was answered or went away), [`Core::handle_timeout`].
//! Outputs: the [`Out`] list each input returns, and [`Core::poll_timeout`] (when to call
//! `handle_timeout` next). Rules:
//!
//! - One notification per key: raising an open key again is a no-op (a redraw), and a clear
//!   that is still inside the grace period is cancelled by it.
//! - At most one send per session per `coalesce_ms`: the rest are held, counted, and the
//!   newest still-open one is sent with the count when the interval ends.
//! - Muted, quiet-hours and disabled notices are recorded with that state and never sent.
//! - Memory is bounded: the recent list keeps [`RECENT`] records, at most [`MAX_OPEN`] keys are
//!   open (the oldest is forgotten past that), and coalescing groups are dropped once idle.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;

/// Records kept for `GET /notifications`.
pub const RECENT: usize = 256;
/// Held-back ids kept per coalescing group (the count covers any number).
pub const MAX_HELD: usize = 64;
/// Open (uncleared) keys kept before the oldest is forgotten.
pub const MAX_OPEN: usize = 4096;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A question or permission menu on a PTY.
    Question,
    /// `ui action=confirm` from an agent.
    Confirm,
    /// A session exited (non-zero, or watched).
    Exit,
    /// A watched session finished its work (idle or done).
    Done,
    /// `POST /notifications/test`.
    Test,
    /// Agent mail addressed to the person (`agent action=send to=human`).
    Mail,
    /// A workflow run is blocked on input (open until it moves) or failed.
    Workflow,
    /// An ACP agent asks for a permission (open until it is answered).
    Acp,
    /// A host went offline (open until it is back) or came back (a hub's connections).
    Host,
}

/// How a choice answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Bytes typed into the session's PTY.
    Keys(String),
    /// The answer to a `ui action=confirm` request.
    Confirm(bool),
    /// An option of an ACP agent's permission request.
    Acp {
        /// The ACP connection.
        connection: String,
        /// tuic's id for the request.
        request: String,
        /// The agent's option id.
        option: String,
    },
}

/// One answer offered with a notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Choice {
    /// What the button says.
    pub label: String,
    /// What pressing it does (not serialized: the route looks it up).
    #[serde(skip)]
    pub answer: Answer,
}

/// Where a notice comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Context {
    /// The host the session runs on.
    pub host: String,
    /// The session's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The session's alias (what the CLI and the web app name it by).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Its display name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The repository (its directory name) the session works in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// The checked-out branch there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The detected agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

impl Context {
    /// `host · repo@branch · session`, the line every channel shows.
    pub fn line(&self) -> String {
        let mut parts = vec![self.host.clone()];
        match (&self.repo, &self.branch) {
            (Some(r), Some(b)) => parts.push(format!("{r}@{b}")),
            (Some(r), None) => parts.push(r.clone()),
            _ => {}
        }
        if let Some(s) = self.session.as_ref().or(self.name.as_ref()) {
            parts.push(s.clone());
        }
        parts.join(" · ")
    }
}

/// An event worth telling the person about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The question's identity: the same key raised again is the same notification.
    pub key: String,
    /// What happened.
    pub kind: Kind,
    /// Where.
    pub context: Context,
    /// The question itself (or what happened), in full.
    pub text: String,
    /// Answers that can be given from the notification.
    pub choices: Vec<Choice>,
}

/// Where a notification stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Sent (or being sent) and not answered yet.
    Pending,
    /// Sent, then answered or gone: channels were told to clear it.
    Cleared,
    /// Folded into a later notification of the same session (see `count` there).
    Coalesced,
    /// Inside quiet hours: recorded, not sent.
    Suppressed,
    /// Its host or session is muted: recorded, not sent.
    Muted,
    /// Notifications are off (`notifications.enabled: false`).
    Disabled,
}

/// One channel's delivery of a notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delivery {
    /// `queued`, `sent`, `retrying`, `failed`, `dropped` (queue full) or `cleared`.
    pub state: String,
    /// Attempts made.
    pub attempts: u32,
    /// Why the last attempt failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A notification as `GET /notifications` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Record {
    /// Its id (the path segment of `/notifications/{id}/answer`).
    pub id: u64,
    /// The dedupe key.
    pub key: String,
    /// What happened.
    pub kind: Kind,
    /// Where.
    #[serde(flatten)]
    pub context: Context,
    /// The question or event text.
    pub text: String,
    /// Answers offered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<Choice>,
    /// Where it stands.
    pub state: State,
    /// Whether it was answered or went away.
    pub cleared: bool,
    /// How many notifications this one stands for (a coalesced flood: more than 1).
    pub count: u32,
    /// When it was raised (Unix ms).
    pub created_ms: u64,
    /// When it was cleared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleared_ms: Option<u64>,
    /// Per-channel delivery (`web_push`, `ntfy`, `webhook`).
    pub deliveries: BTreeMap<String, Delivery>,
}

/// What the service must do after an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// Send this notification on every channel.
    Send(Record),
    /// Tell every channel that can to replace or close this notification.
    Clear(Record),
    /// A record changed without anything to send (recorded only): tell open pages.
    Changed(Record),
}

/// What gates a notice at the moment it is raised (computed by the service from the config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gate {
    /// `notifications.enabled` is false.
    pub disabled: bool,
    /// The host or session is muted.
    pub muted: bool,
    /// Inside quiet hours.
    pub quiet: bool,
}

/// A session's coalescing window.
#[derive(Debug, Default)]
struct Group {
    /// When the last notification of this group was sent.
    last_sent_ms: Option<u64>,
    /// Ids held back since, oldest first (answered ones leave it).
    held: Vec<u64>,
    /// How many were held back since the last send, answered ones included: the count the
    /// next send carries.
    folded: u32,
}

/// The state machine.
#[derive(Debug)]
pub struct Core {
    coalesce_ms: u64,
    clear_grace_ms: u64,
    next_id: u64,
    records: VecDeque<Record>,
    /// Open key → record id, and insertion order for the bound.
    open: HashMap<String, u64>,
    open_order: VecDeque<String>,
    /// Key → when its clear takes effect (a question gone, waiting out the grace).
    clearing: HashMap<String, u64>,
    groups: HashMap<String, Group>,
}

impl Core {
    /// A machine with these intervals (ms).
    pub fn new(coalesce_ms: u64, clear_grace_ms: u64) -> Self {
        Self {
            coalesce_ms,
            clear_grace_ms,
            next_id: 1,
            records: VecDeque::new(),
            open: HashMap::new(),
            open_order: VecDeque::new(),
            clearing: HashMap::new(),
            groups: HashMap::new(),
        }
    }

    /// Takes new intervals (a config reload); they apply to what is raised from now on.
    pub fn set_intervals(&mut self, coalesce_ms: u64, clear_grace_ms: u64) {
        self.coalesce_ms = coalesce_ms;
        self.clear_grace_ms = clear_grace_ms;
    }

    /// The recent records, newest first.
    pub fn recent(&self) -> Vec<Record> {
        self.records.iter().rev().cloned().collect()
    }

    /// One record.
    pub fn get(&self, id: u64) -> Option<&Record> {
        self.records.iter().find(|r| r.id == id)
    }

    /// How many keys are open (for the memory bound's test and metrics).
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// How many coalescing groups are held.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    fn get_mut(&mut self, id: u64) -> Option<&mut Record> {
        self.records.iter_mut().find(|r| r.id == id)
    }

    /// A notice arrived.
    pub fn raise(&mut self, now: u64, n: Notice, gate: Gate) -> Vec<Out> {
        if self.open.contains_key(&n.key) {
            // The same question again (a redraw): not new, and no longer going away.
            self.clearing.remove(&n.key);
            return Vec::new();
        }
        self.prune(now);
        let id = self.next_id;
        self.next_id += 1;
        let group_key = group_of(&n);
        let state = if gate.disabled {
            State::Disabled
        } else if gate.muted {
            State::Muted
        } else if gate.quiet {
            State::Suppressed
        } else {
            let g = self.groups.entry(group_key.clone()).or_default();
            match g.last_sent_ms {
                Some(t) if now < t.saturating_add(self.coalesce_ms) => {
                    g.held.push(id);
                    g.folded += 1;
                    // Only the newest can be sent; the count keeps the rest.
                    if g.held.len() > MAX_HELD {
                        g.held.remove(0);
                    }
                    State::Coalesced
                }
                _ => {
                    g.last_sent_ms = Some(now);
                    State::Pending
                }
            }
        };
        let rec = Record {
            id,
            key: n.key.clone(),
            kind: n.kind,
            context: n.context,
            text: n.text,
            choices: n.choices,
            state,
            cleared: false,
            count: 1,
            created_ms: now,
            cleared_ms: None,
            deliveries: BTreeMap::new(),
        };
        // Informational notices (an exit, a test, mail, `news:` keys) have nothing to answer:
        // they are not open.
        if matches!(
            n.kind,
            Kind::Question | Kind::Confirm | Kind::Done | Kind::Workflow | Kind::Acp | Kind::Host
        ) && !n.key.starts_with("news:")
        {
            self.open.insert(n.key.clone(), id);
            self.open_order.push_back(n.key);
            while self.open.len() > MAX_OPEN {
                let Some(k) = self.open_order.pop_front() else {
                    break;
                };
                self.open.remove(&k);
                self.clearing.remove(&k);
            }
        }
        self.records.push_back(rec.clone());
        while self.records.len() > RECENT {
            self.records.pop_front();
        }
        if state == State::Pending {
            vec![Out::Send(rec)]
        } else {
            vec![Out::Changed(rec)]
        }
    }

    /// The notice with this key was answered or went away. Questions wait out the grace
    /// period (a redraw re-raises them); `now_too` skips it (an exit, a resolved confirm).
    pub fn clear(&mut self, now: u64, key: &str, now_too: bool) -> Vec<Out> {
        if !self.open.contains_key(key) {
            return Vec::new();
        }
        if now_too || self.clear_grace_ms == 0 {
            self.clearing.remove(key);
            return self.clear_now(now, key);
        }
        self.clearing
            .entry(key.to_owned())
            .or_insert(now + self.clear_grace_ms);
        Vec::new()
    }

    /// Clears every open notice of a session whose key starts with `prefix` (all of them for
    /// an empty prefix).
    pub fn clear_session(
        &mut self,
        now: u64,
        session_id: &str,
        prefix: &str,
        now_too: bool,
    ) -> Vec<Out> {
        let keys: Vec<String> = self
            .open
            .iter()
            .filter(|(k, id)| {
                k.starts_with(prefix)
                    && self
                        .get(**id)
                        .is_some_and(|r| r.context.session_id.as_deref() == Some(session_id))
            })
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for k in keys {
            out.extend(self.clear(now, &k, now_too));
        }
        out
    }

    /// Clears every open notice whose key starts with `prefix` (a workflow run's, an ACP
    /// connection's, a hub connection's).
    pub fn clear_prefix(&mut self, now: u64, prefix: &str, now_too: bool) -> Vec<Out> {
        let keys: Vec<String> = self
            .open
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        let mut out = Vec::new();
        for k in keys {
            out.extend(self.clear(now, &k, now_too));
        }
        out
    }

    /// Whether `key` is open (raised and not cleared).
    pub fn is_open(&self, key: &str) -> bool {
        self.open.contains_key(key)
    }

    fn clear_now(&mut self, now: u64, key: &str) -> Vec<Out> {
        let Some(id) = self.open.remove(key) else {
            return Vec::new();
        };
        self.open_order.retain(|k| k != key);
        for g in self.groups.values_mut() {
            g.held.retain(|h| *h != id);
        }
        let Some(r) = self.get_mut(id) else {
            return Vec::new();
        };
        r.cleared = true;
        r.cleared_ms = Some(now);
        if r.state == State::Pending {
            r.state = State::Cleared;
            vec![Out::Clear(r.clone())]
        } else {
            vec![Out::Changed(r.clone())]
        }
    }

    /// When [`Core::handle_timeout`] is due next.
    pub fn poll_timeout(&self) -> Option<u64> {
        let clears = self.clearing.values().copied();
        let flushes = self
            .groups
            .values()
            .filter(|g| !g.held.is_empty())
            .filter_map(|g| g.last_sent_ms.map(|t| t.saturating_add(self.coalesce_ms)));
        clears.chain(flushes).min()
    }

    /// Time passed: clears whose grace ran out, coalesced floods whose interval ended.
    pub fn handle_timeout(&mut self, now: u64) -> Vec<Out> {
        let mut out = Vec::new();
        let due: Vec<String> = self
            .clearing
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            self.clearing.remove(&k);
            out.extend(self.clear_now(now, &k));
        }
        let coalesce = self.coalesce_ms;
        let flush: Vec<String> = self
            .groups
            .iter()
            .filter(|(_, g)| {
                !g.held.is_empty()
                    && g.last_sent_ms
                        .is_some_and(|t| t.saturating_add(coalesce) <= now)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for gk in flush {
            let Some(g) = self.groups.get_mut(&gk) else {
                continue;
            };
            let held = std::mem::take(&mut g.held);
            let count = std::mem::take(&mut g.folded);
            g.last_sent_ms = Some(now);
            let Some(&newest) = held.last() else { continue };
            if let Some(r) = self.get_mut(newest) {
                r.state = State::Pending;
                r.count = count;
                out.push(Out::Send(r.clone()));
            }
        }
        self.prune(now);
        out
    }

    /// Drops coalescing groups that hold nothing and whose window has passed.
    fn prune(&mut self, now: u64) {
        let coalesce = self.coalesce_ms;
        for g in self.groups.values_mut() {
            if g.held.is_empty()
                && g.last_sent_ms
                    .is_some_and(|t| now >= t.saturating_add(coalesce))
            {
                g.folded = 0;
            }
        }
        self.groups.retain(|_, g| {
            !g.held.is_empty()
                || g.last_sent_ms
                    .is_some_and(|t| now < t.saturating_add(coalesce))
        });
    }

    /// Records a channel's delivery state; returns the record if it changed.
    pub fn set_delivery(&mut self, id: u64, channel: &str, d: Delivery) -> Option<Record> {
        let r = self.get_mut(id)?;
        if r.deliveries.get(channel) == Some(&d) {
            return None;
        }
        r.deliveries.insert(channel.to_owned(), d);
        Some(r.clone())
    }
}

/// The coalescing group: the session, else the host.
fn group_of(n: &Notice) -> String {
    // A host's offline/back and a run's states are each their own news: never folded.
    if matches!(n.kind, Kind::Host | Kind::Workflow) {
        return format!("k:{}", n.key);
    }
    match &n.context.session_id {
        Some(s) => format!("s:{s}"),
        None => format!("h:{}", n.context.host),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(session: &str, text: &str) -> Notice {
        Notice {
            key: format!("q:{session}:{text}"),
            kind: Kind::Question,
            context: Context {
                host: "box".into(),
                session_id: Some(session.into()),
                session: Some(format!("{session}-alias")),
                ..Context::default()
            },
            text: text.into(),
            choices: Vec::new(),
        }
    }

    fn sends(out: &[Out]) -> Vec<&Record> {
        out.iter()
            .filter_map(|o| match o {
                Out::Send(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn same_question_is_one_notification_and_a_redraw_cancels_the_clear() {
        let mut c = Core::new(0, 1000);
        assert_eq!(
            sends(&c.raise(0, q("s", "Proceed?"), Gate::default())).len(),
            1
        );
        assert!(c.raise(10, q("s", "Proceed?"), Gate::default()).is_empty());
        // Gone for a moment (a redraw), back within the grace: not cleared, not re-sent.
        assert!(c.clear(100, "q:s:Proceed?", false).is_empty());
        assert!(c.raise(300, q("s", "Proceed?"), Gate::default()).is_empty());
        assert!(c.handle_timeout(5000).is_empty());
        // Really answered: cleared once the grace runs out.
        assert!(c.clear(6000, "q:s:Proceed?", false).is_empty());
        assert_eq!(c.poll_timeout(), Some(7000));
        let out = c.handle_timeout(7000);
        assert!(matches!(&out[..], [Out::Clear(r)] if r.cleared && r.state == State::Cleared));
        assert_eq!(c.open_count(), 0);
    }

    #[test]
    fn a_flood_is_one_send_then_one_with_the_count() {
        let mut c = Core::new(1000, 0);
        let mut sent = 0;
        for i in 0..100 {
            sent += sends(&c.raise(i * 10, q("s", &format!("q{i}")), Gate::default())).len();
        }
        assert_eq!(sent, 1);
        assert_eq!(c.poll_timeout(), Some(1000));
        let out = c.handle_timeout(1000);
        let s = sends(&out);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].count, 99);
        assert_eq!(s[0].text, "q99");
        // Questions that replace each other (each answered by the next) still count.
        let mut c = Core::new(1000, 0);
        for i in 0..10 {
            c.clear_session(i, "s", "q:", true);
            c.raise(i, q("s", &format!("r{i}")), Gate::default());
        }
        let out = c.handle_timeout(1000);
        assert!(matches!(&sends(&out)[..], [r] if r.count == 9 && r.text == "r9"));
        // Another session is not held back by this one.
        assert_eq!(sends(&c.raise(1001, q("t", "x"), Gate::default())).len(), 1);
    }

    #[test]
    fn replaced_questions_flush_with_their_count_at_the_end_of_the_window() {
        let mut c = Core::new(3000, 200);
        let mut sent = Vec::new();
        let mut step = |c: &mut Core, t: u64, text: &str| {
            sent.extend(c.handle_timeout(t));
            let mut out = c.clear_session(t, "s", "q:", false);
            out.extend(c.raise(t, q("s", text), Gate::default()));
            sent.extend(out);
        };
        for (t, text) in [(0, "a"), (750, "b"), (1750, "c"), (2250, "d")] {
            step(&mut c, t, text);
        }
        let mut t = 2250;
        while let Some(due) = c.poll_timeout() {
            t = due.max(t);
            sent.extend(c.handle_timeout(t));
            if t > 10_000 {
                break;
            }
        }
        let s = sends(&sent);
        assert_eq!(s.len(), 2, "{sent:#?}");
        assert_eq!((s[1].text.as_str(), s[1].count), ("d", 3));
    }

    #[test]
    fn gated_notices_are_recorded_not_sent() {
        let mut c = Core::new(0, 0);
        let quiet = Gate {
            quiet: true,
            ..Gate::default()
        };
        let out = c.raise(0, q("s", "a"), quiet);
        assert!(matches!(&out[..], [Out::Changed(r)] if r.state == State::Suppressed));
        let muted = Gate {
            muted: true,
            ..Gate::default()
        };
        let out = c.raise(0, q("s", "b"), muted);
        assert!(matches!(&out[..], [Out::Changed(r)] if r.state == State::Muted));
        // Clearing a suppressed one sends nothing.
        let out = c.clear(1, "q:s:a", true);
        assert!(matches!(&out[..], [Out::Changed(r)] if r.cleared));
    }

    #[test]
    fn memory_stays_bounded_under_a_stream_of_distinct_sessions() {
        let mut c = Core::new(10, 0);
        for i in 0..20_000u64 {
            c.raise(i, q(&format!("s{i}"), "a"), Gate::default());
            c.handle_timeout(i);
        }
        assert!(c.records.len() <= RECENT);
        assert!(c.open_count() <= MAX_OPEN);
        assert!(c.group_count() <= 20, "{}", c.group_count());
        // One group flooded within its window keeps a bounded list and the full count.
        let mut c = Core::new(1_000_000, 0);
        for i in 0..10_000u64 {
            c.raise(i, q("s", &format!("{i}")), Gate::default());
        }
        assert!(c.groups.values().all(|g| g.held.len() <= MAX_HELD));
        let out = c.handle_timeout(1_000_000);
        assert!(matches!(&sends(&out)[..], [r] if r.count == 9_999));
    }
}
