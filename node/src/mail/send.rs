//! An agent's send to an address (`agent action=send` to `<connection>/<peer>`): custody in
//! the first hop's outbox, the wait for the verdict, and the peers reachable over the link.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tuic_proto::mail::MAX_MESSAGE_BYTES;
use tuic_proto::peer::{ErrorCode, OutboxError, SenderOutcome, WireMessage, Withdrawn};

use super::uplink::{PeerState, PendingCustody, Queued, Refusal, UPLINK, lock_inner};
use crate::ext::MailRouter;
use crate::link::commit::CommitResult;
use crate::session::now_ms;

/// What an agent's send to an address uses, built by the composition root
/// (`Node::send_env`): the node's uplink state, the process's mail router when one is
/// installed (a hub's: its own agents' mail goes through its relay instead), and how long a
/// sender waits for the verdict (`tuning.peer_send_wait_ms`).
pub(crate) struct SendEnv<'a> {
    /// The uplink outbox, waiters and pushed directory.
    pub(crate) peer: &'a PeerState,
    /// The installed `ext::MailRouter`, if any.
    pub(crate) router: Option<&'a Arc<dyn MailRouter>>,
    /// The verdict wait.
    pub(crate) wait: Duration,
}

/// How an `agent send` to an address ended: the peer layer's typed answer. The MCP tool's
/// rendering is [`Sent::to_json`] (the MCP tool's error rendering of the refusals is
/// `mcp::tools::peer_errors`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sent {
    /// The mail's id (stable across hops and resends).
    pub message_id: String,
    /// The connection the answer is about (the first hop, or the one that dropped).
    pub connection: String,
    /// What the sender can rely on.
    pub status: SentStatus,
}

/// The three answers of a cross-host send (`docs/mail-protocol.md`, "Guarantees, hop by hop").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SentStatus {
    /// In the recipient's inbox, its ring committed there.
    Delivered,
    /// Held committed by a hop, retried until acknowledged.
    Accepted,
    /// Maybe delivered.
    Uncertain(Uncertainty),
}

/// Why an answer is uncertain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Uncertainty {
    /// The link dropped while the mail was on the wire; it is resent with the same id.
    LinkDropped,
    /// A hop could not save it after it had left (the text names the hop and the error); it is
    /// resent until acknowledged, but a restart of that hop would lose it.
    Unsaved(String),
    /// A resend was refused (the detail) but an earlier attempt may have arrived; final.
    RefusedOnRetry(String),
}

/// Why an `agent send` to an address was refused (nothing was sent, or it certainly did not
/// arrive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// The body is over the mail limit.
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// A hop refused it.
    Refused {
        /// Code and connection.
        refusal: Refusal,
        /// The mail's id, once one was given.
        message_id: Option<String>,
    },
}

impl SendError {
    pub(crate) fn refused(refusal: Refusal, message_id: &str) -> Self {
        SendError::Refused {
            refusal,
            message_id: Some(message_id.to_owned()),
        }
    }
}

impl Sent {
    /// The MCP tool's answer for `agent action=send` to `to`.
    pub(crate) fn to_json(&self, to: &str) -> Value {
        let status = match self.status {
            SentStatus::Delivered => "delivered",
            SentStatus::Accepted => "accepted",
            SentStatus::Uncertain(_) => "uncertain",
        };
        let mut v = json!({
            "delivered": status == "delivered",
            "status": status,
            "message_id": self.message_id,
            "to": to,
            "connection": self.connection,
            "delivery_path": "peer_link",
        });
        if let SentStatus::Uncertain(why) = &self.status {
            let (will_retry, reason) = match why {
                Uncertainty::LinkDropped => (
                    true,
                    "the link dropped while the message was on the wire; it stays queued and is resent with the same message_id, which the destination deduplicates".to_owned(),
                ),
                Uncertainty::Unsaved(detail) => (true, detail.clone()),
                Uncertainty::RefusedOnRetry(detail) => (
                    false,
                    format!(
                        "a resend was refused ({detail}) but an earlier attempt may have arrived; it is not retried"
                    ),
                ),
            };
            v["will_retry"] = json!(will_retry);
            v["uncertain_reason"] = json!(reason);
        }
        v
    }
}

