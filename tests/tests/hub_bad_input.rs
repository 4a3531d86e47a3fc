//! Bad input at the hub's links, on loopback: a node that flaps (its links come up and end at
//! once, as fast as the hub lets it) is held back with a growing pause and does not take the
//! dials of the others; a node that claims another's connection (a different process at its
//! address) is refused by the pinned certificate, and the refusal is logged.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tuic_tests::bed::{create_shell, hub_connected_to, remote_proc, start_remote};
use tuic_tests::fed::connections;
use tuic_tests::{NodeProc, ipc, run_with_stdin};

/// A fake node that flaps: every request is answered and its connection closed, the event
/// stream at once (the hub's session link comes up, then ends). Records when each event
/// stream was asked for.
async fn flapper() -> (String, Arc<Mutex<Vec<Instant>>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let dials = Arc::new(Mutex::new(Vec::new()));
    let d = dials.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let d = d.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
                let (status, ctype, body) = if path.starts_with("/events") {
                    // The session mirror's stream (the host's liveness); the progress
                    // relay's is the other one.
                    if path.contains("session-created") {
                        d.lock().unwrap().push(Instant::now());
                    }
                    ("200 OK", "text/event-stream", String::new())
                } else if path == "/sessions" {
                    ("200 OK", "application/json", "[]".to_owned())
                } else if path == "/health" {
                    ("200 OK", "application/json", "{}".to_owned())
                } else {
                    ("404 Not Found", "text/plain", "no".to_owned())
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    (url, dials)
}

fn hub_connect(hub_dir: &std::path::Path, id: &str, url: &str, token: &str) {
    let (code, _, err) = run_with_stdin(
        "tuic-hub",
        &[
            "connect",
            "--config-dir",
            hub_dir.to_str().unwrap(),
            "--id",
            id,
            "--url",
            url,
            "--token-stdin",
        ],
        token,
    )
    .unwrap();
    assert_eq!(code, 0, "{err}");
}

/// Polls `GET /hub/connections` (bounded) until connection `id`'s row satisfies `pred`.
async fn wait_row(
    hub: &NodeProc,
    id: &str,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let rows = connections(hub).await.unwrap();
        if let Some(r) = rows.iter().find(|r| r["id"] == id)
            && pred(r)
        {
            return r.clone();
        }
        assert!(Instant::now() < deadline, "{id}: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn hub_lists(hub: &NodeProc, address: &str) -> bool {
    let rows = ipc(&hub.socket, "GET", "/sessions", None)
        .await
        .unwrap()
        .json();
    rows.as_array()
        .unwrap()
        .iter()
        .any(|r| r["address"] == json!(address))
}

#[tokio::test]
async fn a_flapping_node_is_held_back_and_the_others_still_come_back_at_once() {
    let (node_dir, mut node) = remote_proc("tuic-node", json!({"secret_store": "file"}), "0", &[]);
    let port = node.tcp.unwrap().port().to_string();
    let (hub_dir, hub) = hub_connected_to(node_dir.path(), &node, "nodeb");
    wait_row(&hub, "nodeb", Duration::from_secs(20), |r| r["up"] == true).await;

    let (url, dials) = flapper().await;
    hub_connect(hub_dir.path(), "flappy", &url, "not-a-real-token");

    // Flaps forgiven first (a restart may end a link early), then a hold doubling from 2 s:
    // the fifth flap comes at least 2 + 4 s after the third.
    let row = wait_row(&hub, "flappy", Duration::from_secs(45), |r| {
        r["flaps"].as_u64().is_some_and(|f| f >= 5)
    })
    .await;
    let at: Vec<Instant> = dials.lock().unwrap().clone();
    assert!(at.len() >= 5, "{row}");
    let gaps: Vec<f64> = at.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
    // Without damping a flapping host is dialled every probe interval (1 s), whatever it
    // does; held back, the gaps grow: 2 s after the third flap, 4 s after the fourth.
    assert!(gaps[2] >= 1.9, "gaps {gaps:?}");
    assert!(gaps[3] >= 3.9, "gaps {gaps:?}");
    let span = (at[at.len() - 1] - at[0]).as_secs_f64();
    assert!(
        (at.len() as f64) <= span / 1.5 + 2.0,
        "{} dials in {span:.1} s: {gaps:?}",
        at.len()
    );
    assert!(
        hub.log_text()
            .contains("host flapping: its next dial is held back"),
        "the hold is logged"
    );

    // Meanwhile a real node that restarts is dialled at once: its sessions are back on the
    // hub within 2 s of its restart.
    let sid = create_shell(&node).await;
    let address = format!("nodeb/{sid}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !hub_lists(&hub, &address).await {
        assert!(Instant::now() < deadline, "{address} never listed");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    node.child.kill().unwrap();
    node.child.wait().unwrap();
    wait_row(&hub, "nodeb", Duration::from_secs(20), |r| r["up"] == false).await;
    node = start_remote("tuic-node", node_dir.path().to_str().unwrap(), &port, &[]);
    let back = Instant::now();
    let sid = create_shell(&node).await;
    let address = format!("nodeb/{sid}");
    while !hub_lists(&hub, &address).await {
        assert!(
            back.elapsed() < Duration::from_secs(2),
            "nodeb's sessions not back 2 s after its restart, the flapper dialled {} times",
            dials.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let flappy = wait_row(&hub, "flappy", Duration::from_secs(1), |_| true).await;
    assert!(flappy["flaps"].as_u64().unwrap() >= 5, "{flappy}");
    drop(node);
}

#[tokio::test]
async fn a_node_claiming_anothers_connection_is_refused_by_the_pin_and_logged() {
    let (node_dir, mut node) = remote_proc("tuic-node", json!({"secret_store": "file"}), "0", &[]);
    let port = node.tcp.unwrap().port().to_string();
    let (_hub_dir, hub) = hub_connected_to(node_dir.path(), &node, "nodeb");
    let row = wait_row(&hub, "nodeb", Duration::from_secs(20), |r| {
        r["peer_link_up"] == true && r["transport"] == "quic"
    })
    .await;
    let pinned = row["quic_fingerprint"].as_str().unwrap().to_owned();
    let sid = create_shell(&node).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !hub_lists(&hub, &format!("nodeb/{sid}")).await {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // Another node (its own certificate and token) takes nodeb's address.
    node.child.kill().unwrap();
    node.child.wait().unwrap();
    let (imp_dir, impostor) = remote_proc("tuic-node", json!({"secret_store": "file"}), &port, &[]);
    let imp_sid = create_shell(&impostor).await;
    let row = wait_row(&hub, "nodeb", Duration::from_secs(45), |r| {
        r["peer_last_error"]
            .as_str()
            .is_some_and(|e| e.contains("certificate changed"))
    })
    .await;
    let e = row["peer_last_error"].as_str().unwrap();
    assert!(e.contains(&format!("pinned {pinned}")), "{e}");
    assert_eq!(row["peer_link_up"], false, "{row}");
    assert_eq!(row["quic_fingerprint"], pinned.as_str(), "the pin stays");
    let log = hub.log_text();
    assert!(
        log.contains("QUIC peer link refused") && log.contains(&pinned),
        "the refusal is logged with the pinned fingerprint"
    );
    // Its sessions never pass for nodeb's (nodeb's token does not open the impostor's list).
    assert!(!hub_lists(&hub, &format!("nodeb/{imp_sid}")).await);
    assert_eq!(row["up"], false, "{row}");
    drop((impostor, imp_dir));

    // The real node back at its address: the pin matches again, both carriers come up.
    let node = start_remote("tuic-node", node_dir.path().to_str().unwrap(), &port, &[]);
    wait_row(&hub, "nodeb", Duration::from_secs(30), |r| {
        r["up"] == true && r["peer_link_up"] == true
    })
    .await;
    drop(node);
}
