//! The automation scheduler: one task, owned by `node.tasks`, that sleeps until the earliest
//! due occurrence (or a definition change wakes it), records due firings and performs them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tuic_proto::events::Event;

use super::{Definition, Firing};
use crate::state::Node;

/// Longest sleep without a due occurrence: a bound, so a clock step is noticed.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Starts the scheduler.
pub(crate) fn spawn(node: &Arc<Node>) {
    let n = node.clone();
    node.tasks.spawn(async move {
        loop {
            let a = n.clone();
            let Ok((due, next)) =
                tokio::task::spawn_blocking(move || a.automations.take_due(crate::logs::now_ms()))
                    .await
            else {
                break;
            };
            for (f, def) in due {
                perform(&n, f, def).await;
            }
            let now = crate::logs::now_ms();
            let sleep = next
                .map(|t| Duration::from_millis(t.saturating_sub(now)))
                .unwrap_or(MAX_SLEEP)
                .min(MAX_SLEEP);
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                _ = n.automations.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    });
}

/// Publishes a recorded firing and performs its effect (spawning the agent, when set).
async fn perform(node: &Arc<Node>, f: Firing, def: Definition) {
    let mut v = serde_json::to_value(&f).unwrap_or_default();
    v["name"] = json!(def.name);
    if let Some(agent) = def.agent.clone() {
        let n = node.clone();
        let req = crate::mail::spawn::SpawnRequest {
            command: agent.command,
            args: agent.args,
            cwd: agent.cwd,
            prompt: def.prompt.clone(),
            name: Some(format!("automation-{}", def.id)),
            ..Default::default()
        };
        let r = tokio::task::spawn_blocking(move || crate::mail::spawn::spawn(&n, req)).await;
        match r {
            Ok(Ok(s)) => v["session_id"] = s["session_id"].clone(),
            Ok(Err(e)) => {
                tracing::warn!(id = %def.id, error = %e, "automation spawn failed");
                v["error"] = json!(e);
            }
            Err(_) => v["error"] = json!("spawn task failed"),
        }
    }
    tracing::info!(source = "automations", id = %def.id, seq = f.seq, catch_up = f.catch_up, "automation fired");
    node.bus.publish(Event::AutomationFired(v));
}
