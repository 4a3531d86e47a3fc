//! The hub half of notifications, in network namespaces with real binaries: a question on a
//! remote node reaches the person exactly once, from the hub, naming the remote host; the
//! node stays silent while the hub is attached; with the hub killed the node notifies by
//! itself, and the hub's return brings no duplicate; a node that goes away and comes back is
//! reported by the hub. One webhook receiver inside the hub's namespace stands in for the
//! person's phone: the hub posts to `/hub`, the node (over its veth) to `/node`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::fed::FedBed;
use tuic_tests::receiver::{Hit, Receiver};
use tuic_tests::{NodeProc, ipc};

fn body(h: &Hit) -> Value {
    serde_json::from_slice(&h.body).unwrap_or(Value::Null)
}

/// Merges `notifications` settings into a process's config over its IPC socket.
async fn set_notifications(socket: &std::path::Path, n: Value) {
    let base = ipc(socket, "GET", "/config", None).await.unwrap().json();
    let mut config = base.clone();
    config["notifications"] = n;
    let r = ipc(
        socket,
        "PUT",
        "/config",
        Some(json!({"base": base, "config": config})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// Waits until the node says a hub is (or is not) attached to it.
async fn until_attached(socket: &std::path::Path, want: bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = ipc(socket, "GET", "/notifications", None)
            .await
            .unwrap()
            .json();
        if v["hub_attached"] == json!(want) {
            return;
        }
        assert!(Instant::now() < deadline, "hub_attached never {want}: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A session on the node that asks `question` and then waits.
fn asking(question: &str) -> Value {
    json!({"shell": "sh", "args": ["-c", format!("printf '{question} '; read a; sleep 120")]})
}

/// Hits about `text` (a notification, not a clear).
fn shows<'a>(hits: &'a [Hit], text: &str) -> Vec<&'a Hit> {
    hits.iter()
        .filter(|h| {
            let b = body(h);
            b["event"] == "notification" && b["notification"]["text"] == text
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_notifies_once_for_its_node_which_takes_over_while_the_hub_is_gone() {
    let mut bed = FedBed::start(1).await.unwrap();
    let mut rx = Receiver::start_on(tuic_tests::netns::listen_in(bed.net.hub()).unwrap());
    let port = rx.addr.port();
    let node_sock = bed.nodes[0].proc().socket.clone();
    set_notifications(
        &node_sock,
        json!({"coalesce_ms": 0, "clear_grace_ms": 300,
               "webhook": {"url": format!("http://{}:{port}/node", bed.net.hub_addr(0))}}),
    )
    .await;
    set_notifications(
        &bed.hub.socket,
        json!({"coalesce_ms": 0, "clear_grace_ms": 300,
               "webhook": {"url": format!("http://127.0.0.1:{port}/hub")}}),
    )
    .await;
    until_attached(&node_sock, true).await;

    // A question on the remote node: one notification, from the hub, naming the host.
    const Q1: &str = "Overwrite notes.txt? (y/n)";
    let s1 = bed.create_on_node(0, asking(Q1)).await.unwrap();
    let hit = rx.next("/hub", Duration::from_secs(20)).await;
    let n = body(&hit)["notification"].clone();
    assert_eq!(n["text"], Q1, "{n}");
    assert_eq!(n["host"], "nodeb", "{n}");
    assert_eq!(n["session_id"], format!("nodeb/{s1}"), "{n}");
    assert_eq!(n["kind"], "question");
    let rest = rx.drain(Duration::from_secs(2)).await;
    assert!(
        rest.iter().all(|h| !h.path.starts_with("/node")),
        "the node stays silent while the hub is attached: {rest:?}"
    );
    assert!(shows(&rest, Q1).is_empty(), "exactly one: {rest:?}");
    let on_node = ipc(&node_sock, "GET", "/notifications", None)
        .await
        .unwrap()
        .json();
    let rec = on_node["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["text"] == Q1)
        .cloned()
        .unwrap();
    assert_eq!(
        rec["deliveries"],
        json!({"hub": {"state": "relayed", "attempts": 0}})
    );

    // The hub is killed: the node notifies by itself (documented fallback).
    let _ = bed.hub.child.kill();
    let _ = bed.hub.child.wait();
    until_attached(&node_sock, false).await;
    const Q2: &str = "Delete the cache? (y/n)";
    bed.create_on_node(0, asking(Q2)).await.unwrap();
    let hit = rx.next("/node", Duration::from_secs(20)).await;
    assert_eq!(body(&hit)["notification"]["text"], Q2);

    // The hub returns: nothing it missed is sent again, by either side.
    let hub_dir = bed.hub_dir.path().to_str().unwrap().to_owned();
    bed.hub = NodeProc::start_in(
        Some(bed.net.hub()),
        "tuic-hub",
        &["--config-dir", &hub_dir],
        &[],
    )
    .unwrap();
    bed.wait_up("nodeb", true, Duration::from_secs(30))
        .await
        .unwrap();
    until_attached(&node_sock, true).await;
    let rest = rx.drain(Duration::from_secs(3)).await;
    assert!(
        shows(&rest, Q2).is_empty(),
        "no duplicate after the hub's return: {rest:?}"
    );
    assert!(shows(&rest, Q1).is_empty(), "{rest:?}");

    // And the next question is the hub's again, once.
    const Q3: &str = "Rebuild the index? (y/n)";
    bed.create_on_node(0, asking(Q3)).await.unwrap();
    let hit = rx.next("/hub", Duration::from_secs(20)).await;
    let n = body(&hit)["notification"].clone();
    assert_eq!(
        (n["text"].clone(), n["host"].clone()),
        (json!(Q3), json!("nodeb"))
    );
    let rest = rx.drain(Duration::from_secs(2)).await;
    assert!(shows(&rest, Q3).is_empty(), "exactly one: {rest:?}");
    assert!(
        rest.iter().all(|h| !h.path.starts_with("/node")),
        "{rest:?}"
    );

    // A host that goes offline and comes back: the hub says so.
    bed.nodes[0].kill9();
    let deadline = Instant::now() + Duration::from_secs(30);
    let off = loop {
        let h = rx
            .next("/hub", deadline.saturating_duration_since(Instant::now()))
            .await;
        let b = body(&h);
        if b["event"] == "notification" && b["notification"]["kind"] == "host" {
            break b;
        }
    };
    assert_eq!(off["notification"]["text"], "nodeb went offline");
    assert_eq!(off["notification"]["host"], "nodeb");
    bed.nodes[0].restart().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut cleared, mut back) = (false, false);
    while !(cleared && back) {
        let h = rx
            .next("/hub", deadline.saturating_duration_since(Instant::now()))
            .await;
        let b = body(&h);
        if b["notification"]["kind"] != "host" {
            continue;
        }
        match b["event"].as_str() {
            Some("cleared") => cleared |= b["notification"]["text"] == "nodeb went offline",
            Some("notification") => {
                assert_eq!(b["notification"]["text"], "nodeb is back online");
                back = true;
            }
            _ => {}
        }
    }
}
