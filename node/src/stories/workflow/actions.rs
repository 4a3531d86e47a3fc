//! The workflow entry points: definition actions (`POST /workflows/definition/action`)
//! and run actions (`workflow_run`, `POST /workflows/run/action`), `start_graph` among them.

use super::*;

/// Definition actions (`POST /workflows/definition/action`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum DefinitionAction {
    /// Publishes a new immutable revision (previous + 1).
    Publish {
        definition_id: String,
        name: String,
        steps: Vec<StepDef>,
        /// The revision the publisher last saw (0 for a new definition).
        #[serde(default)]
        expected_revision: Option<u64>,
    },
    /// Every definition's latest revision.
    List {},
    /// One revision (the latest without `revision`).
    Get {
        definition_id: String,
        #[serde(default)]
        revision: Option<u64>,
    },
}

/// `POST /workflows/definition/action`. Publication is a workflow policy write: Human only.
pub fn definition_action(
    env: &StoriesEnv,
    project: &str,
    actor: &Actor,
    input: &Value,
) -> Result<Value, StoryError> {
    let a: DefinitionAction = serde_json::from_value(input.clone())
        .map_err(|e| StoryError::Invalid(format!("input: {e}")))?;
    let w = &env.workflows;
    match a {
        DefinitionAction::List {} => {
            let g = w.lock();
            let mut v: Vec<&Definition> = g
                .defs
                .iter()
                .filter(|((p, _), _)| p == project)
                .filter_map(|(_, revs)| revs.values().next_back())
                .collect();
            v.sort_by(|a, b| a.definition_id.cmp(&b.definition_id));
            Ok(json!({"definitions": v}))
        }
        DefinitionAction::Get {
            definition_id,
            revision,
        } => {
            let g = w.lock();
            let revs = g.defs.get(&(project.to_owned(), definition_id.clone()));
            let d = match revision {
                Some(r) => revs.and_then(|x| x.get(&r)),
                None => revs.and_then(|x| x.values().next_back()),
            };
            d.map(|d| json!({"definition": d}))
                .ok_or(StoryError::UnknownRecord {
                    kind: "workflow definition revision",
                    id: format!(
                        "{definition_id}@{}",
                        revision.map_or("latest".into(), |r| r.to_string())
                    ),
                })
        }
        DefinitionAction::Publish {
            definition_id,
            name,
            steps,
            expected_revision,
        } => {
            require(actor, Authority::Human, "publishing a workflow definition")?;
            if definition_id.is_empty()
                || definition_id.len() > 64
                || !definition_id
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
            {
                return Err(StoryError::Invalid(
                    "definition_id must be 1-64 characters of a-z, 0-9, - and _".into(),
                ));
            }
            if steps.is_empty() || steps.len() > MAX_STEPS {
                return Err(StoryError::Invalid(format!(
                    "a definition has 1 to {MAX_STEPS} steps"
                )));
            }
            let mut ids = std::collections::HashSet::new();
            for s in &steps {
                if s.id.is_empty() || !ids.insert(s.id.clone()) {
                    return Err(StoryError::Invalid(format!(
                        "step ids must be unique and non-empty ({:?})",
                        s.id
                    )));
                }
                if s.agent.command.trim().is_empty() {
                    return Err(StoryError::Invalid(format!(
                        "step {}: agent.command must not be empty",
                        s.id
                    )));
                }
                if !s.launches.is_empty() && s.role != Role::Coordinator {
                    return Err(StoryError::Invalid(format!(
                        "step {}: only a coordinator step declares launches",
                        s.id
                    )));
                }
                for (t, l) in &s.launches {
                    if t.is_empty() || t.len() > 64 || l.agent.command.trim().is_empty() {
                        return Err(StoryError::Invalid(format!(
                            "step {}: launch {t:?} needs a name of 1-64 characters and an agent.command",
                            s.id
                        )));
                    }
                    if l.role == Role::Coordinator {
                        return Err(StoryError::Invalid(format!(
                            "step {}: launch {t:?} is a worker or a reviewer, not a coordinator",
                            s.id
                        )));
                    }
                }
            }
            let mut g = w.lock();
            let key = (project.to_owned(), definition_id.clone());
            let latest = g
                .defs
                .get(&key)
                .and_then(|r| r.keys().next_back().copied())
                .unwrap_or(0);
            if let Some(e) = expected_revision
                && e != latest
            {
                return Err(StoryError::StaleRevision {
                    id: definition_id,
                    expected: e,
                    current: latest,
                });
            }
            let d = Definition {
                definition_id: definition_id.clone(),
                project: project.to_owned(),
                revision: latest + 1,
                name,
                steps,
                published_by: actor.clone(),
                published_at_ms: crate::logs::now_ms(),
            };
            let tx = w.store.database().begin_write().map_err(store_err)?;
            tx.open_table(db::DEFINITIONS)
                .map_err(store_err)?
                .insert(
                    (project, definition_id.as_str(), d.revision),
                    db::to_bytes(&d)?.as_slice(),
                )
                .map_err(store_err)?;
            tx.commit().map_err(store_err)?;
            g.defs.entry(key).or_default().insert(d.revision, d.clone());
            Ok(json!({"definition": d}))
        }
    }
}

