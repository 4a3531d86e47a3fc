//! The short chaos run for CI: each scenario once with the short plan (tens of mail messages
//! per direction, well under 1 MiB of stream data), against the debug binaries. Each test
//! brings up its own hub and two nodes in network namespaces and tears them down on return or
//! panic. `.config/nextest.toml` runs these one at a time (the timing bounds are real).

use tuic_chaos::{Plan, Scenario, scenario};

async fn short(which: Scenario) {
    short_with(which, &Plan::short()).await;
}

async fn short_with(which: Scenario, plan: &Plan) {
    let s = scenario::run(which, plan)
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

/// Node C has no delay proxy in front of it: the hub reaches it directly, so its held mail
/// comes back as one burst (the path that once evicted unread mail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_kill_and_restart_of_node_c() {
    let plan = Plan {
        victim: 1,
        ..Plan::short()
    };
    short_with(Scenario::NodeKill, &plan).await;
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

#[test]
fn cleanup_removes_a_leftover_bed_and_its_processes() {
    // A bed whose harness died: namespaces with the chaos prefix and a process inside.
    let net = tuic_tests::netns::Net::star_prefixed(tuic_chaos::bed::PREFIX, 1).unwrap();
    let ns = net.hub().to_owned();
    // The child says when it is inside the namespace: `ip netns exec` enters it before the
    // shell runs, so a line on stdout means `ip netns pids` will list it. Without this, cleanup
    // could list the namespace's pids before the child joined, and the child would then sleep
    // on in a namespace nobody names.
    let mut child = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            "sh",
            "-c",
            "echo inside; exec sleep 300",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "inside");
    // What a SIGKILLed harness leaves behind: no Drop ran.
    // Only this bed's namespaces are named: a chaos run going on beside the suite is left alone
    // (`chaos cleanup` removes every leftover by prefix, through the same code).
    let names = vec![ns.clone(), net.node(0).to_owned()];
    std::mem::forget(net);
    let removed = tuic_chaos::bed::cleanup_named(names.clone()).unwrap();
    assert_eq!(removed, names);
    let left = tuic_tests::netns::namespaces_with_prefix(tuic_chaos::bed::PREFIX).unwrap();
    assert!(!left.iter().any(|n| names.contains(n)), "{left:?}");
    // The process inside was killed by cleanup, not by this test.
    // Bounded: a child cleanup missed fails the test in seconds, not at the 300 s sleep.
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait()));
    let Ok(status) = rx.recv_timeout(std::time::Duration::from_secs(10)) else {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
        panic!("cleanup left pid {pid} running");
    };
    let status = status.unwrap();
    assert!(!status.success(), "{status:?}");
}

#[test]
fn the_chaos_command_refuses_unknown_modes_and_scenarios() {
    for args in [&["sideways"][..], &["short", "meteor"][..]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_chaos"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("usage: chaos"), "{err}");
        assert!(
            err.contains("node-kill hub-kill partition delay loss"),
            "{err}"
        );
    }
}
