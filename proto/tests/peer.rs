//! Peer-link state machine, outbox, dedupe rings and backoff, one behaviour per test.

mod common;

use tuic_proto::peer::{
    AckOutcome, Backoff, DedupeError, DedupeRings, DownReason, ErrorCode, Frame, LinkConfig,
    LinkEvent, LinkRole, LinkState, Outbox, OutboxChange, OutboxError, OutboxLimits, PeerLink,
    Pushed, Request, Response, SenderOutcome, Verdict, WireMessage, Withdrawn,
};

use common::peer_entry as peer;

fn wire(id: &str, from: &str, to: &str, body: &str) -> WireMessage {
    WireMessage {
        message_id: id.into(),
        from: from.into(),
        to: to.into(),
        message: body.into(),
        timestamp_ms: 1,
        from_name: None,
        kind: None,
        lifecycle: None,
    }
}

/// Moves every queued frame from `a` to `b` (through JSON, as on the wire).
fn shuttle(now: u64, a: &mut PeerLink, b: &mut PeerLink) -> usize {
    let mut n = 0;
    while let Some(f) = a.poll_transmit() {
        b.handle_text(now, &f.encode());
        n += 1;
    }
    n
}

fn connected() -> (PeerLink, PeerLink) {
    let mut hub = PeerLink::new(0, LinkConfig::new("hub", "nodeb", LinkRole::Hub));
    let mut node = PeerLink::new(0, LinkConfig::new("nodeb", "nodeb", LinkRole::Node));
    shuttle(0, &mut hub, &mut node);
    shuttle(0, &mut node, &mut hub);
    assert_eq!(hub.state(), LinkState::Up);
    assert_eq!(node.state(), LinkState::Up);
    assert_eq!(
        hub.poll_event(),
        Some(LinkEvent::Up {
            remote_id: "nodeb".into()
        })
    );
    assert_eq!(
        node.poll_event(),
        Some(LinkEvent::Up {
            remote_id: "hub".into()
        })
    );
    (hub, node)
}

fn events(l: &mut PeerLink) -> Vec<LinkEvent> {
    std::iter::from_fn(|| l.poll_event()).collect()
}

fn register(hub: &mut PeerLink, node: &mut PeerLink, peers: &[&str]) {
    node.request(Request::Register {
        peers: peers.iter().map(|p| peer(*p)).collect(),
    })
    .expect("up");
    shuttle(0, node, hub);
    for e in events(hub) {
        if let LinkEvent::Request { id, .. } = e {
            hub.respond(id, Response::RegisterAck).expect("respond");
        }
    }
    shuttle(0, hub, node);
    events(node);
}

#[test]
fn handshake_then_request_and_response_match_by_id() {
    let (mut hub, mut node) = connected();
    register(&mut hub, &mut node, &["alice"]);
    let id = node
        .request(Request::Send(wire("m1", "alice", "nodec/bob", "hi")))
        .expect("up");
    shuttle(1, &mut node, &mut hub);
    let ev = events(&mut hub);
    let LinkEvent::Request {
        id: rid,
        request: Request::Send(m),
    } = &ev[0]
    else {
        panic!("expected a send, got {ev:?}");
    };
    assert_eq!(
        m.from, "nodeb/alice",
        "the hub stamps the sender from the link"
    );
    hub.respond(
        *rid,
        Response::SendAck {
            message_id: "m1".into(),
            outcome: AckOutcome::Accepted,
        },
    )
    .expect("respond");
    shuttle(1, &mut hub, &mut node);
    match &events(&mut node)[..] {
        [LinkEvent::Response { id: got, .. }] => assert_eq!(*got, id),
        other => panic!("expected the response, got {other:?}"),
    }
}

