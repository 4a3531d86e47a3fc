//! Workload (c): agent mail across hosts. An agent registered over MCP on node B and one on
//! node C send each other numbered messages through the hub's address namespace
//! (`agent action=send to=<connection_id>/<tuic_session>`) and read them with
//! `agent action=wait` (event-driven, explicit `since`).
//!
//! Every message is accounted for: sent (attempted), accepted (the tool answered success),
//! refused (the tool answered an error), no answer (the node died mid-call); delivered (read
//! by the recipient), duplicates (read again under a new id), replays (read again under the
//! same id), lost (accepted, never read, not held
//! in a killed node's memory, not refused late; must be 0); and, separately, lost with a
//! killed node's memory (accepted and sitting unread in the recipient's inbox, as read back
//! just before the harness killed that node: inboxes live in memory, as the spec says) and
//! late refusals (accepted, then named by a `delivery_refused` notice in the sender's inbox).
//! A refused message that is read anyway is a violation too.
//!
//! Agents keep their identity (`tuic_session`) across node restarts: after a restart they
//! initialize a new protocol session and register again with the same `tuic_session`, so
//! their address stays valid.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::mcp::{Call, Mcp};

/// Per-node controls and facts shared between the harness and the workload.
#[derive(Debug, Default)]
pub struct HostEvents {
    /// Bumped at every restart of the node (a new process has a new, empty inbox).
    pub epoch: AtomicU64,
    /// While set, the agent on this node stops reading, so delivered mail stays in its inbox.
    pub pause_reads: AtomicBool,
    /// While set, the agent on this node sends nothing new.
    pub pause_sends: AtomicBool,
    /// Sends of this node's agent in flight.
    in_flight: AtomicU64,
    /// The reader's current `since` (valid within the current epoch).
    read_since: AtomicU64,
}

/// One message's fate.
#[derive(Debug, Clone, Default)]
struct Fate {
    /// When the send call started (latency runs from here: a delivered send may be read
    /// before its answer reaches the sender).
    sent_at: Option<Instant>,
    accepted_at: Option<Instant>,
    refused: bool,
    no_answer: bool,
    reads: u32,
    /// The distinct `message_id`s it was read under (more than one: delivered twice as new
    /// mail; one id read again: a replay).
    read_ids: Vec<String>,
    latency: Option<Duration>,
    /// A `delivery_refused` notice named this send after it was accepted.
    late_refused: bool,
    /// It sat unread in its recipient's inbox when the harness killed that node.
    in_killed_memory: bool,
}

/// The shared account of one workload run.
#[derive(Debug, Default)]
struct Ledger {
    /// Keyed by (direction, number).
    msgs: HashMap<(usize, u64), Fate>,
    /// `missed_count` reported by inboxes (evicted before read).
    evicted: u64,
    /// Refusal codes seen, with counts.
    refusals: HashMap<String, u64>,
    /// The `status` of accepted sends (`delivered`, `accepted`, `uncertain`), with counts.
    statuses: HashMap<String, u64>,
    /// Message ids the sends were given, to match late-refusal notices.
    ids: HashMap<String, (usize, u64)>,
}

/// Counts for the summary line.
#[derive(Debug, Default, Clone)]
pub struct MailReport {
    /// Sends attempted.
    pub sent: u64,
    /// Sends the tool accepted.
    pub accepted: u64,
    /// Sends the tool refused.
    pub refused: u64,
    /// Sends without an answer (the node died mid-call, a timeout).
    pub no_answer: u64,
    /// Distinct messages read by their recipient.
    pub delivered: u64,
    /// Extra reads of a message under a new `message_id`: delivered twice as distinct mail,
    /// which no recipient can dedupe.
    pub duplicates: u64,
    /// Extra reads of a message under the `message_id` already read (a replay; the spec lets
    /// recipients dedupe those, but nothing in these scenarios should cause one).
    pub replays: u64,
    /// Accepted, never read, not held in a killed node's memory, not refused late.
    pub lost: u64,
    /// Accepted, never read, and in its recipient's inbox (read back just before the kill)
    /// when the harness killed that node.
    pub lost_killed_memory: u64,
    /// Accepted, never read, and refused later: the sender got a `delivery_refused` notice
    /// (not silent, so not counted as lost).
    pub late_refused: u64,
    /// Refused but read anyway.
    pub refused_delivered: u64,
    /// Messages evicted from an inbox before being read.
    pub evicted: u64,
    /// Send-call to read latency, p50 and p99.
    pub latency_p50: Option<Duration>,
    /// See `latency_p50`.
    pub latency_p99: Option<Duration>,
    /// Refusal codes and counts, for the report.
    pub refusal_codes: Vec<(String, u64)>,
    /// Statuses of accepted sends and counts (`delivered`: the destination acknowledged within
    /// the send's wait; `accepted`: held in an outbox; `uncertain`: on the wire when a link
    /// dropped, held and resent with the same id).
    pub statuses: Vec<(String, u64)>,
}

