//! Service tests of the sources and the hub half: the real service on a real bus, with the
//! workflow, ACP and link lookups standing in for the node (no channel is configured, so the
//! outcome is the record and its `notification` events).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tuic_proto::events::Event;

use super::config::NotifyConfig;
use super::core::{Context, Kind, Record, State};
use super::sources::{AcpLookup, PermissionView, RunView, WorkflowLookup};
use super::{Notify, NotifyEnv, SessionLookup};
use crate::events::Bus;

#[derive(Default)]
struct Runs(Mutex<Option<RunView>>);

impl WorkflowLookup for Runs {
    fn run(&self, _: &str) -> Option<RunView> {
        self.0.lock().unwrap().clone()
    }
}

#[derive(Default)]
struct Perms(Mutex<Option<PermissionView>>);

impl AcpLookup for Perms {
    fn permission(&self, _: &str, _: &str) -> Option<PermissionView> {
        self.0.lock().unwrap().clone()
    }
}

struct NoSessions;

impl SessionLookup for NoSessions {
    fn context(&self, _: &str) -> Option<Context> {
        None
    }
}

struct NoSecrets;

impl super::Secrets for NoSecrets {
    fn get(&self, _: &str) -> anyhow::Result<Option<String>> {
        Ok(None)
    }
    fn get_or_create(&self, _: &str, make: fn() -> String) -> anyhow::Result<String> {
        Ok(make())
    }
}

struct Bed {
    notify: Notify,
    bus: Arc<Bus>,
    runs: Arc<Runs>,
    perms: Arc<Perms>,
    hub: Arc<AtomicBool>,
    shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn bed() -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let bus = Arc::new(Bus::new(1024));
    let runs = Arc::new(Runs::default());
    let perms = Arc::new(Perms::default());
    let hub = Arc::new(AtomicBool::new(false));
    let shutdown = CancellationToken::new();
    let h = hub.clone();
    let env = NotifyEnv {
        bus: bus.clone(),
        tasks: TaskTracker::new(),
        shutdown: shutdown.clone(),
        config: Arc::new(|| NotifyConfig {
            clear_grace_ms: 0,
            coalesce_ms: 0,
            ..NotifyConfig::default()
        }),
        host: "box".into(),
        sessions: Arc::new(NoSessions),
        secrets: Arc::new(NoSecrets),
        subscriptions_file: dir.path().join("subs.json"),
        hub_attached: Arc::new(move || h.load(Ordering::SeqCst)),
        workflows: runs.clone(),
        acp: perms.clone(),
    };
    let notify = Notify::new(env);
    notify.start();
    Bed {
        notify,
        bus,
        runs,
        perms,
        hub,
        shutdown,
        _dir: dir,
    }
}

/// Polls the recent list until a record with `key` prefix satisfies `pred`.
async fn until(n: &Notify, prefix: &str, pred: impl Fn(&Record) -> bool) -> Record {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(r) = n
            .recent()
            .into_iter()
            .find(|r| r.key.starts_with(prefix) && pred(r))
        {
            return r;
        }
        assert!(Instant::now() < deadline, "no {prefix}: {:#?}", n.recent());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn run_changed(bus: &Bus) {
    bus.publish(Event::WorkflowRunChanged {
        repo_path: "/src/demo".into(),
        payload: json!({"runId": "run-7", "sequence": 3}),
    });
}

#[tokio::test]
async fn a_blocked_run_notifies_once_and_clears_when_it_moves_and_a_failed_run_notifies() {
    let b = bed();
    *b.runs.0.lock().unwrap() = Some(RunView {
        project: "/src/demo".into(),
        status: "awaiting_input".into(),
        step: Some("review".into()),
        pending: Some(("run-7-a2".into(), "Ship it?".into())),
    });
    run_changed(&b.bus);
    run_changed(&b.bus);
    let r = until(&b.notify, "wf:run-7:input:", |_| true).await;
    assert_eq!(r.kind, Kind::Workflow);
    assert_eq!(r.context.repo.as_deref(), Some("demo"));
    assert_eq!(r.context.name.as_deref(), Some("run-7 · review"));
    assert!(r.text.contains("Ship it?"), "{}", r.text);
    // A run resumed: the blocked notice clears.
    b.runs.0.lock().unwrap().as_mut().unwrap().status = "running".into();
    b.runs.0.lock().unwrap().as_mut().unwrap().pending = None;
    run_changed(&b.bus);
    until(&b.notify, "wf:run-7:input:", |r| r.cleared).await;
    b.runs.0.lock().unwrap().as_mut().unwrap().status = "failed".into();
    run_changed(&b.bus);
    run_changed(&b.bus);
    let f = until(&b.notify, "wf:run-7:failed", |_| true).await;
    assert_eq!(f.text, "failed");
    let blocked = b
        .notify
        .recent()
        .iter()
        .filter(|r| r.key.starts_with("wf:run-7:"))
        .count();
    assert_eq!(
        blocked,
        2,
        "one blocked, one failed: {:#?}",
        b.notify.recent()
    );
}

#[tokio::test]
async fn an_acp_permission_notifies_with_its_options_and_clears_when_settled() {
    let b = bed();
    *b.perms.0.lock().unwrap() = Some(PermissionView {
        context: Context {
            host: "box".into(),
            name: Some("claude-1".into()),
            ..Context::default()
        },
        text: "claude asks to run Edit notes.txt".into(),
        options: vec![
            ("allow".into(), "Allow".into()),
            ("reject".into(), "Reject".into()),
        ],
    });
    let notice = |kind: &str| tuic_proto::acp::Notice {
        kind: kind.into(),
        connection_id: "acp-1".into(),
        generation: 1,
        sequence: 4,
        session_id: None,
        request_id: Some("p1".into()),
    };
    b.bus
        .publish(Event::AcpNotice(notice("interaction_pending")));
    let r = until(&b.notify, "acp:acp-1:p1", |_| true).await;
    assert_eq!(r.kind, Kind::Acp);
    assert_eq!(r.state, State::Pending);
    let labels: Vec<&str> = r.choices.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["Allow", "Reject"]);
    let (_, ans) = b.notify.answer_of(r.id, 2).unwrap();
    assert_eq!(
        ans,
        super::core::Answer::Acp {
            connection: "acp-1".into(),
            request: "p1".into(),
            option: "reject".into()
        }
    );
    b.bus
        .publish(Event::AcpNotice(notice("interaction_settled")));
    until(&b.notify, "acp:acp-1:p1", |r| r.cleared).await;
}