/// `agent action=send` to an address: custody in the first hop's outbox, then up to
/// `tuning.peer_send_wait_ms` for the verdict. Answers `delivered` (in the recipient's inbox,
/// its ring committed there: this hop's custody commit is not waited for), `accepted` (held,
/// will be retried until acknowledged: committed here first, unless the hub said it holds it
/// committed), `uncertain` (on the wire when the link dropped; committed here, resent with the
/// same id, never as new mail), or a refusal naming the connection.
pub(crate) async fn send_to_address(
    env: &SendEnv<'_>,
    from: &str,
    from_name: Option<String>,
    to: &str,
    message: String,
) -> Result<Sent, SendError> {
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(SendError::TooLarge {
            bytes: message.len(),
        });
    }
    let mut queued = match env.router {
        Some(router) => {
            // A hub's own agent: its relay step commits custody (blocking).
            let (router, from, to) = (router.clone(), from.to_owned(), to.to_owned());
            tokio::task::spawn_blocking(move || router.send(&from, from_name, &to, message))
                .await
                .unwrap_or_else(|_| {
                    Err(Refusal {
                        code: ErrorCode::Internal,
                        connection: UPLINK.to_owned(),
                        message: "relaying the message failed unexpectedly".into(),
                    })
                })
        }
        None => queue_uplink(env.peer, from, from_name, to, message),
    }
    .map_err(|refusal| SendError::Refused {
        refusal,
        message_id: None,
    })?;
    // Whether the next hop said it holds the mail (committed there), so this hop's custody
    // commit is no longer what the answer rests on.
    let mut held_beyond = false;
    let wait = env.wait;
    let mut status = SentStatus::Accepted;
    let mut connection = queued.connection.clone();
    if let Some(why) = &queued.unsaved {
        // Not durable here: uncertain until the next hop says it holds the mail.
        status = SentStatus::Uncertain(Uncertainty::Unsaved(why.clone()));
    }
    if let Some(rx) = &mut queued.outcomes {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let next = match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(o)) => Ok(o),
                Ok(None) | Err(_) => Err(()),
            };
            match next {
                Ok(SenderOutcome::Accepted) => {
                    // The next hop holds it committed.
                    status = SentStatus::Accepted;
                    connection = queued.connection.clone();
                    held_beyond = true;
                }
                Ok(SenderOutcome::Delivered) => {
                    status = SentStatus::Delivered;
                    connection = queued.connection.clone();
                    break;
                }
                Ok(SenderOutcome::Refused {
                    code,
                    connection,
                    message,
                }) => {
                    forget_waiter(env.peer, &queued.message_id);
                    let r = Refusal {
                        code,
                        connection,
                        message,
                    };
                    return Err(SendError::refused(r, &queued.message_id));
                }
                Ok(SenderOutcome::Uncertain { connection: c }) => {
                    status = SentStatus::Uncertain(Uncertainty::LinkDropped);
                    connection = c;
                    break;
                }
                Ok(SenderOutcome::RefusedOnRetry {
                    connection: c,
                    message,
                    ..
                }) => {
                    status = SentStatus::Uncertain(Uncertainty::RefusedOnRetry(message));
                    connection = c;
                    break;
                }
                Err(_) => break,
            }
        }
    }
    forget_waiter(env.peer, &queued.message_id);
    if status != SentStatus::Delivered
        && !held_beyond
        && let Some(PendingCustody(rx)) = queued.custody.take()
    {
        // The answer promises the mail survives a crash: its custody commit first (the
        // committer thread runs the group). A `delivered` verdict needs none: the mail is in
        // the recipient's inbox, its ring committed there.
        env.peer.committer.wake();
        match rx.await {
            Ok(Custody::Durable) => {}
            Ok(Custody::OnItsWay(e)) => {
                tracing::error!(error = %e, message_id = %queued.message_id, "persisting the uplink outbox failed after the mail left");
                connection = queued.connection.clone();
                status = SentStatus::Uncertain(Uncertainty::Unsaved(format!(
                    "this node could not save its outbox ({e}); the message was already on its way and is resent with the same message_id until the hub acknowledges it, but a restart of this node before then would lose it"
                )));
            }
            Ok(Custody::NotSent(e)) => {
                tracing::error!(error = %e, "persisting the uplink outbox failed");
                let r = Refusal {
                    code: ErrorCode::Internal,
                    connection: UPLINK.to_owned(),
                    message: "the outbox could not be saved; nothing was sent".into(),
                };
                return Err(SendError::refused(r, &queued.message_id));
            }
            Err(_) => {
                // The committer is gone (shutdown): nothing says the mail is durable.
                let r = Refusal {
                    code: ErrorCode::Internal,
                    connection: UPLINK.to_owned(),
                    message: "the outbox could not be saved (the node is stopping)".into(),
                };
                return Err(SendError::refused(r, &queued.message_id));
            }
        }
    }
    let label = match status {
        SentStatus::Delivered => "delivered",
        SentStatus::Accepted => "accepted",
        SentStatus::Uncertain(_) => "uncertain",
    };
    tracing::info!(source = "agent_msg", %from, %to, message_id = %queued.message_id, status = label, "agent message sent across hosts");
    Ok(Sent {
        message_id: queued.message_id,
        connection,
        status,
    })
}

fn forget_waiter(peer: &PeerState, message_id: &str) {
    // A verdict that raced the end of the wait is reported as a notice later, not lost.
    peer.lock().waiters.remove(message_id);
}

/// What became of a sender's custody commit.
#[derive(Debug)]
pub(crate) enum Custody {
    /// Committed (or the hub answered before the commit failed).
    Durable,
    /// The commit failed and the mail had not left: taken back out.
    NotSent(Arc<str>),
    /// The commit failed after the mail left: it stays held in memory.
    OnItsWay(Arc<str>),
}

