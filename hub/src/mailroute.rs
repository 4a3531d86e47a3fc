//! The hub's own agents' mail to other hosts, plugged into the node through
//! `tuic_node::ext::MailRouter`: a send to `<connection>/<peer>` goes into that connection's
//! outbox of the relay ([`PeerHub`], `peerlink.rs`) instead of an uplink, and `list_peers`
//! shows the peers each connected node registered over its link.

use tuic_node::ext::now_ms;
use tuic_node::ext::{MailRouter, Queued, Refusal};
use tuic_proto::peer::{
    ErrorCode, LOCAL as LINK_LOCAL, PeerEntry, Response, WireMessage, format_address,
};

use crate::peerlink::{PeerHub, Relayed};

impl MailRouter for PeerHub {
    fn send(
        &self,
        from: &str,
        from_name: Option<String>,
        to: &str,
        message: String,
    ) -> Result<Queued, Refusal> {
        let message_id = uuid::Uuid::new_v4().to_string();
        let m = WireMessage {
            message_id: message_id.clone(),
            from: format_address(LINK_LOCAL, from),
            to: to.to_owned(),
            message,
            timestamp_ms: now_ms(),
            from_name,
            kind: None,
            lifecycle: None,
        };
        let conn = to
            .split_once('/')
            .map(|(c, _)| c.to_owned())
            .unwrap_or_default();
        // Register the waiter first: the verdict may arrive before this function returns.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.lock().waiters.insert(message_id.clone(), tx);
        let relayed = match self.relay_in(&m) {
            Relayed::Answer(r) => r,
            Relayed::Unsaved { connection, error } => {
                let up = self.link_up(&conn);
                if !up {
                    self.lock().waiters.remove(&message_id);
                }
                return Ok(Queued {
                    message_id,
                    connection: connection.clone(),
                    outcomes: up.then_some(rx),
                    unsaved: Some(format!(
                        "the hub could not save its outbox for '{connection}' ({error}); the message was already on its way and is resent with the same message_id until that node acknowledges it, but a restart of the hub before then would lose it"
                    )),
                    custody: None,
                });
            }
        };
        match relayed {
            Response::SendAck { .. } => {
                let up = self.link_up(&conn);
                if !up {
                    self.lock().waiters.remove(&message_id);
                }
                Ok(Queued {
                    message_id,
                    connection: conn,
                    outcomes: up.then_some(rx),
                    unsaved: None,
                    custody: None,
                })
            }
            Response::Error {
                code,
                connection,
                message,
            } => {
                self.lock().waiters.remove(&message_id);
                Err(Refusal {
                    code,
                    connection,
                    message,
                })
            }
            other => {
                self.lock().waiters.remove(&message_id);
                Err(Refusal {
                    code: ErrorCode::Internal,
                    connection: conn,
                    message: format!("unexpected relay answer {other:?}"),
                })
            }
        }
    }

    fn peers(&self) -> Vec<PeerEntry> {
        self.lock().relay.shadow_peers()
    }
}