#[test]
fn a_frame_claiming_another_sender_is_rejected_with_the_connection_named() {
    let (mut hub, mut node) = connected();
    register(&mut hub, &mut node, &["alice"]);
    for claimed in ["nodec/bob", "local/boss", "mallory"] {
        node.request(Request::Send(wire("m", claimed, "nodec/bob", "x")))
            .expect("up");
        shuttle(1, &mut node, &mut hub);
        assert!(events(&mut hub).is_empty(), "{claimed} surfaced");
        let err = hub.poll_transmit().expect("error frame");
        match err {
            Frame::Error {
                code, connection, ..
            } => {
                assert!(matches!(
                    code,
                    ErrorCode::SenderForged | ErrorCode::SenderNotRegistered
                ));
                assert_eq!(connection, "nodeb");
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }
}

#[test]
fn a_node_refuses_sends_without_a_federation_address() {
    let (mut hub, mut node) = connected();
    hub.request(Request::Send(wire("m", "bob", "alice", "x")))
        .expect("up");
    shuttle(1, &mut hub, &mut node);
    assert!(events(&mut node).is_empty());
    assert!(matches!(
        node.poll_transmit(),
        Some(Frame::Error {
            code: ErrorCode::SenderForged,
            ..
        })
    ));
}

#[test]
fn a_request_before_hello_takes_the_link_down() {
    let mut node = PeerLink::new(0, LinkConfig::new("nodeb", "nodeb", LinkRole::Node));
    node.poll_transmit();
    node.handle_text(0, r#"{"type":"list_peers","id":1}"#);
    assert_eq!(node.state(), LinkState::Down);
    assert!(matches!(
        node.poll_transmit(),
        Some(Frame::Error {
            code: ErrorCode::HandshakeRequired,
            ..
        })
    ));
}

#[test]
fn another_protocol_version_is_refused() {
    let mut node = PeerLink::new(0, LinkConfig::new("nodeb", "nodeb", LinkRole::Node));
    node.poll_transmit();
    node.handle_text(
        0,
        r#"{"type":"hello","protocol_version":99,"node_id":"hub","role":"hub"}"#,
    );
    assert_eq!(node.state(), LinkState::Down);
    assert!(matches!(
        node.poll_event(),
        Some(LinkEvent::Down {
            reason: DownReason::VersionMismatch { remote: 99 },
            ..
        })
    ));
}

#[test]
fn a_spawn_frame_is_malformed_and_never_surfaces() {
    let (_hub, mut node) = connected();
    node.handle_text(1, r#"{"type":"spawn","id":4,"prompt":"x"}"#);
    assert!(events(&mut node).is_empty());
    assert!(matches!(
        node.poll_transmit(),
        Some(Frame::Error {
            id: Some(4),
            code: ErrorCode::Malformed,
            ..
        })
    ));
    assert_eq!(node.state(), LinkState::Up);
}

#[test]
fn pings_every_five_seconds_and_down_after_three_misses() {
    let (mut hub, _node) = connected();
    assert_eq!(hub.poll_timeout(), Some(5_000));
    for t in [5_000, 10_000, 15_000] {
        hub.handle_timeout(t);
        assert!(matches!(hub.poll_transmit(), Some(Frame::Ping { .. })));
        assert_eq!(hub.state(), LinkState::Up);
    }
    hub.handle_timeout(19_999);
    assert_eq!(hub.state(), LinkState::Up);
    hub.handle_timeout(20_000);
    assert_eq!(hub.state(), LinkState::Down);
    assert!(matches!(
        hub.poll_event(),
        Some(LinkEvent::Down {
            reason: DownReason::PingTimeout,
            ..
        })
    ));
}

#[test]
fn a_probe_pings_at_once_and_takes_a_silent_link_down_at_its_deadline() {
    // A silent far side (a hub killed without a word): down at the probe's deadline, long
    // before the pings' interval would tell.
    let (_hub, mut node) = connected();
    node.probe(1_000, 1_500);
    assert!(matches!(node.poll_transmit(), Some(Frame::Ping { .. })));
    assert_eq!(node.poll_timeout(), Some(2_500));
    node.handle_timeout(2_499);
    assert_eq!(node.state(), LinkState::Up);
    node.handle_timeout(2_500);
    assert_eq!(node.state(), LinkState::Down);
    assert!(matches!(
        node.poll_event(),
        Some(LinkEvent::Down {
            reason: DownReason::PingTimeout,
            ..
        })
    ));

    // A live far side answers: the probe ends and the link stays up past its deadline.
    let (mut hub, mut node) = connected();
    node.probe(1_000, 1_500);
    shuttle(1_010, &mut node, &mut hub);
    shuttle(1_020, &mut hub, &mut node);
    assert_eq!(node.poll_timeout(), Some(5_000));
    node.handle_timeout(2_600);
    assert_eq!(node.state(), LinkState::Up);
}

#[test]
fn missed_pings_count_the_silence_and_any_frame_heard_resets_them() {
    let (mut hub, mut node) = connected();
    assert_eq!(hub.missed_pings(), 0);
    hub.handle_timeout(5_000);
    hub.handle_timeout(10_000);
    assert_eq!(hub.missed_pings(), 2);
    // The node answers the pings: the count is back to zero.
    shuttle(10_000, &mut hub, &mut node);
    shuttle(10_000, &mut node, &mut hub);
    assert_eq!(hub.missed_pings(), 0);
}

#[test]
fn answered_pings_keep_the_link_up() {
    let (mut hub, mut node) = connected();
    for t in (5_000..60_000).step_by(5_000) {
        hub.handle_timeout(t);
        node.handle_timeout(t);
        shuttle(t, &mut hub, &mut node);
        shuttle(t, &mut node, &mut hub);
        shuttle(t, &mut hub, &mut node);
    }
    assert_eq!(hub.state(), LinkState::Up);
    assert_eq!(node.state(), LinkState::Up);
}

#[test]
fn a_reset_hands_back_unanswered_requests() {
    let (_hub, mut node) = connected();
    node.request(Request::ListPeers { path: None }).expect("up");
    node.reset();
    match &events(&mut node)[..] {
        [LinkEvent::Down { reason, unanswered }] => {
            assert_eq!(*reason, DownReason::Reset);
            assert_eq!(unanswered.len(), 1);
        }
        other => panic!("{other:?}"),
    }
    assert!(node.request(Request::ListPeers { path: None }).is_err());
}

#[test]
fn outbox_refuses_past_1000_messages_naming_the_connection() {
    let mut o = Outbox::new("nodec");
    for i in 0..1_000 {
        assert_eq!(
            o.push(wire(&format!("m{i}"), "a", "nodec/b", "x")),
            Ok(Pushed::Accepted)
        );
    }
    match o.push(wire("over", "a", "nodec/b", "x")) {
        Err(OutboxError::Full {
            connection, count, ..
        }) => {
            assert_eq!(connection, "nodec");
            assert_eq!(count, 1_000);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        o.push(wire("over", "a", "nodec/b", "x"))
            .expect_err("full")
            .to_string()
            .contains("nodec")
    );
}

#[test]
fn outbox_refuses_past_16_mib() {
    let mut o = Outbox::new("nodec");
    let body = "x".repeat(60 * 1024);
    let mut n = 0;
    while o.push(wire(&format!("m{n}"), "a", "b", &body)).is_ok() {
        n += 1;
    }
    assert!(o.bytes() <= 16 * 1024 * 1024);
    assert!(o.bytes() + 60 * 1024 > 16 * 1024 * 1024 - 1024);
    assert!(n < 1_000);
}

#[test]
fn outbox_keeps_64_in_flight_per_recipient_and_resends_after_reconnect() {
    let mut o = Outbox::new("hub");
    for i in 0..100 {
        o.push(wire(&format!("b{i}"), "a", "c/bob", "x"))
            .expect("push");
    }
    o.push(wire("z", "a", "c/zoe", "x")).expect("push");
    let first: Vec<String> = std::iter::from_fn(|| o.poll_dispatch())
        .map(|m| m.message_id)
        .collect();
    assert_eq!(first.len(), 65, "64 to bob, 1 to zoe");
    assert_eq!(o.in_flight_to("c/bob"), 64);
    // Acknowledging a later message does not slide the window past an unacknowledged one.
    o.on_ack("b5", AckOutcome::Delivered);
    assert_eq!(o.poll_dispatch(), None);
    o.on_ack("b0", AckOutcome::Delivered);
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("b64".into()));
    o.on_link_down();
    let uncertain = std::iter::from_fn(|| o.poll_event())
        .filter(|e| matches!(e.outcome, SenderOutcome::Uncertain { .. }))
        .count();
    assert_eq!(uncertain, 64);
    let resent: Vec<String> = std::iter::from_fn(|| o.poll_dispatch())
        .map(|m| m.message_id)
        .collect();
    assert_eq!(resent[0], "b1", "oldest first, same ids");
    assert!(!resent.contains(&"b0".to_owned()));
}

#[test]
fn outbox_survives_a_restart_through_serde() {
    let mut o = Outbox::new("hub");
    o.push(wire("a", "x", "c/bob", "one")).expect("push");
    o.push(wire("b", "x", "c/bob", "two")).expect("push");
    o.poll_dispatch();
    let stored = serde_json::to_string(&o).expect("serialize");
    let mut back: Outbox = serde_json::from_str(&stored).expect("deserialize");
    assert_eq!(back.len(), 2);
    assert_eq!(back.bytes(), o.bytes());
    assert_eq!(back.in_flight(), 0, "nothing is in flight after a restart");
    assert_eq!(back.poll_dispatch().map(|m| m.message_id), Some("a".into()));
}

#[test]
fn outbox_refusal_and_ack_reach_the_sender() {
    let mut o = Outbox::new("hub");
    o.push(wire("a", "x", "c/bob", "one")).expect("push");
    o.push(wire("b", "x", "c/bob", "two")).expect("push");
    assert_eq!(
        o.push(wire("a", "x", "c/bob", "one")),
        Ok(Pushed::AlreadyHeld)
    );
    o.poll_dispatch();
    o.poll_dispatch();
    o.on_ack("a", AckOutcome::Delivered);
    o.on_refused("b", ErrorCode::UnknownRecipient, "no bob");
    let ev: Vec<SenderOutcome> = std::iter::from_fn(|| o.poll_event())
        .map(|e| e.outcome)
        .collect();
    assert_eq!(ev[0], SenderOutcome::Delivered);
    assert!(matches!(&ev[1], SenderOutcome::Refused { connection, .. } if connection == "hub"));
    assert!(o.is_empty());
    assert_eq!(o.bytes(), 0);
}

#[test]
fn tight_limits_apply() {
    let mut o = Outbox::with_limits(
        "n",
        OutboxLimits {
            max_messages: 2,
            max_bytes: 1_000,
            max_in_flight_per_recipient: 1,
        },
    );
    o.push(wire("a", "x", "t", "1")).expect("push");
    o.push(wire("b", "x", "t", "2")).expect("push");
    assert!(o.push(wire("c", "x", "t", "3")).is_err());
    assert!(o.poll_dispatch().is_some());
    assert!(o.poll_dispatch().is_none());
}

#[test]
fn dedupe_drops_repeats_rejects_collisions_and_forgets_on_unregister() {
    let mut d = DedupeRings::new();
    assert_eq!(d.admit("bob", "m1", "b/alice", "hi"), Ok(Verdict::Fresh));
    assert_eq!(
        d.admit("bob", "m1", "b/alice", "hi"),
        Ok(Verdict::Duplicate)
    );
    assert!(matches!(
        d.admit("bob", "m1", "b/mallory", "hi"),
        Err(DedupeError::IdentityCollision { .. })
    ));
    assert!(d.admit("bob", "m1", "b/alice", "changed").is_err());
    // Rings are per recipient.
    assert_eq!(d.admit("carol", "m1", "b/alice", "hi"), Ok(Verdict::Fresh));
    d.remove("bob");
    assert_eq!(d.admit("bob", "m1", "b/alice", "hi"), Ok(Verdict::Fresh));
}

#[test]
fn dedupe_horizon_is_100_ids_shared_across_senders() {
    let mut d = DedupeRings::new();
    d.admit("bob", "first", "b/alice", "x").expect("fresh");
    for i in 0..99 {
        d.admit("bob", &format!("o{i}"), "c/other", "y")
            .expect("fresh");
    }
    assert_eq!(d.len("bob"), 100);
    assert_eq!(
        d.check("bob", "first", "b/alice", "x"),
        Ok(Verdict::Duplicate)
    );
    d.admit("bob", "one-more", "c/other", "y").expect("fresh");
    assert_eq!(d.check("bob", "first", "b/alice", "x"), Ok(Verdict::Fresh));
    let stored = serde_json::to_string(&d).expect("serialize");
    let back: DedupeRings = serde_json::from_str(&stored).expect("deserialize");
    assert_eq!(back, d);
    assert!(!stored.contains("\"x\""), "no bodies retained");
}

#[test]
fn backoff_grows_from_one_to_thirty_seconds_with_jitter() {
    let mut b = Backoff::new();
    let d: Vec<u64> = (0..8).map(|i| b.next_delay(i * 7_919)).collect();
    assert!((1_000..=1_250).contains(&d[0]));
    assert!((2_000..=2_500).contains(&d[1]));
    assert!(d.iter().all(|&x| x <= 30_000));
    assert_eq!(d[7], 30_000, "capped");
    b.reset();
    assert_eq!(b.next_delay(0), 1_000);
}

#[test]
fn backoff_limits_are_the_callers_and_zero_jitter_is_the_bare_base() {
    use std::time::Duration;
    let mut b = Backoff::with_limits(Duration::from_secs(1), Duration::from_secs(8));
    let d: Vec<u64> = (0..6).map(|_| b.next_delay(0)).collect();
    assert_eq!(d, [1_000, 2_000, 4_000, 8_000, 8_000, 8_000]);
    let mut j = Backoff::with_limits(Duration::from_millis(400), Duration::from_secs(60));
    let first = j.next(u64::MAX);
    assert!((400..=500).contains(&first.as_millis()), "{first:?}");
    // A maximum below the minimum is raised to it; a huge attempt count never overflows.
    let mut odd = Backoff::with_limits(Duration::from_secs(5), Duration::from_secs(1));
    assert_eq!(odd.next_delay(0), 5_000);
    for _ in 0..100 {
        odd.next_delay(u64::MAX);
    }
    assert_eq!(odd.next_delay(0), 5_000);
}

#[test]
fn relayed_outcomes_become_receipts_for_the_origin_node() {
    let (mut hub, mut node) = connected();
    let mut o = Outbox::new("nodec");
    o.push(wire("m1", "nodeb/alice", "bob", "hi"))
        .expect("push");
    o.poll_dispatch();
    o.on_ack("m1", AckOutcome::Delivered);
    let e = o.poll_event().expect("outcome");
    let (origin, r) = e.receipt("nodec").expect("final outcome");
    assert_eq!(origin, "nodeb");
    assert_eq!(r.from, "alice");
    assert_eq!(r.to, "nodec/bob");
    hub.receipt(r.clone()).expect("up");
    shuttle(1, &mut hub, &mut node);
    assert_eq!(events(&mut node), [LinkEvent::Receipt(r.clone())]);
    assert_eq!(SenderOutcome::from_receipt(&r), SenderOutcome::Delivered);
    // Nodes do not relay: a receipt towards the hub is refused and never surfaces.
    node.receipt(r).expect("up");
    shuttle(1, &mut node, &mut hub);
    assert!(events(&mut hub).is_empty());
    assert!(matches!(
        hub.poll_transmit(),
        Some(Frame::Error {
            code: ErrorCode::Malformed,
            ..
        })
    ));
}

#[test]
fn two_ends_with_the_same_role_do_not_connect() {
    let mut a = PeerLink::new(0, LinkConfig::new("n1", "x", LinkRole::Node));
    let mut b = PeerLink::new(0, LinkConfig::new("n2", "x", LinkRole::Node));
    shuttle(0, &mut a, &mut b);
    assert_eq!(b.state(), LinkState::Down);
}

#[test]
fn a_reused_pending_request_id_and_an_oversized_body_are_refused() {
    let (mut hub, mut node) = connected();
    register(&mut hub, &mut node, &["alice"]);
    let frame = Frame::ListPeers { id: 77, path: None }.encode();
    hub.handle_text(1, &frame);
    hub.handle_text(1, &frame);
    assert_eq!(
        events(&mut hub).len(),
        1,
        "the second use of id 77 never surfaces"
    );
    assert!(matches!(
        hub.poll_transmit(),
        Some(Frame::Error {
            id: Some(77),
            code: ErrorCode::Malformed,
            ..
        })
    ));
    let big = "x".repeat(64 * 1024 + 1);
    hub.handle_frame(
        1,
        Frame::Send {
            id: 78,
            message: wire("m", "alice", "nodec/bob", &big),
        },
    );
    assert!(events(&mut hub).is_empty());
    assert!(matches!(
        hub.poll_transmit(),
        Some(Frame::Error {
            id: Some(78),
            code: ErrorCode::TooLarge,
            ..
        })
    ));
}

#[test]
fn addresses_refuse_empty_parts_before_routing() {
    use tuic_proto::peer::{Address, AddressError, parse_address};
    assert_eq!(
        parse_address("nodeb/alice"),
        Ok(Address::Remote {
            connection: "nodeb",
            peer: "alice"
        })
    );
    assert_eq!(parse_address("local/boss"), Ok(Address::Local("boss")));
    assert!(matches!(
        parse_address("/alice"),
        Err(AddressError::EmptyConnection(_))
    ));
    assert!(matches!(
        parse_address("nodeb/"),
        Err(AddressError::EmptyPeer(_))
    ));
    assert!(matches!(
        parse_address(""),
        Err(AddressError::NotAnAddress(_))
    ));
    assert!(matches!(
        parse_address("alice"),
        Err(AddressError::NotAnAddress(_))
    ));
}

#[test]
fn deliver_enqueues_once_and_relay_takes_custody_or_refuses_naming_the_connection() {
    use std::collections::BTreeMap;
    use tuic_proto::mail::Inboxes;
    use tuic_proto::peer::{Routed, deliver, relay};

    let mut inboxes = Inboxes::new();
    inboxes.register("bob");
    let mut rings = DedupeRings::new();
    let m = wire("m1", "nodeb/alice", "bob", "hi");
    let ack = |outcome| Response::SendAck {
        message_id: "m1".into(),
        outcome,
    };
    assert_eq!(
        deliver(&mut inboxes, &mut rings, 1, "nodec", &m),
        ack(AckOutcome::Delivered)
    );
    assert_eq!(
        deliver(&mut inboxes, &mut rings, 2, "nodec", &m),
        ack(AckOutcome::Duplicate)
    );
    assert_eq!(inboxes.peek("bob").len(), 1);
    let forged = wire("m1", "nodeb/mallory", "bob", "hi");
    assert!(matches!(
        deliver(&mut inboxes, &mut rings, 3, "nodec", &forged),
        Response::Error {
            code: ErrorCode::IdentityCollision,
            ..
        }
    ));
    assert!(matches!(
        deliver(&mut inboxes, &mut rings, 3, "nodec", &wire("m2", "nodeb/a", "zed", "x")),
        Response::Error { code: ErrorCode::UnknownRecipient, ref connection, .. } if connection == "nodec"
    ));

    let mut outboxes = BTreeMap::from([(
        "nodec".to_owned(),
        Outbox::with_limits(
            "nodec",
            OutboxLimits {
                max_messages: 1,
                ..OutboxLimits::default()
            },
        ),
    )]);
    let to_c = wire("m3", "nodeb/alice", "nodec/bob", "x");
    assert!(matches!(
        relay(&mut outboxes, &to_c),
        Routed::Answered(Response::SendAck {
            outcome: AckOutcome::Accepted,
            ..
        })
    ));
    assert_eq!(
        outboxes["nodec"].messages().next().map(|m| m.to.as_str()),
        Some("bob")
    );
    assert!(matches!(
        relay(&mut outboxes, &wire("m4", "nodeb/alice", "nodec/bob", "x")),
        Routed::Answered(Response::Error { code: ErrorCode::OutboxFull, ref connection, .. }) if connection == "nodec"
    ));
    assert!(matches!(
        relay(&mut outboxes, &wire("m5", "nodeb/alice", "local/boss", "x")),
        Routed::Local(ref l) if l.to == "boss"
    ));
    for bad in ["/bob", "nodec/", "nobody/bob"] {
        assert!(matches!(
            relay(&mut outboxes, &wire("m6", "nodeb/alice", bad, "x")),
            Routed::Answered(Response::Error {
                code: ErrorCode::UnknownRecipient,
                ..
            })
        ));
    }
}

#[test]
fn a_wait_crosses_the_link_only_for_a_peer_registered_over_it() {
    use tuic_proto::mail::{Inboxes, WaitStart};
    let (mut hub, mut node) = connected();
    register(&mut hub, &mut node, &["bob"]);
    // The hub end serves whoever keeps inboxes for the node's registered peers (stamped).
    let mut inboxes = Inboxes::new();
    inboxes.register("nodeb/bob");
    inboxes
        .send(
            5,
            tuic_proto::mail::NewMessage {
                recipient: "nodeb/bob".into(),
                message_id: "m1".into(),
                from: "local/boss".into(),
                from_name: None,
                message: "hi".into(),
                kind: None,
                lifecycle: None,
            },
        )
        .expect("send");
    let id = node
        .request(Request::Wait {
            recipient: "bob".into(),
            since: None,
            timeout_ms: Some(1_000),
        })
        .expect("up");
    shuttle(6, &mut node, &mut hub);
    let (rid, recipient) = match &events(&mut hub)[..] {
        [
            LinkEvent::Request {
                id,
                request: Request::Wait { recipient, .. },
            },
        ] => (*id, recipient.clone()),
        other => panic!("{other:?}"),
    };
    assert_eq!(recipient, "nodeb/bob");
    let WaitStart::Resolved(outcome) = inboxes
        .wait(6, &recipient, 1, None, Some(1_000))
        .expect("wait")
    else {
        panic!("mail was there");
    };
    hub.respond(rid, Response::WaitResult(outcome.clone()))
        .expect("respond");
    shuttle(7, &mut hub, &mut node);
    match &events(&mut node)[..] {
        [
            LinkEvent::Response {
                id: got,
                response: Response::WaitResult(w),
                ..
            },
        ] => {
            assert_eq!(*got, id);
            assert_eq!(*w, outcome);
            assert_eq!(w.new_messages[0].message_id, "m1");
        }
        other => panic!("{other:?}"),
    }
    // The other way nothing qualifies: a node's agents register on the node, never over the
    // link, so the hub (or anyone holding the node's token) cannot read or consume their mail.
    let reads = [
        Request::Wait {
            recipient: "bob".into(),
            since: None,
            timeout_ms: Some(1_000),
        },
        Request::Inbox {
            recipient: "bob".into(),
            since: Some(0),
            limit: None,
        },
    ];
    for read in reads {
        let id = hub.request(read).expect("up");
        shuttle(8, &mut hub, &mut node);
        assert!(events(&mut node).is_empty(), "the read never surfaces");
        shuttle(8, &mut node, &mut hub);
        match &events(&mut hub)[..] {
            [
                LinkEvent::Response {
                    id: got,
                    response: Response::Error { code, message, .. },
                    ..
                },
            ] => {
                assert_eq!(*got, id);
                assert_eq!(*code, ErrorCode::SenderNotRegistered);
                assert!(
                    message.contains("did not register over this link"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    // A node never serves an address as an inbox owner.
    hub.request(Request::Inbox {
        recipient: "nodec/bob".into(),
        since: None,
        limit: None,
    })
    .expect("up");
    shuttle(9, &mut hub, &mut node);
    assert!(events(&mut node).is_empty());
}

#[test]
fn a_refused_resend_is_reported_uncertain_not_refused() {
    let mut o = Outbox::new("hub");
    o.push(wire("a", "x", "c/bob", "one")).expect("push");
    o.poll_dispatch();
    o.on_link_down();
    // A restart in between: attempts are persisted.
    let mut o: Outbox = serde_json::from_str(&serde_json::to_string(&o).expect("ser")).expect("de");
    o.poll_dispatch();
    o.on_refused("a", ErrorCode::OutboxFull, "full");
    let last = std::iter::from_fn(|| o.poll_event())
        .last()
        .expect("outcome");
    assert!(matches!(
        last.outcome,
        SenderOutcome::RefusedOnRetry {
            code: ErrorCode::OutboxFull,
            ..
        }
    ));
    assert!(
        last.receipt("c").is_none(),
        "no receipt claims a refusal that may be false"
    );
}

#[test]
fn a_reading_recipient_with_a_full_inbox_holds_forwarded_mail_at_the_previous_hop() {
    use tuic_proto::mail::{INBOX_CAPACITY, Inboxes, READER_ACTIVE_MS};
    use tuic_proto::peer::deliver;

    let mut inboxes = Inboxes::new();
    let mut rings = DedupeRings::new();
    for who in ["bob", "idle"] {
        inboxes.register(who);
    }
    // bob reads (at t=0), idle never has.
    inboxes.inbox(0, "bob", None, None).expect("inbox");
    for who in ["bob", "idle"] {
        for i in 0..INBOX_CAPACITY {
            let m = wire(&format!("{who}{i}"), "nodeb/alice", who, "x");
            let r = deliver(&mut inboxes, &mut rings, 1, "nodec", &m);
            assert!(matches!(r, Response::SendAck { .. }), "{r:?}");
        }
    }
    let next = |who: &str| wire(&format!("{who}-next"), "nodeb/alice", who, "x");
    // One more would evict bob's unread mail: it stays with the hub.
    assert!(matches!(
        deliver(&mut inboxes, &mut rings, 2, "nodec", &next("bob")),
        Response::Error { code: ErrorCode::RecipientFull, ref connection, .. } if connection == "nodec"
    ));
    assert_eq!(inboxes.peek("bob").len(), INBOX_CAPACITY);
    assert_eq!(inboxes.peek("bob")[0].message_id, "bob0");
    // A repeat of mail it has is still acknowledged as a duplicate.
    assert!(matches!(
        deliver(
            &mut inboxes,
            &mut rings,
            2,
            "nodec",
            &wire("bob5", "nodeb/alice", "bob", "x")
        ),
        Response::SendAck {
            outcome: AckOutcome::Duplicate,
            ..
        }
    ));
    // A recipient that never read gets the spec's eviction, reported on its next read.
    assert!(matches!(
        deliver(&mut inboxes, &mut rings, 2, "nodec", &next("idle")),
        Response::SendAck {
            outcome: AckOutcome::Delivered,
            ..
        }
    ));
    assert_eq!(
        inboxes
            .inbox(3, "idle", None, None)
            .expect("inbox")
            .missed_count,
        1
    );
    // Once bob stopped reading long enough, the same holds for him.
    let later = READER_ACTIVE_MS + 1;
    assert!(matches!(
        deliver(&mut inboxes, &mut rings, later, "nodec", &next("bob")),
        Response::SendAck {
            outcome: AckOutcome::Delivered,
            ..
        }
    ));
    // A reader marked by `reading` at t=0, its inbox filled at t=1; the next message at t=2
    // is held.
    let full_reader = |who: &str, reading: fn(&mut Inboxes, &str)| {
        let mut inboxes = Inboxes::new();
        inboxes.register(who);
        reading(&mut inboxes, who);
        let mut rings = DedupeRings::new();
        for i in 0..INBOX_CAPACITY {
            let m = wire(&format!("{who}{i}"), "nodeb/alice", who, "x");
            deliver(&mut inboxes, &mut rings, 1, "nodec", &m);
        }
        assert!(matches!(
            deliver(&mut inboxes, &mut rings, 2, "nodec", &next(who)),
            Response::Error {
                code: ErrorCode::RecipientFull,
                ..
            }
        ));
        (inboxes, rings)
    };
    // Registering counts as reading: mail between registration and the first read waits.
    full_reader("new", |ib, who| ib.mark_reading(0, who));
    // A read makes room; mail flows again.
    let (mut inboxes, mut rings) = full_reader("bob", |ib, who| {
        ib.inbox(0, who, None, None).expect("inbox");
    });
    let page = inboxes.inbox(3, "bob", None, Some(10)).expect("inbox");
    assert_eq!((page.messages.len(), page.missed_count), (10, 0));
    assert!(matches!(
        deliver(&mut inboxes, &mut rings, 4, "nodec", &next("bob")),
        Response::SendAck {
            outcome: AckOutcome::Delivered,
            ..
        }
    ));
}

#[test]
fn a_recipient_full_answer_keeps_the_message_and_pauses_only_that_recipient() {
    let mut o = Outbox::new("nodec");
    for id in ["b1", "b2"] {
        o.push(wire(id, "x", "bob", "x")).expect("push");
    }
    o.push(wire("z1", "x", "zoe", "x")).expect("push");
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("b1".into()));
    o.on_refused("b1", ErrorCode::RecipientFull, "full");
    assert_eq!(o.poll_event(), None, "the sender is not told anything");
    assert_eq!((o.len(), o.in_flight(), o.held_for()), (3, 0, 1));
    // bob gets nothing more; zoe's mail still flows.
    let next: Vec<String> = std::iter::from_fn(|| o.poll_dispatch())
        .map(|m| m.message_id)
        .collect();
    assert_eq!(next, ["z1"]);
    assert!(o.resume_held());
    // One probe: the held message, same id. Still full: held again, one frame spent.
    let probe: Vec<String> = std::iter::from_fn(|| o.poll_dispatch())
        .map(|m| m.message_id)
        .collect();
    assert_eq!(probe, ["b1"]);
    o.on_refused("b1", ErrorCode::RecipientFull, "full");
    assert_eq!(o.poll_dispatch(), None);
    assert!(o.resume_held());
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("b1".into()));
    assert_eq!(o.poll_dispatch(), None, "one probe at a time");
    // Room again: its acknowledgement reopens the window.
    o.on_ack("b1", AckOutcome::Delivered);
    assert_eq!(
        o.poll_event().map(|e| e.outcome),
        Some(SenderOutcome::Delivered)
    );
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("b2".into()));
    assert!(!o.resume_held(), "nothing held");
}

/// Applies changes to a map standing in for the store's per-message records.
fn apply(store: &mut std::collections::BTreeMap<u64, Vec<u8>>, changes: Vec<OutboxChange>) {
    for c in changes {
        match c {
            OutboxChange::Put { seq, record } => {
                store.insert(seq, record);
            }
            OutboxChange::Remove { seq } => {
                store.remove(&seq);
            }
        }
    }
}

fn records(store: &std::collections::BTreeMap<u64, Vec<u8>>) -> Vec<(u64, Vec<u8>)> {
    store.iter().map(|(k, v)| (*k, v.clone())).collect()
}

#[test]
fn outbox_changes_touch_one_record_each_and_rebuild_the_outbox() {
    let mut store = std::collections::BTreeMap::new();
    let mut o = Outbox::new("nodec");
    for id in ["a", "b", "c"] {
        o.push(wire(id, "x", "bob", id)).expect("push");
    }
    let changes = o.take_changes();
    assert_eq!(changes.len(), 3, "one write per pushed message");
    apply(&mut store, changes);
    // The first attempt is recorded (a refusal after a restart is then known to be a retry);
    // an acknowledgement removes exactly that message's record.
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("a".into()));
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("b".into()));
    o.on_ack("a", AckOutcome::Delivered);
    let changes = o.take_changes();
    assert_eq!(
        changes.iter().map(OutboxChange::seq).collect::<Vec<_>>(),
        [0, 1, 0]
    );
    assert!(matches!(changes[2], OutboxChange::Remove { seq: 0 }));
    apply(&mut store, changes);
    assert!(o.take_changes().is_empty());
    // A failed commit gives its changes back, ahead of newer ones.
    o.push(wire("d", "x", "bob", "d")).expect("push");
    let failed = o.take_changes();
    o.push(wire("e", "x", "bob", "e")).expect("push");
    o.restore_changes(failed);
    let again = o.take_changes();
    assert_eq!(
        again.iter().map(OutboxChange::seq).collect::<Vec<_>>(),
        [3, 4]
    );
    apply(&mut store, again);

    // A restart: the records rebuild the outbox, oldest first, nothing in flight, b's attempt
    // remembered, new messages numbered after the old.
    let mut back =
        Outbox::from_records("nodec", OutboxLimits::default(), &records(&store)).expect("load");
    assert_eq!(back.len(), 4);
    assert_eq!(back.bytes(), o.bytes());
    assert_eq!(back.in_flight(), 0);
    let order: Vec<String> = back.messages().map(|m| m.message_id.clone()).collect();
    assert_eq!(order, ["b", "c", "d", "e"]);
    back.poll_dispatch();
    back.on_refused("b", ErrorCode::UnknownRecipient, "gone");
    assert!(matches!(
        back.poll_event().map(|e| e.outcome),
        Some(SenderOutcome::RefusedOnRetry { .. })
    ));
    back.take_changes();
    back.push(wire("f", "x", "bob", "f")).expect("push");
    assert_eq!(
        back.take_changes()
            .iter()
            .map(OutboxChange::seq)
            .collect::<Vec<_>>(),
        [5]
    );
}

#[test]
fn an_outbox_stored_whole_moves_into_per_message_records() {
    let mut old = Outbox::new("nodec");
    for id in ["a", "b"] {
        old.push(wire(id, "x", "bob", id)).expect("push");
    }
    old.poll_dispatch();
    // What an earlier version stored, without sequence numbers.
    let mut json: serde_json::Value = serde_json::to_value(&old).expect("serialize");
    for h in json["held"].as_array_mut().expect("held") {
        h.as_object_mut().expect("object").remove("seq");
    }
    json.as_object_mut().expect("object").remove("next_seq");
    let mut read: Outbox = serde_json::from_value(json).expect("old format reads");
    read.rewrite_all();
    let mut store = std::collections::BTreeMap::new();
    apply(&mut store, read.take_changes());
    let back =
        Outbox::from_records("nodec", OutboxLimits::default(), &records(&store)).expect("load");
    let order: Vec<String> = back.messages().map(|m| m.message_id.clone()).collect();
    assert_eq!(order, ["a", "b"]);
}

#[test]
fn a_gated_outbox_dispatches_only_mail_its_owner_committed() {
    let mut o = Outbox::new("nodec");
    o.set_durable(o.next_seq());
    o.push(wire("a", "x", "bob", "a")).expect("push");
    o.push(wire("b", "x", "bob", "b")).expect("push");
    assert_eq!(o.poll_dispatch(), None, "nothing committed yet");
    // The owner took the changes (reading next_seq then) and its commit succeeded.
    let upto = o.next_seq();
    assert_eq!(o.take_changes().len(), 2);
    o.push(wire("c", "x", "bob", "c")).expect("push");
    o.set_durable(upto);
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("a".into()));
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("b".into()));
    assert_eq!(o.poll_dispatch(), None, "c is not committed yet");
    let after_dispatch = o.take_changes();
    assert_eq!(
        after_dispatch
            .iter()
            .map(OutboxChange::seq)
            .collect::<Vec<_>>(),
        [2],
        "only c's push: a gated dispatch writes nothing (the push recorded the attempt)"
    );
    // A crash before a's send: the record counts it attempted, so a refusal of the resend is
    // reported uncertain (the safe side), never `refused`.
    let mut store = std::collections::BTreeMap::new();
    let mut fresh = Outbox::new("nodec");
    fresh.set_durable(0);
    fresh.push(wire("a", "x", "bob", "a")).expect("push");
    apply(&mut store, fresh.take_changes());
    let mut back =
        Outbox::from_records("nodec", OutboxLimits::default(), &records(&store)).expect("load");
    back.poll_dispatch();
    assert!(back.take_changes().is_empty());
    back.on_refused("a", ErrorCode::UnknownRecipient, "gone");
    assert!(matches!(
        back.poll_event().map(|e| e.outcome),
        Some(SenderOutcome::RefusedOnRetry { .. })
    ));
    // A watermark never moves back; a resend of dispatched mail is not gated.
    o.set_durable(0);
    o.on_link_down();
    while o.poll_event().is_some() {}
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("a".into()));
    o.set_durable(o.next_seq());
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("b".into()));
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("c".into()));
}

