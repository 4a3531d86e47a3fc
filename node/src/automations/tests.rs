//! The automation service against a real store: definitions, schedules, firings.

use super::*;

fn open() -> (tempfile::TempDir, Automations) {
    let d = tempfile::tempdir().unwrap();
    let s = Arc::new(Store::open(&d.path().join("s.redb")).unwrap());
    let a = Automations::open(s, 1_000_000).unwrap();
    (d, a)
}

fn create(a: &Automations, schedule: &str, now: u64) -> String {
    let act = parse_action(
        &json!({"action": "create", "definition": {"name": "n", "schedule": schedule}}),
    )
    .unwrap();
    a.execute(act, Some("S"), true, now).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn every_second_fires_once_per_second_and_stops_when_paused() {
    let (_d, a) = open();
    let id = create(&a, "* * * * * *", 1_000_000);
    // Virtual time: step 10 s in 100 ms ticks.
    let mut fired = 0;
    let mut now = 1_000_000;
    while now < 1_010_000 {
        now += 100;
        fired += a.take_due(now).0.len();
    }
    assert_eq!(fired, 10);
    a.execute(DefinitionAction::Pause { id: id.clone() }, None, false, now)
        .unwrap();
    while now < 1_015_000 {
        now += 100;
        assert!(a.take_due(now).0.is_empty());
    }
    a.execute(DefinitionAction::Resume { id }, None, false, now)
        .unwrap();
    let mut n = 0;
    for _ in 0..30 {
        now += 100;
        n += a.take_due(now).0.len();
    }
    assert_eq!(n, 3);
}

#[test]
fn a_late_scheduler_skips_rather_than_bursts_and_restart_catches_up_once() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("s.redb");
    {
        let a = Automations::open(Arc::new(Store::open(&path).unwrap()), 0).unwrap();
        create(&a, "* * * * * *", 0);
        assert_eq!(a.take_due(1_000).0.len(), 1);
        // 10 s late: one firing, not ten.
        assert_eq!(a.take_due(11_500).0.len(), 1);
        assert_eq!(a.take_due(11_600).0.len(), 0);
    }
    // Down for a minute: one catch-up firing at start.
    let a = Automations::open(Arc::new(Store::open(&path).unwrap()), 80_000).unwrap();
    let (due, next) = a.take_due(80_000);
    assert_eq!(due.len(), 1);
    assert!(due[0].0.catch_up);
    assert_eq!(due[0].0.seq, 3);
    assert_eq!(next, Some(81_000));
}

#[test]
fn schedules_are_read_in_their_fixed_offset_and_bad_offsets_are_refused() {
    // 2025-12-05T00:00:00Z.
    let midnight = 1_764_892_800_000;
    let hour = 3_600_000;
    let at = |tz: Option<&str>| {
        next_after(&Schedule::parse("0 9 * * *", tz).unwrap(), midnight).unwrap()
    };
    assert_eq!(at(None), midnight + 9 * hour);
    assert_eq!(at(Some("UTC")), midnight + 9 * hour);
    assert_eq!(at(Some("+02:00")), midnight + 7 * hour);
    assert_eq!(at(Some("-0530")), midnight + 14 * hour + hour / 2);
    for bad in ["+2", "+15:00", "02:00", "+02:60", "+0:200"] {
        let e = parse_tz(Some(bad)).unwrap_err();
        assert_eq!(e.code(), "invalid_arguments", "{bad}");
        assert!(e.to_string().contains("fixed UTC offset"), "{e}");
    }
    // Through the service: stored with the definition, refused without a change.
    let (_d, a) = open();
    let act = |v| parse_action(&v).unwrap();
    let id = a
        .execute(act(json!({"action": "create", "definition": {"name": "n", "schedule": "0 9 * * *", "tz": "+02:00"}})), Some("S"), true, midnight)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(a.take_due(midnight + 7 * hour - 1).0.len(), 0);
    assert_eq!(a.take_due(midnight + 7 * hour).0.len(), 1);
    let e = a
        .execute(act(json!({"action": "update", "id": id, "definition": {"name": "n", "schedule": "0 9 * * *", "tz": "Mars/Olympus"}})), None, false, midnight + 8 * hour)
        .unwrap_err();
    assert_eq!(e.code(), "invalid_arguments");
    let d = a
        .execute(
            DefinitionAction::Get { id },
            None,
            false,
            midnight + 8 * hour,
        )
        .unwrap();
    assert_eq!(d["tz"], "+02:00");
    assert_eq!(
        a.execute(act(json!({"action": "create", "definition": {"name": "n", "schedule": "0 9 * * *", "tz": "Europe/Atlantis"}})), Some("S"), true, 0)
            .unwrap_err()
            .code(),
        "invalid_arguments"
    );
}

