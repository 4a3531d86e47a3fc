//! The coordinator's side of a run: `workflow_launch` (a worker in a registered linked
//! worktree, started through the managed-agent spawn path and bound to a durable attempt),
//! `workflow_story_create` (a story proposal under a durable proposal key) and the
//! `workflow_event` mail cursor the active coordinator receives after a committed worker
//! report (or after a launched worker's deadline passed: the runner's attempt timer gives
//! each launch the run's `attempt_timeout_secs`, like a step attempt's).
//!
//! Only the run's active coordinator may call the tools: the bound local managed PTY of the
//! current attempt of a `role: coordinator` step ([`Run::active_coordinator`]). Every effect
//! is recorded in the run before it happens (`launch_reserved`, `effect_reserved`) and its
//! outcome after (`attempt_launched` / `launch_failed`, `effect_completed` / `effect_failed`),
//! so a crash in between is finished by a retry under the same key, and a changed payload
//! under a used key is refused.
//!
//! Deliberately absent: plan targets (`start_graph` refuses them), so "the run's plan" is the
//! plan source of the run's story; a run whose story has none takes no proposals.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::env::StoriesEnv;
use super::service::{Ctx, StoryAction, StoryOrigin};
use super::workflow::{Launch, MAX_LAUNCHES, MAX_PROPOSALS, Proposal, Run, RunChange, RunStatus};
use super::{Actor, StoryError, payload_hash};

/// `workflow_launch`'s input.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LaunchInput {
    /// The run.
    pub run_id: String,
    /// The coordinator-chosen attempt id, unique in the run (the launch's idempotency key).
    pub attempt_id: String,
    /// A linked worktree of the project (never the main checkout).
    pub worktree_path: String,
    /// A launch the coordinator step pins (`launches` in the definition).
    pub agent_type: String,
    /// Skill names rendered into the prompt as `{skills}`.
    #[serde(default)]
    pub skills: Vec<String>,
    /// Rendered as `{feedback}`.
    #[serde(default)]
    pub feedback: Option<String>,
}

/// The story a coordinator proposes (the `create` fields it may set).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposedStory {
    /// Title.
    pub title: String,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
    /// Acceptance criteria.
    #[serde(default)]
    pub acceptance_criteria: Option<Vec<String>>,
    /// Prerequisite story ids.
    #[serde(default)]
    pub dependencies: Option<Vec<String>>,
}

/// `workflow_story_create`'s input.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoryCreateInput {
    /// The run.
    pub run_id: String,
    /// Durable across retries: the same story under it returns the first result.
    pub proposal_key: String,
    /// The proposed story.
    pub story: ProposedStory,
}

fn forbidden(action: &str, has: &'static str) -> StoryError {
    StoryError::Forbidden {
        action: action.to_owned(),
        needs: "the run's active coordinator (a bound local managed PTY)",
        has,
    }
}

/// The caller's identity when it is a bound, local, managed PTY.
fn bound_caller(
    env: &StoriesEnv,
    caller: Option<&str>,
    loopback: bool,
    tool: &str,
) -> Result<String, StoryError> {
    let c = caller.ok_or_else(|| forbidden(tool, "an unbound caller"))?;
    if !loopback {
        return Err(forbidden(tool, "a remote caller"));
    }
    let managed = env.is_managed(c);
    if !env.owns_live_pty(c) || !managed {
        return Err(forbidden(
            tool,
            "an identity without a live managed terminal",
        ));
    }
    Ok(c.to_owned())
}

/// Checks that `me` is the active coordinator of `run` and that the run is running.
fn check_coordinator(run: &Run, me: &str, tool: &str) -> Result<(), StoryError> {
    let Some(c) = run.active_coordinator() else {
        return Err(StoryError::Transition(format!(
            "{} has no active coordinator ({:?}, step {})",
            run.run_id,
            run.status,
            run.step_ids.get(run.step_index).map_or("-", String::as_str)
        )));
    };
    if c.tuic_session.as_deref() != Some(me) {
        return Err(forbidden(
            &format!("{tool} on {}", run.run_id),
            "another session",
        ));
    }
    if run.status != RunStatus::Running {
        return Err(StoryError::Transition(format!(
            "{} is {:?}; its coordinator acts only while it runs",
            run.run_id, run.status
        )));
    }
    Ok(())
}