/// A node's own send to an address: into the uplink outbox, the link task told at once (the
/// mail leaves before its custody commit); the commit is left pending for `send_remote`.
fn queue_uplink(
    peer: &PeerState,
    from: &str,
    from_name: Option<String>,
    to: &str,
    message: String,
) -> Result<Queued, Refusal> {
    let message_id = uuid::Uuid::new_v4().to_string();
    let m = WireMessage {
        message_id: message_id.clone(),
        from: from.to_owned(),
        to: to.to_owned(),
        message,
        timestamp_ms: now_ms(),
        from_name,
        kind: None,
        lifecycle: None,
    };
    let mut p = peer.lock();
    match p.uplink.push(m) {
        Ok(_) => {}
        Err(e @ OutboxError::Full { .. }) => {
            return Err(Refusal {
                code: ErrorCode::OutboxFull,
                connection: UPLINK.to_owned(),
                message: e.to_string(),
            });
        }
        Err(e) => {
            return Err(Refusal {
                code: ErrorCode::TooLarge,
                connection: UPLINK.to_owned(),
                message: e.to_string(),
            });
        }
    }
    // The outcome waiter is in place before the mail can leave.
    let outcomes = if p.link.is_some() {
        let (tx, rx) = mpsc::unbounded_channel();
        p.waiters.insert(message_id.clone(), tx);
        Some(rx)
    } else {
        None
    };
    // Custody: answered only after the group commit that holds this message; the mail leaves
    // at once (early dispatch), so its trip overlaps that commit. A failed commit takes it back
    // out on the committer thread when it has not left yet (nothing is promised that a crash
    // would lose); mail already on its way stays held, and the caller hears it is unsaved.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let inner = peer.inner.clone();
    let id = message_id.clone();
    p.durable.0.push(Box::new(move |r: CommitResult| {
        let custody = match r {
            Ok(()) => Custody::Durable,
            Err(e) => {
                let mut g = lock_inner(&inner);
                match g.uplink.withdraw(&id) {
                    Withdrawn::Withdrawn => {
                        g.waiters.remove(&id);
                        Custody::NotSent(e)
                    }
                    Withdrawn::OnItsWay => Custody::OnItsWay(e),
                    // The hub answered already (it holds the mail committed, or refused it:
                    // the outcome is on its way to the sender).
                    Withdrawn::NotHeld => Custody::Durable,
                }
            }
        };
        let _ = tx.send(custody);
    }));
    p.kick();
    drop(p);
    // The commit is not waited for here: the verdict usually comes first, and whether the
    // answer needs this commit is decided then (`send_remote`). Until a group takes the
    // record, it stays in the journal, and an acknowledgement before that writes nothing.
    Ok(Queued {
        message_id,
        connection: UPLINK.to_owned(),
        outcomes,
        unsaved: None,
        custody: Some(PendingCustody(rx)),
    })
}

/// Peers reachable through the peer link, as `list_peers` entries with their addresses: on a
/// hub, every connected node's peers; on a node, what its hub last pushed.
pub(crate) fn remote_peers(env: &SendEnv<'_>, path: Option<&str>) -> Vec<Value> {
    let entries = match env.router {
        Some(h) => h.peers(),
        None => env.peer.lock().directory.clone(),
    };
    entries
        .into_iter()
        .filter(|p| path.is_none() || p.path.as_deref() == path)
        .filter_map(|p| {
            let address = p.address.clone()?;
            let mut v = json!({
                "tuic_session": p.tuic_session,
                "name": p.name,
                "orchestrator": p.orchestrator,
                "address": address,
                "is_remote": true,
            });
            if let Some((conn, _)) = address.split_once('/') {
                v["connection_id"] = json!(conn);
            }
            if let Some(path) = p.path {
                v["path"] = json!(path);
            }
            Some(v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(status: SentStatus) -> Value {
        Sent {
            message_id: "m1".into(),
            connection: "hub".into(),
            status,
        }
        .to_json("nodec/carol")
    }

    #[test]
    fn peer_send_outcomes_render_as_the_agent_tool_answers() {
        let v = sent(SentStatus::Delivered);
        assert_eq!(v["status"], "delivered");
        assert_eq!(v["delivered"], true);
        assert_eq!(v["to"], "nodec/carol");
        assert_eq!(v["delivery_path"], "peer_link");
        assert!(v.get("will_retry").is_none());
        let v = sent(SentStatus::Accepted);
        assert_eq!(
            (v["status"].as_str(), v["delivered"].as_bool()),
            (Some("accepted"), Some(false))
        );
        let v = sent(SentStatus::Uncertain(Uncertainty::LinkDropped));
        assert_eq!(v["will_retry"], true);
        assert!(
            v["uncertain_reason"]
                .as_str()
                .unwrap()
                .contains("link dropped")
        );
        let v = sent(SentStatus::Uncertain(Uncertainty::Unsaved(
            "hub could not save".into(),
        )));
        assert_eq!(
            (v["will_retry"].as_bool(), v["uncertain_reason"].as_str()),
            (Some(true), Some("hub could not save"))
        );
        let v = sent(SentStatus::Uncertain(Uncertainty::RefusedOnRetry(
            "full".into(),
        )));
        assert_eq!(v["will_retry"], false);
        assert!(
            v["uncertain_reason"]
                .as_str()
                .unwrap()
                .starts_with("a resend was refused (full)")
        );
    }
}
