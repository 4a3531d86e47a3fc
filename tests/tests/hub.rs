//! Multi-host tests: a hub and nodes in their own network namespaces (veth links), real
//! binaries, real TCP between them.

use std::time::{Duration, Instant};

use serde_json::json;
use tuic_tests::fed::{FedBed, FedNode, connections};
use tuic_tests::netns::Net;
use tuic_tests::{NodeProc, config_dir, ipc, run_with_stdin};

fn s(d: &tempfile::TempDir) -> String {
    d.path().to_str().unwrap().to_owned()
}

#[tokio::test]
async fn hub_connects_detects_partition_and_reconnects() {
    let bed = FedBed::start(1).await.unwrap();
    let (net, token, hd, hub) = (&bed.net, &bed.nodes[0].token, &bed.hub_dir, &bed.hub);
    // The token never lands in config.json.
    assert!(
        !std::fs::read_to_string(hd.path().join("config.json"))
            .unwrap()
            .contains(token.as_str())
    );

    // A silent partition: no reset, so liveness probes must notice (3 × 5 s).
    net.set_link(0, false).unwrap();
    bed.wait_up("nodeb", false, Duration::from_secs(30))
        .await
        .unwrap();
    let c = connections(hub).await.unwrap();
    assert!(
        c[0]["last_error"]
            .as_str()
            .is_some_and(|e| !e.contains(token.as_str())),
        "{c:?}"
    );
    net.set_link(0, true).unwrap();
    bed.wait_up("nodeb", true, Duration::from_secs(45))
        .await
        .unwrap();

    let (code, _, _) = run_with_stdin(
        "tuic-hub",
        &["disconnect", "--config-dir", &s(hd), "--id", "nodeb"],
        "",
    )
    .unwrap();
    assert_eq!(code, 0);
    assert!(connections(hub).await.unwrap().is_empty());
}

