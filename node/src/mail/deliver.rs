//! Forwarded mail on this node: delivery into local inboxes through the dedupe rings, late
//! refusals as inbox notices, outbox persistence, and the routing of an address.

use std::collections::BTreeMap;
use std::sync::Arc;

use tuic_proto::peer::{
    AckOutcome, Address, AddressError, ErrorCode, Outbox, OutboxChange, OutboxLimits, PeerEntry,
    Response, SenderOutcome, WireMessage, parse_address,
};

use super::uplink::UPLINK;
use crate::link::commit;
use crate::mail::Mail;
use crate::session::now_ms;
use crate::store::{Store, UPLINK_KEY};

/// A refusal that arrived after its sender stopped waiting: the sender gets a notice in its
/// inbox instead, so nothing ends silently.
#[derive(Debug, Clone)]
pub struct LateRefusal {
    /// The sender's local identity.
    pub sender: String,
    /// The mail's id.
    pub message_id: String,
    /// Where it was going.
    pub to: String,
    /// The outcome (`Refused` or `RefusedOnRetry`).
    pub outcome: SenderOutcome,
}

impl LateRefusal {
    /// A notice for `outcome` when it is a refusal.
    pub fn of(sender: &str, message_id: &str, to: &str, outcome: SenderOutcome) -> Option<Self> {
        matches!(
            outcome,
            SenderOutcome::Refused { .. } | SenderOutcome::RefusedOnRetry { .. }
        )
        .then(|| Self {
            sender: sender.to_owned(),
            message_id: message_id.to_owned(),
            to: to.to_owned(),
            outcome,
        })
    }
}

/// Posts late-refusal notices (`kind: "delivery_refused"`, from `tuic`) into the senders'
/// inboxes. Call with no lock held. A sender that is gone (a restart emptied the registry) is
/// only logged.
pub(crate) fn post_refusals(mail: &Arc<Mail>, late: Vec<LateRefusal>) {
    for l in late {
        let text = match &l.outcome {
            SenderOutcome::Refused {
                code,
                connection,
                message,
            } => format!(
                "message {} to {} was refused by connection '{connection}' ({}): {message}",
                l.message_id,
                l.to,
                error_code(*code)
            ),
            SenderOutcome::RefusedOnRetry {
                code,
                connection,
                message,
            } => format!(
                "message {} to {}: outcome uncertain; a resend was refused by connection '{connection}' ({}: {message}) but an earlier attempt may have arrived; it is not retried",
                l.message_id,
                l.to,
                error_code(*code)
            ),
            _ => continue,
        };
        if let Err(e) = mail.post(
            &l.sender,
            "tuic",
            Some("tuic".into()),
            text,
            Some("delivery_refused".into()),
            None,
        ) {
            tracing::warn!(source = "agent_msg", sender = %l.sender, message_id = %l.message_id, error = %e, "late refusal not posted");
        }
    }
}

/// [`post_refusals`] from a waiter on the committer thread, which must not take the mail
/// lock: on a thread of its own (rare: refusals nobody waited for).
pub(crate) fn post_refusals_later(mail: &Arc<Mail>, late: Vec<LateRefusal>) {
    if late.is_empty() {
        return;
    }
    let mail = mail.clone();
    let _ = std::thread::Builder::new()
        .name("late-refusals".into())
        .spawn(move || post_refusals(&mail, late));
}

/// Commits an outbox's pending changes (one message record each) in one transaction. On
/// failure the changes go back into the outbox, so the next commit writes them again.
pub fn persist_outbox(store: &Store, key: &str, outbox: &mut Outbox) -> anyhow::Result<()> {
    commit_changes(store, key, outbox, false)
}

fn commit_changes(
    store: &Store,
    key: &str,
    outbox: &mut Outbox,
    drop_legacy: bool,
) -> anyhow::Result<()> {
    let changes = outbox.take_changes();
    if changes.is_empty() && !drop_legacy {
        return Ok(());
    }
    let rows: Vec<(u64, Option<&[u8]>)> = changes
        .iter()
        .map(|c| match c {
            OutboxChange::Put { seq, record } => (*seq, Some(record.as_slice())),
            OutboxChange::Remove { seq } => (*seq, None),
        })
        .collect();
    let r = store.apply_peer_outbox(key, &rows, drop_legacy);
    if r.is_err() {
        outbox.restore_changes(changes);
    }
    r
}

