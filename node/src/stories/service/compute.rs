//! One mutation computed against an immutable view of the project: validation, the
//! dependency graph, and the [`Change`] every action writes.

use super::*;

pub(super) fn check_text(
    field: &str,
    s: &str,
    max: usize,
    required: bool,
) -> Result<(), StoryError> {
    let n = s.chars().count();
    if required && s.trim().is_empty() {
        return Err(StoryError::Invalid(format!("{field} must not be empty")));
    }
    if n > max {
        return Err(StoryError::Invalid(format!(
            "{field} is {n} characters; at most {max}"
        )));
    }
    Ok(())
}

pub(super) fn check_criteria(c: &[String]) -> Result<(), StoryError> {
    if c.len() > MAX_CRITERIA {
        return Err(StoryError::Invalid(format!(
            "{} acceptance criteria; at most {MAX_CRITERIA}",
            c.len()
        )));
    }
    for x in c {
        check_text("an acceptance criterion", x, 1_000, true)?;
    }
    Ok(())
}

pub(super) fn current<'a>(
    p: &'a ProjectState,
    id: &str,
    expected: u64,
) -> Result<&'a Story, StoryError> {
    let s = story_number(id)
        .and_then(|n| p.stories.get(&n))
        .ok_or_else(|| StoryError::NotFound(id.to_owned()))?;
    if s.revision != expected {
        return Err(StoryError::StaleRevision {
            id: id.to_owned(),
            expected,
            current: s.revision,
        });
    }
    Ok(s)
}

/// The path `from → … → to` through dependencies, if there is one.
pub(super) fn dependency_path(p: &ProjectState, from: &str, to: &str) -> Option<Vec<String>> {
    let mut stack = vec![(from.to_owned(), vec![from.to_owned()])];
    let mut seen = HashSet::new();
    while let Some((id, path)) = stack.pop() {
        if id == to {
            return Some(path);
        }
        if !seen.insert(id.clone()) {
            continue;
        }
        if let Some(s) = story_number(&id).and_then(|n| p.stories.get(&n)) {
            for d in &s.dependencies {
                let mut np = path.clone();
                np.push(d.clone());
                stack.push((d.clone(), np));
            }
        }
    }
    None
}

/// Checks independence of an approver.
pub(super) fn independent(s: &Story, actor: &Actor) -> Result<(), StoryError> {
    let who = actor.identity();
    if s.created_by.identity() == who {
        return Err(StoryError::NotIndependent {
            id: s.id.clone(),
            who,
            role: "created",
        });
    }
    if s.claimed_by.is_some() && s.claimed_by.as_deref() == actor.session() {
        return Err(StoryError::NotIndependent {
            id: s.id.clone(),
            who,
            role: "claimed",
        });
    }
    Ok(())
}

/// Whether `from → to` is an ordinary transition (any authority) rather than an
/// administrative one (Human only). Approval-gated moves (→ ready, review → done) go through
/// `review`/`approve`, never through `transition`.
pub(super) fn ordinary(from: Status, to: Status) -> bool {
    use Status::*;
    matches!(
        (from, to),
        (Ready, InProgress)
            | (Ready, Backlog)
            | (InProgress, Review)
            | (InProgress, Ready)
            | (Review, InProgress)
    )
}

