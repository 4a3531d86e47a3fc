//! The inbox core: spec examples as unit tests, then random interleavings of
//! send / inbox / wait / timeout / PTY attach and exit over many seeds.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::Rng;
use tuic_proto::mail::{
    DeliveryPath, InboxError, InboxEvent, Inboxes, Lifecycle, NewMessage, WaitOutcome, WaitStart,
    WakeOwner,
};

const BOB: &str = "bob";

fn msg(id: &str, body: &str) -> NewMessage {
    NewMessage {
        recipient: BOB.into(),
        message_id: id.into(),
        from: "alice".into(),
        from_name: None,
        message: body.into(),
        kind: None,
        lifecycle: None,
    }
}

fn notice(id: &str, child: &str, state: &str) -> NewMessage {
    NewMessage {
        kind: Some("state_change".into()),
        lifecycle: Some(Lifecycle {
            child: child.into(),
            state: state.into(),
        }),
        from: "tuic-auto".into(),
        ..msg(id, state)
    }
}

fn ids(messages: &[tuic_proto::mail::InboxMessage]) -> Vec<String> {
    messages.iter().map(|m| m.message_id.clone()).collect()
}

/// BOB's inbox after `n` messages `m0..` sent at `now`.
fn bob_with(n: usize, now: u64) -> Inboxes {
    let mut ib = Inboxes::new();
    ib.register(BOB);
    for i in 0..n {
        ib.send(now, msg(&format!("m{i}"), "x")).expect("send");
    }
    ib
}

fn events(ib: &mut Inboxes) -> Vec<InboxEvent> {
    std::iter::from_fn(|| ib.poll_event()).collect()
}

/// The wait answers among the pending events, by wait id.
fn resolved(ib: &mut Inboxes) -> BTreeMap<u64, WaitOutcome> {
    events(ib)
        .into_iter()
        .filter_map(|e| match e {
            InboxEvent::WaitResolved {
                wait_id, outcome, ..
            } => Some((wait_id, outcome)),
            _ => None,
        })
        .collect()
}

#[test]
fn one_hundred_fifty_messages_evict_fifty_and_report_missed_count() {
    let mut ib = bob_with(150, 1_000);
    let page = ib.inbox(0, BOB, None, None).expect("inbox");
    assert_eq!(page.missed_count, 50);
    assert_eq!(page.messages.len(), 100);
    assert_eq!(page.messages[0].message_id, "m50");
    assert!(!page.has_more);
    assert_eq!(ib.inbox(0, BOB, None, None).expect("inbox").missed_count, 0);
}

#[test]
fn a_reader_that_only_waits_learns_of_evictions_from_the_wait() {
    let mut ib = bob_with(150, 1_000);
    let WaitStart::Resolved(o) = ib.wait(1_000, BOB, 1, None, Some(10)).expect("wait") else {
        panic!("mail was waiting");
    };
    assert_eq!((o.new_messages.len(), o.missed_count), (100, 50));
    // Reported once: neither the next inbox read nor a timed-out wait repeats it.
    assert_eq!(ib.inbox(0, BOB, None, None).expect("inbox").missed_count, 0);
    // An answer that never reached its caller owes its count again (and hands its mail back).
    assert!(matches!(
        ib.wait(1_001, BOB, 2, None, Some(10)).expect("wait"),
        WaitStart::Pending { .. }
    ));
    ib.send(1_001, msg("late", "x")).expect("send");
    let o = resolved(&mut ib)
        .remove(&2)
        .expect("resolved by the arrival");
    let lost = WaitOutcome {
        missed_count: 3,
        ..o
    };
    ib.wait_undelivered(1_002, BOB, &lost).expect("hand back");
    let page = ib.inbox(0, BOB, None, None).expect("inbox");
    assert_eq!(
        (ids(&page.messages), page.missed_count),
        (vec!["late".to_owned()], 3)
    );
}

#[test]
fn equal_millisecond_burst_pages_without_loss_and_next_since_advances() {
    let mut ib = bob_with(10, 5_000);
    let mut seen = Vec::new();
    let mut last = 0;
    loop {
        let page = ib.inbox(0, BOB, None, Some(3)).expect("inbox");
        assert!(page.next_since >= last);
        last = page.next_since;
        seen.extend(ids(&page.messages));
        if !page.has_more {
            break;
        }
    }
    let want: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    assert_eq!(seen, want);
    assert!(
        ib.inbox(0, BOB, None, None)
            .expect("inbox")
            .messages
            .is_empty()
    );
}