#[tokio::test]
async fn while_a_hub_is_attached_the_node_relays_and_its_clear_follows_the_show() {
    let b = bed();
    let mut rx = b.bus.subscribe();
    b.hub.store(true, Ordering::SeqCst);
    let relayed = b.notify.test(Some("via the hub".into())).unwrap();
    let r = until(&b.notify, "test:", |r| r.id == relayed.id).await;
    let names: Vec<&String> = r.deliveries.keys().collect();
    assert_eq!(names, ["hub"], "{r:#?}");
    assert_eq!(r.deliveries["hub"].state, "relayed");
    // The show went out on the bus, where the hub's mirror reads it.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ev = tokio::time::timeout_at(deadline.into(), rx.recv())
            .await
            .expect("a notification event")
            .unwrap();
        if let Event::Notification(v) = &ev.event
            && v["op"] == "show"
            && v["id"] == json!(relayed.id)
        {
            assert_eq!(v["deliveries"]["hub"]["state"], "relayed");
            break;
        }
    }
    // Without the hub the node's own channels take it (none configured here: no "hub").
    b.hub.store(false, Ordering::SeqCst);
    let own = b.notify.test(Some("by itself".into())).unwrap();
    let r = until(&b.notify, "test:", |r| r.id == own.id).await;
    assert!(!r.deliveries.contains_key("hub"), "{r:#?}");
}

#[tokio::test]
async fn a_hub_raises_relayed_notifications_under_the_connection_and_reports_hosts() {
    let b = bed();
    let rec: Value = json!({"op": "show", "id": 9, "key": "q:s1:abc", "kind": "question",
        "host": "nodebox", "session_id": "s1", "session": "ro-3", "repo": "demo",
        "text": "Overwrite? (y/n)", "choices": [{"label": "Yes"}]});
    b.notify.relay("nodeb", "show", &rec);
    b.notify.relay("nodeb", "show", &rec);
    let r = until(&b.notify, "via:nodeb:q:s1:abc", |_| true).await;
    assert_eq!(r.context.host, "nodeb");
    assert_eq!(r.context.session_id.as_deref(), Some("nodeb/s1"));
    assert_eq!(r.context.session.as_deref(), Some("ro-3"));
    assert!(r.choices.is_empty());
    assert_eq!(
        b.notify
            .recent()
            .iter()
            .filter(|r| r.key.starts_with("via:"))
            .count(),
        1
    );
    b.notify.relay("nodeb", "clear", &rec);
    until(&b.notify, "via:nodeb:q:s1:abc", |r| r.cleared).await;

    b.notify.host_state("nodeb", true);
    assert!(
        b.notify.recent().iter().all(|r| r.kind != Kind::Host),
        "up without a down says nothing"
    );
    b.notify.host_state("nodeb", false);
    let off = until(&b.notify, "host:nodeb:offline", |_| true).await;
    assert_eq!(off.text, "nodeb went offline");
    b.notify.host_state("nodeb", true);
    until(&b.notify, "host:nodeb:offline", |r| r.cleared).await;
    let back = until(&b.notify, "news:host:nodeb:", |_| true).await;
    assert_eq!(back.text, "nodeb is back online");
}

#[tokio::test]
async fn an_answer_token_answers_its_notification_once() {
    let b = bed();
    *b.perms.0.lock().unwrap() = Some(PermissionView {
        context: Context::default(),
        text: "t".into(),
        options: vec![("a".into(), "A".into()), ("b".into(), "B".into())],
    });
    for rid in ["p1", "p2"] {
        b.bus.publish(Event::AcpNotice(tuic_proto::acp::Notice {
            kind: "interaction_pending".into(),
            connection_id: "c".into(),
            generation: 1,
            sequence: 1,
            session_id: None,
            request_id: Some(rid.into()),
        }));
    }
    let one = until(&b.notify, "acp:c:p1", |_| true).await;
    let two = until(&b.notify, "acp:c:p2", |_| true).await;
    let t1 = b.notify.answer_token(one.id);
    let t2 = b.notify.answer_token(two.id);
    assert!(matches!(
        b.notify.answer_with_token(&t1, 5),
        Err(super::AnswerError::BadChoice { .. })
    ));
    let (r, _) = b.notify.answer_with_token(&t1, 1).unwrap();
    assert_eq!(r.id, one.id, "a token answers only its own notification");
    assert!(b.notify.answer_with_token(&t1, 1).is_err(), "spent");
    // Clearing the second revokes its token.
    b.bus.publish(Event::AcpNotice(tuic_proto::acp::Notice {
        kind: "interaction_settled".into(),
        connection_id: "c".into(),
        generation: 1,
        sequence: 2,
        session_id: None,
        request_id: Some("p2".into()),
    }));
    until(&b.notify, "acp:c:p2", |r| r.cleared).await;
    assert!(
        b.notify.answer_with_token(&t2, 1).is_err(),
        "revoked on clear"
    );
}