#[test]
fn an_early_outbox_dispatches_before_its_commit_and_records_the_attempt_with_the_push() {
    let mut o = Outbox::new("hub");
    o.set_durable(o.next_seq());
    o.set_early_dispatch();
    o.push(wire("a", "x", "bob", "a")).expect("push");
    o.push(wire("b", "x", "bob", "b")).expect("push");
    // Nothing committed yet, and the mail leaves anyway: whoever handed it over waits for
    // the commit before hearing it is held.
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("a".into()));
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("b".into()));
    let changes = o.take_changes();
    assert_eq!(
        changes.iter().map(OutboxChange::seq).collect::<Vec<_>>(),
        [0, 1],
        "one write per message: the push's record, not the dispatch"
    );
    // A crash after that commit: the reloaded records count the attempt, so a refusal of the
    // resend is uncertain, never `refused`.
    let mut store = std::collections::BTreeMap::new();
    apply(&mut store, changes);
    let mut back =
        Outbox::from_records("hub", OutboxLimits::default(), &records(&store)).expect("load");
    back.poll_dispatch();
    back.on_refused("a", ErrorCode::UnknownRecipient, "gone");
    assert!(matches!(
        back.poll_event().map(|e| e.outcome),
        Some(SenderOutcome::RefusedOnRetry { .. })
    ));
}