/// The run actions (`workflow_run` tool, `POST /workflows/run/action`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum RunAction {
    /// Starts a run of a story with a pinned definition revision.
    StartGraph {
        target: Value,
        #[serde(default)]
        expected_revision: Option<u64>,
        definition_id: String,
        definition_revision: u64,
        request_id: String,
        #[serde(default)]
        limits: Option<Limits>,
    },
    /// One run snapshot.
    Get { run_id: String },
    /// The project's runs, newest first.
    List {
        #[serde(default)]
        limit: Option<usize>,
    },
    /// A gapless page of a run's events after `cursor`.
    Events {
        run_id: String,
        #[serde(default)]
        cursor: Option<Value>,
        #[serde(default)]
        limit: Option<usize>,
    },
    /// Stops launching new attempts (fenced).
    Pause {
        run_id: String,
        expected_sequence: u64,
    },
    /// Continues a paused run at its graph position (fenced).
    Resume {
        run_id: String,
        expected_sequence: u64,
    },
    /// Cancels the run (fenced).
    Cancel {
        run_id: String,
        expected_sequence: u64,
    },
    /// Answers pending input of an explicit activation and continues the graph.
    ResumeGraph {
        execution_id: String,
        activation_id: String,
        resolution: String,
    },
}

/// Action names of [`RunAction`].
pub const RUN_ACTIONS: &[&str] = &[
    "start_graph",
    "get",
    "list",
    "events",
    "pause",
    "resume",
    "cancel",
    "resume_graph",
];

fn fence(run: &Run, expected: u64) -> Result<(), StoryError> {
    if run.sequence != expected {
        return Err(StoryError::StaleRevision {
            id: run.run_id.clone(),
            expected,
            current: run.sequence,
        });
    }
    Ok(())
}

fn own_run(env: &StoriesEnv, project: &str, run_id: &str) -> Result<Run, StoryError> {
    env.workflows
        .run(run_id)
        .filter(|r| r.project == project)
        .ok_or(StoryError::UnknownRecord {
            kind: "run",
            id: run_id.to_owned(),
        })
}

