//! The short chaos run for CI: each scenario once with the short plan (tens of mail messages
//! per direction, well under 1 MiB of stream data), against the debug binaries. Each test
//! brings up its own hub and two nodes in network namespaces and tears them down on return or
//! panic. `.config/nextest.toml` runs these one at a time (the timing bounds are real).

use tuic_chaos::{Plan, Scenario, scenario};

async fn short(which: Scenario) {
    let s = scenario::run(which, &Plan::short())
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    // `run` already checked the invariants; the fields that must be present are, too.
    assert_eq!(s.stream.ok_bytes, s.stream.expected);
    assert!(s.recovery.is_some(), "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_kill_and_restart() {
    short(Scenario::NodeKill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_kill_and_restart() {
    short(Scenario::HubKill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_of_node_b() {
    short(Scenario::Partition).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_100ms_through_the_proxy() {
    short(Scenario::Delay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_5_percent() {
    short(Scenario::Loss).await;
}