#[test]
fn a_message_answered_before_any_commit_took_its_record_writes_nothing() {
    let mut store = std::collections::BTreeMap::new();
    let mut o = Outbox::new("hub");
    o.set_early_dispatch();
    o.push(wire("a", "x", "bob", "a")).expect("push");
    o.push(wire("b", "x", "bob", "b")).expect("push");
    o.poll_dispatch();
    o.poll_dispatch();
    // `a` is acknowledged while its record is still in the journal: the record is dropped and
    // no removal is written.
    o.on_ack("a", AckOutcome::Accepted);
    let changes = o.take_changes();
    assert_eq!(
        changes.iter().map(OutboxChange::seq).collect::<Vec<_>>(),
        [1]
    );
    apply(&mut store, changes);
    // `b`'s record was taken (committed): its removal must be written.
    o.on_ack("b", AckOutcome::Delivered);
    let changes = o.take_changes();
    assert!(matches!(changes[..], [OutboxChange::Remove { seq: 1 }]));
    apply(&mut store, changes);
    assert!(store.is_empty());
    // A record given back by a failed commit is untaken again: an answer drops it too.
    o.push(wire("c", "x", "bob", "c")).expect("push");
    let taken = o.take_changes();
    o.restore_changes(taken);
    o.poll_dispatch();
    o.on_ack("c", AckOutcome::Accepted);
    let left = o.take_changes();
    // Conservative: once taken, the removal is written (put then remove: nothing stays).
    apply(&mut store, left);
    assert!(store.is_empty());
    // A reloaded message is stored: its removal is written.
    let mut fresh = Outbox::new("hub");
    fresh.push(wire("d", "x", "bob", "d")).expect("push");
    apply(&mut store, fresh.take_changes());
    let mut back =
        Outbox::from_records("hub", OutboxLimits::default(), &records(&store)).expect("load");
    back.set_early_dispatch();
    back.poll_dispatch();
    back.on_ack("d", AckOutcome::Accepted);
    apply(&mut store, back.take_changes());
    assert!(store.is_empty());
}

