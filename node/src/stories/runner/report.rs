//! `workflow_report`: a worker's durable attempt report, checked against its step's role
//! and applied to the run (the graph advances only here), then journaled and announced.

use super::*;

/// `workflow_report`'s input (`{input: AttemptReport}`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AttemptReport {
    /// Must be [`CONTRACT_VERSION`].
    pub contract_version: u64,
    /// The run.
    pub run_id: String,
    /// The run's story.
    pub story_id: String,
    /// The pinned story revision.
    pub story_revision: u64,
    /// The reporting attempt.
    pub attempt_id: String,
    /// Its generation.
    pub generation: u64,
    /// `completed`, `failed` or `needs_input`.
    pub outcome: Outcome,
    /// One paragraph.
    pub summary: String,
    /// Per-criterion results.
    #[serde(default)]
    pub criterion_results: Vec<Value>,
    /// Durable evidence (commands run, files, digests).
    #[serde(default)]
    pub evidence: Vec<Value>,
    /// Required with `needs_input`.
    #[serde(default)]
    pub input_request: Option<InputRequest>,
    /// A reviewer's decision (durable evidence; never promotes the story).
    #[serde(default)]
    pub review: Option<ReviewEvidence>,
}

/// A reviewer's evidence: required on a completed report of a reviewer attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReviewEvidence {
    /// `approve` or `changes_requested`.
    pub decision: crate::stories::service::Decision,
    /// The digest of the artifact reviewed (a commit, a tree hash, a file's sha256).
    pub artifact_digest: String,
    /// One finding per criterion checked, indexed into the story's acceptance criteria.
    pub findings: Vec<crate::stories::service::Finding>,
}

/// A report's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The step is done.
    Completed,
    /// The step failed (costs a repair).
    Failed,
    /// The worker needs an answer (`resume_graph`).
    NeedsInput,
}

/// What a `needs_input` report asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputRequest {
    /// The question.
    pub question: String,
    /// The options (required; may be empty for a free-text answer).
    pub options: Vec<String>,
}

