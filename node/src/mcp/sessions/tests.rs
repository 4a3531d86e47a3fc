use super::*;

const V: &str = "2025-11-25";

#[test]
fn superseded_stream_never_removes_its_replacement() {
    let t = SessionTable::default();
    let now = Instant::now();
    let (id, _) = t.initialize(None, now, V, None);
    let (g1, _rx1) = t.subscribe(&id, now, V);
    let (g2, _rx2) = t.subscribe(&id, now, V);
    assert!(g2 > g1);
    assert!(!t.release_stream(&id, g1), "old stream must not release");
    assert_eq!(t.stream_generation(&id), Some(g2));
    assert!(t.release_stream(&id, g2));
    assert_eq!(t.stream_generation(&id), None);
}

#[test]
fn delete_then_recovered_get_takes_a_fresh_generation() {
    let t = SessionTable::default();
    let now = Instant::now();
    let (id, _) = t.initialize(None, now, V, None);
    let (g1, _rx1) = t.subscribe(&id, now, V);
    assert!(t.delete(&id));
    assert_eq!(t.touch(&id, now, V), Lookup::Retired);
    let (g2, _rx2) = t.subscribe(&id, now, V);
    assert_ne!(g1, g2);
    // The half-open old stream's teardown leaves the new sender alone.
    assert!(!t.release_stream(&id, g1));
    assert_eq!(t.stream_generation(&id), Some(g2));
}

#[test]
fn stale_header_recovers_and_initialize_reports_arrival() {
    let t = SessionTable::default();
    let now = Instant::now();
    assert_eq!(t.touch("gone", now, V), Lookup::Recovered);
    let (id, a) = t.initialize(Some("gone"), now, V, None);
    assert_eq!((id.as_str(), a), ("gone", Arrival::Reused));
    let (id2, a2) = t.initialize(Some("never-seen"), now, V, None);
    assert_eq!(a2, Arrival::Reconnected);
    assert_ne!(id2, "never-seen");
    let (_, a3) = t.initialize(None, now, V, None);
    assert_eq!(a3, Arrival::Fresh);
}

#[test]
fn identity_live_owner_is_joined_stale_owner_is_reclaimed() {
    let t = SessionTable::default();
    let now = Instant::now();
    let grace = Duration::from_secs(30);
    let (a, _) = t.initialize(None, now, V, None);
    let (b, _) = t.initialize(None, now, V, None);
    let (c, _) = t.initialize(None, now + grace * 3, V, None);
    assert_eq!(t.bind_identity(&a, "T", now, grace), Binding::Owner);
    assert_eq!(t.bind_identity(&a, "T", now, grace), Binding::Unchanged);
    assert_eq!(t.bind_identity(&b, "T", now, grace), Binding::Sibling);
    // Ending the owner promotes the sibling.
    assert!(t.delete(&a));
    assert_eq!(t.owners("T").unwrap().sessions, vec![b.clone()]);
    // b is idle past the grace and has no stream: a newcomer reclaims.
    assert_eq!(
        t.bind_identity(&c, "T", now + grace * 3, grace),
        Binding::Reclaimed { previous: b }
    );
    assert!(t.delete(&c));
    assert_eq!(t.identity_count(), 0);
}

#[test]
fn a_claim_by_announcement_never_joins_or_reclaims_another_sessions_identity() {
    let t = SessionTable::default();
    let now = Instant::now();
    let grace = Duration::from_secs(30);
    let (owner, _) = t.initialize(None, now, V, None);
    let (claimant, _) = t.initialize(None, now, V, None);
    assert_eq!(t.bind_identity(&owner, "T", now, grace), Binding::Owner);
    // A live owner: refused, and the claimant holds no route afterwards.
    assert_eq!(
        t.claim_identity(&claimant, "T", now, grace),
        Err(Holder::Live(owner.clone()))
    );
    assert_eq!(t.owners("T").unwrap().sessions, vec![owner.clone()]);
    assert_eq!(t.with(&claimant, |s| s.tuic_session.is_none()), Some(true));
    // Stale (idle past the grace, no stream): still refused to an announcement...
    let later = now + grace * 2;
    t.touch(&claimant, later, V);
    assert_eq!(
        t.claim_identity(&claimant, "T", later, grace),
        Err(Holder::Stale(owner.clone()))
    );
    // ...while the header-bound path reclaims it, and the owner may always rebind.
    let (bound, _) = t.initialize(None, later, V, None);
    assert_eq!(
        t.bind_identity(&bound, "T", later, grace),
        Binding::Reclaimed {
            previous: owner.clone()
        }
    );
    assert_eq!(
        t.claim_identity(&bound, "T", later, grace),
        Ok(Binding::Unchanged)
    );
    // An identity nobody holds is claimed.
    assert_eq!(
        t.claim_identity(&claimant, "U", later, grace),
        Ok(Binding::Owner)
    );
}

