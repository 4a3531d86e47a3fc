use super::*;

struct T {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    svc: Stories,
    project: String,
}

fn open_at(dir: tempfile::TempDir) -> T {
    let path = dir.path().join("state.redb");
    let store = Arc::new(Store::open(&path).unwrap());
    let project = dir.path().to_string_lossy().into_owned();
    T {
        svc: Stories::open(store).unwrap(),
        _dir: dir,
        path,
        project,
    }
}

fn t() -> T {
    open_at(tempfile::tempdir().unwrap())
}

fn agent(s: &str) -> Actor {
    Actor::Agent { session: s.into() }
}

impl T {
    fn run(&self, actor: &Actor, v: Value) -> Result<Value, StoryError> {
        self.svc.execute(
            &Ctx {
                project: self.project.clone(),
                actor: actor.clone(),
                now_ms: 1,
            },
            StoryAction::from_value(&v)?,
        )
    }
    fn ok(&self, actor: &Actor, v: Value) -> Value {
        self.run(actor, v.clone())
            .unwrap_or_else(|e| panic!("{v}: {e}"))
    }
    fn create(&self, actor: &Actor, title: &str) -> Story {
        serde_json::from_value(
            self.ok(
                actor,
                json!({"action": "create", "title": title, "acceptance_criteria": ["works"]}),
            )["story"]
                .clone(),
        )
        .unwrap()
    }
    fn story(&self, id: &str) -> Story {
        self.svc.get(&self.project, id).unwrap()
    }
    fn event_count(&self) -> usize {
        self.svc
            .events(&self.project, None, MAX_LIMIT)
            .unwrap()
            .0
            .len()
    }
}

#[test]
fn create_review_approve_claim_and_finish() {
    let t = t();
    let (a, b) = (agent("A"), agent("B"));
    let s = t.create(&a, "first");
    assert_eq!(
        (s.id.as_str(), s.revision, s.status),
        ("st-1", 1, Status::Backlog)
    );
    // The author cannot approve its own story.
    let e = t
        .run(
            &a,
            json!({"action": "approve", "id": "st-1", "expected_revision": 1}),
        )
        .unwrap_err();
    assert_eq!(e.code(), "not_independent", "{e}");
    assert_eq!(t.story("st-1").revision, 1, "nothing changed");
    // An independent reviewer approves: backlog → ready.
    let v = t.ok(
        &b,
        json!({"action": "review", "id": "st-1", "expected_revision": 1, "decision": "approve",
               "findings": [{"criterion": 0, "ok": true}]}),
    );
    assert_eq!(v["story"]["status"], "ready");
    assert_eq!(v["story"]["revision"], 2);
    // A claims it, moves it to review; A (the claimer) cannot approve; B can: done.
    t.ok(
        &a,
        json!({"action": "transition", "id": "st-1", "expected_revision": 2, "to": "in_progress"}),
    );
    assert_eq!(t.story("st-1").claimed_by.as_deref(), Some("A"));
    t.ok(
        &a,
        json!({"action": "transition", "id": "st-1", "expected_revision": 3, "to": "review"}),
    );
    let e = t
        .run(
            &a,
            json!({"action": "approve", "id": "st-1", "expected_revision": 4}),
        )
        .unwrap_err();
    assert_eq!(e.code(), "not_independent");
    let v = t.ok(
        &b,
        json!({"action": "approve", "id": "st-1", "expected_revision": 4}),
    );
    assert_eq!(v["story"]["status"], "done");
    // Direct transitions to ready/done are not a way around approval.
    let s2 = t.create(&a, "second");
    let e = t
        .run(
            &b,
            json!({"action": "transition", "id": s2.id, "expected_revision": 1, "to": "ready"}),
        )
        .unwrap_err();
    assert_eq!(e.code(), "invalid_transition");
}