#[test]
fn since_zero_replays_without_rewinding_the_stored_cursor() {
    let mut ib = Inboxes::new();
    ib.register(BOB);
    ib.send(1, msg("a", "x")).expect("send");
    ib.send(2, msg("b", "x")).expect("send");
    let first = ib.inbox(0, BOB, None, None).expect("inbox");
    assert_eq!(ids(&first.messages), ["a", "b"]);
    let replay = ib.inbox(0, BOB, Some(0), Some(1)).expect("replay");
    assert_eq!(ids(&replay.messages), ["a"]);
    assert!(replay.has_more);
    ib.send(3, msg("c", "x")).expect("send");
    let next = ib.inbox(0, BOB, None, None).expect("inbox");
    assert_eq!(ids(&next.messages), ["c"]);
}

#[test]
fn timed_out_wait_returns_next_since_and_caps_at_295_seconds() {
    let mut ib = Inboxes::new();
    ib.register(BOB);
    ib.send(10, msg("a", "x")).expect("send");
    let read = ib.inbox(0, BOB, None, None).expect("inbox");
    let start = ib.wait(100, BOB, 1, None, Some(300_000)).expect("wait");
    assert_eq!(start, WaitStart::Pending { deadline: 295_100 });
    assert_eq!(ib.poll_timeout(), Some(295_100));
    ib.handle_timeout(295_099);
    assert!(events(&mut ib).is_empty());
    ib.handle_timeout(295_100);
    let ev = events(&mut ib);
    assert_eq!(
        ev,
        [InboxEvent::WaitResolved {
            recipient: BOB.into(),
            wait_id: 1,
            outcome: WaitOutcome {
                met: false,
                timed_out: true,
                new_messages: vec![],
                next_since: read.next_since,
                missed_count: 0,
            },
        }]
    );
    assert_eq!(
        ib.wait(0, BOB, 2, None, None).expect("wait"),
        WaitStart::Pending { deadline: 60_000 }
    );
}

#[test]
fn a_waiter_takes_the_lease_and_the_pty_is_not_woken() {
    let mut ib = Inboxes::new();
    ib.register(BOB);
    ib.attach_pty(BOB).expect("pty");
    ib.wait(0, BOB, 7, None, Some(1_000)).expect("wait");
    let r = ib.send(10, msg("a", "hi")).expect("send");
    assert_eq!(r.delivery, DeliveryPath::Waiter);
    let ev = events(&mut ib);
    assert!(ev.iter().all(|e| !matches!(e, InboxEvent::PtyWake { .. })));
    assert!(ev.iter().any(|e| matches!(e,
        InboxEvent::WaitResolved { wait_id: 7, outcome, .. } if outcome.met && ids(&outcome.new_messages) == ["a"])));
    // The wait acknowledged the cursor: an omitted-since inbox has nothing new.
    assert!(
        ib.inbox(0, BOB, None, None)
            .expect("inbox")
            .messages
            .is_empty()
    );
}

#[test]
fn pty_wake_is_one_notice_for_many_messages_and_is_withdrawn_by_a_read() {
    let mut ib = Inboxes::new();
    ib.register(BOB);
    ib.attach_pty(BOB).expect("pty");
    assert_eq!(
        ib.send(1, msg("a", "x")).expect("send").delivery,
        DeliveryPath::TerminalOrQueued
    );
    ib.send(2, msg("b", "x")).expect("send");
    let wakes = events(&mut ib)
        .into_iter()
        .filter(|e| matches!(e, InboxEvent::PtyWake { .. }))
        .count();
    assert_eq!(wakes, 1);
    ib.inbox(0, BOB, None, None).expect("inbox");
    assert_eq!(
        events(&mut ib),
        [InboxEvent::PtyWakeWithdrawn {
            recipient: BOB.into()
        }]
    );
}

#[test]
fn pty_exit_requeues_the_same_message_id_with_a_fresh_cursor() {
    let mut ib = Inboxes::new();
    ib.register(BOB);
    ib.attach_pty(BOB).expect("pty");
    let a = ib.send(1, msg("a", "x")).expect("send");
    ib.detach_pty(50, BOB).expect("detach");
    assert_eq!(ib.owner_of(BOB, "a"), None);
    // A later wait recovers it: its new cursor is above the one it had.
    match ib.wait(60, BOB, 1, Some(a.cursor), None).expect("wait") {
        WaitStart::Resolved(o) => {
            assert_eq!(ids(&o.new_messages), ["a"]);
            assert!(o.next_since > a.cursor);
        }
        other => panic!("expected the re-queued message, got {other:?}"),
    }
}