fn coordinator_run(
    env: &StoriesEnv,
    run_id: &str,
    me: &str,
    tool: &str,
) -> Result<Run, StoryError> {
    let run = env
        .workflows
        .run(run_id)
        .ok_or_else(|| StoryError::UnknownRecord {
            kind: "run",
            id: run_id.to_owned(),
        })?;
    check_coordinator(&run, me, tool)?;
    Ok(run)
}

fn check_key(field: &str, v: &str, max: usize) -> Result<(), StoryError> {
    if v.is_empty()
        || v.len() > max
        || !v
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
    {
        return Err(StoryError::Invalid(format!(
            "{field} must be 1-{max} characters of A-Z, a-z, 0-9, - _ . :"
        )));
    }
    Ok(())
}

/// The canonical path of a linked worktree of `project`; the main checkout and unknown
/// directories are refused.
fn check_worktree(env: &StoriesEnv, project: &str, path: &str) -> Result<String, StoryError> {
    let p = std::fs::canonicalize(path)
        .map_err(|e| StoryError::Invalid(format!("worktreePath {path}: {e}")))?;
    let main = Path::new(project);
    if p == main {
        return Err(StoryError::Invalid(format!(
            "worktreePath {} is the main checkout; a worker runs in a linked worktree (repo action=worktree_create)",
            p.display()
        )));
    }
    let linked = env
        .linked_worktrees(main)
        .map_err(|e| StoryError::Invalid(format!("listing the worktrees of {project}: {e}")))?;
    let known = linked
        .iter()
        .any(|w| w.canonicalize().ok().as_deref() == Some(p.as_path()));
    if !known {
        return Err(StoryError::Invalid(format!(
            "worktreePath {} is not a linked worktree of {project} (repo action=worktree_list)",
            p.display()
        )));
    }
    Ok(p.to_string_lossy().into_owned())
}

