//! `bench outbox-store [N] [KiB]`: what one durable outbox change costs as the outbox fills —
//! the per-message records the node stores today against the whole-outbox record earlier
//! versions rewrote on every change, both committed to a real `redb` file in the same run.

use std::time::{Duration, Instant};

use tuic_node::ext::mail::persist_outbox;
use tuic_node::store::Store;
use tuic_proto::peer::{AckOutcome, Outbox, OutboxLimits, WireMessage};

fn message(i: usize, body: &str) -> WireMessage {
    WireMessage {
        message_id: format!("m{i:06}"),
        from: "nodeb/alice".into(),
        to: "bob".into(),
        message: body.to_owned(),
        timestamp_ms: 1_764_684_000_000,
        from_name: Some("alice".into()),
        kind: None,
        lifecycle: None,
    }
}

/// Commit times of every change: `n` pushes into an empty outbox, then `n` acknowledgements.
fn run(n: usize, body: &str, whole: bool) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(&dir.path().join("state.redb"))?;
    let limits = OutboxLimits {
        max_messages: n,
        max_bytes: u64::MAX / 2,
        ..OutboxLimits::default()
    };
    let mut o = Outbox::with_limits("nodec", limits);
    let commit = |o: &mut Outbox| -> anyhow::Result<Duration> {
        let t = Instant::now();
        if whole {
            o.take_changes();
            store.put_legacy_peer_outbox("nodec", &serde_json::to_vec(o)?)?;
        } else {
            persist_outbox(&store, "nodec", o)?;
        }
        Ok(t.elapsed())
    };
    let mut fill = Vec::with_capacity(n);
    for i in 0..n {
        o.push(message(i, body))?;
        fill.push(commit(&mut o)?);
    }
    let mut drain = Vec::with_capacity(n);
    for i in 0..n {
        o.on_ack(&format!("m{i:06}"), AckOutcome::Delivered);
        drain.push(commit(&mut o)?);
    }
    Ok((fill, drain))
}

fn mean_ms(d: &[Duration]) -> f64 {
    d.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / d.len().max(1) as f64
}

/// Prints mean commit time per change at the start and end of the fill and of the drain, for
/// both layouts, and the ratio.
pub fn run_both(n: usize, kib: usize) -> anyhow::Result<()> {
    let body = "x".repeat(kib * 1024);
    let tenth = (n / 10).max(1);
    println!("outbox-store messages={n} body={kib} KiB (redb file, committed per change)");
    let mut totals = Vec::new();
    for (name, whole) in [
        ("whole record (before)", true),
        ("per message (now)", false),
    ] {
        let (fill, drain) = run(n, &body, whole)?;
        let total: Duration = fill.iter().chain(&drain).sum();
        println!(
            "  {name:<22} fill: first {tenth} {:.3} ms, last {tenth} {:.3} ms; drain: first {tenth} {:.3} ms, last {tenth} {:.3} ms; all {} changes {:.2} s",
            mean_ms(&fill[..tenth]),
            mean_ms(&fill[n - tenth..]),
            mean_ms(&drain[..tenth]),
            mean_ms(&drain[n - tenth..]),
            2 * n,
            total.as_secs_f64()
        );
        totals.push(total.as_secs_f64());
    }
    println!(
        "  per-message / whole-record time for all changes: {:.3}x",
        totals[1] / totals[0]
    );
    Ok(())
}