#[test]
fn lifecycle_notices_replace_except_awaiting_input() {
    let mut ib = Inboxes::with_capacity(3);
    ib.register(BOB);
    ib.send(1, notice("n1", "c1", "idle")).expect("send");
    ib.send(2, msg("p", "peer")).expect("send");
    let r = ib.send(3, notice("n2", "c1", "completed")).expect("send");
    assert_eq!(r.replaced.as_deref(), Some("n1"));
    ib.send(4, notice("q1", "c1", "awaiting_input"))
        .expect("send");
    let r = ib
        .send(5, notice("q2", "c1", "awaiting_input"))
        .expect("send");
    assert_eq!(r.replaced, None);
    let page = ib.inbox(0, BOB, Some(0), None).expect("inbox");
    assert_eq!(ids(&page.messages), ["n2", "q1", "q2"]);
    // "p" was evicted unread; the replacement of n1 is not counted.
    assert_eq!(page.missed_count, 1);
}

/// A caller on a monotonic deadline clock stamps the wall time separately: the timestamp is
/// the wall reading, the cursor and the wait deadline follow `now`.
#[test]
fn a_stamped_send_keeps_the_wall_time_apart_from_the_deadline_clock() {
    let mut ib = Inboxes::new();
    ib.register(BOB);
    let WaitStart::Pending { deadline } = ib.wait(1_000, BOB, 1, None, Some(500)).expect("wait")
    else {
        panic!("nothing is retained yet");
    };
    assert_eq!(deadline, 1_500);
    let r = ib
        .send_stamped(1_200, 1_700_000_000_000, msg("m0", "x"))
        .expect("send");
    assert_eq!(r.cursor, 1_200);
    assert_eq!(r.delivery, DeliveryPath::Waiter);
    let answers = resolved(&mut ib);
    let m = &answers[&1].new_messages[0];
    assert_eq!(
        (m.message_id.as_str(), m.timestamp_ms),
        ("m0", 1_700_000_000_000)
    );
}

#[test]
fn unknown_recipients_and_oversized_bodies_are_refused() {
    let mut ib = Inboxes::new();
    assert!(matches!(
        ib.send(1, msg("a", "x")),
        Err(InboxError::UnknownRecipient { .. })
    ));
    ib.register(BOB);
    let big = "x".repeat(64 * 1024 + 1);
    assert!(matches!(
        ib.send(1, msg("a", &big)),
        Err(InboxError::TooLarge { .. })
    ));
}

/// A reader that only ever uses the stored cursor (plus an occasional `since=0` replay).
#[derive(Default)]
struct Model {
    sent: Vec<String>,
    seen: BTreeSet<String>,
    evicted_unseen: BTreeSet<String>,
    replaced: BTreeSet<String>,
    missed_reported: u64,
    /// (message_id, cursor) → owner, for every lease assignment.
    assigned: BTreeMap<(String, u64), WakeOwner>,
    last_owner: BTreeMap<String, WakeOwner>,
    pending_waits: BTreeSet<u64>,
    /// Wait answers resolved by an event whose fate the node has not reported yet; the test
    /// confirms each one or declares it undelivered.
    unconfirmed: Vec<WaitOutcome>,
    /// Evicted while only an unconfirmed answer carried them: gone if that answer is lost.
    evicted_in_flight: BTreeSet<String>,
    /// Ids handed back by an undelivered wait answer; they may get a new owner.
    handed_back: BTreeSet<String>,
}

impl Model {
    fn observe(&mut self, returned: &[tuic_proto::mail::InboxMessage], replay: bool, seed: u64) {
        for m in returned {
            let fresh = self.seen.insert(m.message_id.clone());
            assert!(
                fresh || replay,
                "seed {seed}: {} returned twice by cursor reads",
                m.message_id
            );
        }
    }

    fn in_flight(&self, id: &str) -> bool {
        self.unconfirmed
            .iter()
            .any(|o| o.new_messages.iter().any(|x| x.message_id == id))
    }

