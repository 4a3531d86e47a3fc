//! The hub's end of one peer link: the connection's link task ([`drive_over`]: dial, run,
//! retire, back off) and its IO shell ([`HubEnd`]) around the sans-IO `RelayEnd`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tuic_node::ext::mail::{deliver_local, local_entries};
use tuic_node::link::driver::{self, End, FrameIo};
use tuic_proto::peer::{
    ErrorCode, LOCAL as LINK_LOCAL, LinkConfig, LinkEvent, LinkRole, PeerLink, RelayEnd,
    RelayOutput, Request, RequestId, Response, WireMessage,
};

use super::cut::{CutThrough, WaitingRelay};
use super::{HubCmd, PeerHub, Relayed, Routed, custody_failed};
use crate::connections::Conn;

/// A connection's link task over any frame transport (`super::drive` runs it with the hub's
/// dials): `dial` opens one connection to the node (its error
/// names what failed, never a URL or a token). The ends do not know the transport.
pub async fn drive_over<I, F, Fut>(hub: Arc<PeerHub>, conn: Arc<Conn>, dial: F)
where
    I: FrameIo,
    F: Fn(Arc<Conn>) -> Fut,
    Fut: std::future::Future<Output = Result<I, String>>,
{
    hub.ensure_outbox(&conn.id);
    let mut delays =
        crate::connections::reconnect_backoff(hub.node.config().tuning.peer_reconnect_max_ms);
    let stop = conn.stop.clone();
    let mut ups = conn.ups.subscribe();
    // This carrier's own flap damping (a node that accepts the mail link and drops it at
    // once while its session link holds); the host's is on the session link.
    let mut flaps = tuic_proto::peer::Flaps::default();
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = tokio::time::sleep_until(conn.first_dial) => {}
    }
    loop {
        let dialed = tokio::select! {
            _ = stop.cancelled() => return,
            d = dial(conn.clone()) => d,
        };
        match dialed {
            Err(e) => {
                tracing::debug!(conn = %conn.id, error = %e, "peer link dial failed");
                conn.set(|s| {
                    s.peer_up = false;
                    s.peer_error = Some(e);
                });
            }
            Ok(mut io) => {
                let (tx, mut rx) = mpsc::unbounded_channel();
                let generation = {
                    let mut g = hub.lock();
                    let generation = g.relay.attach(&conn.id);
                    g.links.insert(conn.id.clone(), (generation, tx.clone()));
                    generation
                };
                // Every change of the hub's upstream tool set reaches this link at once (the
                // tick compares generations too, as a backstop).
                let mut changes = hub.node.upstreams.subscribe();
                // A host the session link finds down takes this link down with it.
                let mut downs = conn.downs.subscribe();
                downs.borrow_and_update();
                let wake = tx.clone();
                hub.node.tasks.spawn(async move {
                    loop {
                        tokio::select! {
                            _ = tx.closed() => break,
                            r = changes.changed() => {
                                if r.is_err() || tx.send(HubCmd::UpstreamsChanged).is_err() {
                                    break;
                                }
                            }
                            r = downs.changed() => {
                                if r.is_err() || tx.send(HubCmd::HostDown).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
                let link = PeerLink::new(
                    tuic_node::ext::mono_ms(),
                    LinkConfig::new(
                        &tuic_node::ext::mail::local_id(&hub.node),
                        &conn.id,
                        LinkRole::Hub,
                    ),
                );
                let mut end = HubEnd {
                    hub: hub.clone(),
                    conn: conn.clone(),
                    end: RelayEnd::new(&conn.id, generation),
                    hinted: None,
                    cut: CutThrough::new(wake),
                };
                let started = tuic_node::ext::mono_ms();
                let ended = driver::run(link, &mut io, &mut end, &mut rx, &stop).await;
                if end.end.was_up() {
                    flaps.up(started);
                    flaps.down(tuic_node::ext::mono_ms());
                    delays = crate::connections::reconnect_backoff(
                        hub.node.config().tuning.peer_reconnect_max_ms,
                    );
                }
                tracing::debug!(conn = %conn.id, ?ended, "peer link task ended");
                if ended == driver::Ended::Stopped {
                    return;
                }
            }
        }
        let hold = Duration::from_millis(flaps.hold_ms(rand::random()));
        if !hold.is_zero() {
            tracing::warn!(conn = %conn.id, flaps = flaps.count(), hold_ms = hold.as_millis() as u64, "peer link flapping: its next dial is held back");
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(hold) => {}
            }
        }
        let delay = delays.next().unwrap_or(Duration::from_secs(30));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
            // The session link reached the host: it is back, dial now with a fresh backoff.
            r = ups.changed() => {
                if r.is_ok() {
                    delays = crate::connections::reconnect_backoff(hub.node.config().tuning.peer_reconnect_max_ms);
                }
            }
        }
    }
}

/// The IO shell of the hub's end of one link: feeds its events into the sans-IO
/// [`RelayEnd`] and carries out what comes back (commits, waiters, receipts, the hub's
/// upstream tools).
struct HubEnd {
    hub: Arc<PeerHub>,
    conn: Arc<Conn>,
    /// The relay's end of this link (directory pushed, this step's sends, generation).
    end: RelayEnd,
    /// The upstream tool generation the node was last told about (or listed).
    hinted: Option<u64>,
    /// Relayed mail waiting for its destination's answer.
    cut: CutThrough,
}

impl HubEnd {
    /// Hints the node when the hub's upstream tool set moved since it last heard.
    fn hint_upstreams(&mut self, link: &mut PeerLink) {
        use tuic_node::ext::ToolSource;
        let g = self.hub.node.upstreams.generation();
        if self.hinted != Some(g) && link.upstream_tools_changed(g).is_ok() {
            self.hinted = Some(g);
        }
    }

    /// Runs a node's call to one of the hub's upstream tools in its own task, within the
    /// caller's deadline; the answer comes back to this link as a command.
    fn call_upstream(
        &self,
        rid: tuic_proto::peer::RequestId,
        name: String,
        arguments: serde_json::Map<String, serde_json::Value>,
        timeout_ms: u64,
        progress: bool,
    ) {
        let tx = {
            let g = self.hub.lock();
            match g.links.get(&self.conn.id) {
                Some((n, tx)) if *n == self.end.generation() => tx.clone(),
                _ => return,
            }
        };
        let node = self.hub.node.clone();
        let conn = self.conn.id.clone();
        let queue = progress.then(|| {
            Arc::new(Mutex::new(tuic_proto::peer::ProgressQueue::new(
                tuic_proto::peer::PROGRESS_QUEUE_CAP,
            )))
        });
        let sink = queue.clone().map(|q| {
            let tx = tx.clone();
            let sink: tuic_node::ext::ProgressSink = Arc::new(move |params: serde_json::Value| {
                let mut params = match params {
                    serde_json::Value::Object(m) => m,
                    _ => serde_json::Map::new(),
                };
                // The hub's own token means nothing to the node; it puts its caller's back.
                params.remove("progressToken");
                let pushed = q.lock().unwrap_or_else(|p| p.into_inner()).push(params);
                if pushed == tuic_proto::peer::progress::Pushed::Wake {
                    let _ = tx.send(HubCmd::Progress(rid, q.clone()));
                }
            });
            sink
        });
        self.hub.node.tasks.spawn(async move {
            use tuic_node::ext::ToolError;
            let deadline = Duration::from_millis(timeout_ms.max(1));
            // The deadline goes down to the upstream call (which cancels upstream at it, as a
            // local call does); the outer bound is a backstop a little later.
            let r = match tokio::time::timeout(
                deadline + Duration::from_secs(1),
                node.upstreams.call_relayed(&name, arguments, sink, deadline),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => Err(ToolError::new(
                    "timeout",
                    format!("{name} did not answer on the hub within {timeout_ms} ms"),
                )),
            };
            if let Some(q) = &queue {
                // Progress sent before the answer is queued (and its wake is ahead of the
                // answer in the link's channel); anything later is dropped.
                let mut q = q.lock().unwrap_or_else(|p| p.into_inner());
                q.close();
                if q.coalesced() > 0 {
                    tracing::debug!(conn = %conn, tool = %name, coalesced = q.coalesced(), "upstream progress coalesced");
                }
            }
            let result = match r {
                Ok(v) => v,
                Err(e) => {
                    tracing::debug!(conn = %conn, tool = %name, code = e.code, "node's upstream call refused");
                    serde_json::json!({
                        "content": [{"type": "text", "text": e.to_json().to_string()}],
                        "isError": true,
                    })
                }
            };
            let _ = tx.send(HubCmd::Answer(rid, Response::UpstreamResult(result)));
        });
    }

    fn push_directory(&mut self, link: &mut PeerLink) {
        let local = local_entries(&self.hub.node, None);
        let g = self.hub.lock();
        self.end.push_directory(&g.relay, link, local);
    }
}

impl End for HubEnd {
    type Cmd = HubCmd;

    fn on_event(&mut self, link: &mut PeerLink, event: LinkEvent) {
        let id = self.conn.id.clone();
        if matches!(event, LinkEvent::Down { .. }) {
            // Nothing can answer the node any more: its in-flight mail is uncertain to it and
            // resent on the next link (the destination's ring absorbs a repeat); the answers
            // still to come become receipts, dropped with this link.
            self.cut.expire(&self.hub, None, link);
        }
        // The hub's own peers, for the directory pushed at link up (read before the hub lock).
        let local = matches!(event, LinkEvent::Up { .. })
            .then(|| local_entries(&self.hub.node, None))
            .unwrap_or_default();
        // The outcomes an answer or the link's end produced are routed under the same lock
        // that changed the outbox, as one step.
        let mut g = self.hub.lock();
        let out = self.end.on_event(&mut g.relay, link, event, || local);
        let out = match out {
            RelayOutput::Answered {
                message_id,
                to,
                refused,
                settled,
            } => {
                match refused {
                    // Not a refusal: the outbox keeps it and retries on the next tick.
                    Some((ErrorCode::RecipientFull, message)) => {
                        tracing::info!(conn = %id, message_id = %message_id, to = %to, %message, "recipient full; mail held for retry")
                    }
                    Some((code, message)) => {
                        tracing::warn!(conn = %id, message_id = %message_id, ?code, %message, "node refused relayed mail")
                    }
                    None => {}
                }
                self.hub.hand_on(g, settled);
                return;
            }
            RelayOutput::Down {
                reason,
                was_up,
                settled,
            } => {
                // The relay retired this link's shadows and made its in-flight mail
                // resendable, synchronously, before the task does anything else.
                {
                    if g.links
                        .get(&id)
                        .is_some_and(|(n, _)| *n == self.end.generation())
                    {
                        g.links.remove(&id);
                    }
                    self.hub.hand_on(g, settled);
                }
                tuic_node::ext::mail::committer(&self.hub.node).wake();
                self.conn.set(|s| s.peer_up = false);
                if was_up {
                    tracing::warn!(conn = %id, ?reason, "peer link down");
                }
                let why = format!("peer link down: {reason:?}");
                self.conn.set(|s| s.peer_error = Some(why));
                return;
            }
            other => {
                drop(g);
                other
            }
        };
        match out {
            RelayOutput::Nothing => {}
            RelayOutput::Up { remote_id } => {
                self.conn.set(|s| {
                    s.peer_up = true;
                    s.peer_error = None;
                    s.peer_link_ups += 1;
                });
                tracing::info!(conn = %id, node = %remote_id, "peer link up");
                // The node lists the catalogue itself at link up.
                self.hinted = Some(tuic_node::ext::ToolSource::generation(
                    &*self.hub.node.upstreams,
                ));
            }
            RelayOutput::Request { id: rid, request } => match request {
                Request::ListPeers { path } => {
                    let local = local_entries(&self.hub.node, None);
                    let resp = {
                        let g = self.hub.lock();
                        self.end.list_peers(&g.relay, local, path.as_deref())
                    };
                    let _ = link.respond(rid, resp);
                }
                Request::ListUpstreamTools => {
                    use tuic_node::ext::ToolSource;
                    let up = &self.hub.node.upstreams;
                    // Generation first: a change racing the listing re-hints, never hides.
                    let generation = up.generation();
                    self.hinted = Some(generation);
                    let _ = link.respond(
                        rid,
                        Response::UpstreamTools {
                            generation,
                            tools: up.listings(),
                        },
                    );
                }
                Request::CallUpstreamTool {
                    name,
                    arguments,
                    timeout_ms,
                    progress,
                } => self.call_upstream(rid, name, arguments, timeout_ms, progress),
                other => tracing::debug!(conn = %id, ?other, "request the relay left unanswered"),
            },
            // Routed under the lock above.
            RelayOutput::Answered { .. } | RelayOutput::Down { .. } => {}
            RelayOutput::Unexpected(other) => {
                tracing::debug!(conn = %id, ?other, "unexpected answer to send")
            }
        }
    }

    fn on_cmd(&mut self, link: &mut PeerLink, cmd: HubCmd) {
        match cmd {
            HubCmd::Kick => {}
            HubCmd::Receipt(r) => {
                let _ = link.receipt(r);
            }
            HubCmd::UpstreamsChanged => self.hint_upstreams(link),
            HubCmd::HostDown => {
                if link.state() != tuic_proto::peer::LinkState::Down {
                    tracing::info!(conn = %self.conn.id, "the session link found the host down; resetting the mail link");
                    link.reset();
                }
            }
            HubCmd::Answer(rid, r) => {
                let _ = link.respond(rid, r);
            }
            HubCmd::Custody(relayed, r, left) => {
                let mut unsaved = false;
                for (i, w) in relayed.into_iter().enumerate() {
                    let left = left.get(i) == Some(&true);
                    match custody_failed(&r, &w.held.conn, left) {
                        None => {
                            let _ = link.respond(w.rid, w.accepted);
                        }
                        Some(Relayed::Answer(refusal)) => {
                            let _ = link.respond(w.rid, refusal);
                        }
                        Some(Relayed::Unsaved { .. }) => unsaved = true,
                    }
                }
                if unsaved {
                    // See `Relayed::Unsaved`: the node's in-flight mail becomes uncertain and
                    // is resent on the next link.
                    tracing::warn!(conn = %self.conn.id, "custody of relayed mail not saved; resetting the link");
                    link.reset();
                }
            }
            HubCmd::Progress(rid, q) => {
                let queued = q.lock().unwrap_or_else(|p| p.into_inner()).drain();
                for p in queued {
                    // Refused once the call answered or the link is down: the rest goes too.
                    if link.upstream_progress(rid, p.params, p.coalesced).is_err() {
                        break;
                    }
                }
            }
        }
    }

    fn pump(&mut self, link: &mut PeerLink) {
        self.cut.answer(link);
        let sends = self.end.take_sends();
        if !sends.is_empty() {
            let (rids, msgs): (Vec<RequestId>, Vec<WireMessage>) = sends.into_iter().unzip();
            let Routed {
                mut out,
                locals,
                held,
            } = self.hub.route_batch(&msgs, Some(&self.cut.sink));
            let wait = self.hub.node.config().tuning.peer_cut_through_ms;
            let deadline = tuic_node::ext::mono_ms() + wait;
            for h in held {
                let accepted = out[h.index].take().expect("an answer per message");
                let rid = rids[h.index];
                self.cut.hold(
                    WaitingRelay {
                        rid,
                        held: h,
                        accepted,
                    },
                    deadline,
                );
            }
            // Mail for the hub's own peers: delivered through its rings (a ring commit).
            for (i, m) in locals {
                let node = &self.hub.node;
                out[i] = Some(deliver_local(node, LINK_LOCAL, &m));
            }
            for (rid, r) in rids.into_iter().zip(out) {
                if let Some(r) = r {
                    let _ = link.respond(rid, r);
                }
            }
        }
        let mut g = self.hub.lock();
        self.end.dispatch(&mut g.relay, link);
    }

    fn deadline(&self) -> Option<u64> {
        self.cut.deadline()
    }

    fn on_deadline(&mut self, link: &mut PeerLink, now: u64) {
        let due = self.cut.expire(&self.hub, Some(now), link);
        if due.is_empty() {
            return;
        }
        let wake = self.cut.sink.wake.clone();
        let held = due.iter().map(|w| w.held.clone()).collect();
        self.hub.custody(held, move |r, left| {
            let _ = wake.send(HubCmd::Custody(due, r, left));
        });
        tuic_node::ext::mail::committer(&self.hub.node).wake();
    }

    fn on_tick(&mut self, link: &mut PeerLink) {
        // Mail a reading recipient had no room for goes out again (`recipient_full`).
        self.hub.lock().relay.tick(&self.conn.id);
        // Removals nobody waited for are committed at the latest now.
        tuic_node::ext::mail::committer(&self.hub.node).wake();
        self.push_directory(link);
        self.hint_upstreams(link);
    }
}
