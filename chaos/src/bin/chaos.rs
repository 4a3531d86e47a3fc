//! `chaos [short|long|cleanup] [--fault-node b|c] [--transport auto|quic|websocket|both] [scenario…]`: runs the fault scenarios against
//! the binaries built beside this one (`cargo build --workspace --bins`, or `--release`), one
//! summary line per scenario; `--fault-node c` aims the node faults at node C instead of B
//! (delay needs B's proxy and is skipped); `--transport` picks node C's link carrier (`both`: the run over
//! the WebSocket, then over QUIC); `cleanup` removes leftover namespaces of an
//! interrupted run. Needs root.

use std::process::ExitCode;

use tuic_chaos::{Plan, Scenario};

fn usage() -> ExitCode {
    eprintln!(
        "usage: chaos [short|long|cleanup] [--fault-node b|c] [--transport auto|quic|websocket|both] [scenario…]\nscenarios: {}",
        Scenario::ALL.map(Scenario::name).join(" ")
    );
    ExitCode::from(2)
}

/// Runs the scenarios once, or with `--transport both` once over the WebSocket and once over
/// QUIC (node C's link), printing each run's lines under a heading.
async fn run_transports(
    plan: &Plan,
    scenarios: &[Scenario],
) -> (Vec<tuic_chaos::Summary>, Vec<anyhow::Error>) {
    if plan.transport != "both" {
        return tuic_chaos::run_all(plan, scenarios).await;
    }
    let (mut ok, mut failed) = (Vec::new(), Vec::new());
    for t in ["websocket", "quic"] {
        println!(
            "== transport {t} (node C's link; node B behind the TCP delay proxy: websocket) =="
        );
        let p = Plan {
            transport: t.into(),
            ..plan.clone()
        };
        let (o, f) = tuic_chaos::run_all(&p, scenarios).await;
        ok.extend(o);
        failed.extend(f);
    }
    (ok, failed)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, rest) = match args.split_first() {
        Some((m, rest)) => (m.as_str(), rest),
        None => ("short", &args[..]),
    };
    let mut plan = match mode {
        "short" => Plan::short(),
        "long" => Plan::long(),
        "cleanup" => {
            return match tuic_chaos::cleanup() {
                Ok(names) => {
                    println!("removed {} namespace(s): {}", names.len(), names.join(" "));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("cleanup failed: {e:#}");
                    ExitCode::FAILURE
                }
            };
        }
        _ => return usage(),
    };
    let mut scenarios = Vec::new();
    let mut rest = rest.iter();
    while let Some(name) = rest.next() {
        if name == "--transport" {
            match rest.next().map(String::as_str) {
                Some(t @ ("auto" | "quic" | "websocket" | "both")) => plan.transport = t.into(),
                _ => return usage(),
            }
            continue;
        }
        if name == "--fault-node" {
            plan.victim = match rest.next().map(String::as_str) {
                Some("b") => 0,
                Some("c") => 1,
                _ => return usage(),
            };
            continue;
        }
        match Scenario::parse(name) {
            Some(s) => scenarios.push(s),
            None => {
                eprintln!("unknown scenario {name:?}");
                return usage();
            }
        }
    }
    // Leftovers of an interrupted run would only confuse this one.
    if let Ok(names) = tuic_chaos::cleanup()
        && !names.is_empty()
    {
        eprintln!("removed leftover namespaces: {}", names.join(" "));
    }
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    // Ctrl-C drops the running scenario, whose bed then kills its processes and removes its
    // namespaces.
    let Some((ok, failed)) = rt.block_on(async {
        tokio::select! {
            r = run_transports(&plan, &scenarios) => Some(r),
            _ = tokio::signal::ctrl_c() => None,
        }
    }) else {
        eprintln!("chaos: interrupted; the running scenario's bed was torn down");
        return ExitCode::from(130);
    };
    println!(
        "chaos mode={mode} scenarios_passed={} scenarios_failed={}",
        ok.len(),
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