    /// The node took answer `i` to its caller.
    fn confirm(&mut self, ib: &mut Inboxes, i: usize, seed: u64) {
        let o = self.unconfirmed.remove(i);
        ib.wait_answered(BOB, &o);
        // Concurrent answers may carry the same mail: a repeat here is not a cursor replay.
        self.observe(&o.new_messages, true, seed);
    }

    /// Answer `i` never reached its caller: exactly its retained mail that no read returned
    /// and no other unconfirmed answer carries comes back.
    fn lose(&mut self, ib: &mut Inboxes, now: u64, i: usize, seed: u64) {
        let lost = self.unconfirmed.remove(i);
        let retained: BTreeSet<String> = ib.peek(BOB).into_iter().map(|x| x.message_id).collect();
        let back: Vec<String> = ids(&lost.new_messages)
            .into_iter()
            .filter(|id| retained.contains(id) && !self.seen.contains(id) && !self.in_flight(id))
            .collect();
        // Its missed_count never reached the caller either.
        self.missed_reported -= lost.missed_count;
        let n = ib.wait_undelivered(now, BOB, &lost).expect("hand back");
        assert_eq!(
            n,
            back.len(),
            "seed {seed}: handed back {n}, expected {back:?}"
        );
        self.handed_back.extend(back);
    }

    /// Concurrent waits resolved by the same arrival all observe it; only one of them owns it.
    fn drain(&mut self, ib: &mut Inboxes, seed: u64) {
        let before = self.seen.clone();
        while let Some(e) = ib.poll_event() {
            match e {
                InboxEvent::WaitResolved {
                    wait_id, outcome, ..
                } => {
                    assert!(self.pending_waits.remove(&wait_id), "seed {seed}");
                    assert_ne!(outcome.met, outcome.timed_out, "seed {seed}");
                    let batch_only = outcome
                        .new_messages
                        .iter()
                        .all(|x| !before.contains(&x.message_id));
                    assert!(batch_only, "seed {seed}: a wait returned mail already read");
                    self.missed_reported += outcome.missed_count;
                    self.unconfirmed.push(outcome);
                }
                InboxEvent::LeaseAssigned {
                    message_id,
                    cursor,
                    owner,
                    ..
                } => {
                    let prev = self.assigned.insert((message_id.clone(), cursor), owner);
                    assert!(
                        prev.is_none(),
                        "seed {seed}: {message_id}@{cursor} got a second wake owner"
                    );
                    if let Some(before) = self.last_owner.insert(message_id.clone(), owner) {
                        assert!(
                            before == WakeOwner::Pty || self.handed_back.remove(&message_id),
                            "seed {seed}: {message_id} reassigned after a waiter owned it"
                        );
                    }
                }
                InboxEvent::WaitAbandoned { .. }
                | InboxEvent::PtyWake { .. }
                | InboxEvent::PtyWakeWithdrawn { .. } => {}
            }
        }
    }
}

