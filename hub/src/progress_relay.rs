//! Each node's `progress-recorded` events relayed onto the hub's bus, the connection named
//! (one task per connection, beside its session and mail links).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tuic_node::ext::NodeApi;
use tuic_proto::events::Event;

use crate::connections::{Conn, describe};

/// Relays a node's `progress-recorded` events onto the hub's bus, the connection named, so
/// a hub subscriber sees a `blocked` entry as soon as the node journals it. Runs until the
/// connection is removed; reconnects with the hub's backoff.
pub async fn relay_progress(http: reqwest::Client, node: Arc<NodeApi>, conn: Arc<Conn>) {
    let mut backoff =
        crate::connections::reconnect_backoff(node.config().tuning.peer_reconnect_max_ms);
    loop {
        let ran = tokio::select! {
            _ = conn.stop.cancelled() => return,
            r = relay_once(&http, &node, &conn) => r,
        };
        if ran {
            backoff =
                crate::connections::reconnect_backoff(node.config().tuning.peer_reconnect_max_ms);
        }
        // A flapping host (the session link's verdict) waits its hold here too.
        let hold = Duration::from_millis(conn.flaps().hold_ms(rand::random()));
        let delay = backoff.next().unwrap_or(Duration::from_secs(30)).max(hold);
        tokio::select! {
            _ = conn.stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// One subscription; whether it got as far as streaming.
async fn relay_once(http: &reqwest::Client, node: &NodeApi, conn: &Conn) -> bool {
    // Near the descriptor limit no new stream is opened (`server::fds`); the session link
    // logs the host's refusal.
    let claim = match tuic_node::ext::fds::claim("progress relay", 1) {
        Ok(c) => c,
        Err(why) => {
            tracing::debug!(conn = %conn.id, "{why}");
            return false;
        }
    };
    let r = http
        .get(format!("{}/events?types=progress-recorded", conn.url))
        .header(reqwest::header::COOKIE, conn.cookie())
        .send()
        .await;
    let resp = match r {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => {
            tracing::debug!(conn = %conn.id, status = %r.status(), "progress relay refused");
            return false;
        }
        Err(e) => {
            tracing::debug!(conn = %conn.id, error = %describe(&e), "progress relay failed");
            return false;
        }
    };
    drop(claim);
    let mut dec = tuic_proto::sse::SseDecoder::new(1 << 20);
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let Ok(b) = chunk else { break };
        if dec.feed(&b).is_err() {
            break;
        }
        while let Some(ev) = dec.poll_event() {
            if ev.event != "progress-recorded" {
                continue;
            }
            let Ok(mut v) = serde_json::from_str::<Value>(&ev.data) else {
                continue;
            };
            if v.is_object() {
                v["host"] = json!(conn.id);
                v["connection_id"] = json!(conn.id);
                node.bus.publish(Event::ProgressRecorded(v));
            }
        }
    }
    true
}