pub(super) fn compute(
    ctx: &Ctx,
    g: &Inner,
    p: &ProjectState,
    action: &StoryAction,
    origin: Option<StoryOrigin>,
) -> Result<Change, StoryError> {
    let mut ch = Change::default();
    let bump = |s: &Story| {
        let mut n = s.clone();
        n.revision += 1;
        n.updated_at_ms = ctx.now_ms;
        n
    };
    match action {
        StoryAction::Create {
            title,
            description,
            acceptance_criteria,
            dependencies,
            plan_source,
            ..
        } => {
            check_text("title", title, MAX_TITLE, true)?;
            check_text(
                "description",
                description.as_deref().unwrap_or(""),
                MAX_DESCRIPTION,
                false,
            )?;
            let criteria = acceptance_criteria.clone().unwrap_or_default();
            check_criteria(&criteria)?;
            let deps = dependencies.clone().unwrap_or_default();
            for d in &deps {
                if story_number(d).and_then(|n| p.stories.get(&n)).is_none() {
                    return Err(StoryError::NotFound(d.clone()));
                }
            }
            if let Some(ps) = plan_source
                && !p.sources.contains_key(ps)
            {
                return Err(StoryError::UnknownRecord {
                    kind: "plan source",
                    id: ps.clone(),
                });
            }
            let n = g.next_story + 1;
            let s = Story {
                id: format!("st-{n}"),
                project: ctx.project.clone(),
                revision: 1,
                title: title.trim().to_owned(),
                description: description.clone().unwrap_or_default(),
                acceptance_criteria: criteria,
                status: Status::Backlog,
                dependencies: dedup(deps),
                plan_source: plan_source.clone(),
                origin: origin.unwrap_or(StoryOrigin {
                    kind: "manual".into(),
                    run_id: None,
                    proposal_key: None,
                }),
                created_by: ctx.actor.clone(),
                claimed_by: None,
                reviews: Vec::new(),
                approved_by: None,
                created_at_ms: ctx.now_ms,
                updated_at_ms: ctx.now_ms,
            };
            ch.next_story = Some(n);
            ch.events.push((
                "created".into(),
                Some(s.id.clone()),
                Some(1),
                json!({"title": s.title}),
            ));
            ch.result = json!({"story": s});
            ch.stories.push(s);
        }
        StoryAction::Update {
            id,
            expected_revision,
            title,
            description,
            acceptance_criteria,
            ..
        } => {
            let s = current(p, id, *expected_revision)?;
            if s.status.abandoned() || s.status == Status::Done {
                require(&ctx.actor, Authority::Human, "updating a closed story")?;
            }
            let mut n = bump(s);
            if let Some(t) = title {
                check_text("title", t, MAX_TITLE, true)?;
                n.title = t.trim().to_owned();
            }
            if let Some(d) = description {
                check_text("description", d, MAX_DESCRIPTION, false)?;
                n.description = d.clone();
            }
            if let Some(c) = acceptance_criteria {
                check_criteria(c)?;
                n.acceptance_criteria = c.clone();
            }
            // A content change invalidates the standing approval: what was approved changed.
            if n.approved_by.take().is_some() && n.status == Status::Ready {
                n.status = Status::Backlog;
            }
            ch.events.push((
                "updated".into(),
                Some(n.id.clone()),
                Some(n.revision),
                json!({"title": title, "description_changed": description.is_some(), "criteria_changed": acceptance_criteria.is_some()}),
            ));
            ch.result = json!({"story": n});
            ch.stories.push(n);
        }
        StoryAction::Transition {
            id,
            expected_revision,
            to,
            reason,
            ..
        } => {
            let s = current(p, id, *expected_revision)?;
            let from = s.status;
            if from == *to {
                return Err(StoryError::Transition(format!(
                    "{id} is already {}",
                    to.as_str()
                )));
            }
            if matches!(to, Status::Ready | Status::Done) && !matches!(ctx.actor, Actor::Human) {
                return Err(StoryError::Transition(format!(
                    "{} → {} needs an independent approval: use review with decision approve (or approve)",
                    from.as_str(),
                    to.as_str()
                )));
            }
            if !ordinary(from, *to) {
                require(
                    &ctx.actor,
                    Authority::Human,
                    &format!(
                        "the administrative transition {} → {}",
                        from.as_str(),
                        to.as_str()
                    ),
                )?;
            }
            let mut n = bump(s);
            n.status = *to;
            if *to == Status::InProgress && from == Status::Ready {
                let open: Vec<&String> = s
                    .dependencies
                    .iter()
                    .filter(|d| {
                        story_number(d)
                            .and_then(|x| p.stories.get(&x))
                            .is_none_or(|x| x.status != Status::Done)
                    })
                    .collect();
                if !open.is_empty() && !matches!(ctx.actor, Actor::Human) {
                    return Err(StoryError::Transition(format!(
                        "{id} cannot start: prerequisites not done: {}",
                        open.iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                n.claimed_by = ctx.actor.session().map(str::to_owned);
            }
            if matches!(to, Status::Backlog | Status::Ready) {
                n.claimed_by = None;
            }
            ch.events.push((
                "transitioned".into(),
                Some(n.id.clone()),
                Some(n.revision),
                json!({"from": from, "to": to, "reason": reason}),
            ));
            ch.result = json!({"story": n});
            ch.stories.push(n);
        }
        StoryAction::AddDependency {
            id,
            expected_revision,
            depends_on,
            ..
        } => {
            let s = current(p, id, *expected_revision)?;
            if story_number(depends_on)
                .and_then(|n| p.stories.get(&n))
                .is_none()
            {
                return Err(StoryError::NotFound(depends_on.clone()));
            }
            if s.dependencies.contains(depends_on) {
                return Err(StoryError::Invalid(format!(
                    "{id} already depends on {depends_on}"
                )));
            }
            // id → depends_on closes a cycle when depends_on already reaches id.
            if let Some(mut path) = dependency_path(p, depends_on, id) {
                path.insert(0, id.clone());
                return Err(StoryError::Cycle { path });
            }
            let mut n = bump(s);
            n.dependencies.push(depends_on.clone());
            ch.events.push((
                "dependency_added".into(),
                Some(n.id.clone()),
                Some(n.revision),
                json!({"depends_on": depends_on}),
            ));
            ch.result = json!({"story": n});
            ch.stories.push(n);
        }
        StoryAction::RemoveDependency {
            id,
            expected_revision,
            depends_on,
            ..
        } => {
            if matches!(ctx.actor, Actor::Agent { .. }) {
                return Err(StoryError::Forbidden {
                    action: "remove_dependency".into(),
                    needs: "human (not a bound agent session)",
                    has: "agent",
                });
            }
            let s = current(p, id, *expected_revision)?;
            if !s.dependencies.contains(depends_on) {
                return Err(StoryError::Invalid(format!(
                    "{id} does not depend on {depends_on}"
                )));
            }
            let mut n = bump(s);
            n.dependencies.retain(|d| d != depends_on);
            ch.events.push((
                "dependency_removed".into(),
                Some(n.id.clone()),
                Some(n.revision),
                json!({"depends_on": depends_on}),
            ));
            ch.result = json!({"story": n});
            ch.stories.push(n);
        }
        StoryAction::Review {
            id,
            expected_revision,
            decision,
            findings,
            note,
            ..
        } => review(
            ctx,
            p,
            &mut ch,
            id,
            *expected_revision,
            *decision,
            findings,
            note,
        )?,
        StoryAction::Approve {
            id,
            expected_revision,
            findings,
            note,
            ..
        } => review(
            ctx,
            p,
            &mut ch,
            id,
            *expected_revision,
            Decision::Approve,
            findings,
            note,
        )?,
        StoryAction::AddPlanSource { path, .. } => {
            let doc = plan::resolve(std::path::Path::new(&ctx.project), path)?;
            if let Some(existing) = p.sources.values().find(|s| s.path == doc.path) {
                ch.result = json!({"source": existing, "reused": true});
            } else {
                let n = g.next_source + 1;
                let src = PlanSource {
                    id: format!("ps-{n}"),
                    path: doc.path,
                    title: doc.title,
                    added_by: ctx.actor.clone(),
                    added_at_ms: ctx.now_ms,
                };
                ch.next_source = Some(n);
                ch.events.push((
                    "plan_source_added".into(),
                    None,
                    None,
                    json!({"source_id": src.id, "path": src.path}),
                ));
                ch.result = json!({"source": src, "reused": false});
                ch.sources_put.push(src);
            }
        }
        StoryAction::RemovePlanSource { id, .. } => {
            if !p.sources.contains_key(id) {
                return Err(StoryError::UnknownRecord {
                    kind: "plan source",
                    id: id.clone(),
                });
            }
            ch.sources_del.push(id.clone());
            ch.events.push((
                "plan_source_removed".into(),
                None,
                None,
                json!({"source_id": id}),
            ));
            ch.result = json!({"ok": true, "removed": id});
        }
        StoryAction::List { .. }
        | StoryAction::Get { .. }
        | StoryAction::ListPlanSources {}
        | StoryAction::PlanView { .. }
        | StoryAction::Events { .. } => {
            return Err(StoryError::Invalid("not a mutation".into()));
        }
    }
    Ok(ch)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn review(
    ctx: &Ctx,
    p: &ProjectState,
    ch: &mut Change,
    id: &str,
    expected: u64,
    decision: Decision,
    findings: &Option<Vec<Finding>>,
    note: &Option<String>,
) -> Result<(), StoryError> {
    let s = current(p, id, expected)?;
    if s.status.abandoned() || s.status == Status::Done {
        return Err(StoryError::Transition(format!(
            "{id} is {}: nothing to review",
            s.status.as_str()
        )));
    }
    independent(s, &ctx.actor)?;
    let findings = findings.clone().unwrap_or_default();
    for f in &findings {
        if f.criterion >= s.acceptance_criteria.len() {
            return Err(StoryError::Invalid(format!(
                "finding for criterion {} but {id} has {} acceptance criteria",
                f.criterion,
                s.acceptance_criteria.len()
            )));
        }
    }
    if decision == Decision::Approve && findings.iter().any(|f| !f.ok) {
        return Err(StoryError::Invalid(
            "an approving review cannot carry a failed finding; use decision changes_requested"
                .into(),
        ));
    }
    let mut n = s.clone();
    n.revision += 1;
    n.updated_at_ms = ctx.now_ms;
    n.reviews.push(Review {
        by: ctx.actor.clone(),
        decision,
        revision: s.revision,
        findings,
        note: note.clone(),
        at_ms: ctx.now_ms,
    });
    let from = s.status;
    match (decision, from) {
        (Decision::Approve, Status::Backlog) => n.status = Status::Ready,
        (Decision::Approve, Status::Review) => n.status = Status::Done,
        (Decision::ChangesRequested, Status::Review) => n.status = Status::InProgress,
        _ => {}
    }
    if decision == Decision::Approve {
        n.approved_by = Some(ctx.actor.clone());
    }
    ch.events.push((
        "reviewed".into(),
        Some(n.id.clone()),
        Some(n.revision),
        json!({"decision": decision, "reviewed_revision": s.revision, "from": from, "to": n.status}),
    ));
    ch.result = json!({"story": n});
    ch.stories.push(n);
    Ok(())
}

pub(super) fn dedup(v: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    v.into_iter().filter(|x| seen.insert(x.clone())).collect()
}
