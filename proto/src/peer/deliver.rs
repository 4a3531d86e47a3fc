//! The two things a receiving side does with a `send`: deliver it into a local inbox (the
//! destination node, or the hub for `local/<peer>`), or relay it into the outbox of the next
//! connection (the hub). Both answer with the [`Response`] to put on the link.
//!
//! Pure functions over the cores: the caller holds whatever lock makes the recipient check,
//! the dedupe ring and the enqueue one step (so a recipient retired concurrently either gets
//! the message before retirement or refuses it).

use std::collections::BTreeMap;

use crate::mail::{InboxError, Inboxes, NewMessage};

use super::address::{Address, parse_address};
use super::dedupe::{DedupeError, DedupeRings, Verdict};
use super::frame::{AckOutcome, ErrorCode, WireMessage};
use super::link::Response;
use super::outbox::{Outbox, OutboxError};

/// Delivers stamped mail (`from` already set by the link) to `m.to`, a local recipient.
/// Fresh mail is enqueued and recorded in the recipient's ring; a repeat is acknowledged as
/// `duplicate` without enqueueing; a collision or an unknown recipient is refused. Fresh mail
/// for a reading recipient whose inbox is full of unread mail is answered `recipient_full`
/// and stays with the previous hop ([`Inboxes::should_hold`]). `connection` is this side's
/// name in errors.
pub fn deliver(
    inboxes: &mut Inboxes,
    rings: &mut DedupeRings,
    now: u64,
    connection: &str,
    m: &WireMessage,
) -> Response {
    deliver_stamped(inboxes, rings, now, now, connection, m)
}

/// [`deliver`] for a caller whose `now` is its deadline clock (monotonic, unix-ms based): the
/// enqueued message's `timestamp_ms` is the wall-clock reading `wall_ms`
/// ([`Inboxes::send_stamped`]).
pub fn deliver_stamped(
    inboxes: &mut Inboxes,
    rings: &mut DedupeRings,
    now: u64,
    wall_ms: u64,
    connection: &str,
    m: &WireMessage,
) -> Response {
    let recipient = m.to.as_str();
    if !inboxes.is_registered(recipient) {
        return refuse(
            ErrorCode::UnknownRecipient,
            connection,
            format!("recipient '{recipient}' is not registered"),
        );
    }
    match rings.check(recipient, &m.message_id, &m.from, &m.message) {
        Ok(Verdict::Duplicate) => Response::SendAck {
            message_id: m.message_id.clone(),
            outcome: AckOutcome::Duplicate,
        },
        Err(e @ DedupeError::IdentityCollision { .. }) => {
            refuse(ErrorCode::IdentityCollision, connection, e.to_string())
        }
        Ok(Verdict::Fresh) if inboxes.should_hold(now, recipient) => refuse(
            ErrorCode::RecipientFull,
            connection,
            format!(
                "recipient '{recipient}' holds {} unread messages; retry when it has read",
                inboxes.unread(recipient)
            ),
        ),
        Ok(Verdict::Fresh) => {
            let new = NewMessage {
                recipient: recipient.to_owned(),
                message_id: m.message_id.clone(),
                from: m.from.clone(),
                from_name: m.from_name.clone(),
                message: m.message.clone(),
                kind: m.kind.clone(),
                lifecycle: m.lifecycle.clone(),
            };
            match inboxes.send_stamped(now, wall_ms, new) {
                Ok(_) => {
                    rings.record(recipient, &m.message_id, &m.from, &m.message);
                    Response::SendAck {
                        message_id: m.message_id.clone(),
                        outcome: AckOutcome::Delivered,
                    }
                }
                Err(e @ InboxError::TooLarge { .. }) => {
                    refuse(ErrorCode::TooLarge, connection, e.to_string())
                }
                Err(e @ InboxError::UnknownRecipient { .. }) => {
                    refuse(ErrorCode::UnknownRecipient, connection, e.to_string())
                }
                Err(e) => refuse(ErrorCode::Internal, connection, e.to_string()),
            }
        }
    }
}

/// What [`relay`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed {
    /// Addressed to `local/<peer>`: deliver it here with [`deliver`] (with `to` = the peer).
    Local(WireMessage),
    /// Answered: custody taken (`accepted`) or refused.
    Answered(Response),
}

/// The hub's routing of stamped mail addressed `<connection>/<peer>`: into that connection's
/// outbox (answer `accepted`, or `outbox_full`/`unknown_recipient` naming the connection), or
/// handed back for local delivery when addressed to `local/<peer>`. Empty ids and prefixes are
/// refused before any owner is selected.
pub fn relay(outboxes: &mut BTreeMap<String, Outbox>, m: &WireMessage) -> Routed {
    let (connection, peer) = match parse_address(&m.to) {
        Ok(Address::Local(peer)) => {
            return Routed::Local(WireMessage {
                to: peer.to_owned(),
                ..m.clone()
            });
        }
        Ok(Address::Remote { connection, peer }) => (connection, peer),
        Err(e) => {
            return Routed::Answered(refuse(ErrorCode::UnknownRecipient, "hub", e.to_string()));
        }
    };
    let Some(outbox) = outboxes.get_mut(connection) else {
        return Routed::Answered(refuse(
            ErrorCode::UnknownRecipient,
            connection,
            format!("no connection '{connection}'"),
        ));
    };
    let relayed = WireMessage {
        to: peer.to_owned(),
        ..m.clone()
    };
    Routed::Answered(match outbox.push(relayed) {
        Ok(_) => Response::SendAck {
            message_id: m.message_id.clone(),
            outcome: AckOutcome::Accepted,
        },
        Err(e @ OutboxError::Full { .. }) => {
            refuse(ErrorCode::OutboxFull, connection, e.to_string())
        }
        Err(e @ OutboxError::TooLarge { .. }) => {
            refuse(ErrorCode::TooLarge, connection, e.to_string())
        }
        Err(e @ OutboxError::EmptyMessageId) => {
            refuse(ErrorCode::Malformed, connection, e.to_string())
        }
    })
}

fn refuse(code: ErrorCode, connection: &str, message: String) -> Response {
    Response::Error {
        code,
        connection: connection.to_owned(),
        message,
    }
}