#[test]
fn reaper_frees_idle_sessions_and_keeps_addressable_identities() {
    #[derive(Debug)]
    struct Live;
    impl IdentityLiveness for Live {
        fn is_addressable(&self, t: &str) -> bool {
            t == "kept"
        }
    }
    let t = SessionTable::default();
    let now = Instant::now();
    let ttl = Duration::from_secs(60);
    let (a, _) = t.initialize(None, now, V, None);
    let (b, _) = t.initialize(None, now, V, None);
    let (c, _) = t.initialize(None, now, V, None);
    t.bind_identity(&a, "kept", now, ttl);
    t.bind_identity(&b, "gone", now, ttl);
    // c is refreshed after the snapshot time and survives.
    t.touch(&c, now + ttl, V);
    let sweep = t.reap(now + ttl, ttl, &Live);
    assert_eq!(sweep.reaped.len(), 2);
    assert_eq!(sweep.kept, vec!["kept".to_string()]);
    assert_eq!(sweep.retired, vec!["gone".to_string()]);
    assert_eq!(t.len(), 1);
    assert!(t.owners("gone").is_none());
}

#[test]
fn cap_evicts_oldest_idle_first_never_a_streaming_one_and_ids_recover() {
    let t = SessionTable::default();
    let now = Instant::now();
    let at = |ms: u64| now + Duration::from_millis(ms);
    let ids: Vec<String> = (0..5)
        .map(|i| t.initialize(None, at(i), V, None).0)
        .collect();
    // The oldest holds a stream; the second oldest was used again since.
    let (_g, _rx) = t.subscribe(&ids[0], at(0), V);
    t.touch(&ids[1], at(10), V);
    assert!(t.evict_over_cap(5, &NoPtys).reaped.is_empty());
    t.initialize(None, at(20), V, None);
    t.initialize(None, at(21), V, None);
    let sweep = t.evict_over_cap(5, &NoPtys);
    assert_eq!(sweep.reaped, vec![ids[2].clone(), ids[3].clone()]);
    assert_eq!((t.len(), t.evicted()), (5, 2));
    assert!(t.stream_generation(&ids[0]).is_some());
    // Evicted, not retired: the id auto-recovers.
    assert!(!t.is_retired(&ids[2]));
    assert_eq!(t.touch(&ids[2], at(30), V), Lookup::Recovered);
    assert_eq!(t.evict_over_cap(5, &NoPtys).reaped, vec![ids[4].clone()]);
    assert_eq!(t.touch(&ids[1], at(31), V), Lookup::Live);
}

#[test]
fn minted_ids_are_stored_compactly_and_other_ids_keep_their_text() {
    let (sid, text) = Sid::mint();
    assert_eq!(Sid::parse(&text), (sid, true));
    let t = SessionTable::default();
    let now = Instant::now();
    let at = |ms: u64| now + Duration::from_millis(ms);
    let others = ["gone", &text.to_uppercase(), &text.replace('-', "")].map(String::from);
    for other in &others {
        let (k, minted) = Sid::parse(other);
        assert!(!minted);
        assert_ne!(k, sid);
        assert_eq!(t.touch(other, at(1), V), Lookup::Recovered);
    }
    // Every id comes back as its own text when the reaper names what it removed.
    let (id, _) = t.initialize(None, at(1), V, None);
    let mut reaped = t.reap(at(100_000), Duration::from_secs(1), &NoPtys).reaped;
    reaped.sort();
    let mut want: Vec<String> = others.to_vec();
    want.push(id);
    want.sort();
    assert_eq!(reaped, want);
    assert!(t.lock().texts.is_empty());
    // An idle entry is one word and a null box; its key is 16 bytes.
    assert_eq!(std::mem::size_of::<McpSession>(), 16);
    assert_eq!(std::mem::size_of::<Sid>(), 16);
}

#[test]
fn the_packed_word_keeps_time_revision_and_flags_apart() {
    let mut s = McpSession::new(123_456_789, 3);
    s.set_client(Some("claude-code"));
    assert_eq!((s.last_us(), s.version()), (123_456_789, 3));
    s.set_last_us(u64::MAX);
    assert_eq!(s.last_us(), US_MASK);
    assert_eq!(s.version(), 3);
    s.set_version(255);
    assert_eq!((s.last_us(), s.version()), (US_MASK, 255));
    assert_eq!(
        s.claude_code(),
        crate::mcp::registry::is_claude_code(Some("claude-code"))
    );
    assert!(s.cold.is_none());
    s.set_tuic_session(Some("t".into()));
    assert_eq!(s.tuic_session(), Some("t"));
    assert_eq!(s.set_tuic_session(None).as_deref(), Some("t"));
    assert!(s.cold.is_none(), "the box goes with its last field");
}
