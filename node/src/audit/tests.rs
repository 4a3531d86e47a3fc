use super::*;

fn audit(dir: &std::path::Path, max_entries: u64, max_age_ms: u64) -> (Arc<Store>, Audit) {
    let store = Arc::new(Store::open(&dir.join("state.redb")).unwrap());
    let a = Audit::open(AuditEnv {
        store: store.clone(),
        bounds: Arc::new(move || Bounds {
            max_entries,
            max_age_ms,
        }),
    })
    .unwrap();
    (store, a)
}

#[test]
fn entries_page_newest_first_with_filters() {
    let d = tempfile::tempdir().unwrap();
    let (_s, a) = audit(d.path(), 100, u64::MAX);
    let who = Actor::local();
    a.record_many(
        [
            Event::new("attach", &who).session("s1").with("mode", "rw"),
            Event::new("input", &who).session("s1").with("bytes", 3),
            Event::new("attach", &who).session("s2"),
        ],
        1_000,
    )
    .unwrap();
    a.record_many([Event::new("login", &who)], 2_000).unwrap();
    let all = a.page(&Query::default()).unwrap();
    assert_eq!(
        all.entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [4, 3, 2, 1]
    );
    assert_eq!((all.total, all.dropped), (4, 0));
    let attaches = a
        .page(&Query {
            kind: Some("attach".into()),
            ..Query::default()
        })
        .unwrap();
    assert_eq!(attaches.entries.len(), 2);
    let s1 = a
        .page(&Query {
            session: Some("s1".into()),
            ..Query::default()
        })
        .unwrap();
    assert_eq!(s1.entries.len(), 2);
    assert_eq!(s1.entries[0].detail["bytes"], 3);
    let late = a
        .page(&Query {
            since_ms: Some(1_500),
            ..Query::default()
        })
        .unwrap();
    assert_eq!(late.entries.len(), 1);
    // Paging backwards: two, then the rest.
    let p1 = a
        .page(&Query {
            limit: Some(2),
            ..Query::default()
        })
        .unwrap();
    assert_eq!(p1.next_before, Some(3));
    let p2 = a
        .page(&Query {
            limit: Some(2),
            before: p1.next_before,
            ..Query::default()
        })
        .unwrap();
    assert_eq!(p2.entries.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 1]);
    assert_eq!(p2.next_before, None);
}

#[test]
fn fields_are_clipped_so_an_entry_stays_small() {
    let d = tempfile::tempdir().unwrap();
    let (_s, a) = audit(d.path(), 100, u64::MAX);
    let long = "x".repeat(100_000);
    let actor = Actor {
        who: long.clone(),
        via: "tcp".into(),
        address: Some(long.clone()),
    };
    a.record(Event::new("login_failed", &actor).with("user_agent", long))
        .unwrap();
    let e = &a.page(&Query::default()).unwrap().entries[0];
    assert!(serde_json::to_vec(e).unwrap().len() < 1024);
}

#[test]
fn old_entries_go_by_age() {
    let d = tempfile::tempdir().unwrap();
    let (_s, a) = audit(d.path(), 100, 1_000);
    a.record_many([Event::new("login", &Actor::local())], 1_000)
        .unwrap();
    a.record_many([Event::new("logout", &Actor::local())], 5_000)
        .unwrap();
    let p = a.page(&Query::default()).unwrap();
    assert_eq!(p.entries.len(), 1);
    assert_eq!(p.entries[0].kind, "logout");
    assert_eq!(p.dropped, 1);
}

/// The acceptance bound: a million synthetic entries leave the newest `max_entries`, the rest
/// counted as dropped, and the store file within the size the bound implies.
#[test]
fn a_million_entries_keep_the_bound_and_count_the_dropped() {
    let d = tempfile::tempdir().unwrap();
    let max = 10_000u64;
    let (_s, a) = audit(d.path(), max, u64::MAX);
    let actor = Actor {
        who: "login:abcdef012345".into(),
        via: "tcp".into(),
        address: Some("100.64.0.7".into()),
    };
    let total = 1_000_000u64;
    let batch = 10_000u64;
    let size = || {
        std::fs::metadata(d.path().join("state.redb"))
            .unwrap()
            .len()
    };
    let mut full_size = 0;
    for b in 0..total / batch {
        let evs = (0..batch).map(|i| {
            Event::new("input", &actor)
                .session("tu-1")
                .with("bytes", b * batch + i)
        });
        a.record_many(evs, 1_000 + b).unwrap();
        // Once the log is full and churning, the file has the size it keeps.
        if b == 3 {
            full_size = size();
        }
    }
    let p = a
        .page(&Query {
            limit: Some(1),
            ..Query::default()
        })
        .unwrap();
    assert_eq!(p.total, max);
    assert_eq!(p.dropped, total - max);
    assert_eq!(p.entries[0].seq, total);
    let oldest = a
        .page(&Query {
            before: Some(total - max + 2),
            ..Query::default()
        })
        .unwrap();
    assert_eq!(oldest.entries.last().unwrap().seq, total - max + 1);
    // The file is redb's allocation, which grows in regions (here one step, to ~130 MiB, on
    // the second commit) and reuses freed pages: 960,000 more entries after the log filled
    // do not grow it at all.
    assert!(
        size() <= full_size,
        "the store grew from {full_size} to {} bytes",
        size()
    );
    // The log's own data: every entry ≤ 1 KiB, so ≤ max × 1 KiB.
    let live: usize = a
        .page(&Query {
            limit: Some(MAX_PAGE),
            ..Query::default()
        })
        .unwrap()
        .entries
        .iter()
        .map(|e| serde_json::to_vec(e).unwrap().len())
        .max()
        .unwrap();
    assert!(live < 1024);
}