fn run_interleaving(seed: u64) -> usize {
    let mut rng = Rng::new(seed);
    let mut ib = Inboxes::with_capacity(8);
    ib.register(BOB);
    let mut m = Model::default();
    let mut now = 1_000u64;
    let mut next_wait = 1u64;
    for step in 0..200 {
        if rng.chance(30) {
            now += rng.below(3);
        }
        let op = rng.below(100);
        match op {
            0..=39 => {
                let id = format!("m{step}");
                let new = if rng.chance(15) {
                    let state = ["idle", "completed", "awaiting_input"][rng.below(3) as usize];
                    notice(&id, &format!("c{}", rng.below(2)), state)
                } else {
                    msg(&id, "body")
                };
                let r = ib.send(now, new).expect("send");
                m.sent.push(id);
                if let Some(old) = r.replaced {
                    m.replaced.insert(old);
                }
                if let Some(old) = r.evicted
                    && !m.seen.contains(&old)
                {
                    if m.in_flight(&old) {
                        m.evicted_in_flight.insert(old);
                    } else {
                        m.evicted_unseen.insert(old);
                    }
                }
            }
            40..=54 => {
                let limit = rng.chance(50).then(|| rng.below(4) as usize + 1);
                let page = ib.inbox(now, BOB, None, limit).expect("inbox");
                m.missed_reported += page.missed_count;
                m.observe(&page.messages, false, seed);
            }
            55..=57 => {
                let page = ib.inbox(now, BOB, Some(0), None).expect("replay");
                m.missed_reported += page.missed_count;
                m.observe(&page.messages, true, seed);
            }
            58..=72 => {
                let id = next_wait;
                next_wait += 1;
                match ib
                    .wait(now, BOB, id, None, Some(rng.below(20) + 1))
                    .expect("wait")
                {
                    WaitStart::Resolved(o) => {
                        m.missed_reported += o.missed_count;
                        m.observe(&o.new_messages, false, seed);
                    }
                    WaitStart::Pending { .. } => {
                        m.pending_waits.insert(id);
                    }
                }
            }
            73..=80 => {
                now += rng.below(25);
                ib.handle_timeout(now);
            }
            81..=85 => ib.attach_pty(BOB).expect("attach"),
            86..=91 => {
                ib.detach_pty(now, BOB).expect("detach");
            }
            92..=93 => ib.pty_wake_done(BOB),
            94 => ib.rearm_pty_wake(BOB),
            95..=96 if !m.unconfirmed.is_empty() => {
                let i = rng.below(m.unconfirmed.len() as u64) as usize;
                m.confirm(&mut ib, i, seed);
            }
            97 if !m.unconfirmed.is_empty() => {
                let i = rng.below(m.unconfirmed.len() as u64) as usize;
                m.lose(&mut ib, now, i, seed);
            }
            _ => {
                if let Some(&w) = m.pending_waits.iter().next()
                    && ib.cancel_wait(BOB, w)
                {
                    m.pending_waits.remove(&w);
                }
            }
        }
        m.drain(&mut ib, seed);
        // Every retained message is observable by a replay at any moment (sampled: the
        // check is quadratic).
        if step % 10 != 0 {
            continue;
        }
        let retained: BTreeSet<String> = ib.peek(BOB).into_iter().map(|x| x.message_id).collect();
        for id in &m.sent {
            assert!(
                retained.contains(id)
                    || m.seen.contains(id)
                    || m.evicted_unseen.contains(id)
                    || m.evicted_in_flight.contains(id)
                    || m.replaced.contains(id),
                "seed {seed}: {id} vanished"
            );
        }
    }
    // Drain: end every wait, drop the PTY, read the rest.
    now += 1_000_000;
    ib.handle_timeout(now);
    ib.detach_pty(now, BOB).expect("detach");
    m.drain(&mut ib, seed);
    while !m.unconfirmed.is_empty() {
        m.confirm(&mut ib, 0, seed);
    }
    let page = ib.inbox(now, BOB, None, None).expect("inbox");
    m.missed_reported += page.missed_count;
    m.observe(&page.messages, false, seed);
    assert!(
        m.pending_waits.is_empty(),
        "seed {seed}: a wait never ended"
    );
    for id in &m.sent {
        assert!(
            m.seen.contains(id)
                || m.evicted_unseen.contains(id)
                || m.replaced.contains(id)
                || m.evicted_in_flight.contains(id),
            "seed {seed}: {id} was never observable"
        );
    }
    let unseen_evictions = m
        .evicted_unseen
        .iter()
        .filter(|id| !m.seen.contains(*id))
        .count() as u64;
    assert_eq!(
        m.missed_reported, unseen_evictions,
        "seed {seed}: missed_count disagrees with unread evictions"
    );
    m.sent.len()
}

#[test]
fn random_interleavings_keep_every_message_observable_with_one_wake_owner() {
    let mut total = 0;
    for seed in 0..1_000 {
        total += run_interleaving(seed);
    }
    assert!(total > 50_000);
}

#[test]
fn an_undelivered_wait_answer_hands_its_mail_back_with_the_same_id() {
    let mut ib = Inboxes::new();
    ib.register(BOB);
    ib.attach_pty(BOB).expect("pty");
    ib.wait(0, BOB, 1, None, Some(1_000)).expect("wait");
    ib.send(5, msg("a", "x")).expect("send");
    let answer = resolved(&mut ib).remove(&1).expect("resolved");
    // The MCP call went away before the answer was written.
    let n = ib.wait_undelivered(6, BOB, &answer).expect("hand back");
    assert_eq!(n, 1);
    assert_eq!(ib.owner_of(BOB, "a"), Some(WakeOwner::Pty));
    let page = ib.inbox(0, BOB, None, None).expect("inbox");
    assert_eq!(ids(&page.messages), ["a"]);
}

