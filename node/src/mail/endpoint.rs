//! The node's end of the link a hub dials (`WS /mcp/peer`, whose route is
//! `crate::routes::peer`, or a QUIC link the `crate::link::quic` listener authenticated).
//!
//! The WebSocket is served on the TCP listener only, behind the request boundary (Host and Origin guards, then
//! the node token as the `tui-session` cookie or Basic; `?token=` is refused there). On the IPC
//! socket the route answers 403: a hub never reaches a node through its local socket.
//!
//! One task per link runs a `PeerLink` (role node). It answers the hub's requests — `send`
//! into a local inbox through the dedupe ring, `list_peers`, `register` of the
//! hub's directory (its own peers and other nodes', with addresses) — and carries the node's
//! own requests: its `register` (re-sent whenever the local peer set changes, and before any
//! mail) and its outbox towards the hub. Besides mail, it asks the hub for its upstream tools
//! (`list_upstream_tools` at link up and on the hub's `upstream_tools_changed` hint) and
//! carries agents' calls to them (`call_upstream_tool`, see [`crate::upstream::hubtools`]); nothing here
//! creates a process. `inbox`/`wait` are refused: a node's agents never register over the link,
//! so no token holder on it reads their mail (issue 40, finding 7). A second link never knocks
//! off a live one: it is refused with `unavailable` (logged) unless the current link is proven
//! dead (handshaking, or `REPLACE_AFTER_MISSED_PINGS` pings unanswered), which it then replaces
//! (logged) and closes.

use std::sync::Arc;

use tokio::sync::mpsc;
use tuic_proto::peer::{
    ErrorCode, LinkConfig, LinkEvent, LinkRole, PeerLink, Request, RequestId, SenderOutcome,
    Settled, Uplink, UplinkOutput,
};

use super::uplink::{Attach, LinkHealth, REPLACE_AFTER_MISSED_PINGS};
use super::{LateRefusal, Mail, UPLINK, local_entries, post_refusals, post_refusals_later};
use crate::link::driver::{self, End, FrameIo};
use crate::upstream::hubtools;

/// Commands to a node link's task.
// `serde_json::Map` is an `IndexMap` since the ACP crate turns on serde_json's
// `preserve_order` for the whole build; a command is one per upstream call, so its size
// does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Cmd {
    /// The outbox holds new mail.
    Kick,
    /// A newer link took over: close this one.
    Replaced,
    /// A second link was refused while this one looked live: prove it (`PeerLink::probe`).
    Probe,
    /// An agent calls one of the hub's upstream tools.
    CallUpstream {
        /// `{upstream}__{tool}` as the hub names it.
        name: String,
        /// Its arguments.
        arguments: serde_json::Map<String, serde_json::Value>,
        /// The caller's deadline, passed to the hub.
        timeout_ms: u64,
        /// Where the upstream's progress goes, when the caller asked for it.
        progress: Option<hubtools::ProgressRelay>,
        /// Where the answer goes.
        reply: hubtools::CallReply,
    },
}

/// How long a live link has to answer [`Cmd::Probe`] (a round trip, with room for a loaded
/// or distant hub) before it counts as dead.
const PROBE_WITHIN_MS: u64 = 1_500;