/// Every stored outbox by key ([`UPLINK_KEY`] or a connection id), with `limits`. Outboxes an
/// earlier version stored as whole records are first moved into per-message records (one
/// transaction each). A record that does not decode is an error: starting empty would drop
/// accepted mail.
pub(crate) fn load_outboxes(
    store: &Store,
    limits: OutboxLimits,
) -> anyhow::Result<BTreeMap<String, Outbox>> {
    for (key, json) in store.legacy_peer_outboxes()? {
        let mut old: Outbox = serde_json::from_slice(&json)
            .map_err(|e| anyhow::anyhow!("decoding the stored outbox of {key}: {e}"))?;
        old.rewrite_all();
        commit_changes(store, &key, &mut old, true)?;
    }
    let mut out = BTreeMap::new();
    for (key, records) in store.peer_outbox_messages()? {
        let name = if key == UPLINK_KEY { UPLINK } else { &key };
        let o = Outbox::from_records(name, limits, &records)
            .map_err(|e| anyhow::anyhow!("decoding the stored outbox of {key}: {e}"))?;
        out.insert(key, o);
    }
    Ok(out)
}

/// A local identity for `hello` and errors: the machine's host name.
pub(crate) fn local_id(mail: &Mail) -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| mail.env.name.to_owned())
}

/// Delivers forwarded mail (`from` stamped by the link) into a local inbox: recipient check,
/// dedupe ring, enqueue and ring record under the mail lock, the ring committed to `redb`
/// before the answer goes back. `connection` names this side in refusals.
pub(crate) fn deliver_local(mail: &Arc<Mail>, connection: &str, m: &WireMessage) -> Response {
    deliver_batch(mail, connection, vec![m.clone()])
        .pop()
        .expect("one answer per message")
}

/// Delivers a batch of forwarded mail (one link step's `send`s), answers in order: each goes
/// through recipient check, dedupe ring, enqueue and ring record under the mail lock, then the
/// changed rings are committed in one group (`commit`) while the mail lock is still held, so
/// no reader, waiter or PTY wake sees the mail before its ring is durable, and no answer
/// leaves before that.
pub(crate) fn deliver_batch(
    mail: &Arc<Mail>,
    connection: &str,
    msgs: Vec<WireMessage>,
) -> Vec<Response> {
    let msgs: Vec<WireMessage> = msgs
        .into_iter()
        .map(|mut m| {
            // `to` may name a live terminal by PTY id or alias; mail goes to its identity.
            if !mail.lock().inboxes.is_registered(&m.to)
                && let Some(s) = mail.env.sessions.live(&m.to)
            {
                let mut g = mail.lock();
                mail.ensure(&mut g, &s.tuic_session);
                m.to = s.tuic_session.clone();
            }
            m
        })
        .collect();
    let (resps, actions) = {
        let mut g = mail.lock();
        let mut committed = None;
        let resps: Vec<Response> = {
            let mut p = mail.env.peer.lock();
            // Deadlines and cursors on the deadline clock, the stamp on the wall clock.
            let (now, wall) = (crate::logs::mono_ms(), now_ms());
            let resps: Vec<Response> = msgs
                .iter()
                .map(|m| {
                    let resp = tuic_proto::peer::deliver_stamped(
                        &mut g.inboxes,
                        &mut p.rings,
                        now,
                        wall,
                        connection,
                        m,
                    );
                    if let Response::SendAck {
                        outcome: AckOutcome::Delivered,
                        ..
                    } = &resp
                    {
                        p.dirty_rings.insert(m.to.clone());
                    }
                    resp
                })
                .collect();
            if !p.dirty_rings.is_empty() {
                let (w, rx) = commit::channel_waiter();
                p.durable.0.push(w);
                committed = Some(rx);
            }
            resps
        };
        if let Some(rx) = committed {
            // Run the group here: the ring commit is on the mail's critical path.
            mail.env.peer.committer.commit_now();
            if let Err(e) = commit::wait(&rx) {
                // As before group commit: the mail is in the inbox; the ring is written again
                // with the next group.
                tracing::error!(error = %e, "persisting dedupe rings failed");
            }
        }
        (resps, Mail::drain(&mut g))
    };
    mail.act(actions);
    for (m, resp) in msgs.iter().zip(&resps) {
        match resp {
            Response::SendAck { outcome, .. } => {
                tracing::info!(source = "agent_msg", from = %m.from, to = %m.to, message_id = %m.message_id, outcome = ?outcome, "forwarded message delivered")
            }
            Response::Error {
                code: ErrorCode::RecipientFull,
                ..
            } => {
                tracing::info!(source = "agent_msg", from = %m.from, to = %m.to, message_id = %m.message_id, "forwarded message held at the previous hop: recipient full")
            }
            Response::Error { code, message, .. } => {
                tracing::warn!(source = "agent_msg", from = %m.from, to = %m.to, message_id = %m.message_id, code = ?code, %message, "forwarded message refused")
            }
            _ => {}
        }
    }
    resps
}

