//! The workflow executor: launches reserved attempts through the managed-agent spawn path,
//! applies `workflow_report`s, turns a worker's exit without a report into a repair, and at
//! start recovers live runs from their journal (a launched attempt whose worker is gone is
//! recorded `attempt_lost` and relaunched with the next generation).
//!
//! The order is always reserve (durable) → spawn → bind (durable): a crash between spawn and
//! bind leaves a reserved attempt, which recovery launches again.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tuic_proto::events::Event;

use super::env::StoriesEnv;
use super::workflow::{
    Attempt, CONTRACT_VERSION, Launch, PendingInput, Role, Run, RunChange, RunStatus,
};
use super::{StoryError, payload_hash};

mod report;

pub use report::*;

/// The next attempt at the run's current step: generation + 1 when it retries the same step.
pub fn next_attempt(run: &Run, feedback: Option<String>) -> Attempt {
    let step_id = run
        .step_ids
        .get(run.step_index)
        .cloned()
        .unwrap_or_default();
    let generation = match &run.attempt {
        Some(a) if a.step_id == step_id => a.generation + 1,
        _ => 1,
    };
    Attempt {
        attempt_id: format!("{}-a{}", run.run_id, run.attempts_made + 1),
        step_id,
        generation,
        session_id: None,
        tuic_session: None,
        task_id: None,
        feedback,
        role: run
            .step_roles
            .get(run.step_index)
            .copied()
            .unwrap_or_default(),
        deadline_ms: None,
    }
}

/// The `attempt_reserved` event of a new attempt.
pub fn reserved_event(a: &Attempt) -> (String, Value) {
    (
        "attempt_reserved".into(),
        json!({"attempt_id": a.attempt_id, "step_id": a.step_id, "generation": a.generation}),
    )
}

/// A repair: a new generation of the same step, or the run fails when repairs run out.
fn repair(run: &Run, reason: &str, counts: bool) -> RunChange {
    let mut n = run.clone();
    let attempt = run.attempt.as_ref().map(|a| a.attempt_id.clone());
    let mut events = Vec::new();
    if counts {
        n.repairs += 1;
    } else {
        n.recoveries += 1;
    }
    events.push((
        if counts { "repair" } else { "attempt_lost" }.into(),
        json!({"attempt_id": attempt, "reason": reason, "repairs": n.repairs, "recoveries": n.recoveries}),
    ));
    if counts && n.repairs > n.limits.max_repairs {
        n.status = RunStatus::Failed;
        n.attempt = None;
        events.push((
            "failed".into(),
            json!({"reason": format!("repairs exhausted ({} of {})", n.repairs, n.limits.max_repairs)}),
        ));
    } else {
        let a = next_attempt(&n, None);
        n.attempts_made += 1;
        events.push(reserved_event(&a));
        n.attempt = Some(a);
    }
    RunChange { run: n, events }
}