#[test]
fn withdraw_takes_back_only_mail_that_never_left() {
    let mut o = Outbox::new("hub");
    o.set_early_dispatch();
    o.push(wire("a", "x", "bob", "a")).expect("push");
    o.push(wire("b", "x", "bob", "b")).expect("push");
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("a".into()));
    assert_eq!(o.withdraw("a"), Withdrawn::OnItsWay, "it may arrive: kept");
    assert_eq!(o.withdraw("b"), Withdrawn::Withdrawn);
    assert_eq!(o.withdraw("b"), Withdrawn::NotHeld);
    assert_eq!(o.len(), 1);
    assert_eq!(o.poll_event(), None, "a withdrawal tells nobody");
    // `b` never reached the store: withdrawing it writes nothing; `a` still has its record.
    let changes = o.take_changes();
    assert_eq!(
        changes.iter().map(OutboxChange::seq).collect::<Vec<_>>(),
        [0]
    );
    // After a link drop `a` is resent, same id.
    o.on_link_down();
    while o.poll_event().is_some() {}
    assert_eq!(o.poll_dispatch().map(|m| m.message_id), Some("a".into()));
}

#[test]
fn upstream_tools_flow_from_hub_to_node_only() {
    let (mut hub, mut node) = connected();
    // Node → hub: list, then call; answers match by id and carry the result as it came.
    let list = node.request(Request::ListUpstreamTools).expect("up");
    shuttle(1, &mut node, &mut hub);
    let rid = match &events(&mut hub)[..] {
        [
            LinkEvent::Request {
                id,
                request: Request::ListUpstreamTools,
            },
        ] => *id,
        other => panic!("{other:?}"),
    };
    let tools = vec![serde_json::json!({"name": "py__echo", "inputSchema": {"type": "object"}})];
    hub.respond(
        rid,
        Response::UpstreamTools {
            generation: 3,
            tools: tools.clone(),
        },
    )
    .expect("respond");
    shuttle(1, &mut hub, &mut node);
    match &events(&mut node)[..] {
        [
            LinkEvent::Response {
                id,
                response:
                    Response::UpstreamTools {
                        generation: 3,
                        tools: t,
                    },
                ..
            },
        ] => {
            assert_eq!(*id, list);
            assert_eq!(*t, tools);
        }
        other => panic!("{other:?}"),
    }
    let args = serde_json::json!({"text": "hi"})
        .as_object()
        .cloned()
        .unwrap();
    node.request(Request::CallUpstreamTool {
        name: "py__echo".into(),
        arguments: args.clone(),
        timeout_ms: 5_000,
        progress: false,
    })
    .expect("up");
    shuttle(1, &mut node, &mut hub);
    let rid = match &events(&mut hub)[..] {
        [
            LinkEvent::Request {
                id,
                request:
                    Request::CallUpstreamTool {
                        name,
                        arguments,
                        timeout_ms: 5_000,
                        progress: false,
                    },
            },
        ] if name == "py__echo" && *arguments == args => *id,
        other => panic!("{other:?}"),
    };
    let result = serde_json::json!({"content": [{"type": "text", "text": "echo: hi"}], "x": 1});
    hub.respond(rid, Response::UpstreamResult(result.clone()))
        .expect("respond");
    shuttle(1, &mut hub, &mut node);
    match &events(&mut node)[..] {
        [
            LinkEvent::Response {
                response: Response::UpstreamResult(r),
                ..
            },
        ] => assert_eq!(*r, result),
        other => panic!("{other:?}"),
    }
    // The hub's hint reaches the node as an event.
    hub.upstream_tools_changed(4).expect("up");
    shuttle(1, &mut hub, &mut node);
    assert_eq!(
        events(&mut node),
        vec![LinkEvent::UpstreamToolsChanged { generation: 4 }]
    );

    // Hub → node upstream requests are refused by the node's end, and never surface.
    hub.request(Request::ListUpstreamTools).expect("up");
    shuttle(1, &mut hub, &mut node);
    assert!(events(&mut node).is_empty());
    shuttle(1, &mut node, &mut hub);
    match &events(&mut hub)[..] {
        [
            LinkEvent::Response {
                response: Response::Error { code, .. },
                ..
            },
        ] => assert_eq!(*code, ErrorCode::Malformed),
        other => panic!("{other:?}"),
    }
    // A hint from a node is refused by the hub's end.
    hub.handle_frame(1, Frame::UpstreamToolsChanged { generation: 9 });
    assert!(events(&mut hub).is_empty());
    assert!(matches!(
        hub.poll_transmit(),
        Some(Frame::Error {
            code: ErrorCode::Malformed,
            ..
        })
    ));
    assert_eq!(hub.state(), LinkState::Up);
}

