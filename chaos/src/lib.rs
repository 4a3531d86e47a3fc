//! tuic-chaos: fault scenarios across real hosts in network namespaces.
//!
//! A bed ([`bed`]) is a hub and two nodes, each in its own namespace, running the real
//! binaries; the hub reaches node B through a userspace delay proxy ([`proxy`]) and node C
//! directly. Scenarios ([`scenario`]) kill and restart processes, cut links, add delay and
//! loss, while three workloads run: a byte-checked stream through the hub ([`stream`]), mirror
//! and routing checks, and agent mail between the nodes ([`mail`], over MCP via [`mcp`]).
//!
//! It never sends traffic beyond loopback and its own namespaces, and it does not simulate:
//! the sans-IO simulator of the peer link lives in `proto`. It needs root (namespaces).

pub mod bed;
pub mod mail;
pub mod mcp;
pub mod proxy;
pub mod scenario;
pub mod stream;

pub use bed::cleanup;
pub use scenario::{Plan, Scenario, Summary};

/// Runs `scenarios` (all when empty) with `plan`, one after the other; every scenario runs
/// even when an earlier one failed. Returns the summaries and the failures.
pub async fn run_all(plan: &Plan, scenarios: &[Scenario]) -> (Vec<Summary>, Vec<anyhow::Error>) {
    let list: Vec<Scenario> = if scenarios.is_empty() {
        Scenario::ALL
            .into_iter()
            .filter(|s| s.can_fault(plan.victim))
            .collect()
    } else {
        scenarios.to_vec()
    };
    let (mut ok, mut failed) = (Vec::new(), Vec::new());
    for s in list {
        match scenario::run(s, plan).await {
            Ok(sum) => ok.push(sum),
            Err(e) => {
                eprintln!("chaos scenario={} FAILED: {e:#}", s.name());
                failed.push(e);
            }
        }
    }
    (ok, failed)
}