/// Runs the node's end of a link a hub opened, over any frame transport.
pub(crate) async fn serve_on(mail: Arc<Mail>, mut io: impl FrameIo) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let health = Arc::new(LinkHealth::default());
    let attached = mail.env.peer.lock().attach(tx, health.clone());
    let generation = match attached {
        Attach::Refused { live } => {
            let message = format!(
                "a live peer link (generation {live}) holds this node's hub connection and answers its pings; a second link replaces it only after {} unanswered pings",
                REPLACE_AFTER_MISSED_PINGS
            );
            tracing::warn!(live, "refused a second peer link: {message}");
            // A hub killed and restarted sends nothing on its old link: prove that link now,
            // so the hub's next dial finds the slot free instead of waiting out the pings.
            if let Some(old) = mail.env.peer.link_cmd() {
                let _ = old.send(Cmd::Probe);
            }
            // No hello: the far side's link goes down on this error with the reason.
            let refusal = tuic_proto::peer::Frame::Error {
                id: None,
                code: ErrorCode::Unavailable,
                connection: super::local_id(&mail),
                message,
            };
            let _ = io.send(refusal.encode()).await;
            io.close().await;
            return;
        }
        Attach::Attached {
            generation,
            replaced,
        } => {
            if let Some(r) = replaced {
                tracing::warn!(
                    generation,
                    replaced = r.generation,
                    replaced_up = r.up,
                    missed_pings = r.missed,
                    "a new peer link replaced one that was not proven live (handshaking, gone, or missing its pings)"
                );
            }
            generation
        }
    };
    let link = PeerLink::new(
        crate::logs::mono_ms(),
        LinkConfig::new(&super::local_id(&mail), UPLINK, LinkRole::Node),
    );
    let mut end = NodeEnd {
        health,
        mail: mail.clone(),
        me: super::local_id(&mail),
        uplink: Uplink::new(),
        generation,
        hub_name: super::UPLINK.to_owned(),
        calls: std::collections::HashMap::new(),
        listing: None,
        relist: false,
    };
    // Ends at shutdown, and when the token this link authenticated with is rotated away.
    let stop = (mail.env.token_epoch)();
    tracing::info!(generation, "peer link accepted");
    let ended = driver::run(link, &mut io, &mut end, &mut rx, &stop).await;
    mail.env.peer.lock().detach(generation);
    tracing::debug!(generation, ?ended, "peer link ended");
}

/// The IO shell of the node's end of the link: feeds its events into the sans-IO [`Uplink`]
/// (register gate, vouching, settling, this step's `send`s) and carries out what comes back
/// (inbox delivery, commits, waiting senders, the hub's upstream tools).
struct NodeEnd {
    /// This link's liveness, published for a second link that claims the slot.
    health: Arc<LinkHealth>,
    /// This node's mail: its inboxes, uplink state and the hub tools' environment.
    mail: Arc<Mail>,
    /// This node's name in refusals.
    me: String,
    /// The link's sans-IO end.
    uplink: Uplink,
    /// This link's slot generation (a newer link replaces it).
    generation: u64,
    /// The hub's `node_id`, for messages.
    hub_name: String,
    /// Agents' calls to the hub's upstream tools awaiting their answer (and where their
    /// progress goes), by request id.
    calls: std::collections::HashMap<
        RequestId,
        (hubtools::CallReply, Option<hubtools::ProgressRelay>),
    >,
    /// The `list_upstream_tools` request in flight.
    listing: Option<RequestId>,
    /// A change hint arrived while a listing was in flight: list again after it.
    relist: bool,
}

impl NodeEnd {
    /// Asks the hub for its upstream tools (one request in flight at a time).
    fn list_upstream(&mut self, link: &mut PeerLink) {
        if self.listing.is_some() {
            self.relist = true;
            return;
        }
        if let Ok(id) = link.request(Request::ListUpstreamTools) {
            self.listing = Some(id);
        }
    }

    fn answer(&mut self, link: &mut PeerLink, id: RequestId, request: Request) {
        use tuic_proto::peer::Response as R;
        let resp = match request {
            Request::ListPeers { path } => R::Peers(local_entries(&self.mail, path.as_deref())),
            // The link refuses both before they surface (a node's agents never register over
            // it: `PeerLink::owner`); refused here too, so no path of this end reads mail.
            Request::Inbox { recipient, .. } | Request::Wait { recipient, .. } => self.refuse(
                ErrorCode::SenderNotRegistered,
                format!(
                    "'{recipient}' did not register over this link: a node's agents read their mail on their own node"
                ),
            ),
            // The uplink takes these itself; the link's own rules refuse the upstream requests
            // on a node's end. Never reached.
            Request::Send(_)
            | Request::Register { .. }
            | Request::ListUpstreamTools
            | Request::CallUpstreamTool { .. } => self.refuse(
                ErrorCode::Malformed,
                "a node does not offer its upstream tools to the hub".into(),
            ),
        };
        let _ = link.respond(id, resp);
    }