fn utc_ms(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> u64 {
    chrono::Utc
        .with_ymd_and_hms(y, mo, d, h, mi, 0)
        .single()
        .unwrap()
        .timestamp_millis() as u64
}

/// Steps the service through `[from, to)` a minute at a time; the scheduled instants fired.
fn fire_between(a: &Automations, from: u64, to: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut now = from;
    while now < to {
        now += 60_000;
        out.extend(
            a.take_due(now)
                .0
                .into_iter()
                .map(|(f, _)| f.scheduled_at_ms),
        );
    }
    out
}

fn create_in(a: &Automations, schedule: &str, tz: &str, now: u64) -> String {
    let act = parse_action(
        &json!({"action": "create", "definition": {"name": "n", "schedule": schedule, "tz": tz}}),
    )
    .unwrap();
    a.execute(act, Some("S"), true, now).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_named_zone_follows_its_offset_across_the_year() {
    let s = Schedule::parse("0 9 * * *", Some("Europe/Berlin")).unwrap();
    // Winter: CET (+01:00); summer: CEST (+02:00).
    assert_eq!(
        next_after(&s, utc_ms(2026, 1, 15, 0, 0)),
        Some(utc_ms(2026, 1, 15, 8, 0))
    );
    assert_eq!(
        next_after(&s, utc_ms(2026, 7, 15, 0, 0)),
        Some(utc_ms(2026, 7, 15, 7, 0))
    );
    let ny = Schedule::parse("0 9 * * *", Some("America/New_York")).unwrap();
    assert_eq!(
        next_after(&ny, utc_ms(2026, 1, 15, 0, 0)),
        Some(utc_ms(2026, 1, 15, 14, 0))
    );
}

#[test]
fn a_firing_in_the_skipped_hour_fires_once_at_the_end_of_the_gap() {
    // Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00Z); 02:30 never exists.
    let (_d, a) = open();
    let from = utc_ms(2026, 3, 28, 12, 0);
    create_in(&a, "30 2 * * *", "Europe/Berlin", from);
    let fired = fire_between(&a, from, utc_ms(2026, 3, 30, 12, 0));
    assert_eq!(
        fired,
        vec![
            // The first valid instant after the gap: 03:00 CEST.
            utc_ms(2026, 3, 29, 1, 0),
            // The next night in summer time: 02:30 CEST.
            utc_ms(2026, 3, 30, 0, 30),
        ]
    );
    // An hourly interval schedule simply has no 02:00 that night: 23 firings in the day.
    let (_d, a) = open();
    let from = utc_ms(2026, 3, 28, 23, 0); // 00:00 CET, 29 March.
    create_in(&a, "0 * * * *", "Europe/Berlin", from - 1);
    assert_eq!(
        fire_between(&a, from - 60_000, utc_ms(2026, 3, 29, 22, 0) - 60_000).len(),
        23
    );
}

#[test]
fn a_firing_in_the_repeated_hour_fires_once() {
    // Europe/Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET (01:00Z); 02:30 happens
    // at 00:30Z and again at 01:30Z.
    let (_d, a) = open();
    let from = utc_ms(2026, 10, 24, 12, 0);
    create_in(&a, "30 2 * * *", "Europe/Berlin", from);
    let fired = fire_between(&a, from, utc_ms(2026, 10, 26, 12, 0));
    assert_eq!(
        fired,
        vec![
            // Its first pass only.
            utc_ms(2026, 10, 25, 0, 30),
            // The next night in winter time: 02:30 CET.
            utc_ms(2026, 10, 26, 1, 30),
        ]
    );
}

#[test]
fn a_bad_zone_name_is_a_clear_error_and_changes_nothing() {
    for bad in ["Europe/Atlantis", "europe/berlin", "Berlin", "UTC+2"] {
        let e = parse_tz(Some(bad)).unwrap_err();
        assert_eq!(e.code(), "invalid_arguments", "{bad}");
        assert!(
            e.to_string().contains("not a known time zone"),
            "{bad}: {e}"
        );
        assert!(e.to_string().contains(bad), "{e}");
    }
    let (_d, a) = open();
    let id = create_in(&a, "0 9 * * *", "Europe/Berlin", 0);
    let e = a
        .execute(parse_action(&json!({"action": "update", "id": id, "definition": {"name": "n", "schedule": "0 9 * * *", "tz": "Mars/Olympus"}})).unwrap(), None, false, 1)
        .unwrap_err();
    assert_eq!(e.code(), "invalid_arguments");
    let d = a
        .execute(DefinitionAction::Get { id }, None, false, 2)
        .unwrap();
    assert_eq!(d["tz"], "Europe/Berlin");
    assert_eq!(
        a.execute(DefinitionAction::List {}, None, false, 2)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn creation_needs_a_bound_session_and_updates_keep_the_creator() {
    let (_d, a) = open();
    let act = |v| parse_action(&v).unwrap();
    let e = a
        .execute(
            act(json!({"action": "create", "definition": {"name": "n", "schedule": "0 * * * *"}})),
            None,
            true,
            0,
        )
        .unwrap_err();
    assert_eq!(e.code(), "not_bound");
    let id = create(&a, "0 * * * *", 0);
    a.execute(
        act(json!({"action": "update", "id": id, "definition": {"name": "m", "schedule": "5 * * * *", "created_by_session": "EVIL"}})),
        Some("OTHER"),
        true,
        1,
    )
    .unwrap();
    let d = a
        .execute(DefinitionAction::Get { id: id.clone() }, None, false, 2)
        .unwrap();
    assert_eq!(d["created_by_session"], "S");
    assert_eq!(d["name"], "m");
    let e = a
        .execute(act(json!({"action": "update", "id": id, "definition": {"name": "m", "schedule": "not cron"}})), None, false, 3)
        .unwrap_err();
    assert_eq!(e.code(), "invalid_arguments");
    assert_eq!(
        a.execute(DefinitionAction::Get { id }, None, false, 2)
            .unwrap()["schedule"],
        "5 * * * *"
    );
}