/// A recipient identity retired on this node: its ring goes with it (sender retirement does
/// not touch rings). Call under the mail lock.
pub(crate) fn recipient_retired(mail: &Mail, recipient: &str) {
    let mut p = mail.env.peer.lock();
    if p.rings.len(recipient) > 0 {
        p.rings.remove(recipient);
        p.dirty_rings.insert(recipient.to_owned());
        drop(p);
        mail.env.peer.committer.wake();
    }
}

/// How an `agent send` target that did not resolve locally is routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// Not an address at all: the local "unknown recipient" answer stands.
    NotAnAddress,
    /// `local/<peer>` on a hub: the hub's own peer.
    Local(String),
    /// Through the peer link.
    Remote,
}

/// Routes a `to` that is not a local recipient. Empty connection ids and peers are refused
/// here, before any owner is selected.
pub(crate) fn route(mail: &Mail, to: &str) -> Result<Route, AddressError> {
    if !to.contains('/') {
        return Ok(Route::NotAnAddress);
    }
    match parse_address(to) {
        Err(e) => Err(e),
        Ok(Address::Local(peer)) if mail.env.ext.mail_router().is_some() => {
            Ok(Route::Local(peer.to_owned()))
        }
        Ok(_) => Ok(Route::Remote),
    }
}

/// The stable snake_case name of a wire error code.
pub(crate) fn error_code(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::OutboxFull => "outbox_full",
        ErrorCode::UnknownRecipient => "unknown_recipient",
        ErrorCode::IdentityCollision => "identity_collision",
        ErrorCode::TooLarge => "too_large",
        ErrorCode::SenderForged => "sender_forged",
        ErrorCode::SenderNotRegistered => "sender_not_registered",
        ErrorCode::Unavailable => "unavailable",
        _ => "refused",
    }
}

/// This node's registered peers as link entries (no address: the hub assigns those).
pub(crate) fn local_entries(mail: &Mail, path: Option<&str>) -> Vec<PeerEntry> {
    let peers: Vec<(String, crate::mail::Peer)> = mail
        .lock()
        .peers
        .iter()
        .filter(|(_, p)| path.is_none() || p.path.as_deref() == path)
        .map(|(k, p)| (k.clone(), p.clone()))
        .collect();
    peers
        .into_iter()
        .map(|(k, p)| {
            let live = mail.env.sessions.live(&k).filter(|s| s.tuic_session == k);
            PeerEntry {
                tuic_session: k,
                name: p.name,
                orchestrator: p.orchestrator,
                address: None,
                alias: live.as_ref().map(|s| s.alias.clone()),
                session_id: live.as_ref().map(|s| s.id.clone()),
                path: p.path,
            }
        })
        .collect()
}