    /// Events that are not about mail: the hub's upstream tools.
    fn on_other(&mut self, link: &mut PeerLink, event: LinkEvent) {
        use tuic_proto::peer::Response as R;
        match event {
            LinkEvent::UpstreamToolsChanged { generation } => {
                if self.mail.env.peer.hub_tools.hub_generation() != Some(generation) {
                    self.list_upstream(link);
                }
            }
            LinkEvent::UpstreamProgress {
                id,
                params,
                coalesced,
            } => {
                let tools = &self.mail.env.peer.hub_tools;
                match self.calls.get(&id) {
                    // The caller still waits: its deadline has not passed.
                    Some((reply, Some(relay))) if !reply.is_closed() => {
                        tools.relay_progress(&self.mail.env.hub_tools, relay, params, coalesced);
                    }
                    _ => tools.progress_after_caller_left(coalesced),
                }
            }
            LinkEvent::Response {
                id,
                request: Request::ListUpstreamTools,
                response,
            } => {
                if self.listing == Some(id) {
                    self.listing = None;
                }
                match response {
                    R::UpstreamTools { generation, tools } => {
                        tracing::debug!(
                            generation,
                            tools = tools.len(),
                            "hub upstream tools listed"
                        );
                        self.mail.env.peer.hub_tools.install(
                            &self.mail.env.hub_tools,
                            generation,
                            tools,
                        );
                    }
                    other => {
                        tracing::warn!(answer = ?other, "hub did not list its upstream tools")
                    }
                }
                if std::mem::take(&mut self.relist) {
                    self.list_upstream(link);
                }
            }
            LinkEvent::Response {
                id,
                request: Request::CallUpstreamTool { .. },
                response,
            } => {
                if let Some((reply, _)) = self.calls.remove(&id) {
                    hubtools::answer(reply, response, &self.hub_name);
                }
            }
            other => tracing::debug!(?other, "unexpected event on the peer link"),
        }
    }

    fn refuse(&self, code: ErrorCode, message: String) -> tuic_proto::peer::Response {
        tuic_proto::peer::Response::Error {
            code,
            connection: self.me.clone(),
            message,
        }
    }

    /// Reports what a change of the uplink outbox produced to waiting senders — a refusal only
    /// once the removal it makes is committed (a resend after a crash must not follow a
    /// `refused`), anything else at once — under the lock that changed it. Removals nobody
    /// waits for ride with the next group (custody commits, or the next tick): a removal lost
    /// to a crash only resends mail the destination's ring answers `duplicate`.
    fn hand_on(&self, mut p: std::sync::MutexGuard<'_, super::uplink::Inner>, s: Settled) {
        let mut late = Vec::new();
        let Settled {
            now,
            after_commit: refusals,
            ..
        } = s;
        for ev in now {
            if let Some(o) = p.notify(&ev.message_id, ev.outcome) {
                late.extend(LateRefusal::of(&ev.from, &ev.message_id, &ev.to, o));
            }
        }
        if refusals.is_empty() {
            drop(p);
            post_refusals_later(&self.mail, late);
            return;
        }
        let mail = self.mail.clone();
        p.durable.0.push(Box::new(move |r| {
            if let Err(e) = r {
                tracing::error!(error = %e, "persisting the uplink outbox failed");
            }
            let mut late = Vec::new();
            {
                let mut p = mail.env.peer.lock();
                for ev in refusals {
                    if let Some(o) = p.notify(&ev.message_id, ev.outcome) {
                        late.extend(LateRefusal::of(&ev.from, &ev.message_id, &ev.to, o));
                    }
                }
            }
            post_refusals_later(&mail, late);
        }));
        drop(p);
        self.mail.env.peer.committer().wake();
        post_refusals_later(&self.mail, late);
    }

    /// Delivers this step's `send`s together and answers each.
    fn deliver_sends(&mut self, link: &mut PeerLink) {
        let sends = self.uplink.take_sends();
        if sends.is_empty() {
            return;
        }
        let (ids, msgs): (Vec<RequestId>, Vec<_>) = sends.into_iter().unzip();
        // The ring commit runs on this worker: it is short (one group for the step), and the
        // readers it wakes need it anyway (measured against `block_in_place`: docs/benchmarks.md
        // "Cross-host mail without thread hand-offs").
        let resps = super::deliver_batch(&self.mail, &self.me, msgs);
        for (id, r) in ids.into_iter().zip(resps) {
            let _ = link.respond(id, r);
        }
    }
}

impl End for NodeEnd {
    type Cmd = Cmd;