/// Renders a pinned prompt template: each `{name}` of `vars` is replaced.
pub(super) fn render(template: &str, vars: &[(&str, String)]) -> String {
    let mut out = template.to_owned();
    for (k, v) in vars {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

/// Launches the run's reserved attempt, if it has one and is running. Returns at once; the
/// spawn runs on the blocking pool.
pub fn kick(env: &StoriesEnv, run_id: &str) {
    let n = env.clone();
    let run_id = run_id.to_owned();
    env.tasks.spawn_blocking(move || launch(&n, &run_id));
}

fn launch(env: &StoriesEnv, run_id: &str) {
    let w = &env.workflows;
    reconcile(env, run_id);
    let Some(run) = w.run(run_id) else { return };
    if run.status != RunStatus::Running {
        return;
    }
    let Some(att) = run.attempt.clone() else {
        return;
    };
    if att.session_id.is_some() {
        return;
    }
    if !w
        .launching
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(att.attempt_id.clone())
    {
        return;
    }
    let r = spawn_worker(env, &run, &att);
    let now = crate::logs::now_ms();
    let res = match r {
        Ok(v) => w.update(run_id, now, |cur| {
            let same = cur.attempt.as_ref().map(|a| &a.attempt_id) == Some(&att.attempt_id);
            if !same || cur.status.terminal() {
                return Ok(None);
            }
            let mut n = cur.clone();
            let a = n.attempt.as_mut().expect("checked");
            a.session_id = v["session_id"].as_str().map(str::to_owned);
            a.tuic_session = v["tuic_session"].as_str().map(str::to_owned);
            a.task_id = v["task_id"].as_str().map(str::to_owned);
            a.deadline_ms = cur
                .limits
                .attempt_timeout_secs
                .map(|s| now.saturating_add(s.saturating_mul(1000)));
            let ev = json!({"attempt_id": a.attempt_id, "step_id": a.step_id, "generation": a.generation,
                            "role": a.role, "session_id": a.session_id, "tuic_session": a.tuic_session,
                            "task_id": a.task_id, "deadline_ms": a.deadline_ms});
            Ok(Some(RunChange {
                run: n,
                events: vec![("attempt_launched".into(), ev)],
            }))
        }),
        Err(e) => {
            tracing::warn!(run = %run_id, error = %e, "workflow worker spawn failed");
            let r = w.update(run_id, now, |cur| {
                if cur.attempt.as_ref().map(|a| &a.attempt_id) != Some(&att.attempt_id) {
                    return Ok(None);
                }
                Ok(Some(repair(cur, &format!("spawn failed: {e}"), true)))
            });
            w.launching
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&att.attempt_id);
            if r.is_ok() {
                kick(env, run_id);
            }
            return;
        }
    };
    w.launching
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&att.attempt_id);
    match res {
        Ok(_) => w.timer.notify_one(),
        Err(e) => tracing::warn!(run = %run_id, error = %e, "binding a launched worker failed"),
    }
}