/// Runs one [`RunAction`]. Authority: starting, pausing, resuming and cancelling need the
/// local API or a human (not an agent); answering pending input (`resume_graph`) is a human
/// decision. Blocking.
pub fn run_action(
    env: &StoriesEnv,
    project: &str,
    actor: &Actor,
    input: &Value,
) -> Result<Value, StoryError> {
    let a: RunAction = serde_json::from_value(input.clone())
        .map_err(|e| StoryError::Invalid(format!("input: {e}")))?;
    let now = crate::logs::now_ms();
    let w = &env.workflows;
    let out = match a {
        RunAction::StartGraph { .. } => return start_graph(env, project, actor, &a, now),
        RunAction::Get { run_id } => json!({"run": own_run(env, project, &run_id)?}),
        RunAction::List { limit } => {
            let g = w.lock();
            let runs: Vec<&Run> = g
                .runs
                .values()
                .rev()
                .filter(|r| r.project == project)
                .take(limit.unwrap_or(50).clamp(1, 500))
                .collect();
            json!({"runs": runs})
        }
        RunAction::Events {
            run_id,
            cursor,
            limit,
        } => {
            own_run(env, project, &run_id)?;
            let (events, next) = w.events(
                &run_id,
                parse_cursor(cursor.as_ref())?.unwrap_or(0),
                limit.unwrap_or(100).clamp(1, 500),
            )?;
            json!({"events": events, "next_cursor": next})
        }
        RunAction::Pause {
            run_id,
            expected_sequence,
        } => {
            require(actor, Authority::LocalApi, "pausing a run")?;
            own_run(env, project, &run_id)?;
            let r = w.update(&run_id, now, |r| {
                fence(r, expected_sequence)?;
                if r.status != RunStatus::Running {
                    return Err(StoryError::Transition(format!(
                        "{run_id} is {:?}, not running",
                        r.status
                    )));
                }
                let mut n = r.clone();
                n.status = RunStatus::Paused;
                Ok(Some(RunChange {
                    run: n,
                    events: vec![(
                        "paused".into(),
                        json!({"by": actor, "pause_target": {"step_index": r.step_index, "attempt": r.attempt.as_ref().map(|a| &a.attempt_id)}}),
                    )],
                }))
            })?;
            json!({"run": r})
        }
        RunAction::Resume {
            run_id,
            expected_sequence,
        } => {
            require(actor, Authority::LocalApi, "resuming a run")?;
            own_run(env, project, &run_id)?;
            let r = w.update(&run_id, now, |r| {
                fence(r, expected_sequence)?;
                if r.status != RunStatus::Paused {
                    return Err(StoryError::Transition(format!(
                        "{run_id} is {:?}; only a paused run resumes (pending input needs resume_graph)",
                        r.status
                    )));
                }
                let mut n = r.clone();
                n.status = RunStatus::Running;
                Ok(Some(RunChange {
                    run: n,
                    events: vec![("resumed".into(), json!({"by": actor}))],
                }))
            })?;
            crate::stories::runner::kick(env, &run_id);
            json!({"run": r})
        }
        RunAction::Cancel {
            run_id,
            expected_sequence,
        } => {
            require(actor, Authority::LocalApi, "cancelling a run")?;
            own_run(env, project, &run_id)?;
            let r = w.update(&run_id, now, |r| {
                fence(r, expected_sequence)?;
                if r.status.terminal() {
                    return Err(StoryError::Transition(format!(
                        "{run_id} already ended ({:?})",
                        r.status
                    )));
                }
                let mut n = r.clone();
                n.status = RunStatus::Cancelled;
                Ok(Some(RunChange {
                    run: n,
                    events: vec![("cancelled".into(), json!({"by": actor}))],
                }))
            })?;
            crate::stories::runner::stop_worker(env, &r);
            json!({"run": r})
        }
        RunAction::ResumeGraph {
            execution_id,
            activation_id,
            resolution,
        } => {
            require(actor, Authority::Human, "answering a run's pending input")?;
            own_run(env, project, &execution_id)?;
            let r = w.update(&execution_id, now, |r| {
                let Some(p) = &r.pending_input else {
                    return Err(StoryError::Transition(format!(
                        "{execution_id} has no pending input"
                    )));
                };
                if p.activation_id != activation_id {
                    return Err(StoryError::Transition(format!(
                        "{execution_id} awaits input on activation {}, not {activation_id}",
                        p.activation_id
                    )));
                }
                let mut n = r.clone();
                n.pending_input = None;
                n.status = RunStatus::Running;
                let feedback = resolution.clone();
                // The same activation continues with a new generation carrying the answer.
                let next = crate::stories::runner::next_attempt(&n, Some(feedback));
                n.attempts_made += 1;
                let reserved = crate::stories::runner::reserved_event(&next);
                n.attempt = Some(next);
                Ok(Some(RunChange {
                    run: n,
                    events: vec![
                        (
                            "input_resolved".into(),
                            json!({"activation_id": activation_id, "resolution": resolution, "by": actor}),
                        ),
                        reserved,
                    ],
                }))
            })?;
            crate::stories::runner::kick(env, &execution_id);
            json!({"run": r})
        }
    };
    Ok(out)
}