/// The evidence rules of the spec, checked before anything is recorded: a completed report
/// of a reviewer attempt carries `review` whose findings index the story's `criteria`
/// acceptance criteria (each at most once); a `review` on any report is held to the same
/// shape.
fn check_evidence(r: &AttemptReport, role: Role, criteria: usize) -> Result<(), StoryError> {
    if r.outcome == Outcome::NeedsInput
        && r.input_request
            .as_ref()
            .is_none_or(|q| q.question.trim().is_empty())
    {
        return Err(StoryError::Invalid(
            "a needs_input report requires inputRequest {question, options} with a question".into(),
        ));
    }
    let Some(rv) = &r.review else {
        if role == Role::Reviewer && r.outcome == Outcome::Completed {
            return Err(StoryError::Invalid(format!(
                "{} is a reviewer attempt: a completed report requires review {{decision, artifactDigest, findings}}",
                r.attempt_id
            )));
        }
        return Ok(());
    };
    if rv.artifact_digest.trim().is_empty() {
        return Err(StoryError::Invalid(
            "review.artifactDigest must name the artifact reviewed".into(),
        ));
    }
    if rv.findings.is_empty() {
        return Err(StoryError::Invalid(
            "review.findings must hold at least one criterion-indexed finding".into(),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for f in &rv.findings {
        if f.criterion >= criteria {
            return Err(StoryError::Invalid(format!(
                "review finding for criterion {}: the story has {criteria} acceptance criteria (indexed from 0)",
                f.criterion
            )));
        }
        if !seen.insert(f.criterion) {
            return Err(StoryError::Invalid(format!(
                "review has two findings for criterion {}",
                f.criterion
            )));
        }
    }
    Ok(())
}

/// Records a worker's report (idempotent per attempt and generation) and advances the graph.
/// `caller` is the reporting identity from the MCP binding. Blocking.
pub fn report(env: &StoriesEnv, caller: Option<&str>, input: &Value) -> Result<Value, StoryError> {
    let r: AttemptReport = serde_json::from_value(input.clone())
        .map_err(|e| StoryError::Invalid(format!("input: {e}")))?;
    let caller = caller.ok_or_else(|| StoryError::Forbidden {
        action: "workflow_report".into(),
        needs: "the attempt's bound worker session",
        has: "an unbound caller",
    })?;
    if r.contract_version != CONTRACT_VERSION {
        return Err(StoryError::Invalid(format!(
            "contractVersion {} is not supported; this node speaks {CONTRACT_VERSION}",
            r.contract_version
        )));
    }
    // The story's criteria index review findings.
    let criteria = env
        .workflows
        .run(&r.run_id)
        .and_then(|run| env.stories.get(&run.project, &r.story_id))
        .map_or(0, |s| s.acceptance_criteria.len());
    let key = format!("{}#{}", r.attempt_id, r.generation);
    let hash = payload_hash(
        &crate::stories::Actor::Agent {
            session: caller.to_owned(),
        },
        &r,
    );
    let now = crate::logs::now_ms();
    let mut replay = None;
    let mut launched = false;
    let run = env.workflows.update(&r.run_id, now, |cur| {
        if let Some((h, seq)) = cur.reports.get(&key) {
            if *h == hash {
                replay = Some(*seq);
                return Ok(None);
            }
            return Err(StoryError::IdempotencyConflict { key: key.clone() });
        }
        if cur.target["id"].as_str() != Some(r.story_id.as_str())
            || cur.story_revision != r.story_revision
        {
            return Err(StoryError::StaleRevision {
                id: format!("{} (story {})", cur.run_id, r.story_id),
                expected: r.story_revision,
                current: cur.story_revision,
            });
        }
        if let Some(l) = cur.launches.get(&r.attempt_id) {
            // A worker the coordinator launched: its report is durable evidence for the
            // coordinator (mailed as a `workflow_event`); the coordinator's own report is
            // what advances the graph.
            if l.generation != r.generation {
                return Err(StoryError::StaleRevision {
                    id: r.attempt_id.clone(),
                    expected: r.generation,
                    current: l.generation,
                });
            }
            if l.tuic_session.as_deref() != Some(caller) {
                return Err(StoryError::Forbidden {
                    action: format!("reporting for {}", r.attempt_id),
                    needs: "the attempt's own worker session",
                    has: "another session",
                });
            }
            if l.timed_out {
                return Err(StoryError::Transition(format!(
                    "{} timed out (no report by its deadline); it takes no more reports",
                    r.attempt_id
                )));
            }
            if cur.status.terminal() || l.reported {
                return Err(StoryError::Transition(format!(
                    "{} takes no more reports ({:?})",
                    r.attempt_id, cur.status
                )));
            }
            check_evidence(&r, l.role, criteria)?;
            let mut n = cur.clone();
            if let Some(l) = n.launches.get_mut(&r.attempt_id) {
                l.reported = true;
            }
            if let Some(d) = cur.timeout_from(now) {
                n.hold_coordinator(d);
            }
            n.reports
                .insert(key.clone(), (hash.clone(), cur.sequence + 1));
            launched = true;
            return Ok(Some(RunChange {
                run: n,
                events: vec![(
                    "report".into(),
                    serde_json::to_value(&r).unwrap_or_default(),
                )],
            }));
        }
        let Some(a) = cur.attempt.as_ref().filter(|a| a.attempt_id == r.attempt_id) else {
            return Err(StoryError::Transition(format!(
                "{} is not the active attempt of {}",
                r.attempt_id, cur.run_id
            )));
        };
        if a.generation != r.generation {
            return Err(StoryError::StaleRevision {
                id: r.attempt_id.clone(),
                expected: r.generation,
                current: a.generation,
            });
        }
        if a.tuic_session.as_deref() != Some(caller) {
            return Err(StoryError::Forbidden {
                action: format!("reporting for {}", r.attempt_id),
                needs: "the attempt's own worker session",
                has: "another session",
            });
        }
        check_evidence(&r, a.role, criteria)?;
        if !matches!(cur.status, RunStatus::Running | RunStatus::Paused) {
            return Err(StoryError::Transition(format!(
                "{} is {:?}; it takes no reports",
                cur.run_id, cur.status
            )));
        }
        let mut ch = RunChange {
            run: cur.clone(),
            events: vec![(
                "report".into(),
                serde_json::to_value(&r).unwrap_or_default(),
            )],
        };
        ch.run
            .reports
            .insert(key.clone(), (hash.clone(), cur.sequence + 1));
        match r.outcome {
            Outcome::Completed => {
                let n = &mut ch.run;
                ch.events.push((
                    "step_completed".into(),
                    json!({"step_id": a.step_id, "attempt_id": a.attempt_id}),
                ));
                n.step_index += 1;
                if n.step_index >= n.step_ids.len() {
                    n.status = RunStatus::Completed;
                    n.attempt = None;
                    ch.events.push(("completed".into(), json!({"steps": n.step_ids.len()})));
                } else {
                    let next = next_attempt(n, None);
                    n.attempts_made += 1;
                    ch.events.push(reserved_event(&next));
                    n.attempt = Some(next);
                }
            }
            Outcome::Failed => {
                let rep = repair(&ch.run, &format!("attempt reported failed: {}", r.summary), true);
                ch.run = rep.run;
                ch.events.extend(rep.events);
            }
            Outcome::NeedsInput => {
                let q = r.input_request.clone().expect("checked");
                ch.run.status = RunStatus::AwaitingInput;
                ch.run.pending_input = Some(PendingInput {
                    activation_id: a.attempt_id.clone(),
                    question: q.question.clone(),
                    options: q.options.clone(),
                });
                ch.events.push((
                    "awaiting_input".into(),
                    json!({"activation_id": a.attempt_id, "question": q.question, "options": q.options}),
                ));
            }
        }
        Ok(Some(ch))
    })?;
    if let Some(seq) = replay {
        return Ok(json!({"ok": true, "run_id": r.run_id, "sequence": seq, "replayed": true}));
    }
    journal(env, &run, &r);
    let seq = run.reports.get(&key).map(|x| x.1).unwrap_or(run.sequence);
    if launched {
        crate::stories::coordinator::notify(env, &run, &r.story_id, seq);
    }
    kick(env, &run.run_id);
    Ok(json!({"ok": true, "run_id": r.run_id, "sequence": seq, "status": run.status}))
}

/// Reports go to the progress journal too (origin `workflow`), best effort.
fn journal(env: &StoriesEnv, run: &Run, r: &AttemptReport) {
    let kind = match r.outcome {
        Outcome::Completed => crate::progress::Kind::Done,
        _ => crate::progress::Kind::Blocked,
    };
    let e = env.journal(crate::progress::NewEntry {
        project: run.project.clone(),
        kind,
        text: r.summary.clone(),
        step: run
            .step_ids
            .get(
                run.step_index
                    .saturating_sub(1)
                    .min(run.step_ids.len().saturating_sub(1)),
            )
            .cloned(),
        origin: crate::progress::Origin::Workflow,
        pty_id: None,
        tuic_session: None,
        agent_name: None,
        agent_type: None,
        run_id: Some(run.run_id.clone()),
    });
    if let Err(e) = e {
        tracing::debug!(run = %run.run_id, error = %e, "workflow report not journaled");
    }
}