/// An agent on one node, sharing one MCP protocol session between its sender and receiver.
#[derive(Debug)]
struct Agent {
    socket: PathBuf,
    name: String,
    tuic: String,
    /// The generation of the current registration, the protocol session, and whether the
    /// identity is registered on it.
    mcp: tokio::sync::Mutex<(u64, Option<Mcp>, bool)>,
}

impl Agent {
    /// The current protocol session (registering once), and its generation.
    ///
    /// The protocol session is kept across resets: registering again on it is the same caller
    /// (a restarted node recovers the id), while a fresh session would be a second claimant of
    /// the identity, refused while the old session still holds it (issue 40, finding 1).
    async fn session(&self) -> Option<(u64, Mcp)> {
        let mut g = self.mcp.lock().await;
        if !g.2 {
            if g.1.is_none() {
                g.1 = Some(Mcp::connect(&self.socket).await.ok()?);
            }
            let m = g.1.as_mut()?;
            let r = m
                .call(
                    "agent",
                    json!({"action":"register","name":self.name,"tuic_session":self.tuic}),
                    Duration::from_secs(10),
                )
                .await;
            match r {
                Call::Answer {
                    is_error: false, ..
                } => {
                    g.0 += 1;
                    g.2 = true;
                }
                _ => return None,
            }
        }
        g.1.clone().map(|m| (g.0, m))
    }

    /// Forgets registration generation `generation` (the next call registers again).
    async fn reset(&self, generation: u64) {
        let mut g = self.mcp.lock().await;
        if g.0 == generation {
            g.2 = false;
        }
    }
}

/// Parameters of one mail run.
#[derive(Debug, Clone)]
pub struct MailPlan {
    /// Messages per direction.
    pub per_direction: u64,
    /// Pause between two sends of one sender.
    pub interval: Duration,
    /// How long a reader whose node restarted waits, after registering again, before its first
    /// read: a slow agent, so the mail the hub held while the node was down arrives faster
    /// than it is read and fills the inbox (the hub must hold the rest, not evict).
    pub read_lag_after_restart: Duration,
}

/// A running mail workload.
#[derive(Debug)]
pub struct MailRun {
    agents: Vec<Arc<Agent>>,
    ledger: Arc<Mutex<Ledger>>,
    stop_receivers: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    senders: Vec<JoinHandle<()>>,
    receivers: Vec<JoinHandle<()>>,
    events: [Arc<HostEvents>; 2],
}

/// Why mail could not run.
pub const UNAVAILABLE: &str = "mail: not available (no cross-host route)";