fn start_graph(
    env: &StoriesEnv,
    project: &str,
    actor: &Actor,
    a: &RunAction,
    now: u64,
) -> Result<Value, StoryError> {
    let RunAction::StartGraph {
        target,
        expected_revision,
        definition_id,
        definition_revision,
        request_id,
        limits,
    } = a
    else {
        unreachable!("start_graph only")
    };
    require(actor, Authority::LocalApi, "starting a run")?;
    let scope = format!("workflow:{project}");
    let hash = payload_hash(actor, a);
    let w = &env.workflows;
    let mut g = w.lock();
    {
        let tx = w.store.database().begin_write().map_err(store_err)?;
        if let Some(e) = db::idem_get(&tx, &scope, request_id)? {
            return if e.hash == hash {
                Ok(e.result)
            } else {
                Err(StoryError::IdempotencyConflict {
                    key: request_id.clone(),
                })
            };
        }
    }
    let kind = target.get("type").and_then(Value::as_str).unwrap_or("");
    let id = target.get("id").and_then(Value::as_str).unwrap_or("");
    match kind {
        "story" => {}
        "plan" => {
            return Err(StoryError::Unavailable(
                "plan dispatch is unavailable in this build: start a story target".into(),
            ));
        }
        _ => {
            return Err(StoryError::Invalid(
                "target must be {type: story|plan, id}".into(),
            ));
        }
    }
    let story = env
        .stories
        .get(project, id)
        .ok_or_else(|| StoryError::NotFound(id.to_owned()))?;
    if let Some(e) = expected_revision
        && *e != story.revision
    {
        return Err(StoryError::StaleRevision {
            id: id.to_owned(),
            expected: *e,
            current: story.revision,
        });
    }
    if story.status != Status::Ready {
        return Err(StoryError::Transition(format!(
            "{id} is {}; a run starts from an approved (ready) story",
            story.status.as_str()
        )));
    }
    let Some(def) = g
        .defs
        .get(&(project.to_owned(), definition_id.clone()))
        .and_then(|r| r.get(definition_revision))
    else {
        return Err(StoryError::UnknownRecord {
            kind: "workflow definition revision",
            id: format!("{definition_id}@{definition_revision}"),
        });
    };
    let step_ids: Vec<String> = def.steps.iter().map(|s| s.id.clone()).collect();
    let step_roles: Vec<Role> = def.steps.iter().map(|s| s.role).collect();
    let n = g.next_run + 1;
    let mut run = Run {
        run_id: format!("run-{n}"),
        project: project.to_owned(),
        target: json!({"type": "story", "id": id}),
        story_revision: story.revision,
        definition_id: definition_id.clone(),
        definition_revision: *definition_revision,
        limits: limits.unwrap_or_default(),
        status: RunStatus::Running,
        step_ids,
        step_roles,
        step_index: 0,
        attempt: None,
        attempts_made: 0,
        repairs: 0,
        recoveries: 0,
        pending_input: None,
        sequence: 0,
        started_by: actor.clone(),
        created_at_ms: now,
        updated_at_ms: now,
        reports: BTreeMap::new(),
        launches: BTreeMap::new(),
        proposals: BTreeMap::new(),
    };
    let first = crate::stories::runner::next_attempt(&run, None);
    run.attempts_made = 1;
    let reserved = crate::stories::runner::reserved_event(&first);
    run.attempt = Some(first);
    let ch = RunChange {
        events: vec![
            (
                "started".into(),
                json!({"target": run.target, "story_revision": run.story_revision,
                       "definition_id": definition_id, "definition_revision": definition_revision,
                       "limits": run.limits, "by": actor}),
            ),
            reserved,
        ],
        run,
    };
    let run = w.commit(&mut g, ch, now, Some((&scope, request_id, &hash)))?;
    drop(g);
    w.notify_run(&run);
    crate::stories::runner::kick(env, &run.run_id);
    Ok(json!({"run": run}))
}
