//! Liveness: pings every interval, the link down after unanswered ones or a slow handshake.

use crate::peer::frame::Frame;

use super::{DownReason, LinkState, PeerLink};

/// Ping interval (API "Federation": every 5 s).
pub const PING_INTERVAL_MS: u64 = 5_000;
/// Unanswered pings after which the link is down (API: down after 3 misses).
pub const MAX_MISSED_PINGS: u32 = 3;

impl PeerLink {
    /// Advances time: sends pings, declares the link down after missed pings or a slow
    /// handshake.
    pub fn handle_timeout(&mut self, now: u64) {
        match self.state {
            LinkState::Down => {}
            LinkState::Handshaking => {
                if now >= self.handshake_deadline {
                    self.go_down(DownReason::HandshakeTimeout);
                }
            }
            LinkState::Up => {
                if self.probe_deadline.is_some_and(|d| now >= d) {
                    self.go_down(DownReason::PingTimeout);
                    return;
                }
                while now >= self.next_ping && self.state == LinkState::Up {
                    if self.unanswered_pings >= self.config.max_missed_pings {
                        self.go_down(DownReason::PingTimeout);
                        return;
                    }
                    self.ping_nonce += 1;
                    self.transmit.push_back(Frame::Ping {
                        nonce: self.ping_nonce,
                    });
                    self.unanswered_pings += 1;
                    self.next_ping += self.config.ping_interval_ms;
                }
            }
        }
    }

    /// When [`PeerLink::handle_timeout`] must next run.
    pub fn poll_timeout(&self) -> Option<u64> {
        match self.state {
            LinkState::Down => None,
            LinkState::Handshaking => Some(self.handshake_deadline),
            LinkState::Up => Some(
                self.probe_deadline
                    .map_or(self.next_ping, |d| d.min(self.next_ping)),
            ),
        }
    }

    /// Asks the far side for a sign of life now: a ping goes out at once and, unless any
    /// frame is heard within `within_ms`, the link goes down (`PingTimeout`). A node uses it
    /// when a second link from its hub arrives while this one looks live: a hub that was
    /// killed sends nothing, so only a probe tells a dead link from a live one before the
    /// pings' interval does. Ignored unless the link is up or while a probe runs.
    pub fn probe(&mut self, now: u64, within_ms: u64) {
        if self.state != LinkState::Up || self.probe_deadline.is_some() {
            return;
        }
        self.ping_nonce += 1;
        self.transmit.push_back(Frame::Ping {
            nonce: self.ping_nonce,
        });
        self.probe_deadline = Some(now + within_ms);
    }

    /// Pings sent since anything was last heard from the far side: a live link answers each
    /// within its round trip, so two or more mean a full ping interval of silence.
    pub fn missed_pings(&self) -> u32 {
        self.unanswered_pings
    }

    pub(super) fn heard(&mut self) {
        self.unanswered_pings = 0;
        self.probe_deadline = None;
    }
}