    fn on_event(&mut self, link: &mut PeerLink, event: LinkEvent) {
        use tuic_proto::peer::Response as R;
        // Outcomes are reported under the same lock that changed the outbox, as one step.
        let mut p = self.mail.env.peer.lock();
        let out = self.uplink.on_event(link, &mut p.uplink, event);
        let out = match out {
            UplinkOutput::Answered {
                message: m,
                response,
                settled,
            } => {
                match &response {
                    // Not a refusal: the uplink keeps it and retries on the next tick.
                    R::Error {
                        code: ErrorCode::RecipientFull,
                        message,
                        ..
                    } => {
                        tracing::info!(message_id = %m.message_id, to = %m.to, %message, "recipient full; mail held for retry")
                    }
                    R::Error {
                        code,
                        message,
                        connection,
                    } => {
                        tracing::warn!(message_id = %m.message_id, ?code, %connection, %message, "hub refused mail")
                    }
                    _ => {}
                }
                self.hand_on(p, settled);
                return;
            }
            UplinkOutput::Down { reason, settled } => {
                tracing::info!(?reason, "peer link down");
                // The directory goes with the link slot (`detach`, by generation), so an older
                // link ending never wipes a newer one's.
                self.hand_on(p, settled);
                for (_, (reply, _)) in self.calls.drain() {
                    hubtools::lost(reply, &self.hub_name);
                }
                let env = &self.mail.env;
                env.peer
                    .hub_tools
                    .link_down(&env.hub_tools, self.generation);
                env.peer.committer().wake();
                return;
            }
            UplinkOutput::Directory(peers) => {
                // The hub's directory: every peer it can route to, each with an address.
                p.directory = peers;
                return;
            }
            other => {
                drop(p);
                other
            }
        };
        match out {
            // Handled under the lock above.
            UplinkOutput::Answered { .. }
            | UplinkOutput::Down { .. }
            | UplinkOutput::Directory(_)
            | UplinkOutput::Nothing => {}
            UplinkOutput::Up { remote_id } => {
                tracing::info!(hub = %remote_id, "peer link up");
                self.mail
                    .env
                    .peer
                    .hub_tools
                    .link_up(self.generation, &remote_id);
                self.hub_name = remote_id;
                self.list_upstream(link);
            }
            UplinkOutput::Request { id, request } => self.answer(link, id, request),
            UplinkOutput::Registered { refused } => {
                if let Some((code, message)) = refused {
                    tracing::warn!(?code, %message, "hub refused this node's peer set");
                }
            }
            UplinkOutput::Receipt(r) => {
                tracing::info!(source = "agent_msg", message_id = %r.message_id, outcome = ?r.outcome, connection = %r.connection, "delivery receipt");
                let unclaimed = self
                    .mail
                    .env
                    .peer
                    .lock()
                    .notify(&r.message_id, SenderOutcome::from_receipt(&r));
                if let Some(o) = unclaimed {
                    let late = LateRefusal::of(&r.from, &r.message_id, &r.to, o);
                    post_refusals(&self.mail, late.into_iter().collect());
                }
            }
            UplinkOutput::Other(event) => self.on_other(link, *event),
        }
    }

    fn on_cmd(&mut self, link: &mut PeerLink, cmd: Cmd) {
        match cmd {
            Cmd::Kick => {}
            Cmd::Replaced => link.close(),
            Cmd::Probe => link.probe(crate::logs::mono_ms(), PROBE_WITHIN_MS),
            Cmd::CallUpstream {
                name,
                arguments,
                timeout_ms,
                progress,
                reply,
            } => match link.request(Request::CallUpstreamTool {
                name,
                arguments,
                timeout_ms,
                progress: progress.is_some(),
            }) {
                Ok(id) => {
                    self.calls.insert(id, (reply, progress));
                }
                Err(e) => {
                    let _ = reply.send(Err(crate::mcp::registry::ToolError::new(
                        "hub_unavailable",
                        format!("the hub's upstream tools are unreachable: {e}"),
                    )));
                }
            },
        }
    }

    fn on_tick(&mut self, _link: &mut PeerLink) {
        // Mail a reading recipient behind the hub had no room for goes out again.
        self.mail.env.peer.lock().uplink.resume_held();
        // Removals nobody waited for are committed at the latest now.
        self.mail.env.peer.committer().wake();
    }

    fn pump(&mut self, link: &mut PeerLink) {
        self.health.set(true, link.missed_pings());
        self.deliver_sends(link);
        // Re-register whenever the local peer set changed; hold mail until the hub has it.
        let peers = local_entries(&self.mail, None);
        let mut p = self.mail.env.peer.lock();
        self.uplink.pump(link, peers, &mut p.uplink);
    }
}
