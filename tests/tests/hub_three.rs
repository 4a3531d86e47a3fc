//! Three machines (hub + two nodes, each in its own network namespace) with the real binaries:
//! the hub lists every machine's sessions, routes writes and reads to their owner, streams a
//! remote session byte-exact, answers 503 naming a killed node within a second and recovers
//! the mirror by itself after the node restarts.

use std::time::{Duration, Instant};

use futures::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tuic_tests::fed::FedBed;
use tuic_tests::ipc;
use tuic_tests::term::{drain_ws, read_until};

const T: Duration = Duration::from_secs(60);

fn enc(address: &str) -> String {
    address.replace('/', "%2F")
}

async fn hub_ws(bed: &FedBed, address: &str, query: &str) -> tuic_tests::term::Ws {
    let stream = tokio::net::UnixStream::connect(&bed.hub.socket)
        .await
        .unwrap();
    let url = format!("ws://localhost/sessions/{}/stream{query}", enc(address));
    tokio_tungstenite::client_async(url, stream)
        .await
        .unwrap()
        .0
}

#[tokio::test]
async fn hub_lists_routes_and_streams_the_sessions_of_three_machines() {
    let bed = FedBed::start(2).await.unwrap();
    let sh = json!({"rows": 24, "cols": 80, "shell": "/bin/sh"});
    let b = bed.create_on_node(0, sh.clone()).await.unwrap();
    let c = bed.create_on_node(1, sh.clone()).await.unwrap();
    let local = ipc(&bed.hub.socket, "POST", "/sessions", Some(sh))
        .await
        .unwrap()
        .json()["session_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // One list, three machines.
    let rb = bed.wait_listed(&format!("nodeb/{b}"), T).await.unwrap();
    let rc = bed.wait_listed(&format!("nodec/{c}"), T).await.unwrap();
    assert_eq!(
        (rb["is_remote"].clone(), rb["connection_id"].clone()),
        (json!(true), json!("nodeb"))
    );
    assert_eq!(
        (rc["is_remote"].clone(), rc["connection_id"].clone()),
        (json!(true), json!("nodec"))
    );
    let rows = bed.hub_sessions().await.unwrap();
    let own: Vec<&Value> = rows
        .iter()
        .filter(|r| r["session_id"] == json!(local) && r["is_remote"] != json!(true))
        .collect();
    assert_eq!(own.len(), 1, "{rows:?}");

    // Write to node C's session through the hub and read its output back through the hub.
    let addr_c = format!("nodec/{c}");
    let w = ipc(
        &bed.hub.socket,
        "POST",
        &format!("/sessions/{}/write", enc(&addr_c)),
        Some(json!({"data": "echo three-$((40+2))\n"})),
    )
    .await
    .unwrap();
    assert_eq!(w.status, 200, "{}", String::from_utf8_lossy(&w.body));
    let deadline = Instant::now() + T;
    loop {
        let out = ipc(
            &bed.hub.socket,
            "GET",
            &format!("/sessions/{}/output?format=text", enc(&addr_c)),
            None,
        )
        .await
        .unwrap();
        assert_eq!(out.status, 200);
        if out.json()["data"]
            .as_str()
            .unwrap_or("")
            .contains("three-42")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "output never came back through the hub"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // A remote stream through the hub delivers every byte, including the tail written just
    // before exit: 64 MiB, as the acceptance asks.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("payload");
    let payload: Vec<u8> = (0..64u32 << 20)
        .map(|i| {
            if i % 61 == 60 {
                b'\n'
            } else {
                b'a' + (i % 26) as u8
            }
        })
        .collect();
    std::fs::write(&file, &payload).unwrap();
    let script = format!(
        "stty raw -echo; printf READY; read go; cat {}",
        file.display()
    );
    let s = bed
        .create_on_node(
            0,
            json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "args": ["-c", script], "cwd": "/tmp"}),
        )
        .await
        .unwrap();
    let addr_s = format!("nodeb/{s}");
    bed.wait_listed(&addr_s, T).await.unwrap();
    let mut ws = hub_ws(&bed, &addr_s, "?binary=1&from_byte=0").await;
    assert_eq!(read_until(&mut ws, b"READY", T).await.unwrap(), b"READY");
    ws.send(Message::Text("go\n".into())).await.unwrap();
    let got = drain_ws(&mut ws, T).await.unwrap();
    assert!(got.exit.is_some(), "no exit frame: {:?}", got.other);
    assert!(!got.output_after_exit);
    assert_eq!(got.bytes.len(), payload.len());
    assert!(
        got.bytes == payload,
        "stream through the hub differs from the file"
    );
}

#[tokio::test]
async fn killed_node_answers_503_within_a_second_and_the_mirror_recovers() {
    let mut bed = FedBed::start(2).await.unwrap();
    let sh = json!({"rows": 24, "cols": 80, "shell": "/bin/sh"});
    let b = bed.create_on_node(0, sh.clone()).await.unwrap();
    let c = bed.create_on_node(1, sh).await.unwrap();
    let addr_b = format!("nodeb/{b}");
    bed.wait_listed(&addr_b, T).await.unwrap();
    bed.wait_listed(&format!("nodec/{c}"), T).await.unwrap();

    bed.nodes[0].kill9();
    let killed = Instant::now();
    // From the kill: routes to the dead owner answer 503 naming the connection within 1 s.
    let path = format!("/sessions/{}/output", enc(&addr_b));
    let took = loop {
        let r = ipc(&bed.hub.socket, "GET", &path, None).await.unwrap();
        if r.status == 503 {
            assert!(
                r.json()["error"].as_str().unwrap().contains("nodeb"),
                "{:?}",
                r.json()
            );
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "still {} after 5 s",
            r.status
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(took <= Duration::from_secs(1), "503 took {took:?}");
    // The other machine is untouched.
    let r = ipc(
        &bed.hub.socket,
        "GET",
        &format!("/sessions/{}/output", enc(&format!("nodec/{c}"))),
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);

    // Restart: the mirror comes back by itself within the backoff bound (30 s + jitter).
    bed.nodes[0].restart().unwrap();
    let restarted = Instant::now();
    bed.wait_up("nodeb", true, Duration::from_secs(40))
        .await
        .unwrap();
    let b2 = bed
        .create_on_node(0, json!({"rows": 24, "cols": 80, "shell": "/bin/sh"}))
        .await
        .unwrap();
    bed.wait_listed(&format!("nodeb/{b2}"), Duration::from_secs(10))
        .await
        .unwrap();
    assert!(restarted.elapsed() < Duration::from_secs(40));
}