fn spawn_worker(env: &StoriesEnv, run: &Run, att: &Attempt) -> Result<Value, String> {
    let def = env
        .workflows
        .definition(&run.project, &run.definition_id, run.definition_revision)
        .ok_or("the pinned definition revision is gone")?;
    let step = def
        .steps
        .iter()
        .find(|s| s.id == att.step_id)
        .ok_or("the step is not in the pinned definition")?;
    let story_id = run.target["id"].as_str().unwrap_or_default().to_owned();
    let title = env
        .stories
        .get(&run.project, &story_id)
        .map(|s| s.title)
        .unwrap_or_default();
    let prompt = render(
        &step.prompt,
        &[
            ("runId", run.run_id.clone()),
            ("attemptId", att.attempt_id.clone()),
            ("generation", att.generation.to_string()),
            ("stepId", att.step_id.clone()),
            ("storyId", story_id.clone()),
            ("storyRevision", run.story_revision.to_string()),
            ("storyTitle", title),
            ("feedback", att.feedback.clone().unwrap_or_default()),
        ],
    );
    let vars: HashMap<String, String> = [
        ("TUIC_RUN_ID", run.run_id.clone()),
        ("TUIC_ATTEMPT_ID", att.attempt_id.clone()),
        ("TUIC_ATTEMPT_GENERATION", att.generation.to_string()),
        ("TUIC_STORY_ID", story_id),
        ("TUIC_STORY_REVISION", run.story_revision.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    env.spawn_agent(super::env::WorkerSpawn {
        command: step.agent.command.clone(),
        args: step.agent.args.clone(),
        cwd: run.project.clone(),
        prompt,
        env: vars,
        name: format!("{}-{}", run.run_id, att.step_id),
        parent: None,
    })
}

/// Closes the worker of a cancelled run.
pub fn stop_worker(env: &StoriesEnv, run: &Run) {
    if let Some(s) = run
        .attempt
        .as_ref()
        .and_then(|a| a.session_id.as_deref())
        .and_then(|id| env.live_session(id))
    {
        s.kill();
    }
}

/// Longest sleep of the attempt timer without a deadline: a bound, so a clock step is seen.
const MAX_TIMER_SLEEP: std::time::Duration = std::time::Duration::from_secs(60);

/// The attempt timer: sleeps until the earliest deadline of a running run's launched,
/// unreported attempt (or until a launch sets a new one), then times the overdue out.
fn spawn_timer(env: &StoriesEnv) {
    let n = env.clone();
    env.tasks.spawn(async move {
        loop {
            let now = crate::logs::now_ms();
            let next = n
                .workflows
                .live_runs()
                .iter()
                .filter(|r| r.status == RunStatus::Running)
                .flat_map(|r| {
                    let step = r.attempt.as_ref().and_then(|a| a.deadline_ms);
                    step.into_iter()
                        .chain(r.launches.values().filter_map(Launch::pending_deadline))
                })
                .min();
            if next.is_some_and(|d| d <= now) {
                let r = n.clone();
                let _ = tokio::task::spawn_blocking(move || time_out_due(&r, now)).await;
                continue;
            }
            let sleep = next
                .map(|d| std::time::Duration::from_millis(d - now))
                .unwrap_or(MAX_TIMER_SLEEP)
                .min(MAX_TIMER_SLEEP);
            tokio::select! {
                _ = n.shutdown.cancelled() => break,
                _ = n.workflows.timer.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    });
}

/// Every running run whose launched attempt passed its deadline without a report records
/// `attempt_timed_out` and a repair (the next generation, or the run fails when repairs run
/// out); the overdue worker is closed. Coordinator-launched workers past their deadline are
/// timed out too (see [`time_out_launches`]).
fn time_out_due(env: &StoriesEnv, now: u64) {
    time_out_launches(env, now);
    for run in env.workflows.live_runs() {
        let Some(a) = run.attempt.clone() else {
            continue;
        };
        if run.status != RunStatus::Running || a.deadline_ms.is_none_or(|d| d > now) {
            continue;
        }
        let r = env.workflows.update(&run.run_id, now, |cur| {
            let Some(c) = cur
                .attempt
                .as_ref()
                .filter(|c| c.attempt_id == a.attempt_id)
            else {
                return Ok(None);
            };
            if cur.status != RunStatus::Running
                || c.deadline_ms.is_none_or(|d| d > now)
                || cur
                    .reports
                    .contains_key(&format!("{}#{}", c.attempt_id, c.generation))
            {
                return Ok(None);
            }
            let secs = cur.limits.attempt_timeout_secs.unwrap_or(0);
            let mut ch = repair(cur, &format!("timed out: no report within {secs} s"), true);
            ch.events.insert(
                0,
                (
                    "attempt_timed_out".into(),
                    json!({"attempt_id": c.attempt_id, "generation": c.generation,
                           "deadline_ms": c.deadline_ms, "attempt_timeout_secs": secs}),
                ),
            );
            Ok(Some(ch))
        });
        match r {
            Ok(after) if after.attempt.as_ref().map(|x| &x.attempt_id) != Some(&a.attempt_id) => {
                if let Some(s) = a.session_id.as_deref().and_then(|id| env.live_session(id)) {
                    s.kill();
                }
                kick(env, &run.run_id);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(run = %run.run_id, error = %e, "timing out an attempt failed"),
        }
    }
}

/// A coordinator-launched worker past its deadline without a report records
/// `attempt_timed_out` (with `launched: true`), is closed, and the active coordinator's inbox
/// gets a `workflow_event` cursor at that event, as after a worker's report: the coordinator
/// decides what follows (a relaunch is a new `attemptId`); no repair is counted for it.
fn time_out_launches(env: &StoriesEnv, now: u64) {
    for run in env.workflows.live_runs() {
        if run.status != RunStatus::Running {
            continue;
        }
        let due: Vec<Launch> = run
            .launches
            .values()
            .filter(|l| l.pending_deadline().is_some_and(|d| d <= now))
            .cloned()
            .collect();
        for l in due {
            let mut timed_out = false;
            let r = env.workflows.update(&run.run_id, now, |cur| {
                let Some(c) = cur.launches.get(&l.attempt_id) else {
                    return Ok(None);
                };
                if cur.status != RunStatus::Running || c.pending_deadline().is_none_or(|d| d > now)
                {
                    return Ok(None);
                }
                let secs = cur.limits.attempt_timeout_secs.unwrap_or(0);
                let mut n = cur.clone();
                if let Some(x) = n.launches.get_mut(&l.attempt_id) {
                    x.timed_out = true;
                }
                if let Some(d) = cur.timeout_from(now) {
                    n.hold_coordinator(d);
                }
                timed_out = true;
                Ok(Some(RunChange {
                    run: n,
                    events: vec![(
                        "attempt_timed_out".into(),
                        json!({"attempt_id": c.attempt_id, "generation": c.generation,
                               "launched": true, "agent_type": c.agent_type,
                               "coordinator_attempt": c.coordinator_attempt,
                               "session_id": c.session_id, "deadline_ms": c.deadline_ms,
                               "attempt_timeout_secs": secs}),
                    )],
                }))
            });
            match r {
                Ok(after) if timed_out => {
                    if let Some(s) = l.session_id.as_deref().and_then(|id| env.live_session(id)) {
                        s.kill();
                    }
                    tracing::info!(run = %after.run_id, attempt = %l.attempt_id, "launched worker timed out");
                    let story = after.target["id"].as_str().unwrap_or_default().to_owned();
                    super::coordinator::notify(env, &after, &story, after.sequence);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(run = %run.run_id, error = %e, "timing out a launched worker failed")
                }
            }
        }
    }
}

/// Starts the executor: recovers live runs, then watches worker exits; and the attempt timer.
pub fn spawn(env: &StoriesEnv) {
    spawn_timer(env);
    let n = env.clone();
    let mut rx = env.bus.subscribe();
    env.tasks.spawn(async move {
        let r = n.clone();
        let _ = tokio::task::spawn_blocking(move || recover(&r)).await;
        loop {
            let env = tokio::select! {
                _ = n.shutdown.cancelled() => break,
                e = rx.recv() => e,
            };
            match env {
                Ok(env) => {
                    if let Event::PtyExit { session_id, .. } = &env.event {
                        let (r, sid) = (n.clone(), session_id.clone());
                        let _ = tokio::task::spawn_blocking(move || worker_exited(&r, &sid)).await;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    // Missed exits: re-check every live run against the live sessions.
                    let r = n.clone();
                    let _ = tokio::task::spawn_blocking(move || recover(&r)).await;
                }
                Err(_) => break,
            }
        }
    });
}

/// A worker's PTY exited: if its attempt is still active (it never reported), that is an
/// observation that costs a repair.
fn worker_exited(env: &StoriesEnv, session_id: &str) {
    for run in env.workflows.live_runs() {
        let Some(a) = &run.attempt else { continue };
        if a.session_id.as_deref() != Some(session_id) {
            continue;
        }
        let key_prefix = format!("{}#{}", a.attempt_id, a.generation);
        if run.reports.contains_key(&key_prefix) {
            continue;
        }
        let att = a.attempt_id.clone();
        let r = env
            .workflows
            .update(&run.run_id, crate::logs::now_ms(), |cur| {
                if cur.attempt.as_ref().map(|a| &a.attempt_id) != Some(&att)
                    || !matches!(cur.status, RunStatus::Running | RunStatus::Paused)
                {
                    return Ok(None);
                }
                Ok(Some(repair(
                    cur,
                    "the worker exited without a report",
                    true,
                )))
            });
        if r.is_ok() {
            kick(env, &run.run_id);
        }
    }
}

/// Live runs after a start (or a lagged event stream): every running run is kicked, and a
/// kick first reconciles (see [`reconcile`]).
fn recover(env: &StoriesEnv) {
    for run in env.workflows.live_runs() {
        if run.status == RunStatus::Running {
            kick(env, &run.run_id);
        }
    }
}

/// A running run whose launched, unreported attempt has no live worker PTY (the node
/// restarted, or a paused run's worker died meanwhile) records `attempt_lost` and reserves
/// the next generation.
fn reconcile(env: &StoriesEnv, run_id: &str) {
    let Some(run) = env.workflows.run(run_id) else {
        return;
    };
    if run.status != RunStatus::Running {
        return;
    }
    let Some(a) = &run.attempt else { return };
    let gone = a
        .session_id
        .as_deref()
        .is_some_and(|s| env.live_session(s).is_none_or(|x| x.exit().is_some()));
    if !gone
        || run
            .reports
            .contains_key(&format!("{}#{}", a.attempt_id, a.generation))
    {
        return;
    }
    let att = a.attempt_id.clone();
    let _ = env.workflows.update(run_id, crate::logs::now_ms(), |cur| {
        if cur.attempt.as_ref().map(|a| &a.attempt_id) != Some(&att)
            || cur.status != RunStatus::Running
        {
            return Ok(None);
        }
        Ok(Some(repair(
            cur,
            "the worker is gone (node restart)",
            false,
        )))
    });
}