/// `workflow_launch`. `caller` is the MCP binding's identity. Blocking (it spawns).
pub fn launch(
    env: &StoriesEnv,
    caller: Option<&str>,
    loopback: bool,
    input: &Value,
) -> Result<Value, StoryError> {
    const TOOL: &str = "workflow_launch";
    let i: LaunchInput = serde_json::from_value(input.clone())
        .map_err(|e| StoryError::Invalid(format!("input: {e}")))?;
    let me = bound_caller(env, caller, loopback, TOOL)?;
    check_key("attemptId", &i.attempt_id, 64)?;
    if i.skills.len() > 16 || i.skills.iter().any(|s| s.is_empty() || s.len() > 64) {
        return Err(StoryError::Invalid(
            "skills: at most 16 names of 1-64 characters".into(),
        ));
    }
    if i.feedback.as_ref().is_some_and(|f| f.len() > 8_000) {
        return Err(StoryError::Invalid("feedback: at most 8,000 bytes".into()));
    }
    let run = coordinator_run(env, &i.run_id, &me, TOOL)?;
    let coord = run.active_coordinator().cloned().expect("checked");
    let def = env
        .workflows
        .definition(&run.project, &run.definition_id, run.definition_revision)
        .ok_or_else(|| StoryError::UnknownRecord {
            kind: "workflow definition revision",
            id: format!("{}@{}", run.definition_id, run.definition_revision),
        })?;
    let step = def
        .steps
        .iter()
        .find(|s| s.id == coord.step_id)
        .ok_or_else(|| StoryError::Invalid("the coordinator's step is not pinned".into()))?;
    let ld = step.launches.get(&i.agent_type).ok_or_else(|| {
        StoryError::Invalid(format!(
            "agentType {:?} is not pinned by step {}; it launches: {}",
            i.agent_type,
            step.id,
            step.launches.keys().cloned().collect::<Vec<_>>().join(", ")
        ))
    })?;
    let worktree = check_worktree(env, &run.project, &i.worktree_path)?;
    let hash = payload_hash(
        &Actor::Agent {
            session: me.clone(),
        },
        &i,
    );
    let now = crate::logs::now_ms();
    // Reserve the spawn effect (durable) before spawning.
    let mut replay = None;
    env.workflows.update(&run.run_id, now, |cur| {
        check_coordinator(cur, &me, TOOL)?;
        if let Some(l) = cur.launches.get(&i.attempt_id) {
            if l.hash != hash {
                return Err(StoryError::IdempotencyConflict {
                    key: i.attempt_id.clone(),
                });
            }
            if l.session_id.is_some() {
                replay = Some(l.clone());
            }
            // Reserved but never bound (a crash or a failed bind): spawn it now.
            return Ok(None);
        }
        if cur.attempt.as_ref().map(|a| &a.attempt_id) == Some(&i.attempt_id)
            || i.attempt_id.starts_with(&format!("{}-a", cur.run_id))
        {
            return Err(StoryError::Invalid(format!(
                "attemptId {} is reserved for the run's own step attempts",
                i.attempt_id
            )));
        }
        if cur.launches.len() >= MAX_LAUNCHES {
            return Err(StoryError::Invalid(format!(
                "{} already launched {MAX_LAUNCHES} workers",
                cur.run_id
            )));
        }
        if let Some(other) = cur
            .launches
            .values()
            .find(|l| l.awaited() && l.worktree == worktree)
        {
            return Err(StoryError::Transition(format!(
                "worktree {worktree} is bound to attempt {} until it reports; use a distinct worktree",
                other.attempt_id
            )));
        }
        let mut n = cur.clone();
        let l = Launch {
            attempt_id: i.attempt_id.clone(),
            generation: 1,
            agent_type: i.agent_type.clone(),
            role: ld.role,
            worktree: worktree.clone(),
            coordinator_attempt: coord.attempt_id.clone(),
            hash: hash.clone(),
            session_id: None,
            tuic_session: None,
            task_id: None,
            reported: false,
            deadline_ms: None,
            timed_out: false,
        };
        let ev = json!({"effect": "spawn", "attempt_id": l.attempt_id, "agent_type": l.agent_type,
                        "role": l.role, "worktree": l.worktree, "coordinator_attempt": l.coordinator_attempt});
        n.launches.insert(l.attempt_id.clone(), l);
        Ok(Some(RunChange {
            run: n,
            events: vec![("launch_reserved".into(), ev)],
        }))
    })?;
    if let Some(l) = replay {
        return Ok(json!({"ok": true, "replayed": true, "launch": l}));
    }
    let busy_key = format!("{}/{}", run.run_id, i.attempt_id);
    if !env
        .workflows
        .launching
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(busy_key.clone())
    {
        return Err(StoryError::Transition(format!(
            "{} is being launched right now; retry for its result",
            i.attempt_id
        )));
    }
    let story_id = run.target["id"].as_str().unwrap_or_default().to_owned();
    let title = env
        .stories
        .get(&run.project, &story_id)
        .map(|s| s.title)
        .unwrap_or_default();
    let prompt = super::runner::render(
        &ld.prompt,
        &[
            ("runId", run.run_id.clone()),
            ("attemptId", i.attempt_id.clone()),
            ("generation", "1".into()),
            ("stepId", coord.step_id.clone()),
            ("storyId", story_id.clone()),
            ("storyRevision", run.story_revision.to_string()),
            ("storyTitle", title),
            ("feedback", i.feedback.clone().unwrap_or_default()),
            ("worktreePath", worktree.clone()),
            ("agentType", i.agent_type.clone()),
            ("skills", i.skills.join(", ")),
        ],
    );
    let vars: HashMap<String, String> = [
        ("TUIC_RUN_ID", run.run_id.clone()),
        ("TUIC_ATTEMPT_ID", i.attempt_id.clone()),
        ("TUIC_ATTEMPT_GENERATION", "1".to_owned()),
        ("TUIC_STORY_ID", story_id),
        ("TUIC_STORY_REVISION", run.story_revision.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let spawned = env.spawn_agent(super::env::WorkerSpawn {
        command: ld.agent.command.clone(),
        args: ld.agent.args.clone(),
        cwd: worktree.clone(),
        prompt,
        env: vars,
        name: format!("{}-{}", run.run_id, i.attempt_id),
        parent: Some(me.clone()),
    });
    env.workflows
        .launching
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&busy_key);
    let now = crate::logs::now_ms();
    match spawned {
        Ok(v) => {
            let r = env.workflows.update(&run.run_id, now, |cur| {
                let mut n = cur.clone();
                let Some(l) = n.launches.get_mut(&i.attempt_id) else {
                    return Ok(None);
                };
                l.session_id = v["session_id"].as_str().map(str::to_owned);
                l.tuic_session = v["tuic_session"].as_str().map(str::to_owned);
                l.task_id = v["task_id"].as_str().map(str::to_owned);
                // The same attempt timer as a step attempt's, from the bind.
                l.deadline_ms = cur.timeout_from(now);
                let ev = json!({"attempt_id": l.attempt_id, "generation": 1, "launched_by": me,
                    "agent_type": l.agent_type, "role": l.role, "worktree": l.worktree,
                    "session_id": l.session_id, "tuic_session": l.tuic_session, "task_id": l.task_id,
                    "deadline_ms": l.deadline_ms});
                if let Some(d) = l.deadline_ms {
                    // The coordinator outlives the wait for its worker by one full window.
                    n.hold_coordinator(cur.timeout_from(d).unwrap_or(d));
                }
                Ok(Some(RunChange {
                    run: n,
                    events: vec![("attempt_launched".into(), ev)],
                }))
            })?;
            env.workflows.timer.notify_one();
            Ok(json!({"ok": true, "launch": r.launches.get(&i.attempt_id)}))
        }
        Err(e) => {
            let _ = env.workflows.update(&run.run_id, now, |cur| {
                let mut n = cur.clone();
                if n.launches.remove(&i.attempt_id).is_none() {
                    return Ok(None);
                }
                Ok(Some(RunChange {
                    run: n,
                    events: vec![(
                        "launch_failed".into(),
                        json!({"attempt_id": i.attempt_id, "error": e}),
                    )],
                }))
            });
            Err(StoryError::Invalid(format!(
                "the worker could not be spawned: {e}"
            )))
        }
    }
}

/// `workflow_story_create`. Blocking (it commits).
pub fn story_create(
    env: &StoriesEnv,
    caller: Option<&str>,
    loopback: bool,
    input: &Value,
) -> Result<Value, StoryError> {
    const TOOL: &str = "workflow_story_create";
    let i: StoryCreateInput = serde_json::from_value(input.clone())
        .map_err(|e| StoryError::Invalid(format!("input: {e}")))?;
    let me = bound_caller(env, caller, loopback, TOOL)?;
    check_key("proposalKey", &i.proposal_key, 128)?;
    let run = coordinator_run(env, &i.run_id, &me, TOOL)?;
    let target = run.target["id"].as_str().unwrap_or_default();
    let plan = env
        .stories
        .get(&run.project, target)
        .and_then(|s| s.plan_source)
        .ok_or_else(|| {
            StoryError::Transition(format!(
                "{} has no plan: its story {target} belongs to no plan source",
                run.run_id
            ))
        })?;
    // The proposal binds the story payload, not the caller: a relaunched coordinator retrying
    // the same proposal gets the same story.
    let hash = payload_hash(&Actor::LocalApi, &i.story);
    let now = crate::logs::now_ms();
    let mut done = None;
    env.workflows.update(&run.run_id, now, |cur| {
        check_coordinator(cur, &me, TOOL)?;
        if let Some(p) = cur.proposals.get(&i.proposal_key) {
            if p.hash != hash {
                return Err(StoryError::IdempotencyConflict {
                    key: i.proposal_key.clone(),
                });
            }
            done = p.story_id.clone();
            // Reserved without an outcome (a crash): run the story transaction again; its
            // request id makes it idempotent.
            return Ok(None);
        }
        if cur.proposals.len() >= MAX_PROPOSALS {
            return Err(StoryError::Invalid(format!(
                "{} already has {MAX_PROPOSALS} proposals",
                cur.run_id
            )));
        }
        let mut n = cur.clone();
        n.proposals.insert(
            i.proposal_key.clone(),
            Proposal {
                hash: hash.clone(),
                story_id: None,
            },
        );
        Ok(Some(RunChange {
            run: n,
            events: vec![(
                "effect_reserved".into(),
                json!({"effect": "create_story", "proposal_key": i.proposal_key, "story_hash": hash, "plan_source": plan}),
            )],
        }))
    })?;
    if let Some(id) = done {
        let s = env
            .stories
            .get(&run.project, &id)
            .ok_or_else(|| StoryError::NotFound(id.clone()))?;
        return Ok(json!({"story": s, "replayed": true}));
    }
    let st = i.story.clone();
    let created = env.stories.create_proposed(
        &Ctx {
            project: run.project.clone(),
            // The story's author is the run (independent of any reviewer session).
            actor: Actor::Agent {
                session: format!("workflow:{}", run.run_id),
            },
            now_ms: now,
        },
        StoryAction::Create {
            title: st.title,
            description: st.description,
            acceptance_criteria: st.acceptance_criteria,
            dependencies: st.dependencies,
            plan_source: Some(plan),
            request_id: Some(format!("{}/proposal/{}", run.run_id, i.proposal_key)),
        },
        StoryOrigin {
            kind: "plan_step".into(),
            run_id: Some(run.run_id.clone()),
            proposal_key: Some(i.proposal_key.clone()),
        },
    );
    let now = crate::logs::now_ms();
    match created {
        Ok(v) => {
            let id = v["story"]["id"].as_str().unwrap_or_default().to_owned();
            env.workflows.update(&run.run_id, now, |cur| {
                let mut n = cur.clone();
                let Some(p) = n.proposals.get_mut(&i.proposal_key) else {
                    return Ok(None);
                };
                if p.story_id.is_some() {
                    return Ok(None);
                }
                p.story_id = Some(id.clone());
                Ok(Some(RunChange {
                    run: n,
                    events: vec![(
                        "effect_completed".into(),
                        json!({"effect": "create_story", "proposal_key": i.proposal_key, "story_id": id}),
                    )],
                }))
            })?;
            Ok(v)
        }
        Err(e) => {
            let msg = e.to_string();
            let _ = env.workflows.update(&run.run_id, now, |cur| {
                let mut n = cur.clone();
                if n.proposals.remove(&i.proposal_key).is_none() {
                    return Ok(None);
                }
                Ok(Some(RunChange {
                    run: n,
                    events: vec![(
                        "effect_failed".into(),
                        json!({"effect": "create_story", "proposal_key": i.proposal_key, "error": msg}),
                    )],
                }))
            });
            Err(e)
        }
    }
}

/// After a committed report of a launched worker: the active coordinator's inbox gets a
/// `workflow_event` cursor (a system message from `tuic`). The coordinator replays the run
/// log from it (`workflow_run action=events`); the mail is never the outcome itself.
pub fn notify(env: &StoriesEnv, run: &Run, story_id: &str, sequence: u64) {
    let Some(c) = run
        .active_coordinator()
        .and_then(|a| a.tuic_session.clone())
    else {
        return;
    };
    let body = json!({"type": "workflow_event", "runId": run.run_id, "storyId": story_id, "sequence": sequence});
    if let Err(e) = env.post_system(&c, "TUIC workflow", body.to_string(), "workflow_event") {
        tracing::warn!(run = %run.run_id, coordinator = %c, error = %e, "workflow_event not delivered");
    }
}