fn params(n: u64) -> serde_json::Map<String, serde_json::Value> {
    serde_json::json!({"progress": n, "total": 3})
        .as_object()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn upstream_progress_reaches_the_calling_node_in_order_and_never_after_the_result() {
    let (mut hub, mut node) = connected();
    let call = node
        .request(Request::CallUpstreamTool {
            name: "py__progress_steps".into(),
            arguments: serde_json::Map::new(),
            timeout_ms: 5_000,
            progress: true,
        })
        .expect("up");
    shuttle(1, &mut node, &mut hub);
    let rid = match &events(&mut hub)[..] {
        [
            LinkEvent::Request {
                id,
                request: Request::CallUpstreamTool { progress: true, .. },
            },
        ] => *id,
        other => panic!("{other:?}"),
    };
    for n in 1..=3 {
        hub.upstream_progress(rid, params(n), if n == 3 { 4 } else { 0 })
            .expect("pending call");
    }
    hub.respond(
        rid,
        Response::UpstreamResult(serde_json::json!({"content": []})),
    )
    .expect("respond");
    // Answered: no more progress for it.
    assert!(matches!(
        hub.upstream_progress(rid, params(4), 0),
        Err(tuic_proto::peer::LinkError::UnknownRequest { .. })
    ));
    shuttle(1, &mut hub, &mut node);
    let evs = events(&mut node);
    assert_eq!(evs.len(), 4, "{evs:?}");
    for (i, ev) in evs[..3].iter().enumerate() {
        match ev {
            LinkEvent::UpstreamProgress {
                id,
                params: p,
                coalesced,
            } => {
                assert_eq!(*id, call);
                assert_eq!(p["progress"], (i + 1) as u64);
                assert_eq!(*coalesced, if i == 2 { 4 } else { 0 });
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        evs[3],
        LinkEvent::Response {
            response: Response::UpstreamResult(_),
            ..
        }
    ));
    // A late or forged progress frame for an answered call never surfaces.
    node.handle_frame(
        2,
        Frame::UpstreamProgress {
            call_id: call,
            params: params(9),
            coalesced: 0,
        },
    );
    assert!(events(&mut node).is_empty());
    assert!(node.poll_transmit().is_none(), "dropped without an error");
}

#[test]
fn upstream_progress_is_only_for_calls_that_asked_and_only_from_the_hub() {
    let (mut hub, mut node) = connected();
    let call = node
        .request(Request::CallUpstreamTool {
            name: "py__echo".into(),
            arguments: serde_json::Map::new(),
            timeout_ms: 5_000,
            progress: false,
        })
        .expect("up");
    shuttle(1, &mut node, &mut hub);
    let _ = events(&mut hub);
    // A call that did not ask gets none, even if a hub sent it.
    node.handle_frame(
        2,
        Frame::UpstreamProgress {
            call_id: call,
            params: params(1),
            coalesced: 0,
        },
    );
    assert!(events(&mut node).is_empty());
    // The hub's end refuses progress from a node.
    hub.handle_frame(
        2,
        Frame::UpstreamProgress {
            call_id: 1,
            params: params(1),
            coalesced: 0,
        },
    );
    assert!(events(&mut hub).is_empty());
    assert!(matches!(
        hub.poll_transmit(),
        Some(Frame::Error {
            code: ErrorCode::Malformed,
            ..
        })
    ));
    assert_eq!(hub.state(), LinkState::Up);
    // An older node's call (no `progress` field) decodes as not asking.
    let old = r#"{"type":"call_upstream_tool","id":40,"name":"py__add","arguments":{},"timeout_ms":1000}"#;
    assert!(matches!(
        Frame::decode(old),
        Ok(Frame::CallUpstreamTool {
            progress: false,
            ..
        })
    ));
}

/// The node's end of the link, as the node process and the simulator run it.
mod uplink {
    use super::*;
    use tuic_proto::peer::{Uplink, UplinkOutput};

    fn frames(l: &mut PeerLink) -> Vec<Frame> {
        std::iter::from_fn(|| l.poll_transmit()).collect()
    }

    #[test]
    fn no_mail_leaves_before_the_hub_acknowledged_the_register_that_vouches_for_its_sender() {
        let (mut hub, mut node) = connected();
        let mut outbox = Outbox::new("uplink");
        // Held from before a restart: "ghost" is no longer in the node's registry.
        outbox
            .push(wire("m1", "ghost", "nodec/carol", "hi"))
            .expect("push");
        let mut up = Uplink::new();
        up.pump(&mut node, vec![peer("alice")], &mut outbox);
        let sent = frames(&mut node);
        assert_eq!(sent.len(), 1, "{sent:?}");
        match &sent[0] {
            Frame::Register { peers, .. } => {
                let names: Vec<&str> = peers.iter().map(|p| p.tuic_session.as_str()).collect();
                assert_eq!(names, ["alice", "ghost"]);
            }
            other => panic!("expected register, got {other:?}"),
        }
        // Pumping again while the register is unanswered sends nothing.
        up.pump(&mut node, vec![peer("alice")], &mut outbox);
        assert!(frames(&mut node).is_empty());
        for f in sent {
            hub.handle_text(0, &f.encode());
        }
        for e in events(&mut hub) {
            if let LinkEvent::Request { id, .. } = e {
                hub.respond(id, Response::RegisterAck).expect("respond");
            }
        }
        shuttle(0, &mut hub, &mut node);
        for e in events(&mut node) {
            let out = up.on_event(&mut node, &mut outbox, e);
            assert_eq!(out, UplinkOutput::Registered { refused: None });
        }
        assert!(up.ready());
        up.pump(&mut node, vec![peer("alice")], &mut outbox);
        let sent = frames(&mut node);
        assert!(
            matches!(&sent[..], [Frame::Send { message, .. }] if message.message_id == "m1"),
            "{sent:?}"
        );
    }

    #[test]
    fn a_refusal_names_the_connection_the_hub_said_and_waits_for_its_commit() {
        let mut outbox = Outbox::new("uplink");
        outbox
            .push(wire("m1", "alice", "nodec/carol", "hi"))
            .expect("push");
        outbox.poll_dispatch().expect("dispatched");
        let s = Uplink::settle(&mut outbox, Some("nodec"), |o| {
            o.on_refused("m1", ErrorCode::OutboxFull, "full")
        });
        assert!(s.now.is_empty(), "{s:?}");
        assert_eq!(s.after_commit.len(), 1);
        assert_eq!(
            s.after_commit[0].outcome,
            SenderOutcome::Refused {
                code: ErrorCode::OutboxFull,
                connection: "nodec".into(),
                message: "full".into(),
            }
        );
        assert!(outbox.is_empty());
    }

    #[test]
    fn a_link_down_makes_mail_on_the_wire_uncertain_now_and_resendable() {
        let (_hub, mut node) = connected();
        let mut outbox = Outbox::new("uplink");
        outbox
            .push(wire("m1", "alice", "nodec/carol", "hi"))
            .expect("push");
        outbox.poll_dispatch().expect("dispatched");
        node.reset();
        let down = events(&mut node)
            .into_iter()
            .find(|e| matches!(e, LinkEvent::Down { .. }))
            .expect("down");
        let mut up = Uplink::new();
        match up.on_event(&mut node, &mut outbox, down) {
            UplinkOutput::Down { settled, .. } => {
                assert_eq!(settled.now.len(), 1);
                assert!(matches!(
                    settled.now[0].outcome,
                    SenderOutcome::Uncertain { .. }
                ));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            outbox.poll_dispatch().map(|m| m.message_id),
            Some("m1".into())
        );
    }
}

/// The hub's end of the links, as the hub process and the simulator run it.
mod relay {
    use super::*;
    use tuic_proto::peer::{Relay, Route, Step};

    fn relay_bc() -> Relay {
        let mut r = Relay::new();
        r.insert_outbox("b", Outbox::new("b"));
        r.insert_outbox("c", Outbox::new("c"));
        r
    }

    #[test]
    fn an_older_link_ending_never_retires_a_newer_links_shadows() {
        let mut r = relay_bc();
        let old = r.attach("b");
        r.register("b", old, vec![peer("alice")]);
        let new = r.attach("b");
        r.register("b", new, vec![peer("bob")]);
        r.detach("b", old);
        assert!(r.is_up("b"));
        let shadows = r.shadow_peers();
        assert_eq!(shadows.len(), 1);
        assert_eq!(shadows[0].address.as_deref(), Some("b/bob"));
        r.detach("b", new);
        assert!(!r.is_up("b"));
        assert!(r.shadow_peers().is_empty());
    }

    #[test]
    fn the_directory_lists_the_hubs_own_peers_and_other_nodes_never_the_asker() {
        let mut r = relay_bc();
        let gb = r.attach("b");
        r.register("b", gb, vec![peer("alice")]);
        let gc = r.attach("c");
        r.register("c", gc, vec![peer("carol")]);
        let dir = r.directory_for("b", vec![peer("h0")]);
        let addrs: Vec<&str> = dir.iter().filter_map(|p| p.address.as_deref()).collect();
        assert_eq!(addrs, ["local/h0", "c/carol"]);
    }

    fn accepted(r: &mut Relay, id: &str, from: &str, cut_through: bool) {
        match r.relay(&wire(id, from, "c/carol", "hi"), cut_through) {
            Step::Answered { response, custody } => {
                assert!(matches!(
                    response,
                    Response::SendAck {
                        outcome: AckOutcome::Accepted,
                        ..
                    }
                ));
                assert_eq!(custody.as_deref(), Some("c"));
            }
            other => panic!("{other:?}"),
        }
        r.outbox_mut("c")
            .expect("c")
            .poll_dispatch()
            .expect("dispatched");
    }

    fn delivered(r: &mut Relay, id: &str) -> Route {
        let mut s = r.settle("c", |o| o.on_ack(id, AckOutcome::Delivered));
        assert_eq!(s.now.len(), 1, "{s:?}");
        r.route("c", s.now.remove(0))
    }

    #[test]
    fn outcomes_go_to_the_waiting_step_the_hubs_own_sender_or_the_origins_live_link() {
        let mut r = relay_bc();
        let gb = r.attach("b");
        // A relay step still waiting (cut-through) gets the destination's answer itself.
        accepted(&mut r, "m1", "b/alice", true);
        assert_eq!(
            delivered(&mut r, "m1"),
            Route::CutThrough {
                message_id: "m1".into(),
                response: Response::SendAck {
                    message_id: "m1".into(),
                    outcome: AckOutcome::Delivered
                },
            }
        );
        // Once the step stopped waiting, the answer is a receipt for the origin.
        accepted(&mut r, "m2", "b/alice", true);
        r.end_cut_through(["m2"]);
        assert!(matches!(
            delivered(&mut r, "m2"),
            Route::Receipt { origin, receipt } if origin == "b" && receipt.from == "alice" && receipt.to == "c/carol"
        ));
        // The hub's own agent hears it through its waiter.
        accepted(&mut r, "m3", "local/h0", false);
        assert!(matches!(
            delivered(&mut r, "m3"),
            Route::Sender { sender, to, outcome: SenderOutcome::Delivered, .. } if sender == "h0" && to == "c/carol"
        ));
        // With the origin's link gone, the receipt is dropped, never guessed.
        accepted(&mut r, "m4", "b/alice", false);
        r.detach("b", gb);
        assert_eq!(
            delivered(&mut r, "m4"),
            Route::Dropped {
                message_id: "m4".into(),
                origin: Some("b".into())
            }
        );
    }

    #[test]
    fn a_refusal_of_relayed_mail_waits_for_the_commit_of_its_removal() {
        let mut r = relay_bc();
        r.attach("b");
        accepted(&mut r, "m1", "b/alice", false);
        let s = r.settle("c", |o| {
            o.on_refused("m1", ErrorCode::UnknownRecipient, "no")
        });
        assert!(s.now.is_empty());
        assert_eq!(s.after_commit.len(), 1);
        assert!(matches!(
            r.route("c", s.after_commit[0].clone()),
            Route::Receipt { origin, .. } if origin == "b"
        ));
    }
}