#[test]
fn carry_over_moves_mail_to_the_new_identity() {
    let mut ib = Inboxes::new();
    ib.register("old");
    ib.register("new");
    ib.send(
        1,
        NewMessage {
            recipient: "old".into(),
            ..msg("a", "x")
        },
    )
    .expect("send");
    ib.send(
        2,
        NewMessage {
            recipient: "old".into(),
            ..msg("b", "x")
        },
    )
    .expect("send");
    assert_eq!(ib.carry_over(3, "old", "new"), Ok(2));
    assert!(!ib.is_registered("old"));
    let page = ib.inbox(0, "new", None, None).expect("inbox");
    assert_eq!(ids(&page.messages), ["a", "b"]);
    assert!(matches!(
        ib.send(
            4,
            NewMessage {
                recipient: "old".into(),
                ..msg("c", "x")
            }
        ),
        Err(InboxError::UnknownRecipient { .. })
    ));
}

#[test]
fn a_lifecycle_summary_acknowledges_only_its_window() {
    let mut ib = Inboxes::new();
    ib.register(BOB);
    ib.attach_pty(BOB).expect("pty");
    ib.send(1, notice("n1", "c1", "idle")).expect("send");
    ib.send(2, notice("n2", "c2", "exited")).expect("send");
    let window = ib.pty_window(BOB);
    assert_eq!(window.len(), 2);
    let up_to = window.last().expect("some").0;
    // Mail coalesces while the summary is being typed.
    ib.send(3, msg("late", "x")).expect("send");
    ib.acknowledge(BOB, up_to).expect("ack");
    ib.pty_wake_done(BOB);
    events(&mut ib);
    ib.rearm_pty_wake(BOB);
    assert!(matches!(&events(&mut ib)[..], [InboxEvent::PtyWake { .. }]));
    let page = ib.inbox(0, BOB, None, None).expect("inbox");
    assert_eq!(ids(&page.messages), ["late"]);
}

/// Two waits pending on the same cursor (a caller gave up on one and asked again before the
/// node noticed) both resolve with the same arrival. One answer is lost, the other reaches its
/// caller: the mail must not come back, or the reader that has it reads it twice.
#[test]
fn a_lost_answer_does_not_hand_back_mail_a_concurrent_answer_delivered() {
    for lost_first in [true, false] {
        let mut ib = Inboxes::new();
        ib.register(BOB);
        ib.wait(0, BOB, 1, Some(0), Some(1_000))
            .expect("stale wait");
        ib.wait(0, BOB, 2, Some(0), Some(1_000))
            .expect("current wait");
        ib.send(5, msg("a", "x")).expect("send");
        let mut answers = resolved(&mut ib);
        let (stale, current) = (answers.remove(&1).unwrap(), answers.remove(&2).unwrap());
        assert_eq!(ids(&stale.new_messages), ["a"]);
        assert_eq!(ids(&current.new_messages), ["a"]);
        if lost_first {
            assert_eq!(
                ib.wait_undelivered(6, BOB, &stale),
                Ok(0),
                "still in flight"
            );
            ib.wait_answered(BOB, &current);
        } else {
            ib.wait_answered(BOB, &current);
            assert_eq!(ib.wait_undelivered(6, BOB, &stale), Ok(0), "delivered");
        }
        // The reader continues from its answer: nothing new, with either cursor.
        let explicit = ib
            .inbox(7, BOB, Some(current.next_since), None)
            .expect("inbox");
        assert!(explicit.messages.is_empty(), "lost_first={lost_first}");
        let stored = ib.inbox(7, BOB, None, None).expect("inbox");
        assert!(stored.messages.is_empty(), "lost_first={lost_first}");
    }
    // Both answers lost: the mail comes back once.
    let mut ib = Inboxes::new();
    ib.register(BOB);
    ib.wait(0, BOB, 1, None, Some(1_000)).expect("wait");
    ib.wait(0, BOB, 2, None, Some(1_000)).expect("wait");
    ib.send(5, msg("a", "x")).expect("send");
    let answers = resolved(&mut ib);
    assert_eq!(ib.wait_undelivered(6, BOB, &answers[&1]), Ok(0));
    assert_eq!(ib.wait_undelivered(6, BOB, &answers[&2]), Ok(1));
    let page = ib.inbox(7, BOB, None, None).expect("inbox");
    assert_eq!(ids(&page.messages), ["a"]);
}