#[test]
fn stale_revision_is_refused_and_changes_nothing() {
    let t = t();
    let a = agent("A");
    t.create(&a, "x");
    t.ok(
        &a,
        json!({"action": "update", "id": "st-1", "expected_revision": 1, "title": "y"}),
    );
    let before = t.event_count();
    let e = t
        .run(
            &a,
            json!({"action": "update", "id": "st-1", "expected_revision": 1, "title": "z"}),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            StoryError::StaleRevision {
                expected: 1,
                current: 2,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(t.story("st-1").title, "y");
    assert_eq!(t.event_count(), before);
}

#[test]
fn dependency_cycles_are_refused() {
    let t = t();
    let a = agent("A");
    for n in ["a", "b", "c"] {
        t.create(&a, n);
    }
    t.ok(&a, json!({"action": "add_dependency", "id": "st-2", "expected_revision": 1, "depends_on": "st-1"}));
    t.ok(&a, json!({"action": "add_dependency", "id": "st-3", "expected_revision": 1, "depends_on": "st-2"}));
    let e = t
        .run(&a, json!({"action": "add_dependency", "id": "st-1", "expected_revision": 1, "depends_on": "st-3"}))
        .unwrap_err();
    match &e {
        StoryError::Cycle { path } => assert_eq!(path, &["st-1", "st-3", "st-2", "st-1"]),
        _ => panic!("{e}"),
    }
    let e = t
        .run(&a, json!({"action": "add_dependency", "id": "st-1", "expected_revision": 1, "depends_on": "st-1"}))
        .unwrap_err();
    assert_eq!(e.code(), "dependency_cycle");
    assert!(t.story("st-1").dependencies.is_empty());
    assert_eq!(t.story("st-1").revision, 1);
}

#[test]
fn idempotency_keys_bind_the_payload() {
    let t = t();
    let a = agent("A");
    let req = json!({"action": "create", "title": "once", "request_id": "r1"});
    let first = t.ok(&a, req.clone());
    let again = t.ok(&a, req);
    assert_eq!(first, again);
    let e = t
        .run(
            &a,
            json!({"action": "create", "title": "other", "request_id": "r1"}),
        )
        .unwrap_err();
    assert_eq!(e.code(), "idempotency_conflict");
    // Another actor with the same key and body is another payload too.
    let e = t
        .run(
            &agent("B"),
            json!({"action": "create", "title": "once", "request_id": "r1"}),
        )
        .unwrap_err();
    assert_eq!(e.code(), "idempotency_conflict");
    let listed = t.ok(&a, json!({"action": "list"}));
    assert_eq!(listed["total"], 1);
}

#[test]
fn operator_authority_per_rule() {
    let t = t();
    let (a, b) = (agent("A"), agent("B"));
    t.create(&a, "p");
    t.create(&a, "q");
    t.ok(&a, json!({"action": "add_dependency", "id": "st-2", "expected_revision": 1, "depends_on": "st-1"}));
    // Agents cannot remove a dependency; the local API and a human can.
    let e = t
        .run(&b, json!({"action": "remove_dependency", "id": "st-2", "expected_revision": 2, "depends_on": "st-1"}))
        .unwrap_err();
    assert_eq!(e.code(), "forbidden");
    t.ok(&Actor::LocalApi, json!({"action": "remove_dependency", "id": "st-2", "expected_revision": 2, "depends_on": "st-1"}));
    // Administrative transitions (→ wont_fix / cancelled, reopening) need Human.
    for actor in [&a, &Actor::LocalApi] {
        let e = t
            .run(actor, json!({"action": "transition", "id": "st-1", "expected_revision": 1, "to": "wont_fix"}))
            .unwrap_err();
        assert_eq!(e.code(), "forbidden", "{e}");
    }
    t.ok(
        &Actor::Human,
        json!({"action": "transition", "id": "st-1", "expected_revision": 1, "to": "wont_fix"}),
    );
    // local_api provenance approves like any independent identity.
    let v = t.ok(
        &Actor::LocalApi,
        json!({"action": "approve", "id": "st-2", "expected_revision": 3}),
    );
    assert_eq!(v["story"]["approved_by"]["kind"], "local_api");
    // Plan view derives abandonment.
    t.ok(&a, json!({"action": "add_dependency", "id": "st-2", "expected_revision": 4, "depends_on": "st-1"}));
    let pv = t.ok(&a, json!({"action": "plan_view"}));
    assert_eq!(pv["abandoned"][0]["id"], "st-1");
    assert_eq!(pv["blocked_by_abandoned"][0]["id"], "st-2");
}

#[test]
fn event_pages_are_gapless_and_survive_reopen() {
    let t = t();
    let a = agent("A");
    for i in 0..23 {
        t.create(&a, &format!("s{i}"));
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    for _ in 0..10 {
        let (evs, next) = t.svc.events(&t.project, cursor, 5).unwrap();
        seen.extend(evs.iter().map(|e| e.seq));
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, (1..=23).collect::<Vec<_>>());
    // List pages cover every story once.
    let mut ids = Vec::new();
    let mut c = Value::Null;
    for _ in 0..10 {
        let v = t.ok(&a, json!({"action": "list", "limit": 7, "cursor": c}));
        ids.extend(
            v["stories"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_owned()),
        );
        c = v["next_cursor"].clone();
        if c.is_null() {
            break;
        }
    }
    assert_eq!(ids.len(), 23);
    // Reopen: the mirror is rebuilt and numbering continues.
    let T {
        _dir,
        path,
        svc,
        project,
    } = t;
    drop(svc);
    let store = Arc::new(Store::open(&path).unwrap());
    let svc = Stories::open(store).unwrap();
    let t = T {
        _dir,
        path,
        svc,
        project,
    };
    assert_eq!(t.create(&a, "after").id, "st-24");
    assert_eq!(t.event_count(), 24);
}

#[test]
fn plan_sources_are_discovered_and_reused() {
    let t = t();
    let a = agent("A");
    let plans = std::path::Path::new(&t.project).join("plans");
    std::fs::create_dir_all(&plans).unwrap();
    std::fs::write(plans.join("p1.md"), "intro\n# The Plan\nbody").unwrap();
    std::fs::create_dir_all(std::path::Path::new(&t.project).join(".claude/plans")).unwrap();
    std::fs::write(
        std::path::Path::new(&t.project).join(".claude/plans/q.md"),
        "no heading",
    )
    .unwrap();
    let v = t.ok(&a, json!({"action": "list_plan_sources"}));
    let d = v["discovered"].as_array().unwrap();
    assert_eq!(d.len(), 2);
    assert_eq!(d[0]["path"], ".claude/plans/q.md");
    assert_eq!(d[0]["title"], "q");
    assert_eq!(d[1]["title"], "The Plan");
    let first = t.ok(
        &a,
        json!({"action": "add_plan_source", "path": "plans/p1.md"}),
    );
    let again = t.ok(
        &a,
        json!({"action": "add_plan_source", "path": "plans/p1.md"}),
    );
    assert_eq!(first["source"]["id"], again["source"]["id"]);
    assert_eq!(again["reused"], true);
    for bad in ["../x.md", "src/a.md", "plans/none.md"] {
        assert_eq!(
            t.run(&a, json!({"action": "add_plan_source", "path": bad}))
                .unwrap_err()
                .code(),
            "invalid_arguments"
        );
    }
    let v = t.ok(
        &a,
        json!({"action": "create", "title": "step", "plan_source": "ps-1"}),
    );
    assert_eq!(v["story"]["plan_source"], "ps-1");
}

#[test]
fn bad_input_is_named() {
    let t = t();
    let a = agent("A");
    for (v, code) in [
        (json!({"action": "nope"}), "invalid_arguments"),
        (json!({}), "invalid_arguments"),
        (json!({"action": "create"}), "invalid_arguments"),
        (
            json!({"action": "create", "title": " "}),
            "invalid_arguments",
        ),
        (
            json!({"action": "create", "title": "x", "extra": 1}),
            "invalid_arguments",
        ),
        (json!({"action": "get", "id": "st-9"}), "not_found"),
        (
            json!({"action": "create", "title": "x", "dependencies": ["st-9"]}),
            "not_found",
        ),
    ] {
        assert_eq!(t.run(&a, v.clone()).unwrap_err().code(), code, "{v}");
    }
    assert_eq!(t.event_count(), 0);
}