/// Registers agent `alice` on node B and `bob` on node C and probes the cross-host route
/// (one send B → C). `Ok(None)` when the route does not exist (the send is refused), which
/// the scenario reports as [`UNAVAILABLE`] instead of numbers.
pub async fn start(
    sockets: [PathBuf; 2],
    conn_ids: [&str; 2],
    events: [Arc<HostEvents>; 2],
    plan: MailPlan,
) -> anyhow::Result<Option<MailRun>> {
    let agents: Vec<Arc<Agent>> = ["alice", "bob"]
        .iter()
        .zip(sockets)
        .map(|(name, socket)| {
            Arc::new(Agent {
                socket,
                name: (*name).to_owned(),
                tuic: uuid::Uuid::new_v4().to_string(),
                mcp: tokio::sync::Mutex::new((0, None, false)),
            })
        })
        .collect();
    for a in &agents {
        anyhow::ensure!(
            a.session().await.is_some(),
            "registering agent {} over MCP failed",
            a.name
        );
    }
    let addr = |to: usize| format!("{}/{}", conn_ids[to], agents[to].tuic);
    let (_, mut m) = agents[0].session().await.expect("registered above");
    // Peers propagate through the hub: wait (bounded) until each agent lists the other under
    // its address. Without a cross-host route the address never appears and the probe below
    // is refused.
    for (from, to) in [(0, 1), (1, 0)] {
        let (_, mut m) = agents[from].session().await.expect("registered above");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(15) {
            let r = m
                .call(
                    "agent",
                    json!({"action":"list_peers"}),
                    Duration::from_secs(5),
                )
                .await;
            if let Call::Answer { value, .. } = r
                && value["peers"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|p| p["address"] == addr(to)))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let probe = m
        .call(
            "agent",
            json!({"action":"send","to":addr(1),"message":"chaos:probe"}),
            Duration::from_secs(10),
        )
        .await;
    match probe {
        Call::Answer {
            is_error: false, ..
        } => {}
        Call::Answer {
            is_error: true,
            value,
        } => {
            eprintln!("mail probe refused: {value}");
            return Ok(None);
        }
        Call::Uncertain(e) => anyhow::bail!("mail probe got no answer: {e}"),
    }
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop_receivers = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for dir in 0..2 {
        let (from, to) = (dir, 1 - dir);
        senders.push(tokio::spawn(sender(
            agents[from].clone(),
            addr(to),
            dir,
            plan.clone(),
            ledger.clone(),
            sent.clone(),
            events[from].clone(),
        )));
        receivers.push(tokio::spawn(receiver(
            agents[to].clone(),
            dir,
            events[to].clone(),
            ledger.clone(),
            stop_receivers.clone(),
            plan.read_lag_after_restart,
        )));
    }
    Ok(Some(MailRun {
        agents,
        ledger,
        stop_receivers,
        sent,
        senders,
        receivers,
        events,
    }))
}

/// `chaos:<direction>:<number>` → (direction, number).
fn parse_body(body: &str) -> Option<(usize, u64)> {
    let mut parts = body.split(':');
    let (Some("chaos"), Some(d), Some(n), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    Some((d.parse().ok()?, n.parse().ok()?))
}

/// Sends in flight per sender at most: sends run concurrently (a send waits up to
/// `peer_send_wait_ms` for the far side's verdict, and the pace must not depend on it).
const IN_FLIGHT: usize = 32;

async fn sender(
    agent: Arc<Agent>,
    to: String,
    dir: usize,
    plan: MailPlan,
    ledger: Arc<Mutex<Ledger>>,
    sent: Arc<AtomicU64>,
    host: Arc<HostEvents>,
) {
    let mut tick = tokio::time::interval(plan.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut sends = tokio::task::JoinSet::new();
    for n in 0..plan.per_direction {
        tick.tick().await;
        // The harness pauses a sender for a moment around a kill; it always resumes.
        while host.pause_sends.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        sent.fetch_add(1, Ordering::Relaxed);
        host.in_flight.fetch_add(1, Ordering::SeqCst);
        let (agent, to, ledger, host) = (agent.clone(), to.clone(), ledger.clone(), host.clone());
        sends.spawn(async move {
            send_one(&agent, &to, dir, n, &ledger).await;
            host.in_flight.fetch_sub(1, Ordering::SeqCst);
            drop(slot);
        });
    }
    while sends.join_next().await.is_some() {}
}

/// One numbered send and its accounting.
async fn send_one(agent: &Agent, to: &str, dir: usize, n: u64, ledger: &Mutex<Ledger>) {
    let Some((generation, mut m)) = agent.session().await else {
        // The sender's node is down: the send was never made (counted as refused).
        let mut l = ledger.lock().expect("ledger");
        l.msgs.entry((dir, n)).or_default().refused = true;
        *l.refusals
            .entry("sender_node_unreachable".into())
            .or_default() += 1;
        return;
    };
    ledger
        .lock()
        .expect("ledger")
        .msgs
        .entry((dir, n))
        .or_default()
        .sent_at = Some(Instant::now());
    let r = m
        .call(
            "agent",
            json!({"action":"send","to":to,"message":format!("chaos:{dir}:{n}")}),
            Duration::from_secs(10),
        )
        .await;
    let reset = {
        let mut l = ledger.lock().expect("ledger");
        match r {
            Call::Answer {
                is_error: false,
                value,
            } => {
                l.msgs.entry((dir, n)).or_default().accepted_at = Some(Instant::now());
                if let Some(id) = value["message_id"].as_str() {
                    l.ids.insert(id.to_owned(), (dir, n));
                }
                let status = value["status"].as_str().unwrap_or("ok").to_owned();
                *l.statuses.entry(status).or_default() += 1;
                false
            }
            Call::Answer {
                is_error: true,
                value,
            } => {
                l.msgs.entry((dir, n)).or_default().refused = true;
                let code = value["code"].as_str().unwrap_or("error").to_owned();
                *l.refusals.entry(code.clone()).or_default() += 1;
                code.contains("regist") || code.contains("unknown_sender")
            }
            Call::Uncertain(_) => {
                l.msgs.entry((dir, n)).or_default().no_answer = true;
                true
            }
        }
    };
    if reset {
        agent.reset(generation).await;
    }
}

async fn receiver(
    agent: Arc<Agent>,
    dir: usize,
    events: Arc<HostEvents>,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
    read_lag_after_restart: Duration,
) {
    // `since` is only meaningful within one process of the recipient's node: a restarted node
    // has a fresh inbox whose cursors start again.
    let mut since: (u64, u64) = (events.epoch.load(Ordering::SeqCst), 0);
    while !stop.load(Ordering::Relaxed) {
        if events.pause_reads.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let Some((generation, mut m)) = agent.session().await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let epoch = events.epoch.load(Ordering::SeqCst);
        if since.0 != epoch {
            since = (epoch, 0);
            // Registered again (by `session`), not reading yet.
            tokio::time::sleep(read_lag_after_restart).await;
        }
        let r = m
            .call(
                "agent",
                json!({"action":"wait","since":since.1,"timeout_ms":1000}),
                Duration::from_secs(5),
            )
            .await;
        match r {
            Call::Answer {
                is_error: false,
                value,
            } => {
                let mut l = ledger.lock().expect("ledger");
                l.evicted += value["missed_count"].as_u64().unwrap_or(0);
                for msg in value["new_messages"].as_array().into_iter().flatten() {
                    let Some(body) = msg["message"].as_str() else {
                        continue;
                    };
                    // Notices are not mail: a late refusal names one of our sends.
                    if let Some(kind) = msg["kind"].as_str() {
                        if kind == "delivery_refused" {
                            let hit = l
                                .ids
                                .iter()
                                .find(|(id, _)| body.contains(id.as_str()))
                                .map(|(_, k)| *k);
                            if let Some(k) = hit {
                                l.msgs.entry(k).or_default().late_refused = true;
                            }
                        }
                        continue;
                    }
                    let Some((d, n)) = parse_body(body) else {
                        continue;
                    };
                    if d != dir {
                        continue;
                    }
                    let fate = l.msgs.entry((d, n)).or_default();
                    fate.reads += 1;
                    if fate.reads == 1 {
                        fate.latency = fate.sent_at.map(|t| t.elapsed());
                    }
                    let id = msg["message_id"].as_str().unwrap_or_default();
                    if !fate.read_ids.iter().any(|r| r == id) {
                        fate.read_ids.push(id.to_owned());
                    }
                }
                if let Some(next) = value["next_since"].as_u64() {
                    since.1 = next;
                }
                events.read_since.store(since.1, Ordering::SeqCst);
            }
            Call::Answer { is_error: true, .. } | Call::Uncertain(_) => {
                agent.reset(generation).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

impl MailRun {
    /// Before node `reader` is killed: pauses the other agent's sends and this agent's reads,
    /// waits (bounded) until every accepted message to this agent is either read or sitting
    /// in its inbox, and marks those in the inbox as held in the node's memory. Call
    /// [`MailRun::resume`] after the kill.
    pub async fn hold_for_kill(&self, reader: usize) -> anyhow::Result<u64> {
        let (sender, dir) = (1 - reader, 1 - reader);
        self.events[reader]
            .pause_reads
            .store(true, Ordering::SeqCst);
        self.events[sender]
            .pause_sends
            .store(true, Ordering::SeqCst);
        let t0 = Instant::now();
        while self.events[sender].in_flight.load(Ordering::SeqCst) > 0 {
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(15),
                "sends still in flight after 15 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The reader is paused, so its cursor is stable; read what its inbox holds beyond it
        // (an explicit `since` moves no stored cursor).
        let agent = &self.agents[reader];
        let since = self.events[reader].read_since.load(Ordering::SeqCst);
        loop {
            let held = match agent.session().await {
                Some((_, mut m)) => {
                    let r = m
                        .call(
                            "agent",
                            json!({"action":"inbox","since":since,"limit":1000}),
                            Duration::from_secs(5),
                        )
                        .await;
                    match r {
                        Call::Answer {
                            is_error: false,
                            value,
                        } => value["messages"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|m| parse_body(m["message"].as_str()?))
                            .filter(|&(d, _)| d == dir)
                            .collect::<Vec<_>>(),
                        _ => Vec::new(),
                    }
                }
                None => Vec::new(),
            };
            let missing = {
                let mut l = self.ledger.lock().expect("ledger");
                for k in &held {
                    l.msgs.entry(*k).or_default().in_killed_memory = true;
                }
                l.msgs
                    .iter()
                    .filter(|((d, _), f)| {
                        *d == dir && f.accepted_at.is_some() && f.reads == 0 && !f.in_killed_memory
                    })
                    .count()
            };
            if missing == 0 {
                return Ok(held.len() as u64);
            }
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(20),
                "{missing} accepted messages never reached the paused reader's inbox"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Ends [`MailRun::hold_for_kill`]: sends and reads go on.
    pub fn resume(&self) {
        for e in &self.events {
            e.pause_sends.store(false, Ordering::SeqCst);
            e.pause_reads.store(false, Ordering::SeqCst);
        }
    }

    /// Waits (bounded) for the senders to finish their quota.
    pub async fn senders_done(&mut self, limit: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        for s in &mut self.senders {
            tokio::time::timeout_at(deadline, s)
                .await
                .map_err(|_| anyhow::anyhow!("mail senders did not finish within {limit:?}"))??;
        }
        Ok(())
    }

    /// Waits (bounded, polling) until every accepted message has been read, then stops the
    /// receivers and returns the counts.
    pub async fn finish(mut self, drain: Duration) -> MailReport {
        let deadline = Instant::now() + drain;
        loop {
            let pending = {
                let l = self.ledger.lock().expect("ledger");
                l.msgs
                    .values()
                    .filter(|f| {
                        f.accepted_at.is_some()
                            && f.reads == 0
                            && !f.late_refused
                            && !f.in_killed_memory
                    })
                    .count()
            };
            if pending == 0 || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.stop_receivers.store(true, Ordering::Relaxed);
        for r in std::mem::take(&mut self.receivers) {
            let _ = tokio::time::timeout(Duration::from_secs(10), r).await;
        }
        let l = self.ledger.lock().expect("ledger");
        let mut rep = MailReport {
            sent: self.sent.load(Ordering::Relaxed),
            evicted: l.evicted,
            ..MailReport::default()
        };
        let mut lat = Vec::new();
        let debug = std::env::var_os("CHAOS_DEBUG").is_some();
        for ((dir, seq), f) in &l.msgs {
            rep.accepted += u64::from(f.accepted_at.is_some());
            rep.refused += u64::from(f.refused);
            rep.no_answer += u64::from(f.no_answer);
            rep.delivered += u64::from(f.reads > 0);
            let ids = f.read_ids.len() as u32;
            rep.duplicates += u64::from(ids.saturating_sub(1));
            rep.replays += u64::from(f.reads.saturating_sub(ids));
            rep.refused_delivered += u64::from(f.refused && f.reads > 0);
            lat.extend(f.latency);
            if let (Some(_), 0) = (f.accepted_at, f.reads) {
                if f.late_refused {
                    rep.late_refused += 1;
                    continue;
                }
                if f.in_killed_memory {
                    rep.lost_killed_memory += 1;
                } else {
                    rep.lost += 1;
                }
                if debug {
                    // `CHAOS_DEBUG=1`: which accepted messages were never read, and when.
                    let id = l
                        .ids
                        .iter()
                        .find(|(_, k)| **k == (*dir, *seq))
                        .map_or("-", |(id, _)| id.as_str());
                    eprintln!(
                        "chaos unread direction={dir} seq={seq} message_id={id} killed_memory={} accepted_at={:?}",
                        f.in_killed_memory, f.accepted_at
                    );
                }
            }
        }
        lat.sort();
        let pct = |p: usize| {
            lat.get((lat.len() * p / 100).min(lat.len().saturating_sub(1)))
                .copied()
        };
        if !lat.is_empty() {
            rep.latency_p50 = pct(50);
            rep.latency_p99 = pct(99);
        }
        rep.refusal_codes = l.refusals.iter().map(|(k, v)| (k.clone(), *v)).collect();
        rep.refusal_codes.sort();
        rep.statuses = l.statuses.iter().map(|(k, v)| (k.clone(), *v)).collect();
        rep.statuses.sort();
        rep
    }
}

/// A short description of the counts (used in failure messages).
pub fn describe(r: &MailReport) -> Value {
    json!({
        "sent": r.sent, "accepted": r.accepted, "refused": r.refused, "no_answer": r.no_answer,
        "delivered": r.delivered, "duplicates": r.duplicates, "replays": r.replays, "lost": r.lost,
        "lost_killed_memory": r.lost_killed_memory, "late_refused": r.late_refused,
        "refused_delivered": r.refused_delivered,
        "evicted": r.evicted, "refusals": r.refusal_codes, "statuses": r.statuses,
    })
}