#[tokio::test]
async fn hub_refuses_a_wrong_token_and_says_why() {
    let net = Net::star(1).unwrap();
    let node = FedNode::start("nodeb", net.node(0), net.node_addr(0), json!({})).unwrap();
    let hd = config_dir(json!({}));
    let hub =
        NodeProc::start_in(Some(net.hub()), "tuic-hub", &["--config-dir", &s(&hd)], &[]).unwrap();
    let url = node.url.clone();
    let (code, _, _) = run_with_stdin(
        "tuic-hub",
        &[
            "connect",
            "--config-dir",
            &s(&hd),
            "--id",
            "nodeb",
            "--url",
            &url,
            "--token-stdin",
        ],
        "wrong-token",
    )
    .unwrap();
    assert_eq!(code, 0);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let c = connections(&hub).await.unwrap();
        if let Some(e) = c.first().and_then(|c| c["last_error"].as_str()) {
            assert!(e.contains("401"), "{e}");
            assert_eq!(c[0]["up"], json!(false));
            break;
        }
        assert!(Instant::now() < deadline, "no error reported: {c:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn hub_lists_remote_sessions_and_routes_to_their_owner() {
    let bed = FedBed::start(1).await.unwrap();
    let (net, node, hub) = (&bed.net, bed.nodes[0].proc(), &bed.hub);

    // A session on node B (created locally there) shows up on the hub as a remote row.
    let created = ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"rows": 24, "cols": 80, "shell": "/bin/sh"})),
    )
    .await
    .unwrap();
    assert_eq!(created.status, 200, "{:?}", created.body);
    let sid = created.json()["session_id"].as_str().unwrap().to_owned();
    let address = format!("nodeb/{sid}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let row = loop {
        let rows = ipc(&hub.socket, "GET", "/sessions", None)
            .await
            .unwrap()
            .json();
        if let Some(r) = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["address"] == json!(address))
        {
            break r.clone();
        }
        assert!(
            Instant::now() < deadline,
            "remote row never appeared: {rows}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(row["is_remote"], json!(true));
    assert_eq!(row["connection_id"], json!("nodeb"));

    // Write through the hub, read the output back through the hub.
    let enc = format!("nodeb%2F{sid}");
    let w = ipc(
        &hub.socket,
        "POST",
        &format!("/sessions/{enc}/write"),
        Some(json!({"data": "echo hub-routed-$((6*7))\n"})),
    )
    .await
    .unwrap();
    assert_eq!(w.status, 200, "{:?}", String::from_utf8_lossy(&w.body));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = ipc(
            &hub.socket,
            "GET",
            &format!("/sessions/{enc}/output?format=raw"),
            None,
        )
        .await
        .unwrap();
        assert_eq!(out.status, 200);
        if out.json()["data"]
            .as_str()
            .unwrap_or_default()
            .contains("hub-routed-42")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "output never arrived through the hub"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The live stream, through the hub's WebSocket proxy, both directions.
    let stream = tokio::net::UnixStream::connect(&hub.socket).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(
        format!("ws://localhost/sessions/{enc}/stream?binary=1"),
        stream,
    )
    .await
    .unwrap();
    use futures::SinkExt;
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        "echo via-ws-$((20+3))\n".into(),
    ))
    .await
    .unwrap();
    tuic_tests::term::read_until(&mut ws, b"via-ws-23", Duration::from_secs(10))
        .await
        .unwrap();
    drop(ws);
    // Unknown connection → 404; the hub's own sessions are `local/<id>`.
    let r = ipc(&hub.socket, "GET", "/sessions/nope%2F1/output", None)
        .await
        .unwrap();
    assert_eq!(r.status, 404);

    // A partition makes the owner's routes answer 503 naming the connection.
    net.set_link(0, false).unwrap();
    bed.wait_up("nodeb", false, Duration::from_secs(30))
        .await
        .unwrap();
    let r = ipc(&hub.socket, "GET", &format!("/sessions/{enc}/output"), None)
        .await
        .unwrap();
    assert_eq!(r.status, 503);
    assert!(r.json()["error"].as_str().unwrap().contains("nodeb"));
    let rows = ipc(&hub.socket, "GET", "/sessions", None)
        .await
        .unwrap()
        .json();
    // The down node's sessions stay listed, each marked host offline (issue 20: an offline
    // host's sessions stay in the list, dimmed; before, they left the list).
    let nodeb: Vec<&serde_json::Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["connection_id"] == json!("nodeb"))
        .collect();
    assert!(!nodeb.is_empty(), "{rows}");
    assert!(
        nodeb.iter().all(|r| r["state"] == json!("host_offline")),
        "{rows}"
    );
}

/// Every file under `root` with its bytes, for byte-identical comparisons.
fn tree(root: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap().flatten() {
            let path = e.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if e.file_type().unwrap().is_dir() {
                out.push((rel + "/", Vec::new()));
                stack.push(path);
            } else {
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn tuic_cp_copies_a_tree_to_a_node_through_the_hub() {
    let bed = FedBed::start(1).await.unwrap();
    let (node, hub) = (bed.nodes[0].proc(), &bed.hub);
    // A registered repository on node B with a destination folder.
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("inbox")).unwrap();
    assert_eq!(
        ipc(&node.socket, "POST", "/repos", Some(json!({"path": root})))
            .await
            .unwrap()
            .status,
        200
    );
    // The source tree on the hub's machine: many small files and two larger ones (CI-sized).
    let src = tempfile::tempdir().unwrap();
    let proj = src.path().join("proj");
    for i in 0..300 {
        let d = proj.join(format!("d{}", i % 9));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("f{i}")), vec![(i % 250) as u8; 4096]).unwrap();
    }
    for i in 0..2u8 {
        std::fs::write(
            proj.join(format!("big{i}")),
            (0..3 << 20)
                .map(|j: u32| (j % 251) as u8 ^ i)
                .collect::<Vec<_>>(),
        )
        .unwrap();
    }
    let dest = format!("nodeb:{}/inbox", root.display());
    let run = || {
        std::process::Command::new(tuic_tests::bin("tuic"))
            .args(["cp", proj.to_str().unwrap(), &dest])
            .env("TUIC_SOCKET", &hub.socket)
            .output()
            .unwrap()
    };
    let out = run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("copied") && stdout.contains("nodeb:"),
        "{stdout}"
    );
    assert_eq!(tree(&root.join("inbox/proj")), tree(&proj));
    // A second copy of the same name is refused and changes nothing.
    let before = tree(&root);
    let out = run();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("409"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(tree(&root), before);
    assert!(!root.join(".tuic-staging").exists());
}

