//! The automation scheduler: one task, owned by the node's task tracker, that sleeps until the
//! earliest due occurrence (or a definition change wakes it), records due firings and performs
//! them. It holds its [`SchedulerEnv`], built by the composition root, not the node.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tuic_proto::events::Event;

use super::{Automations, Definition, Firing};
use crate::events::Bus;
use crate::mail::spawn::SpawnRequest;

/// Longest sleep without a due occurrence: a bound, so a clock step is noticed.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Starts an agent for a firing (agent mail's spawn: the session's row, or why it failed).
/// Blocking.
pub(crate) type AgentSpawner = Arc<dyn Fn(SpawnRequest) -> Result<Value, String> + Send + Sync>;

/// What the scheduler uses of the node. Cloning shares everything.
#[derive(Clone)]
pub(crate) struct SchedulerEnv {
    /// The definitions and their firing ledger.
    pub automations: Arc<Automations>,
    /// `automation-fired` goes here.
    pub bus: Arc<Bus>,
    /// Owner of the scheduler task.
    pub tasks: TaskTracker,
    /// Ends the scheduler.
    pub shutdown: CancellationToken,
    /// Starts a firing's agent.
    pub spawn_agent: AgentSpawner,
}

/// The scheduler of one node.
pub struct Scheduler {
    env: SchedulerEnv,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler over `env`, not running yet.
    pub(crate) fn new(env: SchedulerEnv) -> Self {
        Self { env }
    }

    /// Starts the scheduler task.
    pub(crate) fn spawn(&self) {
        let env = self.env.clone();
        self.env.tasks.spawn(async move {
            loop {
                let a = env.automations.clone();
                let Ok((due, next)) =
                    tokio::task::spawn_blocking(move || a.take_due(crate::logs::now_ms())).await
                else {
                    break;
                };
                for (f, def) in due {
                    perform(&env, f, def).await;
                }
                let now = crate::logs::now_ms();
                let sleep = next
                    .map(|t| Duration::from_millis(t.saturating_sub(now)))
                    .unwrap_or(MAX_SLEEP)
                    .min(MAX_SLEEP);
                tokio::select! {
                    _ = env.shutdown.cancelled() => break,
                    _ = env.automations.wake.notified() => {}
                    _ = tokio::time::sleep(sleep) => {}
                }
            }
        });
    }
}

/// Publishes a recorded firing and performs its effect (spawning the agent, when set).
async fn perform(env: &SchedulerEnv, f: Firing, def: Definition) {
    let mut v = serde_json::to_value(&f).unwrap_or_default();
    v["name"] = json!(def.name);
    if let Some(agent) = def.agent.clone() {
        let spawn = env.spawn_agent.clone();
        let req = SpawnRequest {
            command: agent.command,
            args: agent.args,
            cwd: agent.cwd,
            prompt: def.prompt.clone(),
            name: Some(format!("automation-{}", def.id)),
            ..Default::default()
        };
        let r = tokio::task::spawn_blocking(move || spawn(req)).await;
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
    env.bus.publish(Event::AutomationFired(v));
}
