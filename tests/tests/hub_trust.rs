//! Issue 47 on a hub, in network namespaces (real `tuic-hub` and `tuic-node` over veth
//! links): the hub's `GET /audit` holds its own entries and every connected node's, each with
//! its `host` (paged across hosts, filtered by host and kind), `tuic audit` on the hub prints
//! them; an attach and input through the hub are recorded on the node as `via: hub` with the
//! hub's user; the hub's connects, disconnects and token rotations are audited.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use tuic_tests::fed::FedBed;
use tuic_tests::{ipc, run_with_stdin};

async fn audit(socket: &Path, query: &str) -> Value {
    let r = ipc(socket, "GET", &format!("/audit?{query}"), None)
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn entries(v: &Value) -> Vec<Value> {
    v["entries"].as_array().cloned().unwrap_or_default()
}

/// Waits (bounded) until the hub's audit holds an entry satisfying `want`; returns it.
async fn await_entry(hub: &Path, query: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = audit(hub, query).await;
        if let Some(e) = entries(&v).into_iter().find(|e| want(e)) {
            return e;
        }
        assert!(Instant::now() < deadline, "no such entry: {v:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_hub_audit_holds_every_hosts_entries_with_host_names_and_its_own_acts() {
    let bed = FedBed::start(1).await.unwrap();
    let hub = &bed.hub.socket;
    let node = bed.nodes[0].proc();

    // The hub's own act: the connection came up.
    let up = await_entry(hub, "kind=hub_connected", |e| e["host"] == "local").await;
    assert_eq!(up["detail"]["connection"], "nodeb");
    assert_eq!(up["via"], "hub");

    // A session on node B, typed into and attached through the hub.
    let r = ipc(
        hub,
        "POST",
        "/sessions?host=nodeb",
        Some(json!({"rows": 24, "cols": 80, "shell": "/bin/sh"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let sid = r.json()["session_id"].as_str().unwrap().to_owned();
    let enc = format!("nodeb%2F{sid}");
    let w = ipc(
        hub,
        "POST",
        &format!("/sessions/{enc}/write"),
        Some(json!({"data": "echo via-hub-$((6*7))\n"})),
    )
    .await
    .unwrap();
    assert_eq!(w.status, 200);
    let stream = tokio::net::UnixStream::connect(hub).await.unwrap();
    let (mut ws, _) =
        tokio_tungstenite::client_async(format!("ws://localhost/sessions/{enc}/stream"), stream)
            .await
            .unwrap();
    // One frame proves the relay is open (the node audited the attach before upgrading).
    tokio::time::timeout(Duration::from_secs(15), ws.next())
        .await
        .unwrap();

    // On the node itself: the hub's user, from the hub.
    let attach = await_entry(&node.socket, "kind=attach", |e| e["session"] == sid).await;
    assert_eq!(attach["via"], "hub", "{attach}");
    assert_eq!(attach["who"], "hub:local", "{attach}");
    let input = await_entry(&node.socket, "kind=input", |e| e["session"] == sid).await;
    assert_eq!(input["via"], "hub");
    assert_eq!(input["who"], "hub:local");
    assert_eq!(input["detail"]["bytes"], "echo via-hub-$((6*7))\n".len());

    // On the hub: the same entries, named by host, beside the hub's own.
    let all = audit(hub, "limit=1000").await;
    let es = entries(&all);
    assert!(
        es.iter()
            .any(|e| e["host"] == "nodeb" && e["kind"] == "attach" && e["session"] == sid)
    );
    assert!(
        es.iter()
            .any(|e| e["host"] == "local" && e["kind"] == "hub_connected")
    );
    let hosts: Vec<&str> = all["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["local", "nodeb"]);
    // Newest first across hosts.
    let times: Vec<u64> = es.iter().map(|e| e["at_ms"].as_u64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    // Filters: one host, one kind, a hub address as the session.
    let only_b = entries(&audit(hub, "host=nodeb&limit=1000").await);
    assert!(!only_b.is_empty() && only_b.iter().all(|e| e["host"] == "nodeb"));
    let inputs = entries(&audit(hub, "kind=input&limit=1000").await);
    assert!(!inputs.is_empty() && inputs.iter().all(|e| e["kind"] == "input"));
    let by_addr = entries(&audit(hub, &format!("session=nodeb%2F{sid}&limit=1000")).await);
    assert!(
        by_addr.len() >= 2
            && by_addr
                .iter()
                .all(|e| e["session"] == sid && e["host"] == "nodeb")
    );
    // Paging across hosts: pages of 2 cover the whole log once, in order.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("limit=2&cursor={c}"),
            None => "limit=2".to_owned(),
        };
        let page = audit(hub, &q).await;
        let got = entries(&page);
        assert!(got.len() <= 2);
        paged.extend(got);
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.replace(':', "%3A").replace(',', "%2C")),
            None => break,
        }
        assert!(paged.len() < 10_000, "paging does not end");
    }
    let key = |e: &Value| format!("{}/{}", e["host"], e["seq"]);
    let mut seen: Vec<String> = paged.iter().map(key).collect();
    let full = entries(&audit(hub, "limit=1000").await);
    // Entries written after the first page (the hub's own reads are not audited; a node may
    // add some) are not required; every paged one is unique and in the full log.
    let n = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n, "an entry came twice");
    let full_keys: Vec<String> = full.iter().map(key).collect();
    assert!(seen.iter().all(|k| full_keys.contains(k)));
    assert!(n >= es.len(), "paging lost entries: {n} < {}", es.len());

    // `tuic audit` on the hub prints each entry's host.
    let sandbox = tempfile::tempdir().unwrap();
    let out = tuic_tests::bridge::tuic(
        sandbox.path(),
        &["audit", "--host", "nodeb", "--kind", "attach"],
        &[("TUIC_SOCKET", hub.to_str().unwrap())],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("nodeb") && l.contains("attach") && l.contains("hub:local")),
        "{text}"
    );

    // A partition: the hub records the disconnect and names the host it cannot read.
    bed.net.set_link(0, false).unwrap();
    bed.wait_up("nodeb", false, Duration::from_secs(30))
        .await
        .unwrap();
    let down = await_entry(hub, "kind=hub_disconnected", |_| true).await;
    assert_eq!(down["detail"]["connection"], "nodeb");
    let v = audit(hub, "limit=1000").await;
    let b = v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == "nodeb")
        .unwrap()
        .clone();
    assert_eq!(b["error"], "not connected", "{v:#}");
    assert!(entries(&v).iter().all(|e| e["host"] == "local"));
    bed.net.set_link(0, true).unwrap();
    bed.wait_up("nodeb", true, Duration::from_secs(45))
        .await
        .unwrap();

    // A token rotation: the node rotates, the hub is told the new token and redials with it.
    let r = ipc(&node.socket, "POST", "/auth/token/rotate", None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let dir = bed.nodes[0].dir.path().to_str().unwrap().to_owned();
    let (_, token, _) = run_with_stdin("tuic-node", &["token", "--config-dir", &dir], "").unwrap();
    let hub_dir = bed.hub_dir.path().to_str().unwrap().to_owned();
    let (code, _, err) = run_with_stdin(
        "tuic-hub",
        &[
            "connect",
            "--config-dir",
            &hub_dir,
            "--id",
            "nodeb",
            "--url",
            &bed.nodes[0].url,
            "--token-stdin",
        ],
        token.trim(),
    )
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let rotated = await_entry(hub, "kind=token_rotated", |e| e["host"] == "local").await;
    assert_eq!(rotated["detail"]["connection"], "nodeb");
    assert!(
        !rotated.to_string().contains(token.trim()),
        "the token is never audited"
    );
    await_entry(hub, "kind=token_rotated", |e| e["host"] == "nodeb").await;
    bed.wait_up("nodeb", true, Duration::from_secs(30))
        .await
        .unwrap();
}