#[tokio::test]
async fn hub_upload_route_is_refused_over_tcp() {
    let hd = config_dir(json!({}));
    run_with_stdin(
        "tuic-hub",
        &["set-password", "--config-dir", &s(&hd)],
        "hub pw",
    )
    .unwrap();
    let hub = NodeProc::start(
        "tuic-hub",
        &[
            "--config-dir",
            &s(&hd),
            "--remote-access",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
        ],
        &[],
    )
    .unwrap();
    let r = reqwest::Client::new()
        .post(format!(
            "http://{}/hub/upload?conn=nodeb&path=/x",
            hub.tcp.unwrap()
        ))
        .basic_auth("admin", Some("hub pw"))
        .body("tar")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

/// Issue 46, item 3: one liveness per host. A node killed and left dead is down on both
/// carriers (session mirror and mail link) within 3 s; restarted after a 30 s outage, its
/// sessions are back on the hub within 2 s and the mail link with them.
#[tokio::test]
async fn a_dead_node_is_down_on_both_carriers_at_once_and_back_within_two_seconds_of_its_restart() {
    let mut bed = FedBed::start(1).await.unwrap();
    let row = |c: &[serde_json::Value]| c.iter().find(|c| c["id"] == "nodeb").cloned().unwrap();
    // Both carriers up, and a session that outlives its node (held).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = row(&bed.connections().await.unwrap());
        if c["up"] == json!(true) && c["peer_link_up"] == json!(true) {
            break;
        }
        assert!(Instant::now() < deadline, "never up on both carriers: {c}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let sid = bed
        .create_on_node(
            0,
            json!({"shell": "/bin/sh", "args": ["-c", "exec sleep 600"]}),
        )
        .await
        .unwrap();
    let address = format!("nodeb/{sid}");
    bed.wait_listed(&address, Duration::from_secs(20))
        .await
        .unwrap();

    bed.nodes[0].kill9();
    let killed = Instant::now();
    loop {
        let c = row(&bed.connections().await.unwrap());
        if c["up"] == json!(false) && c["peer_link_up"] == json!(false) {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(3),
            "a dead host still reads up after 3 s: {c}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // The outage: the host stays dead for 30 s (the scenario, not a wait for an event).
    tokio::time::sleep(Duration::from_secs(30)).await;
    let c = row(&bed.connections().await.unwrap());
    assert_eq!(
        (&c["up"], &c["peer_link_up"]),
        (&json!(false), &json!(false)),
        "{c}"
    );

    bed.nodes[0].restart().unwrap();
    let restarted = Instant::now();
    loop {
        let c = row(&bed.connections().await.unwrap());
        let rows = bed.hub_sessions().await.unwrap();
        let listed = rows
            .iter()
            .any(|r| r["address"] == json!(address) && r["state"] != json!("host_offline"));
        if c["up"] == json!(true) && listed {
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(2),
            "the node's sessions were not back 2 s after its restart: {c}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // The mail link follows the session link at once rather than after its own backoff.
    loop {
        let c = row(&bed.connections().await.unwrap());
        if c["peer_link_up"] == json!(true) {
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(4),
            "the mail link was not back with the sessions: {c}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
